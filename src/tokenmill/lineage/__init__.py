"""lineage.duckdb: every stage's records, decisions and manifests in one database for auditors.

Built with DuckDB SQL straight over the stages' Parquet shards (contract 7), so it runs out of core.
docs/lineage.md documents every table and column; `verify` is the conservation check of contract 4.
"""

from __future__ import annotations

import json
from pathlib import Path

import duckdb

from tokenmill.lineage.planted import build_planted
from tokenmill.runtime import StageRun, read_manifest

DB_NAME = "lineage.duckdb"
# Tables a stage writes beside its documents and decisions, loaded under the same name.
STAGE_TABLES = {"decontaminate": ["contamination"]}
# Tables of the stages after curation, loaded when the stage has run: name -> Parquet glob under data/.
TOKEN_TABLES = {
    "token_index": "tokenize/index/*.parquet",  # doc_id, source, bucket, shard, offset, length
    "plan": "mixture/plan.parquet",  # the training stream, document by document
    "plan_documents": "mixture/documents.parquet",  # per document: held out?, planned repeats, phases
    "plan_buckets": "mixture/buckets.parquet",  # per bucket and phase: available vs planned tokens, epochs
    "heldout": "mixture/heldout.parquet",  # documents reserved for evaluation
}


def _glob(data_root: Path, stage: str, table: str) -> str:
    return str(data_root / stage / table / "*.parquet")


def _manifest(data_root: Path, stage: str) -> dict:
    return read_manifest(data_root / stage)


def _insert_run(con: duckdb.DuckDBPyConnection, order: int | None, m: dict) -> None:
    documents = order is not None  # only document stages have counts in and out
    con.execute("INSERT INTO stage_runs VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                [order, m["stage"], m["run_id"], m.get("input_stage"), m["code_version"], m["seconds"],
                 m["counts"]["in"] if documents else None, m["counts"]["out"] if documents else None,
                 json.dumps(m["counts"]), json.dumps(m["params"]), json.dumps(m["inputs"]), json.dumps(m["versions"])])


def build(con: duckdb.DuckDBPyConnection, stages: list[str], data_root: Path, sources_cfg: dict) -> None:
    """Create the lineage tables in `con`. `stages` is the pipeline order, ingest first."""
    if not stages or stages[0] != "ingest":
        raise ValueError(f"lineage.stages must start with 'ingest', got {stages}")
    manifests = [_manifest(data_root, s) for s in stages]

    con.execute("""CREATE TABLE stage_runs (stage_order INTEGER, stage VARCHAR, run_id VARCHAR,
        input_stage VARCHAR, code_version VARCHAR, seconds DOUBLE, documents_in BIGINT, documents_out BIGINT,
        counts JSON, params JSON, inputs JSON, versions JSON)""")
    for order, m in enumerate(manifests):
        _insert_run(con, order, m)

    con.execute(f"CREATE TABLE records AS SELECT * FROM read_parquet('{_glob(data_root, 'ingest', 'records')}') ORDER BY source, file, doc_id")
    con.execute(f"CREATE TABLE read_errors AS SELECT * FROM read_parquet('{_glob(data_root, 'ingest', 'read_errors')}') ORDER BY source, file, \"offset\"")

    con.execute("CREATE TABLE decisions (stage_order INTEGER, doc_id VARCHAR, stage VARCHAR, action VARCHAR, "
                "reason VARCHAR, scores MAP(VARCHAR, DOUBLE), details JSON)")
    con.execute("CREATE TABLE stage_outputs (stage_order INTEGER, stage VARCHAR, doc_id VARCHAR, text_chars BIGINT)")
    for order, stage in enumerate(stages):
        con.execute(f"INSERT INTO decisions SELECT {order}, doc_id, stage, action, reason, scores, details "
                    f"FROM read_parquet('{_glob(data_root, stage, 'decisions')}')")
        con.execute(f"INSERT INTO stage_outputs SELECT {order}, '{stage}', doc_id, length(text) "
                    f"FROM read_parquet('{_glob(data_root, stage, 'documents')}')")

    for stage in stages:
        for table in STAGE_TABLES.get(stage, []):
            con.execute(f"CREATE TABLE {table} AS SELECT * FROM read_parquet('{_glob(data_root, stage, table)}')")

    for table, pattern in TOKEN_TABLES.items():
        if list(data_root.glob(pattern)):
            con.execute(f"CREATE TABLE {table} AS SELECT * FROM read_parquet('{data_root / pattern}')")
    for stage in ("tokenize", "mixture"):
        if (data_root / stage / "manifest.json").exists():
            _insert_run(con, None, read_manifest(data_root / stage))  # no stage_order: not a document stage

    # The fate of every record: dropped where a stage dropped it, otherwise kept by the last stage.
    con.execute("""CREATE TABLE documents AS
        SELECT r.doc_id, r.source, r.bucket, r.url, r.record_type, r.record_id, r.crawl_date, r.content_type,
               r.file, r.locator, r.payload_bytes,
               CASE WHEN d.doc_id IS NULL THEN 'kept' ELSE 'dropped' END AS fate,
               d.stage AS dropped_at, d.reason AS drop_reason,
               (SELECT count(*) FROM decisions m WHERE m.doc_id = r.doc_id AND m.action = 'modify') AS times_modified,
               o.text_chars AS final_text_chars
        FROM records r
        LEFT JOIN (SELECT doc_id, stage, reason FROM decisions WHERE action = 'drop') d USING (doc_id)
        LEFT JOIN (SELECT doc_id, text_chars FROM stage_outputs
                   WHERE stage_order = (SELECT max(stage_order) FROM stage_outputs)) o USING (doc_id)
        ORDER BY r.source, r.file, r.doc_id""")

    con.execute("""CREATE TABLE sources (source VARCHAR, format VARCHAR, bucket VARCHAR, licence VARCHAR,
        snapshot VARCHAR, paths JSON, files BIGINT, records BIGINT, kept BIGINT, read_errors BIGINT)""")
    for name, cfg in sources_cfg.items():
        con.execute("""INSERT INTO sources SELECT ?, ?, ?, ?, ?, ?,
            (SELECT count(DISTINCT file) FROM records WHERE source = ?),
            (SELECT count(*) FROM records WHERE source = ?),
            (SELECT count(*) FROM documents WHERE source = ? AND fate = 'kept'),
            (SELECT count(*) FROM read_errors WHERE source = ?)""",
                    [name, cfg.get("format"), cfg.get("bucket"), cfg.get("licence"), cfg.get("snapshot"),
                     json.dumps(cfg.get("paths")), name, name, name, name])
    con.execute("""CREATE TABLE source_files AS
        SELECT split_part(key, ':', 1) AS source, substr(key, length(split_part(key, ':', 1)) + 2) AS file,
               value AS sha1
        FROM (SELECT unnest(map_keys(m)) AS key, unnest(map_values(m)) AS value
              FROM (SELECT CAST(inputs AS MAP(VARCHAR, VARCHAR)) AS m FROM stage_runs WHERE stage = 'ingest'))
        ORDER BY source, file""")


def verify(con: duckdb.DuckDBPyConnection, limit: int = 20) -> list[str]:
    """Conservation (contract 4): each stage's input documents = kept + dropped, nothing lost or invented.

    Returns human-readable violations naming the offending doc_ids; empty when everything balances.
    """
    problems: list[str] = []
    runs = con.execute("SELECT stage_order, stage, input_stage, documents_in FROM stage_runs "
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
                                         f"EXCEPT SELECT doc_id FROM stage_outputs WHERE stage = '{last}'",
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


def run_lineage(stages: list[str], sources_cfg: dict, data_root: str | Path = "data",
                out_dir: str | Path = "lineage", ground_truth: str | Path | None = None) -> dict:
    """Build the database; with the embedded corpus's ground truth, also score its planted cases."""
    data_root = Path(data_root)
    inputs = {s: _manifest(data_root, s)["run_id"] for s in stages}
    truth = json.loads(Path(ground_truth).read_text()) if ground_truth and Path(ground_truth).exists() else None
    with StageRun("lineage", out_dir, {"stages": stages, "ground_truth": str(ground_truth)}) as run:
        run.input_hashes.update(inputs)
        con = duckdb.connect(str(run.tmp / DB_NAME))
        try:
            build(con, stages, data_root, sources_cfg)
            problems = verify(con)
            counts = con.execute("SELECT fate, count(*) FROM documents GROUP BY fate").fetchall()
            if truth and truth.get("cases"):
                run.metrics["planted_cases"] = build_planted(con, truth, stages)
                wrong = con.execute("SELECT case_kind, url, explanation FROM planted_cases WHERE verdict = 'wrong'").fetchall()
                run.extra["planted_wrong"] = [f"{k} {u}: {e}" for k, u, e in wrong]
        finally:
            con.close()
        run.metrics["fates"] = dict(sorted(counts))
        run.metrics["conservation_violations"] = len(problems)
        run.extra["conservation_violations"] = problems
    return {"manifest": run.manifest, "problems": problems, "planted_wrong": run.manifest.get("planted_wrong", [])}


def connect(db: str | Path = Path("lineage") / DB_NAME) -> duckdb.DuckDBPyConnection:
    """Read-only connection for auditors; a query can never change the lineage."""
    if not Path(db).exists():
        raise FileNotFoundError(f"no lineage database at {db}: run `dvc repro lineage` first")
    return duckdb.connect(str(db), read_only=True)


def step_spans(con: duckdb.DuckDBPyConnection, step: int) -> tuple[int, list[tuple]]:
    """The documents and token spans that make up training step `step` (contract 9).

    Training reads the plan as one stream (each document followed by end-of-text) cut into steps of
    seq_len x global_batch tokens. Returns (tokens per step, rows of position, phase, bucket, doc_id, epoch,
    shard, offset, first_token, end_token): tokens [first_token, end_token) of the document, counted from
    its first token; end_token = length + 1 includes the end-of-text.
    """
    row = con.execute("SELECT params FROM stage_runs WHERE stage = 'mixture'").fetchone()
    if row is None:
        raise LookupError("no mixture in the lineage: run the mixture stage and rebuild the lineage")
    train = json.loads(row[0])["train"]
    per_step = int(train["seq_len"]) * int(train["global_batch"])
    total = con.execute("SELECT coalesce(sum(length + 1), 0) FROM plan").fetchone()[0]
    if not 0 <= step < total // per_step:
        raise LookupError(f"step {step} is outside the plan: it holds {total // per_step} full steps "
                          f"of {per_step} tokens")
    lo, hi = step * per_step, (step + 1) * per_step
    rows = con.execute("""SELECT position, phase, bucket, doc_id, epoch, shard, "offset",
                                 greatest(? - stream_start, 0) AS first_token,
                                 least(?, stream_start + length + 1) - stream_start AS end_token
                          FROM plan WHERE stream_start < ? AND stream_start + length + 1 > ?
                          ORDER BY position""", [lo, hi, hi, lo]).fetchall()
    return per_step, rows
