"""What every stage does around its real work: read params, write outputs atomically, write a manifest.

A stage script owns its run: `with StageRun(name, out_dir, params) as run: run.record(work(inputs, params,
run.tmp))`. The library function doing the work takes its inputs, its parameters and an output directory and
returns a StageResult (counts per decision, input digests, manifest fields, metrics); it never opens a run.
On success the temporary output directory is renamed into place and the manifest and metrics are written; on
failure nothing at the final path changes, so a killed stage can never be mistaken for a finished one
(contract 6).
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import platform
import re
import shutil
import sys
import time
import traceback
from collections import Counter
from importlib import metadata
from pathlib import Path
from typing import Any, Mapping

import yaml

from tokenmill.execution.lifetime import end_with_launcher
from tokenmill.section import ParamError  # noqa: F401  (a stage's error for a bad parameter, defined with the schemas)

PACKAGE_DIR = Path(__file__).resolve().parent
# Every stage writes Parquet through pyarrow; each stage names the other libraries that shape its output.
BASE_LIBRARIES = ("pyarrow",)


def load_params(*keys: str, path: str | Path = "params.yaml") -> dict:
    """The parameters a stage declared, and only those: `load_params("mixture", "train.seq_len")`.

    Keys are dotted paths, as in dvc.yaml's `params`; the result keeps the nesting
    ({"mixture": {...}, "train": {"seq_len": 256}}). A stage cannot read a key it did not ask for, and the
    dependency test checks that what it asks for is exactly its dvc.yaml `params` (plus `execution`, which
    never changes an output). With no keys, everything (tests and tools).
    """
    with open(path) as f:
        everything = yaml.safe_load(f) or {}
    if not keys:
        return everything
    from tokenmill import trace  # the recorder, imported only while tracing (tests/dvc_deps.py leaves it undeclared)

    out: dict = {}
    for key in keys:
        node, parts = everything, key.split(".")
        for i, part in enumerate(parts):
            if not isinstance(node, Mapping) or part not in node:
                raise KeyError(f"{path} has no parameter {'.'.join(parts[:i + 1])!r} (asked for {key!r}); "
                               f"recompose it from conf/ with `make params`")
            node = node[part]
        target = out
        for part in parts[:-1]:
            target = target.setdefault(part, {})
        target[parts[-1]] = copy.deepcopy(node)
        trace.param(key)
    return out


def sha1_file(path: str | Path, block: int = 1 << 20) -> str:
    h = hashlib.sha1()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(block), b""):
            h.update(chunk)
    return h.hexdigest()


def tree_digest(root: str | Path) -> str:
    """Content hash of a directory: sorted relative paths and their file hashes."""
    root = Path(root)
    h = hashlib.sha1()
    for p in sorted(q for q in root.rglob("*") if q.is_file() and q.name != "manifest.json"):
        h.update(f"{p.relative_to(root)}\x00{sha1_file(p)}\n".encode())
    return h.hexdigest()


def read_manifest(stage_dir: str | Path) -> dict:
    path = Path(stage_dir) / "manifest.json"
    if not path.exists():
        raise FileNotFoundError(f"{stage_dir} has no manifest.json: run that stage first")
    return json.loads(path.read_text())


def input_id(stage_dir: str | Path) -> str:
    """How a stage names an input directory: the content digest its producer recorded, if one did.

    A stage computes the digest of what it wrote once, when it finishes (contract 5), so consumers do not
    read every upstream shard again. Identical content gives the identical id whatever run produced it, so
    a forced rerun of an upstream stage changes nothing below it. Directories made by hand or imported have
    no manifest and are hashed here.
    """
    path = Path(stage_dir) / "manifest.json"
    if path.exists() and "digest" in (m := read_manifest(stage_dir)):
        return "sha1:" + m["digest"]
    return "sha1:" + tree_digest(stage_dir)


def stage_chain(data_root: str | Path, last: str) -> list[str]:
    """The document stages that led to `last`, oldest first, from the manifests' input_stage links.

    dvc.yaml states the pipeline order once (each stage script is given its input stage in its `cmd`); every
    consumer that needs the order (lineage, audit) follows these links instead of keeping its own list.
    """
    chain = [last]
    while (up := read_manifest(Path(data_root) / chain[-1]).get("input_stage")) is not None:
        if up in chain:
            raise ValueError(f"stage input links form a cycle: {' <- '.join(chain + [up])}")
        chain.append(up)
    return chain[::-1]


def code_files() -> list[Path]:
    """The stage's own code: the script being run and every tokenmill module it has imported.

    Worker processes import processors by name; stages import those modules in the parent too, so this list
    covers them. A docstring edit elsewhere in the package does not change this stage's run id.
    """
    files = {Path(m.__file__).resolve() for name, m in list(sys.modules.items())
             if (name == "tokenmill" or name.startswith("tokenmill.")) and getattr(m, "__file__", None)}
    main = sys.modules.get("__main__")
    if main is not None and getattr(main, "__file__", None) and Path(main.__file__).suffix == ".py":
        files.add(Path(main.__file__).resolve())
    return sorted(files)


def code_version(files: list[Path] | None = None) -> str:
    h = hashlib.sha1()
    for p in files if files is not None else code_files():
        name = p.relative_to(PACKAGE_DIR) if p.is_relative_to(PACKAGE_DIR) else Path(p.name)
        h.update(f"{name}\x00".encode() + p.read_bytes())
    return h.hexdigest()[:16]


def library_versions(names: tuple[str, ...] | list[str] = ()) -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in (*BASE_LIBRARIES, *names):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return dict(sorted(out.items()))


def run_id(params: Mapping[str, Any], input_hashes: Mapping[str, str], code: str,
           versions: Mapping[str, str] | None = None) -> str:
    blob = json.dumps({"params": params, "inputs": dict(sorted(input_hashes.items())), "code": code,
                       "versions": dict(versions or {})}, sort_keys=True, default=str)
    return hashlib.sha1(blob.encode()).hexdigest()[:16]


def write_json(path: str | Path, obj: Any) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary(path)
    tmp.write_text(json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")
    os.replace(tmp, path)


def script(main) -> int:
    """Run a stage script's main(*argv): a user's error is one line on stderr, `<stage>: <message>`, and exit
    code 2, not a traceback; a bug is Python's traceback and exit code 1.

    A user's error is what a bad parameter, a bad or missing input or a failed task raises:
    - any exception of a class tokenmill defines (ParamError, TaskError, TrainConfigError, ForecastError,
      CompareError, SourceError, MixtureError, LaunchError, ...): the project raises those only with a message
      meant for the user;
    - FileNotFoundError (a missing input) and KeyError (load_params: a parameter params.yaml lacks);
    - a plain ValueError raised by tokenmill's own code (its innermost frame is in the package or the stage
      script): `raise ValueError("quality: need positives and negatives ...")`.
    Anything else (a TypeError, an AttributeError, a ValueError from inside a library) is a bug and keeps its
    traceback. TOKENMILL_DEBUG=1 shows the traceback of a user's error too, above its one line.
    """
    try:
        return main(*sys.argv[1:]) or 0
    except Exception as exc:
        tokenmill_class = any(c.__module__ == "tokenmill" or c.__module__.startswith("tokenmill.")
                              for c in type(exc).__mro__)
        tb = exc.__traceback__
        while tb is not None and tb.tb_next is not None:
            tb = tb.tb_next
        raised_here = tb is not None and (
            Path(tb.tb_frame.f_code.co_filename).resolve().is_relative_to(PACKAGE_DIR)
            or Path(tb.tb_frame.f_code.co_filename).resolve() == Path(sys.argv[0]).resolve())
        if not (tokenmill_class or isinstance(exc, (FileNotFoundError, KeyError))
                or (isinstance(exc, ValueError) and raised_here)):
            raise
        if os.environ.get("TOKENMILL_DEBUG", "0") not in ("", "0"):

            traceback.print_exc()
        stage = os.environ.get("DVC_STAGE") or Path(sys.argv[0]).stem
        message = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        message = " ".join(line.strip() for line in str(message).splitlines() if line.strip()) or type(exc).__name__
        # One prefix: messages that already name the stage ("quality: need positives ...") keep theirs.
        print(message if message.startswith(f"{stage}: ") else f"{stage}: {message}", file=sys.stderr)
        return 2


def write_plot_rows(path: str | Path, rows: list[dict]) -> None:
    """A DVC plot file: a JSON list of flat rows (dvc.yaml `plots` names the x and y columns)."""
    write_json(path, rows)


# Temporaries: `.<name>.tmp-<pid>@<host>` (being written) and `.<name>.old-<pid>@<host>` (an output being
# swapped out), beside the path they become. The pid and host say whose they are, so any later run can tell a
# killed run's leftovers from a live run's work. Names without a host (older runs) count as this host's.
HOST = re.sub(r"[^A-Za-z0-9.-]", "_", platform.node())[:64] or "localhost"
TEMPORARY = re.compile(r"^\.(?P<name>.+)\.(?P<kind>tmp|old)-(?P<pid>[0-9]+)(?:@(?P<host>[A-Za-z0-9._-]+))?$")
# The trees stages write, relative to the workspace (the folder of dvc.yaml). data/raw and data/user hold the
# user's own files: never swept, whatever their names.
OUTPUT_ROOTS = ("data", "lineage", "reports", "metrics", "runs", "plots", "dvclive")
USER_DIRS = ("data/raw", "data/user")


def temporary(path: str | Path, kind: str = "tmp") -> Path:
    """This process's temporary (kind "tmp") or swapped-out (kind "old") name for `path`, beside it."""
    path = Path(path)
    return path.with_name(f".{path.name}.{kind}-{os.getpid()}@{HOST}")


def swap_into_place(tmp: str | Path, out_dir: str | Path) -> None:
    """Replace out_dir by the finished tmp: the old output disappears only once the new one is complete (a
    reader sees the old tree or the new one, never a half-written one)."""
    tmp, out_dir = Path(tmp), Path(out_dir)
    old = temporary(out_dir, "old")
    if out_dir.exists():
        os.replace(out_dir, old)
    os.replace(tmp, out_dir)
    shutil.rmtree(old, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _stale(name: str) -> bool:
    """A temporary left by a run that is gone: its pid is this host's and no process has it. A live pid is
    never stale, even one reused by another program since (a leftover kept is harmless; a live run's work
    removed is not), nor is another host's (a workspace on a shared file system)."""
    m = TEMPORARY.match(name)
    return bool(m) and m["host"] in (None, HOST) and not _alive(int(m["pid"]))


def _remove(p: Path) -> None:
    if p.is_dir() and not p.is_symlink():
        shutil.rmtree(p, ignore_errors=True)
    else:
        p.unlink(missing_ok=True)


def remove_stale(path: Path) -> list[Path]:
    """Delete leftovers of killed runs beside `path`: its temporary and swapped-out names of dead pids."""
    path = Path(path)
    removed = []
    for p in path.parent.glob(f".{path.name}.*-*"):
        m = TEMPORARY.match(p.name)
        if m and m["name"] == path.name and _stale(p.name):
            _remove(p)
            removed.append(p)
    return removed


def workspace_of(path: str | Path) -> Path | None:
    """The project a stage output belongs to: the nearest folder at or above it holding dvc.yaml."""
    path = Path(path).resolve()
    return next((d for d in (path, *path.parents) if (d / "dvc.yaml").is_file()), None)


def sweep_stale(workspace: str | Path) -> list[Path]:
    """Delete every leftover of a killed run in the workspace's output trees (OUTPUT_ROOTS, at any depth, and
    the workspace's own top level, where `reports` and `lineage` swap): temporaries of dead pids of this host.

    A stage removes its own leftovers when it runs again (remove_stale), but a killed stage whose previous
    output was intact is never rerun: `dvc repro` has nothing to do for it. So every stage, when it starts,
    sweeps them all: a partial copy of a corpus does not stay until the stage that left it happens to run.
    Live runs' temporaries (this one's, its workers', a parallel run's) and the user's data/raw, data/user are
    never touched; nothing descends into a temporary, and symbolic links are not followed.
    """
    workspace = Path(workspace)
    skip = {workspace / d for d in USER_DIRS}
    removed: list[Path] = []
    for entry in workspace.iterdir():
        if _stale(entry.name):
            _remove(entry)
            removed.append(entry)
    for root in OUTPUT_ROOTS:
        top = workspace / root
        if not top.is_dir() or top.is_symlink():
            continue
        for folder, dirs, files in os.walk(top):
            here = Path(folder)
            for name in [*dirs, *files]:
                if _stale(name):
                    _remove(here / name)
                    removed.append(here / name)
            # Not into temporaries (a live one is its run's; a dead one is gone) nor the user's files.
            dirs[:] = [d for d in dirs if not TEMPORARY.match(d) and here / d not in skip]
    return removed


def clean_leftovers(stage: str, out_dir: str | Path) -> list[Path]:
    """At a stage's start: every killed run's leftovers in its workspace (sweep_stale), or beside its output
    when it writes outside any workspace (tests, tools). One line on stderr names what went."""
    from tokenmill import trace  # the recorder, imported only while tracing (tests/dvc_deps.py leaves it undeclared)

    with trace.unrecorded():  # names of leftovers only: no dependency of the stage (tests/dvc_deps.py)
        workspace = workspace_of(Path(out_dir).parent)
        removed = remove_stale(Path(out_dir)) + (sweep_stale(workspace) if workspace else [])
    if removed:
        shown = ", ".join(str(p.relative_to(workspace) if workspace and p.is_relative_to(workspace) else p)
                          for p in removed[:3])
        more = f" and {len(removed) - 3} more" if len(removed) > 3 else ""
        print(f"{stage}: removed what killed runs left: {shown}{more}", file=sys.stderr)
    return removed


def _split_timing(obj: Any, timing: dict, path: str = "") -> Any:
    """Move every `seconds`/`*_seconds` entry out of a manifest field: timings are not content."""
    if not isinstance(obj, dict):
        return obj
    out = {}
    for k, v in obj.items():
        if k == "seconds" or str(k).endswith("_seconds"):
            timing[f"{path}{k}"] = v
        else:
            out[k] = _split_timing(v, timing, f"{path}{k}.")
    return out


def run_record(stage: str, params: Mapping[str, Any], inputs: Mapping[str, str], libraries: tuple[str, ...] | list[str],
               started: float, *, input_stage: str | None, digest: str, counts: Mapping, timing: Mapping,
               **more: Any) -> dict:
    """The run record, runs/<stage>.json, of every stage (the training stage's too): the run id (parameters,
    inputs' digests, the stage's own code, the versions of the libraries that shape its output), the code
    files, seconds since `started` (time.perf_counter), argv, host and time; `more` adds stage-specific fields."""
    files = code_files()
    versions = library_versions(libraries)
    code = code_version(files)
    return {
        "stage": stage,
        "run_id": run_id(params, inputs, code, versions),
        "input_stage": input_stage,
        "params": dict(params),
        "inputs": dict(sorted(inputs.items())),
        "code_version": code,
        "code_files": [str(p.relative_to(PACKAGE_DIR.parent)) if p.is_relative_to(PACKAGE_DIR.parent) else p.name
                       for p in files],
        "versions": versions,
        "digest": digest,
        "counts": dict(counts),
        "seconds": round(time.perf_counter() - started, 3),
        "timing": dict(timing),
        "argv": sys.argv,
        **more,
        "host": platform.node(),
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


class StageResult:
    """What a stage's work returns to the StageRun that records it: every field is optional.

    input_hashes: input name -> content id (they enter the run id); reasons: (action, reason) -> documents, for
    the stages that decide per document (add_counts); extra: more manifest fields, deterministic content only
    (any `seconds` in them move to the run record); timing: more run-record fields (seconds, throughput);
    metrics: more deterministic metrics beside the document counts.
    """

    def __init__(self) -> None:
        self.input_hashes: dict[str, str] = {}
        self.counts_in = 0
        self.reasons: Counter[tuple[str, str]] = Counter()
        self.extra: dict[str, Any] = {}
        self.timing: dict[str, Any] = {}
        self.metrics: dict[str, Any] = {}

    def add_counts(self, counts: Mapping[str, int]) -> None:
        """counts: {"action:reason": n}, as returned by per-shard workers."""
        for key, n in counts.items():
            action, reason = key.split(":", 1)
            self.reasons[(action, reason)] += n
            self.counts_in += n

    def record(self, other: "StageResult") -> "StageResult":
        """Add another result's inputs, decisions and fields to this one (a stage whose work has parts)."""
        self.input_hashes.update(other.input_hashes)
        self.reasons.update(other.reasons)
        self.counts_in += other.counts_in
        self.extra.update(other.extra)
        self.timing.update(other.timing)
        self.metrics.update(other.metrics)
        return self


class StageRun(StageResult):
    """Context for one stage execution: a temporary output dir, counters, the manifest and the run record.

    Two records come out of a run (contract 5):
    - `<out>/manifest.json`, inside the DVC output: only content — stage, input stage, counts, a digest of
      the files beside it and what consumers read (vocab_size, cut-offs, ...). Identical data gives an
      identical manifest, so `dvc repro -f` of a stage that reproduces its output leaves every hash as it was
      and DVC skips everything below it.
    - `runs/<stage>.json`, outside every DVC output: the run id (parameters, inputs' digests, the stage's own
      code, the versions of the libraries that shape its output), seconds, argv and host. The audit
      connection shows these as the `stage_runs` table.
    """

    def __init__(self, stage: str, out_dir: str | Path, params: Mapping[str, Any],
                 input_stage: str | None = None, metrics_dir: str | Path = "metrics",
                 runs_dir: str | Path = "runs", libraries: tuple[str, ...] | list[str] = ()):
        self.stage = stage
        self.out_dir = Path(out_dir)
        self.params = dict(params)
        self.input_stage = input_stage  # whose kept documents are this stage's input (for audit verify)
        self.metrics_dir = Path(metrics_dir)
        self.runs_dir = Path(runs_dir)
        self.libraries = tuple(libraries)  # beyond pyarrow, which writes every stage's Parquet
        self.tmp = temporary(self.out_dir)  # where the work writes; renamed to out_dir when it succeeds
        super().__init__()  # what the work reports: run.record(result), or run.metrics[...] = ... directly

    def __enter__(self) -> "StageRun":

        end_with_launcher(self.stage)  # under dvc: this stage ends when the dvc that started it does
        self.started = time.perf_counter()
        self.out_dir.parent.mkdir(parents=True, exist_ok=True)
        clean_leftovers(self.stage, self.out_dir)  # killed runs' temporary and half-swapped directories
        shutil.rmtree(self.tmp, ignore_errors=True)
        self.tmp.mkdir(parents=True)
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        failed = self.runs_dir / "failed" / f"{self.stage}.json"  # the last failure, until the stage succeeds
        if exc_type is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)
            # What an OpenLineage FAIL event reports (tokenmill.openlineage): the error, when and where it stopped.
            # Not among runs/*.json: a failed run produced nothing, so it is no row of the audit's stage_runs.
            write_json(failed, {"stage": self.stage, "params": self.params, "input_stage": self.input_stage,
                                "error_type": exc_type.__name__, "error": " ".join(str(exc).split())[:2000],
                                "seconds": round(time.perf_counter() - self.started, 3), "argv": sys.argv,
                                "host": platform.node(),
                                "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
            return False
        failed.unlink(missing_ok=True)
        by_action = Counter()
        for (action, _), n in self.reasons.items():
            by_action[action] += n
        counts = {
            "in": self.counts_in,
            "out": by_action["keep"] + by_action["modify"],
            "by_action": dict(sorted(by_action.items())),
            "by_reason": {f"{a}:{r}": n for (a, r), n in sorted(self.reasons.items())},
        }
        timing = dict(self.timing)
        extra = _split_timing(self.extra, timing)
        digest = tree_digest(self.tmp)
        manifest = {"stage": self.stage, "input_stage": self.input_stage, "counts": counts, "digest": digest,
                    **extra}
        write_json(self.tmp / "manifest.json", manifest)
        swap_into_place(self.tmp, self.out_dir)

        record = run_record(self.stage, self.params, self.input_hashes, self.libraries, self.started,
                            input_stage=self.input_stage, digest=digest, counts=counts, timing=timing)
        write_json(self.runs_dir / f"{self.stage}.json", record)
        # Metrics hold only deterministic numbers so `dvc metrics diff` compares like with like.
        documents = {"documents": counts} if self.reasons else {}  # only stages that decide per document
        write_json(self.metrics_dir / f"{self.stage}.json", {**documents, **self.metrics})
        self.manifest = {**manifest, **record}
        return False
