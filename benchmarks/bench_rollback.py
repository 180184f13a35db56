"""The rollback of an unrecovered loss excursion (tokenmill.train.rollback): what chose its band, what it costs,
and what it gives back, on CPU.

1. The band on runs that needed no rollback: the excursion tracker replayed over every steps.parquet under
   --train-dir (the demo's trained runs) at k_sigma 2, 3 and 4: how many excursions opened, and the longest.
   The default window (50 steps) must be far above the longest.
2. The tracker's own cost per step: watch() over a window of 50 losses, timed over 20,000 calls.
3. A poisoned update (TOKENMILL_FAULT poison_step=30: step 30's update at 1000x the learning rate) in the tiny
   model of the training tests (tests/train_helpers.py, real text), 80 steps, rollback window 10, 3 batches
   skipped: the held-out loss per bucket and the run's wall time of four runs side by side: undisturbed;
   undisturbed with its learning rate halved from step 28 (the checkpoint the rollback returns to); poisoned
   without rollback; poisoned with rollback.

    .venv/bin/python benchmarks/bench_rollback.py [--train-dir /path/to/data/train] [--write]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from benchlib import machine, write_section  # noqa: E402
from train_helpers import build_corpus, tiny_run  # noqa: E402


def band_on_runs(train_dir: Path) -> tuple[list[tuple], int, int]:
    import pyarrow.parquet as pq

    from tokenmill.train.config import RollbackConfig, SpikeConfig
    from tokenmill.train.rollback import new_track, watch

    files = sorted(train_dir.rglob("steps.parquet"))
    runs = [pq.read_table(f, columns=["step", "phase", "loss"]).to_pylist() for f in files]
    rows = []
    for k in (2.0, 3.0, 4.0):
        cfg = RollbackConfig(k_sigma=k, window=10**9)
        opened = longest = 0
        for steps in runs:
            track = new_track()
            for r in steps:
                was = track["start"]
                watch(track, r["step"], r["phase"], r["loss"], cfg, SpikeConfig())
                opened += was is None and track["start"] is not None
                if track["start"] is not None:
                    longest = max(longest, r["step"] - track["start"] + 1)
        rows.append((k, opened, longest))
    return rows, len(files), sum(len(s) for s in runs)


def tracker_seconds(calls: int = 20_000) -> float:
    from tokenmill.train.config import RollbackConfig, SpikeConfig
    from tokenmill.train.rollback import new_track, watch

    cfg, spike, track = RollbackConfig(), SpikeConfig(), new_track()
    losses = [4.0 + 0.01 * ((i * 7919) % 13 - 6) for i in range(calls)]
    started = time.perf_counter()
    for step, loss in enumerate(losses):
        watch(track, step, "bulk", loss, cfg, spike)
    return (time.perf_counter() - started) / calls


def poisoned_runs(tmp: Path) -> list[tuple[str, dict, float]]:
    from tokenmill.train.loop import train

    corpus = build_corpus(tmp / "corpus")
    over = {"max_steps": 80, "rollback": {"window": 10, "skip_batches": 3}}
    out = []

    def run(name: str, fault: str, config: dict, stop_after: int | None = None) -> dict:
        os.environ["TOKENMILL_FAULT"] = fault
        return train(config, corpus, tmp / name, None, stop_after=stop_after)

    for name, fault, config in (("undisturbed", "", tiny_run(**over)),
                                ("poisoned, no rollback", "poison_step=30",
                                 tiny_run(max_steps=80, rollback={"enabled": False})),
                                ("poisoned, rollback", "poison_step=30", tiny_run(**over))):
        started = time.perf_counter()
        summary = run(name, fault, config)
        out.append((name, summary, time.perf_counter() - started))
    started = time.perf_counter()
    run("half", "", tiny_run(**over), stop_after=28)
    summary = run("half", "", tiny_run(**over, optimizer={"lr": 1.5e-3}))
    out.insert(1, ("undisturbed, learning rate halved from step 28", summary, time.perf_counter() - started))
    os.environ.pop("TOKENMILL_FAULT")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--train-dir", type=Path, default=ROOT / "data" / "train")
    ap.add_argument("--write", action="store_true", help="replace the section in benchmarks/RESULTS.md")
    args = ap.parse_args()
    import torch

    torch.set_num_threads(1)
    m = machine(["torch"])
    band, n_runs, n_steps = band_on_runs(args.train_dir)
    per_call = tracker_seconds()
    with tempfile.TemporaryDirectory() as tmp:
        runs = poisoned_runs(Path(tmp))
    buckets = sorted(runs[0][1]["heldout_loss"])
    lines = [
        "## Rollback",
        "",
        f"Machine: {m['nproc']} cores ({m['cpu']}), {m['ram_gib']:.0f} GiB, Python {m['python']}, "
        f"torch {m['versions']['torch']}, one thread.",
        f"Command: `.venv/bin/python benchmarks/bench_rollback.py --train-dir {args.train_dir} --write`",
        "",
        "What chose the band of `train.rollback` (tokenmill/train/rollback.py; docs/training.md, \"When a run goes "
        f"wrong\"): the excursion tracker replayed over the {n_runs} trained runs under --train-dir ({n_steps} "
        "steps, none of which needed a rollback), with the spike guard's window (50) and min_history (10):",
        "",
        "| k_sigma | excursions opened | longest (steps) |",
        "| ---: | ---: | ---: |",
        *(f"| {k:g} | {opened} | {longest} |" for k, opened, longest in band),
        "",
        "The default `k_sigma: 3` opens an excursion on a real rise of 3 std (at least 3% of the loss: the std "
        "floor) and, on these runs, closed every one it opened within the step shown, against a `window` of 50. "
        "Few runs and short ones (the demo's): a long real run should be replayed through "
        "`tokenmill.train.rollback.watch` the same way before its window is shortened. `window: 50` follows the "
        "issue's example; `lr_factor: 0.5` and `skip_batches: 10` are chosen, not measured (PaLM skipped "
        "200-500 batches at its far larger batch count per spike).",
        "",
        f"The tracker's cost: {per_call * 1e6:.1f} µs per step (mean and std of 50 losses in Python), on every "
        "rank, nothing on the device; against the demo's 1.4 s CPU step or a ~3 s step of the h100 presets it is "
        "below 0.01%.",
        "",
        "A poisoned update (step 30's at 1000x the learning rate: its loss and gradient norm were normal, the "
        "spike guard let it through) in the training tests' tiny model (2 layers, d 64, real text), 80 steps, "
        "rollback window 10, 3 batches skipped, checkpoints every 4 steps; the same runs as "
        "tests/test_train_core.py::test_an_update_that_sends_the_loss_up_for_good_is_rolled_back:",
        "",
        "| run | " + " | ".join(f"held-out {b}" for b in buckets) + " | rollbacks | wall (s) |",
        "| --- | " + " | ".join("---:" for _ in buckets) + " | ---: | ---: |",
        *(f"| {name} | " + " | ".join(f"{s['heldout_loss'][b]:.3f}" for b in buckets) +
          f" | {s['rollbacks']} | {sec:.1f} |" for name, s, sec in runs),
        "",
        "The rollback brings the run back to within a few hundredths of a nat of the run that never took the "
        "bad update and had its learning rate halved at the same step (the difference: the three batches it "
        "skipped); without it the loss stays an order of magnitude up to the end. The first run's wall time "
        "holds the process's warm-up. What a rollback costs is a checkpoint load and the steps from that "
        "checkpoint to the detection run twice: 13 here, at most `window` + `checkpoint.interval` (150) at "
        "the defaults.",
    ]
    text = "\n".join(lines)
    print(text)
    if args.write:
        write_section(ROOT / "benchmarks" / "RESULTS.md", "## Rollback", text)


if __name__ == "__main__":
    main()
