"""The ingest stage's parameters: a declared source (sources.<name>) and the extractor."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, field_validator

from tokenmill.section import Positive, Section


FORMATS = ("warc", "wet", "arc", "jsonl", "parquet", "text")  # the readers tokenmill.ingest has


class Source(Section):
    format: str
    paths: list[str] | str
    bucket: str = Field(min_length=1)
    licence: str = Field(min_length=1)
    snapshot: str = ""
    root: str | None = None  # file names are recorded relative to this; default: the globs' common dir
    text_field: str = "text"
    url_field: str | None = "url"
    id_field: str | None = "id"
    date_field: str | None = None
    optional: bool = False  # a source whose globs may match nothing (a format the user may not have)

    @field_validator("format")
    @classmethod
    def _known_format(cls, v: str) -> str:
        if v not in FORMATS:
            raise ValueError(f"expected one of {', '.join(FORMATS)}, got {v!r}")
        return v

    @field_validator("paths")
    @classmethod
    def _some_paths(cls, v):
        if not v:
            raise ValueError("expected at least one glob")
        return v


class Ingest(Section):
    section: ClassVar[str] = "ingest"
    # cascade: resiliparse, then the article container, trafilatura only for near-empty pages; the best F1 of
    # the extractors at more than 4x trafilatura's speed, on its tuning pages and on 181 held-out articles
    # (0.944 at 3.2 CPU-ms a page; resiliparse 0.916 at 1.3, trafilatura 0.960 at 17.4: RESULTS.md, "HTML
    # extraction on held-out articles").
    extractor: Literal["resiliparse", "cascade", "trafilatura"] = "cascade"
    max_payload_bytes: Positive = 10_000_000  # larger records are dropped as `oversized` without being read
