"""Two training nodes on one machine (README, "Training": several nodes): the training stage's own torchrun
command (tokenmill.train.stage.torchrun_command) started twice with TOKENMILL_RDZV_ENDPOINT on localhost, each
as one node of 2 ranks, gloo over loopback. The layout is the multi-node presets' HSDP: replicate across the
nodes x shard within each. A run checkpointed on two nodes resumes on one node (the same 4 ranks under one
launcher) and continues bit for bit as the two-node run did; and the reverse, whose first half is a one-node
run equal to the two-node run's."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from unittest import mock

import pyarrow.parquet as pq
import pytest
import torch
from safetensors.torch import load_file

from tokenmill.train.config import parse_run
from tokenmill.train.stage import torchrun_command
from train_helpers import PROJECT_ROOT, build_corpus, free_port, tiny_run

STEPS = 8
HSDP = {"dp_replicate": 2, "dp_shard": 2}  # 4 ranks: the replicas span the nodes, the shards stay inside one


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    return build_corpus(tmp_path_factory.mktemp("train_corpus"))


def _launch(nodes: int, tmp: Path, corpus: Path, out: Path, *extra: str, nproc: int | None = None) -> list[str]:
    """Train into `out` on `nodes` nodes of 4 / nodes ranks (or 1 node of `nproc` ranks): every node runs
    the command the stage builds, concurrently, as srun would start it; returns the nodes' logs."""
    nproc = nproc or 4 // nodes
    parallel = HSDP if nproc * nodes == 4 else {}
    run = tiny_run(max_steps=STEPS, parallel=parallel, launch={"nnodes": nodes, "nproc_per_node": nproc})
    parse_run(run)
    config = tmp / f"{out.name}-{nodes}x{nproc}.json"
    config.write_text(json.dumps(run))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo"}
    if nodes > 1:  # as on every node of a job: the head's address, from the environment
        env["TOKENMILL_RDZV_ENDPOINT"] = f"127.0.0.1:{free_port()}"
    with mock.patch.dict(os.environ, env):
        cmd = torchrun_command(parse_run(run).train.launch, config, corpus, out, None, corpus / "mixture",
                               corpus / "tokenize")
    procs = [subprocess.Popen(cmd + list(extra), env=env, cwd=PROJECT_ROOT, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for _ in range(nodes)]
    logs = [p.communicate(timeout=300)[0] for p in procs]
    for p, log in zip(procs, logs):
        assert p.returncode == 0, log[-6000:]
    return logs


def _steps(out: Path) -> list[dict]:
    return pq.read_table(out / "steps.parquet").to_pylist()


def _weights(out: Path) -> dict[str, torch.Tensor]:
    return load_file(str(out / "final" / "model.safetensors"))


@pytest.mark.slow  # five torchrun launchers (3 of them two-node runs), 4 gloo ranks each time, on 2 cores
def test_two_nodes_train_as_one_and_a_checkpoint_moves_between_node_counts(corpus, tmp_path):
    two = tmp_path / "two_nodes"
    logs = _launch(2, tmp_path, corpus, two)
    # Each launcher started 2 ranks and the run had 4: both nodes joined one job, and only the one holding
    # global rank 0 printed the run's summary.
    assert sorted(bool(log.strip()) for log in logs) == [False, True]
    printed = json.loads(max(logs, key=len))
    assert printed["timing"]["devices"] == 4
    ref = _steps(two)
    assert [r["step"] for r in ref] == list(range(STEPS))

    # Checkpointed on two nodes at step 4, resumed on one: the rest of the run as the two nodes trained it.
    moved = tmp_path / "two_then_one"
    _launch(2, tmp_path, corpus, moved, "--stop-after", "4")
    assert [p.name for p in sorted((moved / "checkpoints").iterdir())] == ["step_00000004"]
    _launch(1, tmp_path, corpus, moved, nproc=4)
    assert _steps(moved) == ref
    for name, w in _weights(two).items():
        assert torch.equal(_weights(moved)[name], w), name

    # And the reverse: one node to step 4, two nodes after.
    back = tmp_path / "one_then_two"
    _launch(1, tmp_path, corpus, back, "--stop-after", "4", nproc=4)
    _launch(2, tmp_path, corpus, back)
    assert _steps(back) == ref
    for name, w in _weights(two).items():
        assert torch.equal(_weights(back)[name], w), name
