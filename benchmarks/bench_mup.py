"""Does the best learning rate found at a small width hold at a larger one? μP against the standard
parametrisation (train.mup_base_width; tokenmill.train.model.Transformer), on CPU.

The training tests' corpus (tests/train_helpers.py: WikiText-2 and Tiny Shakespeare, a 512-token SentencePiece
vocabulary) and the training loop itself (tokenmill.train.loop.train): models of 2 blocks, head_dim 32, SwiGLU
3 x width, QK-norm, untied, at widths 64, 128 and 256, each trained for --steps steps (sequences of 64 tokens,
16 per step, WSD with 10% warm-up) at every learning rate of a grid doubling from 5e-4 to 3.2e-2, once in
the standard parametrisation and once under μP with base width 64 (at width 64 the two differ only in the
attention's scale). The figure is the final held-out loss (mean over the two buckets, 32 sequences each). The
same data, steps and seeds on both sides; one process, one thread. A third row per width is μP with attention
scores scaled by 1/head_dim, μP's rule for heads that grow wider (what tokenmill.train.model chose against: the
benchmark substitutes the scale into SDPA for those runs).

    .venv/bin/python benchmarks/bench_mup.py [--steps 200] [--write]
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from benchlib import machine, write_section  # noqa: E402
from train_helpers import build_corpus  # noqa: E402

WIDTHS = (64, 128, 256)
LRS = tuple(5e-4 * 2 ** k for k in range(7))  # 5e-4 .. 3.2e-2
BASE = 64


def run_config(width: int, lr: float, mup: bool, steps: int) -> dict:
    model = {"name": f"w{width}", "n_layers": 2, "d_model": width, "n_heads": width // 32, "ffn_dim": 3 * width,
             "qk_norm": True, "tie_embeddings": False}
    train = {"seq_len": 64, "global_batch": 16, "token_budget": 10**9, "max_steps": steps, "seed": 0,
             "device": "cpu", "mup_base_width": BASE if mup else None,
             "optimizer": {"lr": lr, "weight_decay": 0.1},
             "schedule": {"kind": "wsd", "warmup_steps": steps // 10},
             "checkpoint": {"interval": 10**6},
             "logging": {"log_interval": 10**6, "eval_interval": 10**6, "eval_sequences": 32, "noise_points": 1}}
    return {"model": model, "train": train}


def _attention_over_head_dim(on: bool) -> None:
    """SDPA in tokenmill.train.model with scale 1/head_dim (on) or its own 1/sqrt(head_dim) (off)."""
    import torch.nn.functional as F

    import tokenmill.train.model as model

    if not on:
        model.F = F
        return

    class _F:
        def __getattr__(self, name):
            return getattr(F, name)

        @staticmethod
        def scaled_dot_product_attention(q, k, v, **kw):
            return F.scaled_dot_product_attention(q, k, v, scale=1.0 / q.shape[-1], **kw)

    model.F = _F()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--write", action="store_true", help="replace the section in benchmarks/RESULTS.md")
    args = ap.parse_args()
    import torch

    from tokenmill.train.loop import train

    torch.set_num_threads(1)
    os.environ.pop("TOKENMILL_FAULT", None)
    m = machine(["torch"])
    losses: dict[tuple[str, int, float], float] = {}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        corpus = build_corpus(Path(tmp) / "corpus")
        for name, mup, over_head_dim in (("standard", False, False), ("μP", True, False),
                                         ("μP, attention / head_dim", True, True)):
            _attention_over_head_dim(over_head_dim)
            for width in WIDTHS:
                for lr in LRS:
                    out = Path(tmp) / f"{name}-{width}-{lr}"
                    summary = train(run_config(width, lr, mup, args.steps), corpus, out, None)
                    held = list(summary["heldout_loss"].values())
                    value = sum(held) / len(held) if held and all(map(math.isfinite, held)) else math.inf
                    losses[(name, width, lr)] = value
                    print(f"{name} width {width} lr {lr:.4g}: held-out {value:.4f}", flush=True)
        _attention_over_head_dim(False)
    minutes = (time.perf_counter() - started) / 60

    lines = ["## μP: the best learning rate across widths", "",
             f"Machine: {m['nproc']} cores ({m['cpu']}), {m['ram_gib']:.0f} GiB, Python {m['python']}, "
             f"torch {m['versions']['torch']}, one thread; {minutes:.0f} minutes for all runs.",
             f"Command: `.venv/bin/python benchmarks/bench_mup.py --steps {args.steps} --write`", "",
             "Final held-out loss (nats, mean of two buckets) after " + str(args.steps) + " steps of "
             "1,024 tokens; models of 2 blocks, head_dim 32, at three widths, every learning rate of the grid, in "
             "the standard parametrisation and under μP with base width 64 (benchmarks/bench_mup.py says the "
             "rest). The best learning rate of each row is in bold.", "",
             "| parametrisation | width | " + " | ".join(f"lr {lr:.4g}" for lr in LRS) + " | best lr |",
             "| --- | ---: | " + " | ".join("---:" for _ in LRS) + " | ---: |"]
    best = {}
    for p in ("standard", "μP", "μP, attention / head_dim"):
        for width in WIDTHS:
            row = [losses[(p, width, lr)] for lr in LRS]
            i = min(range(len(LRS)), key=row.__getitem__)
            best[(p, width)] = LRS[i]
            cells = [("**%.4f**" if j == i else "%.4f") % v if math.isfinite(v) else "diverged" for j, v in enumerate(row)]
            lines.append(f"| {p} | {width} | " + " | ".join(cells) + f" | {LRS[i]:.4g} |")
    names = ("standard", "μP", "μP, attention / head_dim")
    shift = {p: best[(p, WIDTHS[-1])] / best[(p, WIDTHS[0])] for p in names}
    cost = {p: losses[(p, WIDTHS[-1], best[(p, WIDTHS[0])])] - losses[(p, WIDTHS[-1], best[(p, WIDTHS[-1])])]
            for p in names}
    top = {p: losses[(p, WIDTHS[-1], best[(p, WIDTHS[-1])])] for p in names}
    lines += ["",
              f"From width {WIDTHS[0]} to {WIDTHS[-1]} the best learning rate moved by a factor of "
              f"{shift['standard']:g} in the standard parametrisation and {shift['μP']:g} under μP. Taking width "
              f"{WIDTHS[0]}'s best learning rate to width {WIDTHS[-1]} costs {cost['standard']:.4f} nats there in "
              f"the standard parametrisation and {cost['μP']:.4f} under μP. At width {WIDTHS[-1]} the best runs "
              f"reach {top['standard']:.4f} (standard), {top['μP']:.4f} (μP) and {top['μP, attention / head_dim']:.4f} "
              "(μP with attention / head_dim, whose best learning rate moved by a factor of "
              f"{shift['μP, attention / head_dim']:g}): at a fixed head size 1/head_dim only makes attention softer. "
              "The grid's step is a factor of 2, so a shift of one step is within what the grid can resolve; short "
              "runs on a small corpus, one seed."]
    text = "\n".join(lines)
    print(text)
    if args.write:
        write_section(ROOT / "benchmarks" / "RESULTS.md", "## μP: the best learning rate across widths", text)


if __name__ == "__main__":
    main()
