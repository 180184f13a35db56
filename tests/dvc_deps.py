"""Compare what each DVC stage really touched (tokenmill.trace) with what dvc.yaml declares.

Used by the end-to-end test, which runs the demo DAG with TOKENMILL_TRACE_DIR set. A stage must declare:
- every tokenmill module it (or its pool workers) imported, as a dep file or a dep directory above it;
- every project path it opened for reading or listed, except its own outputs, params.yaml (declared as
  params instead), and the run-record side (runs/, metrics/, plots/);
- exactly the parameter keys it asked `load_params` for, as its `params` (`execution` excepted: it never
  changes an output).
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

SIDE = ("runs", "metrics", "plots", ".trace", ".dvc", ".git", ".venv")
# Read by DVCLive, which looks up the DVC repository it logs in; they shape no output.
REPO_FILES = {"dvc.yaml", "dvc.lock", ".gitignore", ".dvcignore"}
UNDECLARED_MODULES = {"tokenmill.trace"}  # the recorder itself, imported only while tracing
UNDECLARED_PARAMS = {"execution"}


def read_traces(trace_dir: Path) -> dict[str, dict[str, set[str]]]:
    """{stage: {kind: {values}}} over every process's trace file."""
    out: dict[str, dict[str, set[str]]] = {}
    for path in sorted(Path(trace_dir).glob("*.jsonl")):
        for line in path.read_text().splitlines():
            e = json.loads(line)
            if e["stage"]:
                out.setdefault(e["stage"], {}).setdefault(e["kind"], set()).add(e["value"])
    return out


def _entries(items) -> list[str]:
    """dvc.yaml lists hold strings or {path: options} mappings."""
    return [next(iter(i)) if isinstance(i, dict) else i for i in items or []]


def _temporary_of(path: Path, out: Path) -> bool:
    """path is inside (or is) a temporary sibling of `out`: <parent>/.<name>.tmp-<pid>/..."""
    if not path.is_relative_to(out.parent) or path == out.parent:
        return False
    return path.relative_to(out.parent).parts[0].startswith(f".{out.name}.")


def _module_file(name: str) -> Path | None:
    spec = importlib.util.find_spec(name)
    return Path(spec.origin).resolve() if spec and spec.origin else None


def expand(dvc: dict, params: dict) -> dict:
    """dvc.yaml's `foreach` stages as DVC names them (name@key), over a dict in params.yaml."""
    out = {}
    for name, stage in dvc["stages"].items():
        if "foreach" not in stage:
            out[name] = stage
            continue
        items = params
        for part in stage["foreach"].strip("${}").split("."):
            items = items[part]
        for key in items:
            out[f"{name}@{key}"] = json.loads(json.dumps(stage["do"]).replace("${key}", str(key)))
    return {**dvc, "stages": out}


def check(dvc: dict, traces: dict[str, dict[str, set[str]]], root: Path, src: Path | None = None) -> list[str]:
    """One line per undeclared module, path or parameter and per declared parameter never asked for.

    `src` is where the traced run's tokenmill modules live (the project's src/ by default)."""
    root = root.resolve()
    src = (src or root / "src").resolve()
    problems = []
    for name, stage in dvc["stages"].items():
        seen = traces.get(name)
        if not seen:
            problems.append(f"{name}: no trace: the stage did not run under TOKENMILL_TRACE_DIR")
            continue
        deps = [(root / d).resolve() for d in _entries(stage.get("deps"))]
        outs = [(root / o).resolve() for key in ("outs", "metrics", "plots") for o in _entries(stage.get(key))]

        def covered(path: Path) -> bool:
            return any(path == d or d in path.parents for d in deps)

        for module in sorted(seen.get("module", set()) - UNDECLARED_MODULES):
            path = _module_file(module)
            if path is None or not path.is_relative_to(src):
                continue
            path = root / "src" / path.relative_to(src)
            if not covered(path):
                problems.append(f"{name}: imports {module} ({path.relative_to(root)}), not in its deps")
        for kind in ("read", "list"):
            for value in sorted(seen.get(kind, set())):
                path = Path(value).resolve()
                if not path.is_relative_to(root) or path == root / "params.yaml" or "__pycache__" in path.parts:
                    continue
                rel = path.relative_to(root)
                if rel.parts and rel.parts[0] in SIDE or str(rel) in REPO_FILES:
                    continue
                if any(path == o or o in path.parents or _temporary_of(path, o) for o in outs):
                    continue  # its own output, or its temporary siblings (.name.tmp-<pid>)
                if kind == "list" and any(path in d.parents for d in deps + outs):
                    continue  # a listing above a declared path reveals only names (imports, glob)
                if not covered(path):
                    problems.append(f"{name}: {'reads' if kind == 'read' else 'lists'} {rel}, not in its deps")
        declared = set(_entries(stage.get("params")))
        asked = seen.get("param", set()) - UNDECLARED_PARAMS
        for key in sorted(asked - declared):
            problems.append(f"{name}: reads parameter {key!r}, not in its params")
        for key in sorted(declared - asked):
            problems.append(f"{name}: declares parameter {key!r} but never reads it")
    return problems
