"""The audit's questions, asked of the audit connection (lineage.connect): what happened to a document, a stage,
a training step, a benchmark item, a planted canary. Each returns rows and dicts; `tokenmill audit` (cli.py)
parses the arguments and prints them. Lookup failures are a LookupError whose message says what is there.
"""

from __future__ import annotations

import duckdb

from tokenmill import lineage

RECORD_FIELDS = ("doc_id", "source", "bucket", "file", "locator", "record_type", "url", "record_id", "crawl_date",
                 "content_type", "payload_bytes")


def tables(con: duckdb.DuckDBPyConnection) -> set[str]:
    return {t[0] for t in con.execute("SHOW TABLES").fetchall()}


def stage_names(con: duckdb.DuckDBPyConnection) -> list[str]:
    return [r[0] for r in con.execute("SELECT stage FROM stages ORDER BY stage_order NULLS LAST").fetchall()]


def document(con: duckdb.DuckDBPyConnection, key: str) -> list[dict]:
    """Every source record of a doc_id or url (content records first), each with its read errors, every
    decision in stage order, its tokens, its place in the plan, its fate and the training steps that read it."""
    records = con.execute(f"""SELECT {', '.join(RECORD_FIELDS)} FROM records WHERE doc_id = ? OR url = ?
                              ORDER BY record_type NOT IN ('response', 'resource', 'conversion', 'jsonl', 'parquet',
                                                           'text'), file, locator""", [key, key]).fetchall()
    present = tables(con)
    out = []
    for rec in records:
        r = dict(zip(RECORD_FIELDS, rec))
        doc = r["doc_id"]
        r["read_errors"] = con.execute("SELECT \"offset\", error FROM read_errors WHERE source = ? AND file = ? "
                                       "AND CAST(\"offset\" AS VARCHAR) = ?", [r["source"], r["file"], r["locator"]]
                                       ).fetchall()
        r["decisions"] = con.execute("""SELECT stage, action, reason, scores, details FROM decisions
                                        WHERE doc_id = ? ORDER BY stage_order""", [doc]).fetchall()
        r["tokens"] = con.execute("SELECT bucket, shard, \"offset\", length FROM token_index WHERE doc_id = ?",
                                  [doc]).fetchall() if "token_index" in present else []
        r["plan"] = con.execute("SELECT heldout, planned_repeats, phases FROM plan_documents WHERE doc_id = ?",
                                [doc]).fetchone() if "plan_documents" in present else None
        r["fate"] = con.execute("SELECT fate, dropped_at, drop_reason FROM documents WHERE doc_id = ?",
                                [doc]).fetchone()
        r["steps"] = lineage.steps_of_document(con, doc)
        out.append(r)
    return out


def url_of(con: duckdb.DuckDBPyConnection, doc_id: str) -> str | None:
    row = con.execute("SELECT url FROM records WHERE doc_id = ?", [doc_id]).fetchone()
    return row[0] if row else None


def stage(con: duckdb.DuckDBPyConnection, name: str) -> dict:
    """A stage's documents in and out, its run (when this workspace has its record) and its decisions counted by
    action and reason."""
    counts = con.execute("SELECT documents_in, documents_out FROM stages WHERE stage = ?", [name]).fetchone()
    if counts is None:
        raise LookupError(f"no stage {name!r} in the lineage (stages: {', '.join(stage_names(con))})")
    run = con.execute("SELECT run_id, seconds FROM stage_runs WHERE stage = ?", [name]).fetchone() \
        if "stage_runs" in tables(con) else None
    reasons = con.execute("""SELECT action, reason, count(*) AS documents FROM decisions WHERE stage = ?
                             GROUP BY action, reason ORDER BY action, documents DESC, reason""", [name]).fetchall()
    return {"documents_in": counts[0], "documents_out": counts[1], "run": run, "reasons": reasons}


def step(con: duckdb.DuckDBPyConnection, n: int, run: str | None = None) -> dict:
    """One training step: its run (`run`, by default the full run once it has trained; before any run, window n
    of the plan's stream, in the plan's order), the window it read, its loss and fed-token hash, and the document
    spans of the window (lineage.step_spans)."""
    runs = lineage.training_runs(con)
    if run is None and "pretrain" in runs:
        run = "pretrain"
    got, window = None, n
    if run is not None:
        got = con.execute("SELECT loss, grad_norm, lr, skipped, skip_reason, tokens_hash, stream_window FROM "
                          "train_steps WHERE run = ? AND step = ?", [run, n]).fetchone() if runs else None
        if got is None:
            raise LookupError(f"run {run!r} has no step {n} (runs: {', '.join(runs) or 'none trained yet'})")
        window = got[-1]
    per_step, spans = lineage.step_spans(con, window, run, n if run is not None else None)  # a LookupError when the window is outside the plan
    return {"run": run, "window": window, "per_step": per_step, "spans": spans,
            "trained": None if got is None else dict(zip(("loss", "grad_norm", "lr", "skipped", "skip_reason",
                                                          "tokens_hash"), got[:-1]))}


def item(con: duckdb.DuckDBPyConnection, benchmark: str, item_id: str) -> dict:
    """A benchmark item: the documents that overlapped it with their fates, visits and trained steps, its scores
    in the evaluation, and its benchmark's all-vs-clean scores."""
    present = tables(con)
    known = sorted(r[0] for r in con.execute("SELECT benchmark FROM benchmarks UNION SELECT benchmark "
                                             "FROM contamination").fetchall())
    if benchmark not in known:
        raise LookupError(f"no benchmark {benchmark!r} in the lineage (benchmarks: {', '.join(known)})")
    scored = None
    if "eval_items" in present:
        rel = con.execute("SELECT * FROM eval_items WHERE benchmark = ? AND item_id = ?", [benchmark, item_id])
        got = rel.fetchone()
        scored = None if got is None else dict(zip([c[0] for c in rel.description], got))
    overlaps = con.execute("""
        SELECT c.doc_id, any_value(r.url), c.overlap_fraction, c.matched_ngrams, c.item_ngrams, c.contaminated,
               c.action, any_value(d.fate), any_value(d.dropped_at), any_value(d.drop_reason), c.status, c.similarity
        FROM contamination c LEFT JOIN documents d USING (doc_id) LEFT JOIN records r USING (doc_id)
        WHERE c.benchmark = ? AND c.item_id = ?
        GROUP BY ALL ORDER BY c.overlap_fraction DESC NULLS LAST, c.similarity DESC, c.doc_id""",
                           [benchmark, item_id]).fetchall()
    if scored is None and not overlaps:
        raise LookupError(f"benchmark {benchmark!r} has no item {item_id!r} in the lineage or the evaluation "
                          f"(`tokenmill audit sql \"SELECT item_id FROM eval_items WHERE benchmark = '{benchmark}'\"`)")
    documents = []
    for row in overlaps:
        doc_id = row[0]
        visits = con.execute("SELECT count(*) FROM plan WHERE doc_id = ?", [doc_id]).fetchone()[0] \
            if "plan" in present else 0
        documents.append({"overlap": row, "visits": visits, "steps": lineage.steps_of_document(con, doc_id)})
    scores = con.execute("""SELECT metric, items, dirty_items, "all", clean, difference, difference_stderr,
                                   suspect_items, clean_strict
                            FROM eval_scores WHERE benchmark = ? ORDER BY metric""", [benchmark]).fetchall() \
        if scored is not None else []
    return {"documents": documents, "dirty": any(o[5] for o in overlaps),
            "suspect": any(o[10] == "suspect" for o in overlaps), "scored": scored, "scores": scores}


def canary(con: duckdb.DuckDBPyConnection, name: str) -> dict:
    """A planted canary: its document, text and planned visits, its stream positions, and per finished run the
    visits trained and the exposure left in the final model (lineage.canary_exposure)."""
    known = [r[0] for r in con.execute("SELECT canary FROM canaries ORDER BY planned_visits, canary").fetchall()] \
        if "canaries" in tables(con) else []
    if name not in known:
        raise LookupError(f"no canary {name!r} in the lineage (canaries: {', '.join(known) or 'none planted'})")
    doc_id, visits, prefix, secret = con.execute("SELECT doc_id, planned_visits, prefix, secret FROM canaries "
                                                 "WHERE canary = ?", [name]).fetchone()
    positions = [r[0] for r in con.execute("SELECT position FROM plan WHERE doc_id = ? ORDER BY position",
                                           [doc_id]).fetchall()]
    return {"doc_id": doc_id, "planned_visits": visits, "text": f"{prefix}{secret}", "positions": positions,
            "runs": lineage.canary_exposure(con, name)}
