"""No benchmark leak: every item of every benchmark file in ../shared/data/eval, planted in every disguise a
copy takes on the web, is found against the index of all of them.

Disguises: verbatim; re-wrapped at 40 columns; lower-cased with punctuation deleted; light edits (one word
in twenty replaced, and one in ten: every k-th word from a random offset, by a word of real prose); inside
an HTML list and inside an HTML table, as resiliparse extracts the page; split across lines and paragraphs;
the prompt alone (a GSM8K question without its worked answer, an MMLU question without the answer ...).
Items are planted twenty to a document between paragraphs of real prose, so matching runs on documents of
realistic length (and a planted item must be found among its neighbours).

Recall is measured over the items the index holds (items of fewer than min_item_words words, and items
whose every word belongs to a template shared by many items, are not indexed: the index stats count them,
and this test bounds them). Templates: a page holding only MMLU moral_scenarios' template sentence is clean,
and a page holding one moral_scenarios item is contaminated by that item alone.
"""

from __future__ import annotations

import random
import re
import textwrap
import time
from collections import defaultdict
from pathlib import Path

import pytest

from tokenmill.decontam import DecontamProcessor, normalize, read_items
from tokenmill.decontam.params import Decontaminate
from conftest import missing_shared_data  # skips, or fails under CI=true

SHARED = Path(__file__).resolve().parents[1] / ".." / "shared" / "data"
EVAL, TEXT = SHARED / "eval", SHARED / "text"
FOUNDRY = ["arc_easy", "arc_challenge", "piqa", "openbook_qa", "siqa", "copa", "commonsense_qa", "winogrande",
           "winograd_wsc", "lambada_openai", "boolq", "jeopardy_all", "triviaqa_sm_sub",
           "bigbench_language_identification"]
SPECS = [{"name": "gsm8k", "format": "gsm8k", "path": str(EVAL / "gsm8k" / "test.jsonl")},
         {"name": "humaneval", "format": "humaneval", "path": str(EVAL / "humaneval" / "HumanEval.jsonl.gz")},
         {"name": "mmlu", "format": "mmlu_csv", "path": str(EVAL / "mmlu" / "test")},
         {"name": "hellaswag", "format": "hellaswag", "path": str(EVAL / "hellaswag" / "hellaswag_val_subset.jsonl")},
         *({"name": n, "format": "llm_foundry", "path": str(EVAL / "llm_foundry" / f"{n}.jsonl")} for n in FOUNDRY)]
PER_DOC = 20
MIN_RECALL = 0.99  # over all items, per disguise
MIN_RECALL_PER_BENCHMARK = 0.95  # and for every benchmark: short items (COPA, OpenBookQA) miss more edits


@pytest.fixture(scope="module")
def shared() -> Path:
    if not (EVAL.is_dir() and TEXT.is_dir()):
        missing_shared_data(f"eval and text under {SHARED}")
    return SHARED


@pytest.fixture(scope="module")
def proc(shared) -> DecontamProcessor:
    started = time.process_time()
    p = DecontamProcessor(Decontaminate.resolve({"benchmarks": SPECS}))
    st = p.index.stats
    print(f"\nindex: {st['items']} items, {st['forms']} forms, {st['keys']} seed n-grams, "
          f"{st['template_ngrams']} template n-grams; {time.process_time() - started:.1f} CPU-s")
    return p


@pytest.fixture(scope="module")
def items(shared) -> list[tuple[str, str, str, str | None]]:
    return [it for spec in SPECS for it in read_items(spec)]


@pytest.fixture(scope="module")
def prose(shared) -> list[str]:
    """Paragraphs of real prose (WikiText-2 test) to host the planted items, and words for edits."""
    wiki = (TEXT / "wikitext-2" / "test.txt").read_text(encoding="utf-8")
    paras = [p.strip() for p in wiki.split("\n") if len(p.split()) >= 40 and not p.startswith(" =")]
    assert len(paras) > 500
    return paras


# --- disguises -------------------------------------------------------------------------------------------

_SENTENCE = re.compile(r"(?<=[.?!:;])\s+")


def _parts(item: tuple, rng: random.Random) -> tuple[str, str]:
    """(first, second) halves: the prompt and the rest where the item has a prompt, else a split at a
    sentence end (or mid-way between words)."""
    _, _, text, prompt = item
    if prompt and text.startswith(prompt) and text[len(prompt):].strip():
        return prompt, text[len(prompt):]
    sentences = _SENTENCE.split(text.strip())
    if len(sentences) > 1:
        cut = rng.randrange(1, len(sentences))
        return " ".join(sentences[:cut]), " ".join(sentences[cut:])
    words = text.split()
    cut = max(1, len(words) // 2)
    return " ".join(words[:cut]), " ".join(words[cut:])


def _edit(text: str, every: int, vocab: list[str], rng: random.Random) -> str:
    """Every `every`-th word (from a random offset) replaced by a word of real prose."""
    words = text.split()
    for i in range(rng.randrange(every), len(words), every):
        words[i] = rng.choice(vocab)
    return " ".join(words)


def _html(body: str) -> str:
    from resiliparse.extract.html2text import extract_plain_text

    return extract_plain_text(f"<html><head><title>Study notes</title></head><body><article>{body}</article>"
                              f"</body></html>", main_content=False, list_bullets=True, links=False)


def _escape(s: str) -> str:
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def disguise(name: str, item: tuple, rng: random.Random, vocab: list[str]) -> str | None:
    text = item[2]
    if name == "verbatim":
        return text
    if name == "rewrapped":
        return "\n".join(textwrap.wrap(text, 40, break_long_words=False))
    if name == "lower_no_punctuation":
        return re.sub(r"[^\w\s]", "", text.lower())
    if name == "edit_1_in_20":
        return _edit(text, 20, vocab, rng)
    if name == "edit_1_in_10":
        return _edit(text, 10, vocab, rng)
    if name == "split_lines_paragraphs":
        first, second = _parts(item, rng)
        return "\n".join(textwrap.wrap(first, 25, break_long_words=False)) + "\n\n" + \
            "\n".join(textwrap.wrap(second, 60, break_long_words=False))
    if name in ("html_list", "html_table"):
        return None  # whole pages are extracted in plant(): see there
    if name == "prompt_only":
        _, _, text, prompt = item
        return prompt if prompt and prompt.strip() != text.strip() else None
    raise ValueError(name)


DISGUISES = ["verbatim", "rewrapped", "lower_no_punctuation", "edit_1_in_20", "edit_1_in_10",
             "split_lines_paragraphs", "html_list", "html_table", "prompt_only"]


def plant(name: str, group: list[tuple], hosts: list[str], rng: random.Random, vocab: list[str]
          ) -> tuple[str, list[tuple]]:
    """One document: host paragraphs with the group's items, disguised, between them. Returns the text and
    the items it holds (those a disguise applies to)."""
    held, chunks = [], []
    for item, host in zip(group, hosts):
        if name in ("html_list", "html_table"):
            first, second = _parts(item, rng)
            if name == "html_list":
                lines = [s for s in _SENTENCE.split(first) if s] + [second]
                block = "<ul>" + "".join(f"<li>{_escape(s)}</li>" for s in lines) + "</ul>"
            else:
                block = (f"<table><tr><th>Question</th><th>Answer</th></tr><tr><td>{_escape(first)}</td>"
                         f"<td>{_escape(second)}</td></tr></table>")
            chunks.append(f"<p>{_escape(host)}</p>{block}")
            held.append(item)
            continue
        copy = disguise(name, item, rng, vocab)
        chunks.append(host)
        if copy is not None:
            chunks.append(copy)
            held.append(item)
    if name in ("html_list", "html_table"):
        return _html("".join(chunks)), held
    return "\n\n".join(chunks), held


def test_every_item_in_every_disguise_is_found(proc, items, prose):
    index = proc.index
    live = set(index.form_item[index.form_size >= 8].tolist())  # items with a form the index matches
    number = {name: i for i, name in enumerate(index.items) if i in live}
    distinct = list({(b, i): (b, i, t, p) for b, i, t, p in items}.values())  # identical records: one item
    indexed = [it for it in distinct if (it[0], it[1]) in number]
    st = index.stats["benchmarks"]
    print(f"\n{len(indexed)} of {len(distinct)} distinct items indexed; not indexed: "
          + ", ".join(f"{b} {s['too_short']} short + {s['template_only']} template" for b, s in st.items()
                      if s["too_short"] or s["template_only"]))
    assert len(indexed) >= 0.97 * len(distinct)
    assert sum(s["template_only"] for s in st.values()) <= 50
    rng = random.Random(12)
    vocab = sorted({w for p in prose[:300] for w in p.split() if w.isalpha()})
    order = indexed[:]
    rng.shuffle(order)  # items of different benchmarks side by side
    groups = [order[i:i + PER_DOC] for i in range(0, len(order), PER_DOC)]
    report, failures = {}, {}
    planting = matching = 0.0
    docs = words = 0
    for name in DISGUISES:
        started = time.process_time()
        planted = [plant(name, group, [prose[rng.randrange(len(prose))] for _ in group], rng, vocab)
                   for group in groups]
        planting += time.process_time() - started
        started = time.process_time()
        outcomes = list(proc.batch({"text": text} for text, _ in planted))
        matching += time.process_time() - started
        docs += len(planted)
        words += sum(len(text.split()) for text, _ in planted)
        found, total = defaultdict(int), defaultdict(int)
        missed = []
        for (_, held), out in zip(planted, outcomes):
            hit = {(o["benchmark"], o["item_id"]) for o in (out.details or {}).get("overlaps", [])
                   if o["contaminated"]}
            for it in held:
                if name == "prompt_only" and len(normalize(it[3])) < 8:
                    continue  # a prompt alone shorter than an indexable item: not indexed by itself
                total[it[0]] += 1
                if (it[0], it[1]) in hit:
                    found[it[0]] += 1
                else:
                    missed.append(it)
        recall = sum(found.values()) / max(1, sum(total.values()))
        worst = min(total, key=lambda b: found[b] / total[b])
        report[name] = (recall, sum(total.values()), worst, found[worst] / total[worst])
        if recall < MIN_RECALL or found[worst] / total[worst] < MIN_RECALL_PER_BENCHMARK:
            failures[name] = [(b, i, t[:120]) for b, i, t, _ in missed[:5]]
    print(f"{docs} documents, {words / 1e6:.1f}M words: planting {planting:.1f} CPU-s, matching {matching:.1f} "
          f"CPU-s ({docs / matching:.0f} documents, {words / matching / 1e6:.2f}M words per CPU-s)")
    for name, (recall, n, worst, wr) in report.items():
        print(f"  {name:24s} recall {recall:.4f} of {n:6d} items; lowest: {worst} {wr:.3f}")
    assert not failures, failures
    assert report["prompt_only"][1] > 30000  # question-only copies of most items were planted


def test_templates_alone_are_clean_and_one_templated_item_is_one_item(proc, items, prose):
    scen = [it for it in items if it[0] == "mmlu" and it[2].startswith("For which of these two scenarios")]
    assert len(scen) >= 800
    template = scen[0][2].split("Scenario 1")[0]
    host = prose[0]
    out = proc({"text": f"{host}\n\n{template}\n\n{prose[1]}"})
    assert (out.action, out.reason) == ("keep", "clean"), out.details
    page = proc({"text": f"{host}\n\n{scen[7][2]}\n\n{prose[1]}"})
    hit = {(o["benchmark"], o["item_id"]) for o in page.details["overlaps"] if o["contaminated"]}
    assert hit == {("mmlu", scen[7][1])}
    # the template quoted once per item of a long page of templates: each item's own scenarios count
    two = proc({"text": "\n\n".join([scen[3][2], host, scen[9][2]])})
    hit = {(o["benchmark"], o["item_id"]) for o in two.details["overlaps"] if o["contaminated"]}
    assert hit == {("mmlu", scen[3][1]), ("mmlu", scen[9][1])}


def test_item_ids_are_stable_content_names(items):
    from tokenmill.decontam import item_id

    ids = defaultdict(set)
    for bench, iid, _, _ in items:
        ids[bench].add(iid)
    assert "HumanEval/0" in ids["humaneval"] and "20022" in ids["hellaswag"]
    assert all(i.startswith("sha1:") for i in ids["gsm8k"])
    q = "Janet\u2019s ducks lay 16 eggs per day."
    assert item_id("gsm8k", {"question": q, "answer": "18"}) == item_id("gsm8k", {"answer": "18", "question": q})
    assert item_id("gsm8k", {"question": q, "answer": "18"}) != item_id("gsm8k", {"question": q, "answer": "19"})
    # the MMLU CSV rows are named as the Hugging Face cais/mmlu records of the same question
    first = next(i for b, i, t, _ in items if b == "mmlu" and t.startswith("Find the degree for the given field"))
    assert first == item_id("mmlu", {"question": "Find the degree for the given field extension Q(sqrt(2), "
                                                 "sqrt(3), sqrt(18)) over Q.", "subject": "abstract_algebra",
                                     "choices": ["0", "4", "2", "6"], "answer": 1})
