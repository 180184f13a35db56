"""Multi-process training on CPU with gloo (torchrun, 127.0.0.1): FSDP2 on 2 ranks and FSDP2 + tensor parallel
on 2 x 2 against one process, exact resume, resume under another layout, and a SIGKILL mid-checkpoint.

The model is tiny (2 layers, d 64, GQA 4/2 heads, QK-norm, z-loss) so that every launch is dominated by
start-up; the corpus is real text tokenized and planned by the project's own code (train_helpers).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
from safetensors.torch import load_file

from train_helpers import build_corpus, heldout_targets, tiny_run, torchrun, unigram_entropy

HELPERS = str(Path(__file__).with_name("train_helpers.py"))
STEPS = 8


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    return build_corpus(tmp_path_factory.mktemp("train_corpus"))


def _config(tmp: Path, name: str, **over) -> str:
    path = tmp / f"{name}.json"
    path.write_text(json.dumps(tiny_run(max_steps=STEPS, **over)))
    return str(path)


def _launch(nproc: int, config: str, corpus: Path, out: Path, *extra: str, env=None, check=True):
    return torchrun(nproc, ["-m", "tokenmill.train", "--config", config, "--data-root", str(corpus),
                            "--out", str(out), *extra], env=env, check=check)


@pytest.fixture(scope="module")
def runs(corpus, tmp_path_factory) -> dict:
    """Step 0's gradients and the 8 straight steps of one process, FSDP on 2 ranks and FSDP + TP on 2 x 2."""
    tmp = tmp_path_factory.mktemp("train_runs")
    out = {}
    for name, nproc, over in (("single", 1, {}), ("fsdp", 2, {}), ("fsdp_tp", 4, {"parallel": {"tp": 2}})):
        cfg = _config(tmp, name, **over)
        run_dir, grads = tmp / name, tmp / f"{name}.grads.pt"
        if nproc == 1:
            import subprocess

            subprocess.run([sys.executable, HELPERS, "probe", cfg, str(corpus), str(run_dir), str(grads)],
                           check=True, env={**__import__("os").environ, "OMP_NUM_THREADS": "1"}, timeout=300)
        else:
            torchrun(nproc, [HELPERS, "probe", cfg, str(corpus), str(run_dir), str(grads)])
        out[name] = {"dir": run_dir, "config": cfg, "probe": torch.load(grads, weights_only=False)}
    out["tmp"] = tmp
    return out


def _steps(run_dir: Path) -> list[dict]:
    return pq.read_table(run_dir / "steps.parquet").to_pylist()


def _weights(run_dir: Path) -> dict[str, torch.Tensor]:
    return load_file(str(run_dir / "final" / "model.safetensors"))


@pytest.mark.parametrize("layout", ["fsdp", "fsdp_tp"])
def test_meta_device_init_gives_the_same_weights_under_every_layout(runs, layout):
    """Each rank materialises only its shards (the model was built on the meta device) and keeps its part of
    each parameter's draw: the weights, gathered, equal the one process's exactly under FSDP on 2 ranks and
    FSDP x TP on 2 x 2."""
    ref, got = runs["single"]["probe"]["weights"], runs[layout]["probe"]["weights"]
    assert set(got) == set(ref)
    for name, w in ref.items():
        assert torch.equal(got[name], w), name
        # Drawn as init_weights says, not the uninitialised memory to_empty leaves: init_std 0.02, and the
        # blocks' output projections 0.02 / sqrt(2 x 2 layers).
        if name.endswith("norm.weight"):
            assert torch.equal(w, torch.ones_like(w)), name
        else:
            std = 0.01 if name.endswith(("attention.wo.weight", "feed_forward.w2.weight")) else 0.02
            assert 0.8 * std < w.std().item() < 1.2 * std and abs(w.mean().item()) < 0.2 * std, name


@pytest.mark.parametrize("layout", ["fsdp", "fsdp_tp"])
def test_distributed_gradients_equal_single_process(runs, layout):
    ref, got = runs["single"]["probe"], runs[layout]["probe"]
    assert got["layout"]["dp_size"] == 2 and got["layout"]["tp"] == (2 if layout == "fsdp_tp" else 1)
    assert got["loss"] == pytest.approx(ref["loss"], rel=1e-6)
    assert set(got["grads"]) == set(ref["grads"])
    for name, g in ref["grads"].items():
        # Averaged, not summed, over data-parallel ranks (gloo's AVG reduce-scatter bug would double them).
        torch.testing.assert_close(got["grads"][name], g, rtol=1e-5, atol=1e-7, msg=lambda m: f"{name}: {m}")
    assert any(g.abs().max() > 1e-3 for g in ref["grads"].values())


@pytest.mark.parametrize("layout", ["fsdp", "fsdp_tp"])
def test_distributed_losses_equal_single_process(runs, layout):
    ref, got = _steps(runs["single"]["dir"]), _steps(runs[layout]["dir"])
    assert len(ref) == len(got) == STEPS
    for a, b in zip(ref, got):
        assert a["tokens_hash"] == b["tokens_hash"]  # every layout fed the same global batch
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-5)
        assert b["grad_norm"] == pytest.approx(a["grad_norm"], rel=1e-4)
    # 8 steps train every parameter (equal weights under every layout would hold of untrained ones too); that
    # the training learns context, not only token frequencies, test_a_distributed_run_learns_context shows.
    init = runs["single"]["probe"]["weights"]
    assert all(not torch.equal(w, init[name]) for name, w in _weights(runs["single"]["dir"]).items())
    # Adam divides by the gradient's running RMS, so a 1e-7 gradient difference on a near-zero gradient
    # moves a weight by a fraction of lr (3e-3): after 8 steps the largest difference seen was 1.3e-5.
    for name, w in _weights(runs["single"]["dir"]).items():
        torch.testing.assert_close(_weights(runs[layout]["dir"])[name], w, rtol=1e-3, atol=1e-4)


def test_a_distributed_run_learns_context(corpus, tmp_path):
    """FSDP on 2 ranks, long enough to learn more than token frequencies: the held-out loss, mean of the two
    buckets (equal token counts), ends below the unigram entropy of exactly the held-out targets it scores,
    the lowest loss a model that ignores context can reach on them (its one distribution = their frequencies).
    Eight steps (the runs above) cannot show it: after 8 steps the single process scored 5.65 on 2,048
    held-out tokens whose entropy is 4.72, and 5.66 with its inputs shuffled (no context used yet). In one
    process, 48 steps gave a mean of 4.85 against 4.85, 128 steps 4.43 against 4.85 (test_train_core); here,
    on 2 ranks, 4.43 (books 4.27, reference 4.60) against 4.85."""
    steps, sequences = 128, 32
    cfg = tmp_path / "long.json"
    cfg.write_text(json.dumps(tiny_run(max_steps=steps, checkpoint={"interval": 1000},
                                       logging={"eval_interval": 64, "eval_sequences": sequences})))
    _launch(2, str(cfg), corpus, tmp_path / "out")
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["steps"] == steps and sorted(summary["heldout_loss"]) == ["books", "reference"]
    held = pq.read_table(tmp_path / "out" / "heldout.parquet").to_pylist()
    assert {h["sequences"] for h in held} == {sequences}
    targets = np.concatenate([heldout_targets(corpus, b, sequences, 32) for b in ("books", "reference")])
    unigram = unigram_entropy(targets)
    final = float(np.mean(list(summary["heldout_loss"].values())))
    losses = ", ".join(f"{b} {v:.3f}" for b, v in sorted(summary["heldout_loss"].items()))
    print(f"\nheld-out loss {final:.3f} ({losses}) against the unigram entropy of its targets {unigram:.3f}")
    assert final < unigram - 0.25, (final, unigram, summary["heldout_loss"])


@pytest.mark.parametrize("layout,nproc,over", [("fsdp", 2, {}), ("fsdp_tp", 4, {"parallel": {"tp": 2}})])
def test_distributed_resume_is_bit_exact(runs, corpus, layout, nproc, over):
    """4 steps + checkpoint + resume + 4 steps == 8 straight steps, bit for bit."""
    tmp = runs["tmp"]
    cfg, out = _config(tmp, f"{layout}_resume", **over), tmp / f"{layout}_resume"
    _launch(nproc, cfg, corpus, out, "--stop-after", "4")
    assert not (out / "steps.parquet").exists()  # an interrupted run leaves no final outputs
    assert [p.name for p in sorted((out / "checkpoints").iterdir())] == ["step_00000004"]
    if layout == "fsdp":  # kept for the cross-layout test
        shutil.copytree(out, tmp / "fsdp_at_4")
    _launch(nproc, cfg, corpus, out)
    assert _steps(out) == _steps(runs[layout]["dir"])
    # Per-layer health on sharded (and tensor-parallel) parameters: the groups' gradient norms add up to the
    # global norm at every logging step, and the resumed run measured what the straight one did.
    health = pq.read_table(out / "health.parquet").to_pylist()
    assert health == pq.read_table(runs[layout]["dir"] / "health.parquet").to_pylist()
    norms = {r["step"]: r["grad_norm"] for r in _steps(out)}
    for step in {r["step"] for r in health}:
        total = sum(r["grad_norm"] ** 2 for r in health if r["step"] == step) ** 0.5
        assert total == pytest.approx(norms[step], rel=1e-4), step
    straight = _weights(runs[layout]["dir"])
    for name, w in _weights(out).items():
        assert torch.equal(w, straight[name]), name


def test_a_killed_then_a_hung_rank_restart_the_run_which_ends_as_if_undisturbed(runs, corpus, tmp_path,
                                                                                monkeypatch):
    """The training stage's torchrun (train.launch.max_restarts 2) on 2 ranks. Rank 1 kills itself before step
    5: rank 0's next collective fails on the closed peer, torchrun starts both again, and they resume from the
    step-4 checkpoint. Then rank 1 sleeps before step 6 while rank 0 waits inside the step's first collective:
    both watchdogs end their ranks (rank 1's saying where it is), and the third attempt resumes from step 4
    again. The run ends with the undisturbed run's steps and weights, bit for bit; the run record and the
    lineage's stage_runs list both restarts with their causes."""
    from tokenmill.lineage import run_records
    from tokenmill.train.stage import run_train_stage

    monkeypatch.setenv("TOKENMILL_FAULT", "kill_at=5;hang_at=6")
    cfg = tiny_run(max_steps=STEPS, launch={"nproc_per_node": 2, "max_restarts": 2, "watchdog_seconds": 6.0,
                                            "collective_timeout_seconds": 120.0})
    run_train_stage("pretrain", cfg, corpus, "mixture", "tokenize", tmp_path / "out", None, None,
                    runs_dir=tmp_path / "runs")
    assert _steps(tmp_path / "out") == _steps(runs["fsdp"]["dir"])
    straight = _weights(runs["fsdp"]["dir"])
    for name, w in _weights(tmp_path / "out").items():
        assert torch.equal(w, straight[name]), name
    killed, hung = json.loads((tmp_path / "runs" / "pretrain.json").read_text())["restarts"]
    assert (killed["restart"], killed["resumed_from_step"], hung["restart"], hung["resumed_from_step"]) == (1, 4, 2, 4)
    # Rank 0's collective fails on the dead peer, unless torchrun stops it first (seen on a loaded machine):
    # either way the cause names rank 1 as the one that left no reason, and torchrun's record of its signal.
    assert killed["cause"].startswith(("rank 0: ", "no rank said why")), killed
    assert "; torchrun saw local rank 1 fail first (killed by signal 9)" in killed["cause"], killed
    # Both watchdogs fire; the cause is the rank the other waited for (rank 0 was inside a collective).
    assert hung["cause"].startswith("rank 1: rank 1 made no progress for "), hung
    assert "at step 6, in duties.py:" in hung["cause"] and "(watchdog" in hung["cause"], hung
    (row,) = run_records(tmp_path / "runs").to_pylist()
    assert json.loads(row["restarts"]) == [killed, hung]


def test_a_replica_with_corrupted_weights_stops_the_attempt_before_its_checkpoint(corpus, tmp_path, monkeypatch):
    """Three data-parallel replicas (dp_replicate 3, HSDP with shards of one rank); before step 3 rank 2's
    parameters are nudged, as a flipped bit would. The replicas are compared before every checkpoint: at step
    4's the checksums disagree, the attempt stops naming rank 2 before writing that checkpoint, and the restart
    resumes from the start (no checkpoint had been written), not from corrupted weights; it then finishes with
    replicas that agree at every check."""
    from tokenmill.train.stage import run_train_stage

    monkeypatch.setenv("TOKENMILL_FAULT", "corrupt_weights_at=3")
    cfg = tiny_run(max_steps=STEPS, global_batch=6, parallel={"dp_replicate": 3, "dp_shard": 1},
                   health={"replica_check_interval": 100}, launch={"nproc_per_node": 3, "max_restarts": 1})
    summary = run_train_stage("pretrain", cfg, corpus, "mixture", "tokenize", tmp_path / "out", None, None,
                              runs_dir=tmp_path / "runs")
    assert summary["steps"] == STEPS and len(_steps(tmp_path / "out")) == STEPS
    (restart,) = json.loads((tmp_path / "runs" / "pretrain.json").read_text())["restarts"]
    assert restart["resumed_from_step"] == 0, restart  # step 4's checkpoint was never written
    # Every rank stops with the same line (whichever wrote first is the cause); it names the odd one out.
    assert re.match(r"rank [012]: silent data corruption: after step 3 the parameters of rank 2 differ from their "
                    r"data-parallel replicas' \(ranks 0, 1, 2, checksums (-?\d+), \1, (?!\1)-?\d+\)",
                    restart["cause"]), restart


def test_asynchronous_checkpoints_change_nothing_and_resume_bit_exact(runs, corpus):
    """Checkpoints written by a background thread (train.checkpoint.asynchronous, the GPU default) while the
    next steps train: the run's steps and weights equal the synchronous run's bit for bit, and its step-4
    checkpoint, whose write was held back (slow_checkpoint) until steps 5-8 had changed the weights in place,
    resumes to the same 8 steps: the write reads the host copy taken at step 4, not the live weights."""
    tmp = runs["tmp"]
    cfg, out = _config(tmp, "async", checkpoint={"asynchronous": True}), tmp / "async"
    _launch(2, cfg, corpus, out, env={"TOKENMILL_FAULT": "slow_checkpoint=2"})
    assert [p.name for p in sorted((out / "checkpoints").iterdir())] == ["step_00000004", "step_00000008"]
    assert _steps(out) == _steps(runs["fsdp"]["dir"])
    straight = _weights(runs["fsdp"]["dir"])
    for name, w in _weights(out).items():
        assert torch.equal(w, straight[name]), name
    again = tmp / "async_from_4"
    (again / "checkpoints").mkdir(parents=True)
    shutil.copytree(out / "checkpoints" / "step_00000004", again / "checkpoints" / "step_00000004")
    _launch(2, cfg, corpus, again)
    assert _steps(again) == _steps(runs["fsdp"]["dir"])
    for name, w in _weights(again).items():
        assert torch.equal(w, straight[name]), name


def test_distributed_fsdp_checkpoint_resumes_under_fsdp_tp(runs, corpus):
    """The 2-rank FSDP checkpoint at step 4 loads on a 2 x 2 FSDP + TP mesh and the run carries on as FSDP
    would (same step records up to 4, the same losses within float tolerance after)."""
    tmp = runs["tmp"]
    src = tmp / "fsdp_at_4"
    if not src.exists():  # run on its own (-k): make the 2-rank FSDP checkpoint at step 4 here
        _launch(2, _config(tmp, "fsdp_at_4"), corpus, src, "--stop-after", "4")
    out = tmp / "fsdp_to_tp"
    shutil.copytree(src, out)
    _launch(4, _config(tmp, "fsdp_to_tp", parallel={"tp": 2}), corpus, out)
    got, ref = _steps(out), _steps(runs["fsdp"]["dir"])
    assert got[:4] == ref[:4]
    for a, b in zip(ref[4:], got[4:]):
        assert a["tokens_hash"] == b["tokens_hash"]
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-5)
    for name, w in _weights(runs["fsdp"]["dir"]).items():
        torch.testing.assert_close(_weights(out)[name], w, rtol=1e-3, atol=1e-4)


def test_distributed_sigkill_while_checkpointing_resumes_from_last_complete(runs, corpus):
    tmp = runs["tmp"]
    cfg, out = _config(tmp, "killed"), tmp / "killed"
    # Both ranks SIGKILL themselves after writing their shards of the step-8 checkpoint, before the rename.
    proc = _launch(2, cfg, corpus, out, env={"TOKENMILL_FAULT": "kill_in_checkpoint=8"}, check=False)
    assert proc.returncode != 0
    ckpts = sorted(p.name for p in (out / "checkpoints").iterdir())
    assert ckpts == [".tmp-step_00000008", "step_00000004"]  # the half-written one never got its name
    assert not (out / "summary.json").exists()
    _launch(2, cfg, corpus, out)
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step_00000004", "step_00000008"]
    assert _steps(out) == _steps(runs["fsdp"]["dir"])
    summary = json.loads((out / "summary.json").read_text())
    assert summary == json.loads((runs["fsdp"]["dir"] / "summary.json").read_text())


def test_accumulated_compiled_step_gives_the_whole_batch_gradients(runs, corpus):
    """One process, the H100 preset's path: 4 micro-batches whose gradients FSDP accumulates unreduced and
    reduces once on the last (parallel.set_micro_batch), compiled blocks and a compiled loss. Step 0's
    gradients equal the eager whole-batch ones: a reduction of only the last micro-batch, or a sum instead of
    the mean, would be off by a factor or a different batch."""
    import subprocess

    tmp = runs["tmp"]
    cfg = tmp / "accumulated.json"
    cfg.write_text(json.dumps(tiny_run(max_steps=1, micro_batch=2, parallel={"compile": True})))
    grads = tmp / "accumulated.grads.pt"
    subprocess.run([sys.executable, HELPERS, "probe", str(cfg), str(corpus), str(tmp / "accumulated"), str(grads)],
                   check=True, env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=300)
    ref, got = runs["single"]["probe"], torch.load(grads, weights_only=False)
    assert got["loss"] == pytest.approx(ref["loss"], rel=1e-5)
    for name, g in ref["grads"].items():
        torch.testing.assert_close(got["grads"][name], g, rtol=1e-4, atol=1e-6, msg=lambda m: f"{name}: {m}")


def test_distributed_compiled_blocks_under_tp_give_eager_gradients(runs, corpus):
    """torch.compile per block (the H100 presets) with tensor parallel on 2 ranks: step 0's gradients equal the
    eager single process's. On torch 2.13 a compiled first block returned a zero gradient for the embedding's
    not-yet-waited reduce-scatter output, so tok_embeddings never learned while the loss looked right."""
    tmp = runs["tmp"]
    cfg = tmp / "compiled_tp.json"
    cfg.write_text(json.dumps(tiny_run(max_steps=1, parallel={"tp": 2, "compile": True})))
    grads = tmp / "compiled_tp.grads.pt"
    torchrun(2, [HELPERS, "probe", str(cfg), str(corpus), str(tmp / "compiled_tp"), str(grads)])
    ref, got = runs["single"]["probe"], torch.load(grads, weights_only=False)
    assert got["layout"]["tp"] == 2
    assert got["loss"] == pytest.approx(ref["loss"], rel=1e-6)
    for name, g in ref["grads"].items():
        torch.testing.assert_close(got["grads"][name], g, rtol=1e-5, atol=1e-6, msg=lambda m: f"{name}: {m}")
    assert ref["grads"]["tok_embeddings.weight"].abs().max() > 1e-3


def test_z_loss_on_vocabulary_sharded_logits_never_gathers_them(tmp_path):
    """Under tensor parallelism the logits stay split over the vocabulary (loss_parallel). The z-loss's
    normaliser from a max and a sum (lm_loss(vocab_sharded=True), what the Trainer passes under TP) costs
    all-reduces of one value per token and no all-gather; torch.logsumexp on the same logits all-gathers
    them whole. The loss and the gradient are the same either way, and equal one process's."""
    from tokenmill.train.model import lm_loss

    out = tmp_path / "comms.json"
    torchrun(2, [HELPERS, "zloss_comms", str(out)])
    got = json.loads(out.read_text())
    sharded, gathered = got["True"], got["False"]
    assert not any("all_gather" in op for op in sharded["comms"]) and any("all_reduce" in op for op in sharded["comms"])
    assert any("all_gather" in op for op in gathered["comms"])  # what the test would see without it
    g = torch.Generator().manual_seed(0)
    logits, targets = torch.randn(2, 8, 64, generator=g), torch.randint(0, 64, (2, 8), generator=g)
    x = logits.clone().requires_grad_()
    loss, _ = lm_loss(x, targets, z_loss=0.1)
    loss.backward()
    for run in (sharded, gathered):
        assert run["loss"] == pytest.approx(float(loss), rel=1e-6)
        torch.testing.assert_close(torch.tensor(run["grad"]), x.grad, rtol=1e-5, atol=1e-7)
