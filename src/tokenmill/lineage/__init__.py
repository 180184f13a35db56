"""lineage.duckdb: every stage's records, decisions and manifests in one database for auditors.

Built with DuckDB SQL straight over the stages' Parquet shards (contract 7), so it runs out of core.
docs/lineage.md documents every table and column; `verify` is the conservation check of contract 4.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Mapping

import duckdb
import numpy as np
import pyarrow.parquet as pq

from tokenmill.execution.params import Execution
from tokenmill.lineage.connect import DB_NAME, connect as connect  # re-exported: the read-only, sealed connection
from tokenmill.lineage.planted import build_planted
from tokenmill.lineage.tables import (  # noqa: F401
    ITEM_METRICS,
    RUN_TABLES,
    audit_tables,
    evaluation_tables,
    run_records,  # re-exported: the tables beside the database
    training_tables,
)
from tokenmill.runtime import StageResult, input_id, read_manifest, write_plot_rows

# Tables a stage writes beside its documents and decisions, loaded under the same name.
STAGE_TABLES = {"decontaminate": ["contamination"], "backcheck": ["semantic_duplicates", "suspects"]}
# Tables of the token stage and the plan stage: name -> Parquet glob under that stage's output.
TOKEN_TABLES = {"token_index": "index/*.parquet",  # doc_id, source, bucket, shard, offset, length
                "canaries": "canaries.parquet"}  # the planted canaries (tokenmill.canaries.CANARIES)
PLAN_TABLES = {
    "plan": "plan.parquet",  # the training stream, document by document
    "plan_documents": "documents.parquet",  # per document: held out?, planned repeats, phases
    "plan_buckets": "buckets.parquet",  # per bucket and phase: available vs planned tokens, epochs
    "heldout": "heldout.parquet",  # documents reserved for evaluation
}


def _glob(data_root: Path, stage: str, table: str) -> str:
    return str(data_root / stage / table / "*.parquet")


def text_bytes(documents: Path) -> int:
    """UTF-8 bytes of the text column, from Parquet metadata alone (no data is read).

    Uncompressed column size less the 4-byte length prefix of each value: exact for plain-encoded text,
    close when pages are dictionary-encoded. Good enough for the funnel's token estimate.
    """
    total = 0
    for path in sorted(documents.glob("*.parquet")):
        meta = pq.ParquetFile(path).metadata
        col = meta.schema.to_arrow_schema().get_field_index("text")
        for i in range(meta.num_row_groups):
            rg = meta.row_group(i)
            total += rg.column(col).total_uncompressed_size - 4 * rg.num_rows
    return max(total, 0)


def _insert_stage(con: duckdb.DuckDBPyConnection, order: int | None, m: dict) -> None:
    documents = order is not None  # only document stages have counts in and out
    info = {k: v for k, v in m.items() if k not in ("stage", "input_stage", "counts")}
    con.execute("INSERT INTO stages VALUES (?,?,?,?,?,?,?)",
                [order, m["stage"], m.get("input_stage"), m["counts"]["in"] if documents else None,
                 m["counts"]["out"] if documents else None, json.dumps(m["counts"]), json.dumps(info)])


def _contamination_with_suspects(con: duckdb.DuckDBPyConnection) -> None:
    """The n-gram layer's overlaps and the embedding back-check's suspects in one `contamination` table: status
    contaminated / near_miss (n-gram) or suspect (embedding; `similarity` its cosine, `passage` the paragraph(s)
    nearest the item where a window was nearer than the whole document, the n-gram columns null)."""
    present = {r[0] for r in con.execute("SHOW TABLES").fetchall()}
    if "contamination" not in present:
        return
    con.execute("ALTER TABLE contamination ADD COLUMN status VARCHAR")
    con.execute("UPDATE contamination SET status = CASE WHEN contaminated THEN 'contaminated' ELSE 'near_miss' END")
    con.execute("ALTER TABLE contamination ADD COLUMN similarity DOUBLE")
    con.execute("ALTER TABLE contamination ADD COLUMN passage VARCHAR")
    if "suspects" in present:
        con.execute("""INSERT INTO contamination BY NAME
            SELECT doc_id, benchmark, item_id, false AS contaminated, action, 'suspect' AS status, similarity, passage
            FROM suspects""")


def build(con: duckdb.DuckDBPyConnection, stages: list[str], data_root: Path, sources_cfg: dict,
          token_stage: str | None = None, plan_stage: str | None = None) -> None:
    """Create the lineage tables in `con`. `stages` is the document stages in pipeline order, ingest first."""
    if not stages or stages[0] != "ingest":
        raise ValueError(f"the document stages must start with 'ingest', got {stages}")
    manifests = [read_manifest(data_root / s) for s in stages]

    # Only content: the manifests inside the stages' outputs. Run ids, timings and versions are in the
    # run records (runs/), which the audit connection shows as `stage_runs`.
    con.execute("""CREATE TABLE stages (stage_order INTEGER, stage VARCHAR, input_stage VARCHAR,
        documents_in BIGINT, documents_out BIGINT, counts JSON, manifest JSON)""")
    for order, m in enumerate(manifests):
        _insert_stage(con, order, m)

    con.execute(f"CREATE TABLE records AS SELECT * FROM read_parquet('{_glob(data_root, 'ingest', 'records')}') ORDER BY source, file, doc_id")
    con.execute(f"CREATE TABLE read_errors AS SELECT * FROM read_parquet('{_glob(data_root, 'ingest', 'read_errors')}') ORDER BY source, file, \"offset\"")

    con.execute("CREATE TABLE decisions (stage_order INTEGER, doc_id VARCHAR, stage VARCHAR, action VARCHAR, "
                "reason VARCHAR, scores MAP(VARCHAR, DOUBLE), details JSON)")
    con.execute("CREATE TABLE stage_outputs (stage_order INTEGER, stage VARCHAR, doc_id VARCHAR)")
    for order, stage in enumerate(stages):
        con.execute(f"INSERT INTO decisions SELECT {order}, doc_id, stage, action, reason, scores, details "
                    f"FROM read_parquet('{_glob(data_root, stage, 'decisions')}')")
        # doc_id only: Parquet is columnar, so no stage's text is read here.
        con.execute(f"INSERT INTO stage_outputs SELECT {order}, '{stage}', doc_id "
                    f"FROM read_parquet('{_glob(data_root, stage, 'documents')}')")

    for stage in stages:
        for table in STAGE_TABLES.get(stage, []):
            con.execute(f"CREATE TABLE {table} AS SELECT * FROM read_parquet('{_glob(data_root, stage, table)}')")
    _contamination_with_suspects(con)

    for stage, tables in ((token_stage, TOKEN_TABLES), (plan_stage, PLAN_TABLES)):
        if stage is None:
            continue
        for table, pattern in tables.items():
            con.execute(f"CREATE TABLE {table} AS SELECT * FROM read_parquet('{data_root / stage / pattern}')")
        _insert_stage(con, None, read_manifest(data_root / stage))  # no stage_order: not a document stage

    # The fate of every record: dropped where a stage dropped it, otherwise kept by the last stage. Joins only
    # (a count per document as a correlated subquery ran out of DuckDB's 2GB at 10 M documents: RESULTS, "The
    # lineage build from 1 to 10 million documents"), which DuckDB spills to disk.
    last = data_root / stages[-1] / "documents" / "*.parquet"
    # The domains stage (tokenmill.domains.labels) labels every document it sees: its topic, format and toxicity
    # score become columns, its topics a table. The documents an earlier stage dropped carry the same labels from
    # its dropped_before.parquet (their topic: the nearest topic's centre; labelled_by 'nearest topic'); a record
    # ingest dropped has no text and no label, nor has any document where the stage did not run.
    labelled = next((s for s in stages if (data_root / s / "topics.parquet").is_file()), None)
    before = data_root / (labelled or "") / "dropped_before.parquet"
    earlier = (f"SELECT doc_id, topic, format, toxicity, toxicity_tagged FROM read_parquet('{before}')"
               if labelled and before.is_file() else
               "SELECT NULL::VARCHAR AS doc_id, NULL::VARCHAR AS topic, NULL::VARCHAR AS format, "
               "NULL::DOUBLE AS toxicity, NULL::BOOLEAN AS toxicity_tagged WHERE false")
    con.execute(f"""CREATE TABLE documents AS
        SELECT r.doc_id, r.source, r.bucket, r.url, r.record_type, r.record_id, r.crawl_date, r.content_type,
               r.file, r.locator, r.payload_bytes,
               CASE WHEN d.doc_id IS NULL THEN 'kept' ELSE 'dropped' END AS fate,
               d.stage AS dropped_at, d.reason AS drop_reason,
               coalesce(m.n, 0) AS times_modified,
               o.text_chars AS final_text_chars,
               coalesce(l.topic, e.topic) AS topic, coalesce(l.format, e.format) AS format,
               coalesce(l.toxicity, e.toxicity) AS toxicity, coalesce(l.toxicity_tagged, e.toxicity_tagged)
                   AS toxicity_tagged,
               CASE WHEN l.doc_id IS NOT NULL THEN 'clustered' WHEN e.doc_id IS NOT NULL THEN 'nearest topic' END
                   AS labelled_by
        FROM records r
        LEFT JOIN (SELECT doc_id, stage, reason FROM decisions WHERE action = 'drop') d USING (doc_id)
        LEFT JOIN (SELECT doc_id, count(*) AS n FROM decisions WHERE action = 'modify' GROUP BY doc_id) m
            USING (doc_id)
        LEFT JOIN (SELECT doc_id, length(text) AS text_chars FROM read_parquet('{last}')) o USING (doc_id)
        LEFT JOIN (SELECT doc_id, json_extract_string(details, '$.topic') AS topic,
                          json_extract_string(details, '$.format') AS format, scores['toxicity'] AS toxicity,
                          reason IN ('toxicity_tagged', 'toxicity') AS toxicity_tagged
                   FROM decisions WHERE stage = '{labelled or ""}') l USING (doc_id)  -- none: null columns
        LEFT JOIN ({earlier}) e USING (doc_id)
        ORDER BY r.source, r.file, r.doc_id""")
    if labelled:
        con.execute(f"CREATE TABLE topics AS SELECT * FROM read_parquet('{data_root / labelled / 'topics.parquet'}')")

    # Files are counted from what ingest matched (its manifest), so an empty or unreadable file still counts.
    files = manifests[0].get("source_files") or {}
    con.execute("""CREATE TABLE sources (source VARCHAR, format VARCHAR, bucket VARCHAR, licence VARCHAR,
        snapshot VARCHAR, paths JSON, files BIGINT, records BIGINT, kept BIGINT, read_errors BIGINT)""")
    for name, cfg in sources_cfg.items():
        matched = sum(1 for key in files if key.partition(":")[0] == name)
        con.execute("""INSERT INTO sources SELECT ?, ?, ?, ?, ?, ?, ?,
            (SELECT count(*) FROM records WHERE source = ?),
            (SELECT count(*) FROM documents WHERE source = ? AND fate = 'kept'),
            (SELECT count(*) FROM read_errors WHERE source = ?)""",
                    [name, cfg.get("format"), cfg.get("bucket"), cfg.get("licence"), cfg.get("snapshot"),
                     json.dumps(cfg.get("paths")), matched, name, name, name])
    con.execute("CREATE TABLE source_files (source VARCHAR, file VARCHAR, sha1 VARCHAR)")
    for key, sha1 in sorted(files.items()):
        source, _, file = key.partition(":")
        con.execute("INSERT INTO source_files VALUES (?, ?, ?)", [source, file, sha1])
    build_benchmarks_table(con, data_root / "benchmarks" / "catalog.json")


def build_benchmarks_table(con: duckdb.DuckDBPyConnection, catalog_file: Path) -> None:
    """`benchmarks`: the real public benchmarks of the benchmarks stage, with their origin and licence
    (non-commercial ones marked) and the pinned source they were read from; contamination.benchmark joins it."""
    con.execute("""CREATE TABLE benchmarks (benchmark VARCHAR, kind VARCHAR, format VARCHAR, file VARCHAR,
        origin VARCHAR, licence VARCHAR, non_commercial BOOLEAN, items BIGINT, items_in_source BIGINT,
        package VARCHAR, version VARCHAR, sha256 VARCHAR)""")
    if not catalog_file.exists():  # benchmarks stage not in this pipeline: only the user's files
        return
    catalog = json.loads(catalog_file.read_text())
    src = catalog["source"]
    for name, b in sorted(catalog["benchmarks"].items()):
        con.execute("INSERT INTO benchmarks VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    [name, b["kind"], b["format"], b["file"], b["origin"], b["licence"], b["non_commercial"],
                     b["items"], b["items_in_source"], src["package"], src["version"], src["sha256"]])


def funnel(con: duckdb.DuckDBPyConnection, data_root: Path, stages: list[str]) -> tuple[list[dict], dict]:
    """Documents per stage, action and reason (the funnel plot), and documents and estimated tokens kept
    after each stage (top-level metrics). Curation stages are not tokenized: their tokens are their text
    bytes times the tokens per byte measured where the documents were tokenized."""
    rows = [{"label": f"{o:02d} {s} {a}: {r}", "stage": s, "action": a, "reason": r, "documents": n}
            for o, s, a, r, n in con.execute(
        "SELECT stage_order, stage, action, reason, count(*) FROM decisions GROUP BY ALL ORDER BY 1, 3, 4").fetchall()]
    kept = dict(con.execute("SELECT stage, documents_out FROM stages WHERE stage_order IS NOT NULL").fetchall())
    tables = {r[0] for r in con.execute("SHOW TABLES").fetchall()}
    summary = {"kept_documents": {s: kept[s] for s in stages}}
    if "token_index" in tables:
        tokens = int(con.execute("SELECT coalesce(sum(length + 1), 0) FROM token_index").fetchone()[0])
        per_byte = tokens / max(1, text_bytes(data_root / stages[-1] / "documents"))
        summary["kept_tokens_estimated"] = {s: round(text_bytes(data_root / s / "documents") * per_byte)
                                            for s in stages}
        summary["tokenized_tokens"] = tokens
    if "contamination" in tables:
        summary["contaminated_documents"] = int(con.execute(
            "SELECT count(DISTINCT doc_id) FROM contamination WHERE contaminated").fetchone()[0])
    return rows, summary


def verify(con: duckdb.DuckDBPyConnection, limit: int = 20) -> list[str]:
    """Conservation (contract 4): each stage's input documents = kept + dropped, nothing lost or invented.

    Returns human-readable violations naming the offending doc_ids; empty when everything balances.
    """
    problems: list[str] = []
    runs = con.execute("SELECT stage_order, stage, input_stage, documents_in FROM stages "
                       "WHERE stage_order IS NOT NULL ORDER BY stage_order").fetchall()
    for order, stage, input_stage, documents_in in runs:
        if order == 0:
            inputs = "SELECT doc_id FROM records"
        else:
            inputs = (f"SELECT doc_id FROM decisions WHERE stage = '{input_stage}' "
                      f"AND action IN ('keep', 'modify')")
        checks = {
            "input without a decision (went missing)":
                f"SELECT doc_id FROM ({inputs}) EXCEPT SELECT doc_id FROM decisions WHERE stage = '{stage}'",
            "decision for a document that was not an input":
                f"SELECT doc_id FROM decisions WHERE stage = '{stage}' EXCEPT {inputs}",
            "more than one decision":
                f"SELECT doc_id FROM decisions WHERE stage = '{stage}' GROUP BY doc_id HAVING count(*) > 1",
            "kept but not in the stage's documents":
                f"SELECT doc_id FROM decisions WHERE stage = '{stage}' AND action IN ('keep', 'modify') "
                f"EXCEPT SELECT doc_id FROM stage_outputs WHERE stage = '{stage}'",
            "in the stage's documents but not kept":
                f"SELECT doc_id FROM stage_outputs WHERE stage = '{stage}' "
                f"EXCEPT SELECT doc_id FROM decisions WHERE stage = '{stage}' AND action IN ('keep', 'modify')",
        }
        for what, sql in checks.items():
            n = con.execute(f"SELECT count(*) FROM ({sql})").fetchone()[0]
            if n:
                ids = [r[0] for r in con.execute(f"SELECT * FROM ({sql}) ORDER BY 1 LIMIT {limit}").fetchall()]
                problems.append(f"{stage}: {n} {what}: {', '.join(ids)}{' ...' if n > limit else ''}")
        decided = con.execute(f"SELECT count(*) FROM decisions WHERE stage = '{stage}'").fetchone()[0]
        if decided != documents_in:
            problems.append(f"{stage}: manifest says {documents_in} documents in, decisions hold {decided}")
    tables = {r[0] for r in con.execute("SHOW TABLES").fetchall()}
    if "token_index" in tables:
        last = runs[-1][1]
        checks = {
            "curated but not tokenized": f"SELECT doc_id FROM stage_outputs WHERE stage = '{last}' "
                                         f"EXCEPT SELECT doc_id FROM token_index",
            "tokenized but not curated": f"SELECT doc_id FROM token_index "
                                         f"EXCEPT SELECT doc_id FROM stage_outputs WHERE stage = '{last}' "
                                         f"EXCEPT SELECT doc_id FROM canaries",  # planted at tokenize
            "canary not planted as listed": "SELECT doc_id FROM canaries WHERE planned_visits > 0 "
                                            "EXCEPT SELECT doc_id FROM token_index WHERE source = 'canary'",
            "tokenized more than once": "SELECT doc_id FROM token_index GROUP BY doc_id HAVING count(*) > 1",
        }
        if "plan" in tables:
            checks["held-out document in the training plan"] = "SELECT doc_id FROM plan INTERSECT SELECT doc_id FROM heldout"
        for what, sql in checks.items():
            ids = [r[0] for r in con.execute(f"SELECT * FROM ({sql}) ORDER BY 1 LIMIT {limit}").fetchall()]
            if ids:
                problems.append(f"tokens: {what}: {', '.join(ids)}")
    dup = con.execute("SELECT doc_id FROM records GROUP BY doc_id HAVING count(*) > 1 ORDER BY 1 LIMIT ?", [limit]).fetchall()
    if dup:
        problems.append(f"ingest: doc_id assigned to more than one record: {', '.join(r[0] for r in dup)}")
    return problems


def build_database(data_root: str | Path, stages: list[str], sources_cfg: dict, out_dir: str | Path,
                   token_stage: str | None = None, plan_stage: str | None = None,
                   ground_truth: str | Path | None = None, plots_dir: str | Path = "plots",
                   execution_cfg: Mapping | None = None) -> StageResult:
    """Build out_dir/lineage.duckdb over the document stages `stages` of data_root (oldest first:
    runtime.stage_chain), plus the token index and the plan when their stages are given; with the embedded
    corpus's ground truth, also score its planted cases. The conservation problems found are in
    result.extra["conservation_violations"]; the funnel plot goes to plots_dir."""
    data_root, out_dir = Path(data_root), Path(out_dir)
    truth = json.loads(Path(ground_truth).read_text()) if ground_truth and Path(ground_truth).exists() else None
    result = StageResult()
    for s in (*stages, token_stage, plan_stage):
        if s is not None:
            result.input_hashes[s] = input_id(data_root / s)
    if (data_root / "benchmarks" / "manifest.json").exists():
        result.input_hashes["benchmarks"] = input_id(data_root / "benchmarks")
    # The database file is not byte-reproducible (DuckDB writes a random database id and block layout,
    # even on one thread), so no stage reads it: it is the auditors' index, rebuilt from the Parquet.
    exe = Execution.resolve(execution_cfg).model_dump()
    # Out of core like dedup's clustering: DuckDB spills beyond the limit instead of taking 80% of the RAM.
    con = duckdb.connect(str(out_dir / DB_NAME), config={"memory_limit": exe["duckdb_memory_limit"],
                                                         "threads": exe["workers"]})
    try:
        build(con, stages, data_root, sources_cfg, token_stage, plan_stage)
        problems = verify(con)
        counts = con.execute("SELECT fate, count(*) FROM documents GROUP BY fate").fetchall()
        rows, summary = funnel(con, data_root, stages)
        if truth and truth.get("cases"):
            result.metrics["planted_cases"] = build_planted(con, truth, stages)
            wrong = con.execute("SELECT case_kind, url, explanation FROM planted_cases WHERE verdict = 'wrong'").fetchall()
            result.extra["planted_wrong"] = [f"{k} {u}: {e}" for k, u, e in wrong]
    finally:
        con.close()
    write_plot_rows(Path(plots_dir) / "funnel.json", rows)
    result.metrics.update(summary)
    result.metrics["fates"] = dict(sorted(counts))
    result.metrics["conservation_violations"] = len(problems)
    result.extra["stages"] = stages
    result.extra["conservation_violations"] = problems
    return result



def _plan_of(con: duckdb.DuckDBPyConnection, run: str | None, step: int | None) -> tuple[str, list]:
    """The plan a run's step read, as a SQL relation and its parameters: the mixture's (`plan`), or, from a
    branched run's branch step on, the run's own (train_plans: an anneal's arm)."""
    tables = {r[0] for r in con.execute("SHOW TABLES").fetchall()}
    if run is not None and step is not None and "train_plans" in tables and con.execute(
            "SELECT count(*) FROM train_plans WHERE run = ? AND from_step <= ?", [run, step]).fetchone()[0]:
        return "(SELECT * EXCLUDE (run, from_step) FROM train_plans WHERE run = ?)", [run]
    return "plan", []


def _run_plans(con: duckdb.DuckDBPyConnection) -> str:
    """A SQL WITH clause: run_plan, every training run's plan rows with the run and the steps [lo, hi) that read
    them: the mixture's plan for all of a run's steps, or for a branched run's steps before its branch, and
    train_plans' rows for its steps from there on."""
    tables = {r[0] for r in con.execute("SHOW TABLES").fetchall()}
    if "train_plans" not in tables:
        return "WITH run_plan AS (SELECT r.run, 0 AS lo, 9223372036854775807 AS hi, p.* FROM plan p, " \
               "(SELECT DISTINCT run FROM train_steps) r)"
    return """WITH branches AS (SELECT DISTINCT run, from_step FROM train_plans),
        run_plan AS (
            SELECT r.run, 0 AS lo, coalesce(b.from_step, 9223372036854775807) AS hi, p.*
            FROM plan p, (SELECT DISTINCT run FROM train_steps) r LEFT JOIN branches b USING (run)
            UNION ALL BY NAME
            SELECT * EXCLUDE (from_step), from_step AS lo, 9223372036854775807 AS hi FROM train_plans)"""


def step_spans(con: duckdb.DuckDBPyConnection, window: int, run: str | None = None,
               step: int | None = None) -> tuple[int, list[tuple]]:
    """The documents and token spans of one window of the training stream (contract 9): what a training step
    reads (train_steps.stream_window: each run reads the windows in its own order, train.data_seed). run, step:
    a branched run (an anneal's arm) read its steps from its branch on in its own plan.

    Training reads the plan as one stream (each document followed by end-of-text) cut into windows of
    seq_len x global_batch tokens. Returns (tokens per step, rows of position, phase, bucket, doc_id, epoch,
    shard, offset, first_token, end_token): tokens [first_token, end_token) of the document, counted from
    its first token; end_token = length + 1 includes the end-of-text.
    """
    per_step = _tokens_per_step(con)
    plan, args = _plan_of(con, run, step)
    total = con.execute(f"SELECT coalesce(sum(length + 1), 0) FROM {plan}", args).fetchone()[0]
    if not 0 <= window < total // per_step:
        raise LookupError(f"window {window} is outside the plan: it holds {total // per_step} full windows "
                          f"of {per_step} tokens")
    lo, hi = window * per_step, (window + 1) * per_step
    rows = con.execute(f"""SELECT position, phase, bucket, doc_id, epoch, shard, "offset",
                                  greatest(? - stream_start, 0) AS first_token,
                                  least(?, stream_start + length + 1) - stream_start AS end_token
                           FROM {plan} WHERE stream_start < ? AND stream_start + length + 1 > ?
                           ORDER BY position""", [lo, hi, *args, hi, lo]).fetchall()
    return per_step, rows


def training_runs(con: duckdb.DuckDBPyConnection) -> list[str]:
    tables = {r[0] for r in con.execute("SHOW TABLES").fetchall()}
    return [r[0] for r in con.execute("SELECT DISTINCT run FROM train_steps ORDER BY 1").fetchall()] \
        if "train_steps" in tables else []


# The steps that read a plan row p (its tokens and the end-of-text after them): s.stream_window is the window of
# the stream a step of run s.run trained, $per_step tokens long.
_READ_BY = "s.stream_window BETWEEN p.stream_start // $per_step AND (p.stream_start + p.length) // $per_step"


def steps_of_document(con: duckdb.DuckDBPyConnection, doc_id: str) -> list[tuple]:
    """(run, step, loss, skipped) for every training step whose inputs held tokens of the document."""
    tables = {r[0] for r in con.execute("SHOW TABLES").fetchall()}
    if not {"plan", "train_steps"} <= tables:
        return []
    per_step = _tokens_per_step(con)
    return con.execute(f"""{_run_plans(con)}
        SELECT s.run, s.step, s.loss, s.skipped
        FROM run_plan p JOIN train_steps s ON s.run = p.run AND s.step >= p.lo AND s.step < p.hi AND {_READ_BY}
        WHERE p.doc_id = $doc_id ORDER BY s.run, s.step""", {"per_step": per_step, "doc_id": doc_id}).fetchall()


def canary_exposure(con: duckdb.DuckDBPyConnection, canary: str | None = None) -> list[dict]:
    """One row per training run and planted canary (tokenmill.canaries): its document, planned visits, the
    visits the run trained (plan visits with a step of the run that read them and applied its update: a
    scout reads part of the stream) and its exposure in the run's final model. Empty before any run."""
    tables = {r[0] for r in con.execute("SHOW TABLES").fetchall()}
    if not {"canaries", "train_canaries", "plan"} <= tables:
        return []
    per_step = _tokens_per_step(con)
    if "train_steps" not in tables:
        return []
    rel = con.execute(f"""{_run_plans(con)},
        trained AS (
            SELECT s.run, p.doc_id, count(DISTINCT p.position) AS visits, list(DISTINCT s.step ORDER BY s.step) AS steps
            FROM run_plan p JOIN canaries c USING (doc_id)
                 JOIN train_steps s ON s.run = p.run AND s.step >= p.lo AND s.step < p.hi AND {_READ_BY}
            WHERE NOT s.skipped GROUP BY ALL)
        SELECT e.run, c.canary, c.doc_id, c.planned_visits, coalesce(t.visits, 0) AS trained_visits,
               coalesce(t.steps, []) AS steps, e.exposure, e.exposure_fit, e.rank, e.candidates, e.loglikelihood
        FROM canaries c JOIN train_canaries e USING (doc_id)
        LEFT JOIN trained t ON t.run = e.run AND t.doc_id = c.doc_id
        WHERE $canary IS NULL OR c.canary = $canary
        ORDER BY e.run, c.planned_visits, c.canary""", {"per_step": per_step, "canary": canary})
    names = [d[0] for d in rel.description]
    return [dict(zip(names, r)) for r in rel.fetchall()]


def _tokens_per_step(con: duckdb.DuckDBPyConnection) -> int:
    row = con.execute("SELECT manifest FROM stages WHERE json_extract(manifest, '$.tokens_per_step') "
                      "IS NOT NULL").fetchone()
    if row is None:
        raise LookupError("no plan in the lineage: run the mixture stage and rebuild the lineage")
    return int(json.loads(row[0])["tokens_per_step"])


def step_tokens(con: duckdb.DuckDBPyConnection, data_root: str | Path, window: int, run: str | None = None,
                step: int | None = None):
    """The input tokens of one window of the training stream (the step that read it: train_steps.stream_window),
    rebuilt from the plan's spans (the run's own plan, if it had one) and the token shards."""
    row = con.execute("SELECT stage, manifest FROM stages WHERE json_extract(manifest, '$.dtype') "
                      "IS NOT NULL").fetchone()
    if row is None:
        raise LookupError("no token stage in the lineage")
    token_dir, dtype = Path(data_root) / row[0], json.loads(row[1])["dtype"]
    _, spans = step_spans(con, window, run, step)
    parts = []
    for *_, shard, offset, first, end in spans:
        tokens = np.memmap(token_dir / shard, dtype=dtype, mode="r")
        parts.append(np.asarray(tokens[offset + first: offset + end]))
    return np.concatenate(parts)


def stale_runs(data_root: str | Path) -> list[str]:
    """Training runs in the workspace that trained on another plan than the current one: an experiment that
    stopped at the lineage (`dvc exp run ... lineage`) leaves the previous runs in data/train until `dvc repro`
    retrains them. Each run's stamp names the plan digest it trained on."""
    data_root = Path(data_root)
    stale = []
    for manifest in sorted([*(data_root / "train").rglob("manifest.json"), *(data_root / "anneal").rglob("manifest.json")]):
        m = json.loads(manifest.read_text())
        stamp = manifest.parent / "run_key.json"
        plan = data_root / m.get("input_stage", "mixture")
        if stamp.exists() and plan.exists():
            trained_on = json.loads(stamp.read_text()).get("inputs", {}).get(m.get("input_stage", "mixture"))
            branch = plan / "branch.json"  # an anneal's arm: also stale when the plan it branched from changed
            branched_from = json.loads(branch.read_text()).get("mixture") if branch.exists() else None
            if trained_on != input_id(plan) or (branch.exists() and branched_from != input_id(data_root / "mixture")):
                stale.append(m["stage"])
    return stale


def verify_training(con: duckdb.DuckDBPyConnection, data_root: str | Path, samples: int = 3,
                    stale: list[str] | None = None) -> list[str]:
    """Every training run's steps are 0..N-1, each once, and what it recorded as fed equals the plan: the
    token hash of its first, middle and last step (and `samples` in all) is recomputed from the shards.
    Runs that trained on another plan (`stale`, default stale_runs(data_root)) are not this plan's and are left
    out."""
    # the training data reader: `audit verify` alone; the lineage, report and check stages import this package
    # and stay independent of the training code in dvc.yaml
    from tokenmill.train.data import tokens_hash

    problems = []
    stale = set(stale_runs(data_root) if stale is None else stale)
    for run in (r for r in training_runs(con) if r not in stale):
        n, lo, hi, distinct = con.execute("SELECT count(*), min(step), max(step), count(DISTINCT step) "
                                          "FROM train_steps WHERE run = ?", [run]).fetchone()
        if (lo, hi, distinct) != (0, n - 1, n):
            problems.append(f"training {run}: steps are not 0..{n - 1} each once (min {lo}, max {hi}, {distinct} distinct)")
            continue
        for step in sorted({0, (n - 1) // 2, n - 1})[:samples]:
            window, recorded = con.execute("SELECT stream_window, tokens_hash FROM train_steps WHERE run = ? AND step = ?",
                                           [run, step]).fetchone()
            if tokens_hash(step_tokens(con, data_root, window, run, step)) != recorded:
                problems.append(f"training {run}: step {step} fed tokens that are not the plan's (window {window})")
    return problems
