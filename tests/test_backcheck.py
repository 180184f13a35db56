"""The embedding back-checks on real text: semantic duplicates beyond MinHash and paraphrased benchmark items.

Documents are real (../shared/data): ABC science news articles, and ARC-Easy items from the llm_foundry files.
Rewrites come from tests/paraphrase.py's rules (sentences reordered, words swapped from tests/data/synonyms.tsv,
clauses dropped, a question turned into a statement) and tests/data/paraphrased_items.jsonl. The stage runs as
DVC runs it (stages/embed.py, then stages/backcheck.py over a data/ folder) on one local worker.
"""

import gzip
import json
import os
import random
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import paraphrase
from stages import backcheck as backcheck_stage
from stages import embed as embed_stage
from tokenmill import schema
from tokenmill.backcheck import semantic
from tokenmill.backcheck.params import Backcheck
from tokenmill.decontam.stage import CONTAMINATION
from tokenmill.domains.embed import embed_texts
from tokenmill.section import ParamError

EXECUTION = {"backend": "local", "workers": 1}
THRESHOLD = Backcheck().duplicates.threshold
ITEM_THRESHOLD = Backcheck().contamination.threshold


@pytest.fixture(scope="module")
def articles(shared_data) -> list[str]:
    """Real science news stories: paragraphs of at least 600 characters, two per article."""
    text = gzip.open(shared_data / "text/news/nltk_abc/science.txt.gz", "rt", encoding="latin-1").read()
    paras = [p.strip() for p in text.split("\n\n") if len(p.strip()) >= 600]
    return [paras[i] + "\n\n" + paras[i + 1] for i in range(0, 160, 2)]


@pytest.fixture(scope="module")
def synonyms() -> dict[str, str]:
    return paraphrase.load_synonyms()


# ---------------------------------------------------------------------------------------------------------
# The search and the clusters


def test_rewrites_cluster_with_their_original_and_distinct_articles_do_not(articles, synonyms):
    """At the shipped threshold each article and its rule rewrites (reordered, synonyms swapped) are one cluster,
    which keeps the longest; no two distinct articles, all on science, are joined."""
    rng = random.Random(0)
    originals = articles[:30]
    texts = list(originals)
    owner = list(range(30))
    for i, a in enumerate(originals[:20]):
        texts.append(paraphrase.reorder_sentences(a, rng))
        texts.append(paraphrase.swap_synonyms(a, synonyms) + " Reported by the science desk.")  # the longest
        owner += [i, i]
    ids = [f"d{k:03d}" for k in range(len(texts))]
    vectors = embed_texts(texts)
    pairs = semantic.neighbours(vectors, THRESHOLD, k=8)
    found = semantic.clusters(len(texts), pairs, np.array([len(t) for t in texts]), ids)
    for i in range(30):
        members = [k for k in range(len(texts)) if owner[k] == i]
        clusters = {int(found.cluster[k]) for k in members}
        if i < 20:
            # One cluster per article, kept by its longest member (the synonym rewrite with its sign-off).
            assert clusters == {members[2]}, (i, clusters)
            assert set(np.flatnonzero(found.cluster == members[2])) == set(members)
            assert all(found.size[k] == 3 for k in members)
        else:
            assert clusters == {-1}  # alone: in no cluster
    # Every pair found is within one article's family, and each of it at or above the threshold.
    assert all(owner[a] == owner[b] for a, b in zip(pairs.first, pairs.second))
    assert (pairs.similarity >= THRESHOLD).all() and (pairs.first < pairs.second).all()


def test_the_inverted_file_finds_what_the_exact_search_finds(shared_data, synonyms):
    """Above exact_below the search is an inverted file of k-means cells: on 2,000 real news items with 200
    planted rewrites it finds at least 95% of the pairs the exact search finds, and no pair below the threshold."""
    import csv
    with open(shared_data / "text/news/ag_news/test.csv", newline="", encoding="utf-8") as f:
        rows = [f"{title}. {body}" for _, title, body in list(csv.reader(f))[:2000]]
    rng = random.Random(1)
    texts = rows + [paraphrase.reorder_sentences(paraphrase.swap_synonyms(t, synonyms), rng) for t in rows[:200]]
    vectors = embed_texts(texts)
    exact = semantic.neighbours(vectors, THRESHOLD, k=16, exact_below=10 ** 9)
    ivf = semantic.neighbours(vectors, THRESHOLD, k=16, exact_below=1, probe=8)
    want = set(zip(exact.first.tolist(), exact.second.tolist()))
    got = set(zip(ivf.first.tolist(), ivf.second.tolist()))
    assert len(want) >= 150  # the planted rewrites, and the wire's own near copies
    assert got <= want and len(got) >= 0.95 * len(want), (len(got), len(want))


def test_a_lone_document_and_an_empty_corpus():
    one = semantic.neighbours(np.eye(1, 256, dtype=np.float32), 0.5)
    assert one.first.size == 0 and one.nearest.tolist() == [-1]
    found = semantic.clusters(1, one, np.array([5]), ["a"])
    assert found.cluster.tolist() == [-1] and found.size.tolist() == [1]
    idx, sim = semantic.nearest_items(np.zeros((0, 256), np.float32), np.eye(2, 256, dtype=np.float32))
    assert idx.size == 0 and sim.size == 0


# ---------------------------------------------------------------------------------------------------------
# The stage


def _arc_items(shared_data: Path, n: int) -> list[dict]:
    with open(shared_data / "eval/llm_foundry/arc_easy.jsonl", encoding="utf-8") as f:
        return [json.loads(line) for line in f][:n]


def _run(root: Path, docs: list[dict], params: dict, benchmarks: list[dict], flagged: list[str] = ()) -> dict:
    for k in range(2):
        schema.write_parquet(docs[k::2], schema.DOCUMENT, root / "data/decontaminate/documents" / f"part-{k}.parquet")
    # The n-gram layer's table: the documents it flagged (decontaminate.action flag keeps them).
    rows = [{"doc_id": d, "benchmark": "arc", "item_id": "x", "matched_ngrams": 9, "item_ngrams": 9,
             "overlap_fraction": 1.0, "contaminated": True, "action": "keep", "matched_words": 20, "item_words": 20}
            for d in flagged]
    schema.write_parquet(rows, CONTAMINATION, root / "data/decontaminate/contamination/contamination.parquet")
    cwd = os.getcwd()
    os.chdir(root)
    try:
        embed_stage.stage({"embed": {}, "execution": EXECUTION}, "decontaminate")
        return backcheck_stage.stage({"backcheck": params, "embed": {}, "decontaminate": {"benchmarks": benchmarks},
                                      "execution": EXECUTION}, "decontaminate", "embed")
    finally:
        os.chdir(cwd)


def _table(root: Path, name: str) -> list[dict]:
    return pa.concat_tables([pq.read_table(p) for p in sorted((root / "data/backcheck" / name).glob("*.parquet"))]
                            ).to_pylist()


@pytest.fixture(scope="module")
def corpus(shared_data, articles, synonyms) -> tuple[list[dict], list[dict]]:
    """40 real articles, the first 5 each with a lead-paragraph copy and a reordered rewrite; 3 documents that
    state an ARC-Easy item's question and answer in other words, one of them also flagged by the n-gram layer;
    the benchmark file they come from."""
    rng = random.Random(2)
    docs = [{"doc_id": f"a{i:03d}", "text": t, "source": "news", "bucket": "web", "url": f"https://s.example/{i}"}
            for i, t in enumerate(articles[:40])]
    for i in range(5):
        docs.append({"doc_id": f"r{i:03d}", "text": paraphrase.reorder_sentences(articles[i], rng), "source": "news",
                     "bucket": "web", "url": f"https://copy.example/{i}"})
    items = _arc_items(shared_data, 3)
    for i, it in enumerate(items):
        question = it["query"].removeprefix("Question: ")
        text = paraphrase.question_to_statement(question, it["choices"][it["gold"]])
        docs.append({"doc_id": f"q{i:03d}", "text": paraphrase.swap_synonyms(text, synonyms), "source": "forum",
                     "bucket": "web", "url": f"https://quiz.example/{i}"})
    bench = [{"name": "arc_easy", "format": "llm_foundry", "path": str(shared_data / "eval/llm_foundry/arc_easy.jsonl")}]
    return docs, bench


def test_the_stage_reports_by_default_and_drops_all_but_the_longest_when_asked(tmp_path, corpus):
    docs, bench = corpus
    m = _run(tmp_path / "report", docs, {}, bench, flagged=["q002"])
    rows = {r["doc_id"]: r for r in pq.read_table(tmp_path / "report/data/backcheck/decisions").to_pylist()}
    assert m["counts"]["in"] == m["counts"]["out"] == len(docs) == len(rows)  # reported: nothing removed
    dups = {r["doc_id"]: r for r in _table(tmp_path / "report", "semantic_duplicates")}
    for i in range(5):  # each rewrite is a duplicate of its original, the longer of the two (the same length:
        a, r = f"a{i:03d}", f"r{i:03d}"  # the smaller doc_id)
        assert dups[r]["cluster"] == dups[a]["cluster"] == (a if len(docs[i]["text"]) >= len(next(
            d for d in docs if d["doc_id"] == r)["text"]) else r)
        kept = dups[a]["cluster"]
        assert dups[kept]["kept"] and dups[kept]["kept_because"] == "longest"
        other = r if kept == a else a
        assert rows[other]["reason"] == "semantic_duplicate_reported" and rows[kept]["reason"] == "cluster_kept"
        assert dups[other]["similarity"] >= THRESHOLD and dups[other]["nearest_doc_id"] == kept
    assert not {d for d in dups if d.startswith("a") and int(d[1:]) >= 5}  # distinct articles: no cluster
    # The paraphrased items are suspects of their own item, except the one the n-gram layer already flagged.
    suspects = {r["doc_id"]: r for r in _table(tmp_path / "report", "suspects")}
    assert set(suspects) == {"q000", "q001"}, suspects
    assert all(s["benchmark"] == "arc_easy" and s["similarity"] >= ITEM_THRESHOLD and s["action"] == "keep"
               for s in suspects.values())
    from tokenmill.decontam.readers import item_id
    items = _arc_items(Path(bench[0]["path"]).parents[2], 2)
    assert [suspects[f"q{i:03d}"]["item_id"] for i in range(2)] == [item_id("arc_easy", it) for it in items]
    assert rows["q000"]["reason"] == "suspect_reported" and rows["q002"]["reason"] != "suspect_reported"
    # No real article is near an item's meaning (every one is scored).
    assert all(dict(rows[f"a{i:03d}"]["scores"])["nearest_item_similarity"] < ITEM_THRESHOLD for i in range(40))

    m = _run(tmp_path / "drop", docs, {"duplicates": {"action": "drop"}, "contamination": {"action": "drop"}}, bench,
             flagged=["q002"])
    dropped = {r["doc_id"]: r["reason"] for r in pq.read_table(tmp_path / "drop/data/backcheck/decisions").to_pylist()
               if r["action"] == "drop"}
    expected = {d for d, r in dups.items() if not r["kept"]}
    assert dropped == {**{d: "semantic_duplicate" for d in expected}, "q000": "semantic_contamination",
                       "q001": "semantic_contamination"}
    kept = {r["doc_id"] for p in (tmp_path / "drop/data/backcheck/documents").glob("*.parquet")
            for r in pq.read_table(p, columns=["doc_id"]).to_pylist()}
    assert kept == {d["doc_id"] for d in docs} - set(dropped) and m["counts"]["out"] == len(kept)
    assert {r["action"] for r in _table(tmp_path / "drop", "suspects")} == {"drop"}


def test_an_item_rewritten_inside_a_longer_page_is_found_by_its_paragraph(tmp_path, shared_data, articles, synonyms):
    """A page of four real news paragraphs with an ARC-Easy item, turned into a statement with synonyms swapped,
    as a paragraph of its own in the middle: the page's pooled vector is too far from the item to be a suspect;
    its paragraph is near enough, and the suspect row quotes it. A page of one paragraph has no windows."""
    item = _arc_items(shared_data, 1)[0]
    statement = paraphrase.swap_synonyms(paraphrase.question_to_statement(
        item["query"].removeprefix("Question: "), item["choices"][item["gold"]]), synonyms)
    page = articles[50] + "\n\n" + statement + "\n\n" + articles[51]
    docs = [{"doc_id": "page", "text": page, "source": "news", "bucket": "web", "url": "https://p.example/1"},
            *({"doc_id": f"a{i}", "text": articles[i], "source": "news", "bucket": "web", "url": None}
              for i in range(60, 64))]
    bench = [{"name": "arc_easy", "format": "llm_foundry", "path": str(shared_data / "eval/llm_foundry/arc_easy.jsonl")}]
    _run(tmp_path / "pooled", docs, {"contamination": {"paragraphs": False}}, bench)
    pooled = {r["doc_id"]: dict(r["scores"])["nearest_item_similarity"]
              for r in pq.read_table(tmp_path / "pooled/data/backcheck/decisions").to_pylist()}
    assert pooled["page"] < ITEM_THRESHOLD and not _table(tmp_path / "pooled", "suspects")
    m = _run(tmp_path / "windows", docs, {}, bench)
    (suspect,) = _table(tmp_path / "windows", "suspects")
    from tokenmill.decontam.readers import item_id
    assert suspect["doc_id"] == "page" and suspect["item_id"] == item_id("arc_easy", item)
    assert suspect["similarity"] >= ITEM_THRESHOLD > pooled["page"]
    assert statement[:100] in suspect["passage"]  # the paragraph itself (or with a neighbour)
    assert m["contamination"]["paragraph_windows"] > 0
    assert semantic.paragraph_windows("One paragraph only, of more than eight words in all.", 8, 2000) == []
    # Each paragraph and each neighbouring pair, those of 8 words or more: "a b c" alone is too short.
    assert semantic.paragraph_windows("a b c\n\nd e f g h i j k l", 8, 2000) == \
        ["a b c\n\nd e f g h i j k l", "d e f g h i j k l"]


def test_vectors_of_other_documents_are_refused(tmp_path, corpus):
    docs, bench = corpus
    _run(tmp_path, docs[:10], {}, bench)
    schema.write_parquet(docs[20:25], schema.DOCUMENT, tmp_path / "data/decontaminate/documents/part-0.parquet")
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        with pytest.raises(ValueError, match="vectors of other documents"):
            backcheck_stage.stage({"backcheck": {}, "embed": {}, "decontaminate": {"benchmarks": bench},
                                   "execution": EXECUTION}, "decontaminate", "embed")
    finally:
        os.chdir(cwd)


def test_parameters_are_checked_by_name():
    with pytest.raises(ParamError, match="backcheck.duplicates.threshold"):
        Backcheck.resolve({"duplicates": {"threshold": 1.5}})
    with pytest.raises(ParamError, match="backcheck.contamination.action"):
        Backcheck.resolve({"contamination": {"action": "remove"}})
    with pytest.raises(ParamError, match="backcheck.duplicates.treshold"):
        Backcheck.resolve({"duplicates": {"treshold": 0.9}})


def test_suspects_join_the_lineage_contamination_table_with_their_status():
    """The lineage's `contamination`: the n-gram layer's rows keep their columns and get status contaminated or
    near_miss; each suspect is a row of its own, status suspect, with its cosine and no n-gram figures."""
    import duckdb

    from tokenmill.backcheck.stage import SUSPECTS
    from tokenmill.lineage import _contamination_with_suspects

    con = duckdb.connect()
    ngram = pa.Table.from_pylist([
        {"doc_id": "d1", "benchmark": "arc", "item_id": "i1", "matched_ngrams": 9, "item_ngrams": 9,
         "overlap_fraction": 1.0, "contaminated": True, "action": "drop", "matched_words": 20, "item_words": 20},
        {"doc_id": "d2", "benchmark": "arc", "item_id": "i2", "matched_ngrams": 3, "item_ngrams": 9,
         "overlap_fraction": 0.6, "contaminated": False, "action": "keep", "matched_words": 12, "item_words": 20}],
        CONTAMINATION)
    suspects = pa.Table.from_pylist([{"doc_id": "d3", "benchmark": "arc", "item_id": "i3", "similarity": 0.93,
                                      "action": "keep"}], SUSPECTS)
    con.execute("CREATE TABLE contamination AS SELECT * FROM ngram")
    con.execute("CREATE TABLE suspects AS SELECT * FROM suspects")
    _contamination_with_suspects(con)
    rows = con.execute("""SELECT doc_id, status, contaminated, action, overlap_fraction, similarity
                          FROM contamination ORDER BY doc_id""").fetchall()
    assert rows == [("d1", "contaminated", True, "drop", 1.0, None), ("d2", "near_miss", False, "keep", 0.6, None),
                    ("d3", "suspect", False, "keep", None, 0.93)]
    # `tokenmill audit item` tells a suspect's story: its cosine, no n-gram overlap, reported and kept.
    from tokenmill import cli
    con.execute("CREATE TABLE benchmarks (benchmark VARCHAR)")
    con.execute("CREATE TABLE records AS SELECT 'd3' AS doc_id, 'https://quiz.example/3' AS url")
    con.execute("CREATE TABLE documents AS SELECT 'd3' AS doc_id, 'kept' AS fate, NULL AS dropped_at, "
                "NULL AS drop_reason")
    import contextlib
    import io
    shown = io.StringIO()
    with contextlib.redirect_stdout(shown):
        assert cli.audit_item(con, "arc", "i3") == 0
    out = shown.getvalue()
    assert "1 overlapping document(s), suspect" in out and "https://quiz.example/3" in out
    assert "cosine 0.930 to the item's question and answer, no n-gram overlap: reported, kept" in out
    assert "kept by every stage" in out


def test_the_report_shows_a_suspect_with_its_passage_and_the_strict_clean_score(tmp_path):
    """The report's contamination section lists each suspect (item, document, URL, the passage nearest the item,
    cosine, action) and counts it per benchmark; the evaluation table shows clean and clean (strict) side by side."""
    import duckdb

    from tokenmill.backcheck.stage import SUSPECTS
    from tokenmill.lineage import _contamination_with_suspects
    from tokenmill.report import sections, start

    con = duckdb.connect()
    ngram = pa.Table.from_pylist([
        {"doc_id": "d1", "benchmark": "arc", "item_id": "i1", "matched_ngrams": 9, "item_ngrams": 9,
         "overlap_fraction": 1.0, "contaminated": True, "action": "drop", "matched_words": 20, "item_words": 20}],
        CONTAMINATION)
    suspects = pa.Table.from_pylist([{"doc_id": "d3", "benchmark": "arc", "item_id": "i3", "similarity": 0.912,
                                      "passage": "Which gas do plants take in? Carbon dioxide, the leaves take it in.",
                                      "action": "keep"}], SUSPECTS)
    con.execute("CREATE TABLE contamination AS SELECT * FROM ngram")
    con.execute("CREATE TABLE suspects AS SELECT * FROM suspects")
    _contamination_with_suspects(con)
    con.execute("CREATE TABLE records AS SELECT * FROM (VALUES ('d1', 'https://a.example/1'), "
                "('d3', 'https://quiz.example/3')) t(doc_id, url)")
    html = "".join(sections.contamination(con, start(tmp_path)).html)
    assert "Which gas do plants take in? Carbon dioxide" in html and "https://quiz.example/3" in html
    assert "0.912" in html and "nearest passage" in html
    counts = con.execute("SELECT count(*) FILTER (WHERE status = 'suspect'), count(*) FILTER (WHERE contaminated) "
                         "FROM contamination").fetchone()
    assert counts == (1, 1)
    results = {"benchmarks": {"arc": {"items": 5, "dirty_items": 1, "suspect_items": 1, "metrics": {"acc": {
        "all": 0.6, "all_stderr": 0.2, "clean": 0.5, "clean_stderr": 0.25, "clean_strict": 0.3333,
        "clean_strict_stderr": 0.3333, "difference": 0.1, "difference_stderr": 0.1}}}}}
    evaluation = "".join(sections.evaluation(results, "").html)
    assert "clean (strict)" in evaluation and "0.3333" in evaluation and "0.5" in evaluation
