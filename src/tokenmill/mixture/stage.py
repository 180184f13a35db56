"""The mixture stage: token index + mixture params -> the sampling plan and its lineage tables."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Mapping

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from tokenmill import canaries, schema
from tokenmill.mixture import build_plan, parse_phases, phase_seq_len, token_budget, tokens_per_step
from tokenmill.mixture.params import Mixture
from tokenmill.section import check_section
from tokenmill.runtime import ParamError, StageResult, input_id, read_manifest, write_plot_rows
from tokenmill.train.config import TrainConfig


def _write(table: pa.Table, path: Path) -> None:
    schema.write_parquet(table, table.schema, path)


def tagged_documents(documents_dir: Path) -> frozenset[str]:
    """The doc_ids the domains stage tagged as toxic: its decisions, read from the token stage's input stage."""
    decisions = sorted((documents_dir / "decisions").glob("*.parquet"))
    if not (documents_dir / "topics.parquet").is_file():
        raise ValueError(f"mixture.exclude_tagged_from: {documents_dir} is not a domains stage's output, so no "
                         f"document carries a toxicity tag; run the domains stage before tokenize")
    return frozenset(duckdb.sql(f"""SELECT doc_id FROM read_parquet({[str(p) for p in decisions]})
                                    WHERE reason = 'toxicity_tagged'""").to_arrow_table().column("doc_id").to_pylist())


def plan_inputs(tok: Path, mixture: Mixture) -> tuple[pa.Table, list[dict], frozenset[str]]:
    """What build_plan reads besides the parameters, from the token stage's output folder: the token index, the
    planted canaries and the documents tagged toxic (read only when a phase excludes them). The anneal stage
    re-plans from the same three (tokenmill.anneal)."""
    index = pa.concat_tables([pq.read_table(p) for p in sorted((tok / "index").glob("*.parquet"))])
    planted = pq.read_table(tok / canaries.TABLE).to_pylist() if (tok / canaries.TABLE).exists() else []
    tagged = tagged_documents(tok.parent / read_manifest(tok)["input_stage"]) if mixture.exclude_tagged_from \
        else frozenset()
    return index, planted, tagged


def plan_mixture(input_dir: str | Path, mixture: Mixture, budget_cfg: Mapping, model_cfg: Mapping,
                 out_dir: str | Path, plots_dir: str | Path = "plots") -> StageResult:
    """Plan training over input_dir's token index (the tokenize stage's output folder) into out_dir: the plan,
    the held-out documents, per-document and per-bucket tables; the bucket plot goes to plots_dir.

    mixture is the stage's section as the stage script resolved it (tokenmill.mixture.params.Mixture);
    budget_cfg holds the train keys a plan depends on (seq_len, global_batch, token_budget, tokens_per_param)
    and model_cfg the model keys its size depends on: a learning-rate change never re-plans.
    """
    problems = check_section("train", budget_cfg, TrainConfig)  # the train keys the plan reads, by their schema
    if problems:
        raise ParamError("; ".join(problems))
    out_dir, plots_dir, tok = Path(out_dir), Path(plots_dir), Path(input_dir)
    index, planted, tagged = plan_inputs(tok, mixture)
    budget = token_budget(budget_cfg, model_cfg, int(read_manifest(tok)["vocab_size"]))
    phases = parse_phases(mixture.phases)
    lengths = phase_seq_len(phases, int(budget_cfg["seq_len"]), tokens_per_step(budget_cfg))
    out = StageResult()
    out.input_hashes[tok.name] = input_id(tok)
    # A budget the user set is what they asked for: a corpus too small for it stops the plan. A derived one
    # (tokens_per_param x parameters) shrinks to what the epoch caps allow, with one warning line.
    result = build_plan(index, phases, budget, mixture.seed, mixture.max_epochs,
                        mixture.heldout_fraction, cap_budget=not budget_cfg.get("token_budget"),
                        canaries={c["doc_id"]: c["planned_visits"] for c in planted},
                        excluded={p: tagged for p in mixture.exclude_tagged_from})
    if mixture.exclude_tagged_from:
        out.metrics["tagged_documents_excluded"] = len(tagged)
    plan = result["plan"]
    if (by := result["capped_by"]) is not None:
        cap = mixture.max_epochs.get(by, mixture.max_epochs["default"])
        print(f"mixture: warning: the corpus is too small for the token budget of {budget:,} "
              f"(train.tokens_per_param x the model's parameters): bucket {by!r} would be repeated "
              f"{budget / result['token_budget'] * cap:.2f} times but max_epochs is {cap}; planning "
              f"{result['token_budget']:,} tokens instead (add data, or set train.token_budget to insist)",
              file=sys.stderr)
    budget = result["token_budget"]
    if result["missing"]:
        print(f"mixture: warning: {mixture.name} weights "
              f"{', '.join(result['missing'])}, which the corpus lacks; their weight is spread over "
              f"{', '.join(sorted(result['available']))}", file=sys.stderr)
    _write(plan, out_dir / "plan.parquet")
    _write(result["heldout"].select(["doc_id", "bucket", "shard", "offset", "length"]), out_dir / "heldout.parquet")

    con = duckdb.connect()
    con.register("plan", plan)
    con.register("idx", index)
    con.register("heldout", result["heldout"])
    documents = con.sql("""
        SELECT i.doc_id, i.bucket, h.doc_id IS NOT NULL AS heldout,
               count(p.doc_id) AS planned_repeats,
               coalesce(string_agg(DISTINCT p.phase, ',' ORDER BY p.phase), '') AS phases
        FROM idx i LEFT JOIN plan p USING (doc_id) LEFT JOIN heldout h USING (doc_id)
        GROUP BY ALL ORDER BY i.doc_id""").to_arrow_table()
    _write(documents, out_dir / "documents.parquet")
    available = pa.table({"bucket": list(result["available"]), "available_tokens": list(result["available"].values())})
    con.register("available", available)
    buckets = con.sql("""
        SELECT a.bucket, a.available_tokens, p.phase,
               CAST(coalesce(sum(p.length + 1), 0) AS BIGINT) AS planned_tokens,
               count(p.doc_id) AS planned_documents,
               count(DISTINCT p.doc_id) AS distinct_documents,
               coalesce(sum(p.length + 1), 0) / any_value(a.available_tokens) AS epochs
        FROM available a LEFT JOIN plan p USING (bucket)
        GROUP BY a.bucket, a.available_tokens, p.phase ORDER BY a.bucket, p.phase""").to_arrow_table()
    _write(buckets, out_dir / "buckets.parquet")

    step_tokens = tokens_per_step(budget_cfg)
    plan_tokens = int(con.execute("SELECT coalesce(sum(length + 1), 0) FROM plan").fetchone()[0])
    steps = plan_tokens // step_tokens
    unique = int(con.execute("SELECT count(DISTINCT doc_id) FROM plan").fetchone()[0])
    distinct = dict(con.execute("SELECT bucket, count(DISTINCT doc_id) FROM plan GROUP BY bucket").fetchall())
    con.close()
    # The few numbers that compare mixtures, top level (`dvc exp show`); per bucket and phase in the plot.
    per_bucket = {}
    for b in buckets.to_pylist():
        agg = per_bucket.setdefault(b["bucket"], {"planned": 0, "available": b["available_tokens"]})
        agg["planned"] += b["planned_tokens"]
    out.metrics.update({
        "token_budget": budget, "plan_tokens": plan_tokens, "steps": steps, "unique_documents": unique,
        # A derived budget the corpus could not fill (see above): what was asked for, and that it was cut.
        "budget_capped": result["capped_by"] is not None, "requested_tokens": result["requested_budget"],
        "heldout_documents": result["heldout"].num_rows,
        "canary_visits": sum(c["planned_visits"] for c in planted),  # planted secrets (tokenmill.canaries)
        "missing_buckets": ", ".join(result["missing"]),  # weighted by the preset, absent from the corpus
        "planned": {k: v["planned"] for k, v in sorted(per_bucket.items())},  # tokens, with repeats
        "documents": {k: int(distinct.get(k, 0)) for k in sorted(per_bucket)},  # distinct documents planned
        "epochs": {k: round(v["planned"] / max(1, v["available"]), 3) for k, v in sorted(per_bucket.items())},
    })
    rows = [{"label": f"{k} available", "bucket": k, "phase": None, "tokens": v["available"]}
            for k, v in sorted(per_bucket.items())]
    rows += [{"label": f"{b['bucket']} planned in {b['phase']}", "bucket": b["bucket"], "phase": b["phase"],
              "tokens": b["planned_tokens"]} for b in buckets.to_pylist() if b["phase"]]
    write_plot_rows(plots_dir / "mixture_buckets.json", rows)
    # What training and the audit read without re-deriving it from parameters.
    out.extra.update({"mixture_name": mixture.name, "seq_len": int(budget_cfg["seq_len"]),
                      "global_batch": int(budget_cfg["global_batch"]), "tokens_per_step": step_tokens,
                      "steps": steps, "token_budget": budget, "phases": [p.name for p in phases]})
    if any(p.seq_len for p in phases):  # each phase's length, where one differs (none set: all at seq_len)
        out.extra["phase_seq_len"] = lengths
    return out
