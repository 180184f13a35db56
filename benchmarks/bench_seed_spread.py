"""The full run's seed spread against what its ladder predicts for it (issue 42, item 3; RESULTS.md, "The full run's
seed spread against its ladder's").

Run where `make demo` has built the data stages (data/tokenize, data/evalset):
    python benchmarks/bench_seed_spread.py --project . --work /tmp/seeds [--recipe default] [--rung-seeds 6]
        [--largest-seeds 4] [--full-seeds 3] [--set train.optimizer.lr=0.01 ...]

One recipe is planned and trained as bench_decision_accuracy.py trains it (the pipeline's own stage commands in a
folder of its own, params.yaml composed as `dvc exp run -S` composes it), with more seeds: every rung of the scale's
ladder at `--rung-seeds` seeds, the largest at `--largest-seeds` (scouts.<rung>.seeds: replica k seeds its
initialisation and data order with k), and the full run at `--full-seeds` (train.seed = train.data_seed = k).
A folder that holds a finished run is read, not trained again.

Per run and metric: the seed σ (sample standard deviation over seeds, nothing else: no checkpoint-noise window) with
its 90% confidence interval (the χ² interval of a normal sample's σ). What the ladder predicts for the full run's σ:
  per rung         each replicated rung's relative seed σ, carried to the full run's value; the largest rung
                   trained with several seeds is compare's rule (tokenmill.evaluate.compare._seed_noise: what a
                   verdict between unreplicated full runs uses). A rung with more seeds is also shown from its
                   first 2 alone, as the demo's ladder trains s1 and s2 (one degree of freedom)
  pooled           the relative seed σ pooled over every replicated rung (their variances weighted by degrees of
                   freedom), carried the same way
and the ratio of the full run's σ to each, with the 90% interval of that ratio (the F distribution of two sample
variances). Item 3 asks the ratio to be within 2.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import subprocess
from pathlib import Path

import numpy as np
import yaml
from scipy import stats

from tokenmill.evaluate.compare import SEED_RECORD, relative_seed_sigma

_spec = importlib.util.spec_from_file_location("bench_decision_accuracy",
                                               Path(__file__).with_name("bench_decision_accuracy.py"))
decide = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(decide)

METRICS = ("heldout_mean", "benchmarks_mean.bpb", "heldout.code", "heldout.web/high")


def sigma_interval(values: list[float], level: float = 0.9) -> tuple[float, float, float]:
    """(σ, low, high): the sample σ over seeds and its `level` confidence interval from χ² with n − 1 degrees of
    freedom (two seeds give one degree of freedom: the interval spans a factor of about 30)."""
    n = len(values)
    s = float(np.std(values, ddof=1))
    df, tail = n - 1, (1 - level) / 2
    return s, s * math.sqrt(df / stats.chi2.ppf(1 - tail, df)), s * math.sqrt(df / stats.chi2.ppf(tail, df))


def ratio_interval(ratio: float, df_num: int, df_den: int, level: float = 0.9) -> tuple[float, float]:
    """The `level` interval of σ_a / σ_b from the ratio of two sample σs: (s_a/s_b)² / (σ_a/σ_b)² follows
    F(df_a, df_b)."""
    tail = (1 - level) / 2
    return (ratio / math.sqrt(stats.f.ppf(1 - tail, df_num, df_den)),
            ratio / math.sqrt(stats.f.ppf(tail, df_num, df_den)))


def read_runs(work: Path, recipe: str, full_seeds: int) -> dict:
    """{run: {"values": {metric: [per seed]}, "skipped": [per seed], "flops": one seed's}} for every rung and the
    full run."""
    base = work / recipe / "seed0" / "data" / "train"
    out = {}
    for summary in sorted(base.glob("scout/*/summary.json")):
        paths = [summary, *sorted(summary.parent.glob("replicas/*/summary.json"),
                                  key=lambda p: int(p.parent.name.removeprefix("seed")))]
        out[summary.parent.name] = [json.loads(p.read_text()) for p in paths]
    out["full"] = [json.loads((work / recipe / f"seed{k}" / "data/train/pretrain/summary.json").read_text())
                   for k in range(full_seeds)]
    runs = {}
    for name, summaries in out.items():
        figures = [decide._figures(s) for s in summaries]
        runs[name] = {"values": {m: [f[m][0] for f in figures] for m in METRICS if all(m in f for f in figures)},
                      "skipped": [s["skipped_steps"] for s in summaries], "flops": summaries[0]["total_flops"],
                      "params": summaries[0].get("params")}
    return runs


def write_record(project: Path, work: Path, recipe: str, overrides: list[str]) -> None:
    """The seed record (tokenmill.evaluate.compare.SEED_RECORD): per rung its parameter count, seeds and the relative
    seed σ of every metric of tokenmill.evaluate.signal.run_figures, which compare pools with an experiment's own
    replicas of the same rung."""
    rungs = {}
    for summary in sorted((work / recipe / "seed0/data/train").glob("scout/*/summary.json")):
        runs = [json.loads(p.read_text()) for p in [summary, *summary.parent.glob("replicas/*/summary.json")]]
        if len(runs) > 1:
            rel = {m: round(s, 6) for m, s in relative_seed_sigma(runs).items()}
            rungs[summary.parent.name] = {"params": runs[0]["params"], "seeds": len(runs), "relative_sigma": rel}
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=project, capture_output=True,
                            text=True).stdout.strip()
    out = project / SEED_RECORD
    out.write_text(json.dumps({"measured_on": f"the demo (recipe {recipe}) at commit {commit}", "overrides": overrides,
                               "source": "benchmarks/bench_seed_spread.py; RESULTS.md, \"The full run's seed spread "
                                         "against its ladder's\"", "rungs": rungs}, indent=1, sort_keys=True) + "\n")
    print(f"written: {out}")


def predictions(runs: dict, metric: str) -> dict[str, tuple[float, int]]:
    """{rule: (the σ the ladder predicts for the full run's metric, its degrees of freedom)} (module docstring):
    each replicated rung's relative σ carried to the full run (the largest is compare's rule; a rung with more
    than 2 seeds also from its first 2 alone, as the demo's ladder trains it), and the pool over the rungs."""
    full_mean = float(np.mean(runs["full"]["values"][metric]))
    replicated = {n: r["values"][metric] for n, r in runs.items()
                  if n != "full" and len(r["values"].get(metric, [])) > 1}
    if not replicated:
        return {}
    largest = max(replicated, key=lambda n: runs[n]["flops"])
    rel = {n: float(np.std(v, ddof=1) / abs(np.mean(v))) for n, v in replicated.items()}
    dfs = {n: len(v) - 1 for n, v in replicated.items()}
    out = {}
    for n, v in replicated.items():
        out[f"{n}, {len(v)} seeds{' (compare, this ladder)' if n == largest else ''}"] = (rel[n] * full_mean, dfs[n])
        if len(v) > 2:
            out[f"{n}, its first 2 seeds"] = (float(np.std(v[:2], ddof=1) / abs(np.mean(v[:2]))) * full_mean, 1)
    pooled = math.sqrt(sum(dfs[n] * rel[n] ** 2 for n in rel) / sum(dfs.values()))
    out[f"pooled over {', '.join(sorted(replicated))}"] = (pooled * full_mean, sum(dfs.values()))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--project", default=".")
    ap.add_argument("--work", default="/tmp/seeds")
    ap.add_argument("--recipe", default="default", help="a conf/mixture preset")
    ap.add_argument("--rung-seeds", type=int, default=6)
    ap.add_argument("--largest-seeds", type=int, default=None, help="seeds of the largest rung (default: --rung-seeds)")
    ap.add_argument("--full-seeds", type=int, default=3)
    ap.add_argument("--set", nargs="*", default=[], help="more `-S` overrides for every run (a recipe variant)")
    ap.add_argument("--report-only", action="store_true")
    args = ap.parse_args()
    project, work = Path(args.project).resolve(), Path(args.work).resolve()
    ladder = yaml.safe_load((project / "params.yaml").read_text())["scouts"]
    largest = list(ladder)[-1]
    seeds = {r: args.largest_seeds if r == largest and args.largest_seeds else args.rung_seeds for r in ladder}
    overrides = [f"mixture={args.recipe}", *(f"{'' if 'seeds' in spec else '++'}scouts.{r}.seeds={seeds[r]}"
                                             for r, spec in ladder.items()), *args.set]
    if not args.report_only:
        print(" ".join(overrides), flush=True)
        seconds = decide.train_recipe(project, work, args.recipe, overrides, args.full_seeds)
        print(json.dumps({k: round(v, 1) for k, v in seconds.items()}), flush=True)
    runs = read_runs(work, args.recipe, args.full_seeds)
    if not args.set:  # the scale's own recipe: the record compare pools a rung's few seeds with
        write_record(project, work, args.recipe, overrides)
    full_flops = runs["full"]["flops"]
    (work / "figures.json").write_text(json.dumps({"overrides": overrides, "runs": runs}, indent=1))

    print(f"\nrecipe: {' '.join(overrides)}\n")
    print("| run | parameters | compute (of one full run) | seeds | metric | per seed | mean | "
          "seed σ [90% interval] | σ / mean | steps skipped as spikes |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for name, r in runs.items():
        for metric, values in r["values"].items():
            s, lo, hi = sigma_interval(values) if len(values) > 1 else (float("nan"),) * 3
            print(f"| {name} | {r['params']:,} | {r['flops'] / full_flops:.1%} | {len(values)} | {metric} | "
                  f"{', '.join(f'{v:.4f}' for v in values)} | {np.mean(values):.4f} | {s:.4f} [{lo:.4f}, {hi:.4f}] | "
                  f"{s / abs(np.mean(values)):.2%} | {r['skipped']} |")
    ladder_cost = sum(r["flops"] * len(r["skipped"]) for n, r in runs.items() if n != "full") / full_flops
    print(f"\nthis ladder, every seed: {ladder_cost:.1%} of one full run's FLOPs")

    print("\n| metric | the ladder's prediction | predicted σ (dof) | full run's σ (dof) | ratio [90% interval] | "
          "within 2× |")
    print("| --- | --- | --- | --- | --- | --- |")
    for metric in METRICS:
        full = runs["full"]["values"].get(metric)
        if not full or len(full) < 2:
            continue
        s_full = float(np.std(full, ddof=1))
        for rule, (s_pred, df) in predictions(runs, metric).items():
            ratio = s_full / s_pred
            lo, hi = ratio_interval(ratio, len(full) - 1, df)
            print(f"| {metric} | {rule} | {s_pred:.4f} ({df}) | {s_full:.4f} ({len(full) - 1}) | {ratio:.2f} "
                  f"[{lo:.2f}, {hi:.2f}] | {'yes' if ratio <= 2 else 'no'} |")


if __name__ == "__main__":
    main()
