"""The dedup stage: exact duplicates, MinHash near duplicates, repeated boilerplate lines.

Three passes, so that no step holds the corpus in memory:

1. sketch (per shard, through the executor): read each document once and write small Parquet tables to a
   work directory: the exact key, the MinHash signature and LSH band hashes, the distinct hashes of lines.
2. global (DuckDB, one process, out of core): exact-duplicate groups, candidate pairs from band collisions,
   verification by estimated Jaccard, connected components, the kept document of every group, the lines
   that occur in more than `lines.max_docs` kept documents. Written as one sorted `verdicts` table.
3. apply (per shard, through the executor): read the shard again with its verdicts, drop the duplicates,
   remove repeated lines from the rest, write documents and one decision per input document.

Decisions (one per input document, in this order of precedence):
  drop   exact_duplicate          details {duplicate_of}
  drop   near_duplicate           details {duplicate_of, cluster_id, jaccard_estimate}, scores {max_jaccard}
  drop   empty_after_line_dedup   nothing but repeated lines was left
  modify repeated_lines_removed   scores {lines_removed, chars_removed}
  keep   unique
Kept and modified documents carry scores {max_jaccard, lines_removed, chars_removed} and, when they represent
a near-duplicate cluster, details {cluster_id, cluster_size}; cluster_id is the representative's doc_id.

Which document is kept: of exact duplicates, the smallest doc_id; of a near-duplicate cluster, the longest
text (most characters), ties broken by the smallest doc_id. Line removal counts lines over the documents
that survive exact and near dedup (copies would otherwise inflate the counts) and applies to them only.
"""

from __future__ import annotations

import shutil
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from tokenmill import schema
from tokenmill.dedup import cluster, minhash
from tokenmill.dedup.text import exact_key, line_hashes, remove_lines
from tokenmill.execution import make_executor
from tokenmill.runtime import StageResult, input_id
from tokenmill.dedup.params import Dedup, Near
from tokenmill.execution.params import Execution

STAGE = "dedup"

SIG_ROWS = 4096  # documents per sketch batch


def lsh_shape(near: Near) -> tuple[int, int]:
    """(bands, rows): the ones set in the params, else the optimum for the threshold and the two weights."""
    if near.bands and near.rows:
        return near.bands, near.rows
    return minhash.optimal_bands(near.threshold, near.num_perm, near.false_positive_weight,
                                 near.false_negative_weight)


# --- pass 1: sketch -------------------------------------------------------------------------------------

@dataclass
class SketchTask:
    index: int
    input_path: str
    work: str
    params: Dedup
    bands: int
    rows: int


def _binary_column(sigs: np.ndarray) -> pa.Array:
    width = sigs.shape[1] * 4
    return pa.FixedSizeBinaryArray.from_buffers(pa.binary(width), len(sigs),
                                                [None, pa.py_buffer(np.ascontiguousarray(sigs).tobytes())])


class _Tables:
    """One Parquet file per work table for this shard, appended batch by batch (memory stays per batch)."""

    def __init__(self, work: Path, name: str):
        self.work, self.name, self.writers = work, name, {}

    def write(self, folder: str, columns: dict) -> None:
        table = pa.table(columns)
        if folder not in self.writers:
            (self.work / folder).mkdir(parents=True, exist_ok=True)
            self.writers[folder] = pq.ParquetWriter(self.work / folder / self.name, table.schema,
                                                    compression="zstd")
        self.writers[folder].write_table(table)

    def close(self) -> None:
        for w in self.writers.values():
            w.close()


def sketch_shard(task: SketchTask) -> dict:
    """Pass 1 for one shard: docs, sigs, bands and lines tables under task.work (see cluster.py)."""
    exact_p, near_p, lines_p = task.params.exact, task.params.near, task.params.lines
    skip = set(lines_p.skip_buckets)
    num_perm, min_chars = near_p.num_perm, lines_p.min_chars
    out = _Tables(Path(task.work), f"{task.index:06d}.parquet")
    row = 0
    pf = pq.ParquetFile(task.input_path)
    # An empty shard still writes every table (empty), so later globs always match.
    batches = pf.iter_batches(batch_size=SIG_ROWS, columns=["doc_id", "text", "bucket"]) if pf.metadata.num_rows \
        else [pa.record_batch({"doc_id": pa.array([], pa.string()), "text": pa.array([], pa.large_string()),
                               "bucket": pa.array([], pa.string())})]
    for batch in batches:
        texts = [t or "" for t in batch.column("text").to_pylist()]
        ids = np.arange((task.index << 32) + row, (task.index << 32) + row + len(texts), dtype=np.int64)
        row += len(texts)
        strip = exact_p.strip_punctuation
        out.write("docs", {
            "doc": ids, "doc_id": pa.array(batch.column("doc_id").to_pylist(), pa.string()),
            "chars": pa.array([len(t) for t in texts], pa.int64()),
            "exact_hash": pa.array([exact_key(t, strip) for t in texts] if exact_p.enabled
                                   else [None] * len(texts), pa.string()),
        })
        if near_p.enabled:
            sigs = minhash.signatures(texts, near_p.ngram, num_perm, near_p.seed)
            has = (sigs != minhash.MAX32).any(axis=1)  # documents without words join no bucket
            sigs, docs = sigs[has], ids[has]
        else:
            sigs, docs = np.empty((0, num_perm), np.uint32), np.empty(0, np.int64)
        out.write("sigs", {"doc": docs, "sig": _binary_column(sigs)})
        out.write("bands", {
            "doc": np.repeat(docs, task.bands),
            "band": np.tile(np.arange(task.bands, dtype=np.int16), len(docs)),
            "band_hash": minhash.band_hashes(sigs, task.bands, task.rows).reshape(-1),
        })
        line_docs, line_hashes_ = [np.empty(0, np.int64)], [np.empty(0, np.int64)]
        if lines_p.enabled:
            for doc, text, bucket in zip(ids, texts, batch.column("bucket").to_pylist()):
                if bucket not in skip:
                    h = line_hashes(text, min_chars)
                    line_docs.append(np.full(len(h), doc, dtype=np.int64))
                    line_hashes_.append(h)
        out.write("lines", {"doc": np.concatenate(line_docs), "line_hash": np.concatenate(line_hashes_)})
    out.close()
    return {"docs": row}


# --- pass 3: apply --------------------------------------------------------------------------------------

@dataclass
class ApplyTask:
    index: int
    input_path: str
    out_dir: str
    work: str
    params: Dedup


def _verdicts(work: Path, index: int) -> dict[int, dict]:
    lo, hi = index << 32, (index + 1) << 32
    table = pq.read_table(work / "verdicts.parquet", filters=[("doc", ">=", lo), ("doc", "<", hi)])
    return {row["doc"] - lo: row for row in table.to_pylist()}


def apply_shard(task: ApplyTask) -> dict:
    work = Path(task.work)
    near_on, lines_p = task.params.near.enabled, task.params.lines
    lines_on, min_chars = lines_p.enabled, lines_p.min_chars
    skip = set(lines_p.skip_buckets)
    repeated = np.load(work / "repeated_lines.npy") if lines_on else np.empty(0, np.int64)
    verdicts = _verdicts(work, task.index)
    table = pq.read_table(task.input_path)
    ids, texts, buckets = (table.column(c).to_pylist() for c in ("doc_id", "text", "bucket"))
    keep_rows, new_texts, decisions = [], [], []
    counts: Counter[str] = Counter()
    for row, (doc_id, text, bucket) in enumerate(zip(ids, texts, buckets)):
        text = text or ""
        v = verdicts.get(row, {})
        kind = v.get("kind")
        # Exact duplicates never reach the near-duplicate step, so they have no Jaccard score.
        scores: dict[str, float] = {}
        if near_on and kind != "exact":
            scores["max_jaccard"] = float(v.get("max_jaccard") or 0.0)
        if kind == "exact":
            action, reason, details = "drop", "exact_duplicate", {"duplicate_of": v["duplicate_of"]}
        elif kind == "near":
            action, reason = "drop", "near_duplicate"
            details = {"duplicate_of": v["duplicate_of"], "cluster_id": v["cluster_id"],
                       "jaccard_estimate": v["jaccard"]}
        else:
            details = {}
            if v.get("cluster_id") is not None:
                details.update(cluster_id=v["cluster_id"], cluster_size=int(v["cluster_size"]))
            if v.get("exact_duplicates"):
                details["exact_duplicates"] = int(v["exact_duplicates"])
            removed = 0
            if lines_on and bucket not in skip:
                new, removed = remove_lines(text, repeated, min_chars)
                scores.update(lines_removed=float(removed), chars_removed=float(len(text) - len(new)))
            if not removed:
                action, reason = "keep", "unique"
            elif not new.strip():
                action, reason = "drop", "empty_after_line_dedup"
            else:
                action, reason, text = "modify", "repeated_lines_removed", new
        decisions.append(schema.decision(doc_id, STAGE, action, reason, scores, details or None))
        counts[f"{action}:{reason}"] += 1
        if action != "drop":
            keep_rows.append(row)
            new_texts.append(text)
    name = Path(task.input_path).name
    out = table.take(pa.array(keep_rows, pa.int64()))
    out = out.set_column(out.schema.get_field_index("text"), "text", pa.array(new_texts, pa.large_string()))
    schema.write_parquet(out.select(schema.DOCUMENT.names).cast(schema.DOCUMENT), schema.DOCUMENT,
                         Path(task.out_dir) / "documents" / name)
    schema.write_parquet(decisions, schema.DECISION, Path(task.out_dir) / "decisions" / name)
    return {"counts": dict(counts)}


# --- the stage ------------------------------------------------------------------------------------------

def deduplicate(input_dir: str | Path, p: Dedup, execution_cfg: Mapping[str, Any] | None,
                out_dir: str | Path) -> StageResult:
    """Deduplicate input_dir/documents (a stage's output folder) into out_dir: documents, one decision per
    document, the LSH shape and the cluster statistics. p: the dedup section, resolved by the stage script."""
    input_dir, out_dir = Path(input_dir), Path(out_dir)
    shards = sorted((input_dir / "documents").glob("*.parquet"))
    exe = Execution.resolve(execution_cfg).model_dump()
    bands, rows = lsh_shape(p.near)
    result = StageResult()
    result.input_hashes[input_dir.name] = input_id(input_dir)
    work = out_dir / "_work"
    (out_dir / "documents").mkdir(parents=True)
    (out_dir / "decisions").mkdir(parents=True)
    stats: dict[str, Any] = {}
    with make_executor(exe, result.timing) as ex:
        sketch = [SketchTask(i, str(s), str(work), p, bands, rows) for i, s in enumerate(shards)]
        ex.map(sketch_shard, sketch, desc="dedup sketch")
        if shards:
            stats = _global(work, p, exe)
        apply = [ApplyTask(i, str(s), str(out_dir), str(work), p) for i, s in enumerate(shards)]
        for counts in ex.map(apply_shard, apply, desc="dedup apply"):
            result.add_counts(counts["counts"])
    shutil.rmtree(work, ignore_errors=True)
    result.extra["lsh"] = {"bands": bands, "rows": rows, "num_perm": p.near.num_perm,
                           "threshold": p.near.threshold,
                           "s_curve_midpoint": round((1 / bands) ** (1 / rows), 4)}
    result.extra["dedup"] = stats
    result.metrics["dedup"] = stats
    return result


def _global(work: Path, p: Dedup, exe: Mapping[str, Any]) -> dict[str, Any]:
    con = cluster.connect(work, exe["duckdb_memory_limit"], exe["workers"])
    try:
        cluster.register_inputs(con, work)
        stats: dict[str, Any] = {}
        exclude = None
        if p.exact.enabled:
            stats["exact_duplicates"] = int(cluster.exact_duplicates(con))
            exclude = "SELECT doc FROM exact WHERE rank > 1"
        if p.near.enabled:
            n = p.near
            stats.update(cluster.near_duplicates(con, n.num_perm, n.threshold, n.verify, n.bucket_window, exclude))
        cluster.write_verdicts(con, work / "verdicts.parquet", p.exact.enabled, p.near.enabled)
        if p.lines.enabled:
            repeated = cluster.repeated_lines(con, work / "verdicts.parquet", p.lines.max_docs)
            np.save(work / "repeated_lines.npy", repeated)
            stats["repeated_lines"] = len(repeated)
        return stats
    finally:
        con.close()
