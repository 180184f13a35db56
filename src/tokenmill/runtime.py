"""What every stage does around its real work: read params, write outputs atomically, write a manifest.

A stage script is `with StageRun(name, out_dir, params) as run: ...; run.count(...)`. On success the
temporary output directory is renamed into place and the manifest and metrics are written; on failure
nothing at the final path changes, so a killed stage can never be mistaken for a finished one (contract 6).
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import platform
import shutil
import sys
import time
from collections import Counter
from importlib import metadata
from pathlib import Path
from typing import Any, Mapping

import yaml

PACKAGE_DIR = Path(__file__).resolve().parent
KEY_LIBRARIES = ("tokenmill", "pyarrow", "duckdb", "warcio", "resiliparse", "trafilatura", "dvc", "torch")


def load_params(path: str | Path = "params.yaml") -> dict:
    with open(path) as f:
        return yaml.safe_load(f) or {}


def merge_params(stage: str, defaults: Mapping[str, Any], params: Mapping[str, Any] | None) -> dict:
    """`params` over `defaults`, descending into dict-valued defaults one level.

    An unknown key is an error naming it: a misspelt threshold must never leave the default silently in force.
    """
    out = copy.deepcopy(dict(defaults))
    for key, value in (params or {}).items():
        if key not in out:
            raise ValueError(f"{stage}: unknown parameter {key!r} (known: {', '.join(sorted(out))})")
        if isinstance(out[key], dict) and isinstance(value, Mapping):
            unknown = set(value) - set(out[key])
            if unknown and out[key]:
                raise ValueError(f"{stage}.{key}: unknown parameters {sorted(unknown)} (known: {sorted(out[key])})")
            out[key].update(copy.deepcopy(dict(value)))
        else:
            out[key] = copy.deepcopy(value)
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
    """How a stage names an input directory: the run id of the stage that wrote it, if one did.

    The run id already hashes the producer's parameters, inputs and code, and outputs are a deterministic
    function of those (contract 6), so it identifies the content without reading it all again. Directories
    made by hand or imported have no manifest and are named by their content hash.
    """
    if (Path(stage_dir) / "manifest.json").exists():
        return "run:" + read_manifest(stage_dir)["run_id"]
    return "sha1:" + tree_digest(stage_dir)


def code_version() -> str:
    """Hash of tokenmill's own source: a code change yields a new run id even without a git commit."""
    h = hashlib.sha1()
    for p in sorted(PACKAGE_DIR.rglob("*.py")):
        h.update(f"{p.relative_to(PACKAGE_DIR)}\x00".encode() + p.read_bytes())
    return h.hexdigest()[:16]


def library_versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in KEY_LIBRARIES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def run_id(params: Mapping[str, Any], input_hashes: Mapping[str, str], code: str) -> str:
    blob = json.dumps({"params": params, "inputs": dict(sorted(input_hashes.items())), "code": code},
                      sort_keys=True, default=str)
    return hashlib.sha1(blob.encode()).hexdigest()[:16]


def write_json(path: str | Path, obj: Any) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")
    os.replace(tmp, path)


class StageRun:
    """Context for one stage execution: a temporary output dir, counters, and the manifest."""

    def __init__(self, stage: str, out_dir: str | Path, params: Mapping[str, Any],
                 input_stage: str | None = None, metrics_dir: str | Path = "metrics"):
        self.stage = stage
        self.out_dir = Path(out_dir)
        self.params = dict(params)
        self.input_stage = input_stage  # whose kept documents are this stage's input (for audit verify)
        self.metrics_dir = Path(metrics_dir)
        self.tmp = self.out_dir.with_name(f".{self.out_dir.name}.tmp-{os.getpid()}")
        self.input_hashes: dict[str, str] = {}
        self.counts_in = 0
        self.reasons: Counter[tuple[str, str]] = Counter()  # (action, reason) -> documents
        self.extra: dict[str, Any] = {}  # more manifest fields
        self.metrics: dict[str, Any] = {}  # more deterministic metrics beside the document counts

    def __enter__(self) -> "StageRun":
        self.started = time.perf_counter()
        shutil.rmtree(self.tmp, ignore_errors=True)
        self.tmp.mkdir(parents=True)
        return self

    def add_counts(self, counts: Mapping[str, int]) -> None:
        """counts: {"action:reason": n}, as returned by per-shard workers."""
        for key, n in counts.items():
            action, reason = key.split(":", 1)
            self.reasons[(action, reason)] += n
            self.counts_in += n

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc_type is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)
            return False
        seconds = round(time.perf_counter() - self.started, 3)
        code = code_version()
        rid = run_id(self.params, self.input_hashes, code)
        by_action = Counter()
        for (action, _), n in self.reasons.items():
            by_action[action] += n
        counts = {
            "in": self.counts_in,
            "out": by_action["keep"] + by_action["modify"],
            "by_action": dict(sorted(by_action.items())),
            "by_reason": {f"{a}:{r}": n for (a, r), n in sorted(self.reasons.items())},
        }
        manifest = {
            "stage": self.stage,
            "run_id": rid,
            "input_stage": self.input_stage,
            "params": self.params,
            "inputs": dict(sorted(self.input_hashes.items())),
            "code_version": code,
            "counts": counts,
            "seconds": seconds,
            "versions": library_versions(),
            "argv": sys.argv,
            **self.extra,
        }
        write_json(self.tmp / "manifest.json", manifest)
        # Swap into place: the old output disappears only once the new one is complete.
        old = self.out_dir.with_name(f".{self.out_dir.name}.old-{os.getpid()}")
        if self.out_dir.exists():
            os.replace(self.out_dir, old)
        os.replace(self.tmp, self.out_dir)
        shutil.rmtree(old, ignore_errors=True)
        # Metrics hold only deterministic numbers so `dvc metrics diff` compares like with like.
        documents = {"documents": counts} if self.reasons else {}  # only stages that decide per document
        write_json(self.metrics_dir / f"{self.stage}.json", {**documents, **self.metrics})
        self.manifest = manifest
        return False
