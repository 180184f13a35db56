"""The export stage's parameters."""

from __future__ import annotations

from typing import ClassVar

from tokenmill.section import Count, Section


class Export(Section):
    section: ClassVar[str] = "export"
    step: Count | None = None  # null: the final weights; N: the DCP checkpoint of step N
