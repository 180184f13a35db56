"""The dedup stage's parameters: exact hashes, MinHash near duplicates, repeated lines."""

from __future__ import annotations

from typing import Annotated, ClassVar

from pydantic import Field, model_validator

from tokenmill.section import Count, Positive, Section


class Exact(Section):
    enabled: bool = True
    strip_punctuation: bool = False


class Near(Section):
    enabled: bool = True
    ngram: Positive = 5
    num_perm: Positive = 128
    seed: int = 1
    threshold: Annotated[float, Field(gt=0, le=1)] = 0.8  # Jaccard similarity of two documents' n-gram sets
    # LSH bands x rows minimise fp_weight * (false positive area) + fn_weight * (false negative area).
    # Verification removes false positives afterwards; nothing recovers a false negative.
    false_positive_weight: Annotated[float, Field(ge=0)] = 0.1
    false_negative_weight: Annotated[float, Field(ge=0)] = 0.9
    bands: Positive | None = None  # set both bands and rows to override the optimisation
    rows: Positive | None = None
    verify: bool = True
    bucket_window: Positive = 100

    @model_validator(mode="after")
    def _lsh_shape(self) -> "Near":
        if (self.bands is None) != (self.rows is None):
            raise ValueError("bands and rows: set both (to override the optimised LSH shape) or neither")
        if self.bands is not None and self.bands * self.rows > self.num_perm:
            raise ValueError(f"bands x rows: expected at most num_perm ({self.num_perm}), got "
                             f"{self.bands} x {self.rows}")
        return self


class Lines(Section):
    enabled: bool = True
    min_chars: Count = 20
    max_docs: Positive = 10
    skip_buckets: list[str] = ["code"]


class Dedup(Section):
    section: ClassVar[str] = "dedup"
    exact: Exact = Exact()
    near: Near = Near()
    lines: Lines = Lines()
