"""Two training nodes on one machine (README, "Training": several nodes): the training stage started twice
with TOKENMILL_RDZV_ENDPOINT on localhost, each as one node of 2 ranks, gloo over loopback; for the resumes,
the torchrun command the stage builds (torchrun_command) with --stop-after, as a job at its time limit. The
layout is the multi-node presets' HSDP: replicate across the nodes x shard within each. A run checkpointed on
two nodes resumes on one node (the same 4 ranks under one launcher) and continues bit for bit as the two-node
run did. (The reverse, one node then two, ran here too until 2026-11-27: the same 2 x 2 mesh and the same 4
ranks, so it restated this equality for the first four steps instead of the last four, at two more 4-rank
launches, ~30 s of a suite that must fit in 15 minutes.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from unittest import mock

import pyarrow.parquet as pq
import pytest
import torch
from safetensors.torch import load_file

from tokenmill.train.config import parse_run
from tokenmill.train.stage import torchrun_command
from train_helpers import PROJECT_ROOT, RANK_ENV, build_corpus, free_port, tiny_run

STEPS = 8
HSDP = {"dp_replicate": 2, "dp_shard": 2}  # 4 ranks: the replicas span the nodes, the shards stay inside one


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    return build_corpus(tmp_path_factory.mktemp("train_corpus"))


def _rendezvous(nodes: int) -> dict:
    """What every node of a multi-node job has in its environment: the head's rendezvous address."""
    return {"TOKENMILL_RDZV_ENDPOINT": f"127.0.0.1:{free_port()}"} if nodes > 1 else {}


def _on_nodes(nodes: int, cmd: list[str], env: dict) -> list[str]:
    """`cmd` started `nodes` times at once, as srun starts one task per node; each must succeed. Returns their
    output."""
    env = {**os.environ, **RANK_ENV, **env}
    procs = [subprocess.Popen(cmd, env=env, cwd=PROJECT_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True) for _ in range(nodes)]
    logs = [p.communicate(timeout=300)[0] for p in procs]
    for p, log in zip(procs, logs):
        assert p.returncode == 0, log[-6000:]
    return logs


def _launch(nodes: int, tmp: Path, corpus: Path, out: Path, *extra: str, nproc: int | None = None) -> None:
    """Train into `out` on `nodes` nodes of 4 / nodes ranks (or 1 node of `nproc` ranks), every node running
    the torchrun command the stage builds."""
    nproc = nproc or 4 // nodes
    parallel = HSDP if nproc * nodes == 4 else {}
    run = tiny_run(max_steps=STEPS, parallel=parallel, launch={"nnodes": nodes, "nproc_per_node": nproc})
    config = tmp / f"{out.name}-{nodes}x{nproc}.json"
    config.write_text(json.dumps(run))
    rendezvous = _rendezvous(nodes)
    with mock.patch.dict(os.environ, rendezvous):
        cmd = torchrun_command(parse_run(run).train.launch, config, corpus, out, None, corpus / "mixture",
                               corpus / "tokenize")
    _on_nodes(nodes, cmd + list(extra), rendezvous)


STAGE = """
import json, sys
from tokenmill.train.stage import run_train_stage
run = json.load(open(sys.argv[1]))
run_train_stage("pretrain", run, sys.argv[2], "mixture", "tokenize", sys.argv[3], None, sys.argv[4], sys.argv[5])
"""


def _stage_on_two_nodes(tmp: Path, corpus: Path, out: Path) -> None:
    """The training stage itself (tokenmill.train.stage.run_train_stage, what stages/train.py calls) started
    on two nodes at once, as `srun --nodes 2 python stages/train.py pretrain ...` would: each checks the run,
    stamps the output, launches its torchrun and records the run."""
    run = tiny_run(max_steps=STEPS, parallel=HSDP, launch={"nnodes": 2, "nproc_per_node": 2})
    config = tmp / "stage-run.json"
    config.write_text(json.dumps(run))
    _on_nodes(2, [sys.executable, "-c", STAGE, str(config), str(corpus), str(out), str(tmp / "metrics.json"),
                  str(tmp / "runs")], _rendezvous(2))


def _steps(out: Path) -> list[dict]:
    return pq.read_table(out / "steps.parquet").to_pylist()


def _weights(out: Path) -> dict[str, torch.Tensor]:
    return load_file(str(out / "final" / "model.safetensors"))


@pytest.mark.slow  # three torchrun launchers (2 of them two-node runs), 4 gloo ranks each time, on 2 cores
def test_two_nodes_train_as_one_and_a_checkpoint_moves_between_node_counts(corpus, tmp_path):
    two = tmp_path / "two_nodes"
    _stage_on_two_nodes(tmp_path, corpus, two)
    # Each node's torchrun started 2 ranks and the run had 4: both joined one job; each node kept its own log,
    # and the one holding global rank 0 has the run's summary in it.
    logs = sorted((tmp_path / "runs").glob("pretrain.*.log"))
    assert len(logs) == 2, logs
    printed = [json.loads(text[text.index("{"):]) for text in (f.read_text() for f in logs) if '"timing"' in text]
    assert len(printed) == 1 and printed[0]["timing"]["devices"] == 4
    record = json.loads((tmp_path / "runs" / "pretrain.json").read_text())
    assert record["digest"] == json.loads((two / "manifest.json").read_text())["digest"]
    ref = _steps(two)
    assert [r["step"] for r in ref] == list(range(STEPS))
    assert json.loads((tmp_path / "metrics.json").read_text())["steps"] == STEPS

    # Checkpointed on two nodes at step 4, resumed on one: the rest of the run as the two nodes trained it.
    moved = tmp_path / "two_then_one"
    _launch(2, tmp_path, corpus, moved, "--stop-after", "4")
    assert [p.name for p in sorted((moved / "checkpoints").iterdir())] == ["step_00000004"]
    _launch(1, tmp_path, corpus, moved, nproc=4)
    assert _steps(moved) == ref
    for name, w in _weights(two).items():
        assert torch.equal(_weights(moved)[name], w), name
