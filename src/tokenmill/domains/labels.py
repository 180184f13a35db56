"""The domains stage: each document's topic (clusters of the embed stage's vectors), format and toxicity score.

Its decision per document keeps it (reason `labelled`, or `toxicity_tagged` at domains.toxicity.tag_above) or,
only when domains.toxicity.drop_above is set, drops it (`toxicity`); the details hold {"topic", "format"} and the
scores toxicity, topic_similarity and the format rules' measures, so the lineage has every document's domain,
format and score, and the tokenize stage can name mixture buckets by them (tokenize.buckets). The topics, their
names, sizes and examples: topics.parquet.

The documents an earlier stage dropped (in the ingested documents, not in this stage's input) are labelled too,
in dropped_before.parquet, so the report can show the mix each stage kept and dropped: their format and toxicity
as above, their topic the nearest of the topics found here (they are embedded with the embed stage's model and
parameters; they do not move the clusters, which are the kept documents'). domains.label_dropped: false skips
them (it embeds about as many documents again as the embed stage: RESULTS, "The mix per stage").
"""

from __future__ import annotations

import logging
import shutil
import sys
from pathlib import Path
from typing import Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tokenmill import schema
from tokenmill.docstage import Outcome, map_document_shards, shard_scratch_file
from tokenmill.domains import formats, toxicity
from tokenmill.domains import topics as topic_model
from tokenmill.domains.embed import embed_texts, read_vectors
from tokenmill.domains.params import Domains, Embed
from tokenmill.execution import log_phase, make_executor
from tokenmill.runtime import StageResult, input_id

logging.getLogger("faiss.loader").setLevel(logging.WARNING)  # it logs at INFO which CPU build it loaded


TOPICS = pa.schema([
    ("topic", pa.string()),  # t00, t01, ...: numbered by size, largest first
    ("name", pa.string()),  # its most distinctive words, joined by '-'
    ("terms", pa.list_(pa.string())),
    ("documents", pa.int64()),
    ("examples", pa.list_(pa.string())),  # URLs (or doc_ids) of the documents nearest its centre
])

DROPPED_BEFORE = pa.schema([  # the labels of the documents an earlier stage dropped
    ("doc_id", pa.string()),
    ("topic", pa.string()),  # the nearest topic (not clustered: the topics are the kept documents'); null: none
    ("topic_similarity", pa.float64()),
    ("format", pa.string()),  # null where domains.formats is off
    ("toxicity", pa.float64()),  # null where domains.toxicity.enabled is off
    ("toxicity_tagged", pa.bool_()),  # at or above domains.toxicity.tag_above
])


class DomainsProcessor:
    """Per shard: the topic found by the clustering pass, the format by rules, the toxicity score, and the
    decision (keep; keep tagged; drop only above domains.toxicity.drop_above)."""

    def __init__(self, params: Mapping):
        self.scratch = params["_assignments"]
        self.cfg: Domains = params["domains"]  # the stage's typed section, as the stage script resolved it

    def batch(self, docs: list[dict]):
        if not docs:
            return
        table = pq.read_table(shard_scratch_file(self.scratch, docs[0]["doc_id"]))
        if table["doc_id"].to_pylist() != [d["doc_id"] for d in docs]:
            raise RuntimeError("domains: the embed stage's vectors do not belong to this shard (first document "
                               f"{docs[0]['doc_id']}); rerun embed on the same documents")
        tox = self.cfg.toxicity
        scores = toxicity.scores([d["text"] for d in docs], tox.max_paragraphs) if tox.enabled else None
        for i, (doc, topic, sim) in enumerate(zip(docs, table["topic"].to_pylist(),
                                                  table["similarity"].to_pylist())):
            measures = {"topic_similarity": round(float(sim), 6)}
            details = {"topic": topic}
            if self.cfg.formats:
                label, format_measures = formats.format_of(doc["text"], doc.get("url"), doc.get("bucket"))
                details["format"] = label
                measures.update(format_measures)
            if scores is None:
                yield Outcome("keep", "labelled", measures, details)
                continue
            score = round(float(scores[i]), 6)
            measures["toxicity"] = score
            if tox.drop_above is not None and score >= tox.drop_above:
                yield Outcome("drop", "toxicity", measures, {**details, "drop_above": tox.drop_above})
            elif score >= tox.tag_above:
                yield Outcome("keep", "toxicity_tagged", measures, details)
            else:
                yield Outcome("keep", "labelled", measures, details)


def _label_dropped_shard(task: tuple) -> list[dict]:
    """Worker: the labels of one ingested shard's documents named in the task (those dropped before the stage)."""
    path, wanted, centroids, embed_p, p = task
    table = pq.ParquetFile(path).read(columns=["doc_id", "text", "url", "bucket"])
    keep = set(wanted)
    rows = [r for r in table.to_pylist() if r["doc_id"] in keep]
    texts = [r["text"] or "" for r in rows]
    vectors = embed_texts(texts, embed_p.model, embed_p.dim, embed_p.chunk_chars, embed_p.max_chunks,
                          embed_p.batch_size)
    sims = vectors @ centroids.T  # no topics (the stage's input was empty): no topic, the rest still labelled
    nearest = sims.argmax(axis=1) if centroids.shape[0] else None
    tox = p.toxicity
    scores = toxicity.scores(texts, tox.max_paragraphs) if tox.enabled else None
    out = []
    for i, r in enumerate(rows):
        score = None if scores is None else round(float(scores[i]), 6)
        out.append({"doc_id": r["doc_id"],
                    "topic": None if nearest is None else topic_model.topic_id(int(nearest[i])),
                    "topic_similarity": None if nearest is None else round(float(sims[i, nearest[i]]), 6),
                    "format": formats.format_of(texts[i], r["url"], r["bucket"])[0] if p.formats else None,
                    "toxicity": score, "toxicity_tagged": score is not None and score >= tox.tag_above})
    return out


def label_dropped(all_dir: Path, reached: set[str], centroids: np.ndarray, embed_p: Embed, params: Domains,
                  execution_cfg: Mapping | None, out_path: Path, timing: dict) -> int:
    """dropped_before.parquet: the topic (nearest centre), format and toxicity of every document of all_dir
    (the ingested documents) that did not reach this stage; returns how many."""
    tasks = []
    for path in sorted((all_dir / "documents").glob("*.parquet")):
        ids = pq.ParquetFile(path).read(columns=["doc_id"]).column("doc_id").to_pylist()
        wanted = [d for d in ids if d not in reached]
        if wanted:
            tasks.append((str(path), wanted, centroids, embed_p, params))
    log_phase("domains", f"labelling {sum(len(t[1]) for t in tasks)} documents dropped before this stage")
    with make_executor(execution_cfg, timing) as ex:
        parts = ex.map(_label_dropped_shard, tasks, desc="domains: dropped before")
    rows = [r for part in parts for r in part]
    schema.write_parquet(rows, DROPPED_BEFORE, out_path)
    return len(rows)


def label_documents(input_dir: str | Path, embed_dir: str | Path, params: Domains, execution_cfg: Mapping | None,
                    out_dir: str | Path, all_dir: str | Path | None = None, embed_p: Embed | None = None
                    ) -> StageResult:
    """Topics of input_dir's documents from embed_dir's vectors (topics.parquet), then one decision per
    document with its topic, format and toxicity (documents/, decisions/ under out_dir). With all_dir (the
    ingested documents) and embed_p (the embed stage's parameters) and domains.label_dropped, the documents of
    all_dir that are not in input_dir are labelled too (dropped_before.parquet)."""
    input_dir, embed_dir, out_dir = Path(input_dir), Path(embed_dir), Path(out_dir)
    result = StageResult()
    result.input_hashes[embed_dir.name] = input_id(embed_dir)
    embedded, all_vectors = read_vectors(embed_dir)
    # Only the opening of each text is kept in memory: it is all that names a topic (topics.NAME_CHARS).
    shards = [pq.ParquetFile(p).read(columns=["doc_id", "url", "text"])
              for p in sorted((input_dir / "documents").glob("*.parquet"))]
    shards = [t.set_column(2, "text", pc.utf8_slice_codeunits(t.column("text"), 0, topic_model.NAME_CHARS))
              for t in shards]
    docs = pa.concat_tables(shards) if shards else pa.table({"doc_id": [], "url": [], "text": []})
    # The embed stage may have read more documents than reach here (a back-check dropped some): each document's
    # own vector, in the documents' order.
    doc_ids = docs.column("doc_id").to_pylist()
    position = {d: i for i, d in enumerate(embedded)}
    missing = [d for d in doc_ids if d not in position]
    if missing:
        raise ValueError(f"domains: {embed_dir} has no vector for {len(missing)} of the {len(doc_ids)} documents of "
                         f"{input_dir} (first {missing[0]}); rerun the embed stage on the documents it reads")
    vectors = all_vectors[np.array([position[d] for d in doc_ids], dtype=np.int64)] if doc_ids else all_vectors[:0]
    del all_vectors, position
    t = params.topics
    k = topic_model.topic_count(len(doc_ids), t.k, t.min_documents)
    if 0 < k < t.k:
        print(f"domains: warning: {len(doc_ids)} documents make {k} topic(s), not domains.topics.k {t.k}: fewer "
              f"than domains.topics.min_documents ({t.min_documents}) per topic", file=sys.stderr)
    log_phase("domains", f"clustering {len(doc_ids)} documents into {k} topics")
    found = topic_model.cluster(vectors, k, t.seed, t.iterations) if doc_ids else None
    k = 0 if found is None else found.centroids.shape[0]
    texts = docs.column("text").to_pylist()
    urls = docs.column("url").to_pylist()
    rows = []
    if found is not None:
        terms = topic_model.names(texts, found.labels, found.similarity, k, t.terms)
        for c in range(k):
            members = np.flatnonzero(found.labels == c)
            nearest = members[np.argsort(-found.similarity[members], kind="stable")][:t.examples]
            rows.append({"topic": topic_model.topic_id(c), "name": "-".join(terms[c]) or topic_model.topic_id(c),
                         "terms": terms[c], "documents": int(members.size),
                         "examples": [urls[i] or doc_ids[i] for i in nearest]})
    schema.write_parquet(rows, TOPICS, out_dir / "topics.parquet")
    # Per shard, in the shard's own order: read back by the processor from the scratch folder.
    scratch = out_dir / "_assignments"
    scratch.mkdir()
    start = 0
    for n in (t.num_rows for t in shards):
        if n:
            sl = slice(start, start + n)
            pq.write_table(pa.table({"doc_id": doc_ids[sl],
                                     "topic": [topic_model.topic_id(int(c)) for c in found.labels[sl]],
                                     "similarity": found.similarity[sl].astype(np.float64)}),
                           shard_scratch_file(scratch, doc_ids[start]))
        start += n
    result.extra["topics"] = {r["topic"]: r["name"] for r in rows}
    result.metrics["topics"] = k
    proc_params = {"_assignments": str(scratch), "domains": params}
    result.record(map_document_shards("domains", input_dir, DomainsProcessor, proc_params, execution_cfg, out_dir))
    shutil.rmtree(scratch)  # scratch, not output: the decisions hold every document's topic
    if all_dir is not None and params.label_dropped:
        all_dir = Path(all_dir)
        result.input_hashes[all_dir.name] = input_id(all_dir)
        centroids = found.centroids if found is not None else np.zeros((0, embed_p.dim), dtype=np.float32)
        n = label_dropped(all_dir, set(doc_ids), centroids, embed_p, params, execution_cfg,
                          out_dir / "dropped_before.parquet", result.timing)
        result.metrics["dropped_before_labelled"] = result.extra["dropped_before_labelled"] = n
    return result
