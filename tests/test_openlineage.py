"""OpenLineage events of the tiny run (tests/tiny_run.py), built with the openlineage-python client's classes
from dvc.lock, the run records and the manifests: deterministic, one START and COMPLETE per stage run, datasets
versioned by DVC's hashes, the document stages' decision counts as the lineage database has them; delivered
through the client's HTTP transport to a local endpoint that records what arrives: transient errors are retried
by the client, and what an endpoint that is down could not take stays in the file and goes on the next send.

A failed stage run gives START and FAIL with its error (runtime.StageRun records the failure).

Every event `tokenmill openlineage` writes for the build, a failed run's included, is validated against the
OpenLineage specification's JSON schemas in ../shared/openlineage-spec (spec 2-0-2, read in place, never copied
here; their $refs resolved from its files, no network): the event against OpenLineage.json's RunEvent, each
standard facet against its own schema in facets/ (and only where the specification puts it: a DatasetFacet in a
dataset's `facets`, not in `outputFacets`), each custom facet's `_producer` and `_schemaURL` as URIs. Without the
folder those tests skip, and under CI=true they fail.
"""

from __future__ import annotations

import copy
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest
import yaml
from jsonschema import Draft202012Validator, FormatChecker
from referencing import Registry, Resource

import tiny_run
from conftest import PROJECT_ROOT, missing_shared_data  # skips, or fails under CI=true
from tokenmill import openlineage as OL
from train_helpers import free_port

SPEC = PROJECT_ROOT / ".." / "shared" / "openlineage-spec"
SPEC_VERSION = "2-0-2"  # docs/lineage.md names it too

FAST_RETRY = {"total": 3, "read": 3, "connect": 3, "backoff_factor": 0.01, "status_forcelist": [500, 502, 503, 504],
              "allowed_methods": ["HEAD", "POST"]}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return tiny_run.build(tmp_path_factory.mktemp("tiny"))


def spec_folder(folder: Path = SPEC) -> Path:
    """../shared/openlineage-spec, resolved; a test that needs it skips without it, or fails under CI=true."""
    if not (folder / "OpenLineage.json").is_file() or not (folder / "facets").is_dir():
        missing_shared_data(f"the OpenLineage specification's schemas in {folder}")
    return folder.resolve()


# RFC 3986's URI: a scheme, a colon, then only the characters a URI may hold (percent-escapes whole). jsonschema
# checks the "uri" format only with rfc3987 or rfc3986-validator installed, and neither is: this check stands in.
_URI = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:(?:[A-Za-z0-9._~:/?#\[\]@!$&'()*+,;=-]|%[0-9A-Fa-f]{2})+")

# Where each kind of facet goes in a RunEvent: the base definition in OpenLineage.json that a facet's schema
# extends names it.
PLACES = {"RunFacet": "run.facets", "JobFacet": "job.facets", "DatasetFacet": "facets",
          "InputDatasetFacet": "inputFacets", "OutputDatasetFacet": "outputFacets"}


class Spec:
    """The specification's schemas, validating events: OpenLineage.json and facets/*.json, each registered under
    its `$id` (the URL it is published at), so that every `$ref` between them resolves from these files and no
    other is fetched (the registry has no retrieval: an unknown one is an error)."""

    def __init__(self, folder: Path):
        files = [folder / "OpenLineage.json", *sorted((folder / "facets").glob("*.json"))]
        docs = [json.loads(p.read_text()) for p in files]
        self.registry = Registry().with_resources((d["$id"], Resource.from_contents(d)) for d in docs)
        self.core = docs[0]["$id"]
        assert self.core == f"https://openlineage.io/spec/{SPEC_VERSION}/OpenLineage.json", self.core
        self.formats = FormatChecker()
        self.formats.checks("uri")(lambda value: not isinstance(value, str) or bool(_URI.fullmatch(value)))
        # Without their libraries jsonschema skips formats silently: these must really be checked.
        assert {"uri", "uuid", "date-time"} <= set(self.formats.checkers), sorted(self.formats.checkers)
        self.event = self._validator(f"{self.core}#/$defs/RunEvent")
        # (where, key) -> the facet's schema: each facets/ file defines its facet (two for LineageFacet and
        # BaseSubsetDatasetFacet) and names its key in a RunEvent as its one property.
        self.facets: dict[tuple[str, str], str] = {}
        for doc in docs[1:]:
            (key,) = doc["properties"]
            for name, body in doc["$defs"].items():
                for part in body.get("allOf", []):
                    base = part.get("$ref", "").removeprefix(f"{self.core}#/$defs/")
                    if base in PLACES:
                        self.facets[(PLACES[base], key)] = f"{doc['$id']}#/$defs/{name}"
        self.validators = {ref: self._validator(ref) for ref in set(self.facets.values())}
        self.standard_keys = {key for _, key in self.facets}

    def _validator(self, ref: str) -> Draft202012Validator:
        return Draft202012Validator({"$ref": ref}, registry=self.registry, format_checker=self.formats)

    @staticmethod
    def facets_of(event: dict):
        """(where, key, facet, path) of every facet in the event."""
        for part in ("run", "job"):
            for key, facet in ((event.get(part) or {}).get("facets") or {}).items():
                yield f"{part}.facets", key, facet, f"{part}.facets.{key}"
        for side, own in (("inputs", "inputFacets"), ("outputs", "outputFacets")):
            for i, dataset in enumerate(event.get(side) or []):
                for where in ("facets", own):
                    for key, facet in (dataset.get(where) or {}).items():
                        yield where, key, facet, f"{side}[{i}].{where}.{key}"

    def errors(self, event: dict, seen: set | None = None) -> list[str]:
        """Everything in the event that the specification does not allow; `seen` collects (where, key, kind)
        of the facets checked."""
        errors = [f"{'.'.join(map(str, e.absolute_path)) or 'event'}: {e.message}"
                  for e in self.event.iter_errors(event)]
        if event.get("schemaURL") != f"{self.core}#/$defs/RunEvent":
            errors.append(f"schemaURL: {event.get('schemaURL')!r} is not this specification's RunEvent")
        for where, key, facet, path in self.facets_of(event):
            ref = self.facets.get((where, key))
            if ref is not None:
                errors += [f"{path}.{'.'.join(map(str, e.absolute_path))}: {e.message}"
                           for e in self.validators[ref].iter_errors(facet)]
                if isinstance(facet, dict) and facet.get("_schemaURL") != ref:
                    errors.append(f"{path}: _schemaURL {facet.get('_schemaURL')!r} is not its schema {ref}")
                kind = "standard"
            elif key in self.standard_keys:
                places = sorted(w for w, k in self.facets if k == key)
                errors.append(f"{path}: the standard facet {key!r} belongs in {' or '.join(places)}, not {where}")
                kind = "misplaced"
            else:  # a custom facet: BaseFacet's two fields, as URIs
                for field in ("_producer", "_schemaURL"):
                    value = facet.get(field) if isinstance(facet, dict) else None
                    if not (isinstance(value, str) and _URI.fullmatch(value)):
                        errors.append(f"{path}.{field}: {value!r} is not a URI")
                kind = "custom"
            if seen is not None:
                seen.add((where, key, kind))
        return errors


@pytest.fixture(scope="module")
def spec() -> Spec:
    return Spec(spec_folder())


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


def test_without_the_openlineage_spec_the_schema_tests_skip_and_under_ci_they_fail(tmp_path, monkeypatch):
    missing = tmp_path / "no-openlineage-spec"
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="shared data not found: the OpenLineage specification"):
        spec_folder(missing)
    for ci in ("true", "1"):
        monkeypatch.setenv("CI", ci)
        with pytest.raises(pytest.fail.Exception, match="CI=true: tests that need it must run"):
            spec_folder(missing)


def test_every_event_of_the_build_follows_the_openlineage_spec_and_each_facet_its_own_schema(spec, tiny, tmp_path):
    """What `tokenmill openlineage` writes for the tiny build with one failed stage run: its START, COMPLETE and
    FAIL events against the specification (Spec.errors). The build is not touched: the project is its entries
    linked, with a copy of runs/ to hold the failure."""
    import shutil

    from tokenmill.cli import main
    from tokenmill.runtime import StageRun

    project = tmp_path / "project"
    project.mkdir()
    for entry in tiny.iterdir():
        if entry.name == "runs":
            shutil.copytree(entry, project / "runs", ignore=shutil.ignore_patterns("*.log"))
        else:
            (project / entry.name).symlink_to(entry)
    scratch = tmp_path / "scratch"
    with pytest.raises(ValueError):
        with StageRun("quality", scratch / "quality", {"threshold": 0.5}, metrics_dir=scratch / "metrics",
                      runs_dir=project / "runs"):
            raise ValueError("quality: need positives and negatives, got 0 positives")
    assert main(["openlineage", "--repo", str(project), "--out", str(tmp_path / "ol"), "--parent", "tiny-build"]) == 0
    events = [json.loads(line) for line in (tmp_path / "ol" / OL.EVENTS).read_text().splitlines()]
    types = [e["eventType"] for e in events]
    assert types.count("FAIL") == 1 and types.count("START") == types.count("COMPLETE") + 1 > 10

    seen: set = set()
    problems = [f"{e['job']['name']} {e['eventType']}: {error}" for e in events for error in spec.errors(e, seen)]
    assert not problems, "\n".join(problems[:30])
    # Not vacuous: every facet the events carry was checked, the standard ones against their own schemas.
    standard = {("run.facets", "parent"), ("run.facets", "processing_engine"), ("run.facets", "errorMessage"),
                ("job.facets", "jobType"), ("job.facets", "documentation"), ("facets", "version"),
                ("facets", "schema"), ("outputFacets", "outputStatistics")}
    custom = {("run.facets", "tokenmill_run"), ("outputFacets", "tokenmill_decisions"),
              ("outputFacets", "tokenmill_lineage")}
    assert seen == {(w, k, "standard") for w, k in standard} | {(w, k, "custom") for w, k in custom}
    # The custom facets' _schemaURL is their description in docs/lineage.md: the anchor it names is there.
    docs = (PROJECT_ROOT / "docs" / "lineage.md").read_text()
    for e in events:
        for _, key, facet, _ in Spec.facets_of(e):
            if key.startswith("tokenmill_"):
                page, anchor = facet["_schemaURL"].split("#")
                assert page.endswith("/docs/lineage.md") and f'<a id="{anchor}"></a>' in docs, facet["_schemaURL"]


def test_the_schema_check_rejects_what_the_specification_does_not_allow(spec, tiny):
    """Broken copies of a real event: each is rejected, by the event's schema, a facet's own schema, where the
    facet is, or a custom facet's URIs."""
    (good,) = [e for e in OL.events(tiny, parent="p") if (e["job"]["name"], e["eventType"]) == ("filter", "COMPLETE")]
    assert spec.errors(good) == []
    out = next(i for i, o in enumerate(good["outputs"]) if "outputStatistics" in o.get("outputFacets", {}))

    def broken(change) -> list[str]:
        event = copy.deepcopy(good)
        change(event)
        return spec.errors(event)

    def facet(event, path):
        node = event
        for part in path:
            node = node[part]
        return node

    stats = ("outputs", out, "outputFacets", "outputStatistics")
    cases = {
        "eventTime' is a required property": lambda e: e.pop("eventTime"),
        "'yesterday' is not a 'date-time'": lambda e: e.update(eventTime="yesterday"),
        "'DONE' is not one of": lambda e: e.update(eventType="DONE"),
        "is not a 'uuid'": lambda e: e["run"].update(runId="filter-1"),
        "is not a 'uri'": lambda e: e.update(producer="tokenmill at HEAD"),
        "rowCount: '12' is not of type 'integer'": lambda e: facet(e, stats).update(rowCount="12"),
        "'processingType' is a required property": lambda e: e["job"]["facets"]["jobType"].pop("processingType"),
        "errorMessage.message: 5 is not of type 'string'": lambda e: e["run"]["facets"].update(errorMessage={
            **e["run"]["facets"]["processing_engine"], "_schemaURL": spec.facets[("run.facets", "errorMessage")],
            "message": 5, "programmingLanguage": "python"}),
        # The fault these tests found in tokenmill's events: the schema facet (a DatasetFacet) in outputFacets.
        "'schema' belongs in facets, not outputFacets": lambda e: facet(e, stats[:3]).update(
            schema=e["outputs"][out]["facets"].pop("schema")),
        "is not its schema": lambda e: e["outputs"][out]["facets"]["version"].update(
            _schemaURL="https://openlineage.io/spec/facets/1-0-0/DatasetVersionDatasetFacet.json"),
        "tokenmill_run._schemaURL: '' is not a URI":
            lambda e: e["run"]["facets"]["tokenmill_run"].update(_schemaURL=""),
        "tokenmill_lineage._producer: 'tokenmill' is not a URI":
            lambda e: facet(e, stats[:3])["tokenmill_lineage"].update(_producer="tokenmill"),
    }
    for expected, change in cases.items():
        errors = broken(change)
        assert any(expected in error for error in errors), (expected, errors)
