"""The tables the audit connection adds beside lineage.duckdb: they live outside the database, so the document
tables are never rebuilt for them. Run records (runs/<stage>.json) carry timings, which must stay out of every
DVC output; training runs (data/train/<run>/) write their step tables after the lineage stage has run; the
evaluation's per-item scores are data/evaluate's. Read by lineage.connect (the audit connection), which this
module serves without importing the rest of the package.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq


# The plan's columns (tokenmill.mixture.PLAN), for an empty train_plans: this module reads files, never the mixture.
PLAN_COLUMNS = [("position", pa.int64()), ("phase", pa.string()), ("bucket", pa.string()), ("doc_id", pa.string()),
                ("epoch", pa.int32()), ("shard", pa.string()), ("offset", pa.int64()), ("length", pa.int64()),
                ("stream_start", pa.int64())]
RUN_TABLES = {"train_steps": "steps.parquet", "train_spikes": "spikes.parquet", "train_heldout": "heldout.parquet",
              "train_health": "health.parquet", "train_health_alarms": "health_alarms.parquet",
              "train_rollbacks": "rollbacks.parquet", "train_canaries": "canaries.parquet"}


def run_records(runs_dir: str | Path) -> pa.Table:
    """`stage_runs`: one row per runs/<stage>.json, the newest run of each stage in this workspace."""
    rows = []
    for path in sorted(Path(runs_dir).glob("*.json")):
        r = json.loads(path.read_text())
        rows.append({"stage": r.get("stage"), "run_id": r.get("run_id"), "input_stage": r.get("input_stage"),
                     "code_version": r.get("code_version"), "seconds": r.get("seconds"),
                     "finished_at": r.get("finished_at"), "host": r.get("host"),
                     **{k: json.dumps(r.get(k)) for k in ("params", "inputs", "versions", "code_files", "timing",
                                                           "counts")},
                     # a training stage's torchrun restarts: [{restart, cause, resumed_from_step}], else null
                     "restarts": json.dumps(r["restarts"]) if "restarts" in r else None})
    schema = pa.schema([("stage", pa.string()), ("run_id", pa.string()), ("input_stage", pa.string()),
                        ("code_version", pa.string()), ("seconds", pa.float64()), ("finished_at", pa.string()),
                        ("host", pa.string()), ("params", pa.string()), ("inputs", pa.string()),
                        ("versions", pa.string()), ("code_files", pa.string()), ("timing", pa.string()),
                        ("counts", pa.string()), ("restarts", pa.string())])
    return pa.Table.from_pylist(rows, schema=schema)


def training_tables(*train_roots: str | Path) -> dict[str, pa.Table]:
    """train_steps, train_spikes, train_heldout, train_health, train_health_alarms and train_rollbacks over every
    finished run under the train_roots (data/train, data/anneal), with a `run` column naming the stage (pretrain,
    scout@s1, anneal@legal#with ...). A run branched from another on a plan of its own (an anneal's arm: its plan's
    folder holds branch.json) adds that plan's rows to train_plans, with from_step: its steps from there on read
    that plan, the earlier ones (the run it branched from) the mixture's."""
    out: dict[str, list[pa.Table]] = {name: [] for name in (*RUN_TABLES, "train_plans")}
    for root in train_roots:
        for manifest in sorted(Path(root).rglob("manifest.json")):
            m = json.loads(manifest.read_text())
            run = m["stage"]
            tables = {name: manifest.parent / file for name, file in RUN_TABLES.items()}
            own = Path(root).parent / m.get("input_stage", "mixture")  # <data root>/<input_stage>/plan.parquet
            if m.get("input_stage", "mixture") != "mixture" and (own / "branch.json").exists():
                tables["train_plans"] = own / "plan.parquet"
            for name, path in tables.items():
                if path.exists():
                    t = pq.read_table(path)
                    if name == "train_plans":  # the run's steps from its branch step on read this plan
                        branch = json.loads((own / "branch.json").read_text())["step"]
                        t = t.add_column(0, "from_step", pa.array([branch] * t.num_rows, pa.int64()))
                    out[name].append(t.add_column(0, "run", pa.array([run] * t.num_rows, pa.string())))
    tables = {name: pa.concat_tables(parts, promote_options="default") for name, parts in out.items() if parts}
    if "train_steps" in tables and "train_plans" not in tables:  # no branched run: the table, empty (queries name it)
        tables["train_plans"] = pa.schema([("run", pa.string()), ("from_step", pa.int64()), *PLAN_COLUMNS]).empty_table()
    return tables


# Per-item scores the evaluate stage writes (samples/<task>.jsonl); the held-out bits-per-byte is per document.
ITEM_METRICS = ("acc", "acc_norm", "prob_norm", "bpb")
_SPLIT = ("all", "all_stderr", "clean", "clean_stderr", "clean_strict", "clean_strict_stderr", "dirty", "difference",
          "difference_stderr")


def evaluation_tables(evaluate_root: str | Path) -> dict[str, pa.Table]:
    """eval_items (one row per benchmark item the evaluate stage scored: benchmark, item_id, dirty and its
    ITEM_METRICS) and eval_scores (per benchmark and metric: the score on all, clean and dirty items and the
    difference), from data/evaluate; none before the evaluate stage has run."""
    results_file = Path(evaluate_root) / "results.json"
    if not results_file.is_file():
        return {}
    try:
        results = json.loads(results_file.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"{results_file} is not valid JSON ({exc}): rerun `dvc repro evaluate`") from None
    items, scores = [], []
    for name, bench in sorted(results["benchmarks"].items()):
        if "samples" not in bench:  # skipped: missing optional file, or a format it cannot score
            continue
        with open(Path(evaluate_root) / bench["samples"], encoding="utf-8") as f:
            for line in f:
                row = json.loads(line)
                items.append({"benchmark": name, "item_id": row["item_id"], "dirty": row["dirty"],
                              "suspect": row.get("suspect", False),
                              **{m: row.get(m) for m in ITEM_METRICS}})
        for metric, split in sorted(bench["metrics"].items()):
            scores.append({"benchmark": name, "metric": metric, "items": bench["items"],
                           "dirty_items": bench["dirty_items"], "suspect_items": bench.get("suspect_items", 0),
                           **{k: split.get(k) for k in _SPLIT}})
    item_schema = pa.schema([("benchmark", pa.string()), ("item_id", pa.string()), ("dirty", pa.bool_()),
                             ("suspect", pa.bool_())]
                            + [(m, pa.float64()) for m in ITEM_METRICS])
    score_schema = pa.schema([("benchmark", pa.string()), ("metric", pa.string()), ("items", pa.int64()),
                              ("dirty_items", pa.int64()), ("suspect_items", pa.int64())]
                             + [(k, pa.float64()) for k in _SPLIT])
    return {"eval_items": pa.Table.from_pylist(items, item_schema),
            "eval_scores": pa.Table.from_pylist(scores, score_schema)}


def audit_tables(project: str | Path = ".") -> dict[str, pa.Table]:
    """What the audit connection registers beside the database: stage_runs, the training tables and the
    evaluation's per-item scores."""
    project = Path(project)
    return {"stage_runs": run_records(project / "runs"),
            **training_tables(project / "data" / "train", project / "data" / "anneal"),
            **evaluation_tables(project / "data" / "evaluate")}
