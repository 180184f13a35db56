"""The scaling forecast: a power law fitted to the scouts' final held-out losses predicts the full run's loss.

The scouts (conf/scouts) train small models with the full run's recipe on a prefix of the same plan. Each
gives one point (C, L): training compute C = flops_per_token x tokens (tokenmill.train.config.model_size,
6 x matmul parameters plus the attention term) and its final held-out loss L. Two forms are fitted:

    power_law        L = a * C^-b              a straight line in log-log space: two parameters
    power_law_floor  L = E + a * C^-b          with an irreducible loss E (Kaplan et al. 2020; Hoffmann et
                                               al. 2022 fit E + A/N^alpha + B/D^beta): three parameters

`auto` takes the floor only when there are `min_points_floor` scouts or more: three points determine three
parameters exactly, leaving nothing to check the fit against. Both are fitted by least squares on log L
(scipy.optimize.least_squares, bounded): the losses of a ladder span a small range, and log residuals
weigh every rung alike. The full run's compute comes from its configuration before it trains
(`target_of`), so the prediction is written before the run starts; `compare` scores it when it ends.

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
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from tokenmill.train.config import model_size, parse_model, parse_train


class ForecastError(ValueError):
    """A forecast that cannot be made: the message says which scout, key or file is at fault."""


class ForecastConfig(BaseModel):
    """The `forecast` section of params.yaml."""

    # strict: "0.5" is not a float, 1 is not a bool; an int is still accepted where a float is expected.
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    form: Literal["auto", "power_law", "power_law_floor"] = "auto"
    # Which held-out loss is fitted: "mean" (the unweighted mean over the buckets every scout reports) or
    # one bucket's name (e.g. "web/high").
    loss: str = "mean"
    # flops: 6 x matmul params + the full attention square; flops_causal: the attention term halved.
    compute: Literal["flops", "flops_causal"] = "flops"
    exponent_bounds: list[float] = Field(default=[0.0, 2.0], min_length=2, max_length=2)  # b
    # E, as fractions of the lowest scout loss: the floor lies below every loss the ladder reached.
    floor_bounds: list[float] = Field(default=[0.0, 0.99], min_length=2, max_length=2)
    min_points_floor: int = Field(default=4, ge=4)  # `auto` fits the floor from this many scouts up

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
    try:
        return ForecastConfig.model_validate(dict(section))
    except ValidationError as exc:
        lines = []
        for err in exc.errors():
            where = ".".join(str(p) for p in ("forecast", *err["loc"]) if p != "")
            msg = err["msg"].removeprefix("Value error, ")
            lines.append(f"{where}: {msg}" + (f" (got {err['input']!r})" if err["type"] not in
                                               ("missing", "value_error") else ""))
        raise ForecastError("; ".join(lines)) from None


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


def scout_points(scouts: Sequence[Mapping], cfg: ForecastConfig) -> tuple[list[dict], list[dict]]:
    """(points, excluded): one {name, compute, loss, params, tokens} per usable scout; a scout whose loss
    is missing or not finite (a diverged run) is excluded with its reason instead of bending the fit."""
    points, excluded = [], []
    for i, s in enumerate(scouts):
        name = str(s.get("name") or f"scout {i}")
        compute = _compute_of(s, cfg.compute, name)
        loss = _loss_of(s, cfg.loss, name)
        if loss is None:
            excluded.append({"name": name, "reason": "no_finite_heldout_loss"})
        elif loss <= 0 or compute <= 0:
            excluded.append({"name": name, "reason": "non_positive_loss_or_compute"})
        else:
            points.append({"name": name, "compute": compute, "loss": loss, "params": s.get("params"),
                           "tokens": s.get("tokens")})
    buckets = {tuple(sorted(s["heldout_loss"])) for s in scouts if isinstance(s.get("heldout_loss"), Mapping)}
    if cfg.loss == "mean" and len(buckets) > 1:
        raise ForecastError(f"the scouts report held-out losses of different buckets {sorted(buckets)}: their means "
                            f"are not comparable; set forecast.loss to one bucket")
    if len({p["compute"] for p in points}) < len(points):
        same = sorted(p["name"] for p in points if sum(q["compute"] == p["compute"] for q in points) > 1)
        raise ForecastError(f"scouts {same} have the same training compute: a ladder needs distinct rungs")
    return sorted(points, key=lambda p: p["compute"]), excluded


def target_of(model_cfg: Mapping, train_cfg: Mapping, vocab_size: int, plan_tokens: int) -> dict:
    """The full run's size, tokens and compute from its configuration, before it trains.

    The steps follow tokenmill.train.loop.plan_steps: the token budget (tokens_per_param x parameters when
    not set), no more than the plan holds, capped by max_steps; every step is seq_len x global_batch tokens.
    """
    model, train = parse_model(model_cfg), parse_train(train_cfg)
    size = model_size(model, vocab_size, train.seq_len)
    budget = train.token_budget or int(train.tokens_per_param * size["params"])
    steps = min(budget // train.tokens_per_step, max(0, (plan_tokens - 1) // train.tokens_per_step))
    if train.max_steps:
        steps = min(steps, train.max_steps)
    tokens = steps * train.tokens_per_step
    return {"params": size["params"], "matmul_params": size["matmul_params"],
            "flops_per_token": size["flops_per_token"], "flops_per_token_causal": size["flops_per_token_causal"],
            "steps": steps, "tokens": tokens}


def plan_tokens(plan_dir: str | Path) -> int:
    """Tokens in the plan's stream: every planned document and the end-of-text after it."""
    import pyarrow.parquet as pq

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
    """{name: run directory} -> their summary.json, each with its name; a missing one is an error naming it."""
    out = []
    for name, run_dir in runs.items():
        path = Path(run_dir) / "summary.json"
        if not path.exists():
            raise ForecastError(f"{name}: no {path} (the run has not finished)")
        out.append({"name": name, **json.loads(path.read_text())})
    return out


# ---------------------------------------------------------------------------------------------------------
# Fitting


def _fit_power_law(c: np.ndarray, y: np.ndarray, cfg: ForecastConfig) -> dict:
    from scipy.optimize import least_squares

    x = np.log(c / _ref(c))
    slope, intercept = np.polyfit(x, np.log(y), 1)  # the unbounded answer, as the starting point
    lo, hi = cfg.exponent_bounds
    b0 = float(np.clip(-slope, lo + 1e-9, hi - 1e-9))
    res = least_squares(lambda p: p[0] - p[1] * x - np.log(y), [intercept, b0],
                        bounds=([-np.inf, lo], [np.inf, hi]), x_scale="jac", xtol=1e-14, ftol=1e-14)
    return {"log_A": float(res.x[0]), "b": float(res.x[1]), "E": 0.0}


def _fit_floor(c: np.ndarray, y: np.ndarray, cfg: ForecastConfig) -> dict:
    from scipy.optimize import least_squares

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


def _ref(c: np.ndarray) -> float:
    # Compute in units of the ladder's geometric mean: log C stays near 0, so A and b are fitted with
    # comparable scales (raw FLOPs are 1e10..1e24 and would make log A a large offset to b's slope).
    return float(np.exp(np.mean(np.log(c))))


def law(params: Mapping, compute: float | np.ndarray) -> float | np.ndarray:
    """L(C) = E + a * C^-b of a fit's parameters."""
    return params["E"] + params["a"] * np.power(compute, -params["b"])


def fit(points: Sequence[Mapping], cfg: ForecastConfig) -> dict:
    """Fit the configured form to points {compute, loss}; returns form, parameters and residuals."""
    n = len(points)
    form = cfg.form
    if form == "auto":
        form = "power_law_floor" if n >= cfg.min_points_floor else "power_law"
    need = 2 if form == "power_law" else 3
    if n < need:
        raise ForecastError(f"forecast: the {form} form needs at least {need} scouts with a finite held-out "
                            f"loss, got {n}")
    c = np.array([p["compute"] for p in points], dtype=float)
    y = np.array([p["loss"] for p in points], dtype=float)
    raw = _fit_power_law(c, y, cfg) if form == "power_law" else _fit_floor(c, y, cfg)
    # Back to raw FLOPs: A (C/ref)^-b = A ref^b C^-b.
    params = {"a": float(math.exp(raw["log_A"] + raw["b"] * math.log(_ref(c)))), "b": raw["b"], "E": raw["E"]}
    fitted = law(params, c)
    log_res = np.log(fitted) - np.log(y)
    return {"form": form, "parameters": params,
            "residuals": [{"name": p["name"], "loss": p["loss"], "fitted": float(f), "log_residual": float(r)}
                          for p, f, r in zip(points, fitted, log_res)],
            "rms_log_residual": float(np.sqrt(np.mean(log_res ** 2))),
            "degrees_of_freedom": n - need}


def fit_and_predict(scouts: Sequence[Mapping], target: Mapping, form: ForecastConfig | Mapping | None = None) -> dict:
    """Fit the scouts' final held-out losses against their compute; predict the loss at the target's compute.

    scouts: run summaries (tokenmill.train summary.json, with a `name`): flops_per_token(_causal), tokens,
    heldout_loss {bucket: loss}. target: the full run's flops_per_token(_causal) and tokens (target_of, or
    its summary). form: the `forecast` section (ForecastConfig or its mapping).
    """
    cfg = form if isinstance(form, ForecastConfig) else parse_forecast(form)
    points, excluded = scout_points(scouts, cfg)
    result = fit(points, cfg)
    buckets = sorted({b for s in scouts if isinstance(s.get("heldout_loss"), Mapping) for b in s["heldout_loss"]})
    compute = _compute_of(target, cfg.compute, "target")
    largest = max(p["compute"] for p in points)
    return {
        "config": cfg.model_dump(),
        "form": result["form"],
        "buckets": buckets if cfg.loss == "mean" else [cfg.loss],
        "parameters": result["parameters"],
        "points": points,
        "excluded": excluded,
        "residuals": result["residuals"],
        "rms_log_residual": result["rms_log_residual"],
        "degrees_of_freedom": result["degrees_of_freedom"],
        "target": {**{k: target.get(k) for k in ("params", "matmul_params", "steps", "tokens", "flops_per_token",
                                                 "flops_per_token_causal")}, "compute": compute},
        # How far past the largest scout the law is carried: forecasts degrade with this ratio.
        "extrapolation": compute / largest,
        "predicted_loss": float(law(result["parameters"], compute)),
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
    at_actual = float(law(prediction["parameters"], compute))
    return {
        "loss": cfg.loss,
        "predicted_loss": predicted,
        "actual_loss": actual,
        "error": actual - predicted,
        "relative_error": (actual - predicted) / actual,
        "predicted_compute": float(prediction["target"]["compute"]),
        "actual_compute": compute,
        "compute_as_predicted": math.isclose(compute, float(prediction["target"]["compute"]), rel_tol=1e-9),
        "predicted_loss_at_actual_compute": at_actual,
    }


def forecast_project(params: Mapping, data_root: str | Path = "data") -> dict:
    """What a forecast stage runs: the scouts of params.yaml's `scouts` section (their summaries under
    data_root/train/scout/<name>), the full run of its `model` and `train` sections (vocabulary from
    data_root/tokenize, plan from data_root/mixture) and the fit of its `forecast` section (defaults when
    absent). Needs no file of the full run: it is made before that run starts."""
    data_root = Path(data_root)
    missing = [k for k in ("scouts", "model", "train") if k not in params]
    if missing:
        raise ForecastError(f"forecast: params.yaml has no {', '.join(missing)} section")
    cfg = parse_forecast(params.get("forecast"))
    scouts = read_summaries({name: data_root / "train" / "scout" / name for name in params["scouts"]})
    target = project_target(params["model"], params["train"], data_root / "tokenize", data_root / "mixture")
    return fit_and_predict(scouts, target, cfg)
