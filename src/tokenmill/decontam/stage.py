"""The decontaminate stage: drop (or flag) documents that contain benchmark items, and table every overlap.

A document is contaminated by an item when, aligned with one of the item's forms (ngrams.NgramIndex), it
matches at least `threshold` of the form's words (a copy of most of the item, however re-wrapped, re-cased
or lightly edited, or of its prompt alone) or at least `min_matches` words (a long run from a long item:
a BoolQ passage, a LAMBADA context, a HumanEval function, even if the rest of the item is missing).
Defaults and why are in conf/decontaminate/default.yaml.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from tokenmill import columns, schema
from tokenmill.decontam.ngrams import NgramIndex, _prepare, hash_texts
from tokenmill.decontam.readers import benchmark_path, read_items
from tokenmill.docstage import Outcome, map_document_shards
from tokenmill.decontam.params import Decontaminate
from tokenmill.runtime import StageResult, sha1_file, tree_digest

STAGE = "decontaminate"

# One row per (document, benchmark item) overlap that meets the rule, or NEAR of it (at most MAX_NEAR_MISSES
# of those per document): the table auditors join on doc_id. item_id is
# readers.item_id(benchmark, record), the name the evaluation stage gives the same item.
CONTAMINATION = pa.schema(
    [
        ("doc_id", pa.string()),
        ("benchmark", pa.string()),
        ("item_id", pa.string()),
        ("matched_ngrams", pa.int64()),  # seed n-grams of the item found in the document on its diagonals
        ("item_ngrams", pa.int64()),  # seed n-grams of the item's matched form
        ("overlap_fraction", pa.float64()),  # matched_words / item_words
        ("contaminated", pa.bool_()),  # this overlap alone meets the rule (threshold or min_matches)
        ("action", pa.string()),  # the document's decision at this stage: drop, or keep when flagging
        ("matched_words", pa.int64()),  # words of the item's form the aligned document repeats
        ("item_words", pa.int64()),  # the form's words, template words excluded
    ]
)
# Near misses (three quarters of the rule: fraction >= 0.75 threshold or matched words >= 0.75 min_matches)
# recorded per document besides the contaminating overlaps, the strongest first. At half the rule, 257
# overlaps were recorded for the 2,798 documents of benchmarks/bench_decontam.py, nearly all common phrases.
NEAR = 0.75
MAX_NEAR_MISSES = 20
# Characters of documents matched together: a batch costs about as many numpy calls as one document.
BATCH_CHARS = 1 << 18


def build_index(params: Decontaminate) -> NgramIndex:
    specs = [spec.model_dump() for spec in params.benchmarks]  # the readers take a benchmark's mapping
    for spec in specs:  # every path checked before any is read: one clear line for a missing one
        benchmark_path(spec)
    started = time.perf_counter()
    items = (it for spec in specs for it in read_items(spec))
    index = NgramIndex.build(items, n=params.ngram, min_item_words=params.min_item_words,
                             template_items=params.template_items, slack=params.slack)
    index.stats["build_seconds"] = round(time.perf_counter() - started, 3)
    return index


class DecontamProcessor:
    """Built once per worker (the index is rebuilt there: seconds for ~50k items), called per document."""

    def __init__(self, params: Decontaminate):
        self.threshold = params.threshold
        self.min_matches = params.min_matches
        self.flag = params.action == "flag"
        self.index = build_index(params)

    def __call__(self, doc: Mapping[str, Any]) -> Outcome:
        return next(self.batch([doc]))

    def batch(self, docs: Iterable[Mapping[str, Any]]) -> Iterator[Outcome]:
        """Outcomes of documents in order, matched BATCH_CHARS characters at a time (docstage calls this
        with a shard's documents when a processor has it)."""
        return self.texts(doc["text"] for doc in docs)

    def texts(self, texts: Iterable[str | None]) -> Iterator[Outcome]:
        """Outcomes of documents given by their texts alone, in order (docstage's column path)."""
        chunk: list[str] = []
        size = 0
        for text in texts:
            text = _prepare(text or "")
            if chunk and size + len(text) > BATCH_CHARS:
                yield from self._outcomes(chunk)
                chunk, size = [], 0
            chunk.append(text)
            size += len(text)
        if chunk:
            yield from self._outcomes(chunk)

    def _outcomes(self, prepared: list[str]) -> Iterator[Outcome]:
        hashes, counts = hash_texts(prepared)
        m = self.index.match_many(hashes, counts)
        bounds = np.searchsorted(m.docs, np.arange(len(prepared) + 1)).tolist()
        # Python lists: a document matches a handful of items, where numpy's per-call cost would dominate.
        items, matched, size = m.items.tolist(), m.matched.tolist(), m.size.tolist()
        seeds, form_seeds = m.seeds.tolist(), m.form_seeds.tolist()
        for j in range(len(prepared)):
            lo, hi = bounds[j], bounds[j + 1]
            if lo == hi:
                yield Outcome("keep", "clean", {"max_overlap_fraction": 0.0, "max_matched_words": 0.0,
                                                "matched_items": 0.0})
                continue
            rows = range(lo, hi)
            frac = {i: matched[i] / size[i] for i in rows}
            bad = {i: frac[i] >= self.threshold or matched[i] >= self.min_matches for i in rows}
            scores = {"max_overlap_fraction": round(max(frac.values()), 6),
                      "max_matched_words": float(max(matched[lo:hi])), "matched_items": float(sum(bad.values()))}
            # Contaminating overlaps, and near misses (NEAR of the rule) an auditor may weigh differently, the
            # strongest first: most documents share a seed n-gram or two with some item, not evidence.
            near = [i for i in rows if not bad[i] and (frac[i] >= NEAR * self.threshold
                                                       or matched[i] >= NEAR * self.min_matches)]
            hits = [i for i in rows if bad[i]]
            if not hits and not near:
                yield Outcome("keep", "clean", scores)
                continue
            strongest = (lambda i: (-frac[i], items[i]))
            overlaps = []
            for i in sorted(hits, key=strongest) + sorted(near, key=strongest)[:MAX_NEAR_MISSES]:
                bench, item_id = self.index.items[items[i]]
                overlaps.append({"benchmark": bench, "item_id": item_id,
                                 "matched_ngrams": seeds[i], "item_ngrams": form_seeds[i],
                                 "matched_words": matched[i], "item_words": size[i],
                                 "overlap_fraction": round(frac[i], 6), "contaminated": bad[i]})
            details = {"overlaps": overlaps}
            if not hits:
                yield Outcome("keep", "clean", scores, details)
            elif self.flag:
                yield Outcome("keep", "flagged_contaminated", scores, details)
            else:
                yield Outcome("drop", "contaminated", scores, details)


def write_contamination(stage_out_dir: str | Path) -> dict:
    """Read stage_out_dir/decisions/*.parquet; write stage_out_dir/contamination/contamination.parquet: one row
    per overlap in the decisions' details, sorted by doc_id, benchmark and item_id.

    Returns deterministic counts for the stage metrics. Shards are read one at a time and only decisions with
    details become Python objects; the table holds the overlaps, a few per contaminated or nearly
    contaminated document. Python rather than DuckDB SQL (which also ended with the whole table in memory,
    to_arrow_table): importing duckdb and pyarrow.compute and connecting took 0.08-0.1 CPU-s per run, a sixth
    of the stage on benchmarks/bench_decontam.py, for a table of 38 rows there.
    """
    out_dir = Path(stage_out_dir)
    rows = []
    for shard in sorted((out_dir / "decisions").glob("*.parquet")):
        t = pq.ParquetFile(shard).read(columns=["doc_id", "action", "details"])
        details = t.column("details").to_pylist()
        at = [i for i, d in enumerate(details) if d is not None]
        if not at:
            continue
        doc_ids, actions = t.column("doc_id").to_pylist(), t.column("action").to_pylist()
        for i in at:
            rows.extend({**o, "doc_id": doc_ids[i], "action": actions[i]} for o in json.loads(details[i])["overlaps"])
    rows.sort(key=lambda r: (r["doc_id"], r["benchmark"], r["item_id"]))  # code points: UTF-8 byte order
    schema.write_parquet(columns.table(rows, CONTAMINATION), CONTAMINATION,
                         out_dir / "contamination" / "contamination.parquet")  # atomic: temporary name, then rename
    hit = [r for r in rows if r["contaminated"]]
    return {"overlaps": len(rows),
            "contaminating_overlaps": len(hit),
            "contaminated_documents": len({r["doc_id"] for r in hit}),
            "contaminated_items": len({(r["benchmark"], r["item_id"]) for r in hit})}


def benchmark_digests(params: Decontaminate) -> dict[str, str]:
    """{"benchmark:<name>": content hash} for the run id: the benchmark files are inputs like the documents."""
    out = {}
    for spec in params.benchmarks:
        path = benchmark_path(spec.model_dump())
        if path is not None:
            out[f"benchmark:{spec.name}"] = tree_digest(path) if path.is_dir() else sha1_file(path)
    return out


def decontaminate(input_dir: str | Path, params: Decontaminate, execution_cfg: Mapping | None,
                  out_dir: str | Path) -> StageResult:
    """A decision per document of input_dir (a stage's output folder) through the shared shard loop, then the
    contamination table, all under out_dir; the benchmark files' digests are inputs of the run."""
    result = StageResult()
    result.input_hashes.update(benchmark_digests(params))  # a changed benchmark file is a new run; a missing one
    # fails here, in one line, not in every worker
    result.record(map_document_shards(STAGE, input_dir, DecontamProcessor, params, execution_cfg, out_dir))
    stats = write_contamination(out_dir)  # inside the run: the table lands before the rename
    result.metrics["contamination"] = stats
    result.extra["contamination"] = stats
    return result
