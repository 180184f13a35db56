"""Model-based quality filtering (DCLM-style): a fastText classifier of reference prose vs. crawl.

Positives are documents from reference sources named in the config (and optional reference files);
negatives a seeded random sample of crawl documents. The model is part of the stage's output, every
document gets a score (kept ones too), and documents in the cut buckets are kept above a threshold or
within the top fraction of scores (DCLM keeps its top 10%).
"""

from __future__ import annotations

import gzip
import hashlib
import multiprocessing
import os
import re
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Iterable, Mapping

import duckdb
import numpy as np
import pyarrow.parquet as pq

from tokenmill.docstage import Outcome, map_document_shards
from tokenmill.execution import make_executor
from tokenmill.runtime import StageRun

LABEL_HQ, LABEL_LQ = "__label__hq", "__label__lq"
_SPACE = re.compile(r"\s+")


def prepare(text: str, max_chars: int) -> str:
    """fastText reads one example per line: flatten whitespace, lower-case, bound the length."""
    return _SPACE.sub(" ", text[:max_chars]).strip().lower()


def _rank(seed: int, doc_id: str) -> str:
    return hashlib.blake2b(f"{seed}\x00{doc_id}".encode(), digest_size=8).hexdigest()


def reference_file_texts(paths: Iterable[str], min_words: int = 50) -> list[str]:
    """Extra positives from text files: paragraphs (blank-line separated) merged up to >= min_words."""
    texts = []
    for path in sorted(paths):
        opener = gzip.open if path.endswith(".gz") else open
        with opener(path, "rt", encoding="utf-8", errors="replace") as f:
            buf: list[str] = []
            for para in re.split(r"\n\s*\n", f.read()):
                buf.append(para)
                if sum(len(p.split()) for p in buf) >= min_words:
                    texts.append(" ".join(buf))
                    buf = []
    return texts


def training_examples(input_glob: str, params: Mapping) -> tuple[list[str], list[str]]:
    pos_cfg, neg_cfg = params["positives"], params["negatives"]
    seed, max_chars = int(params["model"]["seed"]), int(params["max_chars"])
    con = duckdb.connect()
    con.create_function("rank_key", lambda d: _rank(seed, d), ["VARCHAR"], "VARCHAR")
    sources = list(pos_cfg.get("sources") or [])
    pos = [r[0] for r in con.execute(
        f"SELECT text FROM read_parquet('{input_glob}') WHERE list_contains(?, source) "
        f"ORDER BY rank_key(doc_id) LIMIT ?", [sources, int(pos_cfg["max_examples"])]).fetchall()] if sources else []
    pos += reference_file_texts(pos_cfg.get("paths") or [])[: int(pos_cfg["max_examples"])]
    neg = [r[0] for r in con.execute(
        f"SELECT text FROM read_parquet('{input_glob}') WHERE list_contains(?, bucket) "
        f"AND NOT list_contains(?, source) ORDER BY rank_key(doc_id) LIMIT ?",
        [list(neg_cfg["buckets"]), sources, int(neg_cfg["max_examples"])]).fetchall()]
    con.close()
    if not pos or not neg:
        raise ValueError(f"quality: need positives and negatives to train, got {len(pos)} and {len(neg)} "
                         f"(positives.sources={sources}, negatives.buckets={neg_cfg['buckets']})")
    return [prepare(t, max_chars) for t in pos], [prepare(t, max_chars) for t in neg]


def train(pos: list[str], neg: list[str], model_cfg: Mapping, out_path: Path) -> dict:
    """Train in a fresh process: fastText's trainer has hit NaN in processes that had already run other
    native code (seen under pytest), never in a clean one, and the model must not depend on what ran before."""
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=1, mp_context=ctx) as pool:
        return pool.submit(_train, pos, neg, dict(model_cfg), str(out_path)).result()


def _train(pos: list[str], neg: list[str], model_cfg: Mapping, out_path: str) -> dict:
    import fasttext

    rng = np.random.default_rng(int(model_cfg["seed"]))
    lines = [f"{LABEL_HQ} {t}" for t in pos] + [f"{LABEL_LQ} {t}" for t in neg]
    lines = [lines[i] for i in rng.permutation(len(lines))]
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False, encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
        train_file = f.name
    try:
        # One thread: fastText's multi-threaded SGD is not reproducible; the model must be (contract 6).
        model = fasttext.train_supervised(train_file, dim=int(model_cfg["dim"]), epoch=int(model_cfg["epoch"]),
                                          lr=float(model_cfg["lr"]), wordNgrams=int(model_cfg["word_ngrams"]),
                                          minCount=int(model_cfg["min_count"]), seed=int(model_cfg["seed"]),
                                          thread=1, verbose=0)
    finally:
        os.unlink(train_file)
    model.save_model(out_path)
    return {"positives": len(pos), "negatives": len(neg)}


_MODELS: dict[str, object] = {}


def hq_probability(model_path: str, texts: list[str]) -> np.ndarray:
    import fasttext

    if model_path not in _MODELS:
        _MODELS[model_path] = fasttext.load_model(model_path)
    labels, probs = _MODELS[model_path].predict(texts, k=2)
    return np.array([dict(zip(ls, ps)).get(LABEL_HQ, 0.0) for ls, ps in zip(labels, probs)], dtype=np.float64)


def score_shard(task: tuple[str, str, int, list[str]]) -> np.ndarray:
    """Worker: scores of the cut buckets' documents in one shard (for the top-fraction cut-off)."""
    path, model_path, max_chars, buckets = task
    t = pq.read_table(path, columns=["text", "bucket"]).to_pylist()
    texts = [prepare(r["text"], max_chars) for r in t if r["bucket"] in buckets]
    return hq_probability(model_path, texts) if texts else np.array([])


class QualityProcessor:
    """Per-document decision given a trained model and a cut-off (params carry both)."""

    def __init__(self, params: Mapping):
        self.model_path = params["_model_path"]
        self.cutoff = float(params["_cutoff"])
        self.max_chars = int(params["max_chars"])
        self.cut_buckets = set(params["cut_buckets"])

    def __call__(self, doc: dict) -> Outcome:
        score = float(hq_probability(self.model_path, [prepare(doc["text"], self.max_chars)])[0])
        scores = {"quality_score": round(score, 6)}
        if doc["bucket"] not in self.cut_buckets:
            return Outcome("keep", "bucket_not_cut", scores)
        if score >= self.cutoff:
            return Outcome("keep", "above_quality_cut", scores)
        return Outcome("drop", "below_quality_cut", scores, {"cutoff": round(self.cutoff, 6)})


def run_quality(params: Mapping, execution_cfg: Mapping | None, data_root: str | Path = "data",
                input_stage: str = "dedup") -> dict:
    data_root = Path(data_root)
    shards = sorted((data_root / input_stage / "documents").glob("*.parquet"))
    input_glob = str(data_root / input_stage / "documents" / "*.parquet")
    keep = params["keep"]
    if keep["mode"] not in ("threshold", "top_fraction"):
        raise ValueError(f"quality.keep.mode must be threshold or top_fraction, got {keep['mode']!r}")
    with StageRun("quality", data_root / "quality", dict(params), input_stage=input_stage) as run:
        pos, neg = training_examples(input_glob, params)
        model_path = run.tmp / "model.bin"
        run.extra["training"] = train(pos, neg, params["model"], model_path)
        # A classifier that did not learn scores everything alike, and its cut would be a random sample:
        # refuse to apply it rather than filter the corpus by noise.
        sep = float(hq_probability(str(model_path), pos).mean() - hq_probability(str(model_path), neg).mean())
        run.extra["training"]["separation"] = run.metrics["training_separation"] = round(sep, 6)
        if sep < float(params.get("min_separation", 0.2)):
            raise ValueError(f"quality: the classifier did not learn (mean P(hq) of positives minus negatives = "
                             f"{sep:.4f} < min_separation); raise quality.model.epoch or lr, or add examples")
        if keep["mode"] == "threshold":
            cutoff = float(keep["threshold"])
        else:
            tasks = [(str(p), str(model_path), int(params["max_chars"]), list(params["cut_buckets"])) for p in shards]
            with make_executor(execution_cfg) as ex:
                scores = np.concatenate([np.array([])] + ex.map(score_shard, tasks, desc="quality scores"))
            # Keep the top fraction: the cut-off is the score at that quantile of the cut buckets.
            cutoff = float(np.quantile(scores, 1 - float(keep["top_fraction"]))) if scores.size else 0.0
        run.extra["cutoff"] = cutoff
        run.metrics["cutoff"] = round(cutoff, 6)
        proc_params = {**params, "_model_path": str(model_path), "_cutoff": cutoff}
        map_document_shards(run, input_stage, "tokenmill.quality:QualityProcessor", proc_params, execution_cfg,
                            data_root)
    return run.manifest
