"""`tokenmill value <source>`: the value card of a data source, on the tiny run's real sources (web pages from
WARC files, Python code, reference pages and licence texts), checked against each stage's own decision files,
the token index and the tokenizer read here without the card's code; the text measures on texts whose answer is
known; the command's one-line error; the card on the decision page.
"""

import json
import shutil
from collections import Counter
from pathlib import Path

import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
import sentencepiece as spm

import tiny_run
from tokenmill import value
from tokenmill.tokenizer import Tokenizer

STAGES = ("ingest", "filter", "pii", "dedup", "quality", "decontaminate", "backcheck", "domains")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return tiny_run.build(tmp_path_factory.mktemp("tiny"))


@pytest.fixture(scope="module")
def sources(tiny) -> dict[str, str]:
    """doc_id -> source, from ingest's own output."""
    t = ds.dataset(str(tiny / "data/ingest/documents"), format="parquet").to_table(columns=["doc_id", "source"])
    return dict(zip(t["doc_id"].to_pylist(), t["source"].to_pylist()))


def _decisions(tiny: Path, stage: str) -> list[dict]:
    return ds.dataset(str(tiny / "data" / stage / "decisions"), format="parquet").to_table(
        columns=["doc_id", "action", "reason", "details"]).to_pylist()


@pytest.mark.parametrize("source", ["sample_licenses", "sample_web"])
def test_the_card_counts_each_stage_tokens_and_copies_from_the_stages_own_files(tiny, sources, source):
    c = value.card(tiny, source)
    by_stage = {s["stage"]: s for s in c["stages"]}
    assert [s["stage"] for s in c["stages"]] == list(STAGES)
    for stage in STAGES[1:]:
        mine = [r for r in _decisions(tiny, stage) if sources.get(r["doc_id"]) == source]
        got = by_stage[stage]
        assert got["in"] == len(mine), stage
        for action in ("keep", "modify", "drop"):
            assert got[action] == sum(r["action"] == action for r in mine), (stage, action)
        assert got["reasons"] == dict(Counter(f"{r['action']}:{r['reason']}" for r in mine)), stage
        texts = ds.dataset(str(tiny / "data" / stage / "documents"), format="parquet").to_table(
            columns=["source", "text"]).to_pylist()
        assert got["bytes_kept"] == sum(len(r["text"].encode()) for r in texts if r["source"] == source), stage
    # Ingest's drops are records without text, absent from its output: what it kept is the source's documents.
    assert by_stage["ingest"]["keep"] == sum(1 for s in sources.values() if s == source)
    # Tokens kept: the token index's lengths of the source's documents.
    index = ds.dataset(str(tiny / "data/tokenize/index"), format="parquet").to_table().to_pylist()
    assert c["tokens"]["kept"] == sum(r["length"] for r in index if r["source"] == source)
    # Copies: each dedup drop's duplicate_of, by its own source.
    drops = [r for r in _decisions(tiny, "dedup") if r["action"] == "drop"]
    of = [(sources[r["doc_id"]], sources[json.loads(r["details"])["duplicate_of"]]) for r in drops]
    d = c["duplicates"]
    assert d["dropped"] == sum(1 for a, _ in of if a == source) == d["copies_within_source"] + d["copies_of_the_rest"]
    assert d["copies_within_source"] == sum(1 for a, b in of if a == b == source)
    assert d["rest_dropped_as_its_copies"] == sum(1 for a, b in of if b == source and a != source)
    if source == "sample_licenses":  # the same licence files many times over: most of them are copies
        assert d["rate"] > 0.5 and c["repetition"]["source"]["template_share"] > c["repetition"]["rest"]["template_share"]


def test_bytes_per_token_and_pieces_per_word_are_the_tokenizers(tiny):
    c = value.card(tiny, "sample_code", sample=200)
    t = ds.dataset(str(tiny / "data/domains/documents"), format="parquet").to_table(
        columns=["doc_id", "source", "text"]).sort_by("doc_id").to_pylist()
    texts = [r["text"] for r in t if r["source"] == "sample_code"][:200]
    sp = spm.SentencePieceProcessor(model_file=str(tiny / "data/tokenizer/tokenizer.model"))
    tokens = sum(len(sp.encode(x)) for x in texts)
    got = c["tokenizer"]["source"]
    assert got["documents"] == len(texts) and got["bytes_per_token"] == pytest.approx(
        sum(len(x.encode()) for x in texts) / tokens, rel=1e-12)
    for term in got["fragmented_terms"]:
        assert term["pieces"] == len(sp.encode(" " + term["word"])) > 1
    # A word the tokenizer never saw is cut into many pieces; a frequent one it holds whole is not listed.
    made_up = value.tokenizer_measures(Tokenizer(tiny / "data/tokenizer"),
                                       ["zxqvkjw " * 40 + "the " * 200 + "return " * 60])
    assert made_up["fragmented_terms"][0]["word"] == "zxqvkjw" and made_up["fragmented_terms"][0]["pieces"] >= 4
    assert "the" not in {w["word"] for w in made_up["fragmented_terms"]}


def test_repeated_and_template_lines_are_measured_as_defined():
    footer = "Copyright 2026 Example Corp. All rights reserved."
    docs = [f"Article {i}\nA line of its own {i}.\nA line of its own {i}.\n{footer}" for i in range(4)]
    docs.append("One unique line.\nAnother unique line.")
    r = value.repetition(docs)
    # Each of the four articles repeats one of its four lines; the fifth repeats none: (4 x 0.25 + 0) / 5.
    assert r["repeated_line_share"] == pytest.approx(0.2)
    # The footer is in 4 documents (at least 3): 4 of the 18 lines.
    assert r["template_share"] == pytest.approx(4 / 18)
    assert value.repetition(docs[:2])["template_share"] == 0  # in 2 documents only: not a template


def test_the_command_writes_the_card_and_names_the_sources_it_knows(tiny, tmp_path):
    cards = tiny / "reports" / "value"
    try:
        out = tiny_run.run(["tokenmill", "value", "sample_licenses"], tiny)
        card = json.loads((cards / "sample_licenses.json").read_text())
        assert card["source"]["source"] == "sample_licenses" and "value card: sample_licenses" in out.stdout
        assert "dedup" in out.stdout and "template lines" in out.stdout
        bad = tiny_run.run(["tokenmill", "value", "sample_wbe"], tiny, check=False)
        assert bad.returncode == 2 and bad.stderr.strip().count("\n") == 0, bad.stderr
        assert "no source 'sample_wbe'" in bad.stderr and "sample_web" in bad.stderr
        # The decision page shows the card beside the comparisons.
        from tokenmill.report.decision import build_decision_page

        summary = build_decision_page(tmp_path / "page", [], [], project=tiny)
        page = (tmp_path / "page" / "index.html").read_text()
        assert summary["sections"]["value"] == "ok" and '<td class="txt">sample_licenses</td>' in page
    finally:
        shutil.rmtree(cards, ignore_errors=True)  # the tiny run is shared: leave it as built


@pytest.mark.slow  # two scout-only experiments (two seeds each) through `dvc exp run --queue` on the tiny run
def test_paired_runs_with_and_without_the_code_trade_code_for_web(tiny, tmp_path):
    """`--paired`: the mixture with the source and without it, each at two seeds; the `without` side plans no
    token of the source's bucket; the gain on each held-out bucket is the two experiments' own summaries'
    difference, and points the way a mixture trades: with the code the code bucket is better, without it the
    web bucket that gets its tokens is better, beyond 2 σ (at the tiny run's s1, code's own gain is within its
    noise); a rerun runs nothing."""
    from tokenmill import search as S

    run = tiny_run.run(["tokenmill", "value", "sample_code", "--paired", "--rung", "s1", "--json",
                        "--out", "value-paired.json"], tiny)
    try:
        assert "0 of 2 experiments already held" in run.stderr, run.stderr
        c = json.loads(run.stdout)
        p = c["paired"]
        assert p["seeds"] == 2 and p["rung"] == "s1"
        assert "~mixture.phases.bulk.weights.code" in p["overrides"]["without"]
        planned = {}
        for side in ("with", "without"):
            e = p["experiments"][side]
            fs = S.revision_fs(str(tiny), e["rev"], e["name"])
            planned[side] = json.loads(fs.read_text("metrics/mixture.json"))
        assert planned["with"]["planned"]["code"] > 0 and planned["without"]["planned"].get("code", 0) == 0, planned
        rows = {r["metric"]: r for r in p["metrics"]}
        runs = {side: S.rung_runs(tiny, p["experiments"][side]["rev"], "s1", p["experiments"][side]["name"])
                for side in ("with", "without")}
        assert all(len(r) == 2 for r in runs.values())
        mean = {side: sum(x["heldout_loss"]["code"] for x in runs[side]) / 2 for side in runs}
        code = rows["heldout.code"]
        assert code["gain"] == pytest.approx(mean["without"] - mean["with"], rel=1e-9)
        assert code["gain"] > 0 and code["sigma"] > 0
        web = rows["heldout.web/high"]
        # Better without code beyond the noise: compare's σ (each side's seeds and noise window, per bucket) or, where
        # the seeds pair up, the paired σ; the verdict says which.
        assert web["gain"] < 0 and web["paired_sigma"] and web["gain"] < -2 * web["paired_sigma"], web
        assert web["verdict"] == ("better without the source, beyond 2 σ" if web["gain"] < -2 * web["sigma"] else
                                  "within the noise; better without the source beyond 2 paired σ"), web
        assert rows["heldout_mean"]["track_record"].startswith("track record:")
        again = tiny_run.run(["tokenmill", "value", "sample_code", "--paired", "--rung", "s1", "--json",
                              "--out", "value-paired.json"], tiny)
        assert "2 of 2 experiments already held by DVC; running 0" in again.stderr
        # The decision page shows the pair's table beside the card.
        from tokenmill.report.decision import build_decision_page

        (tiny / "reports" / "value").mkdir(parents=True, exist_ok=True)
        shutil.copy(tiny / "value-paired.json", tiny / "reports" / "value" / "sample_code.json")
        build_decision_page(tmp_path / "page", [], [], project=tiny)
        page = (tmp_path / "page" / "index.html").read_text()
        assert "sample_code: with and without it at s1, 2 seed(s) each" in page and "better without the source" in page
    finally:
        (tiny / "value-paired.json").unlink(missing_ok=True)
        shutil.rmtree(tiny / "reports" / "value", ignore_errors=True)
