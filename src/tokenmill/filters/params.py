"""The filter stage's parameters: each rule group's thresholds (their reasons: the rule modules) and the per-bucket switches."""

from __future__ import annotations

import functools
from typing import Annotated, ClassVar

from pydantic import Field, model_validator

from tokenmill.filters.langid import labels
from tokenmill.section import Count, Fraction, Positive, Section


class Licences(Section):
    enabled: bool = True
    allow: list[str] | None = None  # None: the licence gate is off


class Blocklists(Section):
    enabled: bool = True
    domain_files: list[str] = []
    url_files: list[str] = []
    banned_url_words: list[str] = []
    banned_url_word_files: list[str] = []
    soft_banned_url_words: list[str] = []
    soft_banned_url_word_files: list[str] = []
    soft_banned_url_word_threshold: Positive = 2
    banned_url_subwords: list[str] = []
    banned_url_subword_files: list[str] = []


@functools.lru_cache(maxsize=4)
def language_labels(model: str | None) -> frozenset[str]:
    """The labels the language model predicts (lid.176: 176 ISO codes), read from the model itself."""
    return frozenset(labels(model))


class Language(Section):
    enabled: bool = True
    model: str | None = None  # None: the pinned lid.176.ftz
    allowed: list[str] = Field(default=["en"], min_length=1)  # labels of the model (lid.176: ISO 639 codes)
    min_score: Fraction = 0.65
    max_chars: Positive = 3000

    @model_validator(mode="after")
    def _labels_known(self) -> "Language":
        # Checked even when the group is off: a bucket may switch it on.
        known = language_labels(self.model)
        bad = [a for a in self.allowed if a not in known]
        if bad:
            raise ValueError(f"allowed: {bad} are not labels of the language model, which knows {len(known)} "
                             f"ISO 639 codes such as en, de, fr, zh (filter.language.model: {self.model or 'lid.176'})")
        return self


class GopherRepetition(Section):
    enabled: bool = True
    max_dup_para_frac: Fraction = 0.30
    max_dup_para_char_frac: Fraction = 0.20
    max_dup_line_frac: Fraction = 0.30
    max_dup_line_char_frac: Fraction = 0.20
    max_top_2gram_char_frac: Fraction = 0.20
    max_top_3gram_char_frac: Fraction = 0.18
    max_top_4gram_char_frac: Fraction = 0.16
    max_dup_5gram_char_frac: Fraction = 0.15
    max_dup_6gram_char_frac: Fraction = 0.14
    max_dup_7gram_char_frac: Fraction = 0.13
    max_dup_8gram_char_frac: Fraction = 0.12
    max_dup_9gram_char_frac: Fraction = 0.11
    max_dup_10gram_char_frac: Fraction = 0.10


class GopherQuality(Section):
    enabled: bool = True
    min_words: Count = 50
    max_words: Positive = 100_000
    min_mean_word_length: Annotated[float, Field(ge=0)] = 3.0
    max_mean_word_length: Annotated[float, Field(gt=0)] = 10.0
    max_hash_word_ratio: Fraction = 0.1
    max_ellipsis_word_ratio: Fraction = 0.1
    max_bullet_line_frac: Fraction = 0.9
    max_ellipsis_line_frac: Fraction = 0.3
    min_alpha_word_frac: Fraction = 0.8
    min_stop_words: Count = 2
    stop_words: list[str] = ["the", "be", "to", "of", "and", "that", "have", "with"]
    bullets: list[str] = ["•", "●", "○", "◦", "▪", "▫", "■", "□", "‣", "⁃", "∙", "·", "-", "–", "*"]

    @model_validator(mode="after")
    def _bounds_ordered(self) -> "GopherQuality":
        if self.min_words > self.max_words:
            raise ValueError(f"min_words: expected at most max_words ({self.max_words}), got {self.min_words}")
        return self


class C4(Section):
    enabled: bool = True
    min_terminal_punct_char_frac: Fraction = 0.5
    min_words_per_line: Count = 5
    max_word_length: Positive = 1000
    max_lorem_ipsum: Count = 0
    max_curly_brace_lines: Count = 0
    max_javascript_line_frac: Fraction = 0.2
    policy_substrings: list[str] = ["terms of use", "privacy policy", "cookie policy", "uses cookies",
                                    "use of cookies", "use cookies"]
    max_policy_line_frac: Fraction = 0.2
    min_sentences: Count = 3


class FineWeb(Section):
    enabled: bool = True
    stop_chars: list[str] = [".", "'", '"', "!", "?", "”", "’", "»", "›", "…"]
    closing_brackets: list[str] = [")", "]", "}"]
    min_line_punct_ratio: Fraction = 0.12
    short_line_length: Positive = 30
    max_short_line_ratio: Fraction = 0.67
    max_char_dup_ratio: Fraction = 0.01
    max_newline_word_ratio: Annotated[float, Field(ge=0)] = 0.3


class BucketSwitches(Section):
    """Per bucket: a rule group switched on or off for its documents (unset: the group's `enabled`)."""

    licences: bool | None = None
    blocklists: bool | None = None
    language: bool | None = None
    gopher_repetition: bool | None = None
    gopher_quality: bool | None = None
    c4: bool | None = None
    fineweb: bool | None = None


class Filter(Section):
    section: ClassVar[str] = "filter"
    licences: Licences = Licences()
    blocklists: Blocklists = Blocklists()
    language: Language = Field(default_factory=Language)
    gopher_repetition: GopherRepetition = GopherRepetition()
    gopher_quality: GopherQuality = GopherQuality()
    c4: C4 = C4()
    fineweb: FineWeb = FineWeb()
    buckets: dict[str, BucketSwitches] = {}
