"""A scale preset on its own hardware: tokens/s, MFU under both FLOP conventions, peak memory, and a resume
from a checkpoint; on synthetic tokens, since throughput does not depend on what the tokens say and a GPU node
has neither ../shared nor the pipeline's outputs.

    python benchmarks/bench_train_gpu.py --scale h100_1x --steps 100 [--write]
    python benchmarks/bench_train_gpu.py --scale cpu_demo --steps 6     # the same path on 2 CPU ranks

Composing needs DVC's Hydra integration, which a GPU node may lack: compose where the project is installed
(`--scale h100_1x --steps 100 --save-config h100_1x.json` writes the run and stops), then on the node
`--config h100_1x.json`. There the training code needs only pydantic besides torch, numpy, pyarrow and PyYAML.

The run is what `-S scale=<name>` composes (Hydra: model and train sections), capped at --steps, with no
held-out evaluation and a checkpoint half way. Leg 1 trains to half way and leaves with that checkpoint
(`--stop-after`, as a job at its time limit); leg 2 is a new torchrun that resumes from it and finishes. The
figures are each leg's own (tokens/s leaves out the leg's first step, where torch.compile works); leg 2 is the
warm one. The corpus: documents of 512 to 8,192 uniformly random token ids in the tokenize stage's layout,
planned by tokenmill.mixture.build_plan as one bucket.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from benchlib import machine, timed_run, write_section  # noqa: E402


def synthetic_corpus(root: Path, vocab: int, tokens: int, seed: int = 0) -> Path:
    """root/tokenize and root/mixture as the tokenize and mixture stages lay them out, holding `tokens` tokens."""
    from tokenmill import schema
    from tokenmill.mixture import build_plan, parse_phases
    from tokenmill.tokenize import INDEX

    rng = np.random.default_rng(seed)
    lengths = []
    while sum(lengths) < tokens:
        lengths.append(int(rng.integers(512, 8193)))
    eos, dtype = 2, np.uint16 if vocab <= 2**16 else np.uint32
    flat = rng.integers(3, vocab, size=sum(lengths) + len(lengths), dtype=dtype)
    ends = np.cumsum(np.array(lengths) + 1) - 1
    flat[ends] = eos  # an end-of-text after every document, as the tokenize stage writes them
    out = root / "tokenize"
    rel = "tokens/web/00000.bin"
    (out / rel).parent.mkdir(parents=True, exist_ok=True)
    flat.tofile(out / rel)
    offsets = np.concatenate([[0], ends[:-1] + 1])
    rows = [{"doc_id": f"synthetic-{i:07d}", "source": "synthetic", "bucket": "web", "shard": rel,
             "offset": int(o), "length": int(n)} for i, (o, n) in enumerate(zip(offsets, lengths))]
    schema.write_parquet(rows, INDEX, out / "index" / "00000.parquet")
    (out / "manifest.json").write_text(json.dumps({"stage": "tokenize", "vocab_size": vocab, "eos_id": eos,
                                                   "dtype": np.dtype(dtype).name}))
    phases = parse_phases({"bulk": {"fraction": 1.0, "weights": {"web": 1.0}}})
    plan = build_plan(pa.Table.from_pylist(rows, schema=INDEX), phases, tokens, seed, max_epochs=1.0)
    schema.write_parquet(plan["plan"], plan["plan"].schema, root / "mixture" / "plan.parquet")
    held = pa.Table.from_pylist([], schema=pa.schema([(n, INDEX.field(n).type) for n in
                                                      ("doc_id", "bucket", "shard", "offset", "length")]))
    schema.write_parquet(held, held.schema, root / "mixture" / "heldout.parquet")
    return root


def leg(nproc: int, config: Path, corpus: Path, out: Path, stop_after: int | None) -> dict:
    """One torchrun of tokenmill.train; rank 0's printed summary."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
           "-m", "tokenmill.train", "--config", str(config), "--data-root", str(corpus), "--out", str(out)]
    if stop_after:
        cmd += ["--stop-after", str(stop_after)]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    started = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    if proc.returncode != 0:
        sys.exit(f"bench_train_gpu: training failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}")
    summary = json.loads(proc.stdout[proc.stdout.index("{"):])
    summary["wall_seconds"] = time.perf_counter() - started
    return summary


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scale", default="h100_1x")
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--config", type=Path, help="a run saved by --save-config, instead of composing --scale")
    ap.add_argument("--save-config", type=Path, help="compose --scale for --steps, write the run here and stop")
    ap.add_argument("--write", action="store_true", help="replace the section of this scale in RESULTS.md")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-train-gpu-") as tmp:
        tmp = Path(tmp)
        if args.config:
            saved = json.loads(args.config.read_text())
            cfg, vocab, args.scale, args.steps = saved["run"], saved["vocab_size"], saved["scale"], saved["steps"]
        else:
            cfg, vocab = timed_run(args.scale, args.steps, tmp, checkpoint_interval=max(1, args.steps // 2))
        if args.save_config:
            args.save_config.write_text(json.dumps({"scale": args.scale, "steps": args.steps, "vocab_size": vocab,
                                                    "run": cfg}, indent=1))
            return
        t = cfg["train"]
        (tmp / "run.json").write_text(json.dumps(cfg))
        corpus = synthetic_corpus(tmp / "corpus", vocab, args.steps * t["seq_len"] * t["global_batch"] + 1)
        nproc = t["launch"]["nproc_per_node"]
        half = max(1, args.steps // 2)
        first = leg(nproc, tmp / "run.json", corpus, tmp / "out", stop_after=half)
        second = leg(nproc, tmp / "run.json", corpus, tmp / "out", stop_after=None)
    assert first["stopped_at"] == half and second["steps"] == args.steps, (first, second)
    assert second["timing"]["resumed_from_step"] == half, second["timing"]  # leg 2 resumed, not restarted

    from tokenmill.train.config import model_size

    size = model_size(cfg["model"], vocab, t["seq_len"])
    m = machine(["torch"])
    device = second["timing"]["device"] if second["timing"]["device"] != "cpu" else m["cpu"]

    def row(name: str, s: dict) -> str:
        tm = s["timing"]
        pct = lambda x: f"{100 * x:.1f}%" if x is not None else "–"  # noqa: E731
        return (f"| {name} | {tm['steps_timed']} | {tm['tokens_per_second']:,.0f} | {pct(tm['mfu'])} | "
                f"{pct(tm['mfu_causal'])} | {tm['peak_memory_bytes'] / 2**30:.1f} | {s['wall_seconds']:.0f} |")

    par, mdl, peak = t["parallel"], cfg["model"], second["timing"]["peak_flops_per_device"]
    layout = (f"dp_replicate {par['dp_replicate']} x dp_shard {par['dp_shard']} x tp {par['tp']}, compile "
              f"{par['compile']}, activation checkpointing {par['activation_checkpoint']}, parameters "
              f"{par['param_dtype']} (auto: bf16 on GPU)")
    text = f"""## Training throughput: scale={args.scale}

Machine: {device}; {m['nproc']} CPU cores; Python {m['python']}, torch {m['versions']['torch']}.
Command: `python benchmarks/bench_train_gpu.py --scale {args.scale} --steps {args.steps} --write`

The preset's model, {size['params']:,} parameters ({mdl['n_layers']} layers, d {mdl['d_model']}, {mdl['n_heads']} heads,
{mdl.get('n_kv_heads')} KV heads, FFN {mdl.get('ffn_dim')}, vocabulary {vocab:,}), sequence {t['seq_len']}, global batch
{t['global_batch']}, micro-batch {t.get('micro_batch') or 'the whole per-rank batch'}; {layout}; {nproc} process(es)
per node; on synthetic tokens. FLOPs per token {size['flops_per_token']:,} (6 x matmul parameters + 12 x layers x d
x seq), {size['flops_per_token_causal']:,} with the causal attention term halved; MFU against
{f"{peak:.3g} FLOP/s per device" if peak else "no peak (none tabled for this device): no MFU"}. Leg 1 trained
steps 1-{half} and left with a checkpoint; leg 2, a new torchrun, resumed from it and trained to step {args.steps}.

| leg | steps timed | tokens/s | MFU | MFU (causal) | peak memory GiB | wall s |
| --- | ---: | ---: | ---: | ---: | ---: | ---: |
{row("1: steps 1-" + str(half), first)}
{row(f"2: resumed, steps {half + 1}-{args.steps}", second)}
"""
    print(text)
    if args.write:
        write_section(ROOT / "benchmarks" / "RESULTS.md", f"## Training throughput: scale={args.scale}", text)


if __name__ == "__main__":
    main()
