"""A small real training corpus for the training tests, built with the project's own code.

Real text from ../shared/data/text (WikiText-2 articles as bucket `reference`, Tiny Shakespeare scenes as
bucket `books`), a SentencePiece tokenizer trained by tokenmill.tokenizer (vocabulary 512, about a second),
token shards and index in the tokenize stage's layout, and a plan + held-out split from
tokenmill.mixture.build_plan with a bulk and an anneal phase. Also: the held-out targets a run is scored on
and their unigram entropy, computed from the files; launching torchrun on 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import random
import re
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from conftest import missing_shared_data  # skips, or fails under CI=true

PROJECT_ROOT = Path(__file__).resolve().parents[1]
SHARED_TEXT = PROJECT_ROOT / ".." / "shared" / "data" / "text"
VOCAB = 512


def shared_text() -> Path:
    """../shared/data/text; under CI=true a missing data set fails the test instead of skipping it."""
    if not SHARED_TEXT.is_dir():
        missing_shared_data(str(SHARED_TEXT))
    return SHARED_TEXT.resolve()


def _documents(text_dir: Path) -> dict[str, list[str]]:
    wiki = (text_dir / "wikitext-2" / "valid.txt").read_text(encoding="utf-8")
    # Articles start with a top-level heading line " = Title = " (sections are " = = ... = = ").
    articles = [a.strip() for a in re.split(r"\n (?== [^=])", wiki) if len(a.strip()) > 200]
    shakespeare = (text_dir / "tinyshakespeare" / "input.txt").read_text(encoding="utf-8")
    lines = shakespeare.split("\n")
    scenes = ["\n".join(lines[i:i + 60]).strip() for i in range(0, len(lines), 60)]
    return {"reference": articles, "books": [s for s in scenes if s]}


def build_corpus(root: Path, token_budget: int = 400_000, seed: int = 7, vocab_size: int = VOCAB,
                 canaries: dict | None = None) -> Path:
    """Write root/tokenize (manifest.json, tokens/<bucket>/00000.bin, index) and root/mixture (plan.parquet,
    heldout.parquet) as the tokenize and mixture stages lay them out; returns root. canaries: a
    `tokenize.canaries` section to plant (tokenmill.canaries), as the two stages do."""
    from tokenmill import canaries as planting
    from tokenmill import schema
    from tokenmill.mixture import build_plan, parse_phases
    from tokenmill.mixture.params import Mixture
    from tokenmill.tokenize import INDEX
    from tokenmill.tokenizer import Tokenizer, train_tokenizer
    from tokenmill.canaries import Canaries
    from tokenmill.tokenizer.params import Tokenizer as TokenizerParams

    docs = _documents(shared_text())
    tok_dir = root / "tokenizer"
    train_tokenizer(docs, None, TokenizerParams.resolve({"vocab_size": vocab_size, "sample_bytes": 1_500_000}), tok_dir)
    tok = Tokenizer(tok_dir)
    out = root / "tokenize"
    rows = []
    for bucket, texts in sorted(docs.items()):
        flat, lengths = tok.encode_documents(texts)
        rel = f"tokens/{bucket}/00000.bin"
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        flat.tofile(out / rel)
        offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]])
        for i, (off, n) in enumerate(zip(offsets, lengths)):
            rows.append({"doc_id": f"{bucket}-{i:05d}", "source": bucket, "bucket": bucket, "shard": rel,
                         "offset": int(off), "length": int(n) - 1})
    schema.write_parquet(rows, INDEX, out / "index" / "00000.parquet")
    canaries = Canaries.resolve(canaries, "tokenize.canaries") if canaries else None  # as the stage script resolves it
    planted = planting.plant(canaries, tok, out) if canaries else []
    rows += planted
    (out / "manifest.json").write_text(json.dumps({"stage": "tokenize", "vocab_size": tok.vocab_size,
                                                   "eos_id": tok.eos_id, "dtype": np.dtype(tok.dtype).name}))
    mixture = Mixture.resolve({"name": "helpers", "phases": {
        "bulk": {"fraction": 0.75, "weights": {"reference": 0.6, "books": 0.4}},
        "anneal": {"fraction": 0.25, "weights": {"reference": 0.8, "books": 0.2}}}})
    phases = parse_phases(mixture.phases)
    result = build_plan(pa.Table.from_pylist(rows, schema=INDEX), phases, token_budget, seed,
                        max_epochs=4.0, heldout_fraction=0.05,
                        canaries={c["doc_id"]: c["planned_visits"] for c in planting.design(canaries)} if canaries else None)
    mix = root / "mixture"
    schema.write_parquet(result["plan"], result["plan"].schema, mix / "plan.parquet")
    held = result["heldout"].select(["doc_id", "bucket", "shard", "offset", "length"])
    schema.write_parquet(held, held.schema, mix / "heldout.parquet")
    return root


def heldout_targets(corpus: Path, bucket: str, sequences: int, seq_len: int) -> np.ndarray:
    """The tokens the held-out loss of `bucket` scores, straight from the contract: the bucket's held-out
    documents in doc_id order, each + end-of-text, cut into `sequences` windows of seq_len + 1 tokens that
    overlap by one; the targets are each window's last seq_len tokens, i.e. flat[1 : sequences x seq_len + 1]."""
    manifest = json.loads((corpus / "tokenize" / "manifest.json").read_text())
    rows = sorted((r for r in pq.read_table(corpus / "mixture" / "heldout.parquet").to_pylist()
                   if r["bucket"] == bucket), key=lambda r: r["doc_id"])
    parts = []
    for row in rows:
        tokens = np.fromfile(corpus / "tokenize" / row["shard"], dtype=manifest["dtype"])
        parts += [tokens[row["offset"]:row["offset"] + row["length"]].astype(np.int64),
                  np.array([manifest["eos_id"]], dtype=np.int64)]
    flat = np.concatenate(parts)
    assert len(flat) > sequences * seq_len + 1, bucket
    return flat[1:sequences * seq_len + 1]


def unigram_entropy(tokens: np.ndarray) -> float:
    """Plug-in unigram entropy in nats per token: the smallest mean cross-entropy any context-free
    distribution can reach on exactly these tokens (their own frequencies, fitted after the fact)."""
    p = np.bincount(tokens) / len(tokens)
    p = p[p > 0]
    return float(-(p * np.log(p)).sum())


def tiny_run(**train_overrides) -> dict:
    """A model small enough for 2 CPU cores (about 90k parameters) with a recipe that learns in tens of steps."""
    train = {
        "seq_len": 32, "global_batch": 8, "token_budget": 400_000, "seed": 3, "device": "cpu",
        "optimizer": {"lr": 3.0e-3, "weight_decay": 0.1},
        "schedule": {"kind": "wsd", "warmup_steps": 2},
        "spike": {"window": 8, "min_history": 5, "k_sigma": 6.0},
        # keep_decay_start off: these runs' tests count and resume from the interval's checkpoints (the decay-start
        # one is tests/test_train_duties.py's and tests/test_anneal.py's)
        "checkpoint": {"interval": 4, "keep": 2, "keep_decay_start": False},
        "logging": {"log_interval": 2, "eval_interval": 4, "eval_sequences": 8},
    }
    for key, value in train_overrides.items():
        if isinstance(value, dict) and isinstance(train.get(key), dict):
            train[key] = {**train[key], **value}
        else:
            train[key] = value
    model = {"name": "test", "n_layers": 2, "d_model": 64, "n_heads": 4, "n_kv_heads": 2, "ffn_dim": 128,
             "qk_norm": True, "z_loss": 1.0e-4}
    return {"model": model, "train": train}


def full_train(run: dict) -> dict:
    """A run's train section as params.yaml holds it (composed from conf/: every key, defaults filled in), for a
    stage script that reads it key by key."""
    from tokenmill.train.config import TrainConfig

    return TrainConfig.model_validate(run["train"]).model_dump(mode="json")


# Every rank on this machine: one OpenMP thread, gloo over loopback.
RANK_ENV = {"OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo"}


def free_port() -> int:
    """A port free now, drawn below the kernel's ephemeral range (32768-60999 here). A port the kernel hands out
    for bind(0) is from that range, and so is every outgoing connection's: between this call and torchrun's
    bind, another test's process could take it, and a node that cannot reach its rendezvous waits past the
    test's timeout (one fresh-clone run hung 300 s this way in test_train_multinode, under load from the other
    worker). Random, so two workers rarely draw the same one; each candidate is checked by binding it."""
    rng = random.Random()
    for _ in range(200):
        port = rng.randrange(20000, 32000)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port in 20000-32000 after 200 tries")


def torchrun(nproc: int, script_args: list[str], env: dict | None = None, timeout: int = 300,
             check: bool = True) -> subprocess.CompletedProcess:
    """Run `torchrun --nproc-per-node nproc <args>` with gloo on 127.0.0.1, one thread per rank."""
    cmd = [str(Path(sys.executable).with_name("torchrun")), "--nproc-per-node", str(nproc), "--nnodes", "1",
           "--master-addr", "127.0.0.1", "--master-port", str(free_port()), *script_args]
    full_env = {**os.environ, **RANK_ENV, **(env or {})}
    proc = subprocess.run(cmd, env=full_env, capture_output=True, text=True, timeout=timeout, cwd=PROJECT_ROOT)
    if check and proc.returncode != 0:
        raise AssertionError(f"torchrun exited {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}")
    return proc


def probe_main(config_path: str, corpus: str, out_dir: str, grads_path: str) -> None:
    """Under torchrun (or alone): the full gradients and global loss of step 0's batch, saved by rank 0 to
    grads_path, then the whole run with train() in the same process group (its outputs in out_dir)."""
    import torch
    import torch.distributed as dist
    from torch.distributed.tensor import DTensor

    from tokenmill.train.config import parse_run
    from tokenmill.train.data import PlanStream
    from tokenmill.train.loop import Trainer, _world_mean, init_distributed, train

    run_cfg = json.loads(Path(config_path).read_text())
    device, created = init_distributed("cpu")
    stream = PlanStream(Path(corpus) / "tokenize", Path(corpus) / "mixture")
    trainer = Trainer(parse_run(run_cfg), stream, device)
    weights = {name: (p.full_tensor() if isinstance(p, DTensor) else p).detach().clone()
               for name, p in trainer.model.named_parameters()}
    batch = trainer.loader.batch(0)
    loss = float(_world_mean(trainer.forward_backward(batch.inputs, batch.targets)))
    grads = {}
    for name, p in trainer.model.named_parameters():
        g = p.grad
        grads[name] = (g.full_tensor() if isinstance(g, DTensor) else g).detach().clone()
    if dist.get_rank() == 0:
        torch.save({"loss": loss, "grads": grads, "weights": weights, "layout": trainer.layout.describe()}, grads_path)
    del trainer
    train(run_cfg, corpus, out_dir, None)
    if created:
        dist.destroy_process_group()


def zloss_comms_main(out_path: str) -> None:
    """Under torchrun with 2 ranks: lm_loss with z-loss on logits sharded over the vocabulary (as tensor
    parallelism leaves them, under loss_parallel), forward and backward, once with vocab_sharded and once
    without; rank 0 writes each one's collectives (CommDebugMode), loss and input gradient to out_path."""
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor
    from torch.distributed.tensor.debug import CommDebugMode
    from torch.distributed.tensor.parallel import loss_parallel

    from tokenmill.train.model import lm_loss

    dist.init_process_group("gloo")
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    g = torch.Generator().manual_seed(0)
    logits, targets = torch.randn(2, 8, 64, generator=g), torch.randint(0, 64, (2, 8), generator=g)
    out = {}
    for sharded in (True, False):
        x = distribute_tensor(logits, mesh, [Shard(2)]).requires_grad_()
        with CommDebugMode() as comm, loss_parallel():
            loss, _ = lm_loss(x, targets, z_loss=0.1, vocab_sharded=sharded)
            loss.backward()
        out[str(sharded)] = {"comms": {str(k): v for k, v in comm.get_comm_counts().items()},
                             "loss": float(loss.full_tensor()), "grad": x.grad.full_tensor().tolist()}
    if dist.get_rank() == 0:
        Path(out_path).write_text(json.dumps(out))
    dist.destroy_process_group()


if __name__ == "__main__":
    from tokenmill.train.faults import exit_rank  # the ranks leave as the training entry point's do

    if sys.argv[1] == "probe":
        probe_main(*sys.argv[2:6])
    elif sys.argv[1] == "zloss_comms":
        zloss_comms_main(sys.argv[2])
    else:
        raise SystemExit(f"unknown command {sys.argv[1]!r}")
    exit_rank(0)
