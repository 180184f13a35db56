"""The mixture stage's parameters: a preset's name, its phases and weights, the epoch caps."""

from __future__ import annotations

from typing import Annotated, ClassVar

from pydantic import Field, field_validator, model_validator

from tokenmill.section import Section


class Phase(Section):
    fraction: Annotated[float, Field(gt=0, le=1)]  # of the token budget
    weights: dict[str, Annotated[float, Field(ge=0)]]  # bucket (or bucket/tier) -> weight, normalised per phase
    # Long context (docs/long_context.md): the phase's sequence length; None is train.seq_len. A step keeps its
    # tokens (train.seq_len x train.global_batch), so a longer sequence means fewer of them per step and the
    # step -> document map of the lineage is the same arithmetic in every phase.
    seq_len: Annotated[int, Field(gt=0)] | None = None
    # bucket -> the fewest tokens a document needs to be placed in this phase: a long phase that reads long
    # documents (a shorter one is passed over, as a tagged one is; its turn in the bucket's epoch is spent).
    min_doc_tokens: dict[str, Annotated[int, Field(gt=0)]] = {}

    @field_validator("weights")
    @classmethod
    def _some_weight(cls, v):
        if sum(v.values()) <= 0:
            raise ValueError(f"expected at least one positive weight, got {v}")
        return v

    @model_validator(mode="after")
    def _min_lengths_of_weighted_buckets(self) -> "Phase":
        unknown = sorted(set(self.min_doc_tokens) - set(self.weights))
        if unknown:
            raise ValueError(f"min_doc_tokens: expected buckets this phase weights ({', '.join(self.weights)}), "
                             f"got {unknown}")
        return self


class Mixture(Section):
    section: ClassVar[str] = "mixture"
    name: str  # a preset states its name and phases: they are what a mixture is
    seed: int = 1234
    heldout_fraction: Annotated[float, Field(ge=0, lt=1)] = 0.01
    # bucket -> the most epochs; `default` for the buckets not named (a given mapping is merged over it)
    max_epochs: dict[str, Annotated[float, Field(gt=0)]] = {"default": 4}

    @field_validator("max_epochs")
    @classmethod
    def _over_the_default_cap(cls, v):
        # keyed by bucket: a given mapping is merged over the default, so `{code: 2}` still caps every other bucket
        return {**cls.model_fields["max_epochs"].default, **v}
    phases: dict[str, Phase] = Field(min_length=1)
    # Phases that place no document the domains stage tagged as toxic (domains.toxicity.tag_above): e.g. [anneal],
    # so the last, high-quality tokens hold none while the bulk keeps them (they are tagged, not dropped).
    exclude_tagged_from: list[str] = []

    @model_validator(mode="after")
    def _excluded_phases_exist(self) -> "Mixture":
        unknown = [p for p in self.exclude_tagged_from if p not in self.phases]
        if unknown:
            raise ValueError(f"exclude_tagged_from: expected phases of this mixture ({', '.join(self.phases)}), "
                             f"got {unknown}")
        return self

    @model_validator(mode="after")
    def _fractions_sum_to_one(self) -> "Mixture":
        total = sum(p.fraction for p in self.phases.values())
        if abs(total - 1) > 1e-6:
            raise ValueError(f"phases: the fractions must sum to 1, got {total:g} "
                             f"({', '.join(f'{n} {p.fraction:g}' for n, p in self.phases.items())})")
        return self
