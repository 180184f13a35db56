"""The training stages (`scout@<name>`, `pretrain`): launch train() through torchrun, resumably.

A training stage cannot use runtime.StageRun's write-to-temporary-then-rename: its checkpoints must survive
a crash so the next `dvc repro` resumes (dvc.yaml marks the output `persist: true`), and its processes are
torchrun's ranks. So:
- the output directory is the run directory itself, stamped with a run key (the hash of the resolved
  configuration and of the plan's and the token shards' content digests). A directory stamped with another
  key belongs to another run (a changed learning rate, a new plan) and is cleared first; one with the same key
  is resumed from its newest complete checkpoint (tokenmill.train.checkpoint).
- train() writes every file of the run (rank 0 the tables and final weights, all ranks the checkpoints);
  when torchrun returns, this process writes the content manifest (a digest of the run's deterministic
  files, checkpoints left out) and the run record, as StageRun does for the other stages.
- every file of the output, checkpoints included, is a function of the configuration and the data: no
  time, host or path (those are in the run record, runs/<stage>.json), so the same inputs built in another
  directory or on another machine get the same DVC hash.
- a failed run is one line naming why (failure_reason): the failing rank's own line, not torchrun's banner.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Mapping

from tokenmill.evaluate.signal import run_figures
from tokenmill.execution.lifetime import die_with_parent, end_with_launcher
from tokenmill.runtime import (
    PACKAGE_DIR,
    clean_leftovers,
    code_version,
    input_id,
    run_record,
    sha1_file,
    write_json,
)
from tokenmill.train.config import LaunchConfig, TrainConfigError, mesh_shape, parse_run
from tokenmill.train.faults import REASONS_ENV, first_reason, last_attempt, restarts

# Files of a finished run that are a function of configuration and data alone (contract 5). Checkpoints
# are not among them: they exist to resume, and DCP's metadata is not promised to be byte-stable.
CONTENT = ("steps.parquet", "spikes.parquet", "rollbacks.parquet", "heldout.parquet", "benchmarks.parquet",
           "health.parquet", "health_alarms.parquet", "canaries.parquet", "summary.json", "final")
RUN_KEY = "run_key.json"


class LaunchError(RuntimeError):
    """torchrun failed; the message names the run, why it failed (failure_reason) and where its log is."""


# Set for the ranks: a directory where a failing rank writes its one-line reason (tokenmill.train.__main__).
_RANK_PREFIX = re.compile(r"^\[(?:rank|default)\d+\]: ?")  # torchrun's prefix of a rank's lines
_EXCEPTION = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit|Failure))(?::\s*(.*))?$")
_TORCHRUN_OWN = ("torch.distributed.elastic.", "ChildFailedError")
# Where torchrun's own report of a failed rank starts: its log line, its traceback, its banner.
_TORCHRUN_REPORT = re.compile(r"^[EWI]\d{4} .*torch/distributed/elastic/|ChildFailedError")
_PROGRESS = re.compile(r"^train: step \d+ skipped")  # the spike guard's lines are not errors
_SIGNAL = re.compile(r"^\s*traceback\s*: Signal (\d+) \((\w+)\)", re.M)  # torchrun's root-cause record
_RECORD_RANK = re.compile(r"^\s*rank\s*: (\d+)", re.M)


def failure_reason(reasons: Path | None, log_text: str, world: int = 1) -> str:
    """Why a torchrun launch failed, in one line.

    1. The line a failing rank wrote to `reasons`/attempt<k>/rank<N>.txt of the last attempt (a user's error,
       the watchdog's, or the last line of a bug's traceback); of several ranks, the one that wrote first (the
       others mostly fail because it left).
    2. Else, from the log: the last line of the first Python traceback that is not torchrun's own (a rank that
       died before its entry point ran: an import error, a bad argument), or the entry point's last `train:`
       error line.
    3. Else torchrun's root-cause record: a rank killed by a signal (SIGKILL: often the out-of-memory killer).
    4. Else the last line before torchrun's report (which ends in a rule of '=': the line it used to give).
    """
    if reasons is not None and reasons.is_dir() and (line := first_reason(last_attempt(reasons), world)):
        return line

    lines = [_RANK_PREFIX.sub("", line).rstrip() for line in log_text.splitlines()]
    in_traceback = False
    for line in lines:
        if line.startswith("Traceback (most recent call last):"):
            in_traceback = True
        elif in_traceback and line and not line[0].isspace():
            in_traceback = False
            if (m := _EXCEPTION.match(line)) and not any(own in m.group(1) for own in _TORCHRUN_OWN):
                return " ".join(line.split())
    errors = [line for line in lines if line.startswith("train: ") and not _PROGRESS.match(line)]
    if errors:
        return " ".join(errors[-1].removeprefix("train: ").split())
    root = next((i for i, line in enumerate(lines) if line.startswith("Root Cause")), None)
    record = "\n".join(lines[root:]) if root is not None else ""
    if signal := _SIGNAL.search(record):  # "traceback : Signal 9 (SIGKILL) received by PID 1234"
        rank = _RECORD_RANK.search(record)
        who = f"rank {rank.group(1)}" if rank and world > 1 else "the training process"
        hint = " (from outside: often the out-of-memory killer)" if signal.group(2) == "SIGKILL" else ""
        return f"{who} was killed by signal {signal.group(1)} ({signal.group(2)}){hint}"
    report = next((i for i, line in enumerate(lines) if _TORCHRUN_REPORT.search(line)), len(lines))
    meaningful = [line.strip() for line in lines[:report] or lines if line.strip() and set(line.strip()) - set("=-")]
    return " ".join(meaningful[-1].split()) if meaningful else "no output"


def lr_sweep(scout: Mapping, run_cfg: Mapping) -> list[dict]:
    """The rung's learning-rate sweep (scouts.<rung>.lrs): one more run per peak learning rate listed, the rung's
    model and recipe otherwise; the rung's own run (train.optimizer.lr) is the sweep's first point. Under μP
    (train.mup_base_width) the best of them holds for the wider rungs and the full run (RESULTS.md, "μP"):
    the stage prints it and the metrics carry it as best_lr, for `dvc exp run -S train.optimizer.lr=<best_lr>`."""
    lrs = scout.get("lrs", [])
    if not isinstance(lrs, list) or not all(isinstance(x, (int, float)) and not isinstance(x, bool) and x > 0
                                            for x in lrs):
        raise TrainConfigError(f"scouts.*.lrs: expected a list of positive learning rates, got {lrs!r}")
    train = run_cfg["train"]
    return [{"model": run_cfg["model"], "train": {**train, "optimizer": {**train.get("optimizer", {}), "lr": float(lr)}}}
            for lr in lrs]


def seed_replicas(scout: Mapping, run_cfg: Mapping) -> list[dict]:
    """The rung's seed replicas beyond the first (scouts.<rung>.seeds, default 1): replica k initialises with
    the rung's seed + k and trains on the rung's windows in an order drawn with seed + k. The spread of the
    replicas' final scores is the seed noise of the rung (tokenmill.evaluate.signal)."""
    seeds = scout.get("seeds", 1)
    if not isinstance(seeds, int) or isinstance(seeds, bool) or seeds < 1:
        raise TrainConfigError(f"scouts.*.seeds: expected a positive integer, got {seeds!r}")
    train = run_cfg["train"]
    return [{"model": run_cfg["model"],
             "train": {**train, "seed": train.get("seed", 0) + k, "data_seed": (train.get("data_seed") or 0) + k}}
            for k in range(1, seeds)]


def run_key(run_cfg: Mapping, inputs: Mapping[str, str]) -> str:
    blob = json.dumps({"config": run_cfg, "inputs": dict(sorted(inputs.items()))}, sort_keys=True)
    return hashlib.sha1(blob.encode()).hexdigest()[:16]


def content_digest(out_dir: Path) -> str:
    h = hashlib.sha1()
    for name in CONTENT:
        path = out_dir / name
        files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
        for p in files:
            if p.exists():
                h.update(f"{p.relative_to(out_dir)}\x00{sha1_file(p)}\n".encode())
    return h.hexdigest()


def torchrun_command(launch: LaunchConfig, config_file: Path, data_root: Path, out_dir: Path, live_dir: Path | None,
                     plan_dir: Path, tokens_dir: Path, evalset: Path | None = None) -> list[str]:
    """One node: `torchrun --standalone`. Several: every node runs this same command with
    TOKENMILL_RDZV_ENDPOINT=<head-host>:<port> set (docs/training.md shows the Slurm script)."""
    nnodes, nproc = launch.nnodes, launch.nproc_per_node
    # A failed or hung rank ends its attempt; torchrun starts every rank again, max_restarts times, and each
    # attempt resumes from the newest complete checkpoint (tokenmill.train.faults).
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={nproc}",
           f"--max-restarts={launch.max_restarts}"]
    if nnodes == 1:
        cmd.append("--standalone")
    else:
        endpoint = os.environ.get("TOKENMILL_RDZV_ENDPOINT")
        if not endpoint:
            raise LaunchError(f"train.launch.nnodes is {nnodes}: set TOKENMILL_RDZV_ENDPOINT=<head-host>:<port> "
                              f"on every node (docs/training.md)")
        cmd += [f"--nnodes={nnodes}", "--rdzv-backend=c10d", f"--rdzv-endpoint={endpoint}",
                f"--rdzv-id={config_file.parent.name}"]
    return cmd + ["-m", "tokenmill.train", "--config", str(config_file), "--data-root", str(data_root),
                  "--out", str(out_dir), "--plan", str(plan_dir), "--tokens", str(tokens_dir)] + \
        (["--live", str(live_dir)] if live_dir is not None else []) + \
        (["--evalset", str(evalset)] if evalset is not None else [])


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 6)


def run_metrics(summary: Mapping, replicas: list[Mapping] = (), sweep: list[tuple[float, Mapping]] = ()) -> dict:
    """What `dvc exp show` compares of a run: its size and final losses; the mean over buckets of the final
    held-out loss (heldout_mean) and the in-loop benchmark means, each beside its standard error, its σ over
    the noise window (loop.py) and, with seed replicas, its spread over the seeds (*_seed_sigma). The
    (value, σ) of each figure are tokenmill.evaluate.signal.run_figures', the ladder's too. With a learning-rate
    sweep ((peak lr, summary) of each run, the rung's own first): each one's heldout_mean and the best_lr."""
    metrics = {k: summary.get(k) for k in ("steps", "tokens", "params", "final_train_loss_mean10",
                                            "heldout_loss", "skipped_steps", "rollbacks", "health_alarms") if k in summary}
    runs = [run_figures(s) for s in (summary, *replicas)]
    stderr = summary.get("benchmarks_mean") or {}
    for figure, (value, sigma) in runs[0].items():
        if figure != "heldout_mean" and not figure.startswith("benchmarks_mean."):
            continue  # per-benchmark figures stay in summary.json
        key = figure.replace("benchmarks_mean.", "benchmarks_")
        metrics[key] = round(value, 4) if key == "heldout_mean" else _round(value)
        if f"{figure[len('benchmarks_mean.'):]}_stderr" in stderr:
            metrics[f"{key}_stderr"] = _round(stderr[f"{figure[len('benchmarks_mean.'):]}_stderr"])
        metrics[f"{key}_sigma"] = _round(sigma)
        values = [r[figure][0] for r in runs if figure in r]
        if len(values) > 1:
            mean = sum(values) / len(values)
            metrics[f"{key}_seed_sigma"] = _round((sum((v - mean) ** 2 for v in values) / (len(values) - 1)) ** 0.5)
    if replicas:
        metrics["seeds"] = 1 + len(replicas)
    if sweep:
        points = sorted((lr, run_figures(s)["heldout_mean"][0]) for lr, s in sweep)
        metrics["lr_sweep"] = [{"lr": lr, "heldout_mean": round(v, 4)} for lr, v in points]
        metrics["best_lr"] = min(points, key=lambda p: p[1])[0]
    return metrics


def rank_code() -> str:
    """The version of the code a rank runs: every module of the package (a rank imports the training loop, the
    evaluation's scoring, the canaries, ...; this process imports only the launcher)."""
    return code_version(sorted(PACKAGE_DIR.rglob("*.py")))


def finished(out_dir: Path, record: Path, code: str) -> bool:
    """Whether out_dir holds a run finished by this code: its summary, the last file train() writes (after
    final/), and the run record of that launch naming this code. Another code version relaunches it: the run
    resumes at its last step and its final duties (evaluations, exposure, use of context) run again as the
    new code computes them. A workspace without the record (a fresh clone, an experiment's copy) relaunches."""
    if not ((out_dir / "summary.json").is_file() and (out_dir / "final").is_dir() and record.is_file()):
        return False
    try:
        return json.loads(record.read_text()).get("rank_code") == code
    except ValueError:
        return False


def launch(stage: str, cmd: list[str], launch_cfg: LaunchConfig, runs_dir: str | Path, node: str) -> list[dict]:
    """Run torchrun's ranks with the log in runs/<stage><node>.log; the restarts it made (each with its cause),
    or LaunchError naming why the run failed."""
    log = Path(runs_dir) / f"{stage}{node}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    end_with_launcher(stage)  # under dvc: this stage ends when dvc does ...
    with tempfile.TemporaryDirectory(prefix="tokenmill-train-reasons-") as reasons:
        with open(log, "w") as f:  # ... and torchrun with this stage
            proc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env={**env, REASONS_ENV: reasons},
                                  preexec_fn=functools.partial(die_with_parent, os.getpid()))
        world = launch_cfg.nnodes * launch_cfg.nproc_per_node
        restarted = restarts(Path(reasons), world, log.read_text(errors="replace"))
        for r in restarted:
            print(f"{stage}: restart {r['restart']} (resumed from step {r['resumed_from_step']}): {r['cause']}",
                  file=sys.stderr)
        if proc.returncode != 0:
            reason = failure_reason(Path(reasons), log.read_text(errors="replace"), world)
            tried = f" after {len(restarted)} restart(s)" if restarted else ""
            raise LaunchError(f"{stage}: training failed{tried}: {reason} (exit {proc.returncode}; full log: {log})")
    return restarted


def run_train_stage(stage: str, run_cfg: Mapping, data_root: str | Path, plan_stage: str, token_stage: str,
                    out_dir: str | Path, live_dir: str | Path | None, metrics_path: str | Path | None,
                    runs_dir: str | Path = "runs", metrics_group: str | None = None,
                    evalset_stage: str | None = None, replicas: list[Mapping] = (), sweep: list[Mapping] = (),
                    start_from: Path | None = None) -> dict:
    """Train (or resume) one run; returns its summary. Errors in the configuration stop it before launch.
    evalset_stage: the stage whose requests.parquet the run scores at every evaluation (in-loop benchmarks).
    replicas: seed replicas of a scout rung (seed_replicas), trained after it into out_dir/replicas/seed<k>,
    each with its own manifest and run record (stage "<stage>#seed<k>"); the metrics then carry the seed
    spread. sweep: a rung's learning-rate sweep (lr_sweep), its runs trained after the replicas into
    out_dir/lr_sweep/lr<k> (stage "<stage>#lr<k>"); the metrics then carry each one's held-out loss and the
    best_lr. live_dir and metrics_path None: no DVCLive, no metrics file (a replica).

    metrics_group nests the metrics (scouts: "scout"), so `dvc exp show` keeps the full run's top-level
    names (heldout_mean) to itself.

    start_from: a complete checkpoint of another run (checkpoints/step_<N>) this run starts from, copied into its
    own checkpoints when it has none: a branch of that run (an anneal, tokenmill.anneal) resumes at step N."""
    started = time.perf_counter()
    train = parse_run(run_cfg).train  # one line naming the key, before any process starts ...
    mesh_shape(train, train.launch.nnodes * train.launch.nproc_per_node)  # ... or the layout that misfits the launch
    for replica in (*replicas, *sweep):
        parse_run(replica)
    data_root, out_dir = Path(data_root), Path(out_dir)
    clean_leftovers(stage, out_dir)  # killed runs' temporaries anywhere in the workspace, as every stage
    live_dir = Path(live_dir) if live_dir is not None else None
    plan_dir, tokens_dir = data_root / plan_stage, data_root / token_stage
    inputs = {plan_stage: input_id(plan_dir), token_stage: input_id(tokens_dir)}
    evalset = data_root / evalset_stage / "requests.parquet" if evalset_stage else None
    if evalset_stage:
        inputs[evalset_stage] = input_id(data_root / evalset_stage)
    if start_from is not None:  # the run it branches from (<run>/checkpoints/step_<N>): a retrained one is new
        inputs["start_from"] = f"{input_id(Path(start_from).parent.parent)}:{Path(start_from).name}"
    key = run_key(run_cfg, inputs)

    stamp = out_dir / RUN_KEY
    if out_dir.exists() and (not stamp.exists() or json.loads(stamp.read_text())["run_key"] != key):
        shutil.rmtree(out_dir)  # another run's checkpoints: never resume across configurations or data
        if live_dir is not None:
            shutil.rmtree(live_dir, ignore_errors=True)
    out_dir.mkdir(parents=True, exist_ok=True)
    if start_from is not None and not any((out_dir / "checkpoints").glob("step_*/.metadata")):
        if not (Path(start_from) / ".metadata").is_file():
            raise LaunchError(f"{stage}: no complete checkpoint at {start_from} to start from")
        shutil.copytree(start_from, out_dir / "checkpoints" / Path(start_from).name, dirs_exist_ok=True)
    write_json(stamp, {"run_key": key, "config": run_cfg, "inputs": inputs})
    config_file = out_dir / "run_config.json"
    write_json(config_file, run_cfg)

    # Every node of a multi-node job runs this stage; on a shared filesystem each keeps its own torchrun log.
    node = "" if train.launch.nnodes == 1 else f".{platform.node()}-{os.getpid()}"
    cmd = torchrun_command(train.launch, config_file, data_root, out_dir, live_dir, plan_dir, tokens_dir, evalset)
    restarted: list[dict] = []
    code = rank_code()
    if finished(out_dir, Path(runs_dir) / f"{stage}.json", code):
        # The same key, the same code, the run's last file written: relaunched, torchrun would load the final
        # checkpoint and write every file again, byte for byte (about 11 s for a scout of the tiny test run,
        # which takes 17 s to train).
        print(f"{stage}: already trained on these inputs with this configuration; not relaunched", file=sys.stderr)
        cmd = None
    else:
        restarted = launch(stage, cmd, train.launch, runs_dir, node)

    summary = json.loads((out_dir / "summary.json").read_text())
    digest = content_digest(out_dir)
    write_json(out_dir / "manifest.json", {"stage": stage, "input_stage": plan_stage, "run_key": key,
                                           "digest": digest, "summary": summary})
    replica_root = out_dir / "replicas"
    kept = {f"seed{k}" for k in range(1, len(replicas) + 1)}
    for old in sorted(replica_root.glob("*")) if replica_root.is_dir() else ():
        if old.name not in kept:  # a replica of a larger seed count than the current one
            shutil.rmtree(old)
    replica_summaries = [run_train_stage(f"{stage}#seed{k}", replica, data_root, plan_stage, token_stage,
                                         replica_root / f"seed{k}", None, None, runs_dir, None, evalset_stage)
                         for k, replica in enumerate(replicas, 1)]
    # Outside replicas/: the forecast reads every replica there as a seed of the rung.
    sweep_root = out_dir / "lr_sweep"
    if sweep_root.is_dir() and not sweep:
        shutil.rmtree(sweep_root)
    swept = [(c["train"]["optimizer"]["lr"], run_train_stage(f"{stage}#lr{k}", c, data_root, plan_stage, token_stage,
                                                             sweep_root / f"lr{k}", None, None, runs_dir, None,
                                                             evalset_stage))
             for k, c in enumerate(sweep, 1)]
    if swept:
        swept.insert(0, (train.optimizer.lr, summary))
    if metrics_path is not None:
        metrics = run_metrics(summary, replica_summaries, swept)
        write_json(metrics_path, {metrics_group: metrics} if metrics_group else metrics)
        if swept:
            points = ", ".join(f"{p['lr']:g}: {p['heldout_mean']:.4f}" for p in metrics["lr_sweep"])
            print(f"{stage}: learning-rate sweep, held-out loss per peak lr: {points}; best {metrics['best_lr']:g} "
                  f"(`dvc exp run -S train.optimizer.lr={metrics['best_lr']:g}` hands it to the ladder and the "
                  f"full run)")

    live_metrics = live_dir / "metrics.json" if live_dir is not None else None
    perf = json.loads(live_metrics.read_text()).get("perf", {}) if live_metrics and live_metrics.exists() else {}
    write_json(Path(runs_dir) / f"{stage}.json", run_record(
        stage, run_cfg, inputs, ("torch", "numpy", "safetensors", "dvclive"), started, input_stage=plan_stage,
        digest=digest, counts={}, timing=perf, command=cmd, log=str(Path(runs_dir) / f"{stage}{node}.log"),
        restarts=restarted, rank_code=code))
    return summary
