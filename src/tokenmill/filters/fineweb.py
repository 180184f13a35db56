"""FineWeb's own quality rules (Penedo et al. 2024; datatrove FineWebQualityFilter, whose defaults FineWeb's
production pipeline used).

Lines are the non-blank lines (datatrove's current version; the first one also counted blank lines, which
made the punctuation and short-line ratios depend on paragraph spacing).
- fineweb_line_punct_ratio: share of lines ending in . ' " ! ? or their typographic forms ” ’ » › …,
  also when closing brackets, a footnote marker or Gutenberg's italic underscore follow ("... as he
  said.)", "... infinite.(170)")   kept at >= 0.12. datatrove's list has only the
  ASCII marks, so dialogue ending in ” or ’ counted as unpunctuated: measured on the real books, news and
  Wikipedia in ../shared/data/text (tests/test_filters_real_prose.py, benchmarks/RESULTS.md "Filters on
  real prose"), 6.4% of clean book prose was dropped by it before; the typographic marks fix that.
- fineweb_short_line_ratio: share of lines of at most 30 characters   kept at <= 0.67
- fineweb_char_dup_ratio: characters in lines that repeat an earlier line, over all characters except
  newlines   kept at <= 0.01 (the code default FineWeb ran with; the FineWeb blog post states 0.1, and
  FineWeb-2 uses 0.1)
- fineweb_newline_word_ratio: newlines per word, "list-like" documents   kept at <= 0.3
"""

from __future__ import annotations

import re

from tokenmill.filters.params import FineWeb
from tokenmill.filters.text import Measure, Text, find_duplicates, measure, ratio

# A footnote marker after the end mark ("... infinite.(170)", "... in 1870.[3]") and Gutenberg's italic
# underscores ("... in the dark.)_") are not the end of the sentence.
_FOOTNOTE = re.compile(r"(?:\(\d{1,3}\)|\[\d{1,3}\])$")


def ends_punctuated(line: str, stop: tuple[str, ...], closing: str) -> bool:
    """Does the line end in a stop character, possibly followed by closing brackets and a footnote marker?"""
    return _FOOTNOTE.sub("", line).rstrip(closing).endswith(stop)



def rules(t: Text, cfg: FineWeb) -> list[Measure]:
    lines = [line for line in t.lines if line.strip()]
    stop = tuple(cfg.stop_chars)
    closing = "".join(cfg.closing_brackets) + "_"
    short = cfg.short_line_length
    text = t.text
    return [
        measure("fineweb_line_punct_ratio",
                ratio(sum(ends_punctuated(line, stop, closing) for line in lines), len(lines)),
                lo=cfg.min_line_punct_ratio),
        measure("fineweb_short_line_ratio", ratio(sum(len(line) <= short for line in lines), len(lines)),
                hi=cfg.max_short_line_ratio),
        measure("fineweb_char_dup_ratio", ratio(find_duplicates(lines)[1], len(text) - text.count("\n")),
                hi=cfg.max_char_dup_ratio),
        measure("fineweb_newline_word_ratio", ratio(text.count("\n"), len(t.words)),
                hi=cfg.max_newline_word_ratio),
    ]
