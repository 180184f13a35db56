"""The recorded run of the training loop (tests/loop_golden.json): one tiny CPU run that exercises every periodic
duty of tokenmill.train.loop, and what of it must not change when the loop's code is reorganised.

The scenario (about 20 s on 2 cores, one OpenMP thread): a corpus with planted canaries (scored at the end), an
in-loop evaluation set (benchmarks at the noise window only), held-out evaluations, asynchronous checkpoints at
an interval, per-layer health at the logging steps with an injected embedding collapse (its alarm, and a spike
the guard skips), an injected weight corruption (the rank fault hook), an update poisoned at 1000x the learning
rate that the run rolls back, a stop after `STOP_AFTER` steps and the resume, DVCLive logging throughout.

What is recorded: every step's row (loss, gradient norm, learning rate, skip reason, replay, tokens hash), the
spikes, held-out losses, benchmark rows, rollback rows, health rows and alarms, canary exposures, the summary
(without its timing), the train: lines the run printed, the sha256 of every checkpoint's tensors (model and
optimizer state, and its trainer state) when the run stopped and at its end, of the final weights, and the
DVCLive series (perf/ series by their steps only: their values are timings).

    PYTHONPATH=src python tests/loop_golden.py record   # writes tests/loop_golden.json (run it twice: equal)
    PYTHONPATH=src python tests/loop_golden.py run OUT  # the same record, as JSON on stdout (the test's call)

Floating-point results depend on the torch build and the CPU's vector unit, so the record carries a
fingerprint of both; the test compares exactly where the fingerprint matches.
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
GOLDEN = HERE / "loop_golden.json"

STEPS = 44
STOP_AFTER = 34
FAULT = "corrupt_weights_at=5;collapse_embedding=13;poison_step=22"
CANARIES = {"sets": 1, "visits": [0, 3], "digits": 4, "candidates": 15, "seed": 0}


def run_config() -> dict:
    from train_helpers import tiny_run

    return tiny_run(
        max_steps=STEPS, token_budget=120_000,
        # keep_decay_start off: the record predates it (the extra checkpoint is the checkpoint duty's own test)
        checkpoint={"interval": 4, "keep": 2, "asynchronous": True, "keep_decay_start": False},
        logging={"log_interval": 2, "eval_interval": 8, "eval_sequences": 4, "noise_points": 3, "noise_stride": 3},
        health={"svd_interval": 4, "replica_check_interval": 3},
        rollback={"window": 6, "skip_batches": 2},
    )


def fingerprint() -> dict:
    from importlib.metadata import version

    import torch

    return {"torch": torch.__version__, "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            **{name: version(name) for name in ("numpy", "sentencepiece", "dvclive", "safetensors")}}


def _write_evalset(path: Path, vocab: int) -> None:
    """Six two-choice items of fixed token ids (a benchmark needs no meaning to be scored)."""
    from tokenmill import schema
    from tokenmill.evaluate.evalset import REQUESTS

    rows = []
    for i in range(6):
        bench = "arc" if i % 2 else "copa"
        for choice in range(2):
            rows.append({"benchmark": bench, "item_id": f"i{i}", "dirty": i == 0, "gold": i % 2, "choice": choice,
                         "choices": 2, "answer_chars": 3 + choice, "answer_bytes": 4 + choice,
                         "context": [(7 * i + k) % vocab for k in range(5 + i)],
                         "continuation": [(11 * i + 3 * choice + k) % vocab for k in range(2 + choice)]})
    schema.write_parquet(rows, REQUESTS, path)


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _tensor_digest(tensors: dict) -> dict[str, str]:
    import torch

    out = {}
    for key in sorted(tensors):
        t = tensors[key]
        if isinstance(t, torch.Tensor):
            t = t.detach().cpu().contiguous()
            out[key] = _sha(str((t.dtype, tuple(t.shape))).encode() + t.view(-1).view(torch.uint8).numpy().tobytes())
        else:
            out[key] = _sha(json.dumps(t, sort_keys=True, default=str).encode())
    return out


def _flatten(obj, prefix: str = "") -> dict:
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            out.update(_flatten(v, f"{prefix}{k}."))
        return out
    if isinstance(obj, (list, tuple)):
        out = {}
        for i, v in enumerate(obj):
            out.update(_flatten(v, f"{prefix}{i}."))
        return out
    return {prefix[:-1]: obj}


def checkpoint_digests(root: Path) -> dict[str, dict]:
    """{step_<N>: {"tensors": sha256 of all model and optimizer tensors, "trainer": sha256 of the trainer state,
    "keys": how many tensors}} of every complete checkpoint under root, read without a process group."""
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.default_planner import _EmptyStateDictLoadPlanner
    from torch.distributed.checkpoint.state_dict_loader import _load_state_dict

    from tokenmill.train.checkpoint import complete_checkpoints

    out = {}
    for _, path in complete_checkpoints(root):
        state: dict = {}
        _load_state_dict(state, storage_reader=FileSystemReader(str(path)), planner=_EmptyStateDictLoadPlanner(),
                         no_dist=True)
        tensors = {k: v for k, v in _flatten({"model": state["model"], "optim": state["optim"]}).items()}
        digests = _tensor_digest(tensors)
        out[path.name] = {"tensors": _sha(json.dumps(digests, sort_keys=True).encode()), "keys": len(digests),
                          "trainer": _sha(state["trainer"].encode()), "trainer_step": json.loads(state["trainer"])["step"]}
    return out


def _table(path: Path) -> list[dict]:
    import pyarrow.parquet as pq

    return pq.read_table(path).to_pylist() if path.exists() else None


def live_series(live: Path) -> dict:
    """DVCLive's series: {name: [[step, value], ...]}, timestamps dropped; perf/ series as their steps only."""
    out = {}
    root = live / "plots" / "metrics"
    for tsv in sorted(root.rglob("*.tsv")):
        name = tsv.relative_to(root).with_suffix("").as_posix()
        with tsv.open() as f:
            rows = list(csv.DictReader(f, delimiter="\t"))
        key = tsv.stem
        if name.startswith("perf/"):
            out[name] = [int(r["step"]) for r in rows]
        else:
            out[name] = [[int(r["step"]), r[key]] for r in rows]
    metrics = json.loads((live / "metrics.json").read_text())
    flat = _flatten(metrics)
    out["metrics.json"] = {k: (None if k.startswith("perf.") else v) for k, v in sorted(flat.items())}
    return out


def run(work: Path) -> dict:
    """The scenario in this process (TOKENMILL_FAULT set here); returns the record."""
    from safetensors.torch import load_file
    from train_helpers import build_corpus

    from tokenmill.train.loop import train

    corpus = build_corpus(work / "corpus", token_budget=120_000, canaries=CANARIES)
    manifest = json.loads((corpus / "tokenize" / "manifest.json").read_text())
    _write_evalset(work / "requests.parquet", manifest["vocab_size"])
    out, live = work / "run", work / "run" / "live"
    cfg = run_config()
    os.environ["TOKENMILL_FAULT"] = FAULT
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):
            stopped = train(cfg, corpus, out, live, stop_after=STOP_AFTER, evalset=work / "requests.parquet")
            at_stop = checkpoint_digests(out / "checkpoints")
            summary = train(cfg, corpus, out, live, evalset=work / "requests.parquet")
    finally:
        os.environ.pop("TOKENMILL_FAULT", None)
    weights = load_file(str(out / "final" / "model.safetensors"))
    return {
        "stopped": {k: v for k, v in stopped.items() if k != "timing"},
        # Without the use of context (loss by position, the retrieval probe): newer than the record, tested on its own
        # (tests/test_long_context.py).
        "summary": {k: v for k, v in summary.items() if k not in ("timing", "context")},
        "summary_json": {k: v for k, v in json.loads((out / "summary.json").read_text()).items() if k != "context"},
        "timing_keys": sorted(summary["timing"]),
        "printed": [line for line in printed.getvalue().splitlines() if line.startswith("train:")],
        "tables": {name: _table(out / f"{name}.parquet") for name in
                   ("steps", "spikes", "heldout", "benchmarks", "rollbacks", "health", "health_alarms", "canaries")},
        "checkpoints_at_stop": at_stop,
        "checkpoints_at_end": checkpoint_digests(out / "checkpoints"),
        "final_weights": _tensor_digest(weights),
        "final_config": json.loads((out / "final" / "config.json").read_text()),
        "live": live_series(live),
    }


def run_in_subprocess(work: Path) -> dict:
    """run() in a fresh interpreter with one OpenMP thread (as the suite's conftest pins it), so neither the
    environment nor the state of the calling process reaches the record."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(
        [str(HERE.parent / "src"), str(HERE)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []))}
    env.pop("TOKENMILL_FAULT", None)
    env.pop("TOKENMILL_PROFILE", None)
    proc = subprocess.run([sys.executable, str(Path(__file__)), "run", str(work)], env=env, capture_output=True,
                          text=True, cwd=HERE.parent, timeout=900)
    if proc.returncode != 0:
        raise AssertionError(f"the recorded scenario failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n"
                             f"{proc.stderr[-6000:]}")
    return json.loads(proc.stdout)


def main() -> None:
    if sys.argv[1] == "run":
        work = Path(sys.argv[2])
        record = run(work)
        record["fingerprint"] = fingerprint()
        sys.stdout.write(json.dumps(record, sort_keys=True) + "\n")
    elif sys.argv[1] == "record":
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            record = run_in_subprocess(Path(tmp))
        commit = subprocess.run(["git", "-C", str(HERE.parent), "rev-parse", "HEAD"], capture_output=True,
                                text=True).stdout.strip()
        record["recorded_at_commit"] = commit
        GOLDEN.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
        print(f"wrote {GOLDEN} ({len(record['tables']['steps'])} steps)")
    else:
        raise SystemExit(f"unknown command {sys.argv[1]!r}")


if __name__ == "__main__":
    main()
