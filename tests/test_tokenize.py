"""Token shards and their index (contract 8), on real text: every document decodes back from its span."""

import gzip
import sysconfig
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from tokenmill import schema
from stages import tokenize_shards
from tokenmill.tokenize import encode_documents, newline_id, tier_of
from tokenmill.tokenizer import Tokenizer, train_tokenizer
from tokenmill.tokenizer.params import Tokenizer as TokenizerParams

SHARED = Path(__file__).resolve().parents[1] / ".." / "shared" / "data"
pytestmark = pytest.mark.usefixtures("shared_data")  # skips without ../shared/data; fails under CI=true


def _docs() -> list[dict]:
    rows = []
    books = sorted((SHARED / "text" / "gutenberg" / "en").glob("*.txt.gz"))[:3]
    for i, f in enumerate(books):
        text = gzip.open(f, "rt", encoding="utf-8", errors="replace").read()
        for j in range(4):
            rows.append({"doc_id": f"book{i}-{j}", "text": text[j * 20000:(j + 1) * 20000], "source": "books",
                         "bucket": "web"})
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    for k, f in enumerate(sorted(stdlib.glob("*.py"))[:30]):
        rows.append({"doc_id": f"code{k:02d}", "text": f.read_text(encoding="utf-8", errors="replace"),
                     "source": "stdlib", "bucket": "code"})
    udhr = sorted((SHARED / "text" / "multilingual" / "udhr2").glob("*.txt"))[:20]
    for k, f in enumerate(udhr):
        rows.append({"doc_id": f"udhr{k:02d}", "text": f.read_text(encoding="utf-8", errors="replace"),
                     "source": "udhr", "bucket": "reference"})
    return rows


@pytest.fixture(scope="module")
def tokenized(tmp_path_factory):
    root = tmp_path_factory.mktemp("tokenize")
    docs = _docs()
    data = root / "data"
    schema.write_parquet(docs[::2], schema.DOCUMENT, data / "decontaminate" / "documents" / "a.parquet")
    schema.write_parquet(docs[1::2], schema.DOCUMENT, data / "decontaminate" / "documents" / "b.parquet")
    by_bucket: dict[str, list[str]] = {}
    for d in docs:
        by_bucket.setdefault(d["bucket"], []).append(d["text"])
    train_tokenizer(by_bucket, None, TokenizerParams.resolve({"vocab_size": 3000, "sample_bytes": 2_000_000}),
                    data / "tokenizer")
    # Quality scores for tiers: the quality stage's decision shards carry the same names as the documents.
    score = {d["doc_id"]: (i * 37 % 100) / 100 for i, d in enumerate(docs)}
    for name, part in (("a", docs[::2]), ("b", docs[1::2])):
        schema.write_parquet([schema.decision(d["doc_id"], "quality", "keep", "above_quality_cut",
                                              {"quality_score": score[d["doc_id"]]})
                              for d in part], schema.DECISION, data / "quality" / "decisions" / f"{name}.parquet")
    import os
    cwd = os.getcwd()
    os.chdir(root)
    try:
        manifest = tokenize_shards.stage({"tokenize": {"quality_tiers": {"web": {"high": 0.5, "low": 0.0}}},
                                          "execution": {"backend": "local", "workers": 2}},
                                         "decontaminate", "tokenizer", "quality", data_root=data)
    finally:
        os.chdir(cwd)
    return data, docs, manifest


def test_every_document_decodes_from_its_span(tokenized):
    data, docs, manifest = tokenized
    tok = Tokenizer(data / "tokenizer")
    index = [r for p in sorted((data / "tokenize" / "index").glob("*.parquet")) for r in pq.read_table(p).to_pylist()]
    # The planted canaries (tokenize.canaries, by default 2 sets x 5 visit counts, and 2 controls of 0 visits
    # that are only scored) are documents of their own.
    listed = pq.read_table(data / "tokenize" / "canaries.parquet").to_pylist()
    planted = {c["doc_id"]: c["prefix"] + c["secret"] for c in listed if c["planned_visits"] > 0}
    assert len(listed) == 12 and len(planted) == 10
    assert sorted(r["doc_id"] for r in index) == sorted([d["doc_id"] for d in docs] + list(planted))
    assert {r["bucket"] for r in index if r["doc_id"] in planted} == {"canary"}
    text = {**{d["doc_id"]: d["text"] for d in docs}, **planted}
    assert manifest["dtype"] == "uint16" and manifest["eos_id"] == tok.eos_id
    for r in index:
        tokens = np.fromfile(data / "tokenize" / r["shard"], dtype=np.uint16)
        span = tokens[r["offset"]: r["offset"] + r["length"]]
        assert tok.decode(span) == text[r["doc_id"]].replace("\u2581", " ")  # lossless but for U+2581
        assert tokens[r["offset"] + r["length"]] == tok.eos_id  # end-of-text after every document
        assert tok.eos_id not in span


# Documents whose lines are where a line-by-line encoder could go wrong: empty documents and lines, leading and
# trailing newlines, CRLF, tabs, lines of spaces only, indentation, digits, text without any newline, characters
# left to byte fallback, and SentencePiece's own space marker inside a line.
EDGES = ["", "\n", "\n\n\n", "no newline at all", "\nleading newline", "trailing newline\n",
         "crlf line\r\nnext\r\n\r\n", "\tindented\n        def f(x):\n            return 12345\n",
         "   \n \n  spaces only lines  \n", "digits 2026-11-23 3.14159\n\n\nend", "emoji \U0001F600 \u0F00\n\u4E2D\u6587",
         "a\u2581b\nc"]


def test_stage_encoding_is_whole_document_encoding(tokenized):
    """The stage encodes line by line; its ids must be SentencePiece's for the whole document, and decode back."""
    data, docs, _ = tokenized
    tok = Tokenizer(data / "tokenizer")
    assert newline_id(tok) == tok.piece_to_id("\n")  # the project's lossless model takes the line path
    texts = EDGES + [d["text"] for d in docs]
    flat, lengths = encode_documents(tok, texts)
    assert len(lengths) == len(texts) and int(lengths.sum()) == len(flat) and flat.dtype == tok.dtype
    pos = 0
    for text, n in zip(texts, lengths):
        span = flat[pos:pos + n - 1]
        assert span.tolist() == tok.sp.encode(text), repr(text[:60])
        assert tok.decode(span) == text.replace("\u2581", " ")
        assert flat[pos + n - 1] == tok.eos_id
        pos += n
    assert encode_documents(tok, [])[0].size == 0


def test_lossy_model_is_encoded_whole(tmp_path):
    """A model whose normaliser touches lines (nmt_nfkc, dummy prefix, collapsed spaces) is not split at newlines."""
    import sentencepiece as spm

    text = [d["text"] for d in _docs()[:8]]
    spm.SentencePieceTrainer.train(sentence_iterator=iter([line for t in text for line in t.split("\n") if line]),
                                   model_prefix=str(tmp_path / "tokenizer"), model_type="bpe", vocab_size=1000,
                                   user_defined_symbols=["\n"], minloglevel=2)
    tok = Tokenizer(tmp_path)
    assert newline_id(tok) is None
    flat, lengths = encode_documents(tok, text)
    assert flat[:lengths[0] - 1].tolist() == tok.sp.encode(text[0])


def test_buckets_and_quality_tiers(tokenized):
    data, docs, manifest = tokenized
    buckets = {p.name for p in (data / "tokenize" / "tokens").iterdir()}
    assert buckets == {"web", "code", "reference", "canary"}  # canary: the planted canaries
    assert {p.name for p in (data / "tokenize" / "tokens" / "web").iterdir()} == {"high", "low"}
    cut = manifest["quality_tier_cutoffs"]["web"]
    assert cut["low"] == 0.0 and 0.0 < cut["high"] < 1.0  # the median of the web documents' scores


def test_rerun_is_byte_identical(tokenized, tmp_path, monkeypatch):
    data, _, _ = tokenized
    import shutil
    copy = tmp_path / "data"
    for part in ("decontaminate", "tokenizer", "quality"):
        shutil.copytree(data / part, copy / part)
    monkeypatch.chdir(tmp_path)
    tokenize_shards.stage({"tokenize": {"quality_tiers": {"web": {"high": 0.5, "low": 0.0}}},
                           "execution": {"backend": "local", "workers": 1}},
                          "decontaminate", "tokenizer", "quality", data_root=copy)
    a = sorted(p.relative_to(data / "tokenize") for p in (data / "tokenize").rglob("*") if p.is_file())
    b = sorted(p.relative_to(copy / "tokenize") for p in (copy / "tokenize").rglob("*") if p.is_file())
    assert a == b
    for rel in a:
        if rel.name != "manifest.json":
            assert (data / "tokenize" / rel).read_bytes() == (copy / "tokenize" / rel).read_bytes(), rel


def test_tier_of():
    tiers = {"high": 0.8, "mid": 0.4, "low": 0.0}
    assert [tier_of(s, tiers) for s in (0.9, 0.8, 0.5, 0.1, None)] == ["high", "high", "mid", "low", "low"]
