"""The training loop: train(run_cfg, data_root, out_dir, live_dir) -> summary.

Runs in one plain process (it creates a 1-process gloo group) or under torchrun (env:// init, NCCL on GPU).
Per step: the step's global batch from the plan (this rank's slice, in micro-batches), forward and backward
(loss_parallel under TP), the global loss and gradient norm, a verdict (non-finite, loss spike, gradient-norm
spike: skip the update and record the step's documents), clipping, AdamW (train_step). Around the step the loop
is cadence only (_run): the run's periodic duties (evaluation, checkpoints, rollback, health alarms, DVCLive on
rank 0, canaries, the watchdog, the throughput, the faults tests inject) are objects of duties.py that it calls
at their hooks.

Output directory (out_dir), every file a function of config + data only (timings go to DVCLive and to the
returned summary's "timing"):
    checkpoints/step_<N>/   DCP checkpoints, the newest `train.checkpoint.keep` (see checkpoint.py), and the one
                            where WSD's decay begins (train.checkpoint.keep_decay_start: anneals branch there)
    steps.parquet           one row per step: STEPS
    spikes.parquet          one row per skipped step with the doc_ids of its batch: SPIKES
    rollbacks.parquet       one row per rollback of an unrecovered loss excursion: ROLLBACKS (rollback.py)
    heldout.parquet         held-out loss per bucket at each evaluation: HELDOUT
    benchmarks.parquet      in-loop benchmark scores at each evaluation (when an evalset is given): BENCHMARKS
    canaries.parquet        the exposure of each planted canary in the final model: tokenmill.canaries.EXPOSURE
    final/model.safetensors consolidated float32 weights (names of model.py; output.weight omitted when tied)
    final/config.json       model config, vocab_size, eos_id, seq_len: all the export stage needs
    summary.json            the summary without its "timing" part
"""

from __future__ import annotations

import datetime
import json
import math
import os
import shutil
import socket
from pathlib import Path
from typing import Mapping

import numpy as np
import pyarrow as pa
import torch
import torch.distributed as dist
from safetensors.torch import save_file
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

from tokenmill import schema
from tokenmill.canaries import EXPOSURE
from tokenmill.evaluate.evalset import EvalSet, benchmark_means
from tokenmill.evaluate.signal import figure_series
from tokenmill.train.checkpoint import Checkpointer
from tokenmill.train.config import RunConfig, TrainConfigError, model_size, parse_run, run_steps, token_budget
from tokenmill.train.data import PlanStream, heldout_sequences
from tokenmill.train.duties import (
    Canaries,
    ContextUse,
    Checkpointing,
    Evaluation,
    FaultInjection,
    HealthAlarms,
    Heartbeat,
    LiveLogging,
    Rollback,
    Run,
    Step,
    Throughput,
)
from tokenmill.train.faults import attempt, record_resume
from tokenmill.train.health import HEALTH, HEALTH_ALARMS, Health
from tokenmill.train.metrics import peak_flops
from tokenmill.train.rollback import ROLLBACKS, replays, skipped
from tokenmill.train.runstate import TrainError, complete_state, new_state, set_rng_state
from tokenmill.train.schedule import Schedule, make_schedule
from tokenmill.train.trainer import Trainer, _world_mean, param_groups  # noqa: F401  (tests and benchmarks reach them here)

STEPS = pa.schema([
    ("step", pa.int64()),  # 0-based; step N fed stream tokens [W*T, (W+1)*T) of its window W
    ("stream_window", pa.int64()),  # W: N in the plan's order; another with train.data_seed
    ("phase", pa.string()),  # plan phase of the step's first token
    ("tokens_hash", pa.string()),  # blake2b-16 of the step's input tokens as uint32 LE
    ("tokens", pa.int64()),  # stream tokens fed up to and including this step
    ("loss", pa.float64()),  # mean cross-entropy over the global batch, before the update
    ("grad_norm", pa.float64()),  # global L2 norm before clipping
    ("lr", pa.float64()),
    ("skipped", pa.bool_()),
    # nonfinite | loss_spike | grad_norm_spike | rolled_back (a batch a rollback skips: no forward, no loss);
    # null when applied
    ("skip_reason", pa.string()),
    ("replay", pa.int64()),  # how many rollbacks undid this step before this pass (0: its first pass)
])
SPIKES = pa.schema([
    ("step", pa.int64()),
    ("reason", pa.string()),
    ("loss", pa.float64()),
    ("grad_norm", pa.float64()),
    ("window_mean_loss", pa.float64()),
    ("window_mean_grad_norm", pa.float64()),
    ("doc_ids", pa.list_(pa.string())),  # documents with tokens in the step's inputs or targets
])
HELDOUT = pa.schema([("step", pa.int64()), ("bucket", pa.string()), ("loss", pa.float64()),
                     ("sequences", pa.int64())])
# In-loop benchmark scores (tokenmill.evaluate.evalset) per evaluation: one row per benchmark and metric.
BENCHMARKS = pa.schema([("step", pa.int64()), ("benchmark", pa.string()), ("metric", pa.string()),
                        ("all", pa.float64()), ("all_stderr", pa.float64()), ("clean", pa.float64()),
                        ("clean_stderr", pa.float64())])


# ---------------------------------------------------------------------------------------------------------
# Process group


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def init_distributed(device: str, timeout_seconds: float | None = None) -> tuple[torch.device, bool]:
    """(device, whether this call created the process group). torchrun: env://; otherwise one process.
    timeout_seconds: how long a collective waits for a peer before it fails (train.launch)."""
    if device == "cuda" and not torch.cuda.is_available():
        # One line, not torch's traceback from set_device: an h100 scale preset run on a machine without a GPU.
        raise TrainConfigError("train.device is cuda (the h100 scale presets), but torch sees no CUDA device "
                               f"here (torch {torch.__version__}): run on a GPU node, or use -S scale=cpu_demo")
    use_cuda = device == "cuda" or (device == "auto" and torch.cuda.is_available())
    if use_cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    created = False
    if not dist.is_initialized():
        # cpu:gloo beside NCCL serves object collectives (checkpoint choice) without touching the GPU.
        backend = "cpu:gloo,cuda:nccl" if use_cuda else "gloo"
        # device_id binds the group to this rank's GPU: NCCL starts now instead of at the first collective,
        # and the DeviceMesh's sub-groups split its communicator instead of each creating one.
        bound = {"device_id": torch.device("cuda", torch.cuda.current_device())} if use_cuda else {}
        if timeout_seconds is not None:
            bound["timeout"] = datetime.timedelta(seconds=timeout_seconds)
        if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
            # torchrun's store outlives a failed attempt (train.launch.max_restarts): a restarted attempt read
            # the dead attempt's gloo addresses from it and could not connect (measured: "connectFullMesh
            # failed ... Connection refused"). Each attempt's keys under their own prefix.
            store, rank, world = next(dist.rendezvous("env://", timeout=bound.get("timeout", datetime.timedelta(minutes=30))))
            store = dist.PrefixStore(f"tokenmill/attempt{attempt()}", store)
            dist.init_process_group(backend, store=store, rank=rank, world_size=world, **bound)
        else:
            dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{_free_port()}", rank=0, world_size=1,
                                    **bound)
        created = True
    return torch.device("cuda", torch.cuda.current_device()) if use_cuda else torch.device("cpu"), created


def noise_window(total_steps: int, logging) -> set[int]:
    """The last step and noise_points - 1 more, noise_stride apart: the evaluations whose spread is σ."""
    return {s for s in (total_steps - i * logging.noise_stride for i in range(logging.noise_points)) if s > 0}


def evaluation_steps(total_steps: int, logging) -> set[int]:
    """Steps after which the run evaluates: every eval_interval, and the noise window (the last step in it)."""
    return set(range(logging.eval_interval, total_steps + 1, logging.eval_interval)) | noise_window(total_steps, logging)


# ---------------------------------------------------------------------------------------------------------
# Spike guard


def spike_verdict(loss: float, grad_norm: float, losses: list[float], norms: list[float], k: float,
                  min_history: int) -> str | None:
    """nonfinite, loss_spike or grad_norm_spike when the step must not update the model, else None.

    A spike is a value above the window's mean by more than k standard deviations. The standard deviation
    has a floor of 1% of the mean: on a smooth stretch it can get so small that noise would trip the guard.
    Only upward moves count: the loss falling fast early in training is not an anomaly.
    """
    if not (math.isfinite(loss) and math.isfinite(grad_norm)):
        return "nonfinite"
    if len(losses) < min_history:
        return None
    for value, window, reason in ((loss, losses, "loss_spike"), (grad_norm, norms, "grad_norm_spike")):
        mean, std = float(np.mean(window)), float(np.std(window))
        if value > mean + k * max(std, 0.01 * abs(mean)):
            return reason
    return None


# ---------------------------------------------------------------------------------------------------------
# One step


def train_step(trainer: Trainer, step: int, lr: float, state: dict, spike, health: Health | None = None) -> dict:
    """One optimizer step, all of it: the step's batch (this rank's slice), forward and backward over its
    micro-batches, the global loss and gradient norm (one device-to-host read: each read waits for the GPU),
    the spike verdict, then the clipped update or the skip. Returns the step's row of STEPS; a skipped step
    also gets its row of SPIKES, with the documents it held. `state` carries the spike window and the
    rollbacks across steps (and checkpoints): a batch a rollback skips is read (its token hash) but neither
    trained on nor judged. With `health` (the loop passes it at the logging interval), the step also measures
    each parameter group's gradient norm and update ratio into the rows of HEALTH."""
    batch = trainer.loader.batch(step)
    row = {"step": step, "stream_window": trainer.loader.window(step), "phase": batch.phase,
           "tokens": (step + 1) * trainer.cfg.train.tokens_per_step, "lr": lr,
           "replay": replays(state["rollbacks"], step)}
    if step in skipped(state["rollbacks"]):
        return {**row, "tokens_hash": batch.tokens_hash, "loss": None, "grad_norm": None, "skipped": True,
                "skip_reason": "rolled_back"}
    trainer.use_length(batch.inputs.shape[1])  # RoPE's base of the step's phase (train.rope_scaling)
    ce = trainer.forward_backward(batch.inputs, batch.targets)
    norm_t = trainer.grad_norm()
    group_norms = health.grad_norms() if health is not None else {}  # before clipping, as grad_norm
    loss, norm = torch.stack([_world_mean(ce), norm_t.float()]).tolist()
    # With the guard disabled only non-finite values are caught (a history that is never long enough).
    reason = spike_verdict(loss, norm, state["losses"], state["norms"], spike.k_sigma,
                           spike.min_history if spike.enabled else math.inf)
    window_means = (float(np.mean(state["losses"])) if state["losses"] else None,
                    float(np.mean(state["norms"])) if state["norms"] else None)
    if math.isfinite(loss) and math.isfinite(norm):
        # Skipped steps enter the window too: a lasting change of level (a new phase, the decay) is absorbed
        # after a few steps instead of locking the run out; an isolated bad batch is still judged against the
        # window before it. Measured: with accepted steps only, a tiny model's gradient norm doubled at step 22
        # and every later step was skipped.
        state["losses"] = (state["losses"] + [loss])[-spike.window:]
        state["norms"] = (state["norms"] + [norm])[-spike.window:]
    ratios: dict[str, float] = {}
    if reason is None:
        before = health.snapshot() if health is not None else None
        trainer.clip_and_step(norm_t, lr)
        if health is not None:
            ratios = health.update_ratios(before)
        state["consecutive"] = 0
    else:
        trainer.optimizer.zero_grad(set_to_none=True)
        state["consecutive"] += 1
        state["spikes"].append({
            "step": step, "reason": reason, "loss": loss, "grad_norm": norm,
            "window_mean_loss": window_means[0], "window_mean_grad_norm": window_means[1],
            "doc_ids": trainer.loader.doc_ids(step)})
    if health is not None:
        health.record(step, group_norms)
        state["health"] += [{"step": step, "group": g, "grad_norm": v, "update_ratio": ratios.get(g)}
                            for g, v in group_norms.items()]
    # The hash was computed on rank 0's hashing thread while the step ran (data.BatchLoader); other ranks: None.
    return {**row, "tokens_hash": batch.tokens_hash, "loss": loss, "grad_norm": norm, "skipped": reason is not None,
            "skip_reason": reason}


# ---------------------------------------------------------------------------------------------------------
# The run


def plan_steps(cfg: RunConfig, stream: PlanStream, params: int) -> int:
    """Steps this run takes: its token budget (a scout's is smaller than the plan's), the plan, max_steps."""
    t = cfg.train
    steps = run_steps(t, params, stream.total_tokens)
    if steps <= 0:
        budget = token_budget(t.token_budget, t.tokens_per_param, params)
        raise TrainError(f"no full step fits: the plan holds {stream.total_tokens} tokens and the budget {budget}, "
                         f"a step takes {t.tokens_per_step} (seq_len x global_batch)")
    return steps


def run_schedule(cfg: RunConfig, stream: PlanStream, total_steps: int) -> Schedule:
    """The run's learning-rate schedule: WSD decays over the plan's decay phase (train.schedule.decay_phase)."""
    t = cfg.train
    decay_at = stream.phase_start(t.schedule.decay_phase) if t.schedule.decay_phase else None
    return make_schedule(t.schedule, t.optimizer.lr, total_steps, None if decay_at is None else decay_at // t.tokens_per_step)


def _write_outputs(out_dir: Path, state: dict, trainer: Trainer, cfg: RunConfig, summary: dict) -> None:
    """Rank 0 writes the tables and summary; every rank takes part in gathering the final weights."""
    full = get_model_state_dict(trainer.model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if dist.get_rank() != 0:
        return
    schema.write_parquet(state["records"], STEPS, out_dir / "steps.parquet")
    schema.write_parquet(state["spikes"], SPIKES, out_dir / "spikes.parquet")
    schema.write_parquet(state["rollbacks"], ROLLBACKS, out_dir / "rollbacks.parquet")
    schema.write_parquet(state["heldout"], HELDOUT, out_dir / "heldout.parquet")
    schema.write_parquet(state["bench"], BENCHMARKS, out_dir / "benchmarks.parquet")
    schema.write_parquet(state["health"], HEALTH, out_dir / "health.parquet")
    schema.write_parquet(state["health_alarms"], HEALTH_ALARMS, out_dir / "health_alarms.parquet")
    schema.write_parquet(state["canaries"], EXPOSURE, out_dir / "canaries.parquet")
    final, tmp = out_dir / "final", out_dir / ".tmp-final"
    tmp.mkdir(parents=True, exist_ok=True)
    weights = {k: v.float().contiguous() for k, v in full.items()
               if not (cfg.model.tie_embeddings and k == "output.weight")}
    save_file(weights, str(tmp / "model.safetensors"))
    (tmp / "config.json").write_text(json.dumps({
        # The model as it ended: RoPE's base of the last phase, the longest sequence it trained on (a long-context
        # phase changes both; the export writes them, so transformers' logits are tokenmill's at that length).
        "model": {**cfg.model.model_dump(), "rope_theta": trainer.model.rope_theta},
        "vocab_size": trainer.stream.vocab_size, "eos_id": trainer.stream.eos_id,
        "seq_len": trainer.loader.longest_in(summary["steps"]), "width_mult": cfg.train.width_mult(cfg.model),
        "format": "tokenmill.train.model.Transformer state dict, float32"},
        indent=2, sort_keys=True) + "\n")
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    tmp_summary = out_dir / ".summary.json.tmp"
    tmp_summary.write_text(json.dumps({k: v for k, v in summary.items() if k != "timing"}, indent=2,
                                      sort_keys=True) + "\n")
    os.replace(tmp_summary, out_dir / "summary.json")


def train(run_cfg: Mapping, data_root: str | Path, out_dir: str | Path, live_dir: str | Path | None,
          tokens_dir: str | Path | None = None, plan_dir: str | Path | None = None,
          stop_after: int | None = None, evalset: str | Path | None = None) -> dict:
    """Train (or resume) the run described by {"model": ..., "train": ...} on data_root's plan.

    tokens_dir and plan_dir default to data_root/tokenize and data_root/mixture. Returns the summary
    (also written to out_dir/summary.json without "timing"). Resumes from out_dir/checkpoints when a
    complete checkpoint is there, whatever the layout it was written under.
    stop_after: leave after this many steps with a checkpoint and without final outputs, as a job that
    reaches its time limit would; the next call resumes there. The schedule still spans the whole run.
    evalset: the evalset stage's requests.parquet, scored at every evaluation (none: held-out loss only).
    """
    cfg = parse_run(run_cfg)
    device, created = init_distributed(cfg.train.device, cfg.train.launch.collective_timeout_seconds)
    try:
        stream = PlanStream(tokens_dir or Path(data_root) / "tokenize", plan_dir or Path(data_root) / "mixture")
        requests = EvalSet(evalset, cfg.train.seq_len) if evalset is not None else None
        return _run(cfg, stream, device, Path(out_dir), Path(live_dir) if live_dir else None, stop_after, requests)
    finally:
        if created:
            dist.destroy_process_group()


def _set_up(cfg: RunConfig, stream: PlanStream, device: torch.device, out_dir: Path,
            stop_after: int | None) -> tuple[Run, FaultInjection]:
    """The run's trainer, schedule and checkpointer, and its state: resumed from the newest checkpoint, or new."""
    t = cfg.train
    size = model_size(cfg.model, stream.vocab_size, t.seq_len)
    total_steps = plan_steps(cfg, stream, size["params"])
    trainer = Trainer(cfg, stream, device)
    if t.data_seed is not None:  # the run's own windows in a seeded order, phase by phase
        trainer.loader.order = trainer.loader.seeded_order(total_steps, t.data_seed)
    schedule = run_schedule(cfg, stream, total_steps)
    rank, devices = dist.get_rank(), dist.get_world_size()
    fault = FaultInjection.from_env(rank, devices)
    asynchronous = t.checkpoint.asynchronous if t.checkpoint.asynchronous != "auto" else device.type == "cuda"
    ckpt = Checkpointer(out_dir / "checkpoints", t.checkpoint.keep, kill_at=fault.get("kill_in_checkpoint", None),
                        asynchronous=asynchronous, write_delay=max(fault.get("slow_checkpoint", {0})))
    ckpt.clean()
    state = ckpt.load_latest(trainer.model, trainer.optimizer)
    resumed = state is not None
    if resumed:
        set_rng_state(state["rng"])
        if state["step"] > total_steps:
            raise TrainError(f"the checkpoint in {ckpt.root} is at step {state['step']}, past this run's "
                             f"{total_steps} steps")
    else:
        state = new_state()
    if rank == 0:
        record_resume(state["step"])  # a restarted attempt: the step it resumed from (tokenmill.train.faults)
    complete_state(state)
    peak = peak_flops(torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu", t.logging.peak_flops)
    run = Run(cfg, trainer, state, ckpt, schedule, total_steps, size, device, resumed, stop_after, rank, devices, peak)
    run.health = Health(trainer.model, t.health, state["health_state"]) if t.health.enabled else None
    return run, fault


def _run(cfg: RunConfig, stream: PlanStream, device: torch.device, out_dir: Path, live_dir: Path | None,
         stop_after: int | None, requests: EvalSet | None = None) -> dict:
    """The cadence of a run: the set-up, then each step between its duties' hooks (duties.py), then the end."""
    t = cfg.train
    run, fault = _set_up(cfg, stream, device, out_dir, stop_after)
    heldout = heldout_sequences(stream.tokens_dir, stream.plan_dir, t.seq_len, t.logging.eval_sequences,
                                stream.eos_id, stream.dtype)
    live = LiveLogging.open(run, live_dir)  # rank 0 with a live folder: DVCLive (run.live)
    evaluation = Evaluation(heldout, requests, evaluation_steps(run.total_steps, t.logging),
                            noise_window(run.total_steps, t.logging))
    throughput = Throughput()
    # Every hook is called on the duties in this one order, the order of the run's side effects: before a step
    # the watchdog's beat, the faults, the step's clock; after it the clock, a rollback (no later duty sees an
    # undone step), health, DVCLive, the evaluation, the checkpoint; at the end the canaries and the use of context
    # are scored before the watchdog and the profiler close.
    duties = [Canaries(), ContextUse(), Heartbeat(t.launch.watchdog_seconds, run.rank), fault, throughput, Rollback(),
              HealthAlarms(), *([live] if live is not None else []), evaluation, Checkpointing()]
    if run.state["step"] == 0 and not run.state["heldout"]:
        evaluation.at_evaluation(run, 0)
    for duty in duties:
        duty.at_start(run)
    step = run.state["step"]
    while step < run.total_steps:
        now = Step.of(run, step)
        for duty in duties:
            duty.before_step(run, now)
        now.record = train_step(run.trainer, step, now.lr, run.state, t.spike, now.probe)
        run.state["records"].append(now.record)
        reason, loss = now.record["skip_reason"], now.record["loss"]
        if reason is not None and reason != "rolled_back" and run.rank == 0:
            print(f"train: step {step} skipped ({reason}: loss {loss:.4f}, grad norm {now.record['grad_norm']:.4f})",
                  flush=True)
        run.state["step"] = step + 1
        # True from a duty (Rollback): the run is back at a checkpoint, and any() asks no later duty about the step.
        if any(duty.after_step(run, now) for duty in duties):
            for duty in duties:
                duty.at_rollback(run)
            step = run.state["step"]
            continue
        if now.stop:
            run.stopped_at = step + 1
            break
        step += 1
    for duty in duties:
        duty.at_end(run)
    summary = None
    if run.stopped_at is None:
        summary = _summary(cfg, run.state, run.size, run.total_steps)
        summary["timing"] = throughput.timing(run)
        _write_outputs(out_dir, run.state, run.trainer, cfg, summary)
    for duty in duties:
        duty.at_exit(run, summary)
    return summary or {"stopped_at": run.stopped_at, "steps": run.total_steps, "timing": throughput.timing(run)}


def _summary(cfg: RunConfig, state: dict, size: dict, total_steps: int) -> dict:
    t = cfg.train
    applied = [r for r in state["records"] if not r["skipped"]]
    final_step = state["heldout"][-1]["step"] if state["heldout"] else None
    return {
        "steps": total_steps, "tokens": total_steps * t.tokens_per_step,
        "skipped_steps": sum(r["skipped"] for r in state["records"]),
        "rollbacks": len(state["rollbacks"]),
        "health_alarms": len(state["health_alarms"]),
        # Mean exposure (bits) of the planted canaries per planned visit count: does memorisation rise with it?
        "canary_exposure": {str(v): float(np.mean([c["exposure"] for c in state["canaries"] if c["planned_visits"] == v]))
                            for v in sorted({c["planned_visits"] for c in state["canaries"]})},
        "final_train_loss": applied[-1]["loss"] if applied else None,
        "final_train_loss_mean10": float(np.mean([r["loss"] for r in applied[-10:]])) if applied else None,
        "heldout_loss": {h["bucket"]: h["loss"] for h in state["heldout"] if h["step"] == final_step},
        "initial_heldout_loss": {h["bucket"]: h["loss"] for h in state["heldout"] if h["step"] == 0},
        "params": size["params"], "matmul_params": size["matmul_params"],
        "flops_per_token": size["flops_per_token"], "flops_per_token_causal": size["flops_per_token_causal"],
        "total_flops": size["flops_per_token"] * total_steps * t.tokens_per_step,
        **_benchmark_summary(state, final_step, noise_window(total_steps, t.logging)),
        # Loss by token position and the retrieval probe of the finished model (duties.ContextUse).
        "context": state.get("context"),
    }


def _benchmark_summary(state: dict, final_step: int | None, window: set[int]) -> dict:
    """The final in-loop benchmark scores, their mean over the benchmarks, and the noise of every figure:
    the sample standard deviation of its values over the evaluations of the noise window."""
    series = figure_series(state["heldout"], state["bench"])  # a bucket's own σ too (anneal, value)
    noise = {}
    for name, values in sorted(series.items()):
        points = [v for step, v in values.items() if step in window]
        noise[name] = float(np.std(points, ddof=1)) if len(points) >= 2 else None
    final: dict[str, dict] = {}
    for r in state["bench"]:
        if r["step"] == final_step:
            final.setdefault(r["benchmark"], {})[r["metric"]] = r
    mean = benchmark_means(final)
    return {"benchmarks": {b: {m: {k: r[k] for k in ("all", "all_stderr", "clean", "clean_stderr")}
                               for m, r in sorted(ms.items())} for b, ms in sorted(final.items())},
            "benchmarks_mean": mean, "noise": noise, "noise_steps": sorted(window)}
