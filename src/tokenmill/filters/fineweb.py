"""FineWeb's own quality rules (Penedo et al. 2024; datatrove FineWebQualityFilter, whose defaults FineWeb's
production pipeline used).

Lines are the non-blank lines (datatrove's current version; the first one also counted blank lines, which
made the punctuation and short-line ratios depend on paragraph spacing).
- fineweb_line_punct_ratio: share of lines ending in . ' " ! ?   kept at >= 0.12
- fineweb_short_line_ratio: share of lines of at most 30 characters   kept at <= 0.67
- fineweb_char_dup_ratio: characters in lines that repeat an earlier line, over all characters except
  newlines   kept at <= 0.01 (the code default FineWeb ran with; the FineWeb blog post states 0.1, and
  FineWeb-2 uses 0.1)
- fineweb_newline_word_ratio: newlines per word, "list-like" documents   kept at <= 0.3
"""

from __future__ import annotations

from tokenmill.filters.text import Measure, Text, find_duplicates, measure, ratio

DEFAULTS = {
    "enabled": True,
    "stop_chars": [".", "'", '"', "!", "?"],
    "min_line_punct_ratio": 0.12,
    "short_line_length": 30,
    "max_short_line_ratio": 0.67,
    "max_char_dup_ratio": 0.01,
    "max_newline_word_ratio": 0.3,
}


def rules(t: Text, cfg: dict) -> list[Measure]:
    lines = [line for line in t.lines if line.strip()]
    stop = tuple(cfg["stop_chars"])
    short = cfg["short_line_length"]
    text = t.text
    return [
        measure("fineweb_line_punct_ratio", ratio(sum(line.endswith(stop) for line in lines), len(lines)),
                lo=cfg["min_line_punct_ratio"]),
        measure("fineweb_short_line_ratio", ratio(sum(len(line) <= short for line in lines), len(lines)),
                hi=cfg["max_short_line_ratio"]),
        measure("fineweb_char_dup_ratio", ratio(find_duplicates(lines)[1], len(text) - text.count("\n")),
                hi=cfg["max_char_dup_ratio"]),
        measure("fineweb_newline_word_ratio", ratio(text.count("\n"), len(t.words)),
                hi=cfg["max_newline_word_ratio"]),
    ]
