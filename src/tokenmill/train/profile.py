"""A torch.profiler window over a few training steps, for finding where a step's time goes on a GPU node.

Switched on from the environment, not from params, because it changes no result and must not change a stage's
parameter hash: TOKENMILL_PROFILE="<dir>:<first step>:<steps>" profiles steps [first, first + steps) of this
process (0-based, counted from where it started or resumed). Rank 0 writes to <dir>:
    trace.json     the Chrome trace (chrome://tracing, Perfetto)
    summary.json   wall seconds of the window, GPU busy seconds (kernel time, overlapping kernels merged),
                   the host gap (wall - busy) and the top kernels with their share of GPU time
    table.txt      torch's key_averages table sorted by device time
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import torch


def parse(spec: str) -> tuple[Path, int, int] | None:
    if not spec:
        return None
    try:
        where, first, steps = spec.rsplit(":", 2)
        return Path(where), int(first), int(steps)
    except ValueError:
        raise ValueError(f"TOKENMILL_PROFILE={spec!r}: expected <dir>:<first step>:<steps>") from None


def device_work(events) -> list:
    """The events that are work on the GPU (kernels, copies), not the profiler's own step annotations: torch
    2.11 also records each `ProfilerStep#N` on the GPU's timeline, spanning the whole step, and counting it
    made the first H100 profile (2026-11-26) report half of the device time in "ProfilerStep*" and the GPU
    busy for the whole window."""
    return [e for e in events if e.device_type == torch.autograd.DeviceType.CUDA
            and not getattr(e, "is_user_annotation", False) and not e.name.startswith("ProfilerStep")]


def busy_seconds(work) -> float:
    """GPU time covered by at least one kernel (merging overlaps: NCCL and compute streams can run together)."""
    spans = sorted((e.time_range.start, e.time_range.end) for e in work if e.time_range.end > e.time_range.start)
    busy, cur_a, cur_b = 0.0, None, None
    for a, b in spans:
        if cur_b is None or a > cur_b:
            if cur_b is not None:
                busy += cur_b - cur_a
            cur_a, cur_b = a, b
        else:
            cur_b = max(cur_b, b)
    if cur_b is not None:
        busy += cur_b - cur_a
    return busy / 1e6  # profiler times are microseconds


def kernel_table(work, top: int = 25) -> tuple[float, list[dict]]:
    """Total device seconds and the `top` kernels by device time, with their calls and share."""
    kernels: dict[str, list] = {}  # name: [calls, seconds]
    for e in work:
        k = kernels.setdefault(e.name, [0, 0.0])
        k[0] += 1
        k[1] += (e.time_range.end - e.time_range.start) / 1e6
    total = sum(k[1] for k in kernels.values()) or 1.0
    ranked = sorted(kernels.items(), key=lambda kv: -kv[1][1])[:top]
    return total, [{"name": name[:120], "calls": calls, "device_seconds": sec, "share": sec / total}
                   for name, (calls, sec) in ranked]


class StepProfiler:
    """prof.step() after every training step; a no-op when TOKENMILL_PROFILE is unset."""

    def __init__(self, rank: int, device_type: str):
        spec = parse(os.environ.get("TOKENMILL_PROFILE", ""))
        self.prof, self.rank, self.seen = None, rank, 0
        if spec is None:
            return
        self.dir, self.first, self.steps = spec
        activities = [torch.profiler.ProfilerActivity.CPU]
        if device_type == "cuda":
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        self.prof = torch.profiler.profile(
            activities=activities,
            schedule=torch.profiler.schedule(wait=max(0, self.first - 1), warmup=min(1, self.first),
                                             active=self.steps, repeat=1),
            on_trace_ready=self._write)
        self.prof.__enter__()
        self.window_start = self.window_end = None  # wall clock of the profiled steps, synchronized

    def step(self) -> None:
        if self.prof is None:
            return
        self.seen += 1
        if self.seen == self.first:
            if torch.cuda.is_available() and torch.cuda.is_initialized():
                torch.cuda.synchronize()
            self.window_start = time.perf_counter()
        if self.seen == self.first + self.steps and torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.synchronize()
            self.window_end = time.perf_counter()
        self.prof.step()

    def _write(self, prof) -> None:
        if self.rank != 0:
            return
        self.dir.mkdir(parents=True, exist_ok=True)
        prof.export_chrome_trace(str(self.dir / "trace.json"))
        (self.dir / "table.txt").write_text(prof.key_averages().table(sort_by="self_device_time_total", row_limit=40))
        work = device_work(prof.events())
        total, top = kernel_table(work)
        wall = (self.window_end or time.perf_counter()) - (self.window_start or time.perf_counter())
        busy = busy_seconds(work)
        (self.dir / "summary.json").write_text(json.dumps({
            "steps": self.steps, "wall_seconds": wall, "gpu_busy_seconds": busy,
            "host_gap_fraction": 1 - busy / wall if wall > 0 else None, "kernel_seconds": total, "top": top},
            indent=1))

    def close(self) -> None:
        if self.prof is not None:
            self.prof.__exit__(None, None, None)
            self.prof = None
