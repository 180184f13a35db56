"""Model-based quality filtering (DCLM-style): a fastText classifier of reference prose vs. crawl.

Positives are documents from reference sources named in the config (and optional reference files);
negatives a seeded random sample of crawl documents. The models are part of the stage's output, every
document gets a score (kept ones too), and documents in the cut buckets are kept above a threshold or
within the top fraction of scores (DCLM keeps its top 10%).

Scores are cross-fitted: documents are split into folds by a hash of their doc_id, one model is trained per
fold on the examples of the other folds, and each document is scored by the model that never saw it. The
negatives are crawl documents that are themselves being cut; scored in-sample they would all look alike
(memorised as low quality), and the cut would rank noise.

Even out of fold, a classifier that separates its training sets perfectly can put every crawl page near 0
(it learnt "reference vs crawl", nothing that tells crawl pages apart): cutting 30% of such scores is a
draw. So the held-out scores of the cut buckets must be spread out (score_spread >= min_score_spread), or
the stage refuses (on_degenerate: refuse) or keeps every document with the reason recorded (skip_cut). The
default, auto, refuses when the user named the reference, and keeps the crawl when nobody did (the positives are
then the project's own corpus, which no real crawl resembles), with the reason, a metric and one warning line
naming the way to a reference.
Each document is predicted once: a scoring pass keeps every score, and the decisions are made from them.
"""

from __future__ import annotations

import glob
import gzip
import hashlib
import json
import multiprocessing
import os
import re
import shutil
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Iterable, Mapping

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import zstandard

from tokenmill.docstage import Outcome, map_document_shards, shard_scratch_file
from tokenmill.execution import log_phase, make_executor
from tokenmill.quality.params import FastTextModel, Quality, ReferenceDataset
from tokenmill.runtime import StageResult

LABEL_HQ, LABEL_LQ = "__label__hq", "__label__lq"
# The parameters and their defaults: tokenmill.quality.params.Quality, and conf/quality/default.yaml, which says
# why each value is what it is (tests/test_config.py keeps the two equal, so a default is stated once).
_SPACE = re.compile(r"\s+")


def prepare(text: str, max_chars: int) -> str:
    """fastText reads one example per line: flatten whitespace, lower-case, bound the length."""
    return _SPACE.sub(" ", text[:max_chars]).strip().lower()


def _rank(seed: int, doc_id: str) -> str:
    return hashlib.blake2b(f"{seed}\x00{doc_id}".encode(), digest_size=8).hexdigest()


def fold_of(seed: int, doc_id: str, folds: int) -> int:
    return int(hashlib.blake2b(f"fold\x00{seed}\x00{doc_id}".encode(), digest_size=8).hexdigest(), 16) % folds


def reference_file_texts(patterns: Iterable[str], min_words: int = 50, key: str = "quality.positives.paths") -> list[str]:
    """Positives from files, by glob: Parquet and JSONL (.gz, .zst) records give their `text`; plain text
    files give paragraphs (blank-line separated) merged up to >= min_words. A glob matching nothing is an
    error naming `key`."""
    texts = []
    for pattern in patterns:
        paths = sorted(p for p in glob.glob(pattern, recursive=True) if os.path.isfile(p))
        if not paths:
            raise FileNotFoundError(f"{key}: no files match {pattern!r}")
        for path in paths:
            texts.extend(_file_texts(path, min_words))
    return texts


def _file_texts(path: str, min_words: int) -> Iterable[str]:
    name = path.lower()
    if name.endswith(".parquet"):
        return [t for t in pq.read_table(path, columns=["text"]).column("text").to_pylist() if t]
    if name.endswith((".zst", ".zstd")):
        raw = zstandard.ZstdDecompressor().stream_reader(open(path, "rb")).read().decode("utf-8", "replace")
    else:
        with (gzip.open if name.endswith(".gz") else open)(path, "rt", encoding="utf-8", errors="replace") as f:
            raw = f.read()
    if ".jsonl" in name or ".json." in name or name.endswith(".json"):
        return [rec["text"] for line in raw.splitlines() if line.strip()
                if isinstance(rec := json.loads(line), dict) and rec.get("text")]
    texts, buf = [], []
    for para in re.split(r"\n\s*\n", raw):
        buf.append(para)
        if sum(len(p.split()) for p in buf) >= min_words:
            texts.append(" ".join(buf))
            buf = []
    return texts


def reference_dataset_texts(cfg: ReferenceDataset, max_examples: int) -> list[str]:
    """The first max_examples texts of a Hugging Face dataset (`quality.positives.dataset`), read by the
    maintained client in streaming mode: a Hub name downloads only what it reads, a local folder in the Hub's
    layout (data files under it) reads the same way offline. Rows without text are skipped."""
    import datasets  # 1.2 s to import: only when a Hugging Face reference dataset is named

    key = "quality.positives.dataset"
    try:
        rows = datasets.load_dataset(cfg.path, cfg.name, split=cfg.split, revision=cfg.revision, streaming=True)
    except Exception as exc:  # the client's errors are many classes (not found, offline, bad split): name the key
        raise ValueError(f"{key}: cannot load {cfg.path!r} (split {cfg.split!r}): "
                         f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}") from exc
    texts = []
    for row in rows:
        if cfg.text_field not in row:
            raise ValueError(f"{key}.text_field: {cfg.path!r} has no field {cfg.text_field!r} "
                             f"(its fields: {sorted(row)})")
        if isinstance(row[cfg.text_field], str) and row[cfg.text_field].strip():
            texts.append(row[cfg.text_field])
            if len(texts) >= max_examples:
                break
    return texts


# Where the positives came from: a reference the user named (sources in the input, files, a dataset), or the
# project's own reference corpus, which resembles no real crawl and so is no reason to cut one.
CONFIGURED, PROJECT_REFERENCE = "configured", "project_reference"


def training_examples(input_glob: str, params: Quality) -> tuple[list[tuple[str, str]], list[tuple[str, str]], str]:
    """(doc_id, prepared text) of positives and negatives, and where the positives came from.

    Positives: documents of `positives.sources` in the stage input, records of `positives.paths` and of
    `positives.dataset`; when none gives any (a real crawl with no reference source), the project's own
    reference corpus (`positives.reference`, written by the sample stage from the standard library's
    documentation)."""
    pos_cfg, neg_cfg = params.positives, params.negatives
    seed, max_chars, max_examples = params.model.seed, params.max_chars, pos_cfg.max_examples
    con = duckdb.connect()
    con.create_function("rank_key", lambda d: _rank(seed, d), ["VARCHAR"], "VARCHAR")
    sources = list(pos_cfg.sources)
    pos = con.execute(
        f"SELECT doc_id, text FROM read_parquet('{input_glob}') WHERE list_contains(?, source) "
        f"ORDER BY rank_key(doc_id) LIMIT ?", [sources, max_examples]).fetchall() if sources else []
    files = reference_file_texts(pos_cfg.paths)[:max_examples]
    rows = reference_dataset_texts(pos_cfg.dataset, max_examples) if pos_cfg.dataset.path else []
    origin = CONFIGURED
    if not pos and not files and not rows and pos_cfg.reference:
        files = reference_file_texts([pos_cfg.reference], key="quality.positives.reference")[:max_examples]
        origin = PROJECT_REFERENCE
    pos += [(f"reference-file:{i}", t) for i, t in enumerate(files)]
    pos += [(f"reference-dataset:{i}", t) for i, t in enumerate(rows)]
    neg = con.execute(
        f"SELECT doc_id, text FROM read_parquet('{input_glob}') WHERE list_contains(?, bucket) "
        f"AND NOT list_contains(?, source) ORDER BY rank_key(doc_id) LIMIT ?",
        [list(neg_cfg.buckets), sources, neg_cfg.max_examples]).fetchall()
    con.close()
    if not pos or not neg:
        raise ValueError(f"quality: need positives and negatives to train, got {len(pos)} and {len(neg)} "
                         f"(positives.sources={sources}, negatives.buckets={neg_cfg.buckets})")
    return [(d, prepare(t, max_chars)) for d, t in pos], [(d, prepare(t, max_chars)) for d, t in neg], origin


def train(pos: list[str], neg: list[str], model_cfg: FastTextModel, out_path: Path) -> dict:
    """Train in a fresh process: fastText's trainer has hit NaN in processes that had already run other
    native code (seen under pytest), never in a clean one, and the model must not depend on what ran before."""
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=1, mp_context=ctx) as pool:
        try:
            return pool.submit(_train, pos, neg, model_cfg, str(out_path)).result()
        except RuntimeError as exc:
            if "NaN" not in str(exc):
                raise
            raise ValueError("quality: fastText training diverged (loss became NaN), so the classifier did not "
                             "learn; change quality.model lr or epoch, or add examples") from exc


def _train(pos: list[str], neg: list[str], model_cfg: FastTextModel, out_path: str) -> dict:
    import fasttext  # only where a classifier trains or scores: the check stage imports this package for its schema

    rng = np.random.default_rng(model_cfg.seed)
    lines = [f"{LABEL_HQ} {t}" for t in pos] + [f"{LABEL_LQ} {t}" for t in neg]
    lines = [lines[i] for i in rng.permutation(len(lines))]
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False, encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
        train_file = f.name
    try:
        # One thread: fastText's multi-threaded SGD is not reproducible; the model must be (contract 6).
        model = fasttext.train_supervised(train_file, dim=model_cfg.dim, epoch=model_cfg.epoch, lr=model_cfg.lr,
                                          wordNgrams=model_cfg.word_ngrams, minCount=model_cfg.min_count,
                                          seed=model_cfg.seed, bucket=model_cfg.hash_buckets, thread=1, verbose=0)
    finally:
        os.unlink(train_file)
    model.save_model(out_path)
    return {"positives": len(pos), "negatives": len(neg)}


_MODELS: dict[str, object] = {}


def hq_probability(model_path: str, texts: list[str]) -> np.ndarray:
    import fasttext  # only where a classifier trains or scores: the check stage imports this package for its schema

    if model_path not in _MODELS:
        _MODELS[model_path] = fasttext.load_model(model_path)
    labels, probs = _MODELS[model_path].predict(texts, k=2)
    return np.array([dict(zip(ls, ps)).get(LABEL_HQ, 0.0) for ls, ps in zip(labels, probs)], dtype=np.float64)


def model_path(model_dir: str | Path, fold: int) -> str:
    return str(Path(model_dir) / f"model-{fold}.bin")


def out_of_fold_scores(model_dir: str, seed: int, folds: int, items: list[tuple[str, str]]) -> np.ndarray:
    """P(hq) of each (doc_id, prepared text), each from the model trained without the document's fold."""
    out = np.empty(len(items), dtype=np.float64)
    by_fold: dict[int, list[int]] = {}
    for i, (doc_id, _) in enumerate(items):
        by_fold.setdefault(fold_of(seed, doc_id, folds), []).append(i)
    for fold, idx in by_fold.items():
        out[idx] = hq_probability(model_path(model_dir, fold), [items[i][1] for i in idx])
    return out


def score_shard(task: tuple[str, str, int, int, int, list[str], str]) -> np.ndarray:
    """Worker: the quality score of every document of one shard, each predicted once, by the fold model that
    never saw it. Kept in `scratch` for the decisions; returns the cut buckets' scores (for the cut)."""
    path, model_dir, seed, folds, max_chars, buckets, scratch = task
    rows = pq.read_table(path, columns=["doc_id", "text", "bucket"]).to_pylist()
    if not rows:
        return np.array([])
    scores = out_of_fold_scores(model_dir, seed, folds, [(r["doc_id"], prepare(r["text"], max_chars)) for r in rows])
    pq.write_table(pa.table({"doc_id": [r["doc_id"] for r in rows], "score": scores}),
                   shard_scratch_file(scratch, rows[0]["doc_id"]))
    return scores[np.array([r["bucket"] in buckets for r in rows], dtype=bool)]


class QualityProcessor:
    """Per-shard decisions from the scores of the scoring pass (nothing is predicted here) and the cut-off.

    params carry the scratch directory of those scores, the cut-off, and, when the cut was skipped because
    the scores could not rank the crawl, the reason (every document is then kept and says why).
    """

    def __init__(self, params: Mapping):
        self.scratch = params["_scores_dir"]
        self.cutoff = float(params["_cutoff"])
        self.skipped = params.get("_cut_skipped")  # None, or why the cut was not made
        self.cut_buckets = set(params["cut_buckets"])

    def batch(self, docs: list[dict]):
        if not docs:
            return
        table = pq.read_table(shard_scratch_file(self.scratch, docs[0]["doc_id"]))
        if table["doc_id"].to_pylist() != [d["doc_id"] for d in docs]:
            raise RuntimeError("quality: the scores of the scoring pass do not belong to this shard "
                               f"(first document {docs[0]['doc_id']}); the input changed during the stage")
        for doc, score in zip(docs, table["score"].to_numpy()):
            yield self.decide(doc["bucket"], float(score))

    def decide(self, bucket: str, score: float) -> Outcome:
        scores = {"quality_score": round(score, 6)}
        if bucket not in self.cut_buckets:
            return Outcome("keep", "bucket_not_cut", scores)
        if self.skipped:
            return Outcome("keep", "quality_cut_skipped", scores, {"why": self.skipped})
        if score >= self.cutoff:
            return Outcome("keep", "above_quality_cut", scores)
        return Outcome("drop", "below_quality_cut", scores, {"cutoff": round(self.cutoff, 6)})


def score_spread(scores: np.ndarray, low: float = 0.1, high: float = 0.9) -> float:
    """How far apart the held-out scores of the crawl lie: the 90th minus the 10th percentile of P(hq).
    Near 0 when the classifier puts every crawl page in the same place (all ~0: it learnt "reference vs
    crawl" and nothing that tells crawl pages apart), so that any cut through them is decided by noise."""
    return float(np.quantile(scores, high) - np.quantile(scores, low)) if scores.size else 0.0


def auc(pos: np.ndarray, neg: np.ndarray) -> float:
    """Probability that a positive outscores a negative (ties count half): the Mann-Whitney statistic."""
    from scipy.stats import rankdata  # 1.2 s to import: only for the separation measure

    ranks = rankdata(np.concatenate([pos, neg]))  # tied scores share their average rank
    return float((ranks[: len(pos)].sum() - len(pos) * (len(pos) + 1) / 2) / (len(pos) * len(neg)))


def score_and_cut(input_dir: str | Path, params: Quality, execution_cfg: Mapping | None, out_dir: str | Path) -> StageResult:
    """Train the fold classifiers on input_dir's documents (a stage's output folder) against the reference,
    score every document out of fold and keep or drop the cut buckets' documents; writes the models, the
    documents and one decision per document under out_dir. params: the quality section, resolved by the stage
    script before any work (a typo must not cost a training run)."""
    input_dir, out_dir = Path(input_dir), Path(out_dir)
    shards = sorted((input_dir / "documents").glob("*.parquet"))
    input_glob = str(input_dir / "documents" / "*.parquet")
    keep = params.keep
    seed, folds = params.model.seed, params.model.folds
    on_degenerate = params.on_degenerate
    min_spread = params.min_score_spread
    result = StageResult()
    pos, neg, origin = training_examples(input_glob, params)
    result.extra["training"] = {"positives": len(pos), "negatives": len(neg), "folds": folds, "positives_from": origin}
    result.metrics["reference_fallback"] = origin == PROJECT_REFERENCE
    for k in range(folds):
        log_phase("quality", f"training fold model {k + 1}/{folds} ({len(pos)} positives, {len(neg)} negatives)")
        train([t for d, t in pos if fold_of(seed, d, folds) != k], [t for d, t in neg if fold_of(seed, d, folds) != k],
              params.model, Path(model_path(out_dir, k)))
    log_phase("quality", "scoring the training examples out of fold")
    # Held-out quality of the classifier: every example scored by the model that did not train on it.
    # One that did not learn would turn the cut into a random sample: refuse rather than filter by noise.
    p_pos = out_of_fold_scores(str(out_dir), seed, folds, pos)
    p_neg = out_of_fold_scores(str(out_dir), seed, folds, neg)
    sep = float(p_pos.mean() - p_neg.mean())
    result.metrics["heldout_auc"] = round(auc(p_pos, p_neg), 4)
    result.metrics["heldout_separation"] = round(sep, 4)
    if sep < params.min_separation:
        raise ValueError(f"quality: the classifier did not learn (held-out mean P(hq) of positives minus "
                         f"negatives = {sep:.4f} < min_separation); raise quality.model.epoch or lr, or add examples")
    # One scoring pass: every document predicted once, its score kept for the decisions; the cut
    # buckets' scores decide whether a cut means anything and where it lies.
    scratch = out_dir / "_scores"
    scratch.mkdir()
    tasks = [(str(p), str(out_dir), seed, folds, params.max_chars, list(params.cut_buckets),
              str(scratch)) for p in shards]
    with make_executor(execution_cfg, result.timing) as ex:
        scores = np.concatenate([np.array([])] + ex.map(score_shard, tasks, desc="quality scores"))
    spread = score_spread(scores)
    result.metrics["crawl_score_spread"] = round(spread, 4)
    skipped = None
    if scores.size and spread < min_spread:
        why = (f"held-out scores of the {scores.size} documents in the cut buckets cannot rank them: 90th - "
               f"10th percentile of P(hq) = {spread:.4f} < min_score_spread {min_spread} (range "
               f"{scores.min():.4f}..{scores.max():.4f}); a cut would be decided by noise")
        if on_degenerate == "auto":
            on_degenerate = "skip_cut" if origin == PROJECT_REFERENCE else "refuse"
        if on_degenerate == "skip_cut" and origin == PROJECT_REFERENCE:
            # Nobody named a reference for this crawl: keeping it is the honest default, not a cut by noise
            # and not a stop on the first real crawl a user brings.
            skipped = f"no_reference_for_this_crawl: spread {spread:.4f} < {min_spread}"
            print(f"quality: warning: the crawl is kept uncut: the project's own reference corpus (the standard "
                  f"library's documentation) cannot rank it (spread {spread:.4f} < min_score_spread {min_spread}); "
                  f"name a reference suited to it: -S quality.positives.dataset.path=<Hugging Face dataset or "
                  f"folder>, or text files under data/user/reference/ in quality.positives.paths", file=sys.stderr)
        elif on_degenerate == "refuse":
            raise ValueError(f"quality: {why}. Give the classifier reference text closer to the good part of "
                             f"the crawl, or set quality.on_degenerate: skip_cut to keep every document")
        else:
            skipped = f"degenerate_scores: spread {spread:.4f} < {min_spread}"
            log_phase("quality", f"cut skipped: {why}")
    if skipped:
        cutoff = 0.0
    elif keep.mode == "threshold":
        cutoff = keep.threshold
    else:
        # Keep the top fraction: the cut-off is the score at that quantile of the cut buckets.
        cutoff = float(np.quantile(scores, 1 - keep.top_fraction)) if scores.size else 0.0
    result.extra["cutoff"] = cutoff
    result.extra["cut_skipped"] = skipped
    result.metrics["cutoff"] = round(cutoff, 6)
    result.metrics["cut_skipped"] = skipped is not None
    proc_params = {"cut_buckets": list(params.cut_buckets), "_scores_dir": str(scratch), "_cutoff": cutoff,
                   "_cut_skipped": skipped}
    result.record(map_document_shards("quality", input_dir, QualityProcessor, proc_params, execution_cfg, out_dir))
    shutil.rmtree(scratch)  # scratch, not output: the decisions hold every score
    return result
