"""Atomic torch.distributed.checkpoint (DCP) checkpoints of the whole training state.

A checkpoint is checkpoints/step_<N>/ (N = steps done): the model and optimizer state as FQN-keyed DTensors
(get_state_dict), so it loads under any other mesh or process count, plus the trainer state (step, data
cursor, schedule, spike window, step records, RNG) as one JSON string. Every rank writes its shards into
checkpoints/.tmp-step_<N>/; only when all have finished does rank 0 rename it to step_<N>. A run killed at any
point leaves at most a .tmp- directory, which the next run deletes, and resumes from the newest step_<N>.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

_NAME = re.compile(r"^step_(\d{8})$")


def _name(step: int) -> str:
    return f"step_{step:08d}"


def complete_checkpoints(root: Path) -> list[tuple[int, Path]]:
    """(steps done, path) of every complete checkpoint, oldest first; DCP's .metadata is written last."""
    if not root.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in root.iterdir() if (m := _NAME.match(p.name)) and (p / ".metadata").exists()]
    return sorted(found)


def _barrier() -> None:
    if dist.is_initialized():
        dist.barrier()


def _rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


class Checkpointer:
    def __init__(self, root: str | Path, keep: int, kill_at: set[int] | None = None):
        self.root, self.keep = Path(root), keep
        self.kill_at = kill_at or set()  # test hook: SIGKILL this process after writing these steps' shards
        self.save_seconds: list[float] = []  # wall time of each save and of the load, barriers included
        self.load_seconds: float | None = None

    def clean(self) -> None:
        """Remove what a killed run left half-written."""
        if _rank() == 0 and self.root.is_dir():
            for p in self.root.iterdir():
                if p.name.startswith(".tmp-"):
                    shutil.rmtree(p)
        _barrier()

    def save(self, step: int, model: torch.nn.Module, optimizer: torch.optim.Optimizer, trainer: dict) -> Path:
        started = time.perf_counter()
        final, tmp = self.root / _name(step), self.root / f".tmp-{_name(step)}"
        if _rank() == 0:
            self.root.mkdir(parents=True, exist_ok=True)
            if tmp.exists():
                shutil.rmtree(tmp)
            tmp.mkdir()
        _barrier()
        model_sd, optim_sd = get_state_dict(model, optimizer)
        dcp.save({"model": model_sd, "optim": optim_sd, "trainer": json.dumps(trainer, sort_keys=True)},
                 checkpoint_id=str(tmp))
        _barrier()
        if step in self.kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        if _rank() == 0:
            if final.exists():  # a rerun of the same step (only after a crash between rename and prune)
                shutil.rmtree(final)
            os.replace(tmp, final)
            for _, old in complete_checkpoints(self.root)[:-self.keep]:
                shutil.rmtree(old)
        _barrier()
        self.save_seconds.append(time.perf_counter() - started)
        return final

    def load_latest(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict | None:
        """Load the newest complete checkpoint into model and optimizer; its trainer state, or None."""
        found = complete_checkpoints(self.root)
        # Every rank must pick the same one: rank 0 decides (a rank could list the directory mid-rename).
        choice = [str(found[-1][1]) if found else None]
        if dist.is_initialized():
            dist.broadcast_object_list(choice, src=0)
        if choice[0] is None:
            return None
        started = time.perf_counter()
        model_sd, optim_sd = get_state_dict(model, optimizer)
        state = {"model": model_sd, "optim": optim_sd, "trainer": ""}
        dcp.load(state, checkpoint_id=choice[0])
        set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
        self.load_seconds = time.perf_counter() - started
        return json.loads(state["trainer"])
