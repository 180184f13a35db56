"""The lineage stage's parameters."""

from __future__ import annotations

from typing import ClassVar

from tokenmill.section import Section


class Lineage(Section):
    section: ClassVar[str] = "lineage"
    ground_truth: str | None = "data/sample/ground_truth.json"  # planted cases of the embedded corpus
