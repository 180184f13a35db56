"""The forecast's record at the full run's scale: how far the law has already missed full runs of this shape.

A law fitted on a ladder carries the rungs' trend to the full run. On the demo every compute law missed the full
run from above: by 2.4-7.8% over six recipes (RESULTS.md, "The forecast moved by its record of earlier full runs"),
by 4-11% on the 2026-11-27 ladder ("Decision accuracy", "Why the forecast misses"). The full run
descends a stretch that no rung reaches. That miss comes from the ladder and the full run's shape, not from the
recipe, so it is nearly the same for every mixture, and full runs already trained measure it.
benchmarks/bench_decision_accuracy.py writes RECORD: for each recipe it trained and each full-run seed, the law's
forecast and the naive predictor beside the actual held-out loss and benchmarks' bits per byte, under the
signature of the ladder and the full run they were made with.

The forecast stage reads the record (`forecast.calibrate`, on by default). It applies only when the record was
made with the same ladder and full run: the same form, loss and compute measure, every rung's and the full run's
parameters equal, and their tokens within TOKEN_TOLERANCE. The record must also hold MIN_RECIPES recipes other
than the one being forecast. A recipe is known by the hash of its `mixture` section (recipe_id), and its own full
runs are left out, since they are the answer. Then:

    bias      the mean over recipes of each recipe's mean log(actual / law), so every recipe weighs alike
    predicted the law's forecast x exp(bias)
    interval  exp(bias ± t · s · sqrt(1 + 1/n)) around the law's forecast: a prediction interval for one new
              run. s is the spread of log(actual / law) over every recorded run (recipe and seed differences
              together). t is Student's quantile at the forecast's `interval` with n - 1 degrees of freedom,
              where n is the number of recipes.

The largest scout's value (the naive predictor) is moved the same way by its own record, and the forecast is
whichever of the two spread less over the record (`best`): at one full-run shape the record already carries what
the ladder's slope would add, and on the demo the largest scout moved by its record is the closer of the two
(RESULTS.md, "The forecast moved by its record").

Otherwise the law's forecast stands, and the prediction says why the record was not used. The record measures
the data it was made on (the demo's, unless rerun on yours).
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Mapping, Sequence

RECORD = Path("benchmarks/decision/forecast_record.json")
MIN_RECIPES = 3         # two recipes leave one degree of freedom for the spread: its t quantile is 6.3
TOKEN_TOLERANCE = 0.02  # a recipe's plan moves the full run's steps by one or two (the demo's: 244 or 245)
METRICS = ("loss", "bpb")


def load(path: str | Path = RECORD) -> dict | None:
    """The record at path (None when none was measured there)."""
    path = Path(path)
    return json.loads(path.read_text()) if path.exists() else None


def recipe_id(mixture: Mapping) -> str:
    """A recipe's identity: the MD5 of its `mixture` section (weights, phases, caps, seed), its name aside. The
    same weights under another name are the same recipe; the same recipe over rebuilt data is still itself."""
    return hashlib.md5(json.dumps({k: v for k, v in mixture.items() if k != "name"}, sort_keys=True).encode()).hexdigest()


def signature(prediction: Mapping) -> dict:
    """What a forecast's miss depends on: its law (form, loss, compute measure), its rungs and the full run."""
    cfg = prediction["config"]
    return {"form": prediction["form"], "loss": cfg["loss"], "compute": cfg["compute"],
            "rungs": [{"name": p["name"], "params": p["params"], "tokens": p["tokens"]} for p in prediction["points"]],
            "target": {"params": prediction["target"]["params"], "tokens": prediction["target"]["tokens"]}}


def mismatch(recorded: Mapping, current: Mapping) -> str | None:
    """Why a record made under signature `recorded` does not apply to a forecast of signature `current`."""
    for key in ("form", "loss", "compute"):
        if recorded[key] != current[key]:
            return f"the record's law has {key} {recorded[key]!r}, this forecast's {current[key]!r}"
    runs = {r["name"]: r for r in recorded["rungs"]}
    if sorted(runs) != sorted(r["name"] for r in current["rungs"]):
        return f"the record's ladder is {sorted(runs)}, this one {sorted(r['name'] for r in current['rungs'])}"
    for name, now in [*((r["name"], r) for r in current["rungs"]), ("the full run", current["target"])]:
        then = runs.get(name, recorded["target"])
        if then["params"] != now["params"]:
            return f"{name} has {now['params']:,} parameters, the record's {then['params']:,}"
        if abs(math.log(now["tokens"] / then["tokens"])) > TOKEN_TOLERANCE:
            return f"{name} trains {now['tokens']:,} tokens, the record's {then['tokens']:,}"
    return None


def correction(runs: Sequence[Mapping], metric: str, key: str = "law", exclude: str | None = None,
    coverage: float = 0.9) -> dict | None:
    """The record's correction to one predictor (`key`: law or naive) of one metric (loss or bpb), leaving out the
    recipe whose recipe_id is `exclude`: {bias, log_sigma, half_width, recipes, runs} in log units (docstring), or
    None with fewer than MIN_RECIPES recipes."""
    from scipy.stats import t as student_t  # 1.4 s to import: only when a record is applied

    logs: dict[str, list[float]] = {}
    for r in runs:
        m = r.get(metric) or {}
        if r["mixture"] != exclude and m.get(key) and m.get("actual"):
            logs.setdefault(r["mixture"], []).append(math.log(m["actual"] / m[key]))
    if len(logs) < MIN_RECIPES:
        return None
    every = [x for xs in logs.values() for x in xs]
    bias = sum(sum(xs) / len(xs) for xs in logs.values()) / len(logs)
    spread = math.sqrt(sum((x - bias) ** 2 for x in every) / (len(every) - 1))
    n = len(logs)
    half = float(student_t.ppf(0.5 + coverage / 2, n - 1)) * spread * math.sqrt(1 + 1 / n)
    return {"bias": bias, "log_sigma": spread, "half_width": half, "recipes": n, "runs": len(every)}


def moved(value: float, correction: Mapping) -> tuple[float, list[float]]:
    """A predictor's value moved by its correction (module docstring): value x exp(bias), and the prediction
    interval value x exp(bias ± half_width)."""
    lo, mid, hi = (value * math.exp(correction["bias"] + s * correction["half_width"]) for s in (-1, 0, 1))
    return mid, [lo, hi]


def calibrated(prediction: Mapping, record: Mapping | None, recipe: str, source: str | Path = RECORD) -> dict:
    """The prediction with its record applied (module docstring). The law's own forecast stays under `law`; the
    `calibration` says what moved it, or why nothing did."""
    out = dict(prediction)
    bpb = dict(prediction["bpb"]) if prediction.get("bpb") else None
    out["bpb"] = bpb
    out["law"] = {"predicted_loss": prediction["predicted_loss"], "interval": prediction["interval"],
                  "bpb": {k: bpb.get(k) for k in ("predicted", "interval")} if bpb and "predicted" in bpb else None}
    if record is None:
        out["calibration"] = {"applied": False, "reason": f"no record at {source} (benchmarks/bench_decision_accuracy.py "
                                                         f"writes it)"}
        return out
    why = mismatch(record["signature"], signature(prediction))
    coverage = float(prediction["config"]["interval"])
    done = {m: best(record["runs"], m, recipe, coverage) for m in METRICS} if why is None else {}
    if why is None and done["loss"] is None:
        others = {r["mixture"] for r in record["runs"] if r["mixture"] != recipe}
        why = f"the record holds {len(others)} other recipes, fewer than {MIN_RECIPES}"
    if why is not None:
        out["calibration"] = {"applied": False, "reason": f"{source}: {why}", "measured_on": record.get("measured_on")}
        return out
    out["calibration"] = {"applied": True, "source": str(source), "measured_on": record.get("measured_on"),
                          "left_out": recipe if any(r["mixture"] == recipe for r in record["runs"]) else None, **done}
    base = {"loss": {"law": prediction["predicted_loss"], "naive": prediction["naive"]},
            "bpb": {"law": (bpb or {}).get("predicted"), "naive": (bpb or {}).get("naive")}}
    for metric, c in done.items():
        start = base[metric][c["predictor"]] if c else None
        if start is None:
            continue
        if metric == "loss":
            out["predicted_loss"], out["interval"] = moved(start, c)
        else:
            bpb["predicted"], bpb["interval"] = moved(start, c)
    return out


def best(runs: Sequence[Mapping], metric: str, recipe: str, coverage: float = 0.9) -> dict | None:
    """The predictor the record shows closer for one metric: the law's forecast or the largest scout's value, each
    moved by its own correction, whichever's log(actual / predictor) spread less over the record's runs (on the demo
    the largest scout: RESULTS.md, "The forecast moved by its record"). Both corrections are kept."""
    options = {k: c for k in ("law", "naive") if (c := correction(runs, metric, k, recipe, coverage))}
    if not options:
        return None
    key = min(options, key=lambda k: options[k]["log_sigma"])
    return {**options[key], "predictor": key, "factor": math.exp(options[key]["bias"]), "corrections": options}


def describe(calibration: Mapping) -> str:
    """One phrase for an applied calibration: which predictor, moved by how far it missed how many full runs."""
    c = calibration["loss"]
    what = "the law" if c["predictor"] == "law" else "the largest scout"
    return (f"{what} moved by its record ({c['recipes']} recipes, {c['runs']} full runs of this ladder and shape: it "
            f"missed them by {math.expm1(-c['bias']):+.1%}, σ {c['log_sigma']:.3f} in log loss)")


def entries(name: str, recipe: str, prediction: Mapping, full_runs: Sequence[Mapping]) -> list[dict]:
    """One record row per full-run seed of a recipe: the law's forecast (from before any record was applied) and
    the naive predictor beside the actual value, for the held-out loss and the benchmarks' bits per byte."""
    law = prediction.get("law") or {"predicted_loss": prediction["predicted_loss"], "bpb": prediction.get("bpb")}
    rows = []
    for seed, summary in enumerate(full_runs):
        heldout = summary.get("heldout_loss") or {}
        losses = [heldout[b] for b in prediction["buckets"] if b in heldout]
        row = {"recipe": name, "mixture": recipe, "seed": seed,
               "loss": {"law": law["predicted_loss"], "naive": prediction["naive"],
                        "actual": sum(losses) / len(losses) if len(losses) == len(prediction["buckets"]) else None}}
        actual_bpb = (summary.get("benchmarks_mean") or {}).get("bpb")
        b, naive_b = law.get("bpb") or {}, (prediction.get("bpb") or {}).get("naive")
        if b.get("predicted") and actual_bpb:
            row["bpb"] = {"law": b["predicted"], "naive": naive_b, "actual": actual_bpb}
        rows.append(row)
    return rows
