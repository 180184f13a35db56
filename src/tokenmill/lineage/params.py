"""The lineage stage's parameters, resolved once by stages/lineage.py. Their defaults are the `lineage:` of
conf/config.yaml (tests/test_config.py keeps the two equal). ground_truth is the embedded corpus's planted cases,
scored when the file is present; null scores none."""

from __future__ import annotations

from typing import ClassVar

from tokenmill.section import Section


class Lineage(Section):
    section: ClassVar[str] = "lineage"
    ground_truth: str | None = "data/sample/ground_truth.json"  # planted cases of the embedded corpus
