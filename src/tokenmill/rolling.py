"""One polynomial rolling hash over code points, shared by dedup's word hashes (MinHash shingles) and
decontaminate's word hashes (benchmark n-grams).

A span's hash is sum_j v_j * K * Q^(j - start) mod 2^64. One cumulative sum over all the text serves every
span: a span's sum is the difference of two prefix sums, times Q^-start (Q is odd, so invertible mod 2^64).
Three passes over the characters, where a sum per span (np.add.reduceat over per-span positions) took eight.
Each caller mixes the sums with its own finaliser (changing one would change its stage's output).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

CHAR_K = 0x2545F4914F6CDD1D  # odd: spreads a code point over 64 bits
CHAR_Q = 0x5851F42D4C957F2D  # odd: the polynomial base


@lru_cache(maxsize=4)
def powers(n: int) -> tuple[np.ndarray, np.ndarray]:
    """(K * Q^i, Q^-i) mod 2^64 for i < n (n a power of two: few distinct sizes are cached)."""
    fwd, inv = np.empty(n, np.uint64), np.empty(n, np.uint64)
    fwd[0], inv[0] = CHAR_K, 1
    if n > 1:  # unsigned multiplication wraps modulo 2^64, as intended
        fwd[1:] = np.multiply.accumulate(np.full(n - 1, CHAR_Q, np.uint64)) * np.uint64(CHAR_K)
        inv[1:] = np.multiply.accumulate(np.full(n - 1, pow(CHAR_Q, -1, 1 << 64), np.uint64))
    fwd.setflags(write=False)
    inv.setflags(write=False)
    return fwd, inv


def span_sums(values: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """The rolling sum of each span values[starts[i]:ends[i]] (uint32 code points or table values), uint64."""
    fwd, inv = powers(1 << max(len(values) - 1, 1).bit_length())
    prefix = np.empty(len(values) + 1, np.uint64)
    prefix[0] = 0
    np.cumsum(values * fwd[:len(values)], out=prefix[1:])  # uint32 * uint64 -> uint64, wrapping modulo 2^64
    return (prefix[ends] - prefix[starts]) * inv[starts]
