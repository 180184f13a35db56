"""The embed and domains stages on real text: vectors, topics named by their words, the toxicity tag's thresholds,
mixture buckets named by the labels, and the parameters' errors.

The documents are real (../shared/data): AG News snippets (four labelled classes: world, sports, business,
science/technology) and Gutenberg book chunks; the stages run as DVC runs them (stages/embed.py and
stages/domains.py over a data/ folder), on one local worker.
"""

import csv
import gzip
from collections import Counter
import json
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from stages import domains as domains_stage
from stages import embed as embed_stage
from tokenmill import schema
from tokenmill.domains import embed, topics
from tokenmill.domains.params import Domains, Embed
from tokenmill.mixture.stage import tagged_documents
from tokenmill.section import ParamError
from tokenmill.tokenize import bucket_name

EXECUTION = {"backend": "local", "workers": 1}


@pytest.fixture(scope="module")
def ag_news(shared_data) -> tuple[list[str], np.ndarray]:
    with open(shared_data / "text" / "news" / "ag_news" / "test.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))[:1200]
    return [f"{title}. {body}" for _, title, body in rows], np.array([int(r[0]) for r in rows])


@pytest.fixture(scope="module")
def vectors(ag_news) -> np.ndarray:
    return embed.embed_texts(ag_news[0])


# ---------------------------------------------------------------------------------------------------------
# Embeddings


def test_chunks_cut_at_whitespace_and_spread_over_a_long_document():
    words = " ".join(f"w{i:05d}" for i in range(3000))  # 18,000 characters
    pieces = embed.chunks(words, 2000, 4)
    assert len(pieces) == 4
    assert all(len(p) <= 2000 for p in pieces)
    assert all(not p.startswith(" ") or p.strip() for p in pieces)
    assert pieces[0].startswith("w00000") and pieces[-1].rstrip().endswith("w02999")  # beginning and end both read
    assert embed.chunks("short text", 2000, 4) == ["short text"]
    assert embed.chunks("   ", 2000, 4) == [""]


def test_vectors_are_unit_length_deterministic_and_pool_their_chunks(ag_news, vectors):
    texts = ag_news[0][:50]
    assert vectors.shape == (1200, 256) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-5)
    assert np.array_equal(embed.embed_texts(texts), vectors[:50])  # the same texts, the same bytes
    assert not embed.embed_texts([""]).any()  # an empty document: the zero vector, not NaN
    # A long document is read all through: two unrelated news items, each repeated to about 3,000 characters,
    # pooled over their chunks are both near the document's vector; its first chunk alone is not near the second.
    a, b = (texts[0] + " ") * 20, (texts[3] + " ") * 20
    doc = embed.embed_texts([a + b])[0]
    va, vb, first = embed.embed_texts([a, b, (a + b)[:2000]])
    unrelated = embed.embed_texts(ag_news[0][100:200]) @ doc
    assert doc @ va > 0.45 and doc @ vb > 0.45 and min(doc @ va, doc @ vb) > 2 * unrelated.max()
    assert first @ vb < 0.2  # what a model reading only the opening (MiniLM truncates at 256 pieces) would see


def test_same_class_news_are_nearer_than_other_classes(ag_news, vectors):
    labels = ag_news[1]
    sims = vectors @ vectors.T
    np.fill_diagonal(sims, -1)
    nearest = sims.argmax(axis=1)
    agree = float((labels[nearest] == labels).mean())
    assert agree > 0.6, agree  # four balanced classes: chance is about 0.25


# ---------------------------------------------------------------------------------------------------------
# Topics


def test_topics_recover_the_news_classes_and_are_named_by_their_words(ag_news, vectors):
    texts, labels = ag_news
    found = topics.cluster(vectors, 4, seed=0, iterations=25)
    sizes = np.bincount(found.labels, minlength=4)
    assert list(sizes) == sorted(sizes, reverse=True)  # t00 is the largest
    purity = sum(np.bincount(labels[found.labels == t]).max() for t in range(4)) / len(labels)
    assert purity > 0.7, purity  # chance: about 0.27
    again = topics.cluster(vectors, 4, seed=0, iterations=25)
    assert np.array_equal(again.labels, found.labels) and np.array_equal(again.centroids, found.centroids)
    names = topics.names(texts, found.labels, found.similarity, 4, terms=8)
    # The topic that holds most sports snippets (class 2) is named by sports words.
    sports = int(np.bincount(found.labels[labels == 2], minlength=4).argmax())
    assert set(names[sports]) & {"olympic", "team", "game", "win", "season", "cup", "coach", "league", "medal"}, names
    assert all(len(n) == 8 and len(set(n)) == 8 for n in names)
    assert topics.topic_id(3) == "t03"


def test_fewer_documents_than_topics_gives_one_topic_per_document(vectors):
    found = topics.cluster(vectors[:3], 12, seed=0, iterations=5)
    assert found.centroids.shape[0] == 3 and sorted(found.labels) == [0, 1, 2]


# ---------------------------------------------------------------------------------------------------------
# The stages


def _documents(shared_data: Path, ag_news) -> list[dict]:
    texts, _ = ag_news
    rows = [{"doc_id": f"news{i:04d}", "text": t, "source": "news", "bucket": "web", "url": f"https://n.example/{i}"}
            for i, t in enumerate(texts[:300])]
    # 20 pieces of 5,000 characters of one book (about 100,000 of its characters): long enough to be chunked.
    book = gzip.open(sorted((shared_data / "text" / "gutenberg" / "en").glob("*.txt.gz"))[0], "rt",
                     encoding="utf-8", errors="replace").read()
    body = book[len(book) // 4:]
    rows += [{"doc_id": f"book{i:03d}", "text": body[i * 5000:(i + 1) * 5000], "source": "books",
              "bucket": "books", "url": None} for i in range(20)]  # long: cut into chunks and pooled
    rows.append({"doc_id": "rude0000", "source": "forum", "bucket": "web", "url": "https://f.example/1",
                 "text": "Thanks for the patch, it builds now.\n\nShut up you fucking idiot, nobody asked you."})
    return rows


def _run(root: Path, docs: list[dict], domains: dict, shards: int = 3) -> tuple[dict, dict]:
    for k in range(shards):
        schema.write_parquet(docs[k::shards], schema.DOCUMENT, root / "data" / "decontaminate" / "documents" /
                             f"part-{k}.parquet")
    cwd = os.getcwd()
    os.chdir(root)
    try:
        e = embed_stage.stage({"embed": {}, "execution": EXECUTION}, "decontaminate")
        d = domains_stage.stage({"domains": domains, "execution": EXECUTION}, "decontaminate", "embed")
    finally:
        os.chdir(cwd)
    return e, d


def _decisions(root: Path) -> list[dict]:
    return pa.concat_tables([pq.read_table(p) for p in sorted((root / "data/domains/decisions").glob("*.parquet"))]
                            ).to_pylist()


def test_the_stages_label_every_document_and_tag_without_dropping(tmp_path, shared_data, ag_news):
    docs = _documents(shared_data, ag_news)
    e, d = _run(tmp_path, docs, {"topics": {"k": 5}})
    vectors = pq.read_table(tmp_path / "data/embed/vectors/part-1.parquet")
    assert vectors.column("doc_id").to_pylist() == [r["doc_id"] for r in docs[1::3]]
    assert vectors.schema.field("vector").type == pa.list_(pa.float32(), 256)
    metrics = json.loads((tmp_path / "metrics/embed.json").read_text())
    assert metrics["documents_embedded"] == len(docs) and metrics["chunks"] > len(docs)  # the books are chunked
    # Conservation: one decision per document, all kept, every one with a topic and a format.
    assert d["counts"]["in"] == d["counts"]["out"] == len(docs)
    rows = _decisions(tmp_path)
    assert sorted(r["doc_id"] for r in rows) == sorted(r["doc_id"] for r in docs)
    details = {r["doc_id"]: json.loads(r["details"]) for r in rows}
    assert all(v["topic"] in {f"t0{i}" for i in range(5)} and v["format"] for v in details.values())
    # Chunks of one book, pooled over their chunks, land together (news spread over all five topics).
    book_topics = Counter(details[f"book{i:03d}"]["topic"] for i in range(20))
    assert book_topics.most_common(1)[0][1] >= 16, book_topics
    by_reason = {r["doc_id"]: r["reason"] for r in rows}
    assert by_reason["rude0000"] == "toxicity_tagged"
    # What mixture.exclude_tagged_from keeps out of a phase: exactly the tagged documents.
    assert tagged_documents(tmp_path / "data/domains") == {k for k, v in by_reason.items() if v == "toxicity_tagged"}
    with pytest.raises(ValueError, match="not a domains stage's output"):
        tagged_documents(tmp_path / "data/decontaminate")
    table = pq.read_table(tmp_path / "data/domains/topics.parquet").to_pylist()
    assert sum(t["documents"] for t in table) == len(docs) and [t["topic"] for t in table] == [f"t0{i}" for i in range(5)]
    shown = {r["doc_id"]: r["url"] or r["doc_id"] for r in docs}  # a document without a URL: its doc_id
    for t in table:
        members = {shown[k] for k, v in details.items() if v["topic"] == t["topic"]}
        assert len(t["examples"]) == 3 and set(t["examples"]) <= members and len(t["terms"]) == 6
    kept = sum(pq.ParquetFile(p).metadata.num_rows for p in (tmp_path / "data/domains/documents").glob("*.parquet"))
    assert kept == len(docs)


def test_drop_above_removes_exactly_the_documents_at_or_above_it(tmp_path, shared_data, ag_news):
    docs = _documents(shared_data, ag_news)[-40:]
    _run(tmp_path / "tag", docs, {"topics": {"k": 3}})
    scores = {r["doc_id"]: dict(r["scores"])["toxicity"] for r in _decisions(tmp_path / "tag")}
    assert scores["rude0000"] >= 0.8  # the offensive document is tagged at the default threshold
    # The highest score below 1 (a book chunk's; books are where a paragraph-level score errs) is the cut:
    # at it the document goes, with every document scoring as high or higher; just above it, it stays, tagged.
    doc, cut = max(((k, v) for k, v in scores.items() if v < 1), key=lambda kv: kv[1])
    assert cut >= 0.5
    _, d = _run(tmp_path / "drop", docs, {"topics": {"k": 3}, "toxicity": {"tag_above": 0.5, "drop_above": cut}})
    rows = {r["doc_id"]: r for r in _decisions(tmp_path / "drop")}
    assert rows[doc]["action"] == "drop" and rows[doc]["reason"] == "toxicity"
    assert {k for k, r in rows.items() if r["action"] == "drop"} == {k for k, v in scores.items() if v >= cut}
    assert d["counts"]["in"] == len(docs) and d["counts"]["out"] == len(docs) - d["counts"]["by_action"]["drop"]
    _run(tmp_path / "above", docs, {"topics": {"k": 3}, "toxicity": {"tag_above": 0.5, "drop_above": cut + 1e-6}})
    assert {r["doc_id"]: r["reason"] for r in _decisions(tmp_path / "above")}[doc] == "toxicity_tagged"


def test_a_small_corpus_makes_fewer_topics_with_one_warning_line(tmp_path, shared_data, ag_news, capsys):
    # 25 documents at the default 10 per topic: 2 topics, not the 12 asked (the crawl preset's 44 made 4
    # single-page topics before); a corpus of 10 or fewer is one topic, an empty one none.
    assert [topics.topic_count(n, 12, 10) for n in (0, 1, 10, 25, 44, 119, 120, 5902)] == [0, 1, 1, 2, 4, 11, 12, 12]
    _run(tmp_path, _documents(shared_data, ag_news)[:25], {"topics": {"k": 12}})
    table = pq.read_table(tmp_path / "data/domains/topics.parquet").to_pylist()
    assert [t["topic"] for t in table] == ["t00", "t01"] and sum(t["documents"] for t in table) == 25
    err = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert err == ["domains: warning: 25 documents make 2 topic(s), not domains.topics.k 12: fewer than "
                   "domains.topics.min_documents (10) per topic"], err


def test_vectors_of_other_documents_are_refused(tmp_path, shared_data, ag_news):
    docs = _documents(shared_data, ag_news)[:30]
    _run(tmp_path, docs, {"topics": {"k": 2}})
    # Fewer documents than were embedded (a back-check dropped some) are labelled from their own vectors; a
    # document the embed stage never saw is refused.
    strangers = [{**d, "doc_id": "new" + d["doc_id"]} for d in docs[:5]]
    schema.write_parquet(strangers, schema.DOCUMENT, tmp_path / "data/decontaminate/documents/part-0.parquet")
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        with pytest.raises(ValueError, match="has no vector for 5 of the"):
            domains_stage.stage({"domains": {"topics": {"k": 2}}, "execution": EXECUTION}, "decontaminate", "embed")
    finally:
        os.chdir(cwd)


def test_documents_dropped_before_get_the_nearest_topic_a_format_and_a_score(tmp_path, shared_data, ag_news):
    """The documents an earlier stage dropped (in ingest, not in the stage's input) are labelled beside the
    decisions: held-back pieces of a book land in the topic of the same book's kept pieces, held-back news in the
    topic most kept news of their class fell into (a random topic would agree for about one in five), the
    offensive page is tagged; the clusters are the kept
    documents' alone (the same topics.parquet as without them); domains.label_dropped: false writes nothing."""
    docs = _documents(shared_data, ag_news)
    _, classes = ag_news
    held_books = [f"book{i:03d}" for i in range(1, 10, 2)]
    held = {d["doc_id"] for d in docs if d["doc_id"] in held_books
            or d["doc_id"] == "rude0000" or (d["doc_id"].startswith("news") and int(d["doc_id"][4:]) >= 240)}
    kept = [d for d in docs if d["doc_id"] not in held]
    for k in range(3):
        schema.write_parquet(docs[k::3], schema.DOCUMENT, tmp_path / "data" / "ingest" / "documents" /
                             f"part-{k}.parquet")
    _run(tmp_path, kept, {"topics": {"k": 5}})
    alone = pq.read_table(tmp_path / "data/domains/topics.parquet")
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        d = domains_stage.stage({"domains": {"topics": {"k": 5}}, "embed": {}, "execution": EXECUTION},
                                "decontaminate", "embed", "ingest")
    finally:
        os.chdir(cwd)
    assert pq.read_table(tmp_path / "data/domains/topics.parquet").equals(alone)  # kept documents' clusters
    assert d["counts"]["in"] == len(kept)  # conservation: the stage's decisions are its input's alone
    labels = {r["doc_id"]: r for r in pq.read_table(tmp_path / "data/domains/dropped_before.parquet").to_pylist()}
    assert set(labels) == held and d["dropped_before_labelled"] == len(held)
    assert json.loads((tmp_path / "metrics/domains.json").read_text())["dropped_before_labelled"] == len(held)
    topic_of = {r["doc_id"]: json.loads(r["details"])["topic"] for r in _decisions(tmp_path)}
    book_topic = Counter(topic_of[f"book{i:03d}"] for i in range(0, 20) if f"book{i:03d}" not in held)
    assert sum(labels[b]["topic"] == book_topic.most_common(1)[0][0] for b in held_books) >= 4, (book_topic, labels)
    news_topic = {c: Counter(topic_of[f"news{i:04d}"] for i in range(240) if classes[i] == c).most_common(1)[0][0]
                  for c in set(classes[:240])}
    agree = [labels[f"news{i:04d}"]["topic"] == news_topic[classes[i]] for i in range(240, 300)]
    assert sum(agree) / len(agree) >= 0.5, sum(agree)  # 40 of 60 here; the largest topic holds 30% of the kept news
    assert all(r["format"] and 0 <= r["toxicity"] <= 1 and 0 < r["topic_similarity"] <= 1 for r in labels.values())
    assert labels["rude0000"]["toxicity_tagged"] and labels["rude0000"]["toxicity"] >= 0.9
    assert sum(r["toxicity_tagged"] for r in labels.values()) == sum(r["toxicity"] >= 0.9 for r in labels.values())

    os.chdir(tmp_path)
    try:
        d = domains_stage.stage({"domains": {"topics": {"k": 5}, "label_dropped": False}, "embed": {},
                                 "execution": EXECUTION}, "decontaminate", "embed", "ingest")
    finally:
        os.chdir(cwd)
    assert not (tmp_path / "data/domains/dropped_before.parquet").exists() and "dropped_before_labelled" not in d


# ---------------------------------------------------------------------------------------------------------
# Buckets and parameters


def test_bucket_names_follow_tokenize_buckets_order():
    labels = {"topic": "t03", "format": "list", "toxicity": "clean"}
    tiers = {"high": 0.5, "low": 0.0}
    assert bucket_name(["source", "tier"], "web", tiers, 0.7, labels) == "web/high"
    assert bucket_name(["source", "tier"], "code", None, None, labels) == "code"  # no tiers for code
    assert bucket_name(["topic"], "web", tiers, 0.7, labels) == "t03"
    assert bucket_name(["source", "tier", "format"], "web", tiers, 0.2, labels) == "web/low/list"
    assert bucket_name(["format", "topic"], "code", None, None, labels) == "list/t03"


def test_parameters_are_checked_by_name():
    with pytest.raises(ParamError, match=r"domains.toxicity.drop_above: expected at least tag_above"):
        Domains.resolve({"toxicity": {"tag_above": 0.9, "drop_above": 0.5}})
    with pytest.raises(ParamError, match=r"domains.topics.k"):
        Domains.resolve({"topics": {"k": 1}})
    with pytest.raises(ParamError, match=r"embed.dim"):
        Embed.resolve({"dim": 300})
    with pytest.raises(ParamError, match=r"embed.modle"):
        Embed.resolve({"modle": "x"})
    from tokenmill.tokenize.params import Tokenize
    with pytest.raises(ParamError, match=r"tokenize.buckets"):
        Tokenize.resolve({"buckets": ["topic", "topic"]})
    with pytest.raises(ParamError, match=r"tokenize.buckets"):
        Tokenize.resolve({"buckets": ["domain"]})
