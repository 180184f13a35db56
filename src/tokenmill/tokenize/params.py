"""The tokenize stage's parameters: quality tiers and the planted canaries."""

from __future__ import annotations

from typing import ClassVar

from pydantic import field_validator

from tokenmill.canaries import Canaries
from tokenmill.section import Fraction, Section


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
