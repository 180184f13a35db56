"""OpenLineage run events for every stage run of a built pipeline, for catalogs that ingest them (Marquez,
DataHub, OpenMetadata, Dataplex).

Derived, deterministically, from what a build leaves: dvc.lock (each stage's command, parameters, and its
deps and outs with DVC's hashes), the run records runs/<stage>.json (run id, start and end, host, versions)
and the stages' manifests (counts per decision). The same build gives the same events, byte for byte.
Built with the maintained client's classes (openlineage-python: event_v2, facet_v2), they follow the
OpenLineage specification 2-0-2 (RunEvent) and each standard facet's own schema (tests/test_openlineage.py
validates them); per stage run a START and a COMPLETE event:

  job       namespace `tokenmill`, name the stage; facets: jobType (BATCH, DVC, STAGE), documentation (cmd)
  run       runId: a UUID derived from the run record's run id (parameters, inputs, code, library versions);
            facets: parent (the pipeline run at this git revision, or the DVC experiment), processing_engine
            (tokenmill and its version), tokenmill_run (the stage's parameters and its run id, seconds, host)
  inputs    the stage's deps; outputs its outs: namespace file://<project>, name the path, version DVC's md5;
            outputs also carry their Parquet schema (a dataset facet: schema), rows and files (of the
            documents table where there is one) and bytes (the whole output) in the output facet
            outputStatistics, and for document stages the decisions per action and reason (tokenmill_decisions)
            and where their rows are in the lineage database (tokenmill_lineage), both output facets

`tokenmill openlineage` writes them to lineage/openlineage.ndjson and, where OPENLINEAGE_URL is set (its key in
OPENLINEAGE_API_KEY; never in params), sends them with the client's HTTP transport. The client retries a
failing request (5 tries, backoff); what it could not deliver stays in the file, and the number sent so far in
lineage/openlineage.sent: the next `tokenmill openlineage --send` goes on from there.
"""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import uuid
from pathlib import Path
from typing import Any

import attr
import pyarrow.parquet as pq
import yaml
from openlineage.client import facet_v2
from openlineage.client.event_v2 import InputDataset, Job, OutputDataset, Run, RunEvent, RunState
from openlineage.client.facet_v2 import (dataset_version_dataset, documentation_job, error_message_run, job_type_job,
                                         output_statistics_output_dataset, parent_run, processing_engine_run,
                                         schema_dataset)
from openlineage.client.serde import Serde

from tokenmill.runtime import library_versions, read_manifest

NAMESPACE = "tokenmill"
PRODUCER = "https://github.com/tokenmill/tokenmill"
_IDS = uuid.UUID("6f1d0a52-8c1e-4b7e-9a43-2f0b7c1d5e11")  # uuid5 namespace of tokenmill's run ids
EVENTS, SENT = "openlineage.ndjson", "openlineage.sent"
_SCHEMA = "https://github.com/tokenmill/tokenmill/blob/main/docs/lineage.md#openlineage"


@attr.define
class TokenmillRunFacet(facet_v2.RunFacet):
    """The stage's parameters as it read them, its run id (the hash of parameters, inputs, code and library
    versions: runtime.run_id), seconds and host, from runs/<stage>.json."""

    params: dict = attr.field(factory=dict)
    runIdHash: str = ""  # noqa: N815
    seconds: float = 0.0
    host: str = ""

    @staticmethod
    def _get_schema() -> str:
        return f"{_SCHEMA}-tokenmill_run"


@attr.define
class TokenmillDecisionsFacet(facet_v2.OutputDatasetFacet):
    """A document stage's decisions: documents in and out, and how many per action and reason."""

    documentsIn: int = 0  # noqa: N815
    documentsOut: int = 0  # noqa: N815
    counts: dict = attr.field(factory=dict)

    @staticmethod
    def _get_schema() -> str:
        return f"{_SCHEMA}-tokenmill_decisions"


@attr.define
class TokenmillLineageFacet(facet_v2.OutputDatasetFacet):
    """Where the output's documents are in the lineage database: one row per decision of this stage."""

    database: str = "lineage/lineage.duckdb"
    query: str = ""

    @staticmethod
    def _get_schema() -> str:
        return f"{_SCHEMA}-tokenmill_lineage"


class OpenLineageError(RuntimeError):
    """A one-line error for the user: no endpoint, or events the endpoint did not take."""


def _uuid(*parts: str) -> str:
    return str(uuid.uuid5(_IDS, "\x00".join(parts)))


def _parquet_files(path: Path) -> list[Path]:
    if path.is_file():
        return [path] if path.suffix == ".parquet" else []
    return sorted(path.rglob("*.parquet")) if path.is_dir() else []


def _output_facets(project: Path, out: dict) -> tuple[dict[str, Any], dict[str, Any]]:
    """One out of dvc.lock: its dataset facets (schema) and its output facets (statistics and, for document
    stages, decision counts). The specification keeps them apart: `schema` is a DatasetFacet and belongs in the
    dataset's `facets`, only OutputDatasetFacets go in `outputFacets`."""
    path = project / out["path"]
    dataset: dict[str, Any] = {}
    facets: dict[str, Any] = {}
    files = _parquet_files(path)
    if files:
        # A stage folder holds several tables (documents/, decisions/, ...): schema, rows and files are its
        # documents' where it has them (else its first table's); size is the whole output's (dvc.lock).
        tables = sorted({f.parent for f in files}, key=lambda t: (t.name != "documents", str(t)))
        same = [f for f in files if f.parent == tables[0]]
        schema = pq.read_schema(same[0])
        dataset["schema"] = schema_dataset.SchemaDatasetFacet(fields=[
            schema_dataset.SchemaDatasetFacetFields(name=f.name, type=str(f.type)) for f in schema])
        facets["outputStatistics"] = output_statistics_output_dataset.OutputStatisticsOutputDatasetFacet(
            rowCount=sum(pq.read_metadata(f).num_rows for f in same), size=int(out.get("size") or 0),
            fileCount=len(same))
    if path.is_dir() and (path / "manifest.json").is_file():
        m = read_manifest(path)
        counts = m.get("counts") or {}
        if "in" in counts and "out" in counts:
            facets["tokenmill_decisions"] = TokenmillDecisionsFacet(
                documentsIn=int(counts["in"]), documentsOut=int(counts["out"]),
                counts={k: v for k, v in sorted(counts.items()) if k not in ("in", "out")})
            facets["tokenmill_lineage"] = TokenmillLineageFacet(
                query=f"SELECT * FROM decisions WHERE stage = '{m.get('stage')}'")
    return dataset, facets


def _dataset(project: Path, entry: dict, cls, facets: tuple[dict, dict] | None = None):
    version = entry.get("md5", "")  # dvc.lock's `hash` key names the algorithm (md5), not a hash
    dataset, output = facets or ({}, {})
    return cls(namespace=f"file://{project}", name=entry["path"],
               facets={"version": dataset_version_dataset.DatasetVersionDatasetFacet(datasetVersion=version),
                       **dataset},
               **({"outputFacets": output} if output else {}))


def _time(finished: str, seconds: float) -> tuple[str, str]:
    end = datetime.datetime.strptime(finished, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.timezone.utc)
    start = end - datetime.timedelta(seconds=seconds)
    return start.isoformat().replace("+00:00", "Z"), end.isoformat().replace("+00:00", "Z")


def events(project: str | Path = ".", parent: str | None = None) -> list[dict]:
    """START and COMPLETE events of every stage in dvc.lock that has a run record, in dvc.lock's order, then
    START and FAIL of every stage whose last run failed (runs/failed/<stage>.json).
    parent: the pipeline run they belong to (a git revision or a DVC experiment's name); default: HEAD."""
    project = Path(project).resolve()
    lock = yaml.safe_load((project / "dvc.lock").read_text())
    parent = parent or _head(project)
    parent_facet = parent_run.ParentRunFacet(
        run=parent_run.Run(runId=_uuid("pipeline", parent)), job=parent_run.Job(namespace=NAMESPACE, name="pipeline"))
    engine = processing_engine_run.ProcessingEngineRunFacet(version=library_versions(("tokenmill",))["tokenmill"],
                                                            name="tokenmill")
    shared = {"parent": parent_facet, "processing_engine": engine}

    def run_events(record: dict, run_id: str, cmd: str, last: RunState, inputs: list, outputs: list,
                   **facets) -> list[dict]:
        """START and `last` of one run: the job is the stage, the run carries its record's params and times."""
        start, end = _time(record["finished_at"], float(record.get("seconds") or 0))
        job = Job(namespace=NAMESPACE, name=record["stage"], facets={
            "jobType": job_type_job.JobTypeJobFacet(processingType="BATCH", integration="DVC", jobType="STAGE"),
            "documentation": documentation_job.DocumentationJobFacet(description=cmd)})
        run_facets = {**shared, **facets, "tokenmill_run": TokenmillRunFacet(
            params=record.get("params") or {}, runIdHash=record.get("run_id") or "",
            seconds=float(record.get("seconds") or 0), host=record.get("host") or "")}
        return [json.loads(Serde.to_json(RunEvent(eventType=state, eventTime=when, job=job, producer=PRODUCER,
                                                  run=Run(runId=run_id, facets=run_facets), inputs=inputs,
                                                  outputs=outputs)))
                for state, when in ((RunState.START, start), (last, end))]

    out: list[dict] = []
    for stage, entry in lock["stages"].items():
        record_path = project / "runs" / f"{stage}.json"
        if not record_path.is_file():
            continue  # never run here (pulled from a remote, or built elsewhere): no times to report
        record = json.loads(record_path.read_text())
        out += run_events(record, _uuid("stage", stage, record["run_id"]), entry.get("cmd", ""), RunState.COMPLETE,
                          [_dataset(project, d, InputDataset) for d in entry.get("deps") or []],
                          [_dataset(project, o, OutputDataset, _output_facets(project, o))
                           for o in entry.get("outs") or []])
    # Failed runs (runtime.StageRun writes runs/failed/<stage>.json, and removes it when the stage next
    # succeeds): START and FAIL with the error. Inputs are the stage's deps in dvc.yaml, unversioned: a failed
    # run locked nothing. No outputs: it wrote none.
    stages = (yaml.safe_load((project / "dvc.yaml").read_text()) or {}).get("stages") or {}
    for record_path in sorted((project / "runs" / "failed").glob("*.json")):
        record = json.loads(record_path.read_text())
        definition = stages.get(record["stage"]) or lock["stages"].get(record["stage"]) or {}  # foreach: the lock's
        inputs = [_dataset(project, {"path": d if isinstance(d, str) else d["path"]}, InputDataset)
                  for d in definition.get("deps") or []]
        error = error_message_run.ErrorMessageRunFacet(message=f"{record['error_type']}: {record['error']}",
                                                       programmingLanguage="python")
        out += run_events(record, _uuid("failed", record["stage"], record["finished_at"], record["error"]),
                          definition.get("cmd", ""), RunState.FAIL, inputs, [], errorMessage=error)
    return out


def _head(project: Path) -> str:
    proc = subprocess.run(["git", "rev-parse", "HEAD"], cwd=project, capture_output=True, text=True)
    return proc.stdout.strip() or "workspace"


def write(evts: list[dict], out_dir: str | Path) -> Path:
    """NDJSON, one event a line; the count already delivered restarts at 0 when the events change."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / EVENTS
    text = "".join(json.dumps(e, sort_keys=True) + "\n" for e in evts)
    if not path.is_file() or path.read_text() != text:
        path.write_text(text)
        (out_dir / SENT).write_text("0\n")
    return path


def send(out_dir: str | Path, url: str | None = None, api_key: str | None = None, timeout: float = 5.0,
         retry: dict | None = None) -> tuple[int, int]:
    """Send the file's events not yet delivered through the client's HTTP transport, in order; returns
    (sent now, total). Stops at the first event the endpoint does not take after the client's retries: the
    rest stay in the file and the next call goes on from there."""
    # the client's HTTP transport: only when events are sent, not when they are written
    from openlineage.client.transport.http import ApiKeyTokenProvider, HttpConfig, HttpTransport, TokenProvider

    out_dir = Path(out_dir)
    url = url or os.environ.get("OPENLINEAGE_URL")
    if not url:
        raise OpenLineageError("no endpoint: set OPENLINEAGE_URL (and OPENLINEAGE_API_KEY if it needs one)")
    key = api_key or os.environ.get("OPENLINEAGE_API_KEY")
    auth = ApiKeyTokenProvider({"apiKey": key}) if key else TokenProvider({})
    config = HttpConfig(url=url, auth=auth, timeout=timeout)
    if retry is not None:
        config.retry = retry
    transport = HttpTransport(config)
    lines = (out_dir / EVENTS).read_text().splitlines()
    done = int((out_dir / SENT).read_text().strip() or 0) if (out_dir / SENT).is_file() else 0
    sent = 0
    try:
        for line in lines[done:]:
            transport.emit(json.loads(line))
            sent += 1
            (out_dir / SENT).write_text(f"{done + sent}\n")
    except Exception as exc:
        raise OpenLineageError(f"{done + sent} of {len(lines)} events delivered to {url}; the endpoint "
                              f"refused the next after retries ({type(exc).__name__}); run again to send the "
                              f"remaining {len(lines) - done - sent}") from exc
    return sent, len(lines)
