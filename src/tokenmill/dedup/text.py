"""The text keys dedup compares: the exact-duplicate key and boilerplate line hashes."""

from __future__ import annotations

import re

import numpy as np
import xxhash

_NOT_WORD_OR_SPACE = re.compile(r"[^\w\s]")


def exact_key(text: str, strip_punctuation: bool = False) -> str:
    """128-bit digest of the normalised text: lower-cased, every run of whitespace collapsed to one space,
    leading and trailing whitespace removed; with strip_punctuation, every character that is neither a
    word character nor whitespace is removed first. Documents with equal keys are exact duplicates."""
    t = text.lower()
    if strip_punctuation:
        t = _NOT_WORD_OR_SPACE.sub("", t)
    return xxhash.xxh3_128_hexdigest(" ".join(t.split()).encode())


def _hashes(lines: list[str]) -> np.ndarray:
    h = np.fromiter(map(xxhash.xxh64_intdigest, map(str.encode, lines)), dtype=np.uint64, count=len(lines))
    return h.view(np.int64)


def line_hashes(text: str, min_chars: int) -> np.ndarray:
    """Distinct int64 hashes of the document's lines that are at least min_chars long after strip().
    A line counts once per document however often the document repeats it."""
    lines = [s for s in (line.strip() for line in text.split("\n")) if len(s) >= min_chars]
    return np.unique(_hashes(lines))


def remove_lines(text: str, repeated: np.ndarray, min_chars: int) -> tuple[str, int]:
    """Remove every line whose stripped form (of at least min_chars) hashes into `repeated` (sorted int64).
    Returns the new text and the number of lines removed; other lines keep their exact bytes."""
    if len(repeated) == 0:
        return text, 0
    lines = text.split("\n")
    idx = [i for i, line in enumerate(lines) if len(line.strip()) >= min_chars]
    if not idx:
        return text, 0
    h = _hashes([lines[i].strip() for i in idx])
    pos = np.minimum(np.searchsorted(repeated, h), len(repeated) - 1)
    hit = repeated[pos] == h
    if not hit.any():
        return text, 0
    drop = set(np.asarray(idx)[hit].tolist())
    return "\n".join(line for i, line in enumerate(lines) if i not in drop), len(drop)
