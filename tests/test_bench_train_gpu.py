"""The GPU measurement's command on its CPU path (scale=cpu_demo, 2 ranks): the same script a GPU node runs,
so a break in it shows here and not on a lent GPU. Resume on CPU is bit-exact, so the resumed leg's losses
equal the unstopped run's exactly (on a GPU they differ by cuDNN attention's non-determinism)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_bench_train_gpu_cpu_path_resumes_and_records_everything(tmp_path):
    record = tmp_path / "cpu_demo.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_train_gpu.py"), "--scale", "cpu_demo",
                           "--steps", "4", "--resume", "--profile", "1", "--json", str(record)],
                          capture_output=True, text=True, timeout=300, cwd=ROOT, env={**os.environ, "CI": ""})
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads(record.read_text())
    assert set(r["legs"]) == {"leg1", "leg2", "continuous"}
    assert r["legs"]["leg2"]["timing"]["resumed_from_step"] == 2
    assert r["legs"]["leg2"]["losses"] == r["legs"]["continuous"]["losses"]  # bit-exact on CPU
    assert r["resume"]["max_abs_loss_diff"] == 0.0 and r["resume"]["last_loss"] < r["resume"]["first_loss"]
    for leg in r["legs"].values():
        t = leg["timing"]
        assert t["tokens_per_second"] > 0 and t["first_step_seconds"] > 0 and t["checkpoint_save_seconds"]
        assert "compile_log" in leg
    assert r["legs"]["leg2"]["timing"]["checkpoint_load_seconds"] > 0
    assert r["profile"]["steps"] == 1 and r["profile"]["wall_seconds"] > 0
    # The record renders into the RESULTS section without the GPU node.
    text = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_train_gpu.py"), "--from-json", str(record)],
                          capture_output=True, text=True, timeout=120, cwd=ROOT, check=True).stdout
    assert "| cpu_demo leg2 |" in text and "Resume (cpu_demo)" in text
