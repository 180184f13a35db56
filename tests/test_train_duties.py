"""The training loop's periodic duties (tokenmill.train.duties): the recorded run that the loop with its duties
must reproduce exactly, then each duty alone, on a real configuration with fakes for the trainer, the
checkpointer and DVCLive, without a training run."""

from __future__ import annotations

import json
import os
import math

import pytest
import torch

import loop_golden
from train_helpers import shared_text


def _canonical(value) -> str:
    return json.dumps(value, sort_keys=True)  # NaN compares equal to NaN as text


def test_the_refactored_loop_reproduces_the_recorded_run_exactly(tmp_path):
    """tests/loop_golden.py's scenario (every duty of the loop in one tiny run: evaluations with benchmarks at
    the noise window, asynchronous checkpoints, health probes and an injected embedding collapse, a weight
    corruption, a poisoned update rolled back, a stop and a resume, DVCLive, canaries), against
    tests/loop_golden.json, which the loop of commit 96e4b84 (the 262-line _run, before its duties were split
    out) recorded; recorded twice, and once more in another directory, byte-identical each time. Steps, losses,
    gradient norms, learning rates, skips, held-out and benchmark scores, rollbacks, health rows and alarms,
    canary exposures, printed lines, the DVCLive series, the sha256 of every checkpoint's tensors and trainer
    state and of the final weights: all equal, exactly."""
    shared_text()  # skips (or fails under CI=true) without the shared data
    # One record per CPU vector unit the suite has run on (the loop of 96e4b84 recorded on each): AVX512
    # (loop_golden.json) and AVX2 (loop_golden.avx2.json, this project's machines draw either).
    goldens = [json.loads(p.read_text()) for p in sorted(loop_golden.HERE.glob("loop_golden*.json"))]
    here = loop_golden.fingerprint()
    golden = next((g for g in goldens if g["fingerprint"] == here), None)
    if golden is None:
        # A CPU no record was made on rounds differently: compare with a record of the same library pins, every
        # discrete event exactly (steps, skips, rollbacks, alarms, token hashes) and every float within 1%; a
        # changed pin has no record to compare with and fails under CI, never a silent skip.
        pins = {k: v for k, v in here.items() if k != "cpu_capability"}
        same_pins = [g for g in goldens if {k: v for k, v in g["fingerprint"].items() if k != "cpu_capability"} == pins]
        if not same_pins:
            why = (f"the records' floats come from {[g['fingerprint'] for g in goldens]}, this is {here}: record "
                   f"one with tests/loop_golden.py at commit {goldens[0]['recorded_at_commit'][:7]} to compare here")
            (pytest.fail if os.environ.get("CI") else pytest.skip)(why)
        _assert_close(loop_golden.run_in_subprocess(tmp_path), same_pins[0])
        return
    got = loop_golden.run_in_subprocess(tmp_path)
    for key in sorted(set(golden) - {"recorded_at_commit", "fingerprint"}):
        if key == "tables":
            for name in sorted(golden["tables"]):
                assert _canonical(got["tables"][name]) == _canonical(golden["tables"][name]), f"table {name}"
        elif key == "live":
            for name in sorted(set(golden["live"]) | set(got["live"])):
                assert _canonical(got["live"].get(name)) == _canonical(golden["live"].get(name)), f"DVCLive {name}"
        else:
            assert _canonical(got[key]) == _canonical(golden[key]), key
    assert set(got) == set(golden) - {"recorded_at_commit"}


# Recorded bit patterns that a CPU's rounding changes: compared where the record's own CPU runs the test.
CPU_EXACT = {"final_weights", "checkpoints_at_end", "checkpoints_at_stop", "printed"}


def _number(v):
    try:
        return float(v) if isinstance(v, str) and not v.isdigit() else None
    except ValueError:
        return None


def _close(got, want, where: str) -> None:
    if _number(want) is not None and _number(got) is not None:  # DVCLive's series hold numbers as text
        got, want = _number(got), _number(want)
    if isinstance(want, float) or isinstance(got, float):
        assert math.isclose(got, want, rel_tol=1e-2, abs_tol=1e-4), (where, got, want)
    elif isinstance(want, dict):
        assert set(got) == set(want), (where, sorted(set(got) ^ set(want)))
        for k in want:
            _close(got[k], want[k], f"{where}.{k}")
    elif isinstance(want, list):
        assert len(got) == len(want), (where, len(got), len(want))
        for i, (g, w) in enumerate(zip(got, want)):
            _close(g, w, f"{where}[{i}]")
    else:
        assert got == want, (where, got, want)


def _assert_close(got: dict, golden: dict) -> None:
    """The recorded run on another CPU: the same events and the same numbers to within rounding's drift."""
    assert set(got) == set(golden) - {"recorded_at_commit"}
    for key in sorted(set(golden) - {"recorded_at_commit", "fingerprint"} - CPU_EXACT):
        _close(got[key], golden[key], key)
    assert len(got["printed"]) == len(golden["printed"])
    assert set(got["final_weights"]) == set(golden["final_weights"])


# ---------------------------------------------------------------------------------------------------------
# Each duty alone: a real configuration, fakes for the trainer, checkpointer and DVCLive, no training run.

TOKENS_PER_STEP = 32 * 8  # tiny_run: seq_len 32 x global_batch 8


class FakeSchedule:
    kind, warmup_steps, decay_start, total_steps = "cosine", 0, 0, 10  # no stable phase: no decay-start checkpoint

    def lr(self, step: int) -> float:
        return 0.001 * (step + 1)


class FakeLive:
    """DVCLive's Live as the duties use it: every call in order, with the step it was made at."""

    def __init__(self):
        self.step, self.calls = 0, []

    def log_metric(self, name, value, plot=True):
        self.calls.append(("log", name, value, self.step, plot))

    def next_step(self):
        self.calls.append(("next_step", self.step))

    def end(self):
        self.calls.append(("end",))

    def logged(self, name) -> list[tuple[int, float]]:
        return [(c[3], c[2]) for c in self.calls if c[0] == "log" and c[1] == name]


class FakeCheckpointer:
    """Checkpointer's surface: saves and waits recorded, load_latest from `held` ({step: trainer state})."""

    def __init__(self, held: dict | None = None):
        self.held, self.saved, self.waits, self.loads, self.dropped = held or {}, [], 0, [], []
        self.pin, self.save_seconds, self.load_seconds = None, [0.5, 0.25], 1.5
        self.kept = set()

    def save(self, step, model, optimizer, state):
        self.saved.append((step, json.loads(json.dumps(state, sort_keys=True))))

    def wait(self, count=True):
        self.waits += 1

    def load_latest(self, model, optimizer, at_most=None):
        self.loads.append(at_most)
        steps = [s for s in self.held if at_most is None or s <= at_most]
        return json.loads(json.dumps(self.held[max(steps)])) if steps else None

    def drop_after(self, step):
        self.dropped.append(step)


def _cfg(**over):
    from tokenmill.train.config import parse_run
    from train_helpers import tiny_run

    return parse_run(tiny_run(**over))


def _trainer(**extra):
    from types import SimpleNamespace

    param = torch.nn.Parameter(torch.zeros(4))
    loader = SimpleNamespace(window=lambda s: 100 + s, doc_ids=lambda s: [f"doc-{s}"])
    layout = SimpleNamespace(dp_replicate=1)
    return SimpleNamespace(**{"optimizer": torch.optim.SGD([param], lr=0.1), "model": None, "loader": loader,
                              "layout": layout, "micro_batch": 2, "param": param, **extra})


def _run(cfg=None, total_steps=10, state=None, ckpt=None, trainer=None, **fields):
    from tokenmill.train.duties import Run
    from tokenmill.train.runstate import complete_state, new_state

    size = {"flops_per_token": 1000.0, "flops_per_token_causal": 900.0, "params": 1}
    return Run(cfg or _cfg(), trainer or _trainer(), state if state is not None else complete_state(new_state()),
               ckpt or FakeCheckpointer(), FakeSchedule(), total_steps, size, torch.device("cpu"), **fields)


def _record(step, loss=4.0, phase="bulk", skip_reason=None):
    return {"step": step, "phase": phase, "loss": loss, "grad_norm": 1.0 if loss is not None else None,
            "lr": 0.001, "skip_reason": skip_reason, "tokens_hash": f"h{step}"}


def _stepped(run, step, record):
    """Step `step` as the loop leaves it for after_step: its record in the run state and on the step."""
    from tokenmill.train.duties import Step

    now = Step.of(run, step)
    now.record = record
    run.state["records"].append(record)
    run.state["step"] = step + 1
    return now


def test_a_step_knows_its_cadence_and_learning_rate():
    """Logging every log_interval steps and at the last; stop at stop_after (not at the last step, which ends the
    run anyway); the learning rate scaled by lr_factor per rollback."""
    from tokenmill.train.duties import Step

    run = _run(total_steps=10, stop_after=5)
    steps = [Step.of(run, s) for s in range(10)]
    assert [s.step + 1 for s in steps if s.logging] == [2, 4, 6, 8, 10]
    assert [s.step for s in steps if s.last] == [9]
    assert [s.step for s in steps if s.stop] == [4, 5, 6, 7, 8]  # every step from stop_after on, the last aside
    assert steps[3].lr == pytest.approx(0.004)
    run.state["rollbacks"] = [{"resumed_from": 0, "detected_at": 1, "skipped_steps": []}] * 2
    assert Step.of(run, 3).lr == pytest.approx(0.004 * 0.25)
    assert not any(Step.of(_run(total_steps=10, stop_after=10), s).stop for s in range(10))


def test_the_fault_duty_parses_tokenmill_fault_and_injects_only_its_steps(monkeypatch):
    """TOKENMILL_FAULT parsed (an unknown fault named); poison_step multiplies that step's learning rate by 1000,
    not a batch a rollback skips; collapse_embedding puts the embedding's rows onto one direction before that
    step; corrupt_weights_at nudges the last rank's first parameter, once, and no other rank's."""
    from tokenmill.train.duties import FaultInjection, Step

    monkeypatch.setenv("TOKENMILL_FAULT", "poison_step=3;collapse_embedding=2;corrupt_weights_at=1")
    monkeypatch.delenv("TOKENMILL_TRAIN_REASONS", raising=False)
    monkeypatch.delenv("TORCHELASTIC_RESTART_COUNT", raising=False)
    fault = FaultInjection.from_env(rank=1, world=2)
    assert (fault.get("poison_step"), fault.get("collapse_embedding"), fault.get("kill_at")) == ({3}, {2}, frozenset())
    monkeypatch.setenv("TOKENMILL_FAULT", "poison_step=3;explode=1")
    with pytest.raises(ValueError, match="unknown fault 'explode'"):
        FaultInjection.from_env(0, 1)

    from types import SimpleNamespace

    embedding = torch.randn(50, 8, generator=torch.Generator().manual_seed(0))
    run = _run(health=SimpleNamespace(embedding=embedding))
    lrs = []
    for step in range(5):
        now = Step.of(run, step)
        before = now.lr
        fault.before_step(run, now)
        lrs.append(now.lr / before)
    assert lrs == [1.0, 1.0, 1.0, 1000.0, 1.0]
    s = torch.linalg.svdvals(embedding)
    assert s[0] / s[1] > 50  # collapsed (a random 50 x 8 table: about 1.5)
    assert run.trainer.param[0].item() == pytest.approx(1e-3) and run.trainer.param[1:].abs().sum() == 0

    run.state["rollbacks"] = [{"resumed_from": 2, "detected_at": 5, "skipped_steps": [3]}]
    now = Step.of(run, 3)
    before = now.lr
    fault.before_step(run, now)
    assert now.lr == before  # a batch a rollback skips is not trained on: nothing to poison

    other = _run()
    FaultInjection("corrupt_weights_at=0", rank=0, world=2).before_step(other, Step.of(other, 0))
    assert other.trainer.param.abs().sum() == 0  # not the last rank


def test_the_rollback_duty_goes_back_to_the_checkpoint_before_an_unrecovered_excursion(capsys):
    """A loss that jumps and stays above its band for rollback.window steps: the run state becomes the newest
    checkpoint's at or before the step before the excursion (the same dict, with the rollback's row), later
    checkpoints are dropped, the rest of the hooks are told (True), and the line says so. While the excursion
    was open, the checkpoint a rollback returns to was pinned."""
    from tokenmill.train.duties import Rollback
    from tokenmill.train.runstate import complete_state, new_state, rng_state

    cfg = _cfg(rollback={"window": 3, "skip_batches": 2, "max_rollbacks": 2}, spike={"min_history": 4})
    saved = {s: {**complete_state(new_state()), "step": s, "rng": rng_state()} for s in (4, 8)}
    ckpt = FakeCheckpointer(saved)
    run = _run(cfg, total_steps=20, ckpt=ckpt)
    state, duty = run.state, Rollback()
    losses = [4.0, 4.02, 3.99, 4.01, 4.0, 3.98, 4.02, 4.0, 4.01, 9.0, 9.5, 9.2]  # steps 9-11 above the band
    results, pins = [], []
    for step, loss in enumerate(losses):
        results.append(duty.after_step(run, _stepped(run, step, _record(step, loss))))
        pins.append(ckpt.pin)
    assert results == [False] * 11 + [True]
    assert pins[8] is None and pins[9] == pins[10] == 8  # the excursion opened at step 9: checkpoint 8 kept
    assert ckpt.loads == [8] and ckpt.dropped == [8] and ckpt.waits == 1
    assert run.state is state and state["step"] == 8
    [row] = state["rollbacks"]
    assert (row["reason"], row["excursion_start"], row["detected_at"], row["resumed_from"]) == \
        ("unrecovered_excursion", 9, 11, 8)
    assert row["skipped_steps"] == [8, 9] and row["skipped_windows"] == [108, 109] and row["lr_scale"] == 0.5
    assert row["undone_losses"] == losses[8:]
    out = capsys.readouterr().out
    assert out.startswith("train: rollback 1 of at most 2: the loss stayed above its band") and \
        "back to the checkpoint at step 8, the batches of steps 8-9 skipped (2 documents)" in out


def test_the_rollback_duty_stops_the_run_past_max_rollbacks_naming_the_key():
    """Consecutive skips past spike.max_consecutive with max_rollbacks 0: one line naming the key, and nothing
    loaded; with rollback disabled the line says so."""
    from tokenmill.train.duties import Rollback
    from tokenmill.train.runstate import TrainError

    for over, tail in (({"max_rollbacks": 0}, "(train.rollback.max_rollbacks 0)"),
                       ({"enabled": False}, "(train.rollback.max_rollbacks 3, rollback disabled)")):
        cfg = _cfg(rollback=over, spike={"max_consecutive": 2})
        ckpt = FakeCheckpointer({0: {}})
        run = _run(cfg, ckpt=ckpt)
        run.state["consecutive"] = 3
        now = _stepped(run, 5, _record(5, float("nan"), skip_reason="nonfinite"))
        with pytest.raises(TrainError) as err:
            Rollback().after_step(run, now)
        message = str(err.value)
        assert message.startswith("3 steps in a row skipped up to step 5 (last: nonfinite, loss nan)"), message
        assert message.endswith(f"after 0 rollbacks {tail}: the run diverged") and ckpt.loads == []


def test_the_rollback_duty_with_no_checkpoint_before_the_excursion_names_the_interval():
    from tokenmill.train.duties import Rollback
    from tokenmill.train.runstate import TrainError

    cfg = _cfg(spike={"max_consecutive": 1}, checkpoint={"interval": 50})
    run = _run(cfg, ckpt=FakeCheckpointer({50: {}}))
    run.state["consecutive"] = 2
    now = _stepped(run, 3, _record(3, 12.0, skip_reason="loss_spike"))
    with pytest.raises(TrainError, match=r"no checkpoint was written before step 1 to roll back to "
                                         r"\(train.checkpoint.interval 50\)"):
        Rollback().after_step(run, now)


@pytest.fixture(scope="module")
def process_group():
    """A 1-process gloo group (the token hashes are broadcast before a checkpoint)."""
    import torch.distributed as dist

    from tokenmill.train.loop import init_distributed

    _, created = init_distributed("cpu")
    yield
    if created:
        dist.destroy_process_group()


def _checkpointed(stop_after=None, total=10, fail_at=None, monkeypatch=None, **over):
    from tokenmill.train import duties
    from tokenmill.train.duties import Checkpointing

    checks = []
    if monkeypatch is not None:
        monkeypatch.setattr(duties, "replica_mismatch", lambda params, layout, step: checks.append(step) or (
            f"silent data corruption after step {step}" if step == fail_at else None))
    run = _run(_cfg(checkpoint={"interval": 4}, **over), total_steps=total, stop_after=stop_after)
    beats = []
    run.beat = beats.append
    duty = Checkpointing()
    for step in range(total):
        now = _stepped(run, step, _record(step))
        duty.after_step(run, now)
        if now.stop:
            break
    return run, beats, checks


def test_the_checkpoint_duty_saves_at_the_interval_the_last_step_and_a_stop(process_group):
    run, beats, _ = _checkpointed()
    assert [s for s, _ in run.ckpt.saved] == [4, 8, 10] and beats == [4, 8, 10]
    assert run.ckpt.waits == 1  # the last checkpoint complete before the run reports
    step, state = run.ckpt.saved[0]
    assert state["step"] == 4 and len(state["records"]) == 4 and state["hashes_shared"] == 4 and "cpu" in state["rng"]
    run, beats, _ = _checkpointed(stop_after=6)
    assert [s for s, _ in run.ckpt.saved] == [4, 6] and run.ckpt.waits == 1 and beats == [4, 6]


def test_the_checkpoint_duty_keeps_the_state_where_wsd_decay_begins(process_group, tmp_path):
    """The anneal stage branches from the last stable step: under WSD a checkpoint is written there and the
    Checkpointer never prunes it; without keep_decay_start, or under a cosine schedule, none is."""
    from tokenmill.train.checkpoint import Checkpointer, complete_checkpoints
    from tokenmill.train.duties import Checkpointing
    from tokenmill.train.schedule import Schedule

    for keep, kind, saved in ((True, "wsd", [4, 7, 8, 10]), (False, "wsd", [4, 8, 10]), (True, "cosine", [4, 8, 10])):
        run = _run(_cfg(checkpoint={"interval": 4, "keep_decay_start": keep}), total_steps=10)
        run.schedule = Schedule(kind, 1e-3, 10, 2, 0.1, 7)
        duty = Checkpointing()
        duty.at_start(run)
        for step in range(10):
            duty.after_step(run, _stepped(run, step, _record(step)))
        assert [s for s, _ in run.ckpt.saved] == saved and run.ckpt.kept == ({7} if saved[1] == 7 else set())
    # The real Checkpointer: keep 2 newest, and the kept step whatever keep says.
    model = torch.nn.Linear(4, 4)
    optimizer = torch.optim.AdamW(model.parameters())
    ckpt = Checkpointer(tmp_path / "checkpoints", keep=2)
    ckpt.kept.add(7)
    for step in (4, 7, 8, 10, 12):
        ckpt.save(step, model, optimizer, {"step": step})
    assert [s for s, _ in complete_checkpoints(tmp_path / "checkpoints")] == [7, 10, 12]


def test_the_checkpoint_duty_compares_replicas_before_writing(process_group, monkeypatch):
    """Every replica_check_interval steps and before every checkpoint; a mismatch stops the run before the
    checkpoint is written, so the newest one is always one whose replicas agreed."""
    _, _, checks = _checkpointed(monkeypatch=monkeypatch, health={"replica_check_interval": 3})
    assert [s + 1 for s in checks] == [3, 4, 6, 8, 9, 10]
    from tokenmill.train.runstate import TrainError

    with pytest.raises(TrainError, match="silent data corruption after step 7"):
        _checkpointed(monkeypatch=monkeypatch, fail_at=7, health={"replica_check_interval": 3})


class FakeRequests:
    windows, n_cont = [[1, 2, 3]], [1]

    def __len__(self):
        return 1

    def scores(self, lls):
        s = {"all": lls[0], "all_stderr": 0.1, "clean": lls[0], "clean_stderr": 0.1}
        return {"arc": {"acc": s}}


def test_the_evaluation_duty_scores_benchmarks_only_in_the_noise_window():
    """Held-out loss per bucket at each evaluation step (a bucket with no full sequence left out), benchmarks
    at the noise window only, both logged to DVCLive at the evaluation's step; the watchdog beat after each."""
    from tokenmill.train.duties import Evaluation, Step

    calls = []
    trainer = _trainer(heldout_loss=lambda seqs: (float(len(seqs)), len(seqs)),
                       loglikelihoods=lambda windows, n_cont: calls.append(len(windows)) or [0.25])
    live = FakeLive()
    run = _run(total_steps=10, trainer=trainer, live=live)
    beats = []
    run.beat = beats.append
    duty = Evaluation({"books": [0, 1, 2], "web": []}, FakeRequests(), eval_at={4, 8, 10}, window={8, 10})
    assert duty.at_evaluation(run, 0) == {"books": 3.0}
    for step in range(10):
        duty.after_step(run, Step.of(run, step))
    assert [(h["step"], h["bucket"], h["loss"], h["sequences"]) for h in run.state["heldout"]] == \
        [(s, "books", 3.0, 3) for s in (0, 4, 8, 10)]
    assert [(b["step"], b["benchmark"], b["metric"], b["all"]) for b in run.state["bench"]] == \
        [(8, "arc", "acc", 0.25), (10, "arc", "acc", 0.25)]
    assert calls == [1, 1] and beats == [4, 8, 10]
    assert live.logged("heldout/books/loss") == [(0, 3.0), (4, 3.0), (8, 3.0), (10, 3.0)]
    assert live.logged("benchmarks/acc") == [(8, 0.25), (10, 0.25)]
    assert not any(c[0] == "next_step" for c in live.calls)  # the step's own record goes on at the next logging step
    no_live = _run(total_steps=10, trainer=trainer)
    Evaluation({"books": [0]}, None, {2}, {2}).after_step(no_live, Step.of(no_live, 1))
    assert no_live.state["bench"] == [] and no_live.state["heldout"][0]["step"] == 2


def _health_model():
    from tokenmill.train.config import parse_model
    from tokenmill.train.model import Transformer

    model = Transformer(parse_model({"n_layers": 1, "d_model": 16, "n_heads": 2, "n_kv_heads": 1, "ffn_dim": 32}),
                        64, 8)
    model.init_weights(1)
    return model


def test_the_health_duty_probes_logging_steps_and_raises_the_collapse_alarm_once(capsys):
    """The probe on logging steps only, never on a batch a rollback skips; sigma1/sigma2 every svd_interval
    steps; a collapsed embedding raises its alarm (row and warning line) once; a rollback rebuilds the health
    on the checkpoint's state."""
    from tokenmill.train.duties import HealthAlarms, Step
    from tokenmill.train.health import Health, collapse

    cfg = _cfg(health={"svd_interval": 4})
    model = _health_model()
    run = _run(cfg, total_steps=20, trainer=_trainer(model=model))
    run.health = Health(model, cfg.train.health, run.state["health_state"])
    duty = HealthAlarms()
    run.state["rollbacks"] = [{"resumed_from": 0, "detected_at": 0, "skipped_steps": [5]}]
    probes = []
    for step in range(8):
        now = Step.of(run, step)
        duty.before_step(run, now)
        probes.append(now.probe is run.health)
    assert probes == [False, True, False, True, False, False, False, True]  # step 5: skipped by the rollback
    collapse(model.tok_embeddings.weight)
    sigmas = []
    for step in (1, 3, 5, 7, 9):
        now = Step.of(run, step)
        now.probe = run.health
        duty.after_step(run, now)
        sigmas.append(now.sigma)
    assert [s is not None for s in sigmas] == [False, True, False, True, False]  # at 4 and 8 steps done
    assert sigmas[1] > cfg.train.health.sigma_ratio_max
    assert [(a["step"], a["alarm"]) for a in run.state["health_alarms"]] == [(3, "embedding_collapse")]
    assert capsys.readouterr().out.startswith("train: warning: step 3: embedding_collapse in embedding: ")
    old = run.health
    run.state = {**run.state, "health_state": {"history": {}, "sigma_at": 0, "active": []}}
    duty.at_rollback(run)
    assert run.health is not old and run.health.state is run.state["health_state"]
    run.cfg = _cfg(health={"enabled": False})
    duty.at_rollback(run)
    assert run.health is None


def test_the_live_duty_logs_each_interval_and_the_whole_runs_throughput_last():
    """Throughput per logging interval from the steps' own seconds (reset by a rollback); the training metrics
    at the logging steps (no loss for a batch a rollback skips); the health rows of the probed step; MFU only with
    a peak; the rollbacks; and at the end the whole run's figures (plot=False), then end()."""
    from types import SimpleNamespace

    from tokenmill.train.duties import LiveLogging, Step

    live = FakeLive()
    run = _run(total_steps=10, live=live, peak=1e6, devices=2)
    duty = LiveLogging()

    def step(s, elapsed, record=None, probe=None, sigma=None):
        now = Step.of(run, s)
        now.record, now.elapsed, now.probe, now.sigma = record or _record(s), elapsed, probe, sigma
        duty.after_step(run, now)

    step(0, 1.0)
    assert live.calls == []  # not a logging step
    run.state["health"] = [{"step": 1, "group": "embedding", "grad_norm": 0.5, "update_ratio": 0.01},
                           {"step": 1, "group": "output", "grad_norm": 0.7, "update_ratio": None}]
    step(1, 3.0, probe=SimpleNamespace(groups={"embedding": [], "output": []}), sigma=4.5)
    assert live.logged("perf/tokens_per_second") == [(2, 2 * TOKENS_PER_STEP / 4.0)]
    assert live.logged("perf/mfu") == [(2, 128.0 * 1000.0 / (2 * 1e6))]
    assert live.logged("train/loss") == [(2, 4.0)] and live.logged("health/embedding/update_ratio") == [(2, 0.01)]
    assert live.logged("health/output/grad_norm") == [(2, 0.7)] and live.logged("health/output/update_ratio") == []
    assert live.logged("health/embedding_sigma_ratio") == [(2, 4.5)] and live.logged("health/alarms") == [(2, 0)]
    assert live.calls[-1] == ("next_step", 2)
    step(2, 5.0)
    run.state["rollbacks"] = [{}]
    duty.at_rollback(run)
    assert live.calls[-1] == ("log", "train/rollbacks", 1, 2, False)
    step(3, 1.0, record=_record(3, None, skip_reason="rolled_back"))
    assert live.logged("perf/tokens_per_second")[-1] == (4, TOKENS_PER_STEP / 1.0)  # step 2's seconds forgotten
    assert live.logged("train/loss") == [(2, 4.0)] and live.logged("train/lr")[-1] == (4, 0.001)
    assert live.logged("health/alarms") == [(2, 0)]  # no probe, no health metrics

    n = len(live.calls)
    timing = {"tokens_per_second": 99.0, "mfu": None, "mfu_causal": None, "first_step_seconds": 2.0,
              "benchmark_eval_seconds": 0.5}
    duty.at_exit(run, {"timing": timing})
    assert live.calls[n:] == [("log", "perf/tokens_per_second", 99.0, 4, False),
                              ("log", "perf/first_step_seconds", 2.0, 4, False),
                              ("log", "perf/benchmark_eval_seconds", 0.5, 4, False), ("end",)]
    stopped = FakeLive()
    LiveLogging().at_exit(_run(live=stopped), None)
    assert stopped.calls == [("end",)]
    assert LiveLogging.open(_run(rank=1), "anywhere") is None and LiveLogging.open(_run(), None) is None


def test_the_throughput_duty_times_the_steps_and_leaves_the_first_out(monkeypatch):
    from tokenmill.train.duties import Step, Throughput

    monkeypatch.delenv("TOKENMILL_PROFILE", raising=False)
    run = _run(total_steps=10, resumed=True, peak=1e6)
    run.state["step"] = 3
    duty = Throughput()
    duty.at_start(run)
    now = Step.of(run, 3)
    duty.before_step(run, now)
    duty.after_step(run, now)
    assert now.elapsed > 0 and run.timing["step_seconds"] == [now.elapsed]
    run.timing["step_seconds"] = [5.0, 1.0, 1.0]
    timing = duty.timing(run)
    assert timing["tokens_per_second"] == 2 * TOKENS_PER_STEP / 2.0 and timing["steps_timed"] == 2
    assert timing["first_step_seconds"] == 5.0 and timing["resumed_from_step"] == 3
    assert timing["mfu"] == pytest.approx(TOKENS_PER_STEP * 1000.0 / 1e6)
    assert timing["checkpoint_save_seconds"] == [0.5, 0.25] and timing["checkpoint_load_seconds"] == 1.5
    duty.at_end(run)


def test_the_heartbeat_starts_with_the_steps_beats_before_each_and_closes_at_the_end(monkeypatch):
    from tokenmill.train import duties
    from tokenmill.train.duties import Heartbeat, Step

    events = []

    class FakeWatchdog:
        def __init__(self, seconds, rank):
            events.append(("start", seconds, rank))

        def beat(self, step):
            events.append(("beat", step))

        def close(self):
            events.append(("close",))

    monkeypatch.setattr(duties, "Watchdog", FakeWatchdog)
    run = _run()
    duty = Heartbeat(30.0, 1)
    run.beat(0)
    duty.beat(0)
    assert events == []  # the evaluation of the untrained model comes before the watchdog
    duty.at_start(run)
    duty.before_step(run, Step.of(run, 4))
    run.beat(5)  # what Evaluation and Checkpointing call
    duty.at_end(run)
    assert events == [("start", 30.0, 1), ("beat", 4), ("beat", 5), ("close",)]


def test_the_canary_duty_scores_the_finished_model_only(tmp_path):
    """Not when the run stops at stop_after; none planted: an empty table; planted: their exposure, scored in
    batches of as many requests as a micro-batch holds tokens (at least 4096 tokens)."""
    from tokenmill import canaries, schema
    from tokenmill.train.duties import Canaries

    seen = []
    trainer = _trainer(stream=type("S", (), {"tokens_dir": tmp_path}),
                       loglikelihoods=lambda windows, n_cont, rows: seen.append(rows) or [-1.0, -5.0, -6.0])
    run = _run(trainer=trainer)
    run.stopped_at = 4
    Canaries().at_end(run)
    assert "canaries" not in run.state and "canary_eval_seconds" not in run.timing
    run.stopped_at = None
    Canaries().at_end(run)
    assert run.state["canaries"] == [] and seen == []
    schema.write_parquet([{"canary": "s0-v3", "doc_id": "d", "planned_visits": 3, "prefix": "p", "secret": " 1"}],
                         canaries.CANARIES, tmp_path / canaries.TABLE)
    schema.write_parquet([{"canary": "s0-v3", "candidate": i, "context": [1, 2, 3], "continuation": [4, 5]}
                          for i in range(3)], canaries.REQUESTS, tmp_path / canaries.REQUESTS_FILE)
    Canaries().at_end(run)
    [row] = run.state["canaries"]
    assert (row["rank"], row["candidates"]) == (1, 2) and row["exposure"] == pytest.approx(math.log2(3))
    assert seen == [4096 // 5] and run.timing["canary_eval_seconds"] >= 0


def test_the_cross_cpu_comparison_holds_two_real_records_and_catches_a_changed_event():
    """The comparison a CPU without its own record gets: the AVX2 record of the loop of 96e4b84 is within it of the
    AVX512 record (two real CPUs, one code), and one changed skip, token hash or 5% loss is not."""
    records = {p.name: json.loads(p.read_text()) for p in loop_golden.HERE.glob("loop_golden*.json")}
    avx512, avx2 = records["loop_golden.json"], records["loop_golden.avx2.json"]
    assert avx512["fingerprint"]["cpu_capability"] != avx2["fingerprint"]["cpu_capability"]
    other = {k: v for k, v in avx2.items() if k != "recorded_at_commit"}
    _assert_close(other, avx512)
    step = next(i for i, r in enumerate(other["tables"]["steps"]) if r["loss"] is not None and i > 5)
    for field, value in (("skip_reason", "loss_spike"), ("tokens_hash", "0" * 32),
                         ("loss", other["tables"]["steps"][step]["loss"] * 1.05)):
        changed = json.loads(json.dumps(other))
        changed["tables"]["steps"][step][field] = value
        with pytest.raises(AssertionError):
            _assert_close(changed, avx512)
