"""Gopher's quality and repetition rules (Rae et al. 2021, "Scaling Language Models", appendix A, table A1).

Defaults are the published ones, as datatrove's GopherQualityFilter / GopherRepetitionFilter use them.
Where the paper leaves a detail open we say what we chose:
- words are `Text.words` (punctuation and symbols are not words);
- lines and paragraphs are the non-blank ones (a blank line is not a "duplicate line");
- a line "ends in an ellipsis" when the ellipsis is its last character, as in datatrove: speech trailing off
  inside quotes or brackets ('...”', '…)') is prose, not a truncated teaser (counting it too dropped 4 of
  1,646 documents of real books instead of 1: tests/test_filters_real_prose.py);
- the n-gram measures count the characters of the n-grams as datatrove joins them (words and the single
  spaces between them) over all characters of the text; characters covered by several occurrences are
  counted once, as the paper asks.
"""

from __future__ import annotations

import itertools

import numpy as np

from tokenmill.filters.params import GopherQuality, GopherRepetition
from tokenmill.filters.text import Measure, Text, find_duplicates, measure, ratio


TOP_NGRAMS = (2, 3, 4)
DUP_NGRAMS = (5, 6, 7, 8, 9, 10)


def quality(t: Text, cfg: GopherQuality) -> list[Measure]:
    words = t.words
    n = len(words)
    lines = t.nonempty_lines
    stop = set(cfg.stop_words)
    bullets = tuple(cfg.bullets)
    text = t.text
    return [
        measure("gopher_word_count", n, cfg.min_words, cfg.max_words),
        measure("gopher_mean_word_length", ratio(t.word_chars, n),
                cfg.min_mean_word_length, cfg.max_mean_word_length),
        measure("gopher_hash_word_ratio", ratio(text.count("#"), n), hi=cfg.max_hash_word_ratio),
        measure("gopher_ellipsis_word_ratio", ratio(text.count("...") + text.count("…"), n),
                hi=cfg.max_ellipsis_word_ratio),
        measure("gopher_bullet_line_frac", ratio(sum(s.startswith(bullets) for s in lines), len(lines)),
                hi=cfg.max_bullet_line_frac),
        measure("gopher_ellipsis_line_frac",
                ratio(sum(s.endswith(("...", "…")) for s in lines), len(lines)), hi=cfg.max_ellipsis_line_frac),
        # Our words are never pure punctuation, so this is mostly the share of words that are not numbers.
        measure("gopher_alpha_word_frac", ratio(sum(map(_has_alpha, words)), n),
                lo=cfg.min_alpha_word_frac),
        measure("gopher_stop_words", sum(w.lower() in stop for w in words), lo=cfg.min_stop_words),
    ]


def _has_alpha(word: str) -> bool:
    return word.isalpha() or any(c.isalpha() for c in word)


def repetition(t: Text, cfg: GopherRepetition) -> list[Measure]:
    out = []
    paras = t.paragraphs
    n_dup, dup_chars = find_duplicates(paras)
    out.append(measure("gopher_dup_para_frac", ratio(n_dup, len(paras)), hi=cfg.max_dup_para_frac))
    out.append(measure("gopher_dup_para_char_frac", ratio(dup_chars, sum(map(len, paras))),
                       hi=cfg.max_dup_para_char_frac))
    lines = t.nonempty_lines
    n_dup, dup_chars = find_duplicates(lines)
    out.append(measure("gopher_dup_line_frac", ratio(n_dup, len(lines)), hi=cfg.max_dup_line_frac))
    out.append(measure("gopher_dup_line_char_frac", ratio(dup_chars, sum(map(len, lines))),
                       hi=cfg.max_dup_line_char_frac))
    top, dup = ngram_char_fractions(t.words, len(t.text))
    for k in TOP_NGRAMS:
        out.append(measure(f"gopher_top_{k}gram_char_frac", top[k], hi=getattr(cfg, f"max_top_{k}gram_char_frac")))
    for k in DUP_NGRAMS:
        out.append(measure(f"gopher_dup_{k}gram_char_frac", dup[k], hi=getattr(cfg, f"max_dup_{k}gram_char_frac")))
    return out


# An odd 64-bit multiplier for the polynomial n-gram hash (arithmetic wraps modulo 2**64). Two distinct
# n-grams of one document sharing a hash is a ~N**2 / 2**64 event: negligible next to the thresholds.
_MULT = np.uint64(0x9E3779B97F4A7C15)


def ngram_char_fractions(words: list[str], text_chars: int) -> tuple[dict[int, float], dict[int, float]]:
    """({2,3,4: top n-gram char fraction}, {5..10: duplicated n-gram char fraction}), vectorised.

    top: characters covered by occurrences of the most frequent n-gram (only if it occurs twice or more).
    dup: characters covered by n-grams that repeat an earlier n-gram (first occurrences not counted, as in
    datatrove's find_all_duplicate, which skips ahead by n after a repeat instead of marking coverage).
    Words are compared case-sensitively, as datatrove does.
    """
    top = {k: 0.0 for k in TOP_NGRAMS}
    dup = {k: 0.0 for k in DUP_NGRAMS}
    n = len(words)
    if n < 2 or text_chars <= 0:
        return top, dup
    # Equal words get equal ids (setdefault keeps the first id it was given); ids are never 0.
    vocab: dict[str, int] = {}
    ids = np.fromiter(map(vocab.setdefault, words, itertools.count(1)), dtype=np.uint64, count=n)
    lens = np.fromiter(map(len, words), dtype=np.int64, count=n)
    h = ids
    with np.errstate(over="ignore"):
        for k in range(2, max(DUP_NGRAMS) + 1):
            if n < k:
                break
            h = h[:-1] * _MULT + ids[k - 1:]  # hash of words[i : i + k] for i in 0 .. n - k
            order, starts, sizes, first = _group(h)
            if k in top:
                best = int(sizes.max())
                if best >= 2:
                    # The most frequent n-gram; ties go to the longer one, then to the one seen first.
                    cands = np.flatnonzero(sizes == best)
                    if len(cands) > 1:
                        chars = np.concatenate(([0], np.cumsum(lens)))
                        f = first[cands]
                        cands = cands[np.lexsort((f, -(chars[f + k] - chars[f])))]
                    g = int(cands[0])
                    spans = order[starts[g]: starts[g] + sizes[g]]
                    top[k] = min(1.0, _covered(spans, k, lens, n) / text_chars)
            if k in dup:
                # A position repeats an earlier n-gram unless it is the first position of its group.
                first_of = np.repeat(first, sizes)  # aligned with order
                spans = order[order != first_of]
                if len(spans):
                    dup[k] = min(1.0, _covered(spans, k, lens, n) / text_chars)
    return top, dup


def _group(h: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Positions grouped by equal value: (order, group starts in order, group sizes, first position of each
    group). One unstable argsort; what np.unique(return_index, return_inverse, return_counts) gives, at
    about half the cost (np.unique sorts stably to find first indices)."""
    order = np.argsort(h)
    s = h[order]
    new = np.empty(len(s), dtype=bool)
    new[0] = True
    np.not_equal(s[1:], s[:-1], out=new[1:])
    starts = np.flatnonzero(new)
    sizes = np.diff(np.append(starts, len(s)))
    first = np.minimum.reduceat(order, starts)
    return order, starts, sizes, first


def _covered(starts: np.ndarray, k: int, lens: np.ndarray, n: int) -> int:
    """Characters of the spans words[s : s + k] for s in starts, each span joined with single spaces as
    datatrove joins n-grams; characters under several spans are counted once."""
    begins = np.zeros(n + 1, dtype=np.int64)
    begins[starts] = 1  # starts are distinct positions
    d = begins.copy()
    d[starts + k] -= 1
    depth = np.cumsum(d[:n])  # spans covering each word
    # The space between words i and i+1 is in a span when a span covers i+1 without starting there.
    inner = (depth[1:] - begins[1:n]) > 0
    return int(lens[depth > 0].sum() + inner.sum())
