"""MinHash signatures and LSH band hashes, vectorised with numpy over batches of documents.

Why not datasketch's `MinHash.update` loop: it hashes one shingle at a time (SHA-1, then 128 numpy
operations in Python), about 8 µs per shingle. Here nothing runs per word or per shingle in Python: a batch
of documents (up to _BATCH_CHARS characters) is one array of code points, and every step is a numpy pass
over it:

1. words: the texts joined and encoded as UTF-32 (one uint32 per code point); a 65,536-entry table gives
   each code point's lower-case form, or 0 for a non-word character; word bounds are where that changes.
   Two code points whose lower case depends on context or is two characters (Σ, İ) send the batch through
   Python's str.lower first; code points above U+FFFF are looked up one distinct value at a time. The
   words are exactly those of `words(text)` (`\\w+` on `text.lower()`): tests/test_minhash.py checks it
   on the Universal Declaration of Human Rights in 387 languages.
2. word hashes: a polynomial hash over code points, sum cp_i * K * Q^i mod 2^64, from one cumulative sum
   over the batch: a word's hash is the difference of two prefix sums times Q^-start (Q is odd, so
   invertible mod 2^64), which makes it independent of where the word sits; then MurmurHash3's fmix64.
3. shingle hashes: word n-grams combined as the top 32 bits of sum_k w[i+k] * M_k (order-sensitive), for
   all windows of the batch at once; windows that cross a document boundary are discarded.
4. permutations: datasketch 2.0's affine32 scheme on blocks of up to _BLOCK shingles: a (num_perm,
   shingles) uint32 matrix a*h + b, reduced per document with `np.minimum.reduceat`. Measured on 1000
   Gutenberg paragraphs (144 shingles each, 128 permutations): 3.7 µs per document with blocks of 6,000 to
   8,192 shingles, 5.2 µs at 4,096 and 8.2-8.6 µs at 1,024-2,048 (numpy's broadcast multiply is slower
   per element on short rows).

Per document on that workload (one core): 48 µs when each document was tokenised by a regex (26 µs) and
each word hashed by a Python call to xxh64 (12 µs); about 11 µs batched (benchmarks/RESULTS.md).

The permutation family is datasketch 2.0's default scheme ("affine32"): the 32-bit shingle hash is pre-mixed
with the MurmurHash3 finalizer, then permutation k is `a_k * h + b_k mod 2^32` with `a_k` odd, and a_k, b_k
are drawn exactly as datasketch draws them from `np.random.RandomState(seed)`. So `signatures()` equals,
bit for bit, datasketch's `MinHash(num_perm, seed, hashfunc=shingle_hash32)` fed `shingles(text)`
(tests/test_dedup.py checks it). Only the shingle hash differs from datasketch's default (SHA-1), which makes
the estimates statistically equivalent to datasketch's rather than identical to them.
"""

from __future__ import annotations

import re
from functools import lru_cache

import numpy as np

from tokenmill.rolling import span_sums
from tokenmill.textcut import whitespace_pieces

WORD = re.compile(r"\w+")
_ONE_WORD_CHAR = re.compile(r"\w")
MAX32 = np.uint32(0xFFFFFFFF)
_U64 = np.uint64
# Odd 64-bit multipliers, one per position in the n-gram: the combination is order-sensitive, so
# "a b c" and "c b a" hash differently. (Fixed constants: changing them changes every signature.)
_POSITION_MULTIPLIERS = np.array([
    0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9, 0xD6E8FEB86659FD93,
    0xFF51AFD7ED558CCD, 0xC4CEB9FE1A85EC53, 0x94D049BB133111EB, 0xBF58476D1CE4E5B9,
    0x85EBCA77C2B2AE63, 0x27D4EB2F165667C5, 0xA0761D6478BD642F, 0xE7037ED1A0B428DB,
], dtype=np.uint64)
# Characters per batch: ~700 documents of 700 characters; the arrays of a batch take ~40 bytes per
# character (20 MB); 2^15 to 2^19 characters ran at the same speed. A longer document is cut at whitespace
# into pieces of about this size.
_BATCH_CHARS = 1 << 19
# Shingles per permutation block (see 4. above): 8192 x 128 permutations x 4 bytes = 4 MB of scratch.
_BLOCK = 8192


def words(text: str) -> list[str]:
    """Near-duplicate tokens: lower-cased runs of Unicode word characters (punctuation and spacing ignored)."""
    return WORD.findall(text.lower())


def shingles(text: str, ngram: int = 5) -> list[tuple[str, ...]]:
    """The set elements MinHash estimates Jaccard over: word n-grams; a document shorter than n words is one
    shingle of all its words, an empty one has none. (For tests and reference implementations.)"""
    w = words(text)
    if not w:
        return []
    if len(w) < ngram:
        return [tuple(w)]
    return [tuple(w[i:i + ngram]) for i in range(len(w) - ngram + 1)]


# --- 1-2. words and word hashes, a batch at a time ------------------------------------------------------

_SPECIAL = np.uint32(0xFFFFFFFF)  # in _char_table: look this code point up in Python (see _table_values)


@lru_cache(maxsize=1)
def _char_table() -> np.ndarray:
    """For every code point of the Basic Multilingual Plane: its lower-case form when that is a word
    character (\\w), else 0 (no word character is U+0000). Two code points lower-case differently in context
    or to two characters (U+03A3 Σ: σ or final ς; U+0130 İ: i + combining dot), and U+FFFF stands for every
    code point above the plane: those are marked _SPECIAL. Built once per process (16 ms)."""
    is_word = _ONE_WORD_CHAR.fullmatch
    lows = [chr(c).lower() for c in range(0x10000)]
    table = np.array([ord(low) if len(low) == 1 and is_word(low) else 0 for low in lows], np.uint32)
    table[[0x130, 0x3A3, 0xFFFF]] = _SPECIAL
    table.setflags(write=False)
    return table


def _table_values(texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """(lower-cased code point or 0 for a non-word character, at every position of " " + texts joined by
    " " + " "; the length of each text as joined). Equals reading text.lower() character by character."""
    table = _char_table()
    for attempt in range(2):
        cp = np.frombuffer((" " + " ".join(texts) + " ").encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
        v = table[np.minimum(cp, 0xFFFF)]
        special = np.flatnonzero(v == _SPECIAL)
        if not len(special):
            break
        distinct, inverse = np.unique(cp[special], return_inverse=True)
        if attempt == 0 and (np.isin(distinct, (0x130, 0x3A3))).any():
            texts = [t.lower() for t in texts]  # Python's own lower-casing, context included; then again
            continue
        values = []
        for c in distinct.tolist():  # above the plane (rare): \\w and lower-casing of each distinct one
            low = chr(c).lower()
            values.append(ord(low) if WORD.fullmatch(low) else 0)
        v[special] = np.array(values, np.uint32)[inverse]
        break
    return v, np.fromiter(map(len, texts), np.int64, len(texts))


def _fmix64(h: np.ndarray) -> np.ndarray:
    """MurmurHash3's 64-bit finalizer, in place."""
    h ^= h >> _U64(33)
    h *= _U64(0xFF51AFD7ED558CCD)
    h ^= h >> _U64(33)
    h *= _U64(0xC4CEB9FE1A85EC53)
    h ^= h >> _U64(33)
    return h


def _batch_word_hashes(texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """(hash of every word of the texts in order, words per text): the words of `words(text)`."""
    v, lengths = _table_values(texts)
    # The texts are joined with a space before, between and after them: every word is bounded by non-word
    # characters, so the places where word-ness changes alternate start, end, start, end ...
    mask = v != 0
    edges = np.flatnonzero(mask[1:] != mask[:-1]) + 1
    starts, ends = edges[0::2], edges[1::2]
    wh = _fmix64(span_sums(v, starts, ends))
    # Text j occupies [offsets[j] - lengths[j] - 1, offsets[j]) of the joined code points.
    offsets = np.cumsum(lengths + 1)
    counts = np.bincount(np.searchsorted(offsets, starts, side="right"), minlength=len(texts))
    return wh, counts[:len(texts)]


# --- 3. shingle hashes ----------------------------------------------------------------------------------

def _combine(wh: np.ndarray, counts: np.ndarray, ngram: int) -> tuple[np.ndarray, np.ndarray]:
    """(uint32 hash of every shingle, shingles per document) from the word hashes of consecutive documents
    holding counts[j] words each: the n-grams inside each document, or one shingle of all its words when
    it has fewer than n; none when it has no words."""
    n_words = len(wh)
    first = np.zeros(len(counts), np.int64)
    np.cumsum(counts[:-1], out=first[1:])
    padded = np.concatenate((wh, np.zeros(ngram - 1, np.uint64)))
    acc = padded[:n_words] * _POSITION_MULTIPLIERS[0]
    short = np.flatnonzero((counts > 0) & (counts < ngram))
    partial = np.empty(len(short), np.uint64)  # the shingle of a short document: its first `count` terms
    done = counts[short] == 1
    partial[done] = acc[first[short[done]]]
    for k in range(1, ngram):
        acc += padded[k:k + n_words] * _POSITION_MULTIPLIERS[k]
        done = counts[short] == k + 1
        partial[done] = acc[first[short[done]]]
    acc[first[short]] = partial
    per_doc = np.where(counts >= ngram, counts - ngram + 1, np.minimum(counts, 1))
    total = int(per_doc.sum())
    starts = np.zeros(len(per_doc), np.int64)
    np.cumsum(per_doc[:-1], out=starts[1:])
    take = np.repeat(first - starts, per_doc) + np.arange(total)
    return (acc[take] >> _U64(32)).astype(np.uint32), per_doc


def shingle_hashes(text: str, ngram: int = 5) -> np.ndarray:
    """uint32 hash of every shingle of `text`, in order (duplicates kept: they do not change a minimum)."""
    _check_ngram(ngram)
    wh = np.concatenate([_batch_word_hashes([p])[0] for p in whitespace_pieces(text, _BATCH_CHARS)])
    return _combine(wh, np.array([len(wh)], np.int64), ngram)[0]


def shingle_hash32(shingle: tuple[str, ...]) -> int:
    """The hash of one shingle as `signatures` computes it: a datasketch-compatible `hashfunc`."""
    return int(shingle_hashes(" ".join(shingle), len(shingle))[0])


def _check_ngram(ngram: int) -> None:
    if not 1 <= ngram <= len(_POSITION_MULTIPLIERS):
        raise ValueError(f"ngram must be between 1 and {len(_POSITION_MULTIPLIERS)}, got {ngram}")


# --- 4. permutations ------------------------------------------------------------------------------------

def fmix32(h: np.ndarray) -> np.ndarray:
    """MurmurHash3's 32-bit finalizer (the pre-mix datasketch's affine32 scheme applies)."""
    h = h ^ (h >> np.uint32(16))
    h = h * np.uint32(0x85EBCA6B)
    h = h ^ (h >> np.uint32(13))
    h = h * np.uint32(0xC2B2AE35)
    return h ^ (h >> np.uint32(16))


@lru_cache(maxsize=8)
def permutations(num_perm: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(a, b) of the affine permutations, drawn exactly as datasketch 2.0 draws them for scheme affine32."""
    gen = np.random.RandomState(seed)
    a = gen.randint(0, 1 << 31, num_perm, dtype=np.uint32) * np.uint32(2) + np.uint32(1)
    b = gen.randint(0, 1 << 32, num_perm, dtype=np.uint32)
    a.setflags(write=False)
    b.setflags(write=False)
    return a, b


def _block_min(h: np.ndarray, starts: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per segment [starts[i], starts[i+1]) of premixed hashes h: the minimum of a*h + b over the segment.

    Laid out permutation-major, (num_perm, shingles), so each reduction runs along contiguous memory:
    `np.minimum.reduceat` over axis 0 of the shingle-major matrix is about 20x slower.
    """
    p = np.multiply(a[:, None], h[None, :])  # uint32: wraps modulo 2^32, as intended
    p += b[:, None]
    return np.minimum.reduceat(p, starts, axis=1).T


def _min_per_document(h: np.ndarray, per_doc: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(documents, num_perm) minima of a*h + b over each document's run of premixed shingle hashes
    (per_doc[j] of them, at least one each), in blocks of about _BLOCK shingles cut at document bounds."""
    out = np.empty((len(per_doc), len(a)), np.uint32)
    ends = np.cumsum(per_doc)
    doc = 0
    while doc < len(per_doc):
        lo = int(ends[doc - 1]) if doc else 0
        if per_doc[doc] > _BLOCK:  # a long document: its own blocks, folded with np.minimum
            row = np.full(len(a), MAX32, np.uint32)
            for s in range(lo, int(ends[doc]), _BLOCK):
                np.minimum(row, _block_min(h[s:min(s + _BLOCK, int(ends[doc]))], np.zeros(1, np.int64), a, b)[0],
                           out=row)
            out[doc] = row
            doc += 1
            continue
        stop = max(int(np.searchsorted(ends, lo + _BLOCK, side="right")), doc + 1)  # documents that fit
        stop = min(stop, doc + 1 + int(np.searchsorted(per_doc[doc + 1:stop] > _BLOCK, True)))
        hi = int(ends[stop - 1])
        out[doc:stop] = _block_min(h[lo:hi], np.concatenate(([0], ends[doc:stop - 1] - lo)), a, b)
        doc = stop
    return out


def signatures(texts, ngram: int = 5, num_perm: int = 128, seed: int = 1) -> np.ndarray:
    """MinHash signatures, shape (len(texts), num_perm), uint32. A text without words gets all 0xFFFFFFFF
    (the empty-set signature); callers keep such documents out of the LSH index."""
    _check_ngram(ngram)
    a, b = permutations(num_perm, seed)
    texts = list(texts)
    out = np.full((len(texts), num_perm), MAX32, dtype=np.uint32)
    rows: list[int] = []  # the texts of the batch
    batch: list[str] = []
    size = 0

    def sign(wh: np.ndarray, counts: np.ndarray, docs: np.ndarray) -> None:
        sh, per_doc = _combine(wh, counts, ngram)
        has = per_doc > 0
        if has.any():
            out[docs[has]] = _min_per_document(fmix32(sh), per_doc[has], a, b)

    def flush() -> None:
        nonlocal size
        if batch:
            wh, counts = _batch_word_hashes(batch)
            sign(wh, counts, np.asarray(rows, np.int64))
        rows.clear()
        batch.clear()
        size = 0

    for i, text in enumerate(texts):
        if len(text) > _BATCH_CHARS:  # a long text alone, its words hashed piece by piece
            wh = np.concatenate([_batch_word_hashes([p])[0] for p in whitespace_pieces(text, _BATCH_CHARS)])
            sign(wh, np.array([len(wh)], np.int64), np.array([i]))
            continue
        if size + len(text) > _BATCH_CHARS:
            flush()
        rows.append(i)
        batch.append(text)
        size += len(text) + 1
    flush()
    return out


def jaccard_estimate(sig_a: np.ndarray, sig_b: np.ndarray) -> np.ndarray:
    """Fraction of agreeing signature positions; rows are pairs."""
    return (sig_a == sig_b).mean(axis=-1)


# --- LSH -----------------------------------------------------------------------------------------------

def _s_curve(s: np.ndarray, b: int, r: int) -> np.ndarray:
    return 1.0 - (1.0 - s ** r) ** b


def candidate_probability(jaccard, bands: int, rows: int):
    """Probability that a pair with this Jaccard similarity shares at least one band: 1 - (1 - J^r)^b."""
    return _s_curve(np.asarray(jaccard, dtype=np.float64), bands, rows)


def optimal_bands(threshold: float, num_perm: int, false_positive_weight: float = 0.5,
                  false_negative_weight: float = 0.5) -> tuple[int, int]:
    """(bands, rows) with bands*rows <= num_perm minimising the weighted false positive area (the S-curve
    below the threshold) plus false negative area (one minus the S-curve above it): datasketch's
    `_optimal_param`, integrated with Simpson's rule on a fixed grid instead of scipy's quad."""
    grid = 2000  # even
    lo = np.linspace(0.0, threshold, grid + 1)
    hi = np.linspace(threshold, 1.0, grid + 1)
    wts = np.ones(grid + 1)
    wts[1:-1:2], wts[2:-1:2] = 4, 2
    best, opt = float("inf"), (1, 1)
    for b in range(1, num_perm + 1):
        for r in range(1, num_perm // b + 1):
            fp = (wts * _s_curve(lo, b, r)).sum() * threshold / (3 * grid)
            fn = (wts * (1 - _s_curve(hi, b, r))).sum() * (1 - threshold) / (3 * grid)
            err = fp * false_positive_weight + fn * false_negative_weight
            if err < best - 1e-12:
                best, opt = err, (b, r)
    return opt


def band_hashes(sigs: np.ndarray, bands: int, rows: int) -> np.ndarray:
    """(n, bands) int64: a 64-bit hash of each band's `rows` signature values. Two documents collide in band
    k exactly when their rows agree (up to 64-bit hash collisions, about 1e-19 per pair)."""
    if bands * rows > sigs.shape[1]:
        raise ValueError(f"bands*rows = {bands * rows} exceeds the signature length {sigs.shape[1]}")
    x = sigs[:, :bands * rows].reshape(len(sigs), bands, rows).astype(np.uint64)
    h = np.full((len(sigs), bands), 0x243F6A8885A308D3, dtype=np.uint64)
    for j in range(rows):  # absorb one 32-bit value per step, then the MurmurHash3 64-bit finalizer
        h ^= x[:, :, j]
        h *= np.uint64(0x9E3779B97F4A7C15)
        h ^= h >> np.uint64(32)
    h ^= h >> np.uint64(33)
    h *= np.uint64(0xFF51AFD7ED558CCD)
    h ^= h >> np.uint64(33)
    h *= np.uint64(0xC4CEB9FE1A85EC53)
    h ^= h >> np.uint64(33)
    return h.view(np.int64)
