"""Decision accuracy: how often a verdict made at scout scale is the full run's (issue 42, item 1; RESULTS.md,
"Decision accuracy: scouts against the full run").

Run where `make demo` has built the data stages (data/tokenize, data/evalset, data/mixture):
    python benchmarks/bench_decision_accuracy.py --project . --work /tmp/decide [--draws 2] [--seeds 2]

Recipes: the mixture presets (default, web_heavy, code_heavy, balanced) and `--draws` Dirichlet draws around the
default's bulk phase at a low concentration (tokenmill.search.plan: each within the full run's epoch caps), so the
recipes spread over the weight simplex. Each recipe is planned by the mixture stage and trained by the pipeline's
own stage commands (stages/mixture.py, stages/train.py) in a folder of its own whose params.yaml is composed as
`dvc exp run -S mixture=<preset>` composes it (tokenmill.search.compose_params; data/tokenize and data/evalset are
the project's, linked): the scout ladder as the preset configures it (conf/scouts/cpu_demo.yaml: s1 and s2 with
two seeds each, s3 with one) and the full run at `--seeds` seeds (train.seed = train.data_seed = k for k >= 1; k = 0
is the preset's own run). A folder that already holds a finished run is read, not trained again.

For each candidate metric (held-out loss, the mean and per bucket; the in-loop benchmarks' bpb and prob_norm means)
and each rung: over the recipe pairs whose full-run difference is beyond its noise (|Δ| > 2 σ, σ of a recipe's
full run = the larger of its seed spread and its noise-window σ, over √seeds), the fraction the rung ranks the way
the full run does (a rung with seed replicas ranks by their mean); beside it the rung's training FLOPs (replicas
included) as a fraction of one full run's. Each recipe's scaling forecast (stages/forecast.py on its own ladder,
before its full run) is set against each seed's full run: the error, the naive predictor's (the largest scout),
and whether the run fell inside the 90% interval (issue 42, item 4's coverage check). Beside it, the forecast
moved by the record of the other recipes' full runs (tokenmill.forecast.record, each recipe left out of its own
correction, the naive predictor moved alike), and the record itself written to --forecast-record (the project's
benchmarks/decision/forecast_record.json is what the forecast stage reads). Prints Markdown; writes every run's
figures to <work>/figures.json. A recipe may hold more full-run seeds than --seeds (seed<k> folders trained
elsewhere, e.g. by bench_seed_spread.py): every finished one is read.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import yaml

from tokenmill.evaluate import track
from tokenmill.evaluate.signal import combine_replicas, run_figures
from tokenmill.forecast import record as forecast_record
from tokenmill.search import compose_params, overrides_of, plan

# default_searched: `tokenmill search`'s proposal around default (conf/mixture/default_searched.yaml), so the
# search's gain at s1 is set against the full run at two seeds (issue 42, item 5).
PRESETS = ("default", "web_heavy", "code_heavy", "balanced", "default_searched")
METRICS = ("heldout_mean", "benchmarks_mean.bpb", "benchmarks_mean.prob_norm")
LOWER_IS_BETTER = ("heldout", "bpb")


def recipes(project: Path, draws: int, concentration: float, seed: int) -> dict[str, list[str]]:
    """{recipe name: the `-S` overrides that make it}."""
    out = {p: [f"mixture={p}"] for p in PRESETS}
    if draws:
        swarm = plan(project, "default", None, "s1", draws, concentration, seed)
        for i, weights in enumerate(swarm.draws):
            name = f"draw{i}"
            out[name] = [o for o in overrides_of(swarm, weights, name) if not o.startswith("++scouts")]
    return out


def _folder(project: Path, folder: Path, overrides: list[str], links: dict[str, Path]) -> None:
    """A run folder: params.yaml composed from the project's conf/ with the overrides, the shared inputs linked."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "params.yaml").write_text(yaml.safe_dump(compose_params(project, overrides), sort_keys=False))
    for name, target in links.items():
        link = folder / name
        link.parent.mkdir(parents=True, exist_ok=True)
        if not link.exists():
            link.symlink_to(target.resolve(), target_is_directory=True)


def _stage(project: Path, folder: Path, args: list[str], log: Path) -> float:
    started = time.perf_counter()
    with open(log, "a") as f:
        proc = subprocess.run([sys.executable, str(project / "stages" / args[0]), *args[1:]], cwd=folder,
                              stdout=f, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    if proc.returncode:
        raise SystemExit(f"{folder}: stages/{args[0]} {' '.join(args[1:])} exited {proc.returncode} (log: {log})")
    return time.perf_counter() - started


def train_recipe(project: Path, work: Path, name: str, overrides: list[str], seeds: int) -> dict:
    """Plan and train one recipe (what is already finished is kept); return its runs' figures and FLOPs."""
    base = work / name / "seed0"
    shared = {"data/tokenize": project / "data/tokenize", "data/evalset": project / "data/evalset"}
    _folder(project, base, overrides, shared)
    log, seconds = work / name / "log.txt", {}
    if not (base / "data/mixture/plan.parquet").exists():
        seconds["mixture"] = _stage(project, base, ["mixture.py", "tokenize"], log)
    ladder = yaml.safe_load((base / "params.yaml").read_text())["scouts"]
    for rung, spec in sorted(ladder.items()):
        out = base / f"data/train/scout/{rung}"
        runs = [out / "summary.json", *(out / f"replicas/seed{k}/summary.json" for k in range(1, spec.get("seeds", 1)))]
        if not all(r.exists() for r in runs):  # the rung and its seed replicas (an interrupted one resumes)
            seconds[rung] = _stage(project, base, ["train.py", f"scout/{rung}", "mixture", "tokenize", "evalset"], log)
    if not (base / "data/forecast/prediction.json").exists():  # the scaling forecast, from this recipe's ladder
        seconds["forecast"] = _stage(project, base, ["forecast.py"], log)
    for k in range(seeds):
        folder = base if k == 0 else work / name / f"seed{k}"
        if k:
            _folder(project, folder, [*overrides, f"++train.seed={k}", f"++train.data_seed={k}"],
                    {**shared, "data/mixture": base / "data/mixture"})
        if not (folder / "data/train/pretrain/summary.json").exists():
            seconds[f"pretrain#{k}"] = _stage(project, folder, ["train.py", "pretrain", "mixture", "tokenize", "evalset"], log)
    return seconds


def _figures(summary: dict) -> dict[str, tuple[float, float | None]]:
    out = run_figures(summary)
    for bucket, loss in (summary.get("heldout_loss") or {}).items():
        out[f"heldout.{bucket}"] = (loss, None)  # nats per token; the bucket's bytes per token are the same in every
    return out                                  # recipe (one tokenizer, one held-out split), so its bpb ranks alike


def read_recipe(work: Path, name: str, seeds: int) -> dict:
    base = work / name / "seed0" / "data" / "train"
    rungs = {}
    for summary in sorted(base.glob("scout/*/summary.json")):
        paths = [summary, *sorted(summary.parent.glob("replicas/*/summary.json"))]
        runs = [json.loads(p.read_text()) for p in paths]
        rungs[summary.parent.name] = {"figures": combine_replicas([_figures(s) for s in runs]),
                                      "flops": sum(s["total_flops"] for s in runs), "seeds": len(runs)}
    # Every finished full-run seed (at least `seeds`; a recipe may hold more, e.g. bench_seed_spread's).
    done = (work / name / f"seed{k}" / "data/train/pretrain/summary.json" for k in itertools.count())
    full = [json.loads(p.read_text()) for p in itertools.takewhile(Path.exists, done)]
    forecast = json.loads((work / name / "seed0" / "data/forecast/prediction.json").read_text())
    law = forecast.get("law") or {"predicted_loss": forecast["predicted_loss"], "interval": forecast["interval"]}
    mixture = yaml.safe_load((work / name / "seed0" / "params.yaml").read_text())["mixture"]
    recipe = forecast_record.recipe_id(mixture)
    return {"rungs": rungs, "full": [_figures(s) for s in full], "full_flops": full[0]["total_flops"],
            "skipped_steps": [s["skipped_steps"] for s in full], "recipe_id": recipe,
            "forecast": {"predicted": law["predicted_loss"], "interval": law["interval"],
                         "naive": forecast["naive"], "backtest": forecast["backtest"]},
            "record": forecast_record.entries(name, recipe, forecast, full), "signature": forecast_record.signature(forecast)}


def forecast_rows(results: dict[str, dict], coverage: float = 0.9) -> list[dict]:
    """Each recipe's forecast of the full run's held-out loss against each seed's actual one: the law's, and the
    law's moved by the record of the other recipes' full runs (tokenmill.forecast.record, this recipe left out),
    each beside the naive predictor treated alike."""
    runs = [e for r in results.values() for e in r["record"]]
    rows = []
    for name, r in results.items():
        f = r["forecast"]
        law, naive = (forecast_record.correction(runs, "loss", key, exclude=r["recipe_id"], coverage=coverage) for key in ("law", "naive"))
        for k, run in enumerate(r["full"]):
            actual = run["heldout_mean"][0]
            lo, hi = f["interval"] or (None, None)
            row = {"recipe": name, "seed": k, "actual": actual, "predicted": f["predicted"],
                   "error": (f["predicted"] - actual) / actual, "naive_error": (f["naive"] - actual) / actual,
                   "inside": lo is not None and lo <= actual <= hi, "interval": f["interval"], "calibrated": None}
            if law and naive:
                value, band = forecast_record.moved(f["predicted"], law)
                row["calibrated"] = {"predicted": value, "interval": band, "error": (value - actual) / actual,
                                     "inside": band[0] <= actual <= band[1], "recipes": law["recipes"],
                                     "naive_error": (forecast_record.moved(f["naive"], naive)[0] - actual) / actual}
            rows.append(row)
    return rows


def record_check(runs: list[dict], metric: str, key: str | None, moved: bool, coverage: float = 0.9) -> dict | None:
    """One predictor (`key`: law or naive) of one metric over every recorded full run: its relative errors as they
    stand, or moved by the record of the other recipes (each recipe left out of its own correction); with the share
    inside the moved prediction interval."""
    errors, inside = [], 0
    for recipe in sorted({r["mixture"] for r in runs}):
        if key is None:  # the forecast stage's pick (forecast_record.best): the predictor that missed more evenly
            c = forecast_record.best(runs, metric, recipe, coverage)
        else:
            c = forecast_record.correction(runs, metric, key, exclude=recipe, coverage=coverage) if moved else None
        if moved and c is None:
            return None
        use = key or c["predictor"]
        for r in (r for r in runs if r["mixture"] == recipe and (r.get(metric) or {}).get(use)):
            x = r[metric]
            log_error = math.log(x[use] / x["actual"]) + (c["bias"] if c else 0.0)
            errors.append(math.expm1(log_error))
            inside += bool(c) and abs(log_error) <= c["half_width"]
    if not errors:
        return None
    return {"median": statistics.median(abs(e) for e in errors), "largest": max(errors, key=abs),
            "runs": len(errors), "inside": inside if moved else None}


def full_value(runs: list[dict], metric: str) -> tuple[float, float]:
    """(mean over seeds, its σ: the larger of the seed spread and the noise-window σ, over √seeds)."""
    values = [r[metric][0] for r in runs]
    mean = sum(values) / len(values)
    spread = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1)) if len(values) > 1 else 0.0
    windows = [r[metric][1] for r in runs if r[metric][1] is not None]
    window = math.sqrt(sum(w * w for w in windows) / len(windows)) if windows else 0.0
    return mean, max(spread, window) / math.sqrt(len(values))


def accuracy(results: dict[str, dict], metric: str, rung: str) -> dict:
    """Over the recipe pairs the full run separates: how many the rung orders as the full run does."""
    lower = any(w in metric for w in LOWER_IS_BETTER)
    names = [n for n in results if metric in results[n]["full"][0] and rung in results[n]["rungs"]
             and metric in results[n]["rungs"][rung]["figures"]]
    separated = agreed = pairs = agreed_all = 0
    for a, b in itertools.combinations(names, 2):
        (fa, sa), (fb, sb) = full_value(results[a]["full"], metric), full_value(results[b]["full"], metric)
        ra, rb = results[a]["rungs"][rung]["figures"][metric][0], results[b]["rungs"][rung]["figures"][metric][0]
        same = (fa - fb) * (ra - rb) > 0
        pairs += 1
        agreed_all += same
        if abs(fa - fb) > 2 * math.hypot(sa, sb):
            separated += 1
            agreed += same
    flops = [results[n]["rungs"][rung]["flops"] / results[n]["full_flops"] for n in names]
    return {"metric": metric, "rung": rung, "pairs": pairs, "separated": separated, "agreed": agreed,
            "accuracy": agreed / separated if separated else None, "accuracy_all_pairs": agreed_all / pairs if pairs else None,
            "compute_fraction": sum(flops) / len(flops) if flops else None, "lower_is_better": lower}


def _commit(project: Path) -> str:
    return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=project, capture_output=True,
                          text=True).stdout.strip()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--project", default=".")
    ap.add_argument("--work", default="/tmp/decide")
    ap.add_argument("--draws", type=int, default=2)
    ap.add_argument("--concentration", type=float, default=2.0)  # low: the draws spread over the simplex
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--report-only", action="store_true", help="train nothing: report the recipes already finished")
    ap.add_argument("--order", default=None, help="comma-separated recipe names: train these first, in this order")
    ap.add_argument("--recipes", default=None, help="comma-separated recipe names: only these")
    ap.add_argument("--scouts", default=None, help="a conf/scouts preset for every recipe's ladder (default: the "
                    "scale's); the track record is then written under --work, not into the project")
    ap.add_argument("--forecast-record", default=None, help="where to write the forecast's record of these recipes "
                    "(tokenmill.forecast.record; default <work>/forecast_record.json; the project's is "
                    f"{forecast_record.RECORD})")
    args = ap.parse_args()
    project, work = Path(args.project).resolve(), Path(args.work).resolve()
    args.forecast_record = args.forecast_record or work / "forecast_record.json"
    wanted = recipes(project, args.draws, args.concentration, args.seed)
    if args.recipes:
        wanted = {n: wanted[n] for n in args.recipes.split(",")}
    if args.scouts:
        wanted = {n: [*o, f"scouts={args.scouts}"] for n, o in wanted.items()}
    if args.order:
        first = args.order.split(",")
        wanted = {**{n: wanted[n] for n in first}, **{n: o for n, o in wanted.items() if n not in first}}
    seconds = {}
    for name, overrides in wanted.items():
        if args.report_only:
            continue
        print(f"{name}: {' '.join(overrides)}", flush=True)
        seconds[name] = train_recipe(project, work, name, overrides, args.seeds)
        print(f"  {json.dumps({k: round(v, 1) for k, v in seconds[name].items()})}", flush=True)
    finished = {n: o for n, o in wanted.items() if all(
        (work / n / f"seed{k}" / "data/train/pretrain/summary.json").exists() for k in range(args.seeds))
        and (work / n / "seed0" / "data/forecast/prediction.json").exists()}
    if len(finished) < len(wanted):
        print(f"\nreported: {len(finished)} of {len(wanted)} recipes finished ({', '.join(finished)}); "
              f"not yet: {', '.join(n for n in wanted if n not in finished)}")
    wanted = finished
    results = {name: read_recipe(work, name, args.seeds) for name in wanted}
    (work / "figures.json").write_text(json.dumps({"recipes": wanted, "results": results, "seconds": seconds},
                                                  indent=1, default=str))

    print("\n| recipe | " + " | ".join(f"full {m}" for m in METRICS) + " | skipped steps per seed |")
    print("|" + " --- |" * (len(METRICS) + 2))
    for name, r in results.items():
        cells = [f"{full_value(r['full'], m)[0]:.4f} ± {full_value(r['full'], m)[1]:.4f} "
                 f"(seeds {', '.join(f'{x[m][0]:.4f}' for x in r['full'])})" for m in METRICS]
        print(f"| {name} | " + " | ".join(cells) + f" | {r['skipped_steps']} |")

    rows = forecast_rows(results)
    print("\n| recipe | seed | actual held-out loss | forecast [90% interval] | error | naive (largest scout) error |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in rows:
        lo, hi = r["interval"] or (float("nan"), float("nan"))
        print(f"| {r['recipe']} | {r['seed']} | {r['actual']:.4f} | {r['predicted']:.4f} [{lo:.4f}, {hi:.4f}] | "
              f"{r['error']:+.1%} | {r['naive_error']:+.1%} |")
    errors = sorted(abs(r["error"]) for r in rows)
    print(f"\nforecast: {sum(r['inside'] for r in rows)} of {len(rows)} full runs inside their 90% interval; "
          f"median |error| {statistics.median(errors):.1%}, largest {errors[-1]:.1%}; naive median |error| "
          f"{statistics.median(abs(r['naive_error']) for r in rows):.1%}")

    # The forecast moved by the record of the other recipes' full runs (what the forecast stage does where a record
    # of its ladder exists), checked recipe by recipe: each recipe's own full runs left out of its correction.
    moved = [r for r in rows if r["calibrated"]]
    if moved:
        print("\n| recipe | seed | actual held-out loss | law moved by the other recipes' record [90% interval] | "
              "error | naive moved alike: error | recipes in its record |")
        print("| --- | --- | --- | --- | --- | --- | --- |")
        for r in moved:
            c = r["calibrated"]
            print(f"| {r['recipe']} | {r['seed']} | {r['actual']:.4f} | {c['predicted']:.4f} [{c['interval'][0]:.4f}, "
                  f"{c['interval'][1]:.4f}] | {c['error']:+.1%} | {c['naive_error']:+.1%} | {c['recipes']} |")
        errs = sorted(abs(r["calibrated"]["error"]) for r in moved)
        print(f"\nforecast moved by its record: {sum(r['calibrated']['inside'] for r in moved)} of {len(moved)} full "
              f"runs inside their 90% interval; median |error| {statistics.median(errs):.1%}, largest {errs[-1]:.1%}; "
              f"the naive predictor moved alike: median |error| "
              f"{statistics.median(abs(r['calibrated']['naive_error']) for r in moved):.1%}")
    runs = [e for r in results.values() for e in r["record"]]
    print("\n| metric | predictor | as it stands: median |error| (largest) | moved by the other recipes' record: "
          "median |error| (largest) | inside the moved 90% interval |")
    print("| --- | --- | --- | --- | --- |")
    for metric in forecast_record.METRICS:
        for key, label in (("law", "the law"), ("naive", "the largest scout (naive)"),
                           (None, "the forecast stage's: whichever of the two missed the other recipes more evenly")):
            raw, moved = record_check(runs, metric, key or "law", False), record_check(runs, metric, key, True)
            if raw is None:
                continue
            cell = (f"{moved['median']:.1%} ({moved['largest']:+.1%})", f"{moved['inside']} of {moved['runs']}") \
                if moved else ("– (fewer than 3 other recipes)", "–")
            print(f"| {metric} | {label} | {raw['median']:.1%} ({raw['largest']:+.1%}) | {cell[0]} | {cell[1]} |")
    first = next(iter(results.values()))
    differ = {n: why for n, r in results.items() if (why := forecast_record.mismatch(first["signature"], r["signature"]))}
    if differ:
        print(f"\nforecast record not written: {'; '.join(f'{n}: {w}' for n, w in differ.items())}")
    else:
        Path(args.forecast_record).parent.mkdir(parents=True, exist_ok=True)
        Path(args.forecast_record).write_text(json.dumps({
            "measured_on": f"the demo at commit {_commit(project)}, recipes {', '.join(results)}",
            "source": "benchmarks/bench_decision_accuracy.py; RESULTS.md, \"The forecast moved by its record\"",
            "signature": first["signature"], "runs": runs},
            indent=1) + "\n")
        print(f"\nwritten: {args.forecast_record}")

    # The seed spread, pooled over the recipes (each recipe's runs differ by their seed alone): the full run's
    # against the rungs trained with seed replicas; and what the ladder costs beside one full run.
    print("\n| run | σ of held-out loss over seeds (the larger of the seed spread and the noise window), pooled over recipes | recipes | compute (of one full run) |")
    print("| --- | --- | --- | --- |")
    full_var = [math.pow(full_value(r["full"], "heldout_mean")[1] * math.sqrt(len(r["full"])), 2) for r in results.values()
                if len(r["full"]) > 1]
    for rung in sorted({g for r in results.values() for g in r["rungs"]}):
        var = []
        for r in results.values():
            g = r["rungs"].get(rung)
            if g and g["seeds"] > 1:  # combine_replicas' σ is the larger of the seed spread and the window's
                var.append(g["figures"]["heldout_mean"][1] ** 2)
        frac = [r["rungs"][rung]["flops"] / r["full_flops"] for r in results.values() if rung in r["rungs"]]
        sigma = f"{math.sqrt(sum(var) / len(var)):.4f}" if var else "– (one seed)"
        print(f"| {rung} | {sigma} | {len(var)} | {sum(frac) / len(frac):.1%} |")
    if full_var:
        print(f"| full run | {math.sqrt(sum(full_var) / len(full_var)):.4f} | {len(full_var)} | 100% |")
    ladder = [sum(g["flops"] for g in r["rungs"].values()) / r["full_flops"] for r in results.values()]
    print(f"\nthe ladder (every rung, replicas included): {sum(ladder) / len(ladder):.1%} of one full run's training FLOPs")

    buckets = sorted({m for r in results.values() for m in r["full"][0] if m.startswith("heldout.")})
    rungs = sorted({g for r in results.values() for g in r["rungs"]})
    print("\n| metric | rung | compute (of one full run) | separated pairs | rung agrees | accuracy | all pairs |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    record = {}
    for metric in [*METRICS, *buckets]:
        for rung in rungs:
            a = accuracy(results, metric, rung)
            if not a["pairs"]:
                continue
            record.setdefault(rung, {})[metric] = {
                "pairs": a["pairs"], "separated": a["separated"], "agreed": a["agreed"],
                "agreed_all_pairs": round(a["accuracy_all_pairs"] * a["pairs"]),
                "compute_fraction": round(a["compute_fraction"], 4)}
            acc = f"{a['accuracy']:.0%}" if a["accuracy"] is not None else "–"
            print(f"| {metric} | {rung} | {a['compute_fraction']:.1%} | {a['separated']} of {a['pairs']} | "
                  f"{a['agreed']} | {acc} | {a['accuracy_all_pairs']:.0%} |")
    # The track record `tokenmill compare --rung`, the decision page and `tokenmill search` print beside a verdict
    # made at a rung (tokenmill.evaluate.track), committed with the project.
    commit = _commit(project)
    # Only the scale's own ladder over every recipe is the project's record; another ladder's stays in --work.
    out = project / track.TRACK_RECORD if not (args.scouts or args.recipes) else work / "track_record.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"measured_on": f"the demo (scale cpu_demo) at commit {commit}",
                               "recipes": sorted(results), "full_run_seeds": args.seeds,
                               "source": "benchmarks/bench_decision_accuracy.py; RESULTS.md, \"Decision accuracy\"",
                               "rungs": record}, indent=1, sort_keys=True) + "\n")
    print(f"\nwritten: {out}")

    # The search's proposal against the preset it was searched around, at the full run (issue 42, item 5).
    if "default" in results and "default_searched" in results:
        (a, sa), (b, sb) = (full_value(results[n]["full"], "heldout_mean") for n in ("default_searched", "default"))
        print(f"\nsearch at the full run: default_searched {a:.4f} ± {sa:.4f} against default {b:.4f} ± {sb:.4f}: "
              f"{a - b:+.4f}, {abs(a - b) / math.hypot(sa, sb):.1f} σ "
              f"({'separated' if abs(a - b) > 2 * math.hypot(sa, sb) else 'within the noise'}); at s1 "
              f"{results['default_searched']['rungs']['s1']['figures']['heldout_mean'][0]:.4f} against "
              f"{results['default']['rungs']['s1']['figures']['heldout_mean'][0]:.4f}")


if __name__ == "__main__":
    main()
