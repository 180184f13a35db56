"""OpenLineage events of the tiny run (tests/tiny_run.py), built with the openlineage-python client's classes
from dvc.lock, the run records and the manifests: deterministic, one START and COMPLETE per stage run, datasets
versioned by DVC's hashes, the document stages' decision counts as the lineage database has them; delivered
through the client's HTTP transport to a local endpoint that records what arrives: transient errors are retried
by the client, and what an endpoint that is down could not take stays in the file and goes on the next send.

A failed stage run gives START and FAIL with its error (runtime.StageRun records the failure).

Not done here: validation against the OpenLineage specification's JSON schemas. They are published only at
openlineage.io and in the project's repository; no package on the registries this project installs from ships
them (checked: openlineage-python, -integration-common, -airflow, -dbt, -sql, -dagster, the Airflow provider,
acryl-datahub, marquez-python), and this machine reaches nothing else.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import duckdb
import pyarrow.parquet as pq
import pytest
import yaml

import tiny_run
from tokenmill import openlineage as OL
from train_helpers import free_port

FAST_RETRY = {"total": 3, "read": 3, "connect": 3, "backoff_factor": 0.01, "status_forcelist": [500, 502, 503, 504],
              "allowed_methods": ["HEAD", "POST"]}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return tiny_run.build(tmp_path_factory.mktemp("tiny"))


class Endpoint:
    """An HTTP endpoint on localhost that records each POSTed event; `fail` requests are answered 503 first."""

    def __init__(self, fail: int = 0):
        self.received: list[dict] = []
        self.fail = fail
        self.headers: list[str] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if outer.fail > 0:
                    outer.fail -= 1
                    self.send_response(503)
                else:
                    outer.received.append(json.loads(body))
                    outer.headers.append(self.headers.get("Authorization") or "")
                    self.send_response(200)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.port = free_port()
        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def test_every_stage_run_becomes_deterministic_events_with_its_datasets_and_counts(tiny):
    events = OL.events(tiny, parent="tiny-build")
    assert events == OL.events(tiny, parent="tiny-build")  # the same build, the same events
    lock = yaml.safe_load((tiny / "dvc.lock").read_text())["stages"]
    ran = [s for s in lock if (tiny / "runs" / f"{s}.json").is_file()]
    assert {"ingest", "filter", "dedup", "tokenize", "pretrain", "lineage"} <= set(ran)
    assert [(e["job"]["name"], e["eventType"]) for e in events] == [(s, t) for s in ran for t in ("START", "COMPLETE")]
    by_stage = {}
    for e in events:
        by_stage.setdefault(e["job"]["name"], []).append(e)
    run_ids = {s: {e["run"]["runId"] for e in evs} for s, evs in by_stage.items()}
    assert all(len(ids) == 1 for ids in run_ids.values()) and len({i for ids in run_ids.values() for i in ids}) == len(ran)
    parents = {e["run"]["facets"]["parent"]["run"]["runId"] for e in events}
    assert len(parents) == 1 and OL.events(tiny, parent="another")[0]["run"]["facets"]["parent"]["run"]["runId"] not in parents
    for stage, (start, end) in by_stage.items():
        record = json.loads((tiny / "runs" / f"{stage}.json").read_text())
        assert start["eventTime"] < end["eventTime"] or record["seconds"] < 1
        assert end["run"]["facets"]["tokenmill_run"]["runIdHash"] == record["run_id"]
        # Inputs and outputs are the stage's deps and outs, versioned by DVC's hash.
        for key, side in (("deps", "inputs"), ("outs", "outputs")):
            got = {d["name"]: d["facets"]["version"]["datasetVersion"] for d in end[side]}
            assert got == {d["path"]: d["md5"] for d in lock[stage].get(key) or []}, (stage, side)

    # A document stage's output: its documents' schema and rows from the Parquet, its decisions per reason as the
    # lineage database counts them, and where those rows are.
    (filtered,) = [o for o in by_stage["filter"][1]["outputs"] if o["name"] == "data/filter"]
    facets = filtered["outputFacets"]
    files = sorted((tiny / "data" / "filter" / "documents").glob("*.parquet"))
    assert [f["name"] for f in filtered["facets"]["schema"]["fields"]] == pq.read_schema(files[0]).names
    assert facets["outputStatistics"]["rowCount"] == sum(pq.read_metadata(f).num_rows for f in files)
    con = duckdb.connect(str(tiny / "lineage" / "lineage.duckdb"), read_only=True)
    reasons = dict(con.execute("SELECT action || ':' || reason, count(*) FROM decisions WHERE stage = 'filter' "
                               "GROUP BY ALL").fetchall())
    assert facets["tokenmill_decisions"]["counts"]["by_reason"] == reasons
    assert facets["tokenmill_decisions"]["documentsOut"] == facets["outputStatistics"]["rowCount"]
    assert con.execute(facets["tokenmill_lineage"]["query"]).fetchall()  # the facet's query finds the rows
    con.close()


def test_events_reach_an_endpoint_through_the_client_and_none_is_lost_while_it_is_down(tiny, tmp_path):
    events = OL.events(tiny, parent="tiny-build")
    path = OL.write(events, tmp_path)
    assert [json.loads(line) for line in path.read_text().splitlines()] == events

    # Down: nothing listens on the port. The client retries, then the send stops with one line; the events stay.
    down = free_port()
    with pytest.raises(OL.OpenLineageError, match=rf"^0 of {len(events)} events delivered .* run again"):
        OL.send(tmp_path, url=f"http://127.0.0.1:{down}", retry=FAST_RETRY, timeout=2)
    assert (tmp_path / OL.SENT).read_text().strip() == "0"

    # Up, but its first two answers are 503: the client's retries carry them, and the rest follow in order.
    endpoint = Endpoint(fail=2)
    try:
        sent, total = OL.send(tmp_path, url=endpoint.url, api_key="team-key", retry=FAST_RETRY)
        assert (sent, total) == (len(events), len(events))
        assert endpoint.received == events and set(endpoint.headers) == {"Bearer team-key"}
        # Everything delivered: a second send sends nothing.
        assert OL.send(tmp_path, url=endpoint.url, retry=FAST_RETRY) == (0, len(events))
    finally:
        endpoint.close()

    # Down half way (the endpoint stops after 5 events): the next send goes on from the 6th.
    OL.write(OL.events(tiny, parent="another build"), tmp_path)  # other events: the count starts again
    first = Endpoint()
    try:
        original = first.server.RequestHandlerClass.do_POST

        def stop_after_five(handler):
            if len(first.received) >= 5:
                handler.send_response(503)
                handler.end_headers()
                return
            original(handler)

        first.server.RequestHandlerClass.do_POST = stop_after_five
        with pytest.raises(OL.OpenLineageError, match=rf"^5 of {len(events)} events delivered"):
            OL.send(tmp_path, url=first.url, retry=FAST_RETRY)
    finally:
        first.close()
    second = Endpoint()
    try:
        assert OL.send(tmp_path, url=second.url, retry=FAST_RETRY) == (len(events) - 5, len(events))
        assert first.received + second.received == OL.events(tiny, parent="another build")
    finally:
        second.close()


def test_a_failed_stage_run_becomes_start_and_fail_with_its_error_until_the_stage_succeeds(tiny, tmp_path, monkeypatch):
    """A stage that raises inside its StageRun (the real context every stage uses) leaves runs/failed/<stage>.json;
    its events are START and FAIL with the error message, its dvc.yaml inputs and no outputs. The next success
    removes the record, and with it the FAIL."""
    import shutil

    from tokenmill.runtime import StageRun

    project = tmp_path / "project"
    project.mkdir()
    for name in ("dvc.yaml", "dvc.lock"):
        shutil.copy(tiny / name, project / name)
    shutil.copytree(tiny / "runs", project / "runs", ignore=shutil.ignore_patterns("*.log"))
    monkeypatch.chdir(project)
    before = OL.events(project, parent="p")
    with pytest.raises(ValueError, match="quality: need positives"):
        with StageRun("quality", project / "data" / "quality", {"threshold": 0.5}):
            raise ValueError("quality: need positives and negatives, got 0 positives")
    events = OL.events(project, parent="p")
    assert events[:len(before)] == before  # the completed runs as they were
    start, fail = events[len(before):]
    assert (start["eventType"], fail["eventType"]) == ("START", "FAIL") and start["run"]["runId"] == fail["run"]["runId"]
    assert fail["job"]["name"] == "quality" and fail["outputs"] == []
    assert fail["run"]["facets"]["errorMessage"]["message"] == \
        "ValueError: quality: need positives and negatives, got 0 positives"
    deps = yaml.safe_load((project / "dvc.yaml").read_text())["stages"]["quality"]["deps"]
    assert [d["name"] for d in fail["inputs"]] == deps
    assert fail["run"]["facets"]["tokenmill_run"]["params"] == {"threshold": 0.5}
    assert not (project / "data" / "quality").exists()  # nothing written in place of an output
    with StageRun("quality", project / "data" / "quality", {"threshold": 0.5}):
        pass
    assert not (project / "runs" / "failed" / "quality.json").exists()
    assert [e["eventType"] for e in OL.events(project, parent="p")].count("FAIL") == 0
