"""How a stage runs its work (never what it writes): local processes or Ray, and DuckDB's memory."""

from __future__ import annotations

import re
from typing import ClassVar, Literal

from pydantic import field_validator

from tokenmill.section import Positive, Section


class Execution(Section):
    section: ClassVar[str] = "execution"
    backend: Literal["local", "ray"] = "local"
    workers: Positive = 2
    ray_address: str | None = None
    # DuckDB's memory limit for the global steps on one node (dedup's clustering, the lineage build), which
    # spill to disk beyond it: 10 M documents cluster in 46 s at 2.2 GB peak with 2GB (benchmarks/RESULTS.md,
    # "Deduplication's global step from 1 to 10 million documents").
    duckdb_memory_limit: str = "2GB"

    @field_validator("duckdb_memory_limit")
    @classmethod
    def _size(cls, v: str) -> str:
        if not re.fullmatch(r"\d+(\.\d+)?\s*(KB|MB|GB|TB|KiB|MiB|GiB|TiB)", v):
            raise ValueError(f"expected a size such as 512MB or 2GB, got {v!r}")
        return v
