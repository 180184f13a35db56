"""What a stage really touches, recorded for the dependency test (tests/test_pipeline_e2e.py::test_every_stage_declares_what_it_touches).

With TOKENMILL_TRACE_DIR set, every process that imports tokenmill — the stage and its pool workers, which
inherit the variable — appends to <dir>/<pid>.jsonl one line per distinct event: the tokenmill modules it
imports, the files it opens for reading, the directories it lists, and the parameter keys the stage asks
`load_params` for. DVC names the stage in DVC_STAGE, which every line carries. Files read by C++ code
(pyarrow, DuckDB, fastText) raise no Python event; in this code base each of those reads follows a
directory listing or a manifest read of the same stage directory, which is recorded. The sweep of killed runs'
leftovers at a stage's start lists every output tree and reads nothing: it runs `unrecorded()`.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys

_seen: set[tuple[str, str]] = set()
_out = None
_busy = False


def _emit(kind: str, value: str) -> None:
    global _busy
    if _out is None or (kind, value) in _seen:
        return
    _seen.add((kind, value))
    _busy = True
    try:
        _out.write(json.dumps({"stage": os.environ.get("DVC_STAGE"), "kind": kind, "value": value}) + "\n")
        _out.flush()
    finally:
        _busy = False


def _hook(event: str, args: tuple) -> None:
    if _busy:
        return
    if event == "import":
        if args[0] == "tokenmill" or str(args[0]).startswith("tokenmill."):
            _emit("module", args[0])
    elif event == "open":
        path, mode, flags = args
        if isinstance(path, (str, bytes, os.PathLike)) and not isinstance(path, int):
            writing = (mode and any(c in mode for c in "wax+")) or (flags and flags & (os.O_WRONLY | os.O_RDWR))
            # A relative name that does not exist from the working directory was opened relative to a
            # directory descriptor (shutil.rmtree walks a tree that way): not a read of a project path.
            full = os.path.abspath(os.fsdecode(path))
            if not writing and os.path.exists(full):
                _emit("read", full)
    elif event in ("os.listdir", "os.scandir"):
        path = args[0]
        if isinstance(path, (str, bytes, os.PathLike)):
            _emit("list", os.path.abspath(os.fsdecode(path)))


def param(key: str) -> None:
    _emit("param", key)


@contextlib.contextmanager
def unrecorded():
    """Listings that shape no output, not recorded: the sweep of killed runs' temporaries at a stage's start
    (runtime.sweep_stale) lists every output tree of the workspace to remove leftovers, and reads nothing."""
    global _busy
    before, _busy = _busy, True
    try:
        yield
    finally:
        _busy = before


def start(directory: str) -> None:
    global _out
    if _out is not None:
        return
    os.makedirs(directory, exist_ok=True)
    _out = open(os.path.join(directory, f"{os.getpid()}.jsonl"), "a", buffering=1)
    for name in list(sys.modules):  # imported before the hook was installed
        if name == "tokenmill" or name.startswith("tokenmill."):
            _emit("module", name)
    sys.addaudithook(_hook)


def active() -> bool:
    return _out is not None
