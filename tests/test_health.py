"""Per-layer health (tokenmill.train.health): the groups of the real model, group gradient norms that add up to
the global one, the update ratio of an optimizer step, and the two alarms, each injected: a collapsed
embedding (by hand, and through the loop with TOKENMILL_FAULT) and a group whose gradient norm drifts up."""

from __future__ import annotations

import math
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import torch

from tokenmill.train.config import HealthConfig, parse_model
from tokenmill.train.health import Health, collapse, group_of
from tokenmill.train.model import Transformer
from train_helpers import build_corpus, tiny_run

MODEL = {"n_layers": 3, "d_model": 32, "n_heads": 2, "n_kv_heads": 1, "ffn_dim": 64, "qk_norm": True}


def _model(**over) -> Transformer:
    m = Transformer(parse_model({**MODEL, **over}), 300, 16)
    m.init_weights(1)
    return m


def _backward(model: Transformer, seed: int = 0) -> None:
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, 300, (4, 17), generator=g)
    logits = model(tokens[:, :-1])
    torch.nn.functional.cross_entropy(logits.reshape(-1, 300), tokens[:, 1:].reshape(-1)).backward()


def test_every_parameter_has_its_group():
    model = _model()
    groups = {group_of(n) for n, _ in model.named_parameters()}
    assert groups == {"embedding", "final_norm", "output"} | {f"block{i}.{k}" for i in range(3)
                                                              for k in ("attention", "mlp")}
    # Wrapped as activation checkpointing and torch.compile name them, a parameter keeps its group.
    assert group_of("layers.2._checkpoint_wrapped_module._orig_mod.ffn_norm.weight") == "block2.mlp"
    assert group_of("layers.0.attention.q_norm.weight") == "block0.attention"
    with pytest.raises(ValueError, match="no health group"):
        group_of("something.else")
    # A tied output layer is the embedding table: one group, not two.
    assert "output" not in Health(_model(tie_embeddings=True), HealthConfig(), {}).groups


def test_group_norms_add_up_to_the_global_norm_and_the_update_ratio_is_the_step():
    model = _model()
    health = Health(model, HealthConfig(), {})
    _backward(model)
    norms = health.grad_norms()
    grads = [p.grad for p in model.parameters()]
    total = float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads])))
    assert math.sqrt(sum(v * v for v in norms.values())) == pytest.approx(total, rel=1e-5)
    assert norms["block1.mlp"] == pytest.approx(float(torch.linalg.vector_norm(torch.cat([
        p.grad.flatten() for n, p in model.named_parameters() if n.startswith(("layers.1.feed_forward",
                                                                               "layers.1.ffn_norm"))]))), rel=1e-5)
    # An SGD step of lr 0.1 moves each group by 0.1 x its gradient: the ratio is that over the weights' norm.
    weights = {g: float(torch.linalg.vector_norm(torch.cat([p.detach().flatten() for p in ps])))
               for g, ps in health.groups.items()}
    before = health.snapshot()
    torch.optim.SGD(model.parameters(), lr=0.1).step()
    ratios = health.update_ratios(before)
    for g in health.groups:
        assert ratios[g] == pytest.approx(0.1 * norms[g] / weights[g], rel=1e-4), g


def test_a_collapsed_embedding_raises_its_alarm_once_until_it_clears():
    model = _model()
    health = Health(model, HealthConfig(sigma_ratio_max=20.0), {})
    fresh = health.sigma_ratio()
    assert 1.0 <= fresh < 2.0  # a random table: its two largest singular values nearly equal
    assert health.alarms(0, fresh) == []
    saved = model.tok_embeddings.weight.detach().clone()
    collapse(model.tok_embeddings.weight)
    collapsed = health.sigma_ratio()
    assert collapsed > 20.0, collapsed
    (alarm,) = health.alarms(10, collapsed)
    assert alarm == {"step": 10, "alarm": "embedding_collapse", "group": "embedding", "value": collapsed,
                     "threshold": 20.0}
    assert health.alarms(20, health.sigma_ratio()) == []  # in force: not raised again
    with torch.no_grad():
        model.tok_embeddings.weight.copy_(saved)
    assert health.alarms(30, health.sigma_ratio()) == []  # cleared
    collapse(model.tok_embeddings.weight)
    assert [a["step"] for a in health.alarms(40, health.sigma_ratio())] == [40]  # and raised again


def test_a_drifting_group_raises_the_drift_alarm_and_a_steady_one_does_not():
    """block1.mlp's gradients scaled up by 2% a step (x2.7 over a 50-step horizon); the others as they come."""
    model = _model()
    cfg = HealthConfig(drift_horizon=50, drift_factor=2.0)
    health = Health(model, cfg, {})
    raised = []
    for step in range(0, 80, 5):
        model.zero_grad()
        _backward(model, seed=step)
        for p in health.groups["block1.mlp"]:
            p.grad.mul_(1.02 ** step)
        health.record(step, health.grad_norms())
        raised += health.alarms(step, None)
    assert [(a["alarm"], a["group"]) for a in raised] == [("grad_norm_drift", "block1.mlp")]
    assert raised[0]["value"] == pytest.approx(1.02 ** 50, rel=0.15)
    assert raised[0]["step"] >= 45  # not before the history spans the horizon
    # The history keeps only the horizon (it rides in every checkpoint).
    assert all(75 - p[0] < 50 for points in health.state["history"].values() for p in points)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    return build_corpus(tmp_path_factory.mktemp("health_corpus"))


def test_the_loop_records_every_group_and_warns_of_an_injected_collapse(corpus, tmp_path, monkeypatch, capsys):
    from tokenmill.train.loop import train

    monkeypatch.setenv("TOKENMILL_FAULT", "collapse_embedding=13")
    summary = train(tiny_run(max_steps=24, health={"svd_interval": 4}), corpus, tmp_path, tmp_path / "live")
    steps = {r["step"]: r for r in pq.read_table(tmp_path / "steps.parquet").to_pylist()}
    rows = pq.read_table(tmp_path / "health.parquet").to_pylist()
    logged = sorted({r["step"] for r in rows})
    assert logged == list(range(1, 24, 2))  # every logging step (log_interval 2), and only those
    for step in logged:
        group = [r for r in rows if r["step"] == step]
        assert len(group) == 2 * 2 + 3  # two blocks x (attention, MLP), embedding, final norm, output
        # The groups partition the model: their norms add up to the global norm the spike guard read.
        assert math.sqrt(sum(r["grad_norm"] ** 2 for r in group)) == pytest.approx(steps[step]["grad_norm"], rel=1e-4)
        if steps[step]["skipped"]:  # no update, no ratio (the collapse at step 13 trips the spike guard)
            assert all(r["update_ratio"] is None for r in group)
        else:
            assert all(0 < r["update_ratio"] < 0.5 for r in group)
    assert steps[13]["skipped"]
    alarms = pq.read_table(tmp_path / "health_alarms.parquet").to_pylist()
    assert [(a["alarm"], a["step"]) for a in alarms] == [("embedding_collapse", 15)]  # the next measurement
    assert summary["health_alarms"] == 1
    out = capsys.readouterr().out
    assert "train: warning: step 15: embedding_collapse in embedding:" in out
    live = (tmp_path / "live" / "plots" / "metrics" / "health")
    assert (live / "embedding_sigma_ratio.tsv").is_file() and (live / "block1.mlp" / "update_ratio.tsv").is_file()
