"""Rolling back a loss excursion that does not come back.

The spike guard (loop.spike_verdict) skips one bad step; it cannot undo an update it let through. When such
an update leaves the model worse for good (the loss jumps and stays up: an unstable optimizer state, a bad
batch whose loss and gradient norm looked normal), the run's loss sits above where it was, the guard's own
window absorbs the new level within a few steps, and the run spends the rest of its budget on a damaged model.

An excursion opens at the first step whose loss is above the band of its plan phase's recent losses
(mean + k_sigma x std over the spike guard's window, std floored at 1% of the mean, as the guard does); the
band is frozen there. The first step back inside the band closes it. An excursion whose every step stayed
above the band for `window` steps, or a run of more than spike.max_consecutive skipped steps, is unrecovered:
the run rolls back

  1. to the newest checkpoint at or before the excursion's first step (the checkpointer keeps it while an
     excursion is open, whatever train.checkpoint.keep says; checkpoints written after it are deleted),
  2. skips the batches of the excursion's first step and of the steps before it, skip_batches in all, never
     before that checkpoint: on the replay those steps read their batch (for the step table's token hash)
     but neither forward nor update, and their documents are recorded in the rollback's row. They are not
     reshuffled into later steps: a step's batch stays a function of (plan, step), as `tokenmill audit step`
     relies on;
  3. multiplies the learning rate by lr_factor for the rest of the run (once more at each rollback),
  4. and goes on from that checkpoint. After max_rollbacks rollbacks one more unrecovered excursion stops the
     run with one line.

PaLM did this by hand ("restart from a checkpoint roughly 100 steps before the spike, and skip roughly 200-500
data batches"); OPT-175B lowered the learning rate at its restarts. Here the run does it itself, and each
rollback is a row of ROLLBACKS (rollbacks.parquet, lineage table train_rollbacks); the steps run again after a
rollback carry `replay` > 0 in the step table.
"""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa

ROLLBACKS = pa.schema([
    ("rollback", pa.int64()),  # 1, 2, ... in the order they happened
    ("reason", pa.string()),  # unrecovered_excursion | consecutive_skips
    ("excursion_start", pa.int64()),  # the first step above the band (or the first of the skipped run)
    ("detected_at", pa.int64()),  # the step after which the run rolled back
    ("resumed_from", pa.int64()),  # the checkpoint's step: steps resumed_from .. detected_at were undone
    ("band_mean", pa.float64()),  # the pre-excursion loss band: mean and upper edge (null: consecutive skips)
    ("band_upper", pa.float64()),
    ("undone_losses", pa.list_(pa.float64())),  # the losses of the undone steps, resumed_from .. detected_at
    ("skipped_steps", pa.list_(pa.int64())),  # steps whose batches the replay skips
    ("skipped_windows", pa.list_(pa.int64())),  # the stream windows those steps read
    ("doc_ids", pa.list_(pa.string())),  # documents with tokens in those batches
    ("lr_scale", pa.float64()),  # the learning rate's multiplier from resumed_from on: lr_factor ** rollback
])


def new_track() -> dict:
    """The excursion tracker's state (checkpointed with the run): the current phase's recent losses, and the
    open excursion's first step and frozen band."""
    return {"phase": None, "losses": [], "start": None, "band": None}


def band(losses: list[float], k_sigma: float) -> tuple[float, float]:
    """(mean, upper edge) of the losses' band: mean + k_sigma x std, std floored at 1% of the mean."""
    mean, std = float(np.mean(losses)), float(np.std(losses))
    return mean, mean + k_sigma * max(std, 0.01 * abs(mean))


def watch(track: dict, step: int, phase: str, loss: float | None, cfg, spike) -> dict | None:
    """Follow one step's loss (None: a skipped batch, not judged). Returns the excursion, {start, band_mean,
    band_upper}, when it has lasted cfg.window steps above its band; else None.

    The band is taken over the phase's own recent losses: a new phase may legitimately sit higher (another
    mixture), so its first min_history steps are not judged. Losses inside an excursion do not enter the
    history: the band stays the one before it."""
    if loss is None:
        return None
    if track["phase"] != phase:
        track.update(new_track(), phase=phase)
    if track["start"] is None:
        history = track["losses"]
        if len(history) >= spike.min_history:
            mean, upper = band(history, cfg.k_sigma)
            if not math.isfinite(loss) or loss > upper:
                track["start"], track["band"] = step, [mean, upper]
        if track["start"] is None:
            track["losses"] = (history + [loss])[-spike.window:]
    elif math.isfinite(loss) and loss <= track["band"][1]:
        track["start"], track["band"] = None, None  # back inside: recovered
        track["losses"] = (track["losses"] + [loss])[-spike.window:]
    if track["start"] is not None and step - track["start"] + 1 >= cfg.window:
        return {"start": track["start"], "band_mean": track["band"][0], "band_upper": track["band"][1]}
    return None


def lr_scale(rollbacks: list[dict], cfg) -> float:
    """The learning rate's multiplier after these rollbacks."""
    return cfg.lr_factor ** len(rollbacks)


def replays(rollbacks: list[dict], step: int) -> int:
    """How many rollbacks undid this step before the run took it (0: its first pass)."""
    return sum(r["resumed_from"] <= step <= r["detected_at"] for r in rollbacks)


def skipped(rollbacks: list[dict]) -> set[int]:
    """Steps whose batches the run skips."""
    return {s for r in rollbacks for s in r["skipped_steps"]}


def rollback_row(rollbacks: list[dict], reason: str, excursion: dict, detected_at: int, resumed_from: int,
                 undone: list[dict], loader, cfg) -> dict:
    """The row of ROLLBACKS for a rollback to `resumed_from`; `undone` are the step records it takes back."""
    start = excursion["start"]
    steps = list(range(max(resumed_from, start - cfg.skip_batches + 1), start + 1))
    return {"rollback": len(rollbacks) + 1, "reason": reason, "excursion_start": start, "detected_at": detected_at,
            "resumed_from": resumed_from, "band_mean": excursion.get("band_mean"),
            "band_upper": excursion.get("band_upper"),
            "undone_losses": [r["loss"] for r in undone if r["step"] >= resumed_from],
            "skipped_steps": steps, "skipped_windows": [loader.window(s) for s in steps],
            "doc_ids": list(dict.fromkeys(d for s in steps for d in loader.doc_ids(s))),
            "lr_scale": lr_scale(rollbacks, cfg) * cfg.lr_factor}
