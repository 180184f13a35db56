"""The evaluate and evalset stages' parameters."""

from __future__ import annotations

from typing import ClassVar, Literal

from tokenmill.section import Count, Positive, Section


class Evaluate(Section):
    section: ClassVar[str] = "evaluate"
    limit: Positive | None = 100  # items per benchmark (null: all)
    heldout_limit: Positive | None = 64  # held-out documents per mixture bucket
    batch_size: Positive = 16
    device: Literal["cpu", "cuda"] = "cpu"
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    inloop_items: Count = 24  # items per benchmark every training run scores at each evaluation point
