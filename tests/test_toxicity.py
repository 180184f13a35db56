"""The toxicity score (tokenmill.domains.toxicity) on real text from ../shared/data, read in place.

The documents come from the builders of benchmarks/bench_toxicity.py, which measures every slice and writes
the figures (benchmarks/toxicity/figures.json, RESULTS.md "Toxicity: false positives per slice"). The bars
below are from that measurement at the shipped threshold, 0.8 (alt-profanity-check 1.9.1, 2026-11):
- news (AG News test rows and ABC stories, 10,789 documents): 34 flagged (0.32%);
- Wikipedia (WikiText-2 raw test and valid articles, 122): 3 flagged (2.5%): two headings ("Bloody Sunday",
  "White turn against blacks") and a quoted "all that fun shit";
- offensive (Overheard-in-New-York conversations with a profanity or slur, 815): 93.0% flagged (89.1% at 0.9).
A naive keyword rule, flag a document with any word of datatrove's banned_words.txt, flags news about as
often (0.36%: "smut" is a wheat disease in ABC rural news) but 6 of the Wikipedia articles (4.9%) and only
46.4% of the offensive conversations ("fuck" is on the soft list); banned + soft_banned words reach 94.8%
recall but flag 27% of the Wikipedia articles. Neither list meets all three bars the model meets.
The threshold is the shipped default (Toxicity().tag_above), so the tests follow it; the bars hold at 0.9 too.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from tokenmill.domains import toxicity
from tokenmill.domains.params import Toxicity

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import bench_toxicity as bt  # noqa: E402  (the slices are built beside the benchmark)

THRESHOLD = Toxicity().tag_above
NEWS_BAR = 0.006  # false-positive rate: measured 0.32%
WIKI_BAR = 0.04  # measured 2.5% (3 of 122); the banned-words rule: 4.9% (6)
RECALL_BAR = 0.85  # measured 93.0% (at 0.9: 89.1%); the banned-words rule: 46.4%


def _flag_rate(docs: list[str]) -> float:
    return float((toxicity.scores(docs) >= THRESHOLD).mean())


@pytest.fixture(scope="module")
def slices(shared_data: Path) -> dict[str, list[str]]:
    return {"news": bt.agnews(shared_data)[0] + bt.abc_news(shared_data)[0],
            "wikipedia": bt.wikipedia(shared_data)[0],
            "offensive": bt.conversations(shared_data)[0][0]}


def test_one_offensive_paragraph_flags_a_long_document(shared_data: Path):
    """WikiText-2's "Angel of Death (Slayer song)" (8,400 characters, 25 paragraphs) quotes its guitarist:
    "... all that fun shit". That paragraph alone tags the article; without it the article is not tagged. A
    mean over the paragraphs, or the whole article scored as one text, would not tag it at all."""
    docs, src = bt.wikipedia(shared_data)
    doc = docs[next(i for i, s in enumerate(src) if "Angel of Death" in s)]
    paras = toxicity.paragraphs(doc, 64)
    assert len(doc) > 5000 and len(paras) >= 20
    bad = [p for p in paras if "fun shit" in p]
    assert len(bad) == 1
    without = doc.replace(bad[0], "")
    full, cleaned = toxicity.scores([doc, without])
    assert full >= THRESHOLD, f"the article with the quote scored {full:.3f}"
    assert cleaned < THRESHOLD, f"the article without the quote scored {cleaned:.3f} (measured 0.542)"
    probs = np.asarray(toxicity._model().predict_prob(paras))
    assert probs.max() == pytest.approx(full)
    assert probs.mean() < 0.5 and toxicity._model().predict_prob([doc])[0] < 0.5  # 0.098 and 0.031 measured


def test_false_positives_on_news_and_wikipedia_beat_a_keyword_rule(slices):
    model = {name: _flag_rate(docs) for name, docs in slices.items()}
    assert model["news"] <= NEWS_BAR, model
    assert model["wikipedia"] <= WIKI_BAR, model
    assert model["offensive"] >= RECALL_BAR, model


@pytest.fixture(scope="module")
def keyword_rates(shared_data: Path, slices) -> dict[str, dict[str, float]]:
    return {name: {s: float(bt.keyword_flags(docs, words).mean()) for s, docs in slices.items()}
            for name, words in bt.keyword_lists(shared_data).items()}


def test_no_keyword_list_meets_the_same_bars(keyword_rates):
    """The banned-words rule is as good as the model on news, worse on Wikipedia, and finds half the
    offensive conversations; adding the soft list finds them but flags a quarter of Wikipedia."""
    banned, both = keyword_rates["banned"], keyword_rates["banned+soft"]
    assert banned["wikipedia"] > WIKI_BAR and banned["offensive"] < 0.6, banned
    assert both["wikipedia"] > 0.2 and both["offensive"] >= RECALL_BAR, both
    for name, r in keyword_rates.items():
        meets = r["news"] <= NEWS_BAR and r["wikipedia"] <= WIKI_BAR and r["offensive"] >= RECALL_BAR
        assert not meets, f"the keyword rule ({name}) meets the model's bars: {r}"


def test_paragraphs_at_their_edges(shared_data: Path):
    # No blank lines: one paragraph a line; more than max_paragraphs: evenly spread, first and last kept, in order.
    lines = [x for x in bt.webtext_lines("firefox.txt", shared_data)[:300] if len(x) >= 20]
    assert len(lines) > 200
    picked = toxicity.paragraphs("\n".join(lines), 64)
    assert len(picked) == 64 and picked[0] == lines[0] and picked[-1] == lines[-1]
    assert [lines.index(p) for p in picked] == sorted(lines.index(p) for p in picked)
    assert toxicity.paragraphs("\n".join(lines), 1) == [lines[0]]
    assert toxicity.paragraphs("\n".join(lines[:10]), 64) == lines[:10]  # fewer than the cap: all of them

    # Blank lines present: a paragraph keeps its line breaks; blank-only parts are dropped.
    story = bt.abc_news(shared_data)[0][0]
    assert "\n" in story and toxicity.paragraphs(f"{story}\n\n \n\n{story}", 64) == [story, story]

    # A line shorter than min_chars (20) is not scored when the document has a longer one; a document with
    # no line that long is scored whole. Overheard in New York: "Guy: Fuck Jesus." (16 characters).
    conv = next(c for c in bt.overheard(shared_data) if "Guy: Fuck Jesus." in c)
    first, short = conv.split("\n")[:2]
    assert short == "Guy: Fuck Jesus." and len(first) >= 20
    assert toxicity.paragraphs(f"{first}\n{short}", 64) == [first]
    assert toxicity.paragraphs(short, 64) == [short]
    skipped, whole = toxicity.scores([f"{first}\n{short}", short])
    assert skipped < THRESHOLD <= whole

    # Empty and missing text: one empty paragraph, a low score, no error.
    assert toxicity.paragraphs("", 64) == [""]
    assert (toxicity.scores(["", None]) < THRESHOLD).all() and toxicity.scores([]).shape == (0,)
