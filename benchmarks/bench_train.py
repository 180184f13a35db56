"""Training throughput on CPU: tokens per second per core of the demo model (scale=cpu_demo).

The cpu_demo recipe (conf/model/tiny.yaml, conf/train/default.yaml, conf/scale/cpu_demo.yaml) on real text
(WikiText-2 and Tiny Shakespeare from ../shared/data, tokenized with a BPE vocabulary of the demo's size),
run by tokenmill.train.loop.train: once in one process with one thread, once as the demo runs it (torchrun,
2 ranks FSDP, one thread each). The first step (allocator warm-up) is left out of every figure.

    .venv/bin/python benchmarks/bench_train.py [--steps 30] [--write]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from benchlib import machine, timed_run, write_section  # noqa: E402
from train_helpers import build_corpus, torchrun  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--write", action="store_true", help="replace the Training section of RESULTS.md")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-train-") as tmp:
        tmp = Path(tmp)
        cfg, demo_vocab = timed_run("cpu_demo", args.steps, tmp, checkpoint_interval=10**6)  # one, at the end
        cfg["train"].update(device="cpu", launch={**cfg["train"]["launch"], "nproc_per_node": 1})
        corpus = build_corpus(tmp / "corpus", token_budget=1_500_000, vocab_size=demo_vocab)
        vocab = json.loads((corpus / "tokenize" / "manifest.json").read_text())["vocab_size"]
        (tmp / "cfg.json").write_text(json.dumps(cfg))
        results = {}
        for name, nproc in (("1 process, 1 thread", 1), ("torchrun 2 ranks FSDP, 1 thread each", 2)):
            out = tmp / f"run{nproc}"
            if nproc == 1:
                proc = subprocess.run([sys.executable, "-m", "tokenmill.train", "--config", str(tmp / "cfg.json"),
                                       "--data-root", str(corpus), "--out", str(out)], capture_output=True,
                                      text=True, env={**os.environ, "OMP_NUM_THREADS": "1"}, check=True, cwd=ROOT)
            else:
                proc = torchrun(2, ["-m", "tokenmill.train", "--config", str(tmp / "cfg.json"), "--data-root",
                                    str(corpus), "--out", str(out)], timeout=600)
            summary = json.loads(proc.stdout[proc.stdout.index("{"):])
            tps = summary["timing"]["tokens_per_second"]
            results[name] = {"cores": nproc, "tokens_per_second": tps, "per_core": tps / nproc,
                             "params": summary["params"], "flops_per_token": summary["flops_per_token"],
                             "gflops_per_core": tps / nproc * summary["flops_per_token"] / 1e9,
                             "peak_rss_mib": summary["timing"]["peak_memory_bytes"] / 2**20}
            print(name, json.dumps(results[name]))
    m = machine(["torch"])
    size = next(iter(results.values()))
    rows = "\n".join(f"| {k} | {v['tokens_per_second']:,.0f} | {v['per_core']:,.0f} | {v['gflops_per_core']:.1f} "
                     f"| {v['peak_rss_mib']:,.0f} |" for k, v in results.items())
    text = f"""## Training

Machine: {m['nproc']} cores ({m['cpu']}), {m['ram_gib']:.0f} GiB, Python {m['python']}, torch {m['versions']['torch']}.
Command: `.venv/bin/python benchmarks/bench_train.py --steps {args.steps} --write`

The demo model (scale=cpu_demo: conf/model/tiny.yaml, {size['params']:,} parameters with a {vocab:,}-token
vocabulary, tied embeddings; sequence 256, 16 sequences = 4,096 tokens per step, AdamW, fp32) trained by
`tokenmill.train` on real text for {args.steps} steps; the first step is left out. FLOPs per token
{size['flops_per_token']:,} (6 x matmul parameters + 12 x layers x d_model x seq_len).

| run | tokens/s | tokens/s per core | GFLOP/s per core | peak RSS per rank (MiB) |
| --- | ---: | ---: | ---: | ---: |
{rows}

The ~1B model on one H100: "Training throughput on GPU: scale=h100_1x" and "Training on one H100: findings (2026-11-26)".
"""
    print(text)
    if args.write:
        write_section(ROOT / "benchmarks" / "RESULTS.md", "## Training", text)


if __name__ == "__main__":
    main()
