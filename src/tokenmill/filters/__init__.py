"""The `filter` stage: licence gate, URL block-lists, language identification, heuristic quality rules.

`FilterProcessor(params)` is a docstage processor: built once per worker, called once per document. Rules
run in FineWeb's order, cheapest and most decisive first:

    licence -> urls -> language -> gopher_repetition -> gopher_quality -> c4 -> fineweb

The first failing rule is the decision's reason ("licence", "url_blocklist", "url_banned_word",
"language", or a measure's name such as "gopher_dup_line_frac"); a document that fails none is kept with
reason "passed". Every enabled group is measured on every document, kept or dropped, so thresholds can be
studied from the decision table afterwards (contract 3); nothing is skipped early.

Scores: language_score and every rule's measured value under its own name. Details: {"language": code},
plus {"url_match": ...} when a block-list or word list matched. A group switched off for the document's
bucket (`buckets: {code: {language: false, ...}}`) is neither measured nor applied: code is not judged as
prose.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from tokenmill.docstage import Outcome
from tokenmill.filters.params import Filter
from tokenmill.filters import c4, fineweb, gopher, langid, urls
from tokenmill.filters.text import Measure, Text

# Text rule groups in the order they are applied: (name, function); their parameters: tokenmill.filters.params.
TEXT_GROUPS: list[tuple[str, Callable[[Text, Any], list[Measure]]]] = [
    ("gopher_repetition", gopher.repetition),
    ("gopher_quality", gopher.quality),
    ("c4", c4.rules),
    ("fineweb", fineweb.rules),
]
GROUPS = ("licences", "blocklists", "language") + tuple(name for name, _ in TEXT_GROUPS)


class FilterProcessor:
    """params: the filter section, resolved by the stage script (tokenmill.filters.params.Filter). The code's
    defaults are the published values; conf/filter/default.yaml repeats them with their sources and is what a
    pipeline run uses. licences.allow=None switches the licence gate off."""

    def __init__(self, params: Filter):
        self.params = params
        allow = params.licences.allow
        self.allowed_licences = None if allow is None else set(allow)
        self.urls = urls.UrlFilter(params.blocklists)
        lang = params.language
        self.lid = langid.LanguageIdentifier(lang.model, lang.max_chars) if self._ever("language") else None
        self.allowed_languages = set(lang.allowed)
        self.min_language_score = lang.min_score

    def _ever(self, group: str) -> bool:
        """Whether any bucket may run this group (so a model is loaded only when something uses it)."""
        return getattr(self.params, group).enabled or any(getattr(s, group) for s in self.params.buckets.values())

    def enabled(self, group: str, bucket: str | None) -> bool:
        """A bucket's switch for the group where it names one; otherwise (no switch, None) the group's `enabled`."""
        switches = self.params.buckets.get(bucket or "")
        switch = None if switches is None else getattr(switches, group)
        return getattr(self.params, group).enabled if switch is None else switch

    def __call__(self, doc: Mapping[str, Any]) -> Outcome:
        bucket = doc.get("bucket")
        text = doc.get("text") or ""
        scores: dict[str, float] = {}
        details: dict[str, Any] = {}
        reasons: list[str] = []  # failing rules in order; the first is the decision's reason

        if self.enabled("licences", bucket) and self.allowed_licences is not None:
            if doc.get("licence") not in self.allowed_licences:
                reasons.append("licence")

        url = doc.get("url")
        if url and self.enabled("blocklists", bucket):
            hit = self.urls.check(url)
            if hit:
                reasons.append(hit[0])
                details["url_match"] = hit[1]

        if self.enabled("language", bucket):
            code, score = self.lid.predict(text)
            scores["language_score"] = score
            details["language"] = code
            if code not in self.allowed_languages or score < self.min_language_score:
                reasons.append("language")

        t = Text(text)
        for name, rules in TEXT_GROUPS:
            if not self.enabled(name, bucket):
                continue
            for m in rules(t, getattr(self.params, name)):
                scores[m.name] = round(m.value, 6)
                if not m.ok:
                    reasons.append(m.name)

        if reasons:
            return Outcome("drop", reasons[0], scores, details or None)
        return Outcome("keep", "passed", scores, details or None)
