"""The tokenize stage's parameters: quality tiers and the planted canaries."""

from __future__ import annotations

from typing import Annotated, ClassVar

from pydantic import Field, field_validator

from tokenmill.section import Count, Fraction, Section


class Canaries(Section):
    """Secrets planted to measure memorisation (tokenmill.canaries): `sets` canaries per visit count."""
    sets: Count = 2  # 0: none planted
    # planned visits of each canary in the training stream; 0: a control, scored but never planted
    visits: list[Count] = [0, 1, 2, 4, 8, 16]
    digits: Annotated[int, Field(ge=4, le=32)] = 10  # of the secret: 10^digits secrets of the format
    candidates: Annotated[int, Field(ge=1)] = 999  # random secrets each is ranked among: exposure <= log2(N+1)
    seed: int = 0

    @field_validator("visits")
    @classmethod
    def _distinct(cls, v):
        if len(set(v)) != len(v):  # a canary is named by its set and visit count
            raise ValueError(f"expected distinct visit counts, got {v}")
        return v


class Tokenize(Section):
    section: ClassVar[str] = "tokenize"
    # bucket -> {tier: minimum quality quantile}; a given mapping replaces the default whole ({} or null: none)
    quality_tiers: dict[str, dict[str, Fraction]] | None = {"web": {"high": 0.5, "low": 0.0}}
    canaries: Canaries = Canaries()

    @field_validator("quality_tiers")
    @classmethod
    def _tiers_named(cls, v):
        for bucket, tiers in (v or {}).items():
            if not tiers:
                raise ValueError(f"{bucket}: expected at least one tier, got {tiers!r}")
        return v or {}  # {} or null: no tiers (a given mapping replaces the default whole)
