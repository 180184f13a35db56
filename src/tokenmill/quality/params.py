"""The quality stage's parameters: the classifier's examples and model, and the cut."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field

from tokenmill.section import Fraction, Positive, Section


class ReferenceDataset(Section):
    path: str | None = None       # a Hugging Face dataset (its Hub name) or a local folder in its layout
    name: str | None = None       # its configuration, where it has several
    split: str = "train"
    revision: str | None = None   # the dataset repository's commit: pin it, the reference is part of the recipe
    text_field: str = "text"


class Positives(Section):
    sources: list[str] = ["sample_reference"]
    paths: list[str] = []
    dataset: ReferenceDataset = ReferenceDataset()
    reference: str | None = "data/sample/reference/*.parquet"  # null: no fallback corpus
    max_examples: Positive = 20000


class Negatives(Section):
    buckets: list[str] = ["web"]
    max_examples: Positive = 20000


class FastTextModel(Section):
    dim: Positive = 64
    epoch: Positive = 25
    lr: Annotated[float, Field(gt=0)] = 0.5
    word_ngrams: Positive = 2
    hash_buckets: Positive = 200000
    min_count: Positive = 1
    seed: int = 1234
    folds: Annotated[int, Field(ge=2)] = 2  # scores are cross-fitted


class Keep(Section):
    mode: Literal["top_fraction", "threshold"] = "top_fraction"
    top_fraction: Annotated[float, Field(gt=0, le=1)] = 0.7
    threshold: Fraction = 0.5


class Quality(Section):
    section: ClassVar[str] = "quality"
    positives: Positives = Positives()
    negatives: Negatives = Negatives()
    cut_buckets: list[str] = ["web"]
    max_chars: Positive = 10000
    model: FastTextModel = FastTextModel()
    min_separation: Fraction = 0.2
    min_score_spread: Fraction = 0.02
    # auto: refuse when the reference was named, keep the crawl (with a warning) when it is the project's own
    on_degenerate: Literal["auto", "refuse", "skip_cut"] = "auto"
    keep: Keep = Keep()
