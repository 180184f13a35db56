"""The pii stage: replace personal data in each document with a placeholder token, and count what it replaced.

A processor for tokenmill.docstage (the one per-document loop). Documents are never dropped here: a
document with personal data comes out `modify` / `redacted` with its new text and the same doc_id, every
other document `keep` / `no_pii`. Both carry the per-type counts as scores ("pii_email": 2, ...; zeros
included, one score per enabled type), so the lineage tables can say how much of the corpus was touched.

What counts as each type, and why, is in tokenmill/pii/detectors.py.
"""

from __future__ import annotations

from typing import Any, Mapping

from tokenmill.docstage import Outcome
from tokenmill.pii.params import Pii
from tokenmill.pii.detectors import DEFAULT_REGIONS, TYPES, find_all

DEFAULT_TOKENS = {
    "email": "<EMAIL>",
    "phone": "<PHONE>",
    "ip_address": "<IP_ADDRESS>",
    "credit_card": "<CREDIT_CARD>",
    "iban": "<IBAN>",
    "ssn": "<SSN>",
}


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
    """params: the pii section, resolved by the stage script (tokenmill.pii.params.Pii; conf/pii/default.yaml):
    enabled {type: bool}, tokens {type: str}, keep_private_ip: bool, phone_regions [ISO 3166 alpha-2 codes],
    phone_validation "valid" | "possible".

    Types left out of `enabled` are on; tokens left out get the defaults. Unknown keys or type names
    are errors of the schema, so that a typo in params.yaml cannot silently switch redaction off.
    """

    def __init__(self, params: Pii):
        # Scores are listed in DEFAULT_TOKENS order; detection order is irrelevant to the result.
        self.types = tuple(t for t in DEFAULT_TOKENS if params.enabled.get(t, True))
        self.tokens = {**DEFAULT_TOKENS, **params.tokens}
        self.keep_private_ip = params.keep_private_ip
        self.phone_regions = tuple(r.upper() for r in params.phone_regions)
        self.phone_validation = params.phone_validation

    def __call__(self, doc: Mapping[str, Any]) -> Outcome:
        text = doc.get("text") or ""
        new_text, counts = redact(text, self.types, self.tokens, self.keep_private_ip, self.phone_regions,
                                  self.phone_validation)
        scores = {f"pii_{t}": float(n) for t, n in counts.items()}
        if new_text == text and not any(counts.values()):
            return Outcome("keep", "no_pii", scores)
        return Outcome("modify", "redacted", scores, text=new_text)
