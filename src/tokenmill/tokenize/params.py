"""The tokenize stage's parameters: quality tiers and the planted canaries."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import field_validator

from tokenmill.canaries import Canaries
from tokenmill.section import Fraction, Section


class Tokenize(Section):
    section: ClassVar[str] = "tokenize"
    # bucket -> {tier: minimum quality quantile}; a given mapping replaces the default whole ({} or null: none)
    quality_tiers: dict[str, dict[str, Fraction]] | None = {"web": {"high": 0.5, "low": 0.0}}
    canaries: Canaries = Canaries()
    # What a mixture bucket's name is made of, in this order, joined by "/": source (the document's bucket: web,
    # code, ...), tier (its quality tier, where quality_tiers lists the bucket), topic (t00 ...), format (article,
    # list, ...) and toxicity (toxic / clean), the last three from the domains stage's decisions. [topic]: buckets
    # over topics alone (t00, t01, ...); [source, tier, format]: web/high/article, code/code, ...
    buckets: list[Literal["source", "tier", "topic", "format", "toxicity"]] = ["source", "tier"]

    @field_validator("buckets")
    @classmethod
    def _parts_once(cls, v):
        if not v or len(set(v)) != len(v):
            raise ValueError(f"expected each of source, tier, topic, format, toxicity at most once and at least one, "
                             f"got {v}")
        return v

    @field_validator("quality_tiers")
    @classmethod
    def _tiers_named(cls, v):
        for bucket, tiers in (v or {}).items():
            if not tiers:
                raise ValueError(f"{bucket}: expected at least one tier, got {tiers!r}")
        return v or {}  # {} or null: no tiers (a given mapping replaces the default whole)
