"""The one loop for per-document stages: read a document shard, decide per document, write two shards.

A stage supplies a processor: a class built once per worker from the stage's params, called on each
document, returning an Outcome (or, with a `batch` method, given all of a shard's documents and yielding
their Outcomes in order). This module does the rest the same way for every such stage: the executor,
one decision row per input document (contract 3), kept and modified documents written with their doc_id
unchanged (contract 2), counts and the manifest (contracts 4-6).
"""

from __future__ import annotations

import importlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import pyarrow.parquet as pq

from tokenmill import schema
from tokenmill.execution import make_executor
from tokenmill.runtime import StageRun, input_id


@dataclass
class Outcome:
    action: str  # keep / drop / modify
    reason: str
    scores: dict[str, float] = field(default_factory=dict)
    details: dict[str, Any] | None = None
    text: str | None = None  # the new text, for action modify


@dataclass
class ShardTask:
    stage: str
    processor: str  # "module:Class"
    params: dict
    input_path: str
    out_dir: str


_PROCESSORS: dict[tuple[str, str], Any] = {}


def _processor(spec: str, params: dict):
    # Built once per worker process: models and block-lists load once, not once per shard.
    key = (spec, repr(sorted(params.items())))
    if key not in _PROCESSORS:
        module, name = spec.split(":")
        _PROCESSORS[key] = getattr(importlib.import_module(module), name)(params)
    return _PROCESSORS[key]


def process_shard(task: ShardTask) -> dict:
    proc = _processor(task.processor, task.params)
    table = pq.read_table(task.input_path)
    kept, decisions = [], []
    counts: Counter[str] = Counter()
    docs = table.to_pylist()
    # A processor may decide a shard's documents together (`batch`: an iterator of outcomes in order).
    outcomes = proc.batch(docs) if hasattr(proc, "batch") else map(proc, docs)
    for doc, out in zip(docs, outcomes, strict=True):
        decisions.append(schema.decision(doc["doc_id"], task.stage, out.action, out.reason, out.scores, out.details))
        counts[f"{out.action}:{out.reason}"] += 1
        if out.action == "modify":
            doc = {**doc, "text": out.text}
        if out.action != "drop":
            kept.append(doc)
    name = Path(task.input_path).name
    schema.write_parquet(kept, schema.DOCUMENT, Path(task.out_dir) / "documents" / name)
    schema.write_parquet(decisions, schema.DECISION, Path(task.out_dir) / "decisions" / name)
    return {"counts": dict(counts)}


def map_document_shards(run: StageRun, input_stage: str, processor: str, params: Mapping,
                        execution_cfg: Mapping | None, data_root: str | Path = "data") -> None:
    """Apply `processor` to every document shard of `input_stage`, writing into `run`'s output."""
    data_root = Path(data_root)
    importlib.import_module(processor.split(":")[0])  # here too, so the run record's code covers it
    shards = sorted((data_root / input_stage / "documents").glob("*.parquet"))
    run.input_hashes[input_stage] = input_id(data_root / input_stage)
    tasks = [ShardTask(run.stage, processor, dict(params), str(p), str(run.tmp)) for p in shards]
    with make_executor(execution_cfg) as ex:
        for result in ex.map(process_shard, tasks, desc=run.stage):
            run.add_counts(result["counts"])


def run_document_stage(stage: str, input_stage: str, processor: str, params: Mapping,
                       execution_cfg: Mapping | None, data_root: str | Path = "data",
                       libraries: tuple[str, ...] = ()) -> dict:
    """Run `processor` over every document shard of `input_stage`; outputs go to data_root/stage.

    libraries: the distributions whose versions shape the processor's decisions (they enter the run id)."""
    with StageRun(stage, Path(data_root) / stage, dict(params), input_stage=input_stage,
                  libraries=libraries) as run:
        map_document_shards(run, input_stage, processor, params, execution_cfg, data_root)
    return run.manifest
