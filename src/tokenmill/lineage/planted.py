"""The embedded corpus's planted cases, scored against what the pipeline did to them.

data/sample/ground_truth.json says, for each planted page, which stage should catch it and how. This
module turns that into the `planted_cases` table, one row per case, with a verdict:
  caught          the stage made the expected decision (for a duplicate pair: exactly one of the two was
                  dropped with the expected reason, naming the other in duplicate_of)
  dropped_earlier an earlier stage removed the page (or both pages of a pair) first: it never reaches training,
                  but this stage's catch was not exercised
  wrong           the page reached the stage and got a different decision: a defect
  not_run         the expected stage is not in the pipeline (or the case carries no expectation)
Boilerplate and spam name a class of page, not one rule: any drop by the expected stage, or an earlier one,
is caught.
"""

from __future__ import annotations

import json

import duckdb

GENERIC_REASONS = {"spam", "boilerplate"}
CONTENT_TYPES = ("response", "resource", "conversion", "jsonl", "parquet", "text")


def _record(con, url: str):
    return con.execute(f"SELECT doc_id FROM records WHERE url = ? AND record_type IN {CONTENT_TYPES}", [url]).fetchone()


def _decisions(con, doc_id: str) -> dict[str, tuple[str, str, str | None]]:
    rows = con.execute("SELECT stage, action, reason, details FROM decisions WHERE doc_id = ? ORDER BY stage_order",
                       [doc_id]).fetchall()
    return {stage: (action, reason, details) for stage, action, reason, details in rows}


def _judge_pair(con, case: dict, stage: str, reason: str) -> tuple[str, str]:
    ids = [_record(con, u) for u in (case["url"], case["of_url"])]
    if None in ids:
        return "wrong", "a page of the pair is missing from the records"
    got = [_decisions(con, i[0]) for i in ids]
    at = [d.get(stage) for d in got]
    if at[0] is None and at[1] is None:
        return "dropped_earlier", "both pages were dropped before " + stage
    if None in at:
        # Near copies can sit on either side of a filter threshold: the survivor has no twin left at dedup.
        survivor = next(a for a in at if a is not None)
        return ("dropped_earlier", "its twin was dropped earlier") if survivor[0] != "drop" else \
            ("wrong", f"dropped as {survivor[1]} with no twin left")
    details = [json.loads(a[2] or "{}") for a in at]
    for i in (0, 1):
        # One page goes for the expected reason, naming the other. The other may itself go later for
        # another reason (a near duplicate of a third page, in a bigger cluster).
        if at[i][0] == "drop" and at[i][1] == reason and details[i].get("duplicate_of") == ids[1 - i][0]:
            return "caught", f"{reason}, duplicate_of the other page"
    clusters = {d.get("cluster_id") for d in details}
    if reason == "near_duplicate" and len(clusters) == 1 and None not in clusters and \
            any(a[0] == "drop" and a[1] == reason for a in at):
        return "caught", "both in one near-duplicate cluster, kept a third page"
    return "wrong", f"{stage} decisions: {[a[:2] for a in at]}"


def judge(con: duckdb.DuckDBPyConnection, case: dict, stages: list[str]) -> tuple[str, str, str]:
    """(expected stage, verdict, explanation) for one planted case."""
    if not case.get("expect"):
        return "", "not_run", "no expectation (the copy's Jaccard is too close to the threshold to call)"
    stage, expected = next(iter(case["expect"].items()))
    if stage not in stages:
        return stage, "not_run", f"{stage} is not in the pipeline"
    action, _, reason = expected.partition(":")
    if "of_url" in case and action == "drop":
        return (stage, *_judge_pair(con, case, stage, reason))
    rec = _record(con, case["url"])
    if rec is None:
        return stage, "wrong", "not in the records"
    got = _decisions(con, rec[0])
    earlier = [(s, a) for s, a in got.items() if a[0] == "drop" and stages.index(s) < stages.index(stage)]
    if stage not in got:
        if not earlier:
            return stage, "wrong", f"never reached {stage}, yet nothing dropped it"
        s, a = earlier[0]
        if action == "drop" and reason in GENERIC_REASONS:
            return stage, "caught", f"dropped earlier at {s} ({a[1]})"
        return stage, "dropped_earlier", f"dropped at {s} ({a[1]})"
    got_action, got_reason, _ = got[stage]
    if action == "drop":
        ok = got_action == "drop" and (reason in GENERIC_REASONS or got_reason == reason)
    else:
        ok = got_action == action or (action == "keep" and got_action == "modify")
    return stage, "caught" if ok else "wrong", f"{got_action} ({got_reason})"


def build_planted(con: duckdb.DuckDBPyConnection, truth: dict, stages: list[str]) -> dict:
    con.execute("""CREATE TABLE planted_cases (case_kind VARCHAR, url VARCHAR, expected_stage VARCHAR,
                   expected VARCHAR, verdict VARCHAR, explanation VARCHAR, ground_truth JSON)""")
    for case in truth["cases"]:
        stage, verdict, why = judge(con, case, stages)
        con.execute("INSERT INTO planted_cases VALUES (?,?,?,?,?,?,?)",
                    [case["case"], case["url"], stage, case.get("expect", {}).get(stage, ""), verdict, why,
                     json.dumps(case)])
    summary: dict[str, dict[str, int]] = {}
    for kind, verdict, n in con.execute("SELECT case_kind, verdict, count(*) FROM planted_cases GROUP BY ALL ORDER BY ALL").fetchall():
        summary.setdefault(kind, {})[verdict] = n
    return summary
