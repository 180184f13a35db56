"""Bad inputs driven through DVC, as a user meets them (issue 24, item 4).

One small project is built once (a module fixture): a fresh copy of the project on the shipped crawl preset
(`source: crawl`) with a few real crawl files from ../shared/data under data/raw/, committed, and
`dvc repro ingest` (benchmarks, sample, check, ingest). Each case then breaks one thing — a parameter's type,
range, enumeration or name (params.yaml recomposed from conf/ with Hydra overrides, as `dvc exp run -S`
does), a benchmark file, a crawl file — runs only the stage concerned (`dvc repro -s check` for the
configuration and benchmark files; `dvc repro -s check ingest` for crawl files: the check runs first, as in
`dvc repro`, since ingest depends on its output) and asserts one of two outcomes:

- error: a non-zero exit, no traceback, and the stage's own lines ("check: ...", "ingest: ...", warnings
  aside) each naming the dotted key (or the file), so that a user reads what to fix in one line;
- recorded: the stage finishes and the bad file is in the ingest output as a read error (or a drop
  decision), every row of every other file exactly as in the last good run.

After each case the change is undone and `dvc repro --no-run-cache ingest` is run (the run cache off, so
what runs really runs): after an error the failed stage has nothing to redo (its outputs and dvc.lock entry
are the last good run's; a check that passed before ingest failed reruns, listing the files again); after a
recorded case it reruns check and ingest; either way every output hash in dvc.lock is then the last good
run's. A last test forces check and ingest once more and compares the hashes and the ingest tables again.

The bad configurations are those the `check` stage is meant to stop before ingest, for the whole composed
configuration (every section, not only the ones the sources touch). About a minute on 2 cores.
"""

from __future__ import annotations

import gzip
import json
import random
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pyarrow.parquet as pq
import pytest
import yaml

from conftest import missing_shared_data
from tiny_run import copy_project, small_benchmarks
from tiny_run import run as run_in  # dvc from this venv, a git identity, no progress bars
from tokenmill.config import compose

pytestmark = pytest.mark.slow  # drives dvc; one build for the module, each case a few seconds

# The good crawl of the last good run: two WARC files and a Dolma JSONL file, all read without a read error.
GOOD = {"warc": ("warcio_example.warc.gz", "webarchive-commons_IAH-urls-wget.warc.gz"),
        "cc_jsonl": ("dolma_provided_documents_000.jsonl.gz",)}
RAW_DIR = {"warc": "warc", "cc_jsonl": "jsonl"}  # shared/data/<kind> -> data/raw/<dir> (the crawl preset's globs)
# Appended to the copy's conf/config.yaml (`_self_` is last in its defaults list, so it wins over the source
# group): a small reference corpus and eval set from the sample stage (quality.positives.reference).
SMALL = "\nsample: {n_docs: 200, eval_items: 10}\n"
# One worker: a pool's start costs more than ingesting these few small files (outputs are identical on every
# executor, and execution is no stage's dependency).
WORKERS = ("\n  workers: 2 ", "\n  workers: 1 ")
TABLES = ("documents", "records", "decisions", "read_errors")
INGEST_ONLY = ("benchmarks", "sample", "check", "ingest")


# ---------------------------------------------------------------------------------------------------------
# The cases


Content = Callable[[Path], bytes]  # shared data dir -> the file's bytes


def shared(rel: str) -> Content:
    return lambda data: (data / rel).read_bytes()


def truncated(rel: str, fraction: float) -> Content:
    return lambda data: (data / rel).read_bytes()[: int((data / rel).stat().st_size * fraction)]


def constant(content: bytes) -> Content:
    return lambda data: content


def random_bytes(n: int, seed: int) -> Content:
    return lambda data: random.Random(seed).randbytes(n)


def jsonl(*records, gz: bool = False) -> Content:
    text = "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records).encode()
    return constant(gzip.compress(text, mtime=0) if gz else text)


@dataclass(frozen=True)
class Case:
    overrides: tuple[str, ...] = ()                  # Hydra overrides params.yaml is recomposed with
    files: dict[str, Content] = field(default_factory=dict)  # path in the project -> content, added for the case
    benchmark: dict | None = None                    # an entry appended to decontaminate.benchmarks
    hide: tuple[str, ...] = ()                       # globs of the good files moved out for the case
    stages: tuple[str, ...] = ("check",)             # what `dvc repro -s` runs
    expect: str = "error"                            # error | read_error | drop | read_or_named
    names: tuple[str, ...] = ()                      # what an error line must name (each of them)


def config(override: str, *names: str) -> Case:
    """A bad parameter: the error line names its full dotted key (or what `names` says)."""
    key = override.lstrip("+").split("=", 1)[0]
    return Case(overrides=(override,), names=names or (key,))


def bench_file(name: str, content: Content, fmt: str = "olmes", *names: str) -> Case:
    path = f"data/user/benchmarks/{name}"
    return Case(files={path: content}, benchmark={"name": "user_bench", "format": fmt, "path": path},
                names=names or (name,))


def crawl(expect: str, files: dict[str, Content], *names: str, hide: tuple[str, ...] = ()) -> Case:
    return Case(files=files, hide=hide, stages=("check", "ingest"), expect=expect, names=names)


OLMES_ITEM = {"id": "u1", "context": "Which gas do plants take in from the air to make their food?",
              "choices": [" carbon dioxide", " oxygen", " helium"], "gold": 0}
GSM8K_ITEM = {"question": "Ann has three apples and buys four more. How many apples does she have now?",
              "answer": "She has 3 + 4 = <<3+4=7>>7 apples.\n#### 7"}

# Bad parameters, in two batches of one `dvc repro -s check` each: the check prints every problem of the composed
# configuration at once, so each case's key must be named by its own line (and every line names one case). Two
# batches because some checks need the others' keys valid (train.global_batch cannot be "sixteen" and 0 at
# once; a model-level rule such as tokenizer.vocab_size's minimum or filter.language.allowed's labels is
# checked once the fields it reads are valid).
CONFIG_BATCHES = {
    "types-and-names": [
        # Types: a value the section's schema cannot take.
        config("train.global_batch=sixteen"),
        config("filter.gopher_quality.min_words=fifty"),
        config("dedup.near.num_perm=abc"),
        config("pii.keep_private_ip=maybe"),
        config("mixture.seed=1.5"),
        # Names: a misspelt key (a new key beside the right one), bucket or language label.
        config("+mixture.phases.anneal.weights.refrence=0.5"),
        config("+dedup.near.treshold=0.5"),
        config("+filter.buckets.code.langauge=false"),
        config("quality.cut_buckets=[webb]", "quality.cut_buckets", "webb"),
        config("tokenizer.model_type=bpee"),
        config("filter.language.allowed=[english]"),
    ],
    "ranges-and-enumerations": [
        # Ranges: the right type, a value that means nothing.
        config("dedup.near.threshold=1.5"),
        config("train.global_batch=0"),
        config("quality.keep.top_fraction=1.2"),
        config("mixture.heldout_fraction=-0.1"),
        config("tokenizer.vocab_size=10"),
        config("decontaminate.threshold=2"),
        config("filter.language.min_score=-1"),
        config("mixture.phases.bulk.weights.code=-0.5"),
        # Enumerations: a name outside the set the code knows.
        config("pii.phone_validation=sometimes"),
        config("quality.keep.mode=best"),
        config("ingest.extractor=lxml"),
    ],
}

CASES = {
    # A benchmark format the readers do not know.
    "name-benchmark-format": bench_file("gsm8k_test.jsonl", jsonl(GSM8K_ITEM), "gsm8kk",
                                        "decontaminate.benchmarks", "gsm8kk"),
    # Benchmark files: read by decontaminate and evaluate, far down the DAG; the check reads them first.
    "benchmark-not-json": bench_file("not_json.jsonl", constant(b"this is not JSON\n{\"id\": \"u2\"\n")),
    "benchmark-empty": bench_file("empty.jsonl", constant(b"")),
    "benchmark-missing-fields": bench_file(
        "missing_fields.jsonl", jsonl({"id": "u3", "question": "What is two plus two?", "answer": "four"})),
    # Crawl files.
    "crawl-uncompressed-warc-beside-good-ones": crawl(  # read, or named by the check: never silently ignored
        "read_or_named", {"data/raw/warc/warcio_example-iana.org-chunked.warc":
                          shared("warc/warcio_example-iana.org-chunked.warc")},
        "warcio_example-iana.org-chunked.warc"),
    "crawl-only-unreadable-files": crawl(  # not a run of 0 documents: one line naming the files
        "error", {"data/raw/warc/bad-1.warc.gz": random_bytes(4096, 1),
                  "data/raw/warc/bad-2.warc.gz": random_bytes(2048, 2)},
        "bad-1.warc.gz", "bad-2.warc.gz", hide=("data/raw/warc/*", "data/raw/jsonl/*")),
    "crawl-random-bytes-warc-gz": crawl(
        "read_error", {"data/raw/warc/zz-random.warc.gz": random_bytes(8192, 3)}, "zz-random.warc.gz"),
    "crawl-truncated-warc-gz": crawl(
        "read_error", {"data/raw/warc/zz-truncated.warc.gz": truncated("warc/resiliparse_warcfile.warc.gz", 0.5)},
        "zz-truncated.warc.gz"),
    "crawl-zero-byte-warc-gz": crawl(
        "read_error", {"data/raw/warc/zz-zero.warc.gz": constant(b"")}, "zz-zero.warc.gz"),
    "crawl-empty-jsonl-gz": crawl(
        "read_error", {"data/raw/jsonl/zz-empty.jsonl.gz": constant(gzip.compress(b"", mtime=0))},
        "zz-empty.jsonl.gz"),
    "crawl-jsonl-gz-with-a-broken-line": crawl(
        "drop", {"data/raw/jsonl/zz-broken-line.jsonl.gz": jsonl(
            {"id": "j1", "url": "http://example.invalid/1", "text": "A whole line of ordinary text, read and kept."},
            '{"id": "j2", "text": "a line cut in the middle',
            gz=True)}, "zz-broken-line.jsonl.gz"),
}


# ---------------------------------------------------------------------------------------------------------
# The built tree


@dataclass
class Tree:
    repo: Path
    data: Path                   # ../shared/data
    params: str                  # params.yaml of the last good run
    outs: dict[str, dict[str, str]]  # every output's hash in dvc.lock, by stage
    rows: dict[str, list[dict]]  # the ingest tables


def _run(args, repo: Path, check: bool = True):
    """run_in, with the copy's own src/ first on the path: the stages run the code DVC hashed (the venv's
    editable install points at this checkout, which may be edited while the module runs)."""
    return run_in(args, repo, check, PYTHONPATH=str(repo / "src"))


def _outs(repo: Path) -> dict[str, dict[str, str]]:
    """Every output's hash in dvc.lock, by stage and path."""
    lock = yaml.safe_load((repo / "dvc.lock").read_text())
    return {name: {o["path"]: o.get("md5") for o in st.get("outs", [])} for name, st in lock["stages"].items()}


def _rows(repo: Path) -> dict[str, list[dict]]:
    out = {}
    for table in TABLES:
        out[table] = [row for f in sorted((repo / "data" / "ingest" / table).glob("*.parquet"))
                      for row in pq.read_table(f).to_pylist()]
    return out


def _canon(rows) -> list[str]:
    return sorted(json.dumps(r, sort_keys=True, default=str) for r in rows)


@pytest.fixture(scope="module")
def tree(tmp_path_factory, shared_data) -> Tree:
    for kind, names in GOOD.items():
        for name in names:
            if not (shared_data / kind / name).is_file():
                missing_shared_data(str(shared_data / kind / name))
    repo = tmp_path_factory.mktemp("bad_input") / "repo"
    copy_project(repo)
    conf = repo / "conf" / "config.yaml"
    small_benchmarks(conf, items=20)
    text = conf.read_text()
    assert "\n  - source: sample\n" in text and WORKERS[0] in text
    text = text.replace("\n  - source: sample\n", "\n  - source: crawl\n", 1).replace(*WORKERS, 1)
    conf.write_text(text + SMALL)
    for kind, names in GOOD.items():  # copies in the temporary tree; git ignores data/raw/*
        (repo / "data" / "raw" / RAW_DIR[kind]).mkdir(parents=True, exist_ok=True)
        for name in names:
            shutil.copy(shared_data / kind / name, repo / "data" / "raw" / RAW_DIR[kind] / name)
    _run(["git", "init", "-q"], repo)
    _run(["dvc", "init", "-q"], repo)
    _run(["dvc", "config", "hydra.enabled", "True"], repo)
    compose([], conf_dir=repo / "conf", output=repo / "params.yaml")
    _run(["git", "add", "-A"], repo)
    _run(["git", "commit", "-qm", "crawl"], repo)
    proc = _run(["dvc", "repro", "ingest"], repo)
    assert all(f"Running stage '{s}'" in proc.stdout for s in INGEST_ONLY), proc.stdout
    rows = _rows(repo)
    assert rows["documents"] and not rows["read_errors"], rows["read_errors"]
    assert {r["file"] for r in rows["records"]} == {f"{RAW_DIR[k]}/{n}" for k, ns in GOOD.items() for n in ns}
    return Tree(repo, shared_data, (repo / "params.yaml").read_text(), _outs(repo), rows)


# ---------------------------------------------------------------------------------------------------------
# Applying a case and undoing it


def _hydra(value) -> str:
    """A Hydra override literal for a YAML value (strings quoted)."""
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{_hydra(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_hydra(v) for v in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, str):
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    return repr(value)


def _apply(tree: Tree, case: Case, stash: Path) -> Callable[[], None]:
    """Make the case's change in the tree; returns the function that undoes it."""
    repo = tree.repo
    hidden: list[tuple[Path, Path]] = []
    added: list[Path] = []

    def undo() -> None:
        for path in added:
            path.unlink(missing_ok=True)
        for original, moved in hidden:
            shutil.move(moved, original)
        (repo / "params.yaml").write_text(tree.params)

    try:
        for pattern in case.hide:
            for i, path in enumerate(sorted(repo.glob(pattern))):
                moved = stash / f"{i}-{path.name}"
                shutil.move(path, moved)
                hidden.append((path, moved))
        for rel, content in case.files.items():
            path = repo / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content(tree.data))
            added.append(path)
        overrides = list(case.overrides)
        if case.benchmark is not None:
            benchmarks = yaml.safe_load(tree.params)["decontaminate"]["benchmarks"]
            overrides.append(f"decontaminate.benchmarks={_hydra([*benchmarks, case.benchmark])}")
        if overrides:
            compose(overrides, conf_dir=repo / "conf", output=repo / "params.yaml")
    except BaseException:
        undo()
        raise
    return undo


def _lines(text: str, stages: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """(error lines, warning lines) the stages printed, as "<stage>: ..." lines."""
    errors, warnings = [], []
    for line in text.splitlines():
        for stage in stages:
            if line.startswith(f"{stage}: warning: "):
                warnings.append(line)
            elif line.startswith(f"{stage}: "):
                errors.append(line)
    return errors, warnings


def _shown(proc) -> str:
    return f"exit {proc.returncode}\n--- stdout\n{proc.stdout[-3000:]}\n--- stderr\n{proc.stderr[-3000:]}"


# ---------------------------------------------------------------------------------------------------------
# The tests


def _fail(what: str, proc) -> None:
    pytest.fail(f"{what}\n{_shown(proc)}", pytrace=False)


def _failed(proc) -> str:
    """The stage DVC says failed."""
    m = re.search(r"failed to reproduce '([^']+)'", proc.stderr)
    assert m, f"DVC names no failed stage\n{_shown(proc)}"
    return m.group(1)


def _assert_error(case: Case, proc, outs, tree: Tree) -> None:
    for stage in case.stages:
        if f"Stage '{stage}' didn't change, skipping" in proc.stdout:
            _fail(f"{stage} did not run: its dvc.yaml params/deps do not cover the change", proc)
    if "Traceback" in proc.stderr + proc.stdout:
        _fail("a traceback", proc)
    errors, _ = _lines(proc.stderr, case.stages)
    if proc.returncode == 0:
        _fail(f"exit 0: {' '.join(case.stages)} accepted it", proc)
    if not errors:
        _fail(f"exit {proc.returncode} without a '<stage>: ' error line", proc)
    if not any(all(name in line for name in case.names) for line in errors):
        _fail(f"no error line names {' and '.join(case.names)}: {errors[0]}", proc)
    others = [line for line in errors if not any(name in line for name in case.names)]
    if others:
        _fail(f"error lines that do not name {' or '.join(case.names)}: {others}", proc)
    # The stage that failed, and every stage after it or not run, kept the last good run's outputs (a stage
    # that succeeded before it, the check listing the bad files, may have recorded new ones).
    kept = [s for s in outs if s not in case.stages or case.stages.index(s) >= case.stages.index(_failed(proc))]
    if {s: outs[s] for s in kept} != {s: tree.outs[s] for s in kept}:
        _fail("dvc.lock's outputs changed although the run failed", proc)
    print("\n".join(errors))  # what the user read (pytest -rP shows it)


def _assert_recorded(case: Case, proc, outs, rows, tree: Tree) -> None:
    (rel,) = case.files
    name = Path(rel).name
    errors, warnings = _lines(proc.stderr, case.stages)
    if "Traceback" in proc.stderr + proc.stdout:
        _fail("a traceback", proc)
    if case.expect == "read_or_named":
        named = [line for line in errors + warnings if name in line]
        if proc.returncode != 0:  # the check refused it, naming it
            if not named:
                _fail(f"exit {proc.returncode}, no line names {name}", proc)
            if outs != tree.outs:
                _fail("dvc.lock's outputs changed although the run failed", proc)
            return
        files = {r["file"] for t in ("records", "read_errors") for r in rows[t]}
        if not named and not any(f.endswith("/" + name) for f in files):
            _fail(f"{name} was neither read nor named by the check: silently ignored", proc)
    elif proc.returncode != 0:
        _fail(f"exit {proc.returncode}: {errors[0] if errors else 'no error line'}", proc)
    bad = rel.removeprefix("data/raw/")  # files are recorded relative to the sources' root, data/raw
    bad_ids = {r["doc_id"] for r in rows["records"] if r["file"] == bad}
    if case.expect == "read_error" and not [e for e in rows["read_errors"] if e["file"] == bad]:
        _fail(f"no read error recorded for {bad}", proc)
    if case.expect == "drop" and not [d for d in rows["decisions"] if d["doc_id"] in bad_ids and d["action"] == "drop"]:
        _fail(f"no drop decision recorded for {bad}", proc)
    # Nothing else changed: every row of every other file is the last good run's; stages not run kept theirs.
    for table in ("documents", "records", "read_errors"):
        assert _canon(r for r in rows[table] if r["file"] != bad) == _canon(tree.rows[table]), table
    assert _canon(d for d in rows["decisions"] if d["doc_id"] not in bad_ids) == _canon(tree.rows["decisions"])
    assert {s: o for s, o in outs.items() if s not in case.stages} == \
        {s: o for s, o in tree.outs.items() if s not in case.stages}


@pytest.mark.parametrize("batch", list(CONFIG_BATCHES), ids=list(CONFIG_BATCHES))
def test_bad_configuration_is_one_line_per_key_all_at_once(tree: Tree, batch: str, tmp_path):
    repo, cases = tree.repo, CONFIG_BATCHES[batch]
    undo = _apply(tree, Case(overrides=tuple(o for c in cases for o in c.overrides)), tmp_path)
    try:
        proc = _run(["dvc", "repro", "-s", "check"], repo, check=False)
        outs = _outs(repo)
    finally:
        undo()
        redo = _run(["dvc", "repro", "--no-run-cache", "ingest"], repo, check=False)
    if "Stage 'check' didn't change, skipping" in proc.stdout:
        _fail("check did not run: its dvc.yaml params do not cover the change", proc)
    if "Traceback" in proc.stderr + proc.stdout:
        _fail("a traceback", proc)
    if proc.returncode == 0:
        _fail("exit 0: check accepted it", proc)
    errors, _ = _lines(proc.stderr, ("check",))
    unnamed = [c.overrides[0] for c in cases if not any(all(n in line for n in c.names) for line in errors)]
    if unnamed:
        _fail(f"no error line names the key of {unnamed}", proc)
    stray = [line for line in errors if not any(all(n in line for n in c.names) for c in cases)]
    if stray:
        _fail(f"error lines that name none of the changed keys: {stray}", proc)
    if outs != tree.outs:
        _fail("dvc.lock's outputs changed although the check failed", proc)
    if redo.returncode != 0 or _outs(repo) != tree.outs or "Running stage 'check'" in redo.stdout:
        _fail("undoing the change did not leave the last good run in place", redo)
    print("\n".join(errors))  # what the user read (pytest -rP shows it)


@pytest.mark.parametrize("case", list(CASES.values()), ids=list(CASES))
def test_bad_input(tree: Tree, case: Case, tmp_path):
    repo = tree.repo
    undo = _apply(tree, case, tmp_path)
    try:
        proc = _run(["dvc", "repro", "-s", *case.stages], repo, check=False)
        outs = _outs(repo)
        rows = _rows(repo) if case.expect != "error" and proc.returncode == 0 else None
    finally:
        undo()
        # The change undone: a rerun (no run cache: really run) brings back the last good run's hashes.
        redo = _run(["dvc", "repro", "--no-run-cache", "ingest"], repo, check=False)

    if case.expect == "error":
        _assert_error(case, proc, outs, tree)
    else:
        _assert_recorded(case, proc, outs, rows, tree)
    if redo.returncode != 0 or _outs(repo) != tree.outs:
        _fail("the rerun after undoing the change did not reproduce the last good run's hashes", redo)
    if case.expect == "error" and f"Running stage '{_failed(proc)}'" in redo.stdout:
        _fail("the failed run changed something the rerun after undoing it had to redo", redo)


def test_a_forced_rerun_after_all_cases_reproduces_the_last_good_run(tree: Tree):
    repo = tree.repo
    assert (repo / "params.yaml").read_text() == tree.params
    proc = _run(["dvc", "repro", "--force", "-s", "check", "ingest"], repo)
    assert "Running stage 'check'" in proc.stdout and "Running stage 'ingest'" in proc.stdout
    assert _outs(repo) == tree.outs
    assert _canon(r for t in TABLES for r in _rows(repo)[t]) == _canon(r for t in TABLES for r in tree.rows[t])
    status = _run(["dvc", "status", *INGEST_ONLY], repo)
    assert "up to date" in status.stdout, status.stdout
