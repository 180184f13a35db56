"""The forecast moved by its record of earlier full runs (tokenmill.forecast.record): the correction by hand, the
recipe being forecast left out of its own record, a record of another ladder or shape refused with its reason;
and on the committed record of the demo's recipes, the moved forecast beats the law alone and the naive predictor
moved alike, each recipe judged by the others' full runs."""

import json
import math
import statistics
from pathlib import Path

import pytest

from tokenmill import forecast as F
from tokenmill.forecast import record as R

ROOT = Path(__file__).resolve().parents[1]


def _prediction(law=6.0, naive=6.3, bpb=3.8):
    return {"config": F.ForecastConfig().model_dump(), "form": "power_law", "buckets": ["code", "web"],
            "points": [{"name": "s1", "params": 1000, "tokens": 10_000}, {"name": "s2", "params": 4000, "tokens": 40_000}],
            "target": {"params": 20_000, "tokens": 200_000}, "predicted_loss": law, "interval": [law - 0.1, law + 0.1],
            "naive": naive, "bpb": {"predicted": bpb, "interval": [bpb - 0.1, bpb + 0.1], "naive": bpb + 0.2}}


def _record(ratios, law=6.0, naive=(6.3, 6.6, 6.1, 6.5)):
    """A record whose recipe i's full runs ended at law x ratio (one per seed); the largest scout of recipe i was at
    naive[i], which spreads more than the law's misses unless the test says otherwise."""
    runs = [{"recipe": f"r{i}", "mixture": f"recipe{i}", "seed": k,
             "loss": {"law": law, "naive": naive[i], "actual": law * x},
             "bpb": {"law": 3.8, "naive": naive[i] - 2.5, "actual": 3.8 * x}}
            for i, xs in enumerate(ratios) for k, x in enumerate(xs)]
    return {"measured_on": "a test", "signature": R.signature(_prediction()), "runs": runs}


def test_the_law_is_moved_by_the_other_recipes_mean_log_miss_with_a_prediction_interval():
    ratios = [[0.95, 0.93], [0.94], [0.96, 0.97, 0.95], [0.90]]  # r3 is the recipe forecast: its 0.90 is left out
    out = R.calibrated(_prediction(), _record(ratios), recipe="recipe3")
    kept = [[math.log(x) for x in xs] for xs in ratios[:3]]
    bias = statistics.mean(statistics.mean(xs) for xs in kept)  # every recipe weighs alike, whatever its seeds
    every = [x for xs in kept for x in xs]
    spread = math.sqrt(sum((x - bias) ** 2 for x in every) / (len(every) - 1))
    half = 2.919986 * spread * math.sqrt(1 + 1 / 3)  # Student's t at 95% with 2 degrees of freedom
    cal = out["calibration"]
    assert cal["applied"] and cal["left_out"] == "recipe3" and cal["loss"]["predictor"] == "law"
    assert (cal["loss"]["recipes"], cal["loss"]["runs"]) == (3, 6)
    assert out["predicted_loss"] == pytest.approx(6.0 * math.exp(bias), rel=1e-12)
    assert out["interval"] == pytest.approx([6.0 * math.exp(bias - half), 6.0 * math.exp(bias + half)], rel=1e-6)
    assert out["bpb"]["predicted"] == pytest.approx(3.8 * math.exp(bias), rel=1e-12)  # the same misses, in bpb
    # The law's own forecast is kept beside it, and the input prediction is not changed.
    assert out["law"] == {"predicted_loss": 6.0, "interval": [5.9, 6.1], "bpb": {"predicted": 3.8, "interval": [3.8 - 0.1, 3.9]}}
    assert _prediction()["predicted_loss"] == 6.0
    # With its own recipe in the record, the forecast would lean on its own answer: a recipe of other weights
    # counts all four.
    assert R.calibrated(_prediction(), _record(ratios), recipe="elsewhere")["calibration"]["loss"]["recipes"] == 4


def test_the_largest_scout_moved_by_its_record_is_the_forecast_where_it_missed_the_full_runs_more_evenly():
    """The largest scout sat 12% above every full run (exactly), the law 3-7% above: the scout's miss spreads less,
    so it is the forecast, moved by its own mean miss; the law's correction is kept beside it."""
    ratios = [[0.97], [0.93], [0.95], [0.96]]
    rec = _record(ratios, naive=[6.0 * x * 1.12 for xs in ratios for x in xs])
    out = R.calibrated(_prediction(law=6.0, naive=6.4), rec, recipe="new")
    c = out["calibration"]["loss"]
    assert c["predictor"] == "naive" and c["log_sigma"] == pytest.approx(0.0, abs=1e-12)
    assert c["corrections"]["law"]["log_sigma"] > 0.01
    assert out["predicted_loss"] == pytest.approx(6.4 / 1.12, rel=1e-12)
    assert out["interval"] == pytest.approx([6.4 / 1.12] * 2, rel=1e-9)
    assert out["law"]["predicted_loss"] == 6.0
    actual = {"heldout_loss": {"code": 5.7, "web": 5.7}, "flops_per_token": 1e5, "tokens": 100_000}
    moved = F.compare({**out, "parameters": {"E": 0.0, "a": 60.0, "b": 0.1}, "target": {**out["target"], "compute": 1e10}},
                      actual)
    assert moved["predicted_loss_at_actual_compute"] == pytest.approx(6.4 / 1.12)  # a scout does not move with compute


def test_a_record_of_another_ladder_or_shape_or_too_few_recipes_is_not_applied():
    ratios = [[0.95], [0.94], [0.96]]
    base = _record(ratios)
    assert R.calibrated(_prediction(), base, "x")["calibration"]["applied"]

    def reason(change, recipe="x"):
        rec = json.loads(json.dumps(base))
        change(rec)
        out = R.calibrated(_prediction(), rec, recipe)
        assert not out["calibration"]["applied"] and out["predicted_loss"] == 6.0 and out["interval"] == [5.9, 6.1]
        return out["calibration"]["reason"]

    assert "s2 has 4,000 parameters, the record's 4,400" in reason(lambda r: r["signature"]["rungs"][1].update(params=4400))
    assert "the full run trains 200,000 tokens" in reason(lambda r: r["signature"]["target"].update(tokens=210_000))
    assert "form 'two_term'" in reason(lambda r: r["signature"].update(form="two_term"))
    assert "['s1', 's2', 's3']" in reason(lambda r: r["signature"]["rungs"].append({"name": "s3", "params": 1, "tokens": 1}))
    assert "2 other recipes, fewer than 3" in reason(lambda r: None, recipe="recipe0")
    # One or two steps more (a recipe's plan length) is the same full run.
    rec = json.loads(json.dumps(base))
    rec["signature"]["target"]["tokens"] = 203_000
    assert R.calibrated(_prediction(), rec, "x")["calibration"]["applied"]
    assert "no record at" in R.calibrated(_prediction(), None, "x")["calibration"]["reason"]


def test_a_recipe_is_its_weights_whatever_its_name():
    default = {"name": "default", "seed": 1, "phases": {"bulk": {"weights": {"code": 0.25, "web": 0.75}}}}
    assert R.recipe_id(default) == R.recipe_id({**default, "name": "renamed"})
    assert R.recipe_id(default) != R.recipe_id({**default, "phases": {"bulk": {"weights": {"code": 0.3, "web": 0.7}}}})


def test_compare_scores_the_moved_forecast_and_moves_the_law_at_the_actual_compute():
    moved = R.calibrated({**_prediction(), "parameters": {"E": 0.0, "a": 60.0, "b": 0.1},
                          "target": {"params": 20_000, "tokens": 200_000, "compute": 1e10}}, _record([[0.95], [0.94], [0.96]]), "x")
    actual = {"heldout_loss": {"code": 5.7, "web": 5.7}, "flops_per_token": 1e5, "tokens": 100_000}
    cmp = F.compare(moved, actual)
    factor = moved["calibration"]["loss"]["factor"]
    assert cmp["predicted_loss"] == pytest.approx(6.0 * factor) and cmp["error"] == pytest.approx(5.7 - 6.0 * factor)
    assert cmp["predicted_loss_at_actual_compute"] == pytest.approx(60.0 * 1e10 ** -0.1 * factor)


def test_on_the_demos_record_the_moved_forecast_is_within_two_percent_and_its_interval_holds_the_runs():
    """The committed record (benchmarks/bench_decision_accuracy.py over the demo's recipes), each recipe's forecast
    made as the forecast stage makes it (R.best: the law or the largest scout, whichever missed the other recipes'
    full runs more evenly, moved by that miss) from the other recipes alone (issue 42, item 4: within 2% on the
    demo). The law alone misses every full run from above by 2-8% and the largest scout by 9-14%; moved, the
    forecast must come within 2% at the median, at under half the law's own error, and its interval must hold
    most runs."""
    rec = R.load(ROOT / R.RECORD)
    assert rec is not None, f"no {R.RECORD}: benchmarks/bench_decision_accuracy.py --forecast-record writes it"
    recipes = sorted({r["mixture"] for r in rec["runs"]})
    assert len(recipes) >= 5
    moved, law, naive, inside = [], [], [], 0
    for recipe in recipes:
        c = R.best(rec["runs"], "loss", recipe)
        for r in (r for r in rec["runs"] if r["mixture"] == recipe):
            x = r["loss"]
            error = math.log(x[c["predictor"]] / x["actual"]) + c["bias"]
            moved.append(abs(error))
            law.append(math.log(x["law"] / x["actual"]))
            naive.append(abs(math.log(x["naive"] / x["actual"])))
            inside += abs(error) <= c["half_width"]
    assert min(law) > 0  # the law alone is above every full run: the miss the record corrects is systematic
    assert statistics.median(moved) < min(0.02, statistics.median(law) / 2), (moved, law)
    assert statistics.median(moved) < statistics.median(naive) / 4, (moved, naive)
    assert inside >= 0.75 * len(moved)
