"""`python -m tokenmill.train --config run.json --data-root data --out data/train/<run> --live <dir>`

The entry point torchrun launches (one process per GPU or CPU rank): every rank runs train(); rank 0 prints
the summary. The config file is JSON {"model": {...}, "train": {...}}.

A rank that fails says why in one line: a user's error (configuration, data, a diverged run) as `train: <why>`
on stderr and exit code 2; a bug with its traceback and exit code 1. Either way, where the training stage
set TOKENMILL_TRAIN_REASONS (a directory), the rank also writes that line to attempt<k>/rank<N>.txt there
(tokenmill.train.faults): torchrun's log interleaves every rank's output and ends with its own banner, so the
stage reads the reason from these files, not from the log (tokenmill.train.stage.failure_reason), and lists
the causes of torchrun's restarts from them.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch

from tokenmill.train.config import TrainConfigError
from tokenmill.train.data import DataError
from tokenmill.train.faults import exit_rank, record_reason


def _one_line(text: str) -> str:
    return " ".join(line.strip() for line in text.splitlines() if line.strip())


def _user_error(message: str) -> int:
    line = f"train: {_one_line(message)}"
    print(line, file=sys.stderr)
    record_reason(line)
    return 2


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
    from tokenmill.train.loop import TrainError, train  # torch after the arguments: --help and a usage error answer at once

    try:
        with open(args.config) as f:
            run_cfg = json.load(f)
        summary = train(run_cfg, args.data_root, args.out, args.live, tokens_dir=args.tokens, plan_dir=args.plan,
                        stop_after=args.stop_after, evalset=args.evalset)
    except (TrainConfigError, DataError, TrainError, ValueError, FileNotFoundError) as exc:
        return _user_error(str(exc))
    except torch.OutOfMemoryError as exc:
        # Seen on one H100: a scout at micro-batch 32 asked for 16 GiB of float32 logits. One line, not the
        # allocator's paragraph, and what to change.
        first = str(exc).split(". ", 2)
        return _user_error(f"out of GPU memory ({'. '.join(first[:2])}): lower train.micro_batch (a scout's: "
                           "scouts.<rung>.micro_batch) or set train.parallel.activation_checkpoint")
    except Exception as exc:  # a bug: the traceback goes to the log, the last line of it to the stage
        record_reason(": ".join(filter(None, (type(exc).__name__, _one_line(str(exc))))))
        raise
    if os.environ.get("RANK", "0") == "0":
        print(json.dumps(summary, indent=2, sort_keys=True))
    return 0


if __name__ == "__main__":
    exit_rank(main())
