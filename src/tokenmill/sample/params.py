"""The sample stage's parameters: the embedded crawl it builds."""

from __future__ import annotations

from typing import ClassVar

from pydantic import model_validator

from tokenmill.section import Count, Section


class Sample(Section):
    section: ClassVar[str] = "sample"
    enabled: bool = True
    n_docs: Count = 12000
    seed: int = 1234
    eval_items: Count = 200
    planted_eval_items: Count = 24
    planted_benchmark_items: Count = 22

    @model_validator(mode="after")
    def _planted_among_eval(self) -> "Sample":
        # Only the embedded crawl plants items; a real crawl's run (enabled: false) ignores the count.
        if self.enabled and self.planted_eval_items > self.eval_items:
            raise ValueError(f"planted_eval_items: expected at most sample.eval_items ({self.eval_items}), got "
                             f"{self.planted_eval_items}: planted items are some of the eval items")
        return self
