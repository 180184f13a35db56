"""The scaling forecast: a power law fitted to the scouts' final held-out losses predicts the full run's loss.

The scouts (conf/scouts) train small models with the full run's recipe on a prefix of the same plan. Each
gives one point (C, L): training compute C = flops_per_token x tokens (tokenmill.train.config.model_size,
6 x matmul parameters plus the attention term) and its final held-out loss L. Three forms are fitted:

    power_law        L = a * C^-b              a straight line in log-log space: two parameters
    power_law_floor  L = E + a * C^-b          with an irreducible loss E (Kaplan et al. 2020): three parameters
    two_term         L = E + A * N^-alpha + B * D^-beta
                                               in parameters N and tokens D apart (Hoffmann et al. 2022,
                                               approach 3): five parameters, for a ladder whose rungs vary N
                                               and D apart (conf/scouts/cpu_demo_two_term.yaml)

`auto` takes the floor only when there are `min_points_floor` scouts or more: three points determine three
parameters exactly, leaving nothing to check the fit against. It takes two_term when the ladder is not one
tokens-per-parameter line (its rungs' ratios differ by more than TWO_TERM_SPREAD) and has TWO_TERM_MIN rungs: a
law in compute alone reads such a ladder as scatter, and it cannot tell a full run bound by its width from one
bound by its tokens (on the demo a 32-wide rung at the full run's tokens reaches its held-out loss, and every
compute law missed the full run by 6-16%: RESULTS.md, "Why the forecast misses"). All are fitted by least
squares on log L (scipy.optimize.least_squares, bounded): the losses of a ladder span a small range, and log
residuals weigh every rung alike. The full run's compute comes from its configuration before it trains
(`target_of`), so the prediction is written before the run starts; `compare` scores it when it ends.

A rung trained with several seeds (scouts.<rung>.seeds, its replicas under data/train/scout/<rung>/replicas)
enters the fit with the mean of its replicas. Every forecast carries three checks of itself:
  interval   a parametric bootstrap over the seeds and checkpoints: each draw moves every rung's value by its
             noise (normal, σ of the rung's mean: the larger of its seed spread and its noise-window spread,
             tokenmill.evaluate.signal.combine_replicas, over sqrt(seeds)), refits and predicts again; with
             `misfit` (the default) each draw is also moved by the law's own error (below); the interval is
             the draws' central `interval` fraction.
  misfit     the law's own error, from its leave-one-out residuals: each rung left out in turn and predicted
             from the others with the form the forecast took; its log error per unit of log compute it was
             carried from the nearest rung kept, RMS over the rungs, times the log of the full run's compute
             over the largest scout's is the σ (of log loss) added to every bootstrap draw. An extrapolation
             three times as far as the ladder's spacing carries three times the error the ladder shows. For
             two_term, distances are in log parameters and log tokens together, and the reach is the full
             run's distance to the nearest rung.
  backtest   the largest scout left out and predicted from the others, against the naive predictor (the next
             largest scout's value): a law that does not beat repeating the last rung has no business
             extrapolating further.
  naive      the largest scout's value, the prediction to beat at the full run.
Two quantities are forecast with the same law: the held-out loss (nats per token, `loss`) and the in-loop
benchmarks' mean bits per byte of the gold answers (`bpb`, when the scouts scored benchmarks).

The `forecast` section of params.yaml (ForecastConfig) holds the form, its bounds and which loss is fitted,
so `dvc exp run -S forecast.form=power_law_floor` varies them; an unknown key or a wrong type is an error
naming the key.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Literal, Mapping, Sequence

import numpy as np
import pyarrow.parquet as pq
from pydantic import BaseModel, ConfigDict, Field, model_validator

from tokenmill.evaluate.signal import combine_replicas
from tokenmill.forecast import record
from tokenmill.forecast.record import RECORD
from tokenmill.section import check_section
from tokenmill.train.config import model_size, parse_model, parse_train, run_steps


class ForecastError(ValueError):
    """A forecast that cannot be made: the message says which scout, key or file is at fault."""


class ForecastConfig(BaseModel):
    """The `forecast` section of params.yaml."""

    # strict: "0.5" is not a float, 1 is not a bool; an int is still accepted where a float is expected.
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    form: Literal["auto", "power_law", "power_law_floor", "two_term"] = "auto"
    # Which held-out loss is fitted: "mean" (the unweighted mean over the buckets every scout reports) or
    # one bucket's name (e.g. "web/high").
    loss: str = "mean"
    # flops: 6 x matmul params + the full attention square; flops_causal: the attention term halved.
    compute: Literal["flops", "flops_causal"] = "flops"
    exponent_bounds: list[float] = Field(default=[0.0, 2.0], min_length=2, max_length=2)  # b (alpha, beta)
    # E, as fractions of the lowest scout loss: the floor lies below every loss the ladder reached.
    floor_bounds: list[float] = Field(default=[0.0, 0.99], min_length=2, max_length=2)
    min_points_floor: int = Field(default=4, ge=4)  # `auto` fits the floor from this many scouts up
    interval: float = Field(default=0.9, gt=0, lt=1)  # the bootstrap interval's coverage
    bootstrap: int = Field(default=1000, ge=0)         # draws (0: no interval)
    misfit: bool = True  # the interval adds the law's leave-one-out error, carried to the full run (docstring)
    seed: int = 0                                      # of the bootstrap: the same build, the same interval
    # The forecast moved by its record at this scale, where one was measured with this ladder and full run
    # (tokenmill.forecast.record): the law's value or the largest scout's, whichever missed the record more evenly.
    # On the demo the compute law misses every full run from above, by 2.4-7.8% over six recipes.
    calibrate: bool = True

    @model_validator(mode="after")
    def _check(self) -> "ForecastConfig":
        lo, hi = self.exponent_bounds
        if not 0 <= lo < hi:
            raise ValueError(f"exponent_bounds must be 0 <= low < high, got {self.exponent_bounds}")
        lo, hi = self.floor_bounds
        if not 0 <= lo < hi < 1:
            raise ValueError(f"floor_bounds must be 0 <= low < high < 1 (fractions of the lowest scout loss), "
                             f"got {self.floor_bounds}")
        return self


def parse_forecast(section: Mapping | None) -> ForecastConfig:
    """params.yaml's `forecast` section (None: the defaults) -> ForecastConfig; errors name the key."""
    if section is None:
        return ForecastConfig()
    if not isinstance(section, Mapping):
        raise ForecastError(f"forecast: expected a mapping, got {type(section).__name__}")
    lines = check_section("forecast", section, ForecastConfig)
    if lines:
        raise ForecastError("; ".join(lines))
    return ForecastConfig.model_validate(dict(section))


# ---------------------------------------------------------------------------------------------------------
# Points and targets


def _loss_of(summary: Mapping, which: str, name: str) -> float | None:
    """The fitted loss of a run's summary: one bucket's held-out loss, or their mean (None when absent)."""
    heldout = summary.get("heldout_loss")
    if not isinstance(heldout, Mapping) or not heldout:
        return None
    if which == "mean":
        values = [heldout[b] for b in sorted(heldout)]
    elif which in heldout:
        values = [heldout[which]]
    else:
        raise ForecastError(f"{name}: no held-out loss for bucket {which!r} (it has {sorted(heldout)}); "
                            f"set forecast.loss to one of them or to 'mean'")
    if any(v is None or not isinstance(v, (int, float)) or not math.isfinite(v) for v in values):
        return None
    return float(sum(values) / len(values))


def _compute_of(summary: Mapping, which: str, name: str) -> float:
    key = "flops_per_token" if which == "flops" else "flops_per_token_causal"
    missing = [k for k in (key, "tokens") if not isinstance(summary.get(k), (int, float))]
    if missing:
        raise ForecastError(f"{name}: summary has no {' or '.join(missing)} (a tokenmill.train summary.json)")
    return float(summary[key]) * float(summary["tokens"])


def _value_of(summary: Mapping, metric: str, cfg: ForecastConfig, name: str) -> float | None:
    """A run's final value of the forecast metric: `loss` (the configured held-out loss) or `bpb`."""
    if metric == "loss":
        return _loss_of(summary, cfg.loss, name)
    value = (summary.get("benchmarks_mean") or {}).get("bpb")
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def _window_sigma(summary: Mapping, metric: str, cfg: ForecastConfig) -> float | None:
    """The σ over the run's noise window (tokenmill.train.loop) of the metric, where the run recorded it."""
    key = {"loss": "heldout_mean" if cfg.loss == "mean" else None, "bpb": "benchmarks_mean.bpb"}[metric]
    value = (summary.get("noise") or {}).get(key) if key else None
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def scout_points(scouts: Sequence[Mapping], cfg: ForecastConfig, metric: str = "loss") -> tuple[list[dict], list[dict]]:
    """(points, excluded): one {name, compute, value, sigma, seeds, params, tokens} per usable scout; the value
    is the mean over the scout's seed replicas (its `replicas`, summaries like its own) and sigma the
    uncertainty of that mean. A scout whose value is missing or not finite (a diverged run) is excluded with
    its reason instead of bending the fit."""
    points, excluded = [], []
    for i, s in enumerate(scouts):
        name = str(s.get("name") or f"scout {i}")
        compute = _compute_of(s, cfg.compute, name)
        runs = [s, *(s.get("replicas") or [])]
        values = [_value_of(r, metric, cfg, name) for r in runs]
        if any(v is None for v in values):
            what = "heldout_loss" if metric == "loss" else "benchmarks_bpb"
            excluded.append({"name": name, "reason": f"no_finite_{what}"})
        elif min(values) <= 0 or compute <= 0:
            excluded.append({"name": name, "reason": "non_positive_value_or_compute"})
        else:
            mean, sigma = combine_replicas([{metric: (v, _window_sigma(r, metric, cfg))} for v, r in zip(values, runs)])[metric]
            points.append({"name": name, "compute": compute, "value": mean,
                           "sigma": None if sigma is None else sigma / math.sqrt(len(runs)), "seeds": len(runs),
                           "params": s.get("params"), "tokens": s.get("tokens")})
    if metric == "loss":
        buckets = {tuple(sorted(s["heldout_loss"])) for s in scouts if isinstance(s.get("heldout_loss"), Mapping)}
        if cfg.loss == "mean" and len(buckets) > 1:
            raise ForecastError(f"the scouts report held-out losses of different buckets {sorted(buckets)}: their "
                                f"means are not comparable; set forecast.loss to one bucket")
    rung = [(p["compute"], p["params"], p["tokens"]) for p in points]  # one compute, two shapes: two rungs
    if len(set(rung)) < len(points):
        same = sorted(p["name"] for p, r in zip(points, rung) if rung.count(r) > 1)
        raise ForecastError(f"scouts {same} have the same training compute, parameters and tokens: a ladder needs "
                            f"distinct rungs")
    return sorted(points, key=lambda p: p["compute"]), excluded


def target_of(model_cfg: Mapping, train_cfg: Mapping, vocab_size: int, plan_tokens: int) -> dict:
    """The full run's size, tokens and compute from its configuration, before it trains.

    The steps are the trainer's (tokenmill.train.config.run_steps); every step is seq_len x global_batch tokens.
    """
    model, train = parse_model(model_cfg), parse_train(train_cfg)
    size = model_size(model, vocab_size, train.seq_len)
    steps = run_steps(train, size["params"], plan_tokens)
    tokens = steps * train.tokens_per_step
    return {"params": size["params"], "matmul_params": size["matmul_params"],
            "flops_per_token": size["flops_per_token"], "flops_per_token_causal": size["flops_per_token_causal"],
            "steps": steps, "tokens": tokens}


def plan_tokens(plan_dir: str | Path) -> int:
    """Tokens in the plan's stream: every planned document and the end-of-text after it."""
    path = Path(plan_dir) / "plan.parquet"
    if not path.exists():
        raise ForecastError(f"no plan at {path}: run the mixture stage first")
    t = pq.read_table(path, columns=["stream_start", "length"])
    if t.num_rows == 0:
        return 0
    return int(max(s + n + 1 for s, n in zip(t.column("stream_start").to_pylist(), t.column("length").to_pylist())))


def project_target(model_cfg: Mapping, train_cfg: Mapping, tokens_dir: str | Path, plan_dir: str | Path) -> dict:
    """target_of with the vocabulary from the token stage's manifest and the plan's length."""
    manifest = Path(tokens_dir) / "manifest.json"
    if not manifest.exists():
        raise ForecastError(f"no token manifest at {manifest}: run the tokenize stage first")
    vocab = int(json.loads(manifest.read_text())["vocab_size"])
    return target_of(model_cfg, train_cfg, vocab, plan_tokens(plan_dir))


def read_summaries(runs: Mapping[str, str | Path]) -> list[dict]:
    """{name: run directory} -> their summary.json, each with its name and the summaries of its seed replicas
    (`replicas`, from run_dir/replicas/*/, tokenmill.train.stage); a missing one is an error naming it."""
    out = []
    for name, run_dir in runs.items():
        path = Path(run_dir) / "summary.json"
        if not path.exists():
            raise ForecastError(f"{name}: no {path} (the run has not finished)")
        replicas = [json.loads(p.read_text()) for p in sorted(Path(run_dir).glob("replicas/*/summary.json"))]
        out.append({"name": name, **json.loads(path.read_text()), "replicas": replicas})
    return out


# ---------------------------------------------------------------------------------------------------------
# Fitting


def _fit_power_law(c: np.ndarray, y: np.ndarray, cfg: ForecastConfig) -> dict:
    from scipy.optimize import least_squares  # 0.8 s to import: only when a law is fitted, not when one is read

    x = np.log(c / _ref(c))
    slope, intercept = np.polyfit(x, np.log(y), 1)  # the unbounded answer, as the starting point
    lo, hi = cfg.exponent_bounds
    b0 = float(np.clip(-slope, lo + 1e-9, hi - 1e-9))
    res = least_squares(lambda p: p[0] - p[1] * x - np.log(y), [intercept, b0],
                        bounds=([-np.inf, lo], [np.inf, hi]), x_scale="jac", xtol=1e-14, ftol=1e-14)
    return {"log_A": float(res.x[0]), "b": float(res.x[1]), "E": 0.0}


def _fit_floor(c: np.ndarray, y: np.ndarray, cfg: ForecastConfig) -> dict:
    from scipy.optimize import least_squares  # 0.8 s to import: only when a law is fitted, not when one is read

    x = np.log(c / _ref(c))
    b_lo, b_hi = cfg.exponent_bounds
    e_lo, e_hi = (f * float(y.min()) for f in cfg.floor_bounds)

    def residuals(p):  # p = (log A, b, E); log of a sum kept positive by the bounds on E
        return np.log(p[2] + np.exp(p[0] - p[1] * x)) - np.log(y)

    best = None
    # A small grid of starts (as Hoffmann et al. do): the floor and the exponent trade off against each
    # other, and a single start can stop in the wrong valley.
    for e0 in np.linspace(e_lo, e_hi, 5)[:-1] + (e_hi - e_lo) * 0.05:
        for b0 in np.linspace(b_lo, b_hi, 6)[1:-1]:
            a0 = float(np.log(np.mean(np.maximum(y - e0, 1e-9) * np.exp(b0 * x))))
            res = least_squares(residuals, [a0, b0, e0], bounds=([-np.inf, b_lo, e_lo], [np.inf, b_hi, e_hi]),
                                x_scale="jac", xtol=1e-14, ftol=1e-14, gtol=1e-14)
            if best is None or res.cost < best.cost:
                best = res
    return {"log_A": float(best.x[0]), "b": float(best.x[1]), "E": float(best.x[2])}


def _fit_two_term(n: np.ndarray, d: np.ndarray, y: np.ndarray, cfg: ForecastConfig,
                  start: Mapping | None = None) -> dict:
    """E + A (N/N_ref)^-alpha + B (D/D_ref)^-beta by least squares on log L, from a grid of starts (or from
    `start`, a fit's raw parameters: a bootstrap draw moves the values a little and starts from the point fit)."""
    from scipy.optimize import least_squares  # 0.8 s to import: only when a law is fitted, not when one is read

    xn, xd = np.log(n / _ref(n)), np.log(d / _ref(d))
    b_lo, b_hi = cfg.exponent_bounds
    e_lo, e_hi = (f * float(y.min()) for f in cfg.floor_bounds)

    def residuals(p):  # p = (log A, alpha, log B, beta, E)
        return np.log(p[4] + np.exp(p[0] - p[1] * xn) + np.exp(p[2] - p[3] * xd)) - np.log(y)

    lo, hi = np.array([-np.inf, b_lo, -np.inf, b_lo, e_lo]), np.array([np.inf, b_hi, np.inf, b_hi, e_hi])
    if start is not None:
        starts = [[start["log_A"], start["alpha"], start["log_B"], start["beta"], start["E"]]]
    else:  # the two exponents and the floor trade off against each other: a grid, as Hoffmann et al. do
        mid = float(np.log(max(float(y.mean()) - e_lo, 1e-9) / 2))
        starts = [[mid, a0, mid, b0, e0] for a0 in np.linspace(b_lo, b_hi, 5)[1:-1]
                  for b0 in np.linspace(b_lo, b_hi, 5)[1:-1] for e0 in (e_lo, (e_lo + e_hi) / 2)]
    best = None
    for s0 in starts:
        s0 = np.clip(s0, lo + 1e-9, hi - 1e-9)
        res = least_squares(residuals, s0, bounds=(lo, hi), x_scale="jac", xtol=1e-12, ftol=1e-12, gtol=1e-12)
        if best is None or res.cost < best.cost:
            best = res
    log_a, alpha, log_b, beta, e = (float(v) for v in best.x)
    return {"log_A": log_a, "alpha": alpha, "log_B": log_b, "beta": beta, "E": e, "n_ref": _ref(n), "d_ref": _ref(d)}


# The tokens-per-parameter spread beyond which a ladder is not one line (the demo's rungs along one line differ by
# under 1%: each rounds its budget to whole steps), and the rungs two_term needs to leave a degree of freedom.
TWO_TERM_SPREAD = 1.5
TWO_TERM_MIN = 6
_NEED = {"power_law": 2, "power_law_floor": 3, "two_term": 5}  # the parameters each form fits


def _auto_form(points: Sequence[Mapping], cfg: ForecastConfig) -> str:
    """`auto`'s choice for these points (module docstring)."""
    ratios = [p["tokens"] / p["params"] for p in points if p.get("params") and p.get("tokens")]
    if len(points) >= TWO_TERM_MIN and len(ratios) == len(points) and max(ratios) > TWO_TERM_SPREAD * min(ratios):
        return "two_term"
    return "power_law_floor" if len(points) >= cfg.min_points_floor else "power_law"


def _ref(c: np.ndarray) -> float:
    # Compute in units of the ladder's geometric mean: log C stays near 0, so A and b are fitted with
    # comparable scales (raw FLOPs are 1e10..1e24 and would make log A a large offset to b's slope).
    return float(np.exp(np.mean(np.log(c))))


def law(params: Mapping, compute: float | np.ndarray, n: float | np.ndarray | None = None,
        d: float | np.ndarray | None = None) -> float | np.ndarray:
    """A fit's law at a run: L(C) = E + a * C^-b of its compute, or for two_term E + A N^-alpha + B D^-beta of its
    parameters n and tokens d."""
    if "alpha" in params:
        if n is None or d is None:
            raise ForecastError("the two_term law needs a run's parameters and tokens, not its compute alone")
        return params["E"] + params["A"] * np.power(n, -params["alpha"]) + params["B"] * np.power(d, -params["beta"])
    return params["E"] + params["a"] * np.power(compute, -params["b"])


def _at(points: Sequence[Mapping] | Mapping) -> tuple:
    """(compute, parameters, tokens) of a point, or arrays of them over a list of points, as law() takes them."""
    if isinstance(points, Mapping):
        return points["compute"], points.get("params"), points.get("tokens")
    return tuple(np.array([p.get(k) if p.get(k) is not None else np.nan for p in points], dtype=float)
                 for k in ("compute", "params", "tokens"))


def fit(points: Sequence[Mapping], cfg: ForecastConfig, what: str = "held-out loss",
        start: Mapping | None = None) -> dict:
    """Fit the configured form to points {compute, value[, params, tokens]}; returns form, parameters (and the
    raw ones, a refit's `start`) and residuals."""
    n = len(points)
    form = _auto_form(points, cfg) if cfg.form == "auto" else cfg.form
    need = _NEED[form]
    if n < need:
        raise ForecastError(f"forecast: the {form} form needs at least {need} scouts with a finite {what}, "
                            f"got {n}")
    c, pn, pd = _at(points)
    y = np.array([p["value"] for p in points], dtype=float)
    if form == "two_term":
        if np.isnan(pn).any() or np.isnan(pd).any():
            missing = [p["name"] for p in points if not (p.get("params") and p.get("tokens"))]
            raise ForecastError(f"forecast: the two_term form needs every scout's params and tokens; {missing} "
                                f"have none in their summaries")
        raw = _fit_two_term(pn, pd, y, cfg, start)
        # Back to raw units: A (N/N_ref)^-alpha = A N_ref^alpha N^-alpha, and so for B.
        params = {"E": raw["E"], "A": float(math.exp(raw["log_A"] + raw["alpha"] * math.log(raw["n_ref"]))),
                  "alpha": raw["alpha"], "B": float(math.exp(raw["log_B"] + raw["beta"] * math.log(raw["d_ref"]))),
                  "beta": raw["beta"]}
    else:
        raw = _fit_power_law(c, y, cfg) if form == "power_law" else _fit_floor(c, y, cfg)
        # Back to raw FLOPs: A (C/ref)^-b = A ref^b C^-b.
        params = {"a": float(math.exp(raw["log_A"] + raw["b"] * math.log(_ref(c)))), "b": raw["b"], "E": raw["E"]}
    fitted = law(params, c, pn, pd)
    log_res = np.log(fitted) - np.log(y)
    return {"form": form, "parameters": params,
            "residuals": [{"name": p["name"], "value": p["value"], "fitted": float(f), "log_residual": float(r)}
                          for p, f, r in zip(points, fitted, log_res)],
            "rms_log_residual": float(np.sqrt(np.mean(log_res ** 2))),
            "degrees_of_freedom": n - need, "raw": raw}


def _predict(points: Sequence[Mapping], target: Mapping, cfg: ForecastConfig, what: str) -> dict:
    """One metric's forecast at the target ({compute, params, tokens}): the fit, its prediction, the bootstrap
    interval, the back-test and the naive prediction (module docstring)."""
    result = fit(points, cfg, what)
    predicted = float(law(result["parameters"], *_at(target)))
    misfit = leave_one_out(points, cfg, result["form"], what, target)
    out = {"form": result["form"], "parameters": result["parameters"], "points": list(points),
           "residuals": result["residuals"], "rms_log_residual": result["rms_log_residual"],
           "degrees_of_freedom": result["degrees_of_freedom"], "predicted": predicted,
           "naive": points[-1]["value"], "misfit": misfit,
           "interval": _interval(points, target, cfg, result,
                                 misfit["log_sigma"] if misfit and cfg.misfit else 0.0),
           "backtest": None}
    try:  # the largest scout from the others, with the same form rule (auto counts the points left; a two-term
        rest, held = points[:-1], points[-1]  # ladder keeps its form: one rung fewer is still no compute line)
        rule = cfg.model_copy(update={"form": "two_term"}) if result["form"] == "two_term" else cfg
        back = float(law(fit(rest, rule, what)["parameters"], *_at(held)))
        naive = rest[-1]["value"]
        out["backtest"] = {"held_out": held["name"], "actual": held["value"], "predicted": back,
                           "error": held["value"] - back, "relative_error": (held["value"] - back) / held["value"],
                           "naive": naive, "naive_error": held["value"] - naive,
                           "beats_naive": abs(held["value"] - back) < abs(held["value"] - naive)}
    except ForecastError as exc:  # too few scouts to leave one out: say so rather than leave it blank
        out["backtest"] = {"held_out": points[-1]["name"], "skipped": str(exc)}
    return out


def leave_one_out(points: Sequence[Mapping], cfg: ForecastConfig, form: str, what: str, target: Mapping) -> dict | None:
    """The law's own error (module docstring, misfit): per rung, its log error when predicted from the others
    and the log-compute distance to the nearest rung kept; their RMS ratio; the σ of log loss it gives at the
    target's compute. None when leaving a rung out leaves too few to fit the form."""
    if len(points) <= _NEED[form]:
        return None
    fixed = cfg.model_copy(update={"form": form})
    rows = []
    for i, p in enumerate(points):
        rest = [q for j, q in enumerate(points) if j != i]
        predicted = float(law(fit(rest, fixed, what)["parameters"], *_at(p)))
        rows.append({"name": p["name"], "log_error": math.log(p["value"] / predicted),
                     "distance": min(_distance(p, q, form) for q in rest)})
    # A rung of the same compute as one kept (a compute law over a ladder off one line) is no distance away:
    # its error is not the law's reach, and it is left out of the rate.
    rates = [r["log_error"] / r["distance"] for r in rows if r["distance"] > 0]
    if not rates:
        return None
    per_unit = math.sqrt(sum(x * x for x in rates) / len(rates))
    if form == "two_term":  # how far the target lies from the nearest rung, in log parameters and log tokens
        reach = min(_distance(target, q, form) for q in points)
    else:  # how far past the largest rung, along the compute line
        reach = max(0.0, math.log(target["compute"] / max(p["compute"] for p in points)))
    return {"rungs": rows, "log_error_per_log_compute": per_unit, "reach": reach, "log_sigma": per_unit * reach}


def _distance(p: Mapping, q: Mapping, form: str) -> float:
    """How far apart two runs are for the law: in log compute, or for two_term in log parameters and log tokens
    (two rungs of like compute, one wide and short, one narrow and long, are far apart for it)."""
    if form == "two_term":
        return math.hypot(math.log(p["params"] / q["params"]), math.log(p["tokens"] / q["tokens"]))
    return abs(math.log(p["compute"] / q["compute"]))


def _interval(points: Sequence[Mapping], target: Mapping, cfg: ForecastConfig, result: Mapping,
              log_misfit: float = 0.0) -> list[float] | None:
    """The central cfg.interval of predictions refitted on draws of every rung's value within its noise, each
    moved by the law's misfit (a log-normal factor of σ `log_misfit`). A two-term draw starts from the point
    fit (the values move within their noise; the grid of starts would cost 18 fits a draw)."""
    sigmas = [p["sigma"] for p in points]
    if cfg.bootstrap == 0 or any(s is None for s in sigmas):
        return None
    rng = np.random.default_rng(cfg.seed)
    fixed = cfg.model_copy(update={"form": result["form"]})  # every draw fits the form the forecast took
    start = result["raw"] if result["form"] == "two_term" else None
    values = np.array([p["value"] for p in points])
    draws = []
    for _ in range(cfg.bootstrap):
        moved = np.maximum(values + rng.normal(0.0, sigmas), 1e-6 * values)
        pts = [dict(p, value=float(v)) for p, v in zip(points, moved)]
        draws.append(float(law(fit(pts, fixed, start=start)["parameters"], *_at(target)))
                     * math.exp(rng.normal(0.0, log_misfit)))
    tail = (1 - cfg.interval) / 2 * 100
    return [float(np.percentile(draws, tail)), float(np.percentile(draws, 100 - tail))]


def fit_and_predict(scouts: Sequence[Mapping], target: Mapping, form: ForecastConfig | Mapping | None = None) -> dict:
    """Fit the scouts' final held-out losses (and benchmark bits per byte) against their compute; predict both
    at the target's compute, each with its interval, back-test and naive prediction.

    scouts: run summaries (tokenmill.train summary.json, with a `name`, optionally `replicas`): flops_per_token
    (_causal), tokens, heldout_loss {bucket: loss}, benchmarks_mean.bpb, noise. target: the full run's
    flops_per_token(_causal) and tokens (target_of, or its summary). form: the `forecast` section
    (ForecastConfig or its mapping). The held-out loss's forecast is at the top level; the bits per byte's
    under `bpb` (None when the scouts scored no benchmarks).
    """
    cfg = form if isinstance(form, ForecastConfig) else parse_forecast(form)
    points, excluded = scout_points(scouts, cfg, "loss")
    compute = _compute_of(target, cfg.compute, "target")
    where = {"compute": compute, "params": target.get("params"), "tokens": target.get("tokens")}
    loss = _predict(points, where, cfg, "held-out loss")
    bpb = None
    if any((s.get("benchmarks_mean") or {}).get("bpb") is not None for s in scouts):
        bpb_points, bpb_excluded = scout_points(scouts, cfg, "bpb")
        try:
            bpb = {**_predict(bpb_points, where, cfg, "benchmark bits per byte"), "excluded": bpb_excluded}
        except ForecastError as exc:
            bpb = {"skipped": str(exc), "excluded": bpb_excluded}
    buckets = sorted({b for s in scouts if isinstance(s.get("heldout_loss"), Mapping) for b in s["heldout_loss"]})
    return {
        "config": cfg.model_dump(),
        "form": loss["form"],
        "buckets": buckets if cfg.loss == "mean" else [cfg.loss],
        "parameters": loss["parameters"],
        "points": points,
        "excluded": excluded,
        "residuals": loss["residuals"],
        "rms_log_residual": loss["rms_log_residual"],
        "degrees_of_freedom": loss["degrees_of_freedom"],
        "target": {**{k: target.get(k) for k in ("params", "matmul_params", "steps", "tokens", "flops_per_token",
                                                 "flops_per_token_causal")}, "compute": compute},
        # How far past the largest scout the law is carried: forecasts degrade with this ratio.
        "extrapolation": compute / max(p["compute"] for p in points),
        "predicted_loss": loss["predicted"],
        "interval": loss["interval"],
        "misfit": loss["misfit"],
        "naive": loss["naive"],
        "backtest": loss["backtest"],
        "bpb": bpb,
    }


def compare(prediction: Mapping, actual_summary: Mapping) -> dict:
    """The forecast against the run that followed: its loss (as the forecast measured loss) and compute."""
    cfg = ForecastConfig.model_validate(prediction["config"])
    if cfg.loss == "mean" and sorted(actual_summary.get("heldout_loss") or {}) != prediction["buckets"]:
        raise ForecastError(f"actual run: held-out buckets {sorted(actual_summary.get('heldout_loss') or {})} are "
                            f"not the scouts' {prediction['buckets']}: the mean losses are not comparable")
    actual = _loss_of(actual_summary, cfg.loss, "actual run")
    if actual is None:
        raise ForecastError("actual run: no finite held-out loss in its summary (did it finish?)")
    compute = _compute_of(actual_summary, cfg.compute, "actual run")
    predicted = float(prediction["predicted_loss"])
    # Did the run train the compute the forecast assumed? When not, the prediction at the actual compute
    # separates a wrong law from a wrong guess of the run's size.
    at_actual = float(law(prediction["parameters"], compute, actual_summary.get("params"),
                          actual_summary.get("tokens")))
    if (prediction.get("calibration") or {}).get("applied"):  # moved by its record, as the forecast was
        at_actual = prediction["predicted_loss"] if prediction["calibration"]["loss"]["predictor"] == "naive" else \
            at_actual * prediction["calibration"]["loss"]["factor"]  # the largest scout does not move with compute
    out = {
        "loss": cfg.loss,
        "predicted_loss": predicted,
        "actual_loss": actual,
        "error": actual - predicted,
        "relative_error": (actual - predicted) / actual,
        "predicted_compute": float(prediction["target"]["compute"]),
        "actual_compute": compute,
        "compute_as_predicted": math.isclose(compute, float(prediction["target"]["compute"]), rel_tol=1e-9),
        "predicted_loss_at_actual_compute": at_actual,
        **_scored(prediction.get("interval"), prediction.get("naive"), actual, predicted),
        "bpb": None,
    }
    bpb, actual_bpb = prediction.get("bpb") or {}, (actual_summary.get("benchmarks_mean") or {}).get("bpb")
    if "predicted" in bpb and isinstance(actual_bpb, (int, float)):
        out["bpb"] = {"predicted": bpb["predicted"], "actual": float(actual_bpb), "error": actual_bpb - bpb["predicted"],
                      "relative_error": (actual_bpb - bpb["predicted"]) / actual_bpb,
                      **_scored(bpb.get("interval"), bpb.get("naive"), float(actual_bpb), bpb["predicted"])}
    return out


def _scored(interval: Sequence[float] | None, naive: float | None, actual: float, predicted: float) -> dict:
    """Whether the actual value fell in the interval, and the naive predictor's error beside the forecast's."""
    return {"interval": list(interval) if interval else None,
            "within_interval": bool(interval[0] <= actual <= interval[1]) if interval else None,
            "naive": naive, "naive_error": None if naive is None else actual - naive,
            "beats_naive": None if naive is None else abs(actual - predicted) < abs(actual - naive)}


def forecast_project(params: Mapping, data_root: str | Path = "data", record_path: str | Path = RECORD) -> dict:
    """What a forecast stage runs: the scouts of params.yaml's `scouts` section (their summaries under
    data_root/train/scout/<name>), the full run of its `model` and `train` sections (vocabulary from
    data_root/tokenize, plan from data_root/mixture) and the fit of its `forecast` section (defaults when
    absent), moved by the record of earlier full runs at record_path where it applies (tokenmill.forecast.record).
    Needs no file of the full run: it is made before that run starts."""
    data_root = Path(data_root)
    missing = [k for k in ("scouts", "model", "train") if k not in params]
    if missing:
        raise ForecastError(f"forecast: params.yaml has no {', '.join(missing)} section")
    cfg = parse_forecast(params.get("forecast"))
    scouts = read_summaries({name: data_root / "train" / "scout" / name for name in params["scouts"]})
    target = project_target(params["model"], params["train"], data_root / "tokenize", data_root / "mixture")
    prediction = fit_and_predict(scouts, target, cfg)
    if not cfg.calibrate:
        return {**prediction, "law": None, "calibration": {"applied": False, "reason": "forecast.calibrate is false"}}
    if not isinstance(params.get("mixture"), Mapping):  # the recipe, to leave its own full runs out of its record
        raise ForecastError("forecast: params has no mixture section (forecast.calibrate needs the recipe)")
    return record.calibrated(prediction, record.load(record_path), record.recipe_id(params["mixture"]), record_path)


def forecast_metrics(prediction: Mapping) -> dict:
    """The DVC metric of a forecast (metrics/forecast.json): the full run's held-out loss predicted, with its
    interval, so `dvc exp show` sets experiments' forecasts side by side. The rest (the benchmarks' bits per byte,
    the naive prediction, the back-test, the fitted law) is the stage's output, data/forecast/prediction.json,
    which the report reads: a headline metric file keeps `dvc exp show` narrow. Flat, short keys: they are the
    first metric columns a mixture experiment changes, and nested (`forecast.predicted_loss_high`, 78 characters
    for the three) they left no room for the decision's σ in a 200-column table (RESULTS "`dvc exp show`")."""
    out = {"forecast_loss": round(prediction["predicted_loss"], 4)}
    if prediction.get("interval"):
        out["forecast_low"], out["forecast_high"] = (round(v, 4) for v in prediction["interval"])
    return out


def forecast_summary(prediction: Mapping) -> str:
    """One line: what the forecast says, with its interval and how its back-test did against the naive one."""
    parts = []
    for name, f in (("held-out loss", {**prediction, "predicted": prediction["predicted_loss"]}),
                    ("benchmark bpb", prediction.get("bpb"))):
        if not f or "predicted" not in f:
            continue
        text = f"{name} {f['predicted']:.3f}"
        if f.get("interval"):
            text += f" [{f['interval'][0]:.3f}, {f['interval'][1]:.3f}]"
        back = f.get("backtest") or {}
        if "predicted" in back:
            text += (f" (back-test on {back['held_out']}: {back['relative_error']:+.1%}, naive "
                     f"{back['naive_error'] / back['actual']:+.1%})")
        parts.append(text)
    line = f"the full run ({prediction['form']}): " + "; ".join(parts)
    cal = prediction.get("calibration") or {}
    if cal.get("applied"):
        line += f"; {record.describe(cal)}; the law alone {prediction['law']['predicted_loss']:.3f}"
    elif cal:
        line += f"; the law alone ({cal['reason']})"
    return line
