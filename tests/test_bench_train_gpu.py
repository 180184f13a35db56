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


def test_the_profile_counts_kernels_not_the_step_annotations_on_the_gpu_timeline():
    """torch records each ProfilerStep#N on the GPU's timeline too, spanning the whole step. The first H100
    profile counted it as a kernel: half the device time in "ProfilerStep*" and the GPU busy for the whole
    window, whatever the kernels did. Events here are torch's own FunctionEvent, as prof.events() returns."""
    from torch.autograd import DeviceType
    from torch.autograd.profiler_util import FunctionEvent

    from tokenmill.train.profile import busy_seconds, device_work, kernel_table

    def event(name, start, end, device=DeviceType.CUDA, annotation=False):
        return FunctionEvent(0, name, 0, start, end, device_type=device, is_user_annotation=annotation)

    events = [event("ProfilerStep#3", 0, 1000, annotation=True),  # the step, as torch 2.11 put it on the GPU
              event("aten::mm", 90, 310, device=DeviceType.CPU),  # the launch on the host
              event("nvjet_gemm", 100, 300), event("flash_bprop", 500, 600), event("nccl_reduce", 550, 700)]
    work = device_work(events)
    assert [e.name for e in work] == ["nvjet_gemm", "flash_bprop", "nccl_reduce"]
    assert abs(busy_seconds(work) - 400e-6) < 1e-12  # 200 µs + the two overlapping kernels' 200 µs, merged
    total, top = kernel_table(work)
    assert abs(total - 450e-6) < 1e-12
    assert [k["name"] for k in top] == ["nvjet_gemm", "nccl_reduce", "flash_bprop"]
    assert abs(sum(k["share"] for k in top) - 1) < 1e-9
