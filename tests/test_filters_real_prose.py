"""Every heuristic rule group over real, clean prose: what each rule drops of books, news and Wikipedia.

The text is read in place from ../shared/data/text (SOURCES.md there), built by
benchmarks/filters_real_prose.py (which writes the same table into RESULTS.md, "Filters on real prose"):
- books: the 43 English Project Gutenberg books, body only (between the START and END markers), each
  paragraph unwrapped to one line as a web page shows it, cut into documents of >= 400 words at paragraph
  boundaries; up to 40 evenly spaced documents per book (1,646);
- news: ABC rural and science news (nltk_abc), blank-line-separated stories joined up to >= 200 words (1,871);
- wikipedia: the WikiText-2 raw test articles, one document per article (62).
This is prose anyone would keep. Where a rule drops some of it, the allowance below says why (a real
property of those documents: front matter, a stub, a repeated refrain); everything else must be kept.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import yaml

from tokenmill.filters import c4
from tokenmill.filters.params import Filter
from tokenmill.filters.fineweb import ends_punctuated

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import filters_real_prose as frp  # noqa: E402  (the corpora and the counting live beside the benchmark)

CONF = yaml.safe_load((ROOT / "conf" / "filter" / "default.yaml").read_text())

# The most documents each rule may drop per corpus (rules and corpora not listed: none). Measured with the
# shipped conf (2026-11) and one document of room. News: nothing.
ALLOWED: dict[str, dict[str, int]] = {
    # Transcribed Gutenberg books carry page numbers as "{20}" in the text; C4 drops pages with "{".
    "c4_curly_brace_lines": {"books": 32},
    # Title pages and tables of contents (no sentences); Huckleberry Finn's and Dumas' long paragraphs that
    # end in ":" or a dash to introduce speech (C4's line rule removes such lines too: its end marks are
    # . ? ! "); ellipses ending a line ("....") and tables. Never a quote or a bracket: see the test below.
    "c4_terminal_punct_char_frac": {"books": 33, "wikipedia": 1},
    "c4_sentences": {"books": 9, "wikipedia": 1},
    # Front matter: title pages, contents lists, "CHAPTER I" lines.
    "fineweb_line_punct_ratio": {"books": 7, "wikipedia": 1},
    "fineweb_short_line_ratio": {"books": 7},
    "fineweb_newline_word_ratio": {"books": 6},
    # FineWeb's 1% duplicated-line rule: a refrain, a repeated "CHAPTER" heading, a repeated line of verse.
    "fineweb_char_dup_ratio": {"books": 28, "wikipedia": 2},
    # Tables of type sizes and prices in technical books, a contents page.
    "gopher_alpha_word_frac": {"books": 4},
    "gopher_mean_word_length": {"books": 2},
    "gopher_ellipsis_word_ratio": {"books": 3},
    "gopher_ellipsis_line_frac": {"books": 2},
    **{f"gopher_dup_{k}gram_char_frac": {"books": 3, "wikipedia": 2} for k in range(5, 10)},
    "gopher_dup_10gram_char_frac": {"books": 3, "wikipedia": 3},  # WikiText articles quoting their own lead
    **{r: {"books": 2} for r in ("gopher_dup_line_frac", "gopher_dup_line_char_frac", "gopher_dup_para_frac",
                                 "gopher_dup_para_char_frac")},
    "gopher_word_count": {"wikipedia": 1},  # a 21-word stub
}

# An end mark (not an ellipsis: C4 never counts one) followed by closing quotes or brackets.
STOP_THEN_CLOSING = re.compile(r"""(?<![.…])[.?!]["'”’»›)\]}]+$""")


@pytest.fixture(scope="module")
def corpora(shared_data):
    return frp.corpora(shared_data / "text")


@pytest.fixture(scope="module")
def drops(corpora):
    return {name: frp.count_drops(docs, Filter.resolve(CONF)) for name, docs in corpora.items()}


def test_corpora_are_real_prose_of_useful_size(corpora):
    sizes = {name: len(docs) for name, docs in corpora.items()}
    assert sizes["books"] >= 1500 and sizes["news"] >= 1500 and sizes["wikipedia"] >= 60, sizes
    # Dialogue in typographic quotes is common in the books: the case the punctuation rules must handle.
    assert sum("”" in d or "’" in d for d in corpora["books"]) >= len(corpora["books"]) // 4


def test_each_rule_drops_at_most_what_it_is_allowed(drops, corpora):
    print("\n" + frp.table(drops, {name: len(docs) for name, docs in corpora.items()}))
    for corpus, counts in drops.items():
        for rule, k in counts["any"].items():
            allowed = ALLOWED.get(rule, {}).get(corpus, 0)
            assert k <= allowed, (corpus, rule, f"{k} > {allowed}", counts["examples"].get(rule))
    assert sum(drops["news"]["first"].values()) == 0


def test_no_line_ending_in_a_quote_or_bracket_counts_as_unpunctuated(corpora):
    """Every line of the real prose that ends in . ? ! followed by closing quotes or brackets (’ ” » ) ...)
    is terminal for C4's rule and punctuated for FineWeb's (ellipses aside: C4 never counts them)."""
    stop = tuple(CONF["fineweb"]["stop_chars"])
    closing = "".join(CONF["fineweb"]["closing_brackets"]) + "_"
    seen = 0
    for docs in corpora.values():
        for doc in docs:
            for line in doc.splitlines():
                line = line.strip()
                if STOP_THEN_CLOSING.search(line):
                    seen += 1
                    assert c4.is_terminal(line), line[-80:]
                    assert ends_punctuated(line, stop, closing), line[-80:]
    assert seen >= 5000  # measured: most dialogue paragraphs of the books end this way


def test_ascii_only_punctuation_drops_book_prose(corpora, drops):
    """datatrove's ASCII stop characters (. ' " ! ?) on the same books: what the typographic forms prevent.
    A FineWeb rule that ignores ” and ’ drops ~5% of book documents (measured 88 of 1,646); the shipped one
    drops only front matter."""
    ascii_conf = Filter.resolve({**CONF, "fineweb": {**CONF["fineweb"], "stop_chars": [".", "'", '"', "!", "?"],
                                                     "closing_brackets": []}})
    books = corpora["books"]
    ascii_drops = frp.count_drops(books, ascii_conf)["any"].get("fineweb_line_punct_ratio", 0)
    shipped = drops["books"]["any"].get("fineweb_line_punct_ratio", 0)
    print(f"\nfineweb_line_punct_ratio on {len(books)} book documents: ASCII stop characters drop {ascii_drops}, "
          f"the shipped list {shipped}")
    assert ascii_drops >= 0.03 * len(books) and shipped <= ALLOWED["fineweb_line_punct_ratio"]["books"]
