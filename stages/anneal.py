"""DVC stage `anneal`: every annealing test of `anneals` (tokenmill.anneal), branched from the full run.

Usage (dvc.yaml): python stages/anneal.py
Each test anneals the full run twice from the checkpoint where its decay begins, with the source mixed into the
decay phase at `share` and without it, and writes data/anneal/<name>/result.json (the figures and verdicts) and
metrics/anneal.json. A changed share retrains only that test's `with` arm (the runs are resumable, as training
stages' are).
"""

import sys

from tokenmill.anneal import AnnealError
from tokenmill.anneal.stage import run_anneals
from tokenmill.runtime import ParamError, load_params, script
from tokenmill.train.config import TrainConfigError
from tokenmill.train.stage import LaunchError


def main() -> int:
    p = load_params("anneals", "mixture", "model", "train")
    try:
        results = run_anneals(p["anneals"] or {}, p)
    except (AnnealError, ParamError, TrainConfigError, LaunchError) as exc:
        print(exc, file=sys.stderr)
        return 2
    for name, r in results.items():
        rows = {row["metric"]: row for row in r["verdicts"]}
        h = rows.get("heldout_mean")
        said = f"held-out loss with - without {h['difference']:+.4f} ± {h['sigma']:.4f}: {h['verdict']}" if h else "no held-out loss"
        print(f"anneal {name}: {r['source']} at {r['share']:g} of the {r['phase']} phase from step {r['branch_step']}, "
              f"{r['steps_per_arm']} steps per arm ({r['cost']['fraction_of_full_run']:.1%} of the full run); {said}")
    if not results:
        print("anneal: no annealing test configured (anneals)")
    return 0


if __name__ == "__main__":
    sys.exit(script(main))
