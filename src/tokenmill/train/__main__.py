"""`python -m tokenmill.train --config run.json --data-root data --out data/train/<run> --live <dir>`

The entry point torchrun launches (one process per GPU or CPU rank): every rank runs train(); rank 0 prints
the summary. The config file is JSON {"model": {...}, "train": {...}}.
"""

from __future__ import annotations

import argparse
import json
import sys

import torch

from tokenmill.train.config import TrainConfigError
from tokenmill.train.data import DataError


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tokenmill.train")
    ap.add_argument("--config", required=True, help="JSON file with the model and train sections")
    ap.add_argument("--data-root", default="data")
    ap.add_argument("--out", required=True, help="run directory: checkpoints, steps, final weights, summary")
    ap.add_argument("--live", default=None, help="DVCLive directory (rank 0 logs there)")
    ap.add_argument("--tokens", default=None, help="token stage directory (default: <data-root>/tokenize)")
    ap.add_argument("--plan", default=None, help="mixture stage directory (default: <data-root>/mixture)")
    ap.add_argument("--evalset", default=None, help="in-loop benchmark requests (the evalset stage's requests.parquet)")
    ap.add_argument("--stop-after", type=int, default=None,
                    help="leave after this many steps with a checkpoint (a later call resumes)")
    args = ap.parse_args(argv)
    from tokenmill.train.loop import TrainError, train

    try:
        with open(args.config) as f:
            run_cfg = json.load(f)
        summary = train(run_cfg, args.data_root, args.out, args.live, tokens_dir=args.tokens, plan_dir=args.plan,
                        stop_after=args.stop_after, evalset=args.evalset)
    except (TrainConfigError, DataError, TrainError, ValueError, FileNotFoundError) as exc:
        print(f"train: {exc}", file=sys.stderr)
        return 2
    except torch.OutOfMemoryError as exc:
        # Seen on one H100: a scout at micro-batch 32 asked for 16 GiB of float32 logits. One line, not the
        # allocator's paragraph, and what to change.
        first = str(exc).split(". ", 2)
        print(f"train: out of GPU memory ({'. '.join(first[:2])}): lower train.micro_batch (a scout's: "
              "scouts.<rung>.micro_batch) or set train.parallel.activation_checkpoint", file=sys.stderr)
        return 2
    import os

    if os.environ.get("RANK", "0") == "0":
        print(json.dumps(summary, indent=2, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
