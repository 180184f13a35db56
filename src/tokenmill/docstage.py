"""The one loop for per-document stages: read a document shard, decide per document, write two shards.

A stage supplies a processor class (Processor below), passed as the class itself so that a reader follows
the import from the stage to its rules: built once per worker from the stage's params, called on each
document, returning an Outcome (or, with a `batch` method, given all of a shard's documents and yielding
their Outcomes in order; or, with a `texts` method, given only their texts — a processor that decides from
the text alone and never modifies it, so no document becomes a Python dict). This module does the rest the
same way for every such stage: the executor, one decision row per input document (contract 3), kept and
modified documents written with their doc_id unchanged (contract 2), counts and the manifest (contracts 4-6).

Measured on the decontaminate stage (benchmarks/bench_decontam.py, 28 shards, 2,798 documents), where the
loop was a third of the stage: pq.read_table and Table.from_pylist import pandas on first use (0.15-0.2
CPU-s per process), so shards are read with ParquetFile.read and decisions built by tokenmill.columns;
rewriting a shard that drops and changes nothing re-compresses identical text (0.1 CPU-s; 26 of the 28
shards), so such a shard is the input file copied — byte-identical to the rewrite, since every shard is
written by schema.write_parquet; kept rows otherwise are slices of the input table.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Protocol

import pyarrow as pa
import pyarrow.parquet as pq

from tokenmill import columns, schema
from tokenmill.execution import make_executor
from tokenmill.runtime import StageResult, input_id, temporary


@dataclass
class Outcome:
    action: str  # keep / drop / modify
    reason: str
    scores: dict[str, float] = field(default_factory=dict)
    details: dict[str, Any] | None = None
    text: str | None = None  # the new text, for action modify


class Processor(Protocol):
    """What a per-document stage gives the loop: a class built from the stage's params (its section as the stage
    script resolved it, e.g. tokenmill.filters.params.Filter; once per worker process), deciding with the first
    of these methods it has:
    - texts(texts: list[str]) -> Iterable[Outcome], from the texts alone, never modifying them;
    - batch(docs: list[dict]) -> Iterable[Outcome], all of a shard's documents at once;
    - __call__(doc: dict) -> Outcome, one document at a time.
    A processor is pure: what it returns is its decision, with the reason and every score it measured."""

    def __init__(self, params: Any) -> None: ...  # the stage's typed section (tokenmill.section.Section)


@dataclass
class ShardTask:
    stage: str
    processor: type[Processor]  # pickled by reference: a worker imports its module
    params: Any  # the processor's params: the stage's typed section (frozen), or a mapping
    input_path: str
    out_dir: str


_PROCESSORS: dict[tuple[type, str], Any] = {}


def _processor(cls: type[Processor], params: Any):
    # Built once per worker process: models and block-lists load once, not once per shard.
    key = (cls, repr(sorted(params.items())) if isinstance(params, Mapping) else repr(params))
    if key not in _PROCESSORS:
        _PROCESSORS[key] = cls(params)
    return _PROCESSORS[key]


def process_shard(task: ShardTask) -> dict:
    proc = _processor(task.processor, task.params)
    source = pq.ParquetFile(task.input_path)
    table = source.read()
    ids = table.column("doc_id").to_pylist()
    docs = None
    if hasattr(proc, "texts"):
        outcomes = proc.texts(table.column("text").to_pylist())
    else:
        docs = table.to_pylist()
        outcomes = proc.batch(docs) if hasattr(proc, "batch") else map(proc, docs)
    keep, modified, decisions = [], {}, []
    counts: Counter[str] = Counter()
    for i, (doc_id, out) in enumerate(zip(ids, outcomes, strict=True)):
        decisions.append(schema.decision(doc_id, task.stage, out.action, out.reason, out.scores, out.details))
        counts[f"{out.action}:{out.reason}"] += 1
        if out.action == "modify":
            modified[i] = out.text
        keep.append(out.action != "drop")
    name = Path(task.input_path).name
    _write_kept(task.input_path, source, table, docs, keep, modified, Path(task.out_dir) / "documents" / name)
    schema.write_parquet(columns.table(decisions, schema.DECISION), schema.DECISION,
                         Path(task.out_dir) / "decisions" / name)
    return {"counts": dict(counts)}


def _write_kept(input_path: str, source: pq.ParquetFile, table: pa.Table, docs: list[dict] | None,
                keep: list[bool], modified: dict[int, str], target: Path) -> None:
    """The kept documents of a shard, modified texts replaced (see the module docstring for the measurements)."""
    if modified:
        rows = [{**docs[i], "text": modified[i]} if i in modified else docs[i] for i, k in enumerate(keep) if k]
        schema.write_parquet(rows, schema.DOCUMENT, target)
    elif all(keep) and source.schema_arrow.equals(schema.DOCUMENT):
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = temporary(target)
        shutil.copyfile(input_path, tmp)
        os.replace(tmp, target)  # atomic, as schema.write_parquet
    else:
        # Runs of kept rows as zero-copy slices, rather than Table.filter (it imports pyarrow.compute, 0.03 CPU-s)
        runs, start = [], None
        for i, k in enumerate([*keep, False]):
            if k and start is None:
                start = i
            elif not k and start is not None:
                runs.append(table.slice(start, i - start))
                start = None
        kept = pa.concat_tables(runs).combine_chunks() if runs else table.schema.empty_table()
        schema.write_parquet(kept, schema.DOCUMENT, target)


def shard_scratch_file(scratch: str | Path, first_doc_id: str) -> Path:
    """Where a global pass (a stage that decides from all documents at once: quality's classifier, the domains'
    topics, the back-checks' neighbours) keeps one shard's findings for its processor: named by the shard's first
    doc_id (doc_ids are unique, so no two non-empty shards share it), which the processor knows from the
    documents this loop hands it."""
    return Path(scratch) / f"{hashlib.blake2b(first_doc_id.encode(), digest_size=12).hexdigest()}.parquet"


def map_document_shards(stage: str, input_dir: str | Path, processor: type[Processor], params: Any,
                        execution_cfg: Mapping | None, out_dir: str | Path) -> StageResult:
    """Apply `processor` to every document shard of `input_dir` (a stage's output folder), writing the kept
    documents and one decision per document under `out_dir`; returns the counts and the input's digest."""
    input_dir = Path(input_dir)
    result = StageResult()
    result.input_hashes[input_dir.name] = input_id(input_dir)
    shards = sorted((input_dir / "documents").glob("*.parquet"))
    params = dict(params) if isinstance(params, Mapping) else params  # a typed section is frozen: passed as it is
    tasks = [ShardTask(stage, processor, params, str(p), str(out_dir)) for p in shards]
    with make_executor(execution_cfg, result.timing) as ex:
        for counts in ex.map(process_shard, tasks, desc=stage):
            result.add_counts(counts["counts"])
    return result
