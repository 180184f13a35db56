"""The fastText quality classifier on real text: it separates reference prose from informal web text."""

import gzip
import json
from pathlib import Path

import duckdb
import numpy as np
import pytest

from tokenmill import schema
from tokenmill.quality import hq_probability, prepare, run_quality

SHARED = Path(__file__).resolve().parents[1] / ".." / "shared" / "data"
pytestmark = pytest.mark.skipif(not SHARED.exists(), reason="../shared/data not present")


def _chunks(text: str, words: int = 80) -> list[str]:
    toks = text.split()
    return [" ".join(toks[i:i + words]) for i in range(0, len(toks) - words + 1, words)]


def _wiki() -> list[str]:
    raw = (SHARED / "text" / "wikitext-2" / "wiki.test.raw.blanklines_stripped_crlf").read_text(encoding="utf-8")
    paras = [p.strip() for p in raw.splitlines() if len(p.split()) >= 60 and not p.strip().startswith("=")]
    return paras


def _webtext() -> list[str]:
    out = []
    for f in sorted((SHARED / "text" / "english" / "nltk_webtext").glob("*.txt")):
        out += _chunks(f.read_text(encoding="utf-8", errors="replace"))
    return out


def _auc(pos: np.ndarray, neg: np.ndarray) -> float:
    return float((pos[:, None] > neg[None, :]).mean() + 0.5 * (pos[:, None] == neg[None, :]).mean())


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("quality")
    wiki, web = _wiki(), _webtext()
    rng = np.random.default_rng(0)
    web = [web[i] for i in rng.permutation(len(web))]
    dolma = []
    for f in sorted((SHARED / "cc_jsonl").glob("*.jsonl.gz")):
        dolma += [json.loads(l)["text"] for l in gzip.open(f, "rt")]
    train_wiki, test_wiki = wiki[: len(wiki) // 2], wiki[len(wiki) // 2:]
    train_web, test_web = web[:600], web[600:1000]
    rows = []
    for i, t in enumerate(train_wiki):
        rows.append({"doc_id": f"wiki{i:05d}", "text": t, "source": "wiki", "bucket": "reference"})
    for i, t in enumerate(train_web + dolma):
        rows.append({"doc_id": f"web{i:05d}", "text": t, "source": "crawl", "bucket": "web"})
    schema.write_parquet(rows, schema.DOCUMENT, root / "data" / "dedup" / "documents" / "part-0.parquet")
    params = {
        "positives": {"sources": ["wiki"], "paths": [], "max_examples": 5000},
        "negatives": {"buckets": ["web"], "max_examples": 5000},
        "cut_buckets": ["web"], "max_chars": 10000,
        "model": {"dim": 32, "epoch": 25, "lr": 0.5, "word_ngrams": 2, "min_count": 1, "seed": 7, "folds": 2, "hash_buckets": 100000},
        "min_separation": 0.2,
        "keep": {"mode": "top_fraction", "top_fraction": 0.3, "threshold": 0.5},
    }
    import os
    cwd = os.getcwd()
    os.chdir(root)
    try:
        manifest = run_quality(params, {"backend": "local", "workers": 1}, data_root=root / "data")
    finally:
        os.chdir(cwd)
    return root, manifest, rows, test_wiki, test_web


def test_held_out_separation(trained):
    root, _, _, test_wiki, test_web = trained
    model = str(root / "data" / "quality" / "model-0.bin")  # neither fold model saw these test texts
    pos = hq_probability(model, [prepare(t, 10000) for t in test_wiki])
    neg = hq_probability(model, [prepare(t, 10000) for t in test_web])
    auc = _auc(pos, neg)
    # Measured 1.00: held-out WikiText paragraphs vs. held-out webtext chunks (WikiText's own style helps).
    assert auc >= 0.97, auc
    # The fairer test: good prose of a kind never seen in training (Gutenberg novels) vs. the same webtext.
    books = []
    for f in sorted((SHARED / "text" / "gutenberg" / "en").glob("*.txt.gz"))[:6]:
        t = gzip.open(f, "rt", encoding="utf-8", errors="replace").read()
        books += _chunks(t[len(t) // 4: len(t) // 4 + 60000])  # from the body, past the licence header
    auc_books = _auc(hq_probability(model, [prepare(t, 10000) for t in books]), neg)
    # Measured 0.81 (818 book chunks vs. 400 webtext chunks).
    assert auc_books >= 0.75, auc_books


def test_decisions_scores_and_cut(trained):
    root, manifest, rows, _, _ = trained
    con = duckdb.connect()
    d = con.execute(f"SELECT doc_id, action, reason, scores['quality_score'] AS s FROM "
                    f"read_parquet('{root}/data/quality/decisions/*.parquet')").fetchall()
    assert sorted(r[0] for r in d) == sorted(r["doc_id"] for r in rows)  # one decision per input document
    assert all(r[3] is not None for r in d)  # scores for kept and dropped alike
    web = [r for r in d if r[0].startswith("web")]
    kept_web = [r for r in web if r[1] == "keep"]
    assert abs(len(kept_web) / len(web) - 0.3) < 0.02  # top 30% of the cut bucket
    assert min(r[3] for r in kept_web) >= max(r[3] for r in web if r[1] == "drop")
    assert {r[2] for r in d if r[0].startswith("wiki")} == {"bucket_not_cut"}
    kept_ids = {r[0] for r in d if r[1] == "keep"}
    out_ids = {r[0] for r in con.execute(f"SELECT doc_id FROM read_parquet('{root}/data/quality/documents/*.parquet')").fetchall()}
    assert out_ids == kept_ids
    assert manifest["cutoff"] == pytest.approx(min(r[3] for r in kept_web), abs=1e-3)
    # Cross-fitted: the stage measures its classifier on examples each fold model did not train on.
    metrics = json.loads((root / "metrics" / "quality.json").read_text())
    assert metrics["heldout_auc"] > 0.97 and metrics["heldout_separation"] > 0.5


def test_training_is_deterministic(trained, tmp_path):
    root, _, rows, _, _ = trained
    from tokenmill.quality import train
    pos = [prepare(r["text"], 10000) for r in rows if r["source"] == "wiki"][:200]
    neg = [prepare(r["text"], 10000) for r in rows if r["source"] == "crawl"][:200]
    cfg = {"dim": 16, "epoch": 3, "lr": 0.1, "word_ngrams": 2, "min_count": 1, "seed": 3, "hash_buckets": 10000}
    train(pos, neg, cfg, tmp_path / "a.bin")
    train(pos, neg, cfg, tmp_path / "b.bin")
    assert (tmp_path / "a.bin").read_bytes() == (tmp_path / "b.bin").read_bytes()


def test_a_classifier_that_did_not_learn_is_an_error(trained, tmp_path, monkeypatch):
    root, _, rows, _, _ = trained
    data = tmp_path / "data"
    schema.write_parquet(rows[:40] + rows[-40:], schema.DOCUMENT, data / "dedup" / "documents" / "part-0.parquet")
    params = {"positives": {"sources": ["wiki"], "paths": [], "max_examples": 100},
              "negatives": {"buckets": ["web"], "max_examples": 100}, "cut_buckets": ["web"], "max_chars": 10000,
              "model": {"dim": 8, "epoch": 1, "lr": 0.001, "word_ngrams": 1, "min_count": 1, "seed": 1, "folds": 2, "hash_buckets": 1000},
              "min_separation": 0.2, "keep": {"mode": "threshold", "top_fraction": 0.5, "threshold": 0.5}}
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="did not learn"):
        run_quality(params, {"backend": "local", "workers": 1}, data_root=data)
    assert not (data / "quality").exists()  # nothing half-written
