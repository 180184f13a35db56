"""The batched MinHash against independent references, on real multilingual text.

References: `minhash.words` / `minhash.shingles` (Python's `re` `\\w+` on `str.lower()`, one document at a
time) and datasketch's MinHash fed those shingles. The batched signatures tokenise with a code-point table
instead of the regex, hash words from prefix sums and cut long documents into pieces: any difference in
words, word order, document bounds or shingle hashing changes a signature here.

Text: the Universal Declaration of Human Rights in 387 languages (../shared/data/text/multilingual/udhr2),
Gutenberg paragraphs for estimates.
"""

from __future__ import annotations

import gzip
import re
from pathlib import Path

import numpy as np
import pytest

from tokenmill.dedup import minhash
from conftest import missing_shared_data  # skips, or fails under CI=true

SHARED = Path(__file__).resolve().parents[1] / ".." / "shared" / "data"
UDHR = SHARED / "text" / "multilingual" / "udhr2"


@pytest.fixture(scope="module")
def udhr() -> dict[str, str]:
    files = sorted(UDHR.glob("*.txt"))
    if not files:
        missing_shared_data(f"UDHR texts under {UDHR}")
    return {f.stem: f.read_text(encoding="utf-8", errors="replace") for f in files}


def datasketch_signature(text: str, ngram: int = 5, num_perm: int = 128, seed: int = 1) -> np.ndarray:
    from datasketch import MinHash

    m = MinHash(num_perm=num_perm, seed=seed, hashfunc=minhash.shingle_hash32)
    for sh in minhash.shingles(text, ngram):
        m.update(sh)
    return m.hashvalues


def test_udhr_every_language_equals_datasketch_over_regex_shingles(udhr):
    # The first 1,500 characters of every language (the reference hashes one shingle per call: ~25 µs each).
    # They hold Greek capitals with final sigma (ell_*), Turkish dotted capital I (tur, gag, azj_latn), CJK,
    # Thai and Devanagari without spaces between some words, Arabic, Cyrillic ...
    names = sorted(udhr)
    assert len(names) >= 380 and {"ell_monotonic", "tur"} <= set(names)
    whole = {"ell_monotonic", "tur"}  # all of these two: their capitals Σ and İ come later in the text
    texts = [udhr[n] if n in whole else udhr[n][:1500] for n in names]
    assert "Σ" in udhr["ell_monotonic"] and "İ" in udhr["tur"]
    sigs = minhash.signatures(texts)
    wrong = [n for n, t, s in zip(names, texts, sigs) if not np.array_equal(s, datasketch_signature(t))]
    assert not wrong, wrong[:10]


def test_word_hashes_follow_the_regex_words(udhr):
    """Per document: as many word hashes as regex words, and equal words hash equally (the first
    occurrence of each distinct word maps to one hash and no two distinct words share one)."""
    for name, text in list(udhr.items())[::5]:
        ref = minhash.words(text)
        wh, counts = minhash._batch_word_hashes([text, "", text[: len(text) // 2]])
        assert counts[0] == len(ref) and counts[1] == 0, name
        mine = wh[: len(ref)]
        by_word: dict[str, int] = {}
        for w, h in zip(ref, mine.tolist()):
            assert by_word.setdefault(w, h) == h, (name, w)
        assert len(set(by_word.values())) == len(by_word), name


def test_context_dependent_lower_case_matches_python():
    # Σ lowers to ς at the end of a word and σ elsewhere; İ lowers to two characters (i + U+0307, which is not
    # a word character: the regex splits there). Characters above U+FFFF: Deseret capitals lower-case.
    texts = ["ΟΔΥΣΣΕΥΣ ΚΑΙ ΣΙΣΥΦΟΣ ΣΤΗΝ ΟΔΟ ΑΣΤΕΡΟΣ ΛΟΓΟΣ ΚΟΣΜΟΣ",
             "İSTANBUL İZMİR DİYARBAKIR ŞANLIURFA ESKİŞEHİR KIRIKKALE",
             "𐐔𐐯𐑅𐐨𐑉𐐯𐐻 𐐀𐐢𐐊 text with 𝔉𝔯𝔞𝔨𝔱𝔲𝔯 letters and emoji 😀 between words here",
             "plain ascii words only, with punctuation; and numbers 12 345"]
    sigs = minhash.signatures(texts, ngram=2)
    for text, sig in zip(texts, sigs):
        assert np.array_equal(sig, datasketch_signature(text, ngram=2)), text
    assert minhash.words(texts[0])[0] == "οδυσσευς"  # the reference itself: final sigma


def test_long_documents_and_small_batches_equal_datasketch(udhr, monkeypatch):
    """Batches cut at document bounds and long documents cut into pieces at whitespace (forced small here)
    give the signatures of whole documents."""
    monkeypatch.setattr(minhash, "_BATCH_CHARS", 3000)
    monkeypatch.setattr(minhash, "_BLOCK", 300)
    texts = [udhr[n][:9000] for n in sorted(udhr)[:24]] + ["", "one", "two words", "x" * 7000 + " tail words of it", "  \n "]
    sigs = minhash.signatures(texts, ngram=3, num_perm=64, seed=7)
    for text, sig in zip(texts, sigs):
        assert np.array_equal(sig, datasketch_signature(text, ngram=3, num_perm=64, seed=7)), text[:60]
    assert (sigs[-1] == minhash.MAX32).all() and (sigs[-4] != minhash.MAX32).all()


def test_estimates_track_true_jaccard_on_real_paragraphs():
    """Signatures of a paragraph and an edited copy estimate the true 5-gram Jaccard within the binomial
    error of 128 permutations (sd <= 0.045)."""
    books = sorted((SHARED / "text" / "gutenberg" / "en").glob("*.txt.gz"))[:3]
    if not books:
        missing_shared_data("Gutenberg books under ../shared/data/text/gutenberg/en")
    paras = []
    for path in books:
        text = gzip.decompress(path.read_bytes()).decode("utf-8", "replace")
        paras += [" ".join(p.split()) for p in re.split(r"\n\s*\n", text) if len(p.split()) >= 80]
    rng = np.random.default_rng(3)
    base = paras[:300]
    edited = []
    for p in base:
        w = p.split()
        for i in rng.choice(len(w), size=int(len(w) * rng.uniform(0, 0.1)), replace=False):
            w[i] = "zq" + w[i]
        edited.append(" ".join(w))
    sa, sb = minhash.signatures(base), minhash.signatures(edited)
    est = minhash.jaccard_estimate(sa, sb)
    truth = np.array([len(set(minhash.shingles(a)) & set(minhash.shingles(b))) /
                      len(set(minhash.shingles(a)) | set(minhash.shingles(b))) for a, b in zip(base, edited)])
    err = est - truth
    sd = np.sqrt(truth * (1 - truth) / 128)
    assert abs(err.mean()) < 0.01  # unbiased
    assert (np.abs(err) <= 4 * sd + 1 / 128).mean() >= 0.995
    assert truth.min() < 0.6 and truth.max() == 1.0
