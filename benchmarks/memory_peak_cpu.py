"""Where a one-rank run's allocated bytes peak, on CPU: the training loop of tokenmill.train (FSDP2 over one rank
on gloo, as on one unsharded GPU) under torch.profiler with profile_memory, its allocation events summed in time
order. Prints the peak in bytes a parameter and the FSDP steps just before it (RESULTS "Long context on GPU": the
8B blocks with full checkpointing peaked at 24 bytes a parameter on an H200; this says in which phase of a step).

    python benchmarks/memory_peak_cpu.py --layers 4 --checkpoint full --param-dtype bfloat16 [--no-health]

A small model (d 256, vocabulary 512) so that the state, not the logits, is most of the bytes. CPU only: the CUDA
caching allocator and the reduce-scatter stream of a GPU are not here, so the bytes differ; the order of events
does not.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "benchmarks")]

from bench_train_gpu import synthetic_corpus  # noqa: E402

VOCAB = 512


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--checkpoint", default="full", choices=["none", "selective", "full"])
    ap.add_argument("--param-dtype", default="bfloat16", choices=["bfloat16", "float32"])
    ap.add_argument("--micro-batches", type=int, default=2)
    ap.add_argument("--no-health", action="store_true")
    args = ap.parse_args()

    import torch
    from torch.profiler import ProfilerActivity, profile

    from tokenmill.train.config import model_size, parse_model
    from tokenmill.train.loop import train

    model = {"n_layers": args.layers, "d_model": 256, "n_heads": 4, "n_kv_heads": 2, "ffn_dim": 768}
    run = {"model": model, "train": {
        "seq_len": 256, "global_batch": 4 * args.micro_batches, "micro_batch": 4, "max_steps": 2, "device": "cpu",
        "tokens_per_param": 10**6, "logging": {"eval_sequences": 0, "eval_interval": 10**9},
        "checkpoint": {"interval": 10**6, "keep_decay_start": False}, "health": {"enabled": not args.no_health},
        "parallel": {"activation_checkpoint": args.checkpoint, "param_dtype": args.param_dtype, "compile": False}}}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        tokens = 2 * 256 * run["train"]["global_batch"] + 1
        corpus = synthetic_corpus(tmp / "corpus", VOCAB, 2 * tokens, plan_tokens=tokens, train=run["train"])
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            train(run, corpus, tmp / "out", None)
    params = model_size(parse_model(model), VOCAB)["params"]
    events = list(prof.profiler.kineto_results.events())
    live = peak = peak_at = 0
    for at, nbytes in sorted((e.start_ns(), e.nbytes()) for e in events if e.name() == "[memory]"):
        live += nbytes
        if live > peak:
            peak, peak_at = live, at
    ops = [(e.name(), e.start_ns(), e.start_ns() + e.duration_ns()) for e in events if e.name() != "[memory]"]
    fsdp = [name for name, _, end in sorted(ops, key=lambda o: o[2]) if name.startswith("FSDP::") and end <= peak_at]
    reduces = sum(1 for name in fsdp if name == "FSDP::post_backward_reduce")  # the root's: one a step
    inside = [name for name, a, b in sorted(ops, key=lambda o: o[2] - o[1]) if a <= peak_at <= b][:3]
    print(json.dumps({"torch": torch.__version__, "params": params, "peak_bytes": peak,
                      "bytes_per_param": round(peak / params, 2), "step": reduces, "in": inside,
                      "fsdp_before": fsdp[-4:]}, indent=1))


if __name__ == "__main__":
    main()
