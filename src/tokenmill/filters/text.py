"""The views of a document that every rule group shares: lines, paragraphs, words.

Built once per document and cached, so the four rule groups split the text once between them.
Words are runs of word characters, joined across inner apostrophes, hyphens and dots ("don't", "U.S",
"e-mail"); punctuation and symbols are not words. This stands in for nltk's word_tokenize that datatrove
uses: the same words for prose, about ten times faster, and no tokenizer data to download.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property

_WORD = re.compile(r"\w+(?:['’.\-]\w+)*")
_PARAGRAPH_BREAK = re.compile(r"\n[ \t]*\n")


@dataclass(frozen=True)
class Measure:
    """One rule's measured value and whether the document passes it. `name` is also the score key and,
    when it is the first failing rule, the decision's reason."""

    name: str
    value: float
    ok: bool


def measure(name: str, value: float, lo: float | None = None, hi: float | None = None) -> Measure:
    """A measure with inclusive bounds (the published rules read "at most 0.30", "at least 50");
    a bound of None disables that side of the rule: the value is still recorded."""
    ok = (lo is None or value >= lo) and (hi is None or value <= hi)
    return Measure(name, float(value), ok)


def ratio(num: float, den: float) -> float:
    """num / den, 0 for an empty denominator: an empty document fails the word-count rule, not a division."""
    return num / den if den else 0.0


class Text:
    def __init__(self, text: str):
        self.text = text

    @cached_property
    def lines(self) -> list[str]:
        """All lines, blank ones included, without trailing whitespace (ingest already strips it)."""
        return [line.rstrip() for line in self.text.splitlines()]

    @cached_property
    def nonempty_lines(self) -> list[str]:
        """Non-blank lines, stripped at both ends."""
        return [s for s in (line.strip() for line in self.lines) if s]

    @cached_property
    def paragraphs(self) -> list[str]:
        """Blocks separated by blank lines, stripped; blank blocks left out."""
        return [s for s in (p.strip() for p in _PARAGRAPH_BREAK.split(self.text)) if s]

    @cached_property
    def words(self) -> list[str]:
        return _WORD.findall(self.text)

    @cached_property
    def word_chars(self) -> int:
        return sum(map(len, self.words))


def find_duplicates(items: list[str]) -> tuple[int, int]:
    """(elements, characters) that repeat an earlier element: the first occurrence is not counted.
    Gopher's duplicate line / paragraph measures, as datatrove implements them."""
    seen: set[str] = set()
    n = chars = 0
    for x in items:
        if x in seen:
            n += 1
            chars += len(x)
        else:
            seen.add(x)
    return n, chars
