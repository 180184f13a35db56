"""The pii stage's parameters: which types are replaced, by what, and how phone numbers are validated."""

from __future__ import annotations

from typing import ClassVar, Literal

import phonenumbers
from pydantic import Field, field_validator

from tokenmill.pii.detectors import DEFAULT_REGIONS, TYPES
from tokenmill.section import Section


class Pii(Section):
    section: ClassVar[str] = "pii"
    enabled: dict[str, bool] = {}  # types left out are on
    tokens: dict[str, str] = {}  # types left out get <TYPE>
    phone_regions: list[str] = Field(default_factory=lambda: list(DEFAULT_REGIONS))
    # valid: the number is in a range its plan allocates (is_valid_number); possible: only its length fits the
    # plan (is_possible_number), which also accepts numbers with unassigned area codes (RESULTS.md, PII)
    phone_validation: Literal["valid", "possible"] = "valid"
    keep_private_ip: bool = False

    @field_validator("enabled", "tokens")
    @classmethod
    def _known_types(cls, v: dict) -> dict:
        bad = sorted(set(v) - set(TYPES))
        if bad:
            raise ValueError(f"unknown types {bad}; known: {', '.join(TYPES)}")
        return v

    @field_validator("phone_regions")
    @classmethod
    def _known_regions(cls, v: list[str]) -> list[str]:
        bad = [r for r in v if r.upper() not in phonenumbers.SUPPORTED_REGIONS]
        if bad:
            raise ValueError(f"unknown regions {bad} (ISO 3166 alpha-2 codes, e.g. US, GB, DE)")
        return v
