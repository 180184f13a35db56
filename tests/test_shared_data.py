"""Without ../shared/data, a test that needs it skips on a developer's checkout and fails under CI=true.

Run for real: pytest in a subprocess, on a real-data test of this suite, with the `shared_data` fixture
pointed at a directory that does not exist (TOKENMILL_SHARED_DATA, read by tests/conftest.py).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# A test whose first fixture needs the shared data (the corpora of real prose): setup stops there.
NEEDS_DATA = "tests/test_filters_real_prose.py::test_corpora_are_real_prose_of_useful_size"


def _pytest(tmp_path: Path, ci: str | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["TOKENMILL_SHARED_DATA"] = str(tmp_path / "no-such-data")
    if ci is not None:
        env["CI"] = ci
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", NEEDS_DATA],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def test_missing_shared_data_fails_under_ci(tmp_path):
    for ci in ("true", "1"):
        out = _pytest(tmp_path, ci)
        assert out.returncode != 0, out.stdout
        assert "1 error" in out.stdout and "shared data not found" in out.stdout, out.stdout
        assert "CI=true" in out.stdout


def test_missing_shared_data_skips_outside_ci(tmp_path):
    out = _pytest(tmp_path, None)
    assert out.returncode == 0, out.stdout
    assert "1 skipped" in out.stdout and "shared data not found" in out.stdout, out.stdout
