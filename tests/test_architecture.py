"""The structure's contracts: the layers (pyproject.toml, [tool.importlinter], which `make test` runs with
`lint-imports` before the tests) really catch an upward import and a cycle, and an import made inside a
function says why beside it."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "tokenmill"
LINT = Path(sys.executable).with_name("lint-imports")


def _lint(src_root: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(LINT), "--config", str(ROOT / "pyproject.toml")], cwd=src_root, capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(src_root)})


@pytest.mark.parametrize("module, probe, broken", [
    # the ground floor importing the command line: an upward import, and a cycle through every layer
    ("section.py", "from tokenmill import cli", "tokenmill.section -> tokenmill.cli"),
    # two stage packages of one layer, which must not import each other
    ("dedup/params.py", "from tokenmill.filters.params import Filter", "tokenmill.dedup.params -> tokenmill.filters.params"),
])
def test_the_layers_contract_holds_and_catches_a_wrong_import(tmp_path, module, probe, broken):
    assert _lint(SRC.parent).returncode == 0  # the code as it is keeps both contracts
    shutil.copytree(SRC, tmp_path / "tokenmill", ignore=shutil.ignore_patterns("__pycache__"))
    with open(tmp_path / "tokenmill" / module, "a") as f:
        f.write(f"\n{probe}  # noqa: probe\n")
    out = _lint(tmp_path)
    assert out.returncode != 0 and "tokenmill's layers BROKEN" in out.stdout, out.stdout
    assert broken in out.stdout, out.stdout


def _bare_imports_in_functions(path: Path) -> list[str]:
    lines = path.read_text().splitlines()
    out = []
    for node in ast.walk(ast.parse("\n".join(lines))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for sub in ast.walk(node):
                if isinstance(sub, (ast.Import, ast.ImportFrom)):
                    at = sub.lineno - 1
                    if "#" in lines[at]:
                        continue  # the reason on the line
                    while at > 0 and lines[at - 1].strip().startswith(("from ", "import ")):
                        at -= 1  # a group of imports: the reason above its first
                    if not lines[at - 1].strip().startswith("#"):
                        out.append(f"{path.relative_to(ROOT)}:{sub.lineno}: {lines[sub.lineno - 1].strip()}")
    return out


def test_every_import_inside_a_function_says_why():
    """An import inside a function hides a dependency from whoever reads the module's head: it
    stays only with its reason beside it (a measured start-up cost, an optional dependency)."""
    bare = [b for f in sorted(SRC.rglob("*.py")) for b in _bare_imports_in_functions(f)]
    assert bare == [], "\n".join(bare)
