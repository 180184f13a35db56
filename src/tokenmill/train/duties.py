"""The periodic duties of a training run, each a small object the loop (loop._run) calls at its hooks.

The loop is cadence: set-up, then for each step `before_step` on every duty, the step (loop.train_step), then
`after_step` on every duty, then `at_end` and `at_exit`. A duty implements the hooks it needs (Duty's are no-ops);
the loop calls each hook on the duties in one fixed order (loop._run's list), the order the loop's side effects
had when they were one function: RNG, checkpoint contents, printed lines and DVCLive calls come in that order.

    Canaries        at the end: the planted canaries' exposure in the finished model
    Heartbeat       the watchdog: a beat before each step (and after evaluations and checkpoints), closed at the end
    FaultInjection  TOKENMILL_FAULT's faults injected before a step (tests only)
    Throughput      each step's time, the profiler, the run's throughput and MFU (the summary's "timing")
    Rollback        an excursion that does not come back, or too many skips in a row: back to a checkpoint
    HealthAlarms    per-layer health at the logging steps: the probe, sigma1/sigma2, the alarms
    LiveLogging     DVCLive (rank 0): the logging steps' metrics, the rollbacks, the whole run's figures last
    Evaluation      held-out loss at each evaluation; benchmarks at the noise window
    Checkpointing   the replica check, checkpoints at the interval, the last step, a stop and the decay start
                    (kept: anneals branch there), the wait for them

What they share is a Run (the configuration, trainer, run state, checkpointer, DVCLive and the timings) and, for
the step under way, a Step (its number, learning rate, cadence flags, record and measurements).
"""

from __future__ import annotations

import os
import resource
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

import torch

from tokenmill.canaries import CanaryRequests
from tokenmill.train import context
from tokenmill.evaluate.evalset import METRICS, benchmark_means
from tokenmill.train.data import _parse_fault, heldout_documents
from tokenmill.train.faults import Watchdog, fire_once
from tokenmill.train.health import Health, collapse, corrupt, optimizer_params, replica_mismatch
from tokenmill.train.metrics import mfu
from tokenmill.train.profile import StepProfiler
from tokenmill.train.rollback import lr_scale, rollback_row, skipped, watch
from tokenmill.train.runstate import TrainError, complete_state, rng_state, set_rng_state, share_token_hashes

if TYPE_CHECKING:
    from tokenmill.train.config import RunConfig
    from tokenmill.train.checkpoint import Checkpointer
    from tokenmill.train.trainer import Trainer
    from tokenmill.train.schedule import Schedule


def _no_beat(step: int) -> None:
    pass


@dataclass
class Run:
    """What the duties of one run share. `state` is the checkpointed run state (runstate.py); a rollback
    replaces its contents in place. `beat` tells the watchdog that the run is alive (Heartbeat sets it)."""
    cfg: RunConfig
    trainer: Trainer
    state: dict
    ckpt: Checkpointer
    schedule: Schedule
    total_steps: int
    size: dict  # config.model_size: parameters and FLOPs per token
    device: torch.device
    resumed: bool = False
    stop_after: int | None = None
    rank: int = 0
    devices: int = 1
    peak: float | None = None  # peak FLOP/s per device (metrics.peak_flops); None: no MFU
    live: Any = None  # DVCLive's Live (rank 0, with a live folder), else None
    health: Health | None = None
    timing: dict = field(default_factory=lambda: {"step_seconds": [], "tokens": 0, "benchmark_eval_seconds": 0.0})
    beat: Callable[[int], None] = _no_beat
    stopped_at: int | None = None  # the steps done when the run left at stop_after


@dataclass
class Step:
    """The step under way, as the duties see it; the hooks fill in what they measure."""
    step: int  # 0-based
    lr: float
    last: bool  # the run's last step
    logging: bool  # a logging step: DVCLive's training metrics and the health probe
    stop: bool  # stop_after reached before the last step: checkpoint and leave
    probe: Health | None = None  # the health measurements to take in this step (HealthAlarms)
    record: dict | None = None  # the step's row of STEPS (loop.train_step)
    elapsed: float = 0.0  # the step's own seconds (Throughput)
    sigma: float | None = None  # the embedding's sigma1/sigma2, when measured at this step (HealthAlarms)

    @classmethod
    def of(cls, run: Run, step: int) -> Step:
        t = run.cfg.train
        last = step + 1 == run.total_steps
        return cls(step, lr=run.schedule.lr(step) * lr_scale(run.state["rollbacks"], t.rollback), last=last,
                   logging=(step + 1) % t.logging.log_interval == 0 or last,
                   stop=run.stop_after is not None and step + 1 >= run.stop_after and not last)


class Duty:
    """A periodic duty of a run. Every hook is a no-op unless the duty overrides it."""

    def at_start(self, run: Run) -> None:
        """After the set-up and the evaluation of the untrained model, before the first step."""

    def before_step(self, run: Run, now: Step) -> None:
        """Before the step's batch is read; may set now.probe or change now.lr."""

    def after_step(self, run: Run, now: Step) -> bool | None:
        """After the step (now.record; run.state["step"] is the steps done). True: the run went back to a
        checkpoint (run.state is its state), so no later duty sees this step and each gets at_rollback."""

    def at_rollback(self, run: Run) -> None:
        """After a rollback: run.state is the checkpoint's."""

    def at_end(self, run: Run) -> None:
        """The steps are over, or the run leaves at stop_after (run.stopped_at); before the outputs."""

    def at_exit(self, run: Run, summary: dict | None) -> None:
        """After the outputs are written (summary None: the run stopped at stop_after)."""


def peak_memory(device: torch.device) -> int:
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024  # Linux reports KiB


# ---------------------------------------------------------------------------------------------------------


class Canaries(Duty):
    """The planted canaries' exposure in the finished model (tokenmill.canaries), scored as the benchmarks are;
    none when the run stops at stop_after."""

    def at_end(self, run: Run) -> None:
        if run.stopped_at is not None:
            return
        t, trainer = run.cfg.train, run.trainer
        started = time.perf_counter()
        planted = CanaryRequests(trainer.stream.tokens_dir, t.seq_len)
        if len(planted):
            # Short requests (a prefix and a secret, ~40 tokens): as many per forward as a training micro-batch
            # holds tokens. Batch 8 made 1,500 calls of 8 x 48 tokens for 12,000 requests (4.1 s for the
            # 90k-parameter test model, most of it per-call overhead).
            rows = max(8, max(trainer.micro_batch * t.seq_len, 4096) // max(len(w) for w in planted.windows))
            run.state["canaries"] = planted.exposures(trainer.loglikelihoods(planted.windows, planted.n_cont, rows))
        else:
            run.state["canaries"] = []
        run.timing["canary_eval_seconds"] = time.perf_counter() - started


class Heartbeat(Duty):
    """The watchdog (faults.Watchdog): a hung rank ends, named, and torchrun restarts. It starts with the steps
    (the evaluation of the untrained model is not watched) and beats before each step; the duties that may take
    long (Evaluation, Checkpointing) beat it when done, through run.beat. Closed at the end, after the canaries."""

    def __init__(self, seconds: float | None, rank: int):
        self.seconds, self.rank, self.watchdog = seconds, rank, None

    def beat(self, step: int) -> None:
        if self.watchdog is not None:
            self.watchdog.beat(step)

    def at_start(self, run: Run) -> None:
        self.watchdog = Watchdog(self.seconds, self.rank)
        run.beat = self.beat

    def before_step(self, run: Run, now: Step) -> None:
        self.beat(now.step)

    def at_end(self, run: Run) -> None:
        self.watchdog.close()


class FaultInjection(Duty):
    """TOKENMILL_FAULT's faults the loop injects before a step (tests only; data._parse_fault lists them all:
    the loader injects corrupt_step, the checkpointer kill_in_checkpoint and slow_checkpoint)."""

    def __init__(self, spec: str, rank: int = 0, world: int = 1):
        self.fault, self.rank, self.world = _parse_fault(spec), rank, world

    @classmethod
    def from_env(cls, rank: int, world: int) -> FaultInjection:
        return cls(os.environ.get("TOKENMILL_FAULT", ""), rank, world)

    def get(self, kind: str, default=frozenset()):
        """The steps (or seconds) of one kind of fault; `default` when it is not injected."""
        return self.fault.get(kind, default)

    def before_step(self, run: Run, now: Step) -> None:
        self.rank_fault(now.step, optimizer_params(run.trainer.optimizer))
        if now.step in self.get("collapse_embedding") and run.health is not None:
            collapse(run.health.embedding)  # the sharded table (health.py: optimizer_params says why not the module's)
        if now.step in self.get("poison_step") and now.step not in skipped(run.state["rollbacks"]):
            now.lr *= 1000.0  # an update whose loss and gradient norm look normal wrecks the model

    def rank_fault(self, step: int, params: list[torch.Tensor]) -> None:
        """kill_at / hang_at / corrupt_weights_at, once per run (so torchrun's restart gets past it): the last rank
        kills itself, sleeps for good while the others wait for it in the step's first collective, or has its
        parameters nudged."""
        if self.rank != self.world - 1:
            return
        if step in self.get("corrupt_weights_at") and fire_once("corrupt_weights_at", step):
            corrupt(params)
        if step in self.get("kill_at") and fire_once("kill_at", step):
            os.kill(os.getpid(), 9)
        if step in self.get("hang_at") and fire_once("hang_at", step):
            time.sleep(10**6)


class Throughput(Duty):
    """Each step's own time (from before its batch to its record: evaluations and checkpoints are outside it),
    the profiler (TOKENMILL_PROFILE; nothing otherwise), and the summary's "timing"."""

    def at_start(self, run: Run) -> None:
        self.profiler = StepProfiler(run.rank, run.device.type)
        self.start_step = run.state["step"]
        self.loop_started = time.perf_counter()

    def before_step(self, run: Run, now: Step) -> None:
        self.started = time.perf_counter()

    def after_step(self, run: Run, now: Step) -> None:
        # No synchronize: the read of the loss already waited for forward and backward; the optimizer's kernels
        # run on while the host reads the next batch, and are counted in the next step's time.
        now.elapsed = time.perf_counter() - self.started
        run.timing["step_seconds"].append(now.elapsed)
        self.profiler.step()

    def at_end(self, run: Run) -> None:
        self.profiler.close()

    def timing(self, run: Run) -> dict:
        """Throughput over the steps this process ran, the first left out (compilation, allocator warm-up)."""
        t, timing, devices, size, device = run.cfg.train, run.timing, run.devices, run.size, run.device
        secs = timing["step_seconds"][1:] or timing["step_seconds"]
        tps = len(secs) * t.tokens_per_step / sum(secs) if secs and sum(secs) > 0 else None
        return {
            "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
            "devices": devices, "steps_timed": len(secs), "tokens_per_second": tps,
            "tokens_per_second_per_device": tps / devices if tps else None,
            "mfu": mfu(tps, size["flops_per_token"], devices, run.peak) if tps else None,
            "mfu_causal": mfu(tps, size["flops_per_token_causal"], devices, run.peak) if tps else None,
            "peak_flops_per_device": run.peak, "peak_memory_bytes": peak_memory(device),
            "resumed_from_step": self.start_step if run.resumed else None,
            "benchmark_eval_seconds": round(timing["benchmark_eval_seconds"], 3),
            "canary_eval_seconds": round(timing.get("canary_eval_seconds", 0.0), 3),
            "context_eval_seconds": round(timing.get("context_eval_seconds", 0.0), 3),
            # The first step holds torch.compile and the allocator's warm-up; checkpoints are outside the step
            # timer, so the loop's wall time beside the steps' says what they cost.
            "first_step_seconds": timing["step_seconds"][0] if timing["step_seconds"] else None,
            "loop_seconds": time.perf_counter() - self.loop_started,
            "checkpoint_save_seconds": [round(x, 3) for x in run.ckpt.save_seconds],
            "checkpoint_load_seconds": run.ckpt.load_seconds,
        }


class Rollback(Duty):
    """An excursion that does not come back, or too many skips in a row: roll back (rollback.py), or stop.
    While an excursion is open, the checkpoint a rollback would return to is kept (Checkpointer.pin)."""

    def after_step(self, run: Run, now: Step) -> bool:
        t, state, step = run.cfg.train, run.state, now.step
        excursion = watch(state["excursion"], step, now.record["phase"], now.record["loss"], t.rollback, t.spike) \
            if t.rollback.enabled else None
        why = "unrecovered_excursion" if excursion is not None else None
        if state["consecutive"] > t.spike.max_consecutive:  # from the open excursion's start, if earlier
            first = step - state["consecutive"] + 1
            why, excursion = "consecutive_skips", {"start": min(first, state["excursion"]["start"] or first)}
        if why is not None:
            self.roll_back(run, why, excursion, step)
            return True
        start = state["excursion"]["start"]
        run.ckpt.pin = None if start is None else start - 1
        return False

    def roll_back(self, run: Run, reason: str, excursion: dict, step: int) -> None:
        """Model, optimizer and run state back to the newest checkpoint written before the update that preceded
        the excursion's first step, the rollback recorded (rollback.py); a TrainError when none may be done."""
        state, trainer, ckpt = run.state, run.trainer, run.ckpt
        rollbacks, start, r = state["rollbacks"], excursion["start"], run.cfg.train.rollback
        what = (f"the loss stayed above its band (mean {excursion['band_mean']:.4f}, upper edge "
                f"{excursion['band_upper']:.4f}) for {r.window} steps from step {start}"
                if reason == "unrecovered_excursion" else
                f"{state['consecutive']} steps in a row skipped up to step {step} (last: "
                f"{state['records'][-1]['skip_reason']}, loss {state['records'][-1]['loss']:.4f})")
        if not r.enabled or len(rollbacks) >= r.max_rollbacks:
            raise TrainError(f"{what}, after {len(rollbacks)} rollbacks (train.rollback.max_rollbacks "
                             f"{r.max_rollbacks}{'' if r.enabled else ', rollback disabled'}): the run diverged")
        ckpt.wait()
        loaded = ckpt.load_latest(trainer.model, trainer.optimizer, at_most=start - 1)
        if loaded is None:
            raise TrainError(f"{what}, and no checkpoint was written before step {start - 1} to roll back to "
                             f"(train.checkpoint.interval {run.cfg.train.checkpoint.interval}): the run diverged")
        row = rollback_row(rollbacks, reason, excursion, step, loaded["step"], state["records"], trainer.loader, r)
        ckpt.drop_after(loaded["step"])
        complete_state(loaded)
        state.clear()
        state.update(loaded, rollbacks=rollbacks + [row])
        set_rng_state(state["rng"])
        if run.rank == 0:
            steps = row["skipped_steps"]
            print(f"train: rollback {row['rollback']} of at most {r.max_rollbacks}: {what}; back to the checkpoint "
                  f"at step {row['resumed_from']}, the batches of steps {steps[0]}-{steps[-1]} skipped "
                  f"({len(row['doc_ids'])} documents), learning rate x{row['lr_scale']:g}", flush=True)


class HealthAlarms(Duty):
    """Per-layer health (health.py): the step measures each group on the logging steps (not on a batch a rollback
    skips: no gradient); every svd_interval steps the embedding's sigma1/sigma2; the alarms, a warning line on
    rank 0 each. A rollback brings back the checkpoint's health state: the measurements start over from it."""

    def before_step(self, run: Run, now: Step) -> None:
        now.probe = run.health if now.logging and now.step not in skipped(run.state["rollbacks"]) else None

    def after_step(self, run: Run, now: Step) -> None:
        health, step = now.probe, now.step
        if health is None:
            return
        if health.sigma_due(step + 1):  # every rank takes part: the embedding is gathered
            now.sigma, run.state["health_state"]["sigma_at"] = health.sigma_ratio(), step + 1
        for alarm in health.alarms(step, now.sigma):
            run.state["health_alarms"].append(alarm)
            if run.rank == 0:
                print(f"train: warning: step {step}: {alarm['alarm']} in {alarm['group']}: "
                      f"{alarm['value']:.3g} > {alarm['threshold']:.3g}" + (
                          " (embedding sigma1/sigma2: its rows are collapsing onto one direction)"
                          if alarm["alarm"] == "embedding_collapse" else
                          f" (gradient-norm growth over {run.cfg.train.health.drift_horizon} steps)"), flush=True)

    def at_rollback(self, run: Run) -> None:
        t = run.cfg.train
        run.health = Health(run.trainer.model, t.health, run.state["health_state"]) if t.health.enabled else None


class LiveLogging(Duty):
    """DVCLive on rank 0 (run.live): each logging step's training, throughput, memory and health metrics, the
    rollbacks, and at the end the whole run's throughput. The evaluations log their own (Evaluation).

    Throughput per logging interval counts the steps' own time, as the run's does (Throughput.timing):
    evaluations and checkpoints in the interval are not training. (Resetting only the clock after an evaluation,
    as before, kept the tokens of the steps before it: on one H200 the log showed 185k tokens/s, 119% MFU, for a
    92.8k run.)"""

    def __init__(self):
        self.seconds, self.tokens = 0.0, 0  # the steps of the interval so far

    @classmethod
    def open(cls, run: Run, live_dir) -> LiveLogging | None:
        """The duty and run.live on rank 0 with a live folder; None elsewhere."""
        if run.rank != 0 or live_dir is None:
            return None
        from dvclive import Live  # 1.1 s to import: rank 0 with a live folder only

        # dvcyaml=False: the stage's dvc.yaml declares the plots; DVCLive must not rewrite it.
        run.live = Live(str(live_dir), resume=run.resumed, save_dvc_exp=False, dvcyaml=False, report=None)
        return cls()

    def after_step(self, run: Run, now: Step) -> None:
        t, live, record = run.cfg.train, run.live, now.record
        self.seconds += now.elapsed
        self.tokens += t.tokens_per_step
        if not now.logging:
            return
        tps = self.tokens / self.seconds if self.seconds > 0 else 0.0
        live.step = now.step + 1
        if record["loss"] is not None:  # none on a batch a rollback skips
            live.log_metric("train/loss", record["loss"])
            live.log_metric("train/grad_norm", record["grad_norm"])
        live.log_metric("train/lr", record["lr"])
        live.log_metric("perf/tokens_per_second", tps)
        live.log_metric("perf/memory_gib", peak_memory(run.device) / 2**30)
        probe = now.probe
        for row in run.state["health"][-len(probe.groups):] if probe is not None else []:  # this step's
            live.log_metric(f"health/{row['group']}/grad_norm", row["grad_norm"])
            if row["update_ratio"] is not None:
                live.log_metric(f"health/{row['group']}/update_ratio", row["update_ratio"])
        if now.sigma is not None:
            live.log_metric("health/embedding_sigma_ratio", now.sigma)
        if probe is not None:
            live.log_metric("health/alarms", len(run.state["health_alarms"]))
        for name, key in (("perf/mfu", "flops_per_token"), ("perf/mfu_causal", "flops_per_token_causal")):
            value = mfu(tps, run.size[key], run.devices, run.peak)
            if value is not None:
                live.log_metric(name, value)
        live.next_step()
        self.seconds, self.tokens = 0.0, 0

    def at_rollback(self, run: Run) -> None:
        run.live.log_metric("train/rollbacks", len(run.state["rollbacks"]), plot=False)
        self.seconds, self.tokens = 0.0, 0

    def at_exit(self, run: Run, summary: dict | None) -> None:
        if summary is not None:
            # The whole run's figures last, so metrics.json (and the stage's run record, which reads it) holds the
            # run's throughput; the plots keep each interval's.
            whole = summary["timing"]
            for key in ("tokens_per_second", "mfu", "mfu_causal", "first_step_seconds", "benchmark_eval_seconds"):
                if whole[key] is not None:
                    run.live.log_metric(f"perf/{key}", whole[key], plot=False)
        run.live.end()


class ContextUse(Duty):
    """How the finished model uses its context (tokenmill.train.context): held-out loss by token position up to
    the longest sequence the run trained on, and the retrieval probe at train.seq_len and at that length; none
    when the run stops at stop_after."""

    def at_end(self, run: Run) -> None:
        if run.stopped_at is not None:
            return
        trainer, t = run.trainer, run.cfg.train
        started = time.perf_counter()
        longest = trainer.loader.longest_in(run.total_steps)
        docs = heldout_documents(trainer.stream.tokens_dir, trainer.stream.plan_dir, trainer.stream.dtype)
        # As many sequences per forward as a training micro-batch holds tokens (its logits fit, so these do).
        rows = max(1, trainer.micro_batch * t.seq_len // longest)
        seqs = context.position_sequences(docs, longest)
        positions = context.loss_by_position(trainer.token_losses(seqs, rows), longest) if seqs else {}
        cases = context.probe_cases(docs, sorted({t.seq_len, longest}))
        probe = {}
        if cases:
            scored = trainer.loglikelihoods([c.needle for c in cases] + [c.control for c in cases],
                                            [c.answer for c in cases] * 2, rows)
            probe = context.probe_figures(cases, scored[:len(cases)], scored[len(cases):])
        run.state["context"] = {"longest": longest, "rope_theta": trainer.model.rope_theta,
                                "loss_by_position": positions, "probe": probe}
        run.timing["context_eval_seconds"] = time.perf_counter() - started


class Evaluation(Duty):
    """Held-out loss per bucket after the steps of `eval_at` (loop.evaluation_steps), benchmarks (an evalset's
    requests) at the noise window only; rows into the run state, metrics to DVCLive."""

    def __init__(self, heldout: dict, requests, eval_at: set[int], window: set[int]):
        self.heldout, self.requests, self.eval_at, self.window = heldout, requests, eval_at, window

    def after_step(self, run: Run, now: Step) -> None:
        if now.step + 1 in self.eval_at:
            self.at_evaluation(run, now.step + 1)
            run.beat(now.step + 1)

    def at_evaluation(self, run: Run, step_done: int) -> dict[str, float]:
        trainer, state, requests, live = run.trainer, run.state, self.requests, run.live
        out = {}
        for bucket, seqs in self.heldout.items():
            loss, n = trainer.heldout_loss(seqs)
            if n:
                out[bucket] = loss
                state["heldout"].append({"step": step_done, "bucket": bucket, "loss": loss, "sequences": n})
        scores = {}
        # Benchmarks at the noise window only: their spread there is the run's σ, and each evaluation costs
        # about as much as several training steps of a small model (RESULTS.md, "Evaluation").
        if requests is not None and len(requests) and step_done in self.window:
            started = time.perf_counter()
            scores = requests.scores(trainer.loglikelihoods(requests.windows, requests.n_cont))
            run.timing["benchmark_eval_seconds"] += time.perf_counter() - started
            for bench, metrics in scores.items():
                for metric, s in metrics.items():
                    state["bench"].append({"step": step_done, "benchmark": bench, "metric": metric,
                                           **{k: s[k] for k in ("all", "all_stderr", "clean", "clean_stderr")}})
        if live is not None and (out or scores):
            live.step = step_done
            for bucket, loss in out.items():
                live.log_metric(f"heldout/{bucket}/loss", loss)
            means = benchmark_means(scores)
            for metric in METRICS:
                if metric in means:
                    live.log_metric(f"benchmarks/{metric}", means[metric])
        return out


def decay_start(run: Run) -> int | None:
    """The steps done when WSD's decay begins, if the run keeps that checkpoint (train.checkpoint.keep_decay_start):
    the state an anneal resumes from. None for a cosine schedule or a decay that starts at warmup's end."""
    s = run.schedule
    if not run.cfg.train.checkpoint.keep_decay_start or s.kind != "wsd" or not s.warmup_steps < s.decay_start < s.total_steps:
        return None
    return s.decay_start


class Checkpointing(Duty):
    """A checkpoint after every train.checkpoint.interval steps, after the last step, when the run stops at
    stop_after and where WSD's decay begins (kept after the run: decay_start); the run's last one is complete (renamed) before the run reports or leaves. Replicas are compared
    before every checkpoint (and every health.replica_check_interval steps), so the newest checkpoint is always
    one whose replicas agreed: a mismatch ends the attempt and the restart resumes from it."""

    def at_start(self, run: Run) -> None:
        if (start := decay_start(run)) is not None:
            run.ckpt.kept.add(start)

    def after_step(self, run: Run, now: Step) -> None:
        t, trainer, done = run.cfg.train, run.trainer, now.step + 1
        save = done % t.checkpoint.interval == 0 or now.last or now.stop or done == decay_start(run)
        if save or done % t.health.replica_check_interval == 0:
            if (mismatch := replica_mismatch(optimizer_params(trainer.optimizer), trainer.layout, now.step)) is not None:
                raise TrainError(mismatch)
        if save:
            run.state["rng"] = rng_state()
            share_token_hashes(run.state)
            run.ckpt.save(done, trainer.model, trainer.optimizer, run.state)
            run.beat(done)
        if now.stop or now.last:
            run.ckpt.wait()
