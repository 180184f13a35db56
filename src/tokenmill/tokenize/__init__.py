"""The tokenize stage: curated documents -> flat token shards per mixture bucket + a Parquet index (contract 8).

A mixture bucket is the document's bucket, optionally split into quality tiers by the score the quality
stage recorded (`tokenize.quality_tiers`), e.g. web/high and web/low; `tokenize.buckets` can name it by the
domains stage's labels too (topic, format, toxicity: read from the input stage's decisions), alone or crossed
with the source and tier (bucket_name). Tiers are quantiles of the bucket's
scores ({tier: quantile floor}), resolved once to absolute cut-offs recorded in the manifest: the
classifier's absolute scores depend on what it was trained against, their order does not. Each input shard is one task: it
writes tokens/<bucket>/<shard>.bin (uint16 when the vocabulary fits, else uint32; end-of-text after every
document) and index/<shard>.parquet (doc_id, source, bucket, shard, offset, length). The canaries of
`tokenize.canaries` (tokenmill.canaries) are planted after them: tokens/canary/canaries.bin, index/canaries.parquet.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from typing import Mapping
from weakref import WeakKeyDictionary

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from sentencepiece import sentencepiece_model_pb2 as pb

from tokenmill import canaries, schema
from tokenmill.execution import make_executor
from tokenmill.runtime import StageResult, input_id
from tokenmill.tokenize.params import Tokenize
from tokenmill.tokenizer import Tokenizer

STAGE = "tokenize"
INDEX = pa.schema([
    ("doc_id", pa.string()),
    ("source", pa.string()),
    ("bucket", pa.string()),  # mixture bucket: <bucket> or <bucket>/<tier>
    ("shard", pa.string()),  # token file, relative to the stage's output directory
    ("offset", pa.int64()),  # first token of the document in that file
    ("length", pa.int64()),  # tokens of the document; the end-of-text token follows it
])


def tier_of(score: float | None, tiers: Mapping[str, float]) -> str:
    """The highest tier whose minimum the score reaches; tiers are {name: min_score}."""
    if score is None:
        return min(tiers, key=tiers.get)
    for name, floor in sorted(tiers.items(), key=lambda kv: -kv[1]):
        if score >= floor:
            return name
    return min(tiers, key=tiers.get)


def tier_cutoffs(quantiles: Mapping[str, Mapping[str, float]], documents: Path, quality: Path) -> dict:
    """{bucket: {tier: quantile}} -> {bucket: {tier: score}} over the bucket's documents' quality scores."""
    if not quantiles:
        return {}
    if not list(quality.glob("*.parquet")):
        raise FileNotFoundError(f"tokenize.quality_tiers needs the quality stage's decisions in {quality}")
    import duckdb  # here, not at the top: training nodes import this module for INDEX and need no DuckDB

    con = duckdb.connect()
    out = {}
    for bucket, tiers in quantiles.items():
        scores = con.execute(f"""SELECT q.scores['quality_score'] FROM read_parquet('{documents}/*.parquet') d
                                 JOIN read_parquet('{quality}/*.parquet') q USING (doc_id)
                                 WHERE d.bucket = ? AND q.scores['quality_score'] IS NOT NULL""", [bucket]).fetchall()
        values = np.array([r[0] for r in scores], dtype=np.float64)
        out[bucket] = {t: (float(np.quantile(values, q)) if values.size and q > 0 else 0.0) for t, q in tiers.items()}
    con.close()
    return out


DOMAIN_PARTS = ("topic", "format", "toxicity")  # read from the domains stage's decisions


def bucket_name(parts: list[str], bucket: str, tiers: Mapping[str, float] | None, score: float | None,
                labels: Mapping[str, str]) -> str:
    """The mixture bucket of a document: its parts in tokenize.buckets' order, joined by "/"."""
    values = {"source": bucket, "tier": tier_of(score, tiers) if tiers else None, **labels}
    return "/".join(values[p] for p in parts if values.get(p) is not None)


def domain_labels(decisions: str) -> dict[str, dict[str, str]]:
    """doc_id -> {topic, format, toxicity} from a domains stage's decision shard."""
    out = {}
    for row in pq.read_table(decisions, columns=["doc_id", "reason", "details"]).to_pylist():
        details = json.loads(row["details"] or "{}")
        out[row["doc_id"]] = {"topic": details.get("topic"), "format": details.get("format"),
                              "toxicity": "toxic" if row["reason"] == "toxicity_tagged" else "clean"}
    return out


@dataclass
class TokenizeTask:
    input_path: str
    quality_decisions: str | None  # the quality stage's decision shard with the same name, for tiers
    tokenizer_dir: str
    out_dir: str
    tiers: dict
    parts: tuple = ("source", "tier")  # tokenize.buckets
    domain_decisions: str | None = None  # the input (domains) stage's decision shard, when parts name its labels


_TOKENIZERS: dict[str, object] = {}
_NEWLINE_IDS: WeakKeyDictionary = WeakKeyDictionary()  # Tokenizer -> newline_id


def newline_id(tok) -> int | None:
    """The id of "\\n" when a document's ids equal its lines' ids joined by that id, else None.

    That holds for BPE models whose "\\n" is a user-defined piece and whose normaliser leaves lines alone
    (identity rules, no dummy prefix, extra whitespace kept: the project's lossless settings): SentencePiece
    never merges a user-defined piece with its neighbours (bpe_model.cc, `freeze`), so every merge happens
    inside one line. Other models (unigram, lossy normalisation) return None and are encoded whole.
    """
    if tok not in _NEWLINE_IDS:
        proto = pb.ModelProto()
        proto.ParseFromString(tok.sp.serialized_model_proto())
        ns = proto.normalizer_spec
        nl = tok.sp.piece_to_id("\n")
        ok = (proto.trainer_spec.model_type == pb.TrainerSpec.BPE and nl != tok.sp.unk_id()
              and proto.pieces[nl].type == pb.ModelProto.SentencePiece.USER_DEFINED
              and ns.name == "identity" and not ns.precompiled_charsmap
              and not ns.add_dummy_prefix and not ns.remove_extra_whitespaces)
        _NEWLINE_IDS[tok] = nl if ok else None
    return _NEWLINE_IDS[tok]


def encode_documents(tok, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Tokenizer.encode_documents(texts) — the same tokens and lengths — computed line by line where that is
    exact (newline_id): documents as one token array, each followed by eos, and each length (eos included).

    Why: SentencePiece's BPE merge queue costs more per byte on long inputs. On 8.1 MB of real text (216
    documents of up to 64 KB, benchmarks/bench_tokenizer.py, RESULTS.md Tokenizer section) one `encode(list)`
    over the documents' lines ran at 7.1 MB per CPU-second against 5.2 over whole documents, and this function
    at 6.3 against 4.6 for Tokenizer.encode_documents, with byte-identical token shards.
    """
    nl = newline_id(tok)
    if nl is None or not texts:
        return tok.encode_documents(texts)
    split = [t.split("\n") for t in texts]
    ids = tok.sp.encode([line for lines in split for line in lines], num_threads=1)
    starts = np.zeros(len(split), dtype=np.int64)
    np.cumsum([len(lines) for lines in split[:-1]], out=starts[1:])
    # Every line is followed by "\n" except a document's last, which is followed by end-of-text.
    for x in ids:
        x.append(nl)
    for s in starts[1:]:
        ids[s - 1][-1] = tok.eos_id
    ids[-1][-1] = tok.eos_id
    per_line = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
    lengths = np.add.reduceat(per_line, starts)
    flat = np.fromiter(chain.from_iterable(ids), dtype=tok.dtype, count=int(per_line.sum()))
    return flat, lengths


def tokenize_shard(task: TokenizeTask) -> dict:
    if task.tokenizer_dir not in _TOKENIZERS:
        _TOKENIZERS[task.tokenizer_dir] = Tokenizer(task.tokenizer_dir)
    tok = _TOKENIZERS[task.tokenizer_dir]
    docs = pq.read_table(task.input_path, columns=["doc_id", "source", "bucket", "text"]).to_pylist()
    scores = {}
    if task.quality_decisions and task.tiers:
        for row in pq.read_table(task.quality_decisions, columns=["doc_id", "scores"]).to_pylist():
            scores[row["doc_id"]] = dict(row["scores"] or []).get("quality_score")
    labels = domain_labels(task.domain_decisions) if task.domain_decisions else {}
    shard = Path(task.input_path).stem
    by_bucket: dict[str, list[dict]] = {}
    for d in docs:
        key = bucket_name(list(task.parts), d["bucket"], task.tiers.get(d["bucket"]) if "tier" in task.parts else None,
                          scores.get(d["doc_id"]), labels.get(d["doc_id"], {}))
        by_bucket.setdefault(key, []).append(d)
    index, tokens = [], 0
    for bucket in sorted(by_bucket):
        group = by_bucket[bucket]
        flat, lengths = encode_documents(tok, [d["text"] for d in group])
        rel = f"tokens/{bucket}/{shard}.bin"
        path = Path(task.out_dir) / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        flat.tofile(tmp)
        tmp.replace(path)
        offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]])
        for d, off, n in zip(group, offsets, lengths):
            index.append({"doc_id": d["doc_id"], "source": d["source"], "bucket": bucket, "shard": rel,
                          "offset": int(off), "length": int(n) - 1})
        tokens += int(lengths.sum())
    schema.write_parquet(index, INDEX, Path(task.out_dir) / "index" / f"{shard}.parquet")
    return {"documents": len(docs), "tokens": tokens}


def tokenize_documents(input_dir: str | Path, tokenizer_dir: str | Path, scores_dir: str | Path, params: Tokenize,
                       execution_cfg: Mapping | None, out_dir: str | Path) -> StageResult:
    """Tokenize input_dir's documents (a stage's output folder) with tokenizer_dir's model into out_dir: token
    shards and their index; quality tiers come from the `quality_score` in scores_dir's decisions. params: the
    stage's section (tokenmill.tokenize.params.Tokenize; its parameters and their defaults:
    conf/tokenize/default.yaml, which says what the tiers mean)."""
    input_dir, tok_dir, scores_dir = Path(input_dir), Path(tokenizer_dir), Path(scores_dir)
    shards = sorted((input_dir / "documents").glob("*.parquet"))
    tok = Tokenizer(tok_dir)
    quality = scores_dir / "decisions"
    result = StageResult()
    result.input_hashes[input_dir.name] = input_id(input_dir)
    result.input_hashes[tok_dir.name] = input_id(tok_dir)
    if params.quality_tiers:
        result.input_hashes[scores_dir.name] = input_id(scores_dir)
    tiers = tier_cutoffs(params.quality_tiers, input_dir / "documents", quality)
    result.extra["quality_tier_cutoffs"] = tiers
    parts = tuple(params.buckets)
    if set(parts) & set(DOMAIN_PARTS) and not (input_dir / "topics.parquet").exists():
        raise ValueError(f"tokenize.buckets: {[p for p in parts if p in DOMAIN_PARTS]} are the domains stage's labels, "
                         f"and {input_dir} is not a domains stage's output")
    domains = set(parts) & set(DOMAIN_PARTS)
    tasks = [TokenizeTask(str(p), str(quality / p.name) if (quality / p.name).exists() else None,
                          str(tok_dir), str(out_dir), tiers, parts,
                          str(input_dir / "decisions" / p.name) if domains else None) for p in shards]
    with make_executor(execution_cfg, result.timing) as ex:
        results = ex.map(tokenize_shard, tasks, desc=STAGE)
    # The canaries (tokenmill.canaries): their own token file and index shard, beside the documents'.
    planted = canaries.plant(params.canaries, tok, out_dir)
    schema.write_parquet(planted, INDEX, Path(out_dir) / "index" / "canaries.parquet")
    # Consumers (mixture, training) need these without loading the tokenizer.
    result.extra.update({"vocab_size": tok.vocab_size, "eos_id": tok.eos_id, "dtype": np.dtype(tok.dtype).name})
    result.metrics.update({"documents_tokenized": sum(r["documents"] for r in results), "canaries": len(planted),
                           "tokens": sum(r["tokens"] for r in results), "dtype": np.dtype(tok.dtype).name})
    return result
