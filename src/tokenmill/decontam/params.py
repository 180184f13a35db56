"""The decontaminate stage's parameters: the n-gram match and the benchmark files."""

from __future__ import annotations

import difflib
from typing import Annotated, ClassVar, Literal

from pydantic import Field, field_validator

from tokenmill.decontam.readers import READERS
from tokenmill.section import Count, Positive, Section


class BenchmarkFile(Section):
    name: str = Field(min_length=1)
    format: str
    path: str = Field(min_length=1)
    optional: bool = False

    @field_validator("format")
    @classmethod
    def _known_format(cls, v: str) -> str:
        if v not in tuple(READERS):
            near = difflib.get_close_matches(v, tuple(READERS), n=1)
            raise ValueError(f"expected one of {', '.join(tuple(READERS))}, got {v!r}"
                             + (f" (did you mean {near[0]!r}?)" if near else ""))
        return v


class Decontaminate(Section):
    section: ClassVar[str] = "decontaminate"
    ngram: Positive = 5
    min_item_words: Positive = 8
    threshold: Annotated[float, Field(gt=0, le=1)] = 0.8
    min_matches: Positive = 32
    template_items: Positive = 10
    slack: Count = 8
    action: Literal["drop", "flag"] = "drop"
    benchmarks: list[BenchmarkFile] = []

    @field_validator("benchmarks")
    @classmethod
    def _unique_names(cls, v: list[BenchmarkFile]) -> list[BenchmarkFile]:
        names = [b.name for b in v]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"benchmark names must be unique (items are named by them), repeated: {twice}")
        return v
