"""DVC stages `scout@<name>` and `pretrain`: train a model on the mixture's plan, launched with torchrun.

Usage (dvc.yaml): python stages/train.py <run> <plan stage> <token stage> [<evalset stage>]
  run: `pretrain` (params model, train), or `scout/<name>`: one rung of the scout ladder (params
  scouts.<name> and every train key but the seeds): its own model size, token budget and seed, the same
  recipe, the same plan.
The run resumes from its newest complete checkpoint when a crash interrupted it (the output is persistent).
The evalset stage's benchmark requests are scored at every evaluation (tokenmill.evaluate.evalset).
"""

import sys

from tokenmill.runtime import load_params, script
from tokenmill.train.config import SCOUT_RECIPE, TrainConfigError, scout_run_config
from tokenmill.train.stage import LaunchError, lr_sweep, run_train_stage, seed_replicas


def main(run: str, plan_stage: str, token_stage: str, evalset_stage: str | None = None) -> int:
    try:
        if run == "pretrain":
            stage, p = "pretrain", load_params("model", "train")
            cfg, replicas, sweep = {"model": p["model"], "train": p["train"]}, [], []
        else:
            name = run.removeprefix("scout/")
            stage, p = f"scout@{name}", load_params(f"scouts.{name}", *(f"train.{k}" for k in SCOUT_RECIPE))
            cfg = scout_run_config(p["scouts"][name], p["train"])
            replicas = seed_replicas(p["scouts"][name], cfg)  # scouts.<name>.seeds - 1 more runs
            sweep = lr_sweep(p["scouts"][name], cfg)  # one more run per scouts.<name>.lrs
        slug = stage.replace("@", "/")
        s = run_train_stage(stage, cfg, "data", plan_stage, token_stage, out_dir=f"data/train/{slug}",
                            live_dir=f"dvclive/{slug}", metrics_path=f"metrics/train/{slug}.json",
                            metrics_group=None if run == "pretrain" else "scout", evalset_stage=evalset_stage,
                            replicas=replicas, sweep=sweep)
    except (TrainConfigError, LaunchError) as exc:
        print(exc, file=sys.stderr)
        return 2
    print(f"{stage}: {s['steps']} steps, {s['params']:,} parameters, final train loss "
          f"{s['final_train_loss_mean10']:.3f}, held-out {s['heldout_loss']}")
    return 0


if __name__ == "__main__":
    sys.exit(script(main))
