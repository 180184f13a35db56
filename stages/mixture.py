"""DVC stage `mixture`: the deterministic sampling plan training reads, with its lineage tables.

Usage (dvc.yaml): python stages/mixture.py <token stage>
It reads the train keys a plan depends on, never the optimiser's: a learning-rate change does not re-plan.
"""

import sys

from tokenmill.mixture import MixtureError
from tokenmill.mixture.stage import run_mixture
from tokenmill.runtime import load_params, script

BUDGET_KEYS = ("seq_len", "global_batch", "token_budget", "tokens_per_param")


def main(input_stage: str) -> int:
    p = load_params("mixture", *(f"train.{k}" for k in BUDGET_KEYS), "model")
    try:
        m = run_mixture(p["mixture"], p["train"], p["model"], data_root="data", input_stage=input_stage)
    except MixtureError as exc:
        print(exc, file=sys.stderr)
        return 2
    print(f"mixture {m['mixture_name']}: plan of {m['token_budget']:,} tokens, {m['steps']} steps")
    return 0


if __name__ == "__main__":
    sys.exit(script(main))
