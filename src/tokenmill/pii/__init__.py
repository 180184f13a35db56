"""The pii stage: replace personal data in each document with a placeholder token, and count what it replaced.

A processor for tokenmill.docstage (the one per-document loop). Documents are never dropped here: a
document with personal data comes out `modify` / `redacted` with its new text and the same doc_id, every
other document `keep` / `no_pii`. Both carry the per-type counts as scores ("pii_email": 2, ...; zeros
included, one score per enabled type), so the lineage tables can say how much of the corpus was touched.

What counts as each type, and why, is in tokenmill/pii/detectors.py.
"""

from __future__ import annotations

from typing import Any, Mapping

import phonenumbers

from tokenmill.docstage import Outcome
from tokenmill.runtime import ParamError
from tokenmill.pii.detectors import DEFAULT_REGIONS, PHONE_VALIDATION, TYPES, find_all

DEFAULT_TOKENS = {
    "email": "<EMAIL>",
    "phone": "<PHONE>",
    "ip_address": "<IP_ADDRESS>",
    "credit_card": "<CREDIT_CARD>",
    "iban": "<IBAN>",
    "ssn": "<SSN>",
}
PARAMS = ("enabled", "tokens", "keep_private_ip", "phone_regions", "phone_validation")


def redact(text: str, types: tuple[str, ...] = TYPES, tokens: Mapping[str, str] = DEFAULT_TOKENS,
           keep_private_ip: bool = False, phone_regions: tuple[str, ...] = DEFAULT_REGIONS,
           phone_validation: str = "valid") -> tuple[str, dict[str, int]]:
    """Text with every match of `types` replaced by its type's token, and the number of matches per type.

    Every type is detected, enabled or not, before overlaps are resolved: an IBAN's digits stay an IBAN
    (left as they are when IBANs are switched off), never a phone number that happened to fit inside.
    """
    counts = dict.fromkeys(types, 0)
    matches = [m for m in find_all(text, TYPES, keep_private_ip, phone_regions, phone_validation) if m.type in counts]
    if not matches:
        return text, counts
    parts, pos = [], 0
    for m in matches:
        parts += [text[pos:m.start], tokens[m.type]]
        pos = m.end
        counts[m.type] += 1
    parts.append(text[pos:])
    return "".join(parts), counts


class PIIProcessor:
    """params (conf/pii/default.yaml): enabled {type: bool}, tokens {type: str}, keep_private_ip: bool,
    phone_regions [ISO 3166 alpha-2 codes], phone_validation "valid" | "possible".

    Types left out of `enabled` are on; tokens left out get the defaults. Unknown keys or type names
    are errors, so that a typo in params.yaml cannot silently switch redaction off.
    """

    def __init__(self, params: Mapping[str, Any] | None = None):
        params = dict(params or {})
        unknown = set(params) - set(PARAMS)
        if unknown:
            raise ParamError(f"pii: unknown parameters {sorted(unknown)}; expected {list(PARAMS)}")
        enabled = dict(params.get("enabled") or {})
        tokens = dict(params.get("tokens") or {})
        for name, given in (("enabled", enabled), ("tokens", tokens)):
            bad = set(given) - set(TYPES)
            if bad:
                raise ParamError(f"pii.{name}: unknown types {sorted(bad)}; known: {list(DEFAULT_TOKENS)}")
        # Scores are listed in DEFAULT_TOKENS order; detection order is irrelevant to the result.
        self.types = tuple(t for t in DEFAULT_TOKENS if enabled.get(t, True))
        self.tokens = {**DEFAULT_TOKENS, **{t: str(v) for t, v in tokens.items()}}
        self.keep_private_ip = bool(params.get("keep_private_ip", False))
        regions = params.get("phone_regions", DEFAULT_REGIONS)
        if isinstance(regions, str) or not all(isinstance(r, str) for r in regions):
            raise ParamError(f"pii.phone_regions: a list of region codes such as [US, GB], got {regions!r}")
        self.phone_regions = tuple(r.upper() for r in regions)
        unknown_regions = [r for r in self.phone_regions if r not in phonenumbers.SUPPORTED_REGIONS]
        if unknown_regions:
            raise ParamError(f"pii.phone_regions: unknown regions {unknown_regions} (ISO 3166 alpha-2, e.g. US, GB, DE)")
        self.phone_validation = params.get("phone_validation", "valid")
        if self.phone_validation not in PHONE_VALIDATION:
            raise ParamError(f"pii.phone_validation: one of {list(PHONE_VALIDATION)}, got {self.phone_validation!r}")

    def __call__(self, doc: Mapping[str, Any]) -> Outcome:
        text = doc.get("text") or ""
        new_text, counts = redact(text, self.types, self.tokens, self.keep_private_ip, self.phone_regions,
                                  self.phone_validation)
        scores = {f"pii_{t}": float(n) for t, n in counts.items()}
        if new_text == text and not any(counts.values()):
            return Outcome("keep", "no_pii", scores)
        return Outcome("modify", "redacted", scores, text=new_text)
