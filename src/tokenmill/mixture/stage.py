"""The mixture stage: token index + mixture params -> the sampling plan and its lineage tables."""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from tokenmill import schema
from tokenmill.mixture import build_plan, parse_phases, token_budget, tokens_per_step
from tokenmill.runtime import StageRun, input_id, read_manifest


def _write(table: pa.Table, path: Path) -> None:
    schema.write_parquet(table, table.schema, path)


def text_bytes(documents: Path) -> int:
    """UTF-8 bytes of the text column, from Parquet metadata alone (no data is read).

    Uncompressed column size less the 4-byte length prefix of each value: exact for plain-encoded text,
    close when pages are dictionary-encoded. Good enough for an estimate, and the same on every stage.
    """
    total = 0
    for path in sorted(documents.glob("*.parquet")):
        meta = pq.ParquetFile(path).metadata
        col = meta.schema.to_arrow_schema().get_field_index("text")
        for i in range(meta.num_row_groups):
            rg = meta.row_group(i)
            total += rg.column(col).total_uncompressed_size - 4 * rg.num_rows
    return max(total, 0)


def curation_chain(data_root: Path, last: str) -> list[str]:
    """The document stages that led to `last`, oldest first, from the manifests' input_stage links."""
    chain = [last]
    while (up := read_manifest(data_root / chain[-1]).get("input_stage")) is not None:
        chain.append(up)
    return chain[::-1]


def effective_tokens(data_root: Path, stages: list[str], tokens: int, plan_tokens: int, packed_tokens: int) -> list[dict]:
    """Nominal tokens after each curation stage, then planned and packed.

    Curation stages are not tokenized: their tokens are estimated from their text bytes with the tokens per
    byte measured on the last stage, which was.
    """
    sizes = {stage: text_bytes(data_root / stage / "documents") for stage in stages}
    per_byte = tokens / max(1, sizes[stages[-1]])
    rows = [{"step": f"after {stage}", "tokens": round(n * per_byte), "estimated": True} for stage, n in sizes.items()]
    rows.append({"step": "planned (with repeats)", "tokens": plan_tokens, "estimated": False})
    rows.append({"step": "in full training steps (after packing)", "tokens": packed_tokens, "estimated": False})
    return rows


def run_mixture(mixture_cfg: Mapping, train_cfg: Mapping, model_cfg: Mapping,
                data_root: str | Path = "data", out_dir: str | Path | None = None) -> dict:
    data_root = Path(data_root)
    out_dir = Path(out_dir) if out_dir else data_root / "mixture"
    tok = data_root / "tokenize"
    index = pa.concat_tables([pq.read_table(p) for p in sorted((tok / "index").glob("*.parquet"))])
    tok_manifest = read_manifest(tok)
    vocab_size = int(tok_manifest["vocab_size"])
    budget = token_budget(train_cfg, model_cfg, vocab_size)
    phases = parse_phases(mixture_cfg["phases"])
    params = {"mixture": dict(mixture_cfg), "train": dict(train_cfg), "model": dict(model_cfg), "token_budget": budget}
    with StageRun("mixture", out_dir, params, input_stage="tokenize") as run:
        run.input_hashes["tokenize"] = input_id(tok)
        result = build_plan(index, phases, budget, int(mixture_cfg["seed"]),
                            mixture_cfg.get("max_epochs", 4.0), float(mixture_cfg.get("heldout_fraction", 0.0)))
        plan = result["plan"]
        _write(plan, run.tmp / "plan.parquet")
        _write(result["heldout"].select(["doc_id", "bucket", "shard", "offset", "length"]), run.tmp / "heldout.parquet")

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
        _write(documents, run.tmp / "documents.parquet")
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
        _write(buckets, run.tmp / "buckets.parquet")

        step_tokens = tokens_per_step(train_cfg)
        plan_tokens = int(con.execute("SELECT coalesce(sum(length + 1), 0) FROM plan").fetchone()[0])
        steps = plan_tokens // step_tokens
        tokens_in_index = int(con.execute("SELECT sum(length) FROM idx").fetchone()[0] or 0)
        con.close()
        report = effective_tokens(data_root, curation_chain(data_root, tok_manifest["input_stage"]),
                                  tokens_in_index, plan_tokens, steps * step_tokens)
        run.metrics.update({
            "token_budget": budget, "plan_tokens": plan_tokens, "tokens_per_step": step_tokens, "steps": steps,
            "packing_waste_tokens": plan_tokens - steps * step_tokens,
            "heldout_documents": result["heldout"].num_rows,
            "buckets": {b["bucket"] + ":" + (b["phase"] or "-"): {"planned_tokens": b["planned_tokens"], "epochs": round(b["epochs"], 4)}
                        for b in buckets.to_pylist()},
            "effective_tokens": report,
        })
        run.extra["mixture_name"] = mixture_cfg.get("name")
    return run.manifest
