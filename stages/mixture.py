"""DVC stage `mixture`: the deterministic sampling plan training reads, with its lineage tables.

Usage (dvc.yaml): python stages/mixture.py <token stage>
It reads the train keys a plan depends on, never the optimiser's: a learning-rate change does not re-plan.
"""

import sys
from pathlib import Path

from tokenmill.mixture import MixtureError
from tokenmill.mixture.params import Mixture
from tokenmill.mixture.stage import plan_mixture
from tokenmill.runtime import StageRun, load_params, script

BUDGET_KEYS = ("seq_len", "global_batch", "token_budget", "tokens_per_param")


def stage(p: dict, input_stage: str, data_root: str | Path = "data", plots_dir: str | Path = "plots") -> dict:
    data_root, mixture = Path(data_root), Mixture.resolve(p["mixture"])
    params = {"mixture": mixture.model_dump(), "train": dict(p["train"]), "model": dict(p["model"])}
    with StageRun("mixture", data_root / "mixture", params, input_stage=input_stage,
                  libraries=("numpy", "duckdb")) as run:
        run.record(plan_mixture(data_root / input_stage, mixture, p["train"], p["model"], run.tmp, plots_dir))
    return run.manifest


def main(input_stage: str) -> int:
    try:
        m = stage(load_params("mixture", *(f"train.{k}" for k in BUDGET_KEYS), "model"), input_stage)
    except MixtureError as exc:
        print(exc, file=sys.stderr)
        return 2
    print(f"mixture {m['mixture_name']}: plan of {m['token_budget']:,} tokens, {m['steps']} steps")
    return 0


if __name__ == "__main__":
    sys.exit(script(main))
