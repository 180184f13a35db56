"""The run state: what a checkpoint carries beside the model and optimizer (checkpoint.py stores it as one JSON
string), and the error of a run that cannot go on.

The state is one dict, created by the loop's set-up or read back from a checkpoint: step, records (the rows of
STEPS), spikes, heldout, bench, the spike guard's window (losses, norms, consecutive), health, health_alarms,
health_state, rollbacks, excursion (rollback.py's tracker), rng, and hashes_shared. A rollback replaces its
contents in place (the dict stays the same object: every duty that holds it sees the checkpoint's).
"""

from __future__ import annotations

import base64
from typing import Mapping

import numpy as np
import torch
import torch.distributed as dist

from tokenmill.train.rollback import new_track


class TrainError(RuntimeError):
    """A run that cannot go on (diverged, empty plan); the message says why."""


def new_state() -> dict:
    """The state of a run that starts from step 0."""
    return {"step": 0, "records": [], "spikes": [], "heldout": [], "bench": [], "losses": [], "norms": [],
            "consecutive": 0}


def complete_state(state: dict) -> dict:
    """The run state's parts that checkpoints written before them lack."""
    for key, empty in (("health", []), ("health_alarms", []), ("health_state", {}), ("rollbacks", []),
                       ("excursion", None)):
        state.setdefault(key, empty)
    state["excursion"] = state["excursion"] or new_track()
    return state


def rng_state() -> dict:
    state = {"cpu": base64.b64encode(torch.get_rng_state().numpy().tobytes()).decode()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = base64.b64encode(torch.cuda.get_rng_state().numpy().tobytes()).decode()
    return state


def set_rng_state(state: Mapping) -> None:
    torch.set_rng_state(torch.from_numpy(np.frombuffer(base64.b64decode(state["cpu"]), dtype=np.uint8).copy()))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(torch.from_numpy(np.frombuffer(base64.b64decode(state["cuda"]), dtype=np.uint8).copy()))


def share_token_hashes(state: dict) -> None:
    """Only rank 0 hashes the steps' tokens (data.BatchLoader, `record`); before a checkpoint the other ranks'
    records get its hashes since the last one, because DCP keeps one rank's copy of the trainer state, whichever
    it is. One broadcast of 32 characters per step, per checkpoint."""
    start = state.get("hashes_shared", 0)
    hashes = [[r["tokens_hash"] for r in state["records"][start:]]]
    dist.broadcast_object_list(hashes, src=0)
    for record, digest in zip(state["records"][start:], hashes[0]):
        record["tokens_hash"] = digest
    state["hashes_shared"] = len(state["records"])
