"""Normalised word n-grams and the benchmark n-gram index.

Normalisation: Unicode NFKC, lower case, apostrophes deleted ("don't" -> "dont", "Janet's" -> "janets"),
every other punctuation or symbol character (Unicode categories P* and S*) replaced by a space, then split
on whitespace. Replacing rather than deleting makes "well-known", "well - known", WikiText's
"well @-@ known" and a line wrapped at the hyphen all the same two words (WikiText's "fox 's" is rejoined
to "fox's"). Newlines are whitespace, so text re-wrapped into short lines or re-cased gives the same words
as the original. Scripts written without spaces (Chinese, Japanese, Thai, Lao, Khmer, Myanmar) count each
character as a word, so a line break inside a sentence does not split a "word".

A copy that lost its punctuation another way ("dik-dik" -> "dikdik", "3*3=9" -> "339", "don't" -> "don t")
does not give the words above, so each item is indexed in up to five forms (`item_forms`): punctuation as
spaces; deleted; ASCII punctuation deleted; deleted but for underscores; as spaces, apostrophes included.
An item's overlap is that of its best-matched form. Documents are normalised once, the first way: a
document already stripped of punctuation reads the same whichever way it is normalised.

Hashing: each word gets a 64-bit xxh3 hash; an n-gram's hash is the polynomial
h(w1..wk) = sum h(wi) * P^(k-i) mod 2^64, computed for all k-grams of a document with k vector operations
(H_k = H_(k-1)[:-1] * P + h[k-1:]), so the n-grams of every length the index needs come in one pass.
Word hashes are stable across processes and machines, so index and documents may be hashed anywhere.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Iterable

import numpy as np
import xxhash

P = np.uint64(0x9E3779B97F4A7C15)  # odd: multiplication by it is a bijection mod 2^64
_APOSTROPHES = "'\u2018\u2019\u02bc\uff07"
_NO_SPACES = re.compile("[\u0e00-\u0eff\u1000-\u109f\u1780-\u17ff\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff"
                        "\uf900-\ufaff\U00020000-\U0003ffff]")


# How a copy may have lost its punctuation (see item_forms); documents are read the first way.
MODES = ("space", "delete", "delete_ascii", "delete_keep_underscore", "space_apostrophes")


@lru_cache(maxsize=1)
def _punctuation() -> tuple[int, ...]:
    # Unicode has no punctuation or symbol above U+1FFFF: scanning planes 0-1 takes 0.1 s, all 17 take 0.7 s.
    return tuple(cp for cp in range(0x20000) if unicodedata.category(chr(cp))[0] in "PS")


@lru_cache(maxsize=len(MODES))
def _tables(mode: str) -> tuple[dict[int, str | None], bytes, bytes]:
    """(str.translate table, bytes map and bytes to delete for ASCII text) for one mode."""
    table: dict[int, str | None] = {
        cp: " " if mode.startswith("space") or (mode == "delete_ascii" and cp >= 128) else None
        for cp in _punctuation()}
    if mode == "delete_keep_underscore":
        table[ord("_")] = " "  # kept by the copy, then split like any punctuation when the copy is read
    for a in _APOSTROPHES:
        table[ord(a)] = " " if mode == "space_apostrophes" else None
    ascii_delete = bytes(b for b in range(128) if b in table and table[b] is None)
    ascii_map = bytes(0x20 if table.get(b) == " " else b for b in range(256))
    return table, ascii_map, ascii_delete


# Tokenised corpora (WikiText, Penn Treebank) split clitics off: "teddy 's", "did n't". Rejoined, they read
# like the original "teddy's", "didn't"; a quotation mark before a word ("said 'so") is left alone.
_CLITIC = re.compile(r" (n?['\u2019](?:s|t|re|ve|ll|d|m))\b")


def _prepare(text: str) -> str:
    text = text.lower()
    if not text.isascii():
        text = unicodedata.normalize("NFKC", text).lower()
    if " '" in text or " n'" in text or " \u2019" in text or " n\u2019" in text:
        text = _CLITIC.sub(r"\1", text)
    return text


def _split(text: str, mode: str) -> list[str]:
    table, ascii_map, ascii_delete = _tables(mode)
    if text.isascii():  # most text: a bytes translation is ~10x faster (and NFKC was a no-op)
        return text.encode().translate(ascii_map, ascii_delete).decode().split()
    return _NO_SPACES.sub(r" \g<0> ", text.translate(table)).split()


def normalize(text: str, mode: str = "space") -> list[str]:
    """The normalised words of `text`."""
    return _split(_prepare(text), mode)


def item_forms(text: str) -> list[list[str]]:
    """The distinct word sequences a copy of `text` normalises to, depending on how the copy lost its
    punctuation: none lost or replaced by spaces; all deleted; only ASCII punctuation deleted (Python's
    string.punctuation, the usual recipe); all deleted but underscores kept (re.sub(r"[^\\w\\s]", "", t),
    which leaves code identifiers whole); all replaced by spaces, apostrophes too ("don t")."""
    text = _prepare(text)
    forms = [_split(text, mode) for mode in MODES]  # the first is how documents are read
    return [f for i, f in enumerate(forms) if f not in forms[:i]]


def word_hashes(words: list[str]) -> np.ndarray:
    return np.fromiter(map(xxhash.xxh3_64_intdigest, map(str.encode, words)), dtype=np.uint64,
                       count=len(words))


def gram_hashes(wh: np.ndarray, lengths: Iterable[int]) -> dict[int, np.ndarray]:
    """{k: hashes of every k-word window} for each k in `lengths` (windows longer than the text are absent)."""
    lengths = sorted(set(lengths))
    out: dict[int, np.ndarray] = {}
    h = wh
    for k in range(1, (lengths[-1] if lengths else 0) + 1):
        if k > 1:
            if len(h) < 2:
                break
            h = h[:-1] * P + wh[k - 1:]
        if k in lengths:
            out[k] = h
    return out


def _unique(a: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(sorted distinct values, index of each one's first occurrence in sorted order, counts).

    By sorting: np.unique in numpy 2.4 takes ~20x longer than a sort on a few million uint64.
    """
    s = np.sort(a, kind="stable")
    first = np.flatnonzero(np.concatenate(([True], s[1:] != s[:-1]))) if len(s) else np.empty(0, np.int64)
    return s[first], first, np.diff(np.append(first, len(s)))


def forms_grams(forms: list[list[str]], n: int) -> tuple[np.ndarray, np.ndarray]:
    """(form number, gram hash) for the distinct n-grams of many word sequences at once; a sequence
    shorter than n words is one gram: all of it. Vectorised over all forms (one hash pass, no per-item loop)."""
    if not forms:
        return np.empty(0, np.int64), np.empty(0, np.uint64)
    lens = np.fromiter(map(len, forms), dtype=np.int64, count=len(forms))
    starts = np.concatenate(([0], np.cumsum(lens)[:-1])).astype(np.int64)
    wh = word_hashes([w for f in forms for w in f])
    by_len = gram_hashes(wh, set(np.minimum(lens, n).tolist()))
    ids = np.arange(len(forms), dtype=np.int64)
    long = lens >= n
    per = lens[long] - n + 1  # windows inside each long form
    pos = np.repeat(starts[long] - np.concatenate(([0], np.cumsum(per)[:-1])), per) + np.arange(per.sum())
    form_parts, gram_parts = [np.repeat(ids[long], per)], [by_len[n][pos] if n in by_len else np.empty(0, np.uint64)]
    for k in sorted(set(lens[~long].tolist())):
        sel = lens == k
        form_parts.append(ids[sel])
        gram_parts.append(by_len[k][starts[sel]])
    form_of, grams = np.concatenate(form_parts), np.concatenate(gram_parts).astype(np.uint64)
    order = np.lexsort((form_of, grams))
    form_of, grams = form_of[order], grams[order]
    distinct = np.concatenate(([True], (grams[1:] != grams[:-1]) | (form_of[1:] != form_of[:-1])))
    return form_of[distinct], grams[distinct]


@dataclass
class NgramIndex:
    """Sorted distinct gram hashes, each with the item forms that contain it (CSR: offsets into postings).

    An item has one to five forms (item_forms; the same words are one form); postings hold form numbers,
    and `match` reports each item by its best-matched form.
    """

    n: int
    keys: np.ndarray  # uint64, sorted, distinct
    offsets: np.ndarray  # int64, len(keys) + 1
    postings: np.ndarray  # int32 form numbers
    items: list[tuple[str, str]]  # item number -> (benchmark, item id)
    form_item: np.ndarray  # int64: form number -> item number
    form_ngrams: np.ndarray  # int64: distinct grams per form (the overlap fraction's denominator)
    lengths: list[int]  # gram lengths present: n, and the lengths of items shorter than n
    stats: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        # A prefilter on the top bits of the hash: a byte per slot, about 8 slots per key (16 MiB for 1.5M
        # keys) so most of a document's grams are rejected by one lookup in a table that stays in cache.
        bits = int(min(26, max(12, np.ceil(np.log2(max(len(self.keys), 1))) + 3)))
        self._shift = np.uint64(64 - bits)
        self._filter = np.zeros(1 << bits, dtype=np.bool_)
        self._filter[self.keys >> self._shift] = True

    @classmethod
    def build(cls, items: Iterable[tuple[str, str, str]], n: int = 13, min_item_words: int = 8) -> "NgramIndex":
        names: list[tuple[str, str]] = []
        form_item: list[int] = []
        forms: list[list[str]] = []
        seen: set[tuple[str, str]] = set()
        per_benchmark: dict[str, dict[str, int]] = {}
        for bench, item_id, text in items:
            if (bench, item_id) in seen:
                raise ValueError(f"decontaminate: benchmark {bench!r} has item id {item_id!r} twice")
            seen.add((bench, item_id))
            st = per_benchmark.setdefault(bench, {"items": 0, "indexed": 0, "too_short": 0})
            st["items"] += 1
            # A handful of words is common prose, not evidence of copying: an item is indexed when its first
            # form has min_item_words. Its other forms are shorter only where deleted punctuation merged
            # words ("1,2,3" -> "123"), and merged words are rarer, so they need half as many.
            canonical, *others = item_forms(text)
            mine = [canonical] + [w for w in others if len(w) >= max(1, min_item_words // 2)]
            if len(canonical) < min_item_words:
                st["too_short"] += 1
                continue
            form_item.extend([len(names)] * len(mine))
            forms.extend(mine)
            names.append((bench, item_id))
            st["indexed"] += 1
        form_of, all_grams = forms_grams(forms, n)
        counts = np.bincount(form_of, minlength=len(forms)).astype(np.int64)
        lengths = sorted(set(min(n, len(f)) for f in forms))
        all_forms = form_of.astype(np.int32)  # CSR by gram: forms_grams sorts by gram, then form
        keys, starts, _ = _unique(all_grams)
        offsets = np.append(starts, len(all_grams)).astype(np.int64)
        return cls(n=n, keys=keys, offsets=offsets, postings=all_forms, items=names,
                   form_item=np.asarray(form_item, dtype=np.int64), form_ngrams=counts, lengths=lengths,
                   stats={"benchmarks": per_benchmark, "items": len(names), "forms": len(forms),
                          "keys": int(len(keys))})

    def match(self, words: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(item numbers, distinct grams matched, grams in the item) for a document's words, one entry per
        item sharing at least one gram, from the item form with the larger overlap fraction."""
        empty = np.empty(0, np.int64)
        if not len(self.keys) or not words:
            return empty, empty, empty
        by_len = gram_hashes(word_hashes(words), self.lengths)
        if not by_len:
            return empty, empty, empty
        doc = np.concatenate(list(by_len.values()))
        doc = doc[self._filter[doc >> self._shift]]  # ~9% of random grams pass; saves most binary searches
        pos = np.searchsorted(self.keys, doc)
        pos[pos == len(self.keys)] = 0
        hit = _unique(pos[self.keys[pos] == doc])[0]  # distinct: a gram repeated in the document counts once
        if not len(hit):
            return empty, empty, empty
        starts, ends = self.offsets[hit], self.offsets[hit + 1]
        sizes = ends - starts
        # postings[starts[j] : ends[j]] for every hit, without a Python loop
        idx = np.repeat(starts - np.concatenate(([0], np.cumsum(sizes)[:-1])), sizes) + np.arange(sizes.sum())
        forms, _, matched = _unique(self.postings[idx])
        forms = forms.astype(np.int64)
        items, total = self.form_item[forms], self.form_ngrams[forms]
        # Per item, the form with the highest fraction (then the most matches): sort, keep each item's first.
        order = np.lexsort((-matched, -matched / total, items))
        items, matched, total = items[order], matched[order], total[order]
        first = np.concatenate(([True], items[1:] != items[:-1]))
        return items[first], matched[first].astype(np.int64), total[first]
