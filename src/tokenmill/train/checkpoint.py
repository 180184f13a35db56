"""Atomic torch.distributed.checkpoint (DCP) checkpoints of the whole training state.

A checkpoint is checkpoints/step_<N>/ (N = steps done): the model and optimizer state as FQN-keyed DTensors
(get_state_dict), so it loads under any other mesh or process count, plus the trainer state (step, data
cursor, schedule, spike window, step records, RNG) as one JSON string. Every rank writes its shards into
checkpoints/.tmp-step_<N>/; only when all have finished does rank 0 rename it to step_<N>. A run killed at any
point leaves at most a .tmp- directory, which the next run deletes, and resumes from the newest step_<N>.
Asynchronous (train.checkpoint.asynchronous; on GPU by default): the state is copied to host memory and written
by a background thread while training goes on; the rename waits for the next save or the end of the run.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.tensor import DTensor

_NAME = re.compile(r"^step_(\d{8})$")


def _name(step: int) -> str:
    return f"step_{step:08d}"


def complete_checkpoints(root: Path) -> list[tuple[int, Path]]:
    """(steps done, path) of every complete checkpoint, oldest first; DCP's .metadata is written last."""
    if not root.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in root.iterdir() if (m := _NAME.match(p.name)) and (p / ".metadata").exists()]
    return sorted(found)


class _Writer(dcp.FileSystemWriter):
    """DCP's file writer without the storage metadata it records by default: the absolute path it wrote to
    and a random save id, which made two builds of the same inputs differ in checkpoints/*/.metadata (and so
    in their DVC hashes, rerunning every stage below). The loader does not need them (it fills in an empty
    StorageMeta when there is none)."""

    def storage_meta(self):
        return None


def _host_copy(obj):
    """A copy of a state dict in host memory, DTensors kept as DTensors (same mesh, placements and global
    shape) with a host copy of their local shard: what a background write may read while training goes on."""
    if isinstance(obj, DTensor):
        return DTensor.from_local(obj.to_local().detach().to("cpu", copy=True), obj.device_mesh, obj.placements,
                                  run_check=False, shape=obj.shape, stride=obj.stride())
    if isinstance(obj, torch.Tensor):
        return obj.detach().to("cpu", copy=True)
    if isinstance(obj, dict):
        return {k: _host_copy(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_host_copy(v) for v in obj)
    return obj


def _barrier() -> None:
    if dist.is_initialized():
        dist.barrier()


def _rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


class Checkpointer:
    def __init__(self, root: str | Path, keep: int, kill_at: set[int] | None = None, asynchronous: bool = False,
                 write_delay: float = 0.0):
        self.root, self.keep = Path(root), keep
        self.kill_at = kill_at or set()  # test hook: SIGKILL this process after writing these steps' shards
        self.write_delay = write_delay  # test hook: a background write starts this many seconds late
        # Seconds the training waited for each save (staging and the previous write, when asynchronous) and
        # for the load, barriers included.
        self.save_seconds: list[float] = []
        self.load_seconds: float | None = None
        self.asynchronous = asynchronous
        self._pending: tuple | None = None  # (future, step, tmp, final) of the write in flight
        # While a loss excursion is open (tokenmill.train.rollback), its first step: the newest checkpoint at or
        # before it is kept whatever `keep` says, since a rollback returns there.
        self.pin: int | None = None
        # Steps whose checkpoint is never pruned (train.checkpoint.keep_decay_start: where the decay begins).
        self.kept: set[int] = set()
        if asynchronous:
            # The background write's collectives (DCP exchanges its plan between ranks) go over a gloo group of
            # their own, so they never interleave with the training's on the default group.
            self._group = dist.new_group(backend="gloo") if dist.is_initialized() else None
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="checkpoint")

    def clean(self) -> None:
        """Remove what a killed run left half-written."""
        if _rank() == 0 and self.root.is_dir():
            for p in self.root.iterdir():
                if p.name.startswith(".tmp-"):
                    shutil.rmtree(p)
        _barrier()

    def save(self, step: int, model: torch.nn.Module, optimizer: torch.optim.Optimizer, trainer: dict) -> Path:
        """Write the training state as checkpoint step_<step>. Asynchronous: the state is copied to host memory
        (the training then goes on changing it in place) and written by a background thread while the next
        steps run; it becomes step_<step> when the next save or wait() finds the write finished."""
        started = time.perf_counter()
        self.wait(count=False)  # one write in flight at a time
        final, tmp = self.root / _name(step), self.root / f".tmp-{_name(step)}"
        if _rank() == 0:
            self.root.mkdir(parents=True, exist_ok=True)
            if tmp.exists():
                shutil.rmtree(tmp)
            tmp.mkdir()
        _barrier()
        model_sd, optim_sd = get_state_dict(model, optimizer)
        state = {"model": model_sd, "optim": optim_sd, "trainer": json.dumps(trainer, sort_keys=True)}
        if self.asynchronous:
            future = self._pool.submit(self._write, _host_copy(state), tmp)
            self._pending = (future, step, tmp, final)
        else:
            dcp.save(state, storage_writer=_Writer(str(tmp)))
            self._commit(step, tmp, final)
        self.save_seconds.append(time.perf_counter() - started)
        return final

    def _write(self, state: dict, tmp: Path) -> None:
        time.sleep(self.write_delay)
        dcp.save(state, storage_writer=_Writer(str(tmp)), process_group=self._group)

    def wait(self, count: bool = True) -> None:
        """Finish the write in flight, if any: every rank's shards written, then the rename to step_<N>."""
        if self._pending is None:
            return
        started = time.perf_counter()
        future, step, tmp, final = self._pending
        self._pending = None
        future.result()
        self._commit(step, tmp, final)
        if count:
            self.save_seconds.append(time.perf_counter() - started)

    def _commit(self, step: int, tmp: Path, final: Path) -> None:
        _barrier()
        if step in self.kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        if _rank() == 0:
            if final.exists():  # a rerun of the same step (only after a crash between rename and prune)
                shutil.rmtree(final)
            os.replace(tmp, final)
            found = complete_checkpoints(self.root)
            pinned = [p for s, p in found if self.pin is not None and s <= self.pin][-1:]
            for s, old in found[:-self.keep]:
                if old not in pinned and s not in self.kept:
                    shutil.rmtree(old)
        _barrier()

    def load_latest(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                    at_most: int | None = None) -> dict | None:
        """Load the newest complete checkpoint (of at most `at_most` steps) into model and optimizer; its trainer
        state, or None."""
        found = [(s, p) for s, p in complete_checkpoints(self.root) if at_most is None or s <= at_most]
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

    def drop_after(self, step: int) -> None:
        """Delete the checkpoints of more than `step` steps (a rollback's undone steps): a restart must not
        resume from them."""
        self.wait(count=False)
        if _rank() == 0:
            for s, path in complete_checkpoints(self.root):
                if s > step:
                    shutil.rmtree(path)
        _barrier()
