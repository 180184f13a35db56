"""The backcheck stage: semantic duplicates and suspected paraphrases of benchmark items, one decision per document.

It reads the documents the n-gram decontamination kept (or flagged), their vectors from the embed stage and the
benchmark items decontaminate reads (embedded here by the embed stage's model). Per document:
- `semantic_duplicate`: in a cluster of documents whose vectors are at least backcheck.duplicates.threshold
  apart (semantic.py), and not the cluster's kept document; dropped when duplicates.action is drop, otherwise
  kept with reason `semantic_duplicate_reported`. The kept one: reason `cluster_kept`.
- `semantic_contamination`: its nearest benchmark item is at least contamination.threshold away and the n-gram
  layer did not flag the document; dropped when contamination.action is drop, otherwise kept with reason
  `suspect_reported`. Both at once: the contamination decides. Nearest: of the document's own vector and, with
  contamination.paragraphs, of each of its paragraphs and pairs of neighbouring paragraphs (an item rewritten
  inside a longer page moves the page's pooled vector too little).
Every decision carries the cosine to the nearest other document and to the nearest item (scores), and the
cluster or item in its details. Two tables beside the documents, which the lineage loads:
`semantic_duplicates` (every document in a cluster: the cluster, its size, the kept document and why, the
member's nearest cosine) and `suspects` (document, benchmark, item, cosine, action); the lineage adds the
suspects to its `contamination` table with status `suspect`.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tokenmill import schema
from tokenmill.backcheck import semantic
from tokenmill.backcheck.params import Backcheck
from tokenmill.decontam.readers import benchmark_path, read_items
from tokenmill.docstage import Outcome, map_document_shards, shard_scratch_file
from tokenmill.domains.embed import embed_texts, read_vectors
from tokenmill.domains.params import Embed
from tokenmill.execution import log_phase
from tokenmill.runtime import StageResult, input_id

SEMANTIC_DUPLICATES = pa.schema([
    ("doc_id", pa.string()),
    ("cluster", pa.string()),  # the doc_id of the document the cluster keeps
    ("cluster_size", pa.int64()),
    ("kept", pa.bool_()),  # this document is the one the cluster keeps
    ("kept_because", pa.string()),  # longest (then smallest doc_id)
    ("nearest_doc_id", pa.string()),  # its nearest other document
    ("similarity", pa.float64()),  # their cosine
    ("action", pa.string()),  # keep, or drop (duplicates.action drop, not the kept one)
])
SUSPECTS = pa.schema([
    ("doc_id", pa.string()),
    ("benchmark", pa.string()),
    ("item_id", pa.string()),  # readers.item_id: the name the evaluation gives the same item
    ("similarity", pa.float64()),  # cosine of the document to the item's question and answer
    ("passage", pa.string()),  # the opening of the paragraph(s) nearest the item; null: the whole document
    ("action", pa.string()),  # keep (reported) or drop (contamination.action drop)
])
ROUND = 6
PASSAGE_CHARS = 300


def embed_items(benchmarks: list[dict], embed: Embed) -> tuple[list[tuple[str, str]], np.ndarray]:
    """((benchmark, item_id) of every item decontaminate reads, their vectors): the item's question with its
    gold answer, embedded as a document is."""
    for spec in benchmarks:
        benchmark_path(spec)  # every path checked before any is read: one line for a missing one
    names, texts = [], []
    for spec in benchmarks:
        for name, iid, text, _ in read_items(spec):
            names.append((name, iid))
            texts.append(text)
    vectors = embed_texts(texts, embed.model, embed.dim, embed.chunk_chars, embed.max_chunks, embed.batch_size) \
        if texts else np.zeros((0, embed.dim), np.float32)
    return names, vectors


def _flagged(input_dir: Path) -> set[str]:
    """Documents the n-gram layer found contaminated (kept when decontaminate.action is flag)."""
    paths = sorted((input_dir / "contamination").glob("*.parquet"))
    if not paths:
        return set()
    table = pa.concat_tables([pq.read_table(p, columns=["doc_id", "contaminated"]) for p in paths])
    return set(table.filter(table.column("contaminated")).column("doc_id").to_pylist())


def _nearest_paragraphs(input_dir: Path, embed: Embed, min_words: int, item_vectors: np.ndarray,
                        nearest: np.ndarray, sims: np.ndarray, passage: list[str | None]) -> int:
    """Raise each document's nearest item (nearest, sims: in the documents' order, updated in place) to that of
    its nearest paragraph window (semantic.paragraph_windows) where that is nearer, and note the window's opening
    in `passage`. One shard at a time: a shard's windows are all that is held. Returns the windows embedded."""
    row, total = 0, 0
    for path in sorted((input_dir / "documents").glob("*.parquet")):
        texts = pq.ParquetFile(path).read(columns=["text"]).column("text").to_pylist()
        pieces, owner = [], []
        for i, text in enumerate(texts):
            windows = semantic.paragraph_windows(text or "", min_words, embed.chunk_chars)
            pieces += windows
            owner += [row + i] * len(windows)
        if pieces:
            vectors = embed_texts(pieces, embed.model, embed.dim, embed.chunk_chars, 1, embed.batch_size)
            near, sim = semantic.nearest_items(vectors, item_vectors)
            for k, o in enumerate(owner):
                if sim[k] > sims[o]:
                    nearest[o], sims[o], passage[o] = near[k], sim[k], pieces[k][:PASSAGE_CHARS]
        row += len(texts)
        total += len(pieces)
    return total


class BackcheckProcessor:
    """Per shard: the decisions from the global pass's findings (scratch files, one per shard)."""

    def __init__(self, params: Mapping):
        self.scratch = params["_findings"]
        self.cfg: Backcheck = params["backcheck"]

    def batch(self, docs: list[dict]):
        if not docs:
            return
        found = pq.read_table(shard_scratch_file(self.scratch, docs[0]["doc_id"])).to_pylist()
        for doc, f in zip(docs, found, strict=True):
            if f["doc_id"] != doc["doc_id"]:
                raise RuntimeError(f"backcheck: findings out of order at {doc['doc_id']}")
            scores, details = {}, {}
            if f["nearest_similarity"] is not None:
                scores["nearest_document_similarity"] = f["nearest_similarity"]
            if f["item_similarity"] is not None:
                scores["nearest_item_similarity"] = f["item_similarity"]
            if f["cluster"] is not None:
                details.update({"cluster": f["cluster"], "cluster_size": f["cluster_size"]})
            if f["suspect"]:
                details.update({"benchmark": f["benchmark"], "item_id": f["item_id"]})
                drop = self.cfg.contamination.action == "drop"
                yield Outcome("drop" if drop else "keep", "semantic_contamination" if drop else "suspect_reported",
                              scores, details)
            elif f["cluster"] is not None and f["cluster"] != doc["doc_id"]:
                drop = self.cfg.duplicates.action == "drop"
                yield Outcome("drop" if drop else "keep", "semantic_duplicate" if drop else
                              "semantic_duplicate_reported", scores, details)
            elif f["cluster"] is not None:
                yield Outcome("keep", "cluster_kept", scores, details)
            else:
                yield Outcome("keep", "passed", scores, details or None)


def backcheck_documents(input_dir: str | Path, embed_dir: str | Path, params: Backcheck, embed: Embed,
                        benchmarks: list[dict], execution_cfg: Mapping | None, out_dir: str | Path) -> StageResult:
    """The back-checks over input_dir's documents with embed_dir's vectors: documents/ and decisions/ (a document
    stage), semantic_duplicates/ and suspects/ under out_dir."""
    input_dir, embed_dir, out_dir = Path(input_dir), Path(embed_dir), Path(out_dir)
    result = StageResult()
    result.input_hashes[embed_dir.name] = input_id(embed_dir)
    doc_ids, vectors = read_vectors(embed_dir)
    shards = [pq.ParquetFile(p).read(columns=["doc_id", "text"])
              for p in sorted((input_dir / "documents").glob("*.parquet"))]
    ids_in = [i for t in shards for i in t.column("doc_id").to_pylist()]
    if ids_in != doc_ids:
        raise ValueError(f"backcheck: {embed_dir} holds vectors of other documents than {input_dir} "
                         f"({len(doc_ids)} vectors, {len(ids_in)} documents); rerun the embed stage on it")
    lengths = np.array([n for t in shards for n in pc.utf8_length(t.column("text")).fill_null(0).to_pylist()],
                       dtype=np.int64)
    shard_sizes = [t.num_rows for t in shards]
    del shards
    n = len(doc_ids)
    dup, con = params.duplicates, params.contamination

    cluster_of: list[str | None] = [None] * n
    cluster_size = np.ones(n, dtype=np.int64)
    nearest_sim: list[float | None] = [None] * n
    dup_rows = []
    if dup.enabled:
        log_phase("backcheck", f"nearest neighbours of {n} documents (cosine >= {dup.threshold:g})")
        pairs = semantic.neighbours(vectors, dup.threshold, dup.neighbours, dup.exact_below, dup.probe)
        found = semantic.clusters(n, pairs, lengths, doc_ids)
        nearest_sim = [round(float(s), ROUND) if j >= 0 else None
                       for j, s in zip(pairs.nearest, pairs.nearest_similarity)]
        for i in np.flatnonzero(found.cluster >= 0):
            kept = int(found.cluster[i])
            cluster_of[i], cluster_size[i] = doc_ids[kept], int(found.size[i])
            dropped = dup.action == "drop" and kept != i
            dup_rows.append({"doc_id": doc_ids[i], "cluster": doc_ids[kept], "cluster_size": int(found.size[i]),
                             "kept": bool(kept == i), "kept_because": "longest",
                             "nearest_doc_id": doc_ids[int(pairs.nearest[i])],
                             "similarity": nearest_sim[i], "action": "drop" if dropped else "keep"})
        result.metrics["duplicates"] = result.extra["duplicates"] = {
            "pairs": int(pairs.first.size), "clusters": len({r["cluster"] for r in dup_rows}),
            "documents_in_clusters": len(dup_rows),
            "duplicates": sum(1 for r in dup_rows if not r["kept"]),
            "duplicate_chars": int(sum(lengths[i] for i in np.flatnonzero(found.cluster >= 0)
                                       if found.cluster[i] != i))}

    item_sim: list[float | None] = [None] * n
    suspect_of: list[tuple[str, str] | None] = [None] * n
    suspect_rows = []
    if con.enabled:
        log_phase("backcheck", "embedding the benchmark items")
        items, item_vectors = embed_items(benchmarks, embed)
        nearest, sims = semantic.nearest_items(vectors, item_vectors)
        passage: list[str | None] = [None] * n
        windows = 0
        if con.paragraphs and len(items):
            log_phase("backcheck", "embedding each paragraph of the documents of more than one")
            windows = _nearest_paragraphs(input_dir, embed, con.min_paragraph_words, item_vectors, nearest, sims,
                                          passage)
        flagged = _flagged(input_dir)
        for i in range(n):
            if nearest[i] < 0:
                continue
            item_sim[i] = round(float(sims[i]), ROUND)
            if sims[i] >= con.threshold and doc_ids[i] not in flagged:
                suspect_of[i] = items[int(nearest[i])]
                suspect_rows.append({"doc_id": doc_ids[i], "benchmark": suspect_of[i][0],
                                     "item_id": suspect_of[i][1], "similarity": item_sim[i],
                                     "passage": passage[i], "action": "drop" if con.action == "drop" else "keep"})
        result.metrics["contamination"] = result.extra["contamination"] = {
            "items": len(items), "paragraph_windows": windows, "suspects": len(suspect_rows),
            "suspect_items": len({(r["benchmark"], r["item_id"]) for r in suspect_rows})}

    schema.write_parquet(dup_rows, SEMANTIC_DUPLICATES, out_dir / "semantic_duplicates" / "semantic_duplicates.parquet")
    schema.write_parquet(suspect_rows, SUSPECTS, out_dir / "suspects" / "suspects.parquet")
    # Per shard, in the shard's own order: read back by the processor from the scratch folder.
    scratch = out_dir / "_findings"
    scratch.mkdir()
    start = 0
    for size in shard_sizes:
        if size:
            sl = range(start, start + size)
            pq.write_table(pa.table({
                "doc_id": [doc_ids[i] for i in sl],
                "cluster": [cluster_of[i] for i in sl],
                "cluster_size": pa.array([int(cluster_size[i]) for i in sl], pa.int64()),
                "nearest_similarity": pa.array([nearest_sim[i] for i in sl], pa.float64()),
                "item_similarity": pa.array([item_sim[i] for i in sl], pa.float64()),
                "suspect": [suspect_of[i] is not None for i in sl],
                "benchmark": [suspect_of[i][0] if suspect_of[i] else None for i in sl],
                "item_id": [suspect_of[i][1] if suspect_of[i] else None for i in sl]}),
                shard_scratch_file(scratch, doc_ids[start]))
        start += size
    proc_params = {"_findings": str(scratch), "backcheck": params}
    result.record(map_document_shards("backcheck", input_dir, BackcheckProcessor, proc_params, execution_cfg, out_dir))
    shutil.rmtree(scratch)  # scratch, not output: the decisions and the two tables hold every finding
    return result
