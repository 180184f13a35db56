"""The decontaminate stage: drop (or flag) documents that contain benchmark items, and table every overlap.

A document is contaminated by an item when it holds at least `threshold` of the item's distinct n-grams
(a copy of most of the item, however re-wrapped or re-cased) or at least `min_matches` of them (a long
verbatim run from a long item: a BoolQ passage, a LAMBADA context, a HumanEval function, even if the rest
of the item is missing). Defaults and why are in conf/decontaminate/default.yaml.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import pyarrow as pa

from tokenmill import schema
from tokenmill.decontam.ngrams import NgramIndex, normalize
from tokenmill.decontam.readers import benchmark_path, read_benchmark
from tokenmill.docstage import Outcome, map_document_shards
from tokenmill.runtime import StageRun, merge_params, sha1_file, tree_digest

STAGE = "decontaminate"
DEFAULTS = {"ngram": 13, "min_item_words": 8, "threshold": 0.5, "min_matches": 20, "action": "drop",
            "benchmarks": []}

# One row per (document, benchmark item) sharing at least one n-gram: the table auditors join on doc_id.
CONTAMINATION = pa.schema(
    [
        ("doc_id", pa.string()),
        ("benchmark", pa.string()),
        ("item_id", pa.string()),
        ("matched_ngrams", pa.int64()),
        ("item_ngrams", pa.int64()),
        ("overlap_fraction", pa.float64()),
        ("contaminated", pa.bool_()),  # this overlap alone meets the rule (threshold or min_matches)
        ("action", pa.string()),  # the document's decision at this stage: drop, or keep when flagging
    ]
)


def resolve_params(params: Mapping[str, Any]) -> dict:
    p = merge_params("decontaminate", DEFAULTS, params)
    if p["action"] not in ("drop", "flag"):
        raise ValueError(f"decontaminate: action must be drop or flag, got {p['action']!r}")
    if not 0 < float(p["threshold"]) <= 1:
        raise ValueError(f"decontaminate: threshold must be in (0, 1], got {p['threshold']!r}")
    if int(p["ngram"]) < 1 or int(p["min_item_words"]) < 1 or int(p["min_matches"]) < 1:
        raise ValueError("decontaminate: ngram, min_item_words and min_matches must be positive")
    return p


def build_index(params: Mapping[str, Any]) -> NgramIndex:
    p = resolve_params(params)
    for spec in p["benchmarks"]:  # every path checked before any is read: one clear line for a missing one
        benchmark_path(spec)
    started = time.perf_counter()
    items = (it for spec in p["benchmarks"] for it in read_benchmark(spec))
    index = NgramIndex.build(items, n=int(p["ngram"]), min_item_words=int(p["min_item_words"]))
    index.stats["build_seconds"] = round(time.perf_counter() - started, 3)
    return index


class DecontamProcessor:
    """Built once per worker (the index is rebuilt there: a few seconds for ~50k items), called per document."""

    def __init__(self, params: Mapping[str, Any]):
        p = resolve_params(params)
        self.threshold = float(p["threshold"])
        self.min_matches = int(p["min_matches"])
        self.flag = p["action"] == "flag"
        self.index = build_index(p)

    def __call__(self, doc: Mapping[str, Any]) -> Outcome:
        items, matched, ngrams = self.index.match(normalize(doc["text"] or ""))
        if not len(items):
            return Outcome("keep", "clean", {"max_overlap_fraction": 0.0, "max_matched_ngrams": 0.0,
                                             "matched_items": 0.0})
        frac = matched / ngrams
        bad = (frac >= self.threshold) | (matched >= self.min_matches)
        scores = {"max_overlap_fraction": round(float(frac.max()), 6),
                  "max_matched_ngrams": float(matched.max()),
                  "matched_items": float(bad.sum())}
        overlaps = []
        for i in np.lexsort((items, -frac)):  # most overlapped first; ties in item order
            bench, item_id = self.index.items[items[i]]
            overlaps.append({"benchmark": bench, "item_id": item_id, "matched_ngrams": int(matched[i]),
                             "item_ngrams": int(ngrams[i]),
                             "overlap_fraction": round(float(frac[i]), 6), "contaminated": bool(bad[i])})
        # Overlaps below the rule are recorded too (they are evidence an auditor may weigh differently).
        details = {"overlaps": overlaps}
        if not bad.any():
            return Outcome("keep", "clean", scores, details)
        if self.flag:
            return Outcome("keep", "flagged_contaminated", scores, details)
        return Outcome("drop", "contaminated", scores, details)


def contamination_rows(decisions: pa.Table) -> list[dict]:
    """Every overlap in a decisions table (schema.DECISION, details JSON) as CONTAMINATION rows."""
    rows = []
    for doc_id, action, details in zip(*(decisions.column(c).to_pylist() for c in ("doc_id", "action", "details"))):
        if not details:
            continue
        for o in json.loads(details).get("overlaps", []):
            rows.append({"doc_id": doc_id, "action": action, **{k: o[k] for k in CONTAMINATION.names if k in o}})
    rows.sort(key=lambda r: (r["doc_id"], r["benchmark"], r["item_id"]))
    return rows


def write_contamination(stage_out_dir: str | Path) -> dict:
    """Read stage_out_dir/decisions/*.parquet with DuckDB; write stage_out_dir/contamination/contamination.parquet.

    Returns deterministic counts for the stage metrics. The SQL unnests the details JSON so the table is built
    out of core however many decisions there are.
    """
    import duckdb

    out_dir = Path(stage_out_dir)
    target = out_dir / "contamination" / "contamination.parquet"
    shards = sorted((out_dir / "decisions").glob("*.parquet"))
    con = duckdb.connect()
    if shards:
        files = "[" + ", ".join("'" + str(p).replace("'", "''") + "'" for p in shards) + "]"
        query = f"""
            WITH o AS (
                SELECT doc_id, action,
                       unnest(from_json(details, '{{"overlaps": [{{"benchmark": "VARCHAR", "item_id": "VARCHAR",
                           "matched_ngrams": "BIGINT", "item_ngrams": "BIGINT", "overlap_fraction": "DOUBLE",
                           "contaminated": "BOOLEAN"}}]}}').overlaps) AS x
                FROM read_parquet({files})
                WHERE details IS NOT NULL
            )
            SELECT doc_id, x.benchmark AS benchmark, x.item_id AS item_id, x.matched_ngrams AS matched_ngrams,
                   x.item_ngrams AS item_ngrams, x.overlap_fraction AS overlap_fraction,
                   x.contaminated AS contaminated, action
            FROM o ORDER BY doc_id, benchmark, item_id
        """
        table = con.sql(query).to_arrow_table()
    else:
        table = CONTAMINATION.empty_table()
    schema.write_parquet(table, CONTAMINATION, target)  # atomic: temporary name, then rename
    hit = table.filter(table.column("contaminated"))
    return {"overlaps": table.num_rows,
            "contaminating_overlaps": hit.num_rows,
            "contaminated_documents": len(set(hit.column("doc_id").to_pylist())),
            "contaminated_items": len(set(zip(hit.column("benchmark").to_pylist(),
                                              hit.column("item_id").to_pylist())))}


def benchmark_digests(params: Mapping[str, Any]) -> dict[str, str]:
    """{"benchmark:<name>": content hash} for the run id: the benchmark files are inputs like the documents."""
    out = {}
    for spec in resolve_params(params)["benchmarks"]:
        path = benchmark_path(spec)
        if path is not None:
            out[f"benchmark:{spec['name']}"] = tree_digest(path) if path.is_dir() else sha1_file(path)
    return out


def run_decontaminate(params: Mapping[str, Any], execution_cfg: Mapping | None, data_root: str | Path = "data",
                      input_stage: str = "quality") -> dict:
    """The stage: a decision per document through the shared shard loop, then the contamination table."""
    p = resolve_params(params)
    digests = benchmark_digests(p)  # also fails here, in one line, on a missing benchmark (not in every worker)
    with StageRun(STAGE, Path(data_root) / STAGE, p, input_stage=input_stage) as run:
        run.input_hashes.update(digests)  # a changed benchmark file is a new run
        map_document_shards(run, input_stage, "tokenmill.decontam:DecontamProcessor", p, execution_cfg, data_root)
        stats = write_contamination(run.tmp)  # inside the run: the table lands before the rename
        run.metrics["contamination"] = stats
        run.extra["contamination"] = stats
    return run.manifest
