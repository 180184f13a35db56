"""Normalised words, the benchmark index, and alignment of documents with benchmark items.

Normalisation: Unicode NFKC, lower case, apostrophes deleted ("don't" -> "dont", "Janet's" -> "janets"),
every other punctuation or symbol character (Unicode categories P* and S*) a space, then words are the runs
between spaces. Replacing rather than deleting makes "well-known", "well - known", WikiText's
"well @-@ known" and a line wrapped at the hyphen all the same two words (WikiText's "fox 's" is rejoined
to "fox's"). Newlines are whitespace, so text re-wrapped into short lines, split into paragraphs or
re-cased gives the same words as the original. Scripts written without spaces (Chinese, Japanese, Thai,
Lao, Khmer, Myanmar) count each character as a word, so a line break inside a sentence does not split a
"word".

A copy that lost its punctuation another way ("dik-dik" -> "dikdik", "3*3=9" -> "339", "don't" -> "don t")
does not give the words above, so each item is indexed in up to five forms (`item_forms`): punctuation as
spaces; deleted; ASCII punctuation deleted; every non-word character deleted (combining marks too) but
underscores kept; as spaces, apostrophes included. An item's overlap is that of its best-matched form.
Documents are normalised once, the first way: a document already stripped of punctuation reads the same
whichever way it is normalised.

Hashing, in numpy over a batch of texts (no Python per word): a word's 64-bit hash is a polynomial over its
code points from one cumulative sum (_hash_words); an n-gram's hash is h(w1..wn) = sum h(wi) * P^(n-i)
mod 2^64 (window_hashes). Hashes are stable across processes and machines, so index and documents may be
hashed anywhere. Matching (NgramIndex) is seed and extend: see there.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Iterable

import numpy as np

from tokenmill.rolling import span_sums
from tokenmill.textcut import whitespace_pieces

P = np.uint64(0x9E3779B97F4A7C15)  # odd: multiplication by it is a bijection mod 2^64
_APOSTROPHES = "'\u2018\u2019\u02bc\uff07"
_NO_SPACES = re.compile("[\u0e00-\u0eff\u1000-\u109f\u1780-\u17ff\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff"
                        "\uf900-\ufaff\U00020000-\U0003ffff]")


# How a copy may have lost its punctuation (see item_forms); documents are read the first way.
MODES = ("space", "delete", "delete_ascii", "delete_nonword", "space_apostrophes")


@lru_cache(maxsize=1)
def _punctuation() -> tuple[int, ...]:
    # Unicode has no punctuation or symbol above U+1FFFF: scanning planes 0-1 takes 0.1 s, all 17 take 0.7 s.
    return tuple(cp for cp in range(0x20000) if unicodedata.category(chr(cp))[0] in "PS")


@lru_cache(maxsize=1)
def _non_word() -> tuple[int, ...]:
    """Code points that are neither word characters (regex \\w) nor whitespace: planes 0-1 and the tags and
    variation selectors of plane 14 (planes 2-3 are ideographs, all word characters)."""
    word = re.compile(r"[\w\s]").match
    return tuple(cp for cp in (*range(0x20000), *range(0xE0000, 0xE0200)) if not word(chr(cp)))


@lru_cache(maxsize=len(MODES))
def _tables(mode: str) -> tuple[dict[int, str | None], bytes, bytes]:
    """(str.translate table, bytes map and bytes to delete for ASCII text) for one mode."""
    table: dict[int, str | None] = {
        cp: " " if mode.startswith("space") or (mode == "delete_ascii" and cp >= 128) else None
        for cp in _punctuation()}
    if mode == "delete_nonword":
        # re.sub(r"[^\w\s]", "", t) also deletes combining marks (Arabic harakat, Devanagari vowel signs)
        table.update((cp, None) for cp in _non_word())
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
    # The checks before the work, measured on the 2,798 documents (12.3 M characters) of bench_decontam:
    # is_normalized 0.011 CPU-s where normalize took 0.026 (most text already is NFKC); a one-character
    # search (memchr) before the two-character ones, 0.014 where these alone took 0.025.
    if not text.isascii() and not unicodedata.is_normalized("NFKC", text):
        text = unicodedata.normalize("NFKC", text).lower()  # compatibility forms may be capitals ("Ⅻ" -> "XII")
    if ("'" in text and (" '" in text or " n'" in text)) or \
            ("\u2019" in text and (" \u2019" in text or " n\u2019" in text)):
        text = _CLITIC.sub(r"\1", text)
    return text


# --- words as code-point runs, in numpy -----------------------------------------------------------------
# Each mode is a table: what each code point of the Basic Multilingual Plane does to the words. A text (or a
# batch of texts joined by newlines) is one array of code points; deleted ones are dropped, and a word is a
# run of kept code points, or one code point of a script written without spaces. No Python runs per word:
# measured on 4,000-character WikiText documents, str.translate with the mode's dict took 166 µs per
# document and a regex over the punctuation classes 1,062 µs; this path about 20 µs.

_BIT = np.array([1 << i for i in range(8)], np.uint8)
KEEP, SPACE, DELETE, ISOLATE, ELSEWHERE = 0, 1, 2, 3, 4  # ELSEWHERE: above the plane, looked up one by one
_NO_SPACE_RANGES = ((0x0E00, 0x0EFF), (0x1000, 0x109F), (0x1780, 0x17FF), (0x3040, 0x30FF), (0x3400, 0x4DBF),
                    (0x4E00, 0x9FFF), (0xF900, 0xFAFF))  # _NO_SPACES within the plane
_BATCH_CHARS = 1 << 18  # characters per segmentation call (texts joined): ~40 bytes of arrays per character


@lru_cache(maxsize=len(MODES))
def _actions(mode: str) -> np.ndarray:
    table = _tables(mode)[0]
    act = np.zeros(0x10000, np.uint8)
    for cp, rep in table.items():
        if cp < 0x10000:
            act[cp] = SPACE if rep == " " else DELETE
    act[[cp for cp in range(0x10000) if chr(cp).isspace()]] = SPACE
    for lo, hi in _NO_SPACE_RANGES:
        part = act[lo:hi + 1]
        part[part == KEEP] = ISOLATE
    act[0xFFFF] = ELSEWHERE
    act.setflags(write=False)
    return act


@lru_cache(maxsize=len(MODES))
def _few_deleted(mode: str) -> str | None:
    """The characters a mode deletes, when they are few (the apostrophes of "space"), else None."""
    deleted = [chr(cp) for cp, rep in _tables(mode)[0].items() if rep is None]
    return "".join(deleted) if len(deleted) <= 8 else None


def _action_above(cp: int, mode: str) -> int:
    ch = chr(cp)
    rep = _tables(mode)[0].get(cp, ch)
    if rep == " " or ch.isspace():
        return SPACE
    if rep is None:
        return DELETE
    return ISOLATE if _NO_SPACES.match(ch) else KEEP


def _segment(joined: str, mode: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
    """(code points left after deletions; start and end (exclusive) of each word in them; where each kept
    code point was in `joined`, or None when nothing was deleted) for prepared text."""
    ascii_only = joined.isascii()
    if ascii_only:  # no script without spaces and nothing above the plane: fewer passes
        cp = np.frombuffer(joined.encode("ascii"), np.uint8)
        act = _actions(mode)[cp]
    else:
        if joined.endswith("\0"):  # numpy's str dtype would drop trailing NULs
            cp = np.frombuffer(joined.encode("utf-32-le", "surrogatepass"), np.uint32)
        else:  # twice as fast as encoding to UTF-32 (4 vs 8 µs for 4,000 characters)
            cp = np.array(joined).reshape(1).view(np.uint32)
        act = _actions(mode)[np.minimum(cp, 0xFFFF)]
        above = np.flatnonzero(act == ELSEWHERE)
        if len(above):
            distinct, inverse = np.unique(cp[above], return_inverse=True)
            act = act.copy()
            act[above] = np.array([_action_above(c, mode) for c in distinct.tolist()], np.uint8)[inverse]
    where = None
    few = _few_deleted(mode)  # a str search for them is cheaper than a pass over the array
    if any(c in joined for c in few) if few is not None else (act == DELETE).any():
        # "don't" -> "dont": the word continues across a deleted character
        keep = np.flatnonzero(act != DELETE)
        cp, act, where = cp[keep], act[keep], keep
    word = act != SPACE
    start, end = word.copy(), word.copy()
    start[1:] &= ~word[:-1]
    end[:-1] &= ~word[1:]
    if not ascii_only:  # a character of a script without spaces is a word of its own
        iso = act == ISOLATE
        if iso.any():
            start[1:] |= word[1:] & (iso[1:] | iso[:-1])
            end[:-1] |= word[:-1] & (iso[:-1] | iso[1:])
    return cp, np.flatnonzero(start), np.flatnonzero(end) + 1, where


def _hash_words(cp: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """64-bit hash of each word cp[starts[i]:ends[i]]: its rolling sum (tokenmill.rolling) + its length, then
    mixed."""
    if not len(starts):
        return np.empty(0, np.uint64)
    h = span_sums(cp, starts, ends)
    h += (ends - starts).astype(np.uint64)
    h ^= h >> np.uint64(31)  # one round of a 64-bit mixer: every bit of the sum reaches the top bits
    h *= np.uint64(0xBF58476D1CE4E5B9)
    h ^= h >> np.uint64(29)
    return h


def hash_texts(prepared: list[str], mode: str = "space") -> tuple[np.ndarray, np.ndarray]:
    """(hash of every word of the prepared texts, in order; words per text), texts segmented together in
    batches of about _BATCH_CHARS characters (a longer text alone, piece by piece)."""
    hashes, counts = [], []
    lo = 0
    while lo < len(prepared):
        if len(prepared[lo]) > _BATCH_CHARS:
            parts = [_hash_words(*_segment(p, mode)[:3]) for p in whitespace_pieces(prepared[lo], _BATCH_CHARS)]
            hashes.extend(parts)
            counts.append(np.array([sum(map(len, parts))], np.int64))
            lo += 1
            continue
        hi, size = lo, 0
        while hi < len(prepared) and len(prepared[hi]) <= _BATCH_CHARS and size + len(prepared[hi]) <= _BATCH_CHARS:
            size += len(prepared[hi]) + 1
            hi += 1
        joined = "\n".join(prepared[lo:hi])  # a newline is a space in every mode: words never join across
        cp, starts, ends, where = _segment(joined, mode)
        hashes.append(_hash_words(cp, starts, ends))
        first = starts if where is None else where[starts]
        bounds = np.cumsum(np.fromiter(map(len, prepared[lo:hi]), np.int64, hi - lo) + 1)
        counts.append(np.bincount(np.searchsorted(bounds, first, side="right"), minlength=hi - lo)[:hi - lo])
        lo = hi
    if not hashes:
        return np.empty(0, np.uint64), np.empty(0, np.int64)
    return np.concatenate(hashes), np.concatenate(counts)


def text_hashes(text: str, mode: str = "space") -> np.ndarray:
    """The word hashes of one text, as documents are read."""
    return hash_texts([_prepare(text)], mode)[0]


def normalize(text: str, mode: str = "space") -> list[str]:
    """The normalised words of `text` (what text_hashes hashes), as strings."""
    cp, starts, ends, _ = _segment(_prepare(text), mode)
    flat = cp.astype(np.uint32).tobytes().decode("utf-32-le", "surrogatepass")
    return [flat[a:b] for a, b in zip(starts.tolist(), ends.tolist())]


def item_forms(texts: list[str]) -> list[list[np.ndarray]]:
    """For each text, the distinct word-hash sequences a copy of it normalises to, depending on how the copy
    lost its punctuation: none lost or replaced by spaces; all deleted; only ASCII punctuation deleted
    (Python's string.punctuation, the usual recipe); every non-word character deleted but underscores kept
    (re.sub(r"[^\\w\\s]", "", t), which leaves code identifiers whole and strips Arabic vowel marks); all
    replaced by spaces, apostrophes too ("don t"). The first is how documents are read."""
    prepared = [_prepare(t) for t in texts]
    per_mode = []
    for mode in MODES:
        h, counts = hash_texts(prepared, mode)
        per_mode.append(np.split(h, np.cumsum(counts)[:-1]) if len(texts) else [])
    out = []
    for i in range(len(texts)):
        forms, seen = [], set()
        for m in range(len(MODES)):
            f = per_mode[m][i]
            key = f.tobytes()
            if key not in seen:
                seen.add(key)
                forms.append(f)
        out.append(forms)
    return out


def window_hashes(wh: np.ndarray, n: int) -> np.ndarray:
    """Hash of every n-word window of a word-hash sequence (len(wh) - n + 1 of them; none if shorter):
    h(w1..wn) = sum h(wi) * P^(n-i) mod 2^64, by n - 1 vector operations."""
    if len(wh) < n:
        return np.empty(0, np.uint64)
    h = wh[:len(wh) - n + 1].copy()
    for k in range(1, n):
        h *= P
        h += wh[k:len(wh) - n + 1 + k]
    return h


def _segments(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Concatenated aranges [starts[i], starts[i] + lengths[i]) without a Python loop."""
    total = int(lengths.sum())
    if not total:
        return np.empty(0, np.int64)
    offsets = np.concatenate(([0], np.cumsum(lengths)[:-1]))
    return np.repeat(starts - offsets, lengths) + np.arange(total)


@dataclass
class NgramIndex:
    """Benchmark items as word-hash sequences ("forms"), and their seed n-grams.

    Matching is seed and extend, as in sequence alignment: a document's n-grams found in the index propose
    (form, diagonal) pairs, diagonal = document position - form position; the form's words are then compared
    with the document's words along those diagonals, so a copy with a word replaced every ten words still
    matches nine words in ten, where every n-gram spanning an edit is lost. Diagonals of one form within
    `slack` words of each other are one candidate (words inserted or merged in the copy shift the
    diagonal): a form position counts as matched when the document has the same word on any of them.

    Template n-grams, those of at least `template_items` distinct items ("For which of these two scenarios
    does the main character ..." in 895 MMLU items, "Which of the following is"), are not seeds, and form
    positions that only template n-grams cover count neither as matched nor in the form's size: the template
    alone matches nothing, and an item is matched by its own words.
    """

    n: int
    slack: int
    keys: np.ndarray  # uint64, sorted, distinct seed n-gram hashes
    offsets: np.ndarray  # int64, len(keys) + 1: postings of keys[i] are [offsets[i], offsets[i+1])
    post_form: np.ndarray  # int32: form of each posting
    post_pos: np.ndarray  # int32: position of the n-gram in the form
    word_hash: np.ndarray  # uint64: the words of every form, concatenated
    specific: np.ndarray  # bool, aligned with word_hash: covered by a non-template n-gram of the form
    form_start: np.ndarray  # int64: first word of each form in word_hash
    form_len: np.ndarray  # int64
    form_size: np.ndarray  # int64: specific positions of each form (the overlap fraction's denominator)
    form_seeds: np.ndarray  # int64: seed n-grams of each form
    form_item: np.ndarray  # int64: form -> item number
    items: list[tuple[str, str]]  # item number -> (benchmark, item id)
    stats: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        # A prefilter on the top bits of the hash: a bitset of about 32 bits per key (8 MB for 2M keys), so
        # ~3% of a document's n-grams that are not seeds pass to the lookup. Measured on 495 4,000-character
        # documents against the 2M seeds of all benchmarks: a byte per slot and 8 slots per key let 12%
        # pass, and their binary searches (cache misses in 16 MB of keys) took 57 µs per document.
        bits = int(min(32, max(12, np.ceil(np.log2(max(len(self.keys), 1))) + 5)))
        self._shift = np.uint64(64 - bits)
        slots = (self.keys >> self._shift).astype(np.int64)
        self._filter = np.zeros(1 << (bits - 3), dtype=np.uint8)
        np.bitwise_or.at(self._filter, slots >> 3, (1 << (slots & 7)).astype(np.uint8))
        self._specific_hash = np.where(self.specific, self.word_hash, np.uint64(0))
        # The lookup: keys are sorted, so the keys whose top `bucket_bits` bits are b are
        # keys[bucket[b]:bucket[b + 1]], about one each; two memory accesses per query where a binary
        # search over all keys makes ~20, most of them cache misses.
        self._bucket_bits = int(max(1, min(30, np.ceil(np.log2(max(len(self.keys), 2))))))
        self._bucket_shift = np.uint64(64 - self._bucket_bits)
        self._bucket = np.searchsorted(self.keys >> self._bucket_shift,
                                       np.arange((1 << self._bucket_bits) + 1, dtype=np.uint64)).astype(np.int64)

    def _maybe(self, grams: np.ndarray) -> np.ndarray:
        """Positions of the n-grams that may be seeds (all seeds, and ~3% of others)."""
        slot = grams >> self._shift
        byte = self._filter[slot >> np.uint64(3)]
        return np.flatnonzero(byte & _BIT[slot & np.uint64(7)])

    def _find(self, grams: np.ndarray) -> np.ndarray:
        """Index of each gram in keys, or -1."""
        b = (grams >> self._bucket_shift).astype(np.int64)
        lo, hi = self._bucket[b], self._bucket[b + 1]
        found = np.full(len(grams), -1, np.int64)
        for j in range(4):  # buckets hold ~1 key: 4 tries, then a binary search for the rest
            at = lo + j
            open_ = at < hi
            if not open_.any():
                return found
            ok = open_ & (self.keys[np.minimum(at, len(self.keys) - 1)] == grams)
            found[ok] = at[ok]
        rest = np.flatnonzero((found < 0) & (lo + 4 < hi))
        if len(rest):
            pos = np.minimum(np.searchsorted(self.keys, grams[rest]), len(self.keys) - 1)
            found[rest] = np.where(self.keys[pos] == grams[rest], pos, -1)
        return found

    @classmethod
    def build(cls, items: Iterable[tuple[str, str, str, str | None]], n: int = 5, min_item_words: int = 8,
              template_items: int = 10, slack: int = 8) -> "NgramIndex":
        """items: (benchmark, item id, text, prompt or None). An item is indexed in each of its distinct
        normalised forms (item_forms) and, when its prompt alone has min_item_words, in the prompt's form:
        a page quoting a GSM8K question without its worked answer holds all of that form."""
        names: list[tuple[str, str]] = []
        seen: set[tuple[str, str]] = set()
        per_benchmark: dict[str, dict[str, int]] = {}
        todo: list[tuple[str, str, str, str | None]] = []
        for bench, item_id, text, prompt in items:
            st = per_benchmark.setdefault(bench, {"items": 0, "indexed": 0, "too_short": 0, "repeated": 0,
                                                  "template_only": 0})
            if (bench, item_id) in seen:  # the same record twice (item ids name content): one item
                st["repeated"] += 1
                continue
            seen.add((bench, item_id))
            st["items"] += 1
            todo.append((bench, item_id, text, prompt))
        all_forms = item_forms([t for _, _, t, _ in todo])
        prompts = [i for i, it in enumerate(todo) if it[3]]
        prompt_h, prompt_n = hash_texts([_prepare(todo[i][3]) for i in prompts])
        prompt_forms = dict(zip(prompts, np.split(prompt_h, np.cumsum(prompt_n)[:-1]) if prompts else []))
        forms: list[np.ndarray] = []
        form_owner: list[int] = []
        for i, (bench, item_id, _, _) in enumerate(todo):
            # A handful of words is common prose, not evidence of copying: an item is indexed when its first
            # form has min_item_words. Its other forms are shorter only where deleted punctuation merged
            # words ("1,2,3" -> "123"), and merged words are rarer, so they need half as many.
            canonical, *others = all_forms[i]
            if len(canonical) < min_item_words:
                per_benchmark[bench]["too_short"] += 1
                continue
            mine = [canonical] + [f for f in others if len(f) >= max(n, min_item_words // 2)]
            p = prompt_forms.get(i)
            if p is not None and len(p) >= min_item_words and all(p.tobytes() != f.tobytes() for f in mine):
                mine.append(p)
            forms.extend(f for f in mine if len(f) >= n)
            form_owner.extend(len(names) for f in mine if len(f) >= n)
            names.append((bench, item_id))
            per_benchmark[bench]["indexed"] += 1

        form_len = np.fromiter(map(len, forms), np.int64, len(forms))
        form_start = np.concatenate(([0], np.cumsum(form_len)[:-1])).astype(np.int64)
        form_item = np.asarray(form_owner, np.int64)
        word_hash = np.concatenate(forms) if forms else np.empty(0, np.uint64)
        # Every n-gram of every form: (hash, form, position), from one pass over the concatenated words.
        grams = window_hashes(word_hash, n)
        per_form = form_len - n + 1
        at = _segments(form_start, per_form)  # window starts that stay inside their form
        g_hash, g_form = grams[at], np.repeat(np.arange(len(forms), dtype=np.int64), per_form)
        g_pos = at - form_start[g_form]
        # Template n-grams: in at least template_items distinct items (of any benchmark). One argsort by hash
        # (0.3 s for 6M n-grams; a stable or two-key sort takes 0.8 s); the distinct items of each run of
        # equal hashes come from np.sort of (run, item) packed in one integer (0.04 s).
        by_hash = np.argsort(g_hash)
        sh = g_hash[by_hash]
        new_hash = np.concatenate(([True], sh[1:] != sh[:-1])) if len(sh) else np.empty(0, np.bool_)
        run = np.cumsum(new_hash) - 1
        packed = np.sort((run << 24) | form_item[g_form[by_hash]])  # < 2^24 items, < 2^39 runs
        distinct_pairs = packed[np.concatenate(([True], packed[1:] != packed[:-1]))] if len(packed) else packed
        df = np.bincount(distinct_pairs >> 24, minlength=int(run[-1]) + 1 if len(run) else 0)
        seed = np.empty(len(g_hash), np.bool_)
        seed[by_hash] = df[run] < template_items
        n_template = int((df >= template_items).sum())
        # Specific positions: covered by at least one seed n-gram of their form (difference array + cumsum).
        cover = np.bincount(at[seed], minlength=len(word_hash) + 1) - np.bincount(at[seed] + n, minlength=len(word_hash) + 1)
        specific = np.cumsum(cover[:-1]) > 0
        form_size = np.add.reduceat(specific.astype(np.int64), form_start) if len(forms) else np.empty(0, np.int64)
        # Forms with fewer specific words than an item needs are not matched (a template with a blank).
        weak = form_size < min_item_words
        seed &= ~weak[g_form]
        indexed_items = np.unique(form_item[~weak])
        for i in np.setdiff1d(np.arange(len(names)), indexed_items).tolist():
            st = per_benchmark[names[i][0]]
            st["template_only"] += 1
            st["indexed"] -= 1
        form_seeds = np.bincount(g_form[seed], minlength=len(forms)).astype(np.int64)
        # Seeds: CSR by hash, postings (form, position) in the order of the sort above.
        chosen = by_hash[seed[by_hash]]
        s_hash, s_form, s_pos = g_hash[chosen], g_form[chosen], g_pos[chosen]
        starts = np.flatnonzero(np.concatenate(([True], s_hash[1:] != s_hash[:-1]))) if len(s_hash) \
            else np.empty(0, np.int64)
        keys = s_hash[starts]
        offsets = np.append(starts, len(s_hash)).astype(np.int64)
        return cls(n=n, slack=slack, keys=keys, offsets=offsets, post_form=s_form.astype(np.int32),
                   post_pos=s_pos.astype(np.int32), word_hash=word_hash, specific=specific,
                   form_start=form_start, form_len=form_len, form_size=form_size, form_seeds=form_seeds,
                   form_item=form_item,
                   items=names,
                   stats={"benchmarks": per_benchmark, "items": int(len(indexed_items)), "forms": len(forms),
                          "keys": int(len(keys)), "template_ngrams": n_template})

    def match(self, doc: np.ndarray) -> "Matches":
        """Every item with a seed in one document (its word hashes: text_hashes); see match_many."""
        return self.match_many(doc, np.array([len(doc)], np.int64))

    def match_many(self, hashes: np.ndarray, counts: np.ndarray) -> "Matches":
        """Every (document, item) with a seed in the document, from the item's candidate (form and diagonals)
        with the largest matched fraction of the form's specific words. The documents' word hashes are
        concatenated (counts[j] words for document j): a batch costs about as many numpy calls as one
        document, which is what a document of a few thousand words costs (measured: ~60 calls, 130 µs, for
        one 4,000-character document alone)."""
        n = self.n
        if not len(self.keys) or len(hashes) < n:
            return Matches.empty()
        ends = np.cumsum(counts)
        grams = window_hashes(hashes, n)
        doc_of = np.repeat(np.arange(len(counts)), counts)
        where = self._maybe(grams)
        where = where[where + n <= ends[doc_of[where]]]  # windows inside one document
        if not len(where):
            return Matches.empty()
        pos = self._find(grams[where])
        hit = pos >= 0
        if not hit.any():
            return Matches.empty()
        p, k = where[hit], pos[hit]
        sizes = self.offsets[k + 1] - self.offsets[k]
        post = _segments(self.offsets[k], sizes)
        form = self.post_form[post].astype(np.int64)
        q = self.post_pos[post].astype(np.int64)
        diag = np.repeat(p, sizes) - q  # positions in the concatenation: one document each
        doc = np.repeat(doc_of[p], sizes)
        # Seed hits sorted by document, form, diagonal; a candidate is a run of one form's diagonals in one
        # document, each within slack of the previous one.
        order = np.lexsort((diag, form, doc))
        form, diag, doc, q = form[order], diag[order], doc[order], q[order]
        same_form = np.concatenate(([False], (form[1:] == form[:-1]) & (doc[1:] == doc[:-1])))
        new_cand = ~same_form
        new_cand[1:] |= diag[1:] - diag[:-1] > self.slack
        cand = np.cumsum(new_cand) - 1
        cand_form, cand_doc = form[new_cand], doc[new_cand]
        seeds = np.bincount(cand, minlength=len(cand_form))  # seed n-gram occurrences aligned with it
        # Extend: compare every position of the form with the document's word on each distinct diagonal.
        pair = ~same_form
        pair[1:] |= diag[1:] != diag[:-1]
        pf, pd, pc, pdoc = form[pair], diag[pair], cand[pair], doc[pair]
        # The form positions q whose diagonal position q + d lies inside the document: [q_lo, q_hi).
        q_lo = np.maximum(ends[pdoc] - counts[pdoc] - pd, 0)
        q_hi = np.minimum(ends[pdoc] - pd, self.form_len[pf])
        lens = np.maximum(q_hi - q_lo, 0)
        at = _segments(self.form_start[pf] + q_lo, lens)  # index into word_hash, per (pair, position)
        fq = at - np.repeat(self.form_start[pf], lens)
        # Template positions hold 0 in _specific_hash, which no document word hashes to (odds 2^-64).
        same = hashes[fq + np.repeat(pd, lens)] == self._specific_hash[at]
        # A position is matched when the document has its word on any diagonal of the candidate, and a seed
        # of the candidate covers it or lies fewer than n words away: a word between two seeds, or before
        # the first one, where an edit broke every n-gram. Equal words far from any seed are chance (the,
        # of, and: measured, a 270-word MMLU passage aligned 33 words with an unrelated 1797 speech that way).
        cand_len = self.form_len[cand_form]
        cand_start = np.concatenate(([0], np.cumsum(cand_len)[:-1]))
        total = int(cand_len.sum())
        matched_slot = np.zeros(total, np.bool_)
        matched_slot[(np.repeat(cand_start[pc], lens) + fq)[same]] = True
        # Slots within n - 1 of a covered slot (inside a seed n-gram of the candidate): each seed hit at slot q
        # reaches [q - n + 1, q + 2n - 2], clipped to its candidate (its n-gram lies inside it). One difference
        # array, where covered slots, their prefix sums and per-slot candidate bounds took ten passes over the
        # slots (measured: match_many over bench_decontam's 2,798 documents 0.13 -> 0.09-0.10 CPU-s).
        seed_at = cand_start[cand] + q  # slot of each seed hit's first word
        reach_lo = np.maximum(seed_at - (n - 1), cand_start[cand])
        reach_hi = np.minimum(seed_at + 2 * n - 1, cand_start[cand] + cand_len[cand])
        near = np.cumsum(np.bincount(reach_lo, minlength=total + 1)[:total]
                         - np.bincount(reach_hi, minlength=total + 1)[:total]) > 0
        matched_slot &= near
        matched = np.add.reduceat(matched_slot.astype(np.int64), cand_start)
        items, size = self.form_item[cand_form], self.form_size[cand_form]
        # Per (document, item), the candidate with the highest fraction (then the most matches).
        order = np.lexsort((-matched, -matched / size, items, cand_doc))
        key_doc, key_item = cand_doc[order], items[order]
        first = order[np.concatenate(([True], (key_item[1:] != key_item[:-1]) | (key_doc[1:] != key_doc[:-1])))]
        return Matches(items[first], matched[first], size[first], seeds[first],
                       self.form_seeds[cand_form[first]], cand_doc[first])


@dataclass
class Matches:
    """Per matched (document, item), sorted by document (numbers into the batch and NgramIndex.items): the
    best candidate's matched and specific words, and the seed n-grams found on its diagonals and in its
    form."""

    items: np.ndarray
    matched: np.ndarray
    size: np.ndarray
    seeds: np.ndarray
    form_seeds: np.ndarray
    docs: np.ndarray

    @classmethod
    def empty(cls) -> "Matches":
        e = np.empty(0, np.int64)
        return cls(e, e, e, e, e, e)
