"""Cutting one long text into pieces at whitespace, for the vectorised word hashers of dedup and decontam.

Both hash a batch of texts through arrays of ~40 bytes per character; a single text far larger than the batch
is hashed piece by piece instead. Cutting at whitespace never splits a word, so the word hashes of the pieces,
concatenated, are those of the whole text.
"""

from __future__ import annotations

import re

_WHITESPACE = re.compile(r"\s")


def whitespace_pieces(text: str, size: int) -> list[str]:
    """`text` cut at whitespace into pieces of at most about `size` characters (a run without whitespace longer
    than that stays whole); the whitespace character at each cut is dropped."""
    out, start = [], 0
    while len(text) - start > size:
        cut = max(text.rfind(" ", start, start + size), text.rfind("\n", start, start + size))
        if cut <= start:
            m = _WHITESPACE.search(text, start + size)
            if m is None:
                break
            cut = m.start()
        out.append(text[start:cut])
        start = cut + 1
    out.append(text[start:])
    return out
