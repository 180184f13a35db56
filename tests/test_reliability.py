"""Reliability and security (issue 10): a sealed audit connection, fail-fast execution, nothing left alive
after a kill, parameter errors that name the parameter, audit output into a closed pipe.

Kill tests run real processes: a stage script under `python`, and a stage under a real `dvc repro`; they
look for survivors through /proc (psutil) a few seconds after the SIGKILL.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import duckdb
import psutil
import pyarrow as pa
import pytest

from tokenmill import cli, lineage
from tokenmill.execution import LocalExecutor, TaskError
from tokenmill.lineage.connect import connect
from tokenmill.runtime import ParamError

PROJECT = Path(__file__).resolve().parents[1]
PYTHON = sys.executable


def _sha1(path: Path) -> str:
    return hashlib.sha1(path.read_bytes()).hexdigest()


def _tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): _sha1(p) for p in sorted(root.rglob("*")) if p.is_file()}


# ---------------------------------------------------------------------------------------------------------
# The audit connection: read-only in every sense


@pytest.fixture(scope="module")
def lineage_db(tmp_path_factory, shared_data):
    """A real lineage database built from two real crawl files, and a second database an attacker might
    try to write through ATTACH."""
    from stages import ingest as ingest_stage, lineage as lineage_stage

    root = tmp_path_factory.mktemp("audit")
    sources = {"cc": {"format": "warc", "bucket": "web", "licence": "cc-terms-of-use",
                      "paths": [str(shared_data / "warc" / "resiliparse_warcfile.warc.gz"),
                                str(shared_data / "warc" / "resiliparse_clipped.warc.gz")]}}
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(root)
        ingest_stage.stage({"sources": sources, "ingest": {}, "execution": {"workers": 1}},
                           out_dir=root / "data" / "ingest")
        lineage_stage.stage({"sources": sources, "lineage": {}}, "ingest", data_root=root / "data",
                            out_dir=root / "lineage")
    other = root / "other.duckdb"
    duckdb.connect(str(other)).execute("CREATE TABLE t AS SELECT 1 AS a").close()
    return root / "lineage" / lineage.DB_NAME, other


ATTACKS = {
    "copy-over-the-lineage": "COPY (SELECT 'x') TO '{db}' (FORMAT csv)",
    "copy-to-a-new-file": "COPY (SELECT 'x') TO '{root}/stolen.csv' (FORMAT csv)",
    "copy-table-to-parquet": "COPY records TO '{root}/records.parquet' (FORMAT parquet)",
    "export-database": "EXPORT DATABASE '{root}/export'",
    "attach-new-read-write": "ATTACH '{root}/new.duckdb' AS n (READ_WRITE)",
    "attach-existing-read-write": "ATTACH '{other}' AS o (READ_WRITE)",
    "read-csv-outside": "SELECT * FROM read_csv('/etc/passwd')",
    "read-text-outside": "SELECT * FROM read_text('/etc/passwd')",
    "read-blob-outside": "SELECT * FROM read_blob('/etc/hostname')",
    "glob-outside": "SELECT * FROM glob('/etc/*')",
    "read-parquet-of-the-project": "SELECT * FROM read_parquet('{root}/data/ingest/records/*.parquet')",
    "copy-from": "COPY records FROM '/etc/passwd'",
    "install": "INSTALL httpfs",
    "load": "LOAD httpfs",
    "set-external-access": "SET enable_external_access = true",
    "unlock-configuration": "SET lock_configuration = false",
    "reset-lock": "RESET lock_configuration",
    "set-threads": "SET threads = 1",
    "pragma": "PRAGMA enable_profiling",
    "pragma-setting": "PRAGMA memory_limit = '1GB'",
    "persistent-secret": "CREATE PERSISTENT SECRET s (TYPE s3, KEY_ID 'k', SECRET 'v')",
    "drop": "DROP TABLE records",
    "insert": "INSERT INTO read_errors VALUES ('x', 'y', 0, 'z')",
    "create": "CREATE TABLE main.evil AS SELECT 1",
}


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_audit_connection_refuses(lineage_db, name):
    db, other = lineage_db
    root = db.parent.parent
    before, other_before = _tree(root), _sha1(other)
    query = ATTACKS[name].format(db=db, root=root, other=other)
    con = connect(db)
    try:
        with pytest.raises(duckdb.Error):
            con.execute(query).fetchall()
        # the connection still answers what an auditor asks
        assert con.execute("SELECT count(*) FROM records").fetchone()[0] == 51
    finally:
        con.close()
    assert _tree(root) == before, "a refused statement changed or created a file"
    assert _sha1(other) == other_before


@pytest.mark.parametrize("name", ["copy-over-the-lineage", "attach-existing-read-write", "read-csv-outside"])
def test_audit_sql_command_refuses_in_one_line(lineage_db, name, capsys):
    db, other = lineage_db
    before = _sha1(db)
    query = ATTACKS[name].format(db=db, root=db.parent.parent, other=other)
    assert cli.main(["audit", "--db", str(db), "sql", query]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "disabled" in err or "Permission" in err
    assert _sha1(db) == before


def test_extra_tables_are_there_and_the_connection_is_still_sealed(lineage_db):
    db, _ = lineage_db
    runs = pa.table({"stage": ["ingest"], "run_id": ["abc123"], "seconds": [1.5]})
    con = connect(db, extra={"stage_runs": runs})
    try:
        assert con.execute("SELECT stage, run_id, seconds FROM stage_runs").fetchall() == [("ingest", "abc123", 1.5)]
        assert con.execute("SELECT current_setting('enable_external_access')").fetchone()[0] is False
        # not even a Python object in scope can be scanned once the connection is sealed
        smuggled = pa.table({"x": [1]})  # noqa: F841 (found by DuckDB's replacement scan, if it were allowed)
        with pytest.raises(duckdb.Error):
            con.execute("SELECT * FROM smuggled").fetchall()
    finally:
        con.close()


def test_audit_commands_answer_through_the_sealed_connection(lineage_db, capsys):
    db, _ = lineage_db
    assert cli.main(["audit", "--db", str(db), "verify"]) == 0
    assert "conservation holds" in capsys.readouterr().out
    assert cli.main(["audit", "--db", str(db), "stage", "ingest"]) == 0
    assert "not_content" in capsys.readouterr().out


@pytest.mark.parametrize("argv", [
    ["audit", "sql", "SELEC 1"],
    ["audit", "sql", "SELECT * FROM no_such_table"],
    ["audit", "step", "not-a-number"],
    ["audit", "frobnicate"],
    ["audit", "doc", "http://no.such/url"],
])
def test_user_errors_are_one_line(lineage_db, argv, capsys):
    db, _ = lineage_db
    argv = argv[:1] + ["--db", str(db)] + argv[1:]
    try:
        code = cli.main(argv)
    except SystemExit as exc:  # argparse exits itself
        code = exc.code
    err = capsys.readouterr().err
    assert code != 0
    assert err.count("\n") == 1 and "Traceback" not in err, err


@pytest.mark.parametrize("db", ["missing.duckdb", "README.md"])
def test_a_database_that_is_not_there_or_not_duckdb_is_one_line(db, capsys):
    assert cli.main(["audit", "--db", str(PROJECT / db), "verify"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_audit_output_survives_a_closed_pipe(lineage_db):
    db, _ = lineage_db
    # `tokenmill audit sql ... | head -1`: head reads one line and closes the pipe
    proc = subprocess.Popen([PYTHON, "-m", "tokenmill.cli", "audit", "--db", str(db), "sql",
                             "SELECT range AS n, repeat('x', 50) AS pad FROM range(200000)"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first = proc.stdout.readline()
    proc.stdout.close()
    err = proc.stderr.read().decode()
    code = proc.wait(timeout=60)
    assert first.startswith(b"n")
    assert "Traceback" not in err and "BrokenPipe" not in err, err
    assert code == 128 + signal.SIGPIPE


# ---------------------------------------------------------------------------------------------------------
# Fail fast, name the cause


def _marking_task(task):
    """Marks that it started; task 0 fails at once, the others take a while."""
    i, path, marks = task
    Path(marks, f"{i}").touch()
    if i == 0:
        raise ValueError(f"cannot parse byte 17 of {Path(path).name}\nsecond line of the error")
    time.sleep(0.5)
    return i


def _dying_task(task):
    i, path, marks = task
    if i == 1:
        os._exit(3)  # what the OOM killer does to a worker, as far as the pool can tell
    time.sleep(0.2)
    return i


def test_first_failure_cancels_the_rest_and_names_stage_file_and_error(tmp_path):
    tasks = [(i, f"/crawl/segment-{i:03d}.warc.gz", str(tmp_path)) for i in range(40)]
    with pytest.raises(TaskError) as exc:
        LocalExecutor(2).map(_marking_task, tasks, desc="ingest")
    msg = str(exc.value)
    assert msg == "ingest: /crawl/segment-000.warc.gz: ValueError: cannot parse byte 17 of segment-000.warc.gz " \
                  "second line of the error"
    assert isinstance(exc.value.__cause__, ValueError)
    time.sleep(1.0)  # anything still running would mark itself by now
    started = len(list(tmp_path.iterdir()))
    # 2 workers: task 0 fails at once, so at most the tasks already handed to the pool ever start
    assert started <= 6, f"{started} of 40 tasks started after the first one failed"


def test_inline_execution_names_the_file_too(tmp_path):
    tasks = [(i, f"/crawl/{i}.jsonl", str(tmp_path)) for i in range(3)]
    with pytest.raises(TaskError, match=r"^filter: /crawl/0.jsonl: ValueError: cannot parse"):
        LocalExecutor(1).map(_marking_task, tasks, desc="filter")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["0"]


def test_a_worker_that_dies_fails_the_stage_instead_of_hanging(tmp_path):
    tasks = [(i, f"/crawl/{i}.warc", str(tmp_path)) for i in range(6)]
    with pytest.raises(TaskError, match="worker process died"):
        LocalExecutor(2).map(_dying_task, tasks, desc="dedup")


# ---------------------------------------------------------------------------------------------------------
# Bad parameter values: rejected before any work, naming the parameter and the expected type


@pytest.mark.parametrize("params, message", [
    ({"language": {"min_score": "abc"}}, "filter.language.min_score: expected a number, got 'abc'"),
    ({"language": {"max_chars": 3000.5}}, "filter.language.max_chars: expected an integer, got 3000.5"),
    ({"language": {"max_chars": True}}, "filter.language.max_chars: expected an integer, got True"),
    ({"language": {"enabled": "yes"}}, "filter.language.enabled: expected true or false, got 'yes'"),
    ({"language": {"allowed": "en"}}, "filter.language.allowed: expected a list, got 'en'"),
    ({"language": {"allowed": ["en", 7]}}, "filter.language.allowed[1]: expected a string, got 7"),
    ({"language": {"model": 5}}, "filter.language.model: expected a string, got 5"),
    ({"licences": {"allow": "cc-by"}}, "filter.licences.allow: expected a list, got 'cc-by'"),
    ({"c4": 0.5}, "filter.c4: expected a mapping, got 0.5"),
])
def test_bad_filter_parameter_is_named(params, message):
    from tokenmill.filters.params import Filter

    with pytest.raises(ParamError) as exc:
        Filter.resolve(params)
    assert str(exc.value) == message


def test_bad_dedup_parameter_is_named_where_the_default_is_none():
    from tokenmill.dedup.params import Dedup

    with pytest.raises(ParamError, match=r"^dedup.near.bands: expected an integer, got 'x'$"):
        Dedup.resolve({"near": {"bands": "x", "rows": 4}})


def _within(given, resolved, where: str = "") -> list[str]:
    """Where `resolved` lost or changed a value of `given` (dicts key by key, lists item by item): resolving
    parameters may add defaults, never drop or alter what the configuration set."""
    if isinstance(given, dict):
        if not isinstance(resolved, dict):
            return [where]
        return [w for k, v in given.items()
                for w in ([f"{where}.{k}"] if k not in resolved else _within(v, resolved[k], f"{where}.{k}"))]
    if isinstance(given, list):
        if not isinstance(resolved, list) or len(resolved) != len(given):
            return [where]
        return [w for i, (a, b) in enumerate(zip(given, resolved)) for w in _within(a, b, f"{where}[{i}]")]
    return [] if given == resolved else [where]


def _leaves(d: dict, path: tuple = ()):
    for k, v in d.items():
        if isinstance(v, dict) and v:
            yield from _leaves(v, path + (k,))
        else:
            yield path + (k,), v


def test_the_shipped_configurations_validate(tmp_path):
    """Every option of every group composes and its sections resolve; resolving keeps every value set. An
    option other than the one config.yaml selects changes the composed parameters, to the values its file
    sets (at the file's @package: _global_ is the root)."""
    import yaml

    from tokenmill.config import compose
    from tokenmill.decontam.params import Decontaminate
    from tokenmill.dedup.params import Dedup
    from tokenmill.filters.params import Filter
    from tokenmill.tokenizer.params import Tokenizer

    conf = PROJECT / "conf"
    # every option of every group the root config selects from (model is chosen inside scale presets)
    selected = {k: v for d in yaml.safe_load((conf / "config.yaml").read_text())["defaults"] if isinstance(d, dict)
                for k, v in d.items()}
    default = None
    presets = [(None, None)] + [(group, p) for group in selected for p in sorted((conf / group).glob("*.yaml"))]
    changed = 0
    for group, path in presets:
        out = tmp_path / "params.yaml"
        compose([f"{group}={path.stem}"] if group else [], conf_dir=conf, output=out)
        p = yaml.safe_load(out.read_text())
        resolved = [(model.resolve(p[model.section]).model_dump(), p[model.section])
                    for model in (Filter, Dedup, Decontaminate, Tokenizer)]
        for got, given in resolved:
            assert isinstance(got, dict) and not _within(given, got), (group, path, _within(given, got))
        if group is None:
            default = p
            continue
        if path.stem == selected[group]:
            assert p == default, (group, path.stem)
            continue
        assert p != default, f"{group}={path.stem} composes to the default parameters"
        text = path.read_text()
        package = text.splitlines()[0].removeprefix("# @package ").strip()
        base = () if package == "_global_" else tuple(package.split("."))
        for key, value in _leaves({k: v for k, v in yaml.safe_load(text).items() if k != "defaults"}):
            node = p
            for k in base + key:
                node = node[k]
            assert node == value, (f"{group}={path.stem}", base + key, value, node)
        changed += 1
    assert changed >= 8  # source=crawl, three mixtures, four h100 scales


# ---------------------------------------------------------------------------------------------------------
# Nothing left alive after a kill


def _tree_pids(pid: int) -> set[int]:
    proc = psutil.Process(pid)
    return {pid} | {c.pid for c in proc.children(recursive=True)}


def _wait_gone(pids: set[int], seconds: float) -> set[int]:
    deadline = time.monotonic() + seconds
    alive = set(pids)
    while alive and time.monotonic() < deadline:
        alive = {p for p in alive if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE}
        time.sleep(0.1)
    return alive


def _wait_for(predicate, seconds: float, what: str):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _ingest_project(root: Path, shared_data: Path) -> Path:
    """A scratch project: params.yaml with real crawl files as the only source, two workers."""
    import yaml

    warc = shared_data / "warc"
    files = ["aut_warc_example.warc.gz", "aut_arc_example.arc.gz", "pywb_iana.warc.gz",
             "ukwa_govuk_BL-20140325121225068.warc.gz", "ukwa_wikipedia_mona_lisa.warc.gz",
             "dolma_sample-0000.warc.gz", "dolma_sample-0001.warc.gz", "resiliparse_warcfile.warc.gz"]
    sources = {"crawl": {"format": "warc", "bucket": "web", "licence": "test",
                         "paths": [str(warc / f) for f in files if not f.endswith(".arc.gz")]},
               "arc": {"format": "arc", "bucket": "web", "licence": "test",
                       "paths": [str(warc / "aut_arc_example.arc.gz")]}}
    root.mkdir(parents=True, exist_ok=True)
    (root / "params.yaml").write_text(yaml.safe_dump({"sources": sources, "ingest": {"extractor": "resiliparse"},
                                                      "execution": {"backend": "local", "workers": 2}}))
    return root


def _run_ingest_script(root: Path, **kw) -> subprocess.Popen:
    env = {**os.environ, "TOKENMILL_PROGRESS": "0"}
    return subprocess.Popen([PYTHON, str(PROJECT / "stages" / "ingest.py")], cwd=root, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw)


def test_sigkill_of_a_stage_leaves_no_worker_and_a_rerun_equals_a_clean_run(tmp_path, shared_data):
    clean = _ingest_project(tmp_path / "clean", shared_data)
    proc = _run_ingest_script(clean)
    assert proc.wait(timeout=240) == 0, proc.stderr.read().decode()

    killed = _ingest_project(tmp_path / "killed", shared_data)
    proc = _run_ingest_script(killed)
    # mid-run: both workers exist and the first shards are being written into the temporary directory
    _wait_for(lambda: len(psutil.Process(proc.pid).children()) >= 2 and list((killed / "data").glob(".ingest.tmp-*/*")),
              60, "two pool workers and a temporary output")
    pids = _tree_pids(proc.pid)
    assert len(pids) >= 3
    proc.kill()
    proc.wait()
    survivors = _wait_gone(pids, 5)
    assert not survivors, f"processes of the killed stage still alive 5 s later: {survivors}"
    assert not (killed / "data" / "ingest").exists(), "a killed stage must not leave a finished-looking output"

    rerun = _run_ingest_script(killed)
    assert rerun.wait(timeout=240) == 0, rerun.stderr.read().decode()
    assert list((killed / "data").glob(".ingest.*")) == [], "the rerun left the killed run's temporary directory"
    assert _tree(killed / "data" / "ingest") == _tree(clean / "data" / "ingest")


STAGE_SCRIPT = """
import sys, time
from tokenmill.execution import LocalExecutor

def slow(i):
    time.sleep(60)
    return i

if __name__ == "__main__":
    LocalExecutor(2).map(slow, list(range(8)), desc="slow")
"""


@pytest.mark.slow
def test_killing_dvc_ends_its_stage(tmp_path):
    import yaml

    (tmp_path / "slow_stage.py").write_text(textwrap.dedent(STAGE_SCRIPT))
    (tmp_path / "dvc.yaml").write_text(yaml.safe_dump(
        {"stages": {"slow": {"cmd": f"{PYTHON} slow_stage.py", "deps": ["slow_stage.py"]}}}))
    env = {**os.environ, "DVC_NO_ANALYTICS": "1", "TOKENMILL_PROGRESS": "0"}
    dvc = [PYTHON, "-m", "dvc"]
    subprocess.run(dvc + ["init", "--no-scm", "-q"], cwd=tmp_path, env=env, check=True)
    proc = subprocess.Popen(dvc + ["repro", "slow"], cwd=tmp_path, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        def stage_and_workers():
            procs = psutil.Process(proc.pid).children(recursive=True)
            # without $SHELL, DVC runs `/bin/sh -c cmd` and dash keeps the shell: it names the script too
            def is_stage(p):
                try:
                    return "slow_stage.py" in " ".join(p.cmdline()) and len(p.children()) >= 2
                except psutil.NoSuchProcess:  # dvc's short-lived helpers come and go meanwhile
                    return False

            stage = [p for p in procs if is_stage(p)]
            return procs if stage else None

        procs = _wait_for(stage_and_workers, 60, "dvc to start the stage and its two workers")
        pids = {p.pid for p in procs}
        proc.kill()  # dvc only: the stage and its workers are not signalled
        proc.wait()
        survivors = _wait_gone(pids, 5)
        assert not survivors, f"the stage outlived dvc: {[psutil.Process(p).cmdline() for p in survivors]}"
    finally:
        try:  # whatever failed above, leave nothing of this session running
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


# ---------------------------------------------------------------------------------------------------------
# Progress: long steps that are not a map over tasks say where they are


def test_sample_building_reports_its_phases(tmp_path, monkeypatch, capsys):
    from tokenmill.sample.build import build_sample

    monkeypatch.setenv("TOKENMILL_PROGRESS", "1")
    build_sample(tmp_path / "sample", n_docs=300, eval_items=20, planted_eval_items=4)
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("sample: ")]
    assert [line.split(" (")[0] for line in lines] == [
        "sample: held-out evaluation set", "sample: reference and code documents from the standard library",
        "sample: web crawl", "sample: writing code, reference, licence and evaluation files"]

    monkeypatch.setenv("TOKENMILL_PROGRESS", "0")  # what the test session sets: silent
    build_sample(tmp_path / "again", n_docs=300, eval_items=20, planted_eval_items=4)
    assert "sample: " not in capsys.readouterr().err
