"""Shared fixtures: where the real data lives, how to run ingest in a scratch directory, conservation checks.

Real-data tests read ../shared/data in place (never copied into the project). Without it they are skipped on
a developer's checkout, but under CI=true they fail: a CI run must not pass by skipping most of the suite.
TOKENMILL_SHARED_DATA points the `shared_data` fixture elsewhere (tests/test_conftest.py uses it to show the
failure).
"""

from __future__ import annotations

import io
import json
import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import pyarrow.parquet as pq
import pytest

# One thread per process for torch (and every library using OpenMP), set before any test module imports torch
# and inherited by every process a test starts (stages under dvc, torchrun ranks, pool workers): the suite runs
# one pytest-xdist worker per core, and a worker whose torch spins two OpenMP threads while the other worker
# computes only contends for the cores. The training stage and the training tests already pinned it.
os.environ.setdefault("OMP_NUM_THREADS", "1")

PROJECT_ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("TOKENMILL_SHARED_DATA") or PROJECT_ROOT / ".." / "shared" / "data")
TABLES = ("documents", "records", "decisions", "read_errors")


# `make test` runs pytest-xdist workers, one per core (the suite is mostly one busy process at a time: the
# training tests pin OMP_NUM_THREADS=1). The scheduler below hands out whole modules, so a module-scoped build
# happens once; modules that share the tiny run's build (tests/tiny_run.py) go to one worker together. Groups
# start heaviest first (longest-processing-time order, from the per-module seconds of a fresh-clone run with
# --durations=0), so the long ones do not begin last and the run ends on small modules: with only the eight
# heaviest ordered, test_train_core (73 s) started last and the other worker sat idle for 78 s at the end.
# Modules not listed (each under 10 s) keep their order after these. (xdist's own `--dist loadgroup` marks
# cannot do this under pytest 9: it renames a test through an attribute pytest no longer reads.)
SHARED_BUILDS = {"test_anneal": "tiny_run", "test_croissant": "tiny_run", "test_forecast": "tiny_run", "test_openlineage": "tiny_run",
                 "test_remote": "tiny_run", "test_report": "tiny_run", "test_search": "tiny_run",
                 "test_value": "tiny_run"}
HEAVIEST_FIRST = ("test_pipeline_e2e", "tiny_run", "test_train_distributed", "test_bad_input_dvc",
                  "test_decontam_leaks", "test_train_core", "test_quality", "test_train_multinode",
                  "test_stale_and_budget", "test_bench_train_gpu", "test_ray_cluster", "test_fuzz_ingest",
                  "test_reliability", "test_extraction_real", "test_ingest_real", "test_tokenizer", "test_decontam",
                  "test_errors_named", "test_benchmarks", "test_check", "test_minhash", "test_export")


def _group(nodeid: str) -> str:
    module = Path(nodeid.split("::", 1)[0]).stem
    return SHARED_BUILDS.get(module, module)


def pytest_collection_modifyitems(config, items):
    rank = {group: i for i, group in enumerate(HEAVIEST_FIRST)}
    items.sort(key=lambda item: rank.get(_group(item.nodeid), len(rank)))  # stable: a module's own order is kept


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist: without it installed, pytest never calls this
def pytest_xdist_make_scheduler(config, log):
    from xdist.scheduler import LoadScopeScheduling

    class ByBuild(LoadScopeScheduling):
        """xdist's per-scope scheduler with a scope per build group, handed out in collection order."""

        def __init__(self, config, log=None):
            super().__init__(config, log)
            config.option.loadscopereorder = False  # not by test count: the order above

        def _split_scope(self, nodeid: str) -> str:
            return _group(nodeid)

    return ByBuild(config, log)


@pytest.fixture(scope="session", autouse=True)
def _quiet_progress():
    # Set for the whole session (not per test) so that spawned pool workers and Ray inherit it too.
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TOKENMILL_PROGRESS", "0")
        yield


def missing_shared_data(what: str) -> None:
    """A test cannot run without ../shared/data: skip it, or under CI=true fail it."""
    if os.environ.get("CI"):  # any value: CI systems set true, 1, yes ...
        pytest.fail(f"shared data not found: {what} (CI=true: tests that need it must run)", pytrace=False)
    pytest.skip(f"shared data not found: {what}")


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """../shared/data, resolved; skips the test when the shared data set is not there (fails under CI=true)."""
    if not SHARED.is_dir():
        missing_shared_data(str(SHARED))
    return SHARED.resolve()


@pytest.fixture(scope="session")
def warc_dir(shared_data: Path) -> Path:
    d = shared_data / "warc"
    if not d.is_dir():
        missing_shared_data(str(d))
    return d


# ---------------------------------------------------------------------------------------------------------
# Running ingest and reading back what it wrote


@dataclass
class IngestOutput:
    dir: Path
    manifest: dict
    documents: list[dict]
    records: list[dict]
    decisions: list[dict]
    read_errors: list[dict]

    def parquet_files(self) -> dict[str, bytes]:
        """Every Parquet file under the output, by relative path, as bytes."""
        return {str(p.relative_to(self.dir)): p.read_bytes() for p in sorted(self.dir.rglob("*.parquet"))}

    def decision_of(self) -> dict[str, dict]:
        return {d["doc_id"]: d for d in self.decisions}

    def joined(self) -> list[dict]:
        """records rows with their decision's action, reason and details merged in."""
        by_id = self.decision_of()
        return [{**r, **{k: by_id[r["doc_id"]][k] for k in ("action", "reason", "details")}}
                for r in self.records if r["doc_id"] in by_id]


def _rows(out_dir: Path, table: str) -> list[dict]:
    files = sorted((out_dir / table).glob("*.parquet"))
    rows: list[dict] = []
    for f in files:
        rows.extend(pq.read_table(f).to_pylist())
    return rows


def load_output(out_dir: Path) -> IngestOutput:
    out_dir = Path(out_dir)
    manifest = json.loads((out_dir / "manifest.json").read_text())
    # The run record (run id, params, inputs, timings) lives outside the output, in runs/ of the workdir.
    record = out_dir.parent / "runs" / f"{manifest['stage']}.json"
    if record.exists():
        manifest = {**manifest, **json.loads(record.read_text())}
    return IngestOutput(out_dir, manifest, *(_rows(out_dir, t) for t in TABLES))


def run_ingest_in(workdir: Path, sources: Mapping[str, Any], out_name: str = "ingest",
                  ingest_cfg: Mapping | None = None, execution: Mapping | None = None) -> IngestOutput:
    """The ingest stage (stages/ingest.py) with the CWD at workdir (it writes metrics/ relative to the CWD);
    returns its outputs."""
    from stages import ingest

    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    old = os.getcwd()
    os.chdir(workdir)
    try:
        ingest.stage({"sources": dict(sources), "ingest": dict(ingest_cfg or {}),
                      "execution": dict(execution or {"workers": 1})}, out_name)
    finally:
        os.chdir(old)
    return load_output(workdir / out_name)


def assert_conservation(out: IngestOutput) -> None:
    """Contract 3/4 for ingest: one decision per record, kept = documents, in = kept + dropped."""
    rec_ids = [r["doc_id"] for r in out.records]
    dec_ids = [d["doc_id"] for d in out.decisions]
    doc_ids = [d["doc_id"] for d in out.documents]
    assert len(rec_ids) == len(set(rec_ids)), "duplicate doc_ids in records"
    assert len(dec_ids) == len(set(dec_ids)), "a record has more than one decision"
    assert len(doc_ids) == len(set(doc_ids)), "duplicate doc_ids in documents"
    assert set(rec_ids) == set(dec_ids), (
        f"records without a decision: {sorted(set(rec_ids) - set(dec_ids))[:5]}, "
        f"decisions without a record: {sorted(set(dec_ids) - set(rec_ids))[:5]}")
    assert all(d["stage"] == "ingest" for d in out.decisions)
    assert all(d["action"] in ("keep", "drop") for d in out.decisions)
    kept = {d["doc_id"] for d in out.decisions if d["action"] == "keep"}
    assert kept == set(doc_ids), "kept decisions and documents differ"
    assert all(d["reason"] for d in out.decisions), "a decision without a reason"

    counts = out.manifest["counts"]
    dropped = sum(1 for d in out.decisions if d["action"] == "drop")
    assert counts["in"] == len(rec_ids) == len(kept) + dropped
    assert counts["out"] == len(kept)
    assert counts["by_action"].get("keep", 0) + counts["by_action"].get("drop", 0) == counts["in"]
    assert counts["by_reason"] == dict(Counter(f"{d['action']}:{d['reason']}" for d in out.decisions))
    assert out.manifest["read_errors"] == len(out.read_errors)


@pytest.fixture(scope="session")
def ingest_in():
    """The run_ingest_in helper, for fixtures of any scope."""
    return run_ingest_in


@pytest.fixture
def ingest(tmp_path, monkeypatch):
    """ingest(sources, **kw) -> IngestOutput, run in this test's tmp_path."""
    monkeypatch.chdir(tmp_path)

    def _run(sources, out_name="ingest", ingest_cfg=None, execution=None):
        return run_ingest_in(tmp_path, sources, out_name, ingest_cfg, execution)

    return _run


@pytest.fixture(scope="session")
def conservation():
    return assert_conservation


# ---------------------------------------------------------------------------------------------------------
# Building small WARC files


def http_response_record(writer, url: str, body: bytes, content_type: str | None = "text/html",
                         status: str = "200 OK", extra_headers=(), date: str = "2024-01-01T00:00:00Z",
                         record_id: str | None = None):
    """A WARC response record with HTTP headers, built with warcio's WARCWriter."""
    from warcio.statusandheaders import StatusAndHeaders

    headers = ([("Content-Type", content_type)] if content_type else []) + list(extra_headers)
    http = StatusAndHeaders(status, headers, protocol="HTTP/1.1")
    warc_headers = {"WARC-Date": date}
    if record_id:
        warc_headers["WARC-Record-ID"] = record_id
    rec = writer.create_warc_record(url, "response", payload=io.BytesIO(body), http_headers=http,
                                    warc_headers_dict=warc_headers)
    writer.write_record(rec)


class WarcBuilder:
    """Small WARC files for tests, written with warcio's WARCWriter.

    A page is a dict: url, body and optionally content_type, status, extra_headers, date, record_id.
    Record ids are fixed (derived from the page's position) so generated files are reproducible.
    """

    @staticmethod
    def _with_id(page: Mapping, i: int) -> dict:
        page = dict(page)
        page.setdefault("record_id", f"<urn:uuid:00000000-0000-4000-8000-{i:012d}>")
        return page

    @classmethod
    def record(cls, page: Mapping, i: int = 0, gzip: bool = False) -> bytes:
        """The bytes of one record (one gzip member when gzip=True)."""
        from warcio.warcwriter import WARCWriter

        buf = io.BytesIO()
        http_response_record(WARCWriter(buf, gzip=gzip), **cls._with_id(page, i))
        return buf.getvalue()

    def __call__(self, path: Path, pages, gzip: bool = True) -> Path:
        """Write pages to path as one WARC file (one gzip member per record when gzip=True)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"".join(self.record(p, i, gzip) for i, p in enumerate(pages)))
        return path


@pytest.fixture(scope="session")
def warc_builder() -> WarcBuilder:
    return WarcBuilder()
