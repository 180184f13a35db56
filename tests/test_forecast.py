"""The scaling forecast: known laws are recovered from their points, bounds and forms are parameters, bad
input is named; and on a real tiny pipeline run the forecast is written before the full run and scored after.
"""

import json
import math

import numpy as np
import pytest

import tiny_run
from tokenmill import forecast as F

FLOPS_PER_TOKEN = 1_000_000


def _scouts(loss_of, tokens=(2e4, 6e4, 2e5, 6e5, 2e6, 6e6), buckets=("code", "web")):
    """Summaries of scouts whose held-out loss (the same in every bucket) follows loss_of(compute)."""
    return [{"name": f"s{i}", "flops_per_token": FLOPS_PER_TOKEN, "flops_per_token_causal": FLOPS_PER_TOKEN // 2,
             "tokens": int(t), "heldout_loss": {b: float(loss_of(FLOPS_PER_TOKEN * t)) for b in buckets}}
            for i, t in enumerate(tokens)]


def _target(tokens):
    return {"flops_per_token": FLOPS_PER_TOKEN, "flops_per_token_causal": FLOPS_PER_TOKEN // 2, "tokens": int(tokens)}


def test_power_law_is_recovered_and_extrapolated():
    def true(c):
        return 37.0 * c ** -0.071

    out = F.fit_and_predict(_scouts(true, tokens=(2e4, 6e4, 2e5)), _target(5e7), {"form": "power_law"})
    assert out["form"] == "power_law"
    assert out["parameters"]["a"] == pytest.approx(37.0, rel=1e-6)
    assert out["parameters"]["b"] == pytest.approx(0.071, rel=1e-6)
    assert out["parameters"]["E"] == 0.0
    assert out["predicted_loss"] == pytest.approx(true(FLOPS_PER_TOKEN * 5e7), rel=1e-9)
    assert out["extrapolation"] == pytest.approx(5e7 / 2e5)
    assert out["rms_log_residual"] < 1e-9 and out["degrees_of_freedom"] == 1


def test_power_law_with_floor_is_recovered():
    def true(c):
        return 1.8 + 220.0 * c ** -0.21

    out = F.fit_and_predict(_scouts(true), _target(1e8), {"form": "power_law_floor"})
    p = out["parameters"]
    assert (p["E"], p["a"], p["b"]) == pytest.approx((1.8, 220.0, 0.21), rel=1e-4)
    assert out["predicted_loss"] == pytest.approx(true(FLOPS_PER_TOKEN * 1e8), rel=1e-6)
    # A pure power law cannot bend towards the floor: it misfits the same points and overshoots the
    # extrapolation downwards (the floor form exists for this).
    plain = F.fit_and_predict(_scouts(true), _target(1e8), {"form": "power_law"})
    assert plain["rms_log_residual"] > 1e-3
    assert plain["predicted_loss"] < out["predicted_loss"] - 0.05


def test_noisy_ladder_predicts_within_its_noise():
    rng = np.random.default_rng(0)
    noise = iter(np.exp(rng.normal(0, 0.005, size=6)))

    def true(c):
        return 2.0 + 60.0 * c ** -0.15

    noisy = [dict(s, heldout_loss={b: v * next(noise) for b, v in list(s["heldout_loss"].items())[:1]})
             for s in _scouts(true, buckets=("web",))]
    out = F.fit_and_predict(noisy, _target(2e7), {"form": "power_law_floor"})
    assert out["predicted_loss"] == pytest.approx(true(FLOPS_PER_TOKEN * 2e7), rel=0.03)
    assert 0.001 < out["rms_log_residual"] < 0.01


def test_auto_form_takes_the_floor_only_with_enough_scouts():
    def true(c):
        return 1.5 + 90.0 * c ** -0.2

    assert F.fit_and_predict(_scouts(true, tokens=(1e4, 1e5, 1e6)), _target(1e7))["form"] == "power_law"
    assert F.fit_and_predict(_scouts(true, tokens=(1e4, 1e5, 1e6, 1e7)), _target(1e8))["form"] == "power_law_floor"
    five = {"form": "auto", "min_points_floor": 5}
    assert F.fit_and_predict(_scouts(true, tokens=(1e4, 1e5, 1e6, 1e7)), _target(1e8), five)["form"] == "power_law"


def test_bounds_and_loss_choice_are_parameters():
    def true(c):
        return 40.0 * c ** -0.08

    capped = F.fit_and_predict(_scouts(true), _target(1e8), {"form": "power_law", "exponent_bounds": [0.0, 0.05]})
    assert capped["parameters"]["b"] == pytest.approx(0.05)  # the bound holds the exponent below the truth
    floor = F.fit_and_predict(_scouts(lambda c: 3.0 + 50 * c ** -0.3), _target(1e8),
                              {"form": "power_law_floor", "floor_bounds": [0.0, 0.5]})
    lowest = min(p["value"] for p in floor["points"])
    assert floor["parameters"]["E"] <= 0.5 * lowest + 1e-9  # the truth (3.0) is out of bounds

    # One bucket instead of the mean; the causal FLOPs instead of the full square.
    scouts = _scouts(true)
    for s in scouts:
        s["heldout_loss"]["code"] += 1.0
    code = F.fit_and_predict(scouts, _target(1e8), {"form": "power_law", "loss": "code"})
    web = F.fit_and_predict(scouts, _target(1e8), {"form": "power_law", "loss": "web"})
    assert web["predicted_loss"] == pytest.approx(true(FLOPS_PER_TOKEN * 1e8), rel=1e-6)
    assert code["predicted_loss"] > web["predicted_loss"] + 0.5
    causal = F.fit_and_predict(_scouts(true), _target(1e8), {"form": "power_law", "compute": "flops_causal"})
    assert causal["target"]["compute"] == FLOPS_PER_TOKEN // 2 * 1e8
    with pytest.raises(F.ForecastError, match="no held-out loss for bucket 'legal'"):
        F.fit_and_predict(scouts, _target(1e8), {"loss": "legal"})


def test_config_errors_name_the_key():
    with pytest.raises(F.ForecastError, match=r"forecast\.fromm: unknown parameter"):
        F.parse_forecast({"fromm": "power_law"})
    with pytest.raises(F.ForecastError, match=r"forecast\.form: expected auto, power_law, power_law_floor or two_term, got "):
        F.parse_forecast({"form": "exponential"})
    with pytest.raises(F.ForecastError, match=r"forecast\.exponent_bounds\[1\]: expected a number, got "):
        F.parse_forecast({"exponent_bounds": [0, "2"]})
    with pytest.raises(F.ForecastError, match=r"forecast\.min_points_floor: expected an integer, got "):
        F.parse_forecast({"min_points_floor": 4.5})
    with pytest.raises(F.ForecastError, match=r"forecast: floor_bounds must be 0 <= low < high < 1"):
        F.parse_forecast({"floor_bounds": [0.5, 1.2]})
    assert F.parse_forecast(None) == F.ForecastConfig()


def test_bad_scouts_are_excluded_or_named():
    def true(c):
        return 30.0 * c ** -0.05

    scouts = _scouts(true, tokens=(1e4, 1e5, 1e6))
    scouts[1]["heldout_loss"]["web"] = float("nan")  # a diverged scout
    out = F.fit_and_predict(scouts, _target(1e7), {"form": "power_law"})
    assert out["excluded"] == [{"name": "s1", "reason": "no_finite_heldout_loss"}]
    assert [p["name"] for p in out["points"]] == ["s0", "s2"]
    assert out["predicted_loss"] == pytest.approx(true(FLOPS_PER_TOKEN * 1e7), rel=1e-6)

    with pytest.raises(F.ForecastError, match="needs at least 3 scouts with a finite held-out loss, got 2"):
        F.fit_and_predict(scouts, _target(1e7), {"form": "power_law_floor"})
    del scouts[0]["tokens"]
    with pytest.raises(F.ForecastError, match="s0: summary has no tokens"):
        F.fit_and_predict(scouts, _target(1e7))
    same = _scouts(true, tokens=(1e4, 1e4, 1e5))
    with pytest.raises(F.ForecastError, match=r"scouts \['s0', 's1'\] have the same training compute"):
        F.fit_and_predict(same, _target(1e7))
    mixed = _scouts(true, tokens=(1e4, 1e5, 1e6))
    mixed[2]["heldout_loss"]["legal"] = 3.0
    with pytest.raises(F.ForecastError, match="different buckets"):
        F.fit_and_predict(mixed, _target(1e7))


def _sized(n_params, tokens, loss_of, sigma=None):
    """Scout summaries of models of n_params parameters trained on `tokens` tokens (6 N FLOPs a token), whose
    held-out loss follows loss_of(N, D)."""
    out = []
    for i, (n, d) in enumerate(zip(n_params, tokens)):
        s = {"name": f"r{i}", "params": int(n), "flops_per_token": 6 * int(n), "flops_per_token_causal": 6 * int(n),
             "tokens": int(d), "heldout_loss": {"web": float(loss_of(n, d))}}
        out.append(_noisy(s, s["heldout_loss"]["web"], sigma) if sigma else s)
    return out


def test_two_term_law_is_recovered_where_a_law_in_compute_misses(tmp_path):
    """A ladder off one tokens-per-parameter line (three rungs along it, three narrower ones trained longer): the
    law in parameters and tokens is recovered and carried to the full run; a law in compute fitted to the same
    rungs misses it, because at the full run's tokens width buys little (the demo's case, RESULTS.md)."""
    def true(n, d):
        return 1.2 + 900.0 * n ** -0.45 + 600.0 * d ** -0.28

    n_params, tokens = (1e5, 2e5, 4e5, 4e4, 4e4, 8e4), (2e6, 4e6, 8e6, 2e7, 4e7, 4e7)
    full = {"params": 2_000_000, "tokens": int(4e7), "flops_per_token": 12_000_000, "flops_per_token_causal": 12_000_000}
    out = F.fit_and_predict(_sized(n_params, tokens, true), full)
    assert out["form"] == "two_term" and out["degrees_of_freedom"] == 1
    p = out["parameters"]
    assert (p["E"], p["A"], p["alpha"], p["B"], p["beta"]) == pytest.approx((1.2, 900.0, 0.45, 600.0, 0.28), rel=1e-3)
    assert out["predicted_loss"] == pytest.approx(true(2e6, 4e7), rel=1e-5)
    assert out["backtest"]["predicted"] == pytest.approx(out["backtest"]["actual"], rel=1e-4)
    compute_law = F.fit_and_predict(_sized(n_params, tokens, true), full, {"form": "power_law_floor"})
    assert abs(compute_law["predicted_loss"] / true(2e6, 4e7) - 1) > 0.02  # past the 2% a forecast aims for
    # The actual run scored where it trained: its parameters and tokens, not its compute alone.
    cmp = F.compare(out, {**full, "heldout_loss": {"web": true(2e6, 4e7)}})
    assert cmp["relative_error"] == pytest.approx(0, abs=1e-5)
    assert cmp["predicted_loss_at_actual_compute"] == pytest.approx(true(2e6, 4e7), rel=1e-5)
    # With noise: the interval holds the truth, the law's misfit in log parameters and log tokens beside it.
    rng = np.random.default_rng(5)
    noisy = [_noisy(s, s["heldout_loss"]["web"] + rng.normal(0, 0.01), 0.01) for s in _sized(n_params, tokens, true)]
    out = F.fit_and_predict(noisy, full, {"bootstrap": 200})
    lo, hi = out["interval"]
    assert out["form"] == "two_term" and lo < true(2e6, 4e7) < hi and out["misfit"]["reach"] > 0
    # The report draws it: no curve in compute, each rung's fitted value, the form and its five parameters.
    from tokenmill.report.sections import Plots, scaling

    section = scaling(Plots(tmp_path), out, F.compare(out, {**full, "heldout_loss": {"web": true(2e6, 4e7)}}), None, "")
    assert (tmp_path / "plots" / "scaling.png").stat().st_size > 0 and "two_term" in "".join(section.html)
    assert all(k in "".join(section.html) for k in ("alpha", "beta"))


def test_auto_takes_two_term_only_off_one_line_and_with_enough_rungs():
    def true(n, d):
        return 1.2 + 900.0 * n ** -0.45 + 600.0 * d ** -0.28

    full = {"params": 2_000_000, "tokens": int(4e7), "flops_per_token": 12_000_000, "flops_per_token_causal": 12_000_000}
    line = (1e4, 2e4, 4e4, 8e4, 1.6e5, 3.2e5)
    assert F.fit_and_predict(_sized(line, [20 * n for n in line], true), full)["form"] == "power_law_floor"
    five = F.fit_and_predict(_sized((1e5, 2e5, 4e5, 4e4, 8e4), (2e6, 4e6, 8e6, 4e7, 4e7), true), full)
    assert five["form"] == "power_law_floor"  # five rungs would leave the five-parameter law nothing to check
    # Asked for by name: five rungs fit it exactly; a summary without its parameter count is named.
    exact = F.fit_and_predict(_sized((1e5, 2e5, 4e5, 4e4, 8e4), (2e6, 4e6, 8e6, 4e7, 4e7), true), full,
                              {"form": "two_term"})
    assert exact["degrees_of_freedom"] == 0 and exact["misfit"] is None
    scouts = _sized((1e5, 2e5, 4e5, 4e4, 8e4, 8e4), (2e6, 4e6, 8e6, 2e7, 2e7, 4e7), true)
    del scouts[1]["params"]
    with pytest.raises(F.ForecastError, match=r"two_term form needs every scout's params and tokens; \['r1'\]"):
        F.fit_and_predict(scouts, full, {"form": "two_term"})
    with pytest.raises(F.ForecastError, match="needs a run's parameters and tokens"):
        F.law(exact["parameters"], 1e15)


def test_compare_scores_the_prediction():
    def true(c):
        return 30.0 * c ** -0.05

    pred = F.fit_and_predict(_scouts(true, tokens=(1e4, 1e5, 1e6)), _target(1e7), {"form": "power_law"})
    actual = {**_target(1e7), "heldout_loss": {"code": 4.0, "web": 4.2}}
    cmp = F.compare(pred, actual)
    assert cmp["actual_loss"] == pytest.approx(4.1)
    assert cmp["error"] == pytest.approx(4.1 - pred["predicted_loss"])
    assert cmp["relative_error"] == pytest.approx((4.1 - pred["predicted_loss"]) / 4.1)
    assert cmp["compute_as_predicted"] is True
    # A run that trained twice the tokens: flagged, and the law is also evaluated where the run really was.
    longer = dict(actual, tokens=int(2e7))
    cmp = F.compare(pred, longer)
    assert cmp["compute_as_predicted"] is False
    assert cmp["predicted_loss_at_actual_compute"] == pytest.approx(true(FLOPS_PER_TOKEN * 2e7), rel=1e-6)
    with pytest.raises(F.ForecastError, match="not the scouts'"):
        F.compare(pred, dict(actual, heldout_loss={"code": 4.0}))
    with pytest.raises(F.ForecastError, match="no finite held-out loss"):
        F.compare(pred, dict(actual, heldout_loss={"code": float("nan"), "web": 4.0}))


def _noisy(summary, loss, sigma, bpb=None):
    """A copy of a scout summary with its held-out loss (every bucket) and noise-window σ set."""
    out = dict(summary, heldout_loss={b: loss for b in summary["heldout_loss"]}, noise={"heldout_mean": sigma})
    if bpb is not None:
        out["benchmarks_mean"] = {"bpb": bpb}
        out["noise"]["benchmarks_mean.bpb"] = sigma
    return out


def test_seed_replicas_enter_with_their_mean_and_the_noise_of_a_mean():
    def true(c):
        return 30.0 * c ** -0.05

    scouts = _scouts(true, tokens=(1e4, 1e5, 1e6))
    base = true(FLOPS_PER_TOKEN * 1e4)
    scouts[0] = dict(_noisy(scouts[0], base + 0.1, 0.01), replicas=[_noisy(scouts[0], base - 0.1, 0.01)])
    for i in (1, 2):
        scouts[i] = _noisy(scouts[i], scouts[i]["heldout_loss"]["web"], 0.01)
    out = F.fit_and_predict(scouts, _target(1e7), {"form": "power_law"})
    first = out["points"][0]
    assert first["value"] == pytest.approx(base) and first["seeds"] == 2
    # σ of one run is the larger of the seed spread (0.2 / sqrt(2)) and the window's (0.01); of the mean, / sqrt(2)
    assert first["sigma"] == pytest.approx(0.2 / math.sqrt(2) / math.sqrt(2))
    assert out["points"][1]["sigma"] == pytest.approx(0.01) and out["points"][1]["seeds"] == 1


def test_interval_covers_the_truth_and_narrows_with_the_noise():
    def true(c):
        return 30.0 * c ** -0.05

    rng = np.random.default_rng(3)
    widths = []
    for sigma in (0.05, 0.005):
        scouts = [_noisy(s, s["heldout_loss"]["web"] + rng.normal(0, sigma), sigma)
                  for s in _scouts(true, tokens=(1e4, 1e5, 1e6))]
        out = F.fit_and_predict(scouts, _target(1e7), {"form": "power_law", "bootstrap": 400})
        lo, hi = out["interval"]
        assert lo < out["predicted_loss"] < hi
        assert lo < true(FLOPS_PER_TOKEN * 1e7) < hi
        widths.append(hi - lo)
        again = F.fit_and_predict(scouts, _target(1e7), {"form": "power_law", "bootstrap": 400})
        assert again["interval"] == out["interval"]  # seeded: the same build, the same interval
    assert widths[1] < widths[0] / 5
    # Without a noise estimate there is no interval to give (rather than a zero-width one).
    assert F.fit_and_predict(_scouts(true, tokens=(1e4, 1e5, 1e6)), _target(1e7))["interval"] is None


def test_backtest_and_naive_predictor():
    def true(c):
        return 30.0 * c ** -0.05

    out = F.fit_and_predict(_scouts(true, tokens=(1e4, 1e5, 1e6)), _target(1e7), {"form": "power_law"})
    back = out["backtest"]
    assert back["held_out"] == "s2" and back["predicted"] == pytest.approx(true(FLOPS_PER_TOKEN * 1e6))
    assert back["naive"] == pytest.approx(true(FLOPS_PER_TOKEN * 1e5)) and back["beats_naive"] is True
    assert out["naive"] == pytest.approx(true(FLOPS_PER_TOKEN * 1e6))
    # A ladder that stopped improving at its last rung: the law carried from the first two overshoots and
    # repeating the previous rung is closer; the back-test says so.
    flat = _scouts(true, tokens=(1e4, 1e5, 1e6))
    flat[2]["heldout_loss"] = dict(flat[1]["heldout_loss"])
    flat[2]["heldout_loss"] = {b: v - 0.001 for b, v in flat[2]["heldout_loss"].items()}
    assert F.fit_and_predict(flat, _target(1e7), {"form": "power_law"})["backtest"]["beats_naive"] is False
    # Two scouts leave one point after the largest is taken out: no back-test, and the reason.
    two = F.fit_and_predict(_scouts(true, tokens=(1e4, 1e5)), _target(1e7), {"form": "power_law"})
    assert "needs at least 2 scouts" in two["backtest"]["skipped"]
    # The actual run scored against the interval and the naive predictor.
    cmp = F.compare(out, {**_target(1e7), "heldout_loss": {b: true(FLOPS_PER_TOKEN * 1e7) for b in ("code", "web")}})
    assert cmp["beats_naive"] is True and cmp["naive_error"] < 0 and cmp["within_interval"] is None


def test_bits_per_byte_is_forecast_beside_the_loss():
    def loss(c):
        return 30.0 * c ** -0.05

    def bpb(c):
        return 9.0 * c ** -0.04

    scouts = [_noisy(s, s["heldout_loss"]["web"], 0.01, bpb=bpb(FLOPS_PER_TOKEN * t))
              for s, t in zip(_scouts(loss, tokens=(1e4, 1e5, 1e6)), (1e4, 1e5, 1e6))]
    out = F.fit_and_predict(scouts, _target(1e7), {"form": "power_law", "bootstrap": 50})
    assert out["bpb"]["predicted"] == pytest.approx(bpb(FLOPS_PER_TOKEN * 1e7), rel=1e-6)
    assert out["bpb"]["parameters"]["b"] == pytest.approx(0.04, rel=1e-6)
    assert out["bpb"]["backtest"]["beats_naive"] is True and len(out["bpb"]["interval"]) == 2
    assert out["predicted_loss"] == pytest.approx(loss(FLOPS_PER_TOKEN * 1e7), rel=1e-6)
    actual = {**_target(1e7), "heldout_loss": {"code": 4.0, "web": 4.0}, "benchmarks_mean": {"bpb": 3.0}}
    cmp = F.compare(out, actual)["bpb"]
    assert cmp["actual"] == 3.0 and cmp["error"] == pytest.approx(3.0 - out["bpb"]["predicted"])
    # Scouts without in-loop benchmarks: no bits-per-byte forecast, the loss's unchanged.
    assert F.fit_and_predict(_scouts(loss, tokens=(1e4, 1e5, 1e6)), _target(1e7))["bpb"] is None


def test_target_follows_the_training_loop():
    model = {"n_layers": 2, "d_model": 64, "n_heads": 2, "n_kv_heads": 1, "ffn_dim": 192, "tie_embeddings": True}
    train = {"seq_len": 128, "global_batch": 4, "token_budget": 100_000}
    t = F.target_of(model, train, vocab_size=1000, plan_tokens=10**6)
    assert t["steps"] == 100_000 // 512 and t["tokens"] == t["steps"] * 512
    # The plan caps the steps (the last token has no target), and so does max_steps.
    assert F.target_of(model, train, 1000, plan_tokens=512 * 10 + 1)["steps"] == 10
    assert F.target_of(model, train, 1000, plan_tokens=512 * 10)["steps"] == 9
    assert F.target_of(model, {**train, "max_steps": 7}, 1000, 10**6)["steps"] == 7
    # No budget: tokens_per_param x parameters.
    t = F.target_of(model, {**train, "token_budget": None, "tokens_per_param": 20}, 1000, 10**9)
    assert t["steps"] == int(20 * t["params"]) // 512


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return tiny_run.build(tmp_path_factory.mktemp("tiny"))


@pytest.mark.slow  # drives dvc through the tiny pipeline (tests/tiny_run.py)
def test_forecast_of_a_real_run(tiny):
    """The tiny run's forecast stage predicted from its three scouts before the full run existed (tiny_run
    asserts it); the full run then trained exactly the compute it assumed, and the loss came close."""
    prediction = json.loads((tiny / "data" / "forecast" / "prediction.json").read_text())
    summary = json.loads((tiny / "data" / "train" / "pretrain" / "summary.json").read_text())
    assert [p["name"] for p in prediction["points"]] == ["s1", "s2", "s3"]
    assert prediction["form"] == "power_law" and prediction["degrees_of_freedom"] == 1
    # The demo's record of earlier full runs is of another ladder: the law's forecast stands, and says why.
    assert not prediction["calibration"]["applied"] and "the record's" in prediction["calibration"]["reason"]
    assert prediction["law"]["predicted_loss"] == prediction["predicted_loss"]
    for key in ("params", "steps", "tokens", "flops_per_token"):
        assert prediction["target"][key] == summary[key], key
    cmp = F.compare(prediction, summary)
    assert cmp["compute_as_predicted"]
    # The forecast of the decision metric (the held-out loss) must beat the naive predictor (the largest
    # scout's value). The same code gives other floats on another CPU, and this tiny build's training noise
    # is large (RESULTS.md, Scaling forecast), so nothing tighter holds on every machine: measured on two, the
    # loss missed by -1.2% (naive -1.9%) and by -2.0% (naive -3.0%). The benchmarks' bits per byte and the
    # back-test beat the naive predictor on the first machine and lost to it on the second (bpb -1.4% against
    # -0.6%): they are reported, with their verdicts, not asserted (issue 18).
    assert abs(cmp["error"]) < abs(cmp["naive_error"]), cmp
    bpb = cmp["bpb"]
    assert bpb["beats_naive"] == (abs(bpb["error"]) < abs(bpb["naive_error"])), bpb
    for back in (prediction["backtest"], prediction["bpb"]["backtest"]):
        assert back["held_out"] == "s3" and back["beats_naive"] == (abs(back["error"]) < abs(back["naive_error"])), back
    lo, hi = prediction["interval"]
    assert lo < prediction["predicted_loss"] < hi
    # The full run is larger than every scout: the forecast extrapolates, as it must.
    assert prediction["extrapolation"] > 1


def test_the_interval_carries_the_laws_leave_one_out_error_to_the_full_run():
    """Three rungs off a power law: each left out is predicted by the line (in log-log) through the other two,
    computed here by hand; its log error per decade of reach, RMS over the rungs, times the full run's reach is
    the misfit σ. Noise-free rungs: without the misfit the interval is the point forecast itself; with it, its
    width is the normal quantiles of that σ. A law that fits its rungs exactly adds nothing."""
    logc = [math.log(1e10), math.log(1e11), math.log(1e13)]  # uneven: s2 is two decades from its neighbour
    loss = [5.0, 4.0, 3.2]
    points = [{"name": f"s{i}", "compute": math.exp(c), "value": v, "sigma": 0.0} for i, (c, v) in enumerate(zip(logc, loss))]
    target = {"compute": 1e15}  # two decades past the largest rung

    def through(i, j, at):  # the line through rungs i and j in (log C, log L), at log C = at
        slope = (math.log(loss[j]) - math.log(loss[i])) / (logc[j] - logc[i])
        return math.log(loss[i]) + slope * (at - logc[i])

    errors = [math.log(loss[0]) - through(1, 2, logc[0]), math.log(loss[1]) - through(0, 2, logc[1]),
              math.log(loss[2]) - through(0, 1, logc[2])]
    decade = math.log(10)
    per_decade = [errors[0] / decade, errors[1] / decade, errors[2] / (2 * decade)]  # reach from the nearest kept
    sigma = math.sqrt(sum(e * e for e in per_decade) / 3) * 2 * decade
    cfg = F.ForecastConfig(form="power_law", bootstrap=4000)
    misfit = F.leave_one_out(points, cfg, "power_law", "held-out loss", target)
    assert [r["log_error"] for r in misfit["rungs"]] == pytest.approx(errors, rel=1e-6)
    assert misfit["log_sigma"] == pytest.approx(sigma, rel=1e-6) and sigma > 0.01

    with_misfit = F._predict(points, target, cfg, "held-out loss")
    without = F._predict(points, target, cfg.model_copy(update={"misfit": False}), "held-out loss")
    predicted = with_misfit["predicted"]
    assert without["interval"] == pytest.approx([predicted, predicted], rel=1e-9)
    lo, hi = with_misfit["interval"]
    assert math.log(hi / lo) == pytest.approx(2 * 1.6449 * sigma, rel=0.06)

    exact = [dict(p, value=37.0 * p["compute"] ** -0.071) for p in points]
    assert F.leave_one_out(exact, cfg, "power_law", "held-out loss", target)["log_sigma"] < 1e-9
    assert F.leave_one_out(points[:2], cfg, "power_law", "held-out loss", target) is None  # two rungs: nothing left
