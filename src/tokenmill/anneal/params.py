"""The anneal stage's parameters: `anneals.<name>`, one annealing test of a source each (tokenmill.anneal)."""

from __future__ import annotations

from typing import Annotated, ClassVar

from pydantic import Field

from tokenmill.section import Positive, Section


class Anneal(Section):
    section: ClassVar[str] = "anneals"
    source: str  # a declared source (sources.<name>) with buckets of its own: its documents are what is tried
    # The source's part of the anneal's tokens; the decay phase's other buckets share the rest in their proportions.
    share: Annotated[float, Field(gt=0, lt=1)] = 0.2
    # Each arm's steps as a fraction of the full run's (at least the noise window: 11 steps with the default
    # logging). Two arms x seeds x this is the test's cost against the full run: 0.05 and one seed keep it at a
    # tenth.
    steps_fraction: Annotated[float, Field(gt=0, le=0.5)] = 0.05
    seeds: Positive = 1  # each arm again with the anneal's windows in another order (train.data_seed + k)
