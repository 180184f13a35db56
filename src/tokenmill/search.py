"""`tokenmill search`: a mixture's weights chosen from a swarm of scout-only DVC experiments.

    1. draw     `runs` weight vectors for one phase of a mixture preset: Dirichlet around the preset's weights
                (α = concentration x weight), each within the full run's epoch caps (below). Seeded: the same
                search draws the same swarm, and a larger one starts with the same draws.
    2. run      every draw is an experiment, `dvc exp run --queue scout@<rung>` with the weights as overrides:
                only the mixture and that one rung train (one seed each); DVC's queue runs them `jobs` at a
                time, each in its own temporary copy. An experiment is named after the hash of everything it
                depends on (the stages up to the rung, the content of every file they read, the parameter
                values they declare, as its overrides compose them), so one DVC already holds is read, not run
                again, and any changed input gives new names: a swarm is
                never reused after its inputs changed (the cache bug of olmix PR 27). DVC's run cache cannot
                do this skipping itself: the scouts' outputs persist (they resume), which rules it out.
    3. fit      per held-out bucket b, log L_b = t_b . w: a log-linear law in the weights (Data Mixing Laws,
                Ye et al. 2024; Olmix fits the same form per domain), least squares over the swarm. The
                decision metric is the mean over buckets (the scouts' heldout_mean). Its leave-one-out error
                is reported beside the spread of the swarm itself: a fit that does not beat "every mixture
                scores the swarm's mean" has found nothing.
    4. propose  the weights minimising the predicted metric, each bucket's within the range the swarm
                sampled (the law is not extrapolated) and within its epoch cap, a bucket without held-out
                documents at the preset's weight (the metric cannot see it); the prediction's interval is a
                bootstrap over the swarm's runs. Written as conf/mixture/<name>.yaml (the preset with that
                phase's weights replaced) and searches/<name>.json (swarm, fit, caps, prediction).
    5. verify   the proposal and the preset itself, each a scout-only experiment trained with `verify_seeds`
                seeds (the same seeds on both sides): the proposal measured against its prediction, and its
                gain over the preset on the metric and on the in-loop benchmarks' bits per byte (the same items
                whatever the buckets: the yardstick shared by searches over sources and over topics), each
                with its σ as compare gives it and with the spread of the per-seed differences (gain()).

The epoch cap. Scouts train on a prefix of the full run's plan, so a scarce bucket repeats less in a scout
than in the full run, and a scout-optimal mixture over-weights it at scale. Every weight is therefore held to
what the full run's token budget allows: budget x (phase fraction x w_b + the other phases' share of b)
<= max_epochs_b x the bucket's available tokens (data/mixture/buckets.parquet, metrics/mixture.json).
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import pyarrow.parquet as pq
import yaml

from tokenmill.config import compose
from tokenmill.evaluate import track
from tokenmill.evaluate.compare import CompareError, _read_json, revision_fs
from tokenmill.evaluate.signal import combine_replicas, run_figures

RESULTS_DIR = Path("searches")  # committed with the preset it proposes (reports/ is the report stage's output)


class SearchError(ValueError):
    """A search that cannot be made or finished: the message names the preset, bucket or experiment."""


@dataclass
class Swarm:
    """What a search knows before it runs anything."""

    preset: str
    phase: str
    rung: str
    buckets: list[str]                 # the phase's searched buckets (weighted by the preset, in the corpus)
    prior: dict[str, float]            # the preset's weights for them, normalised
    caps: dict[str, float]             # each bucket's largest weight the full run's epoch caps allow
    fixed: dict[str, float] = field(default_factory=dict)  # the phase's other weights (absent buckets), kept
    draws: list[dict[str, float]] = field(default_factory=list)


# ---------------------------------------------------------------------------------------------------------
# 1. Draws within the epoch caps


def compose_params(repo: Path, overrides: Sequence[str]) -> dict:
    """params.yaml as `dvc exp run -S ...` would compose it (DVC's own Hydra composition), without writing it."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "params.yaml"
        compose(list(overrides), conf_dir=repo / "conf", output=out)
        return yaml.safe_load(out.read_text())


def epoch_caps(mixture: Mapping, phase: str, available: Mapping[str, int], budget: int) -> dict[str, float]:
    """Each bucket's largest weight in `phase` that keeps the full run within its max_epochs (weights of the other
    phases as the preset has them)."""
    phases = mixture["phases"]
    caps = {}
    for b, tokens in available.items():
        other = 0.0
        for name, ph in phases.items():
            total = sum(ph["weights"].values())
            if name != phase and total > 0:
                other += ph["fraction"] * ph["weights"].get(b, 0.0) / total
        max_epochs = mixture["max_epochs"].get(b, mixture["max_epochs"].get("default", 4.0))
        caps[b] = max(0.0, (max_epochs * tokens / budget - other) / phases[phase]["fraction"])
    return caps


def plan(repo: Path, preset: str, phase: str | None, rung: str, runs: int, concentration: float,
         seed: int) -> Swarm:
    """The swarm's draws for `preset`: Dirichlet around its weights of `phase` (default: the phase with the
    largest fraction), every draw within the epoch caps."""
    params = compose_params(repo, [f"mixture={preset}"])
    mixture = params["mixture"]
    if rung not in (params.get("scouts") or {}):
        raise SearchError(f"search: no scout rung {rung!r} (the ladder has {', '.join(params.get('scouts') or {}) or 'none'})")
    phases = mixture["phases"]
    phase = phase or max(phases, key=lambda p: phases[p]["fraction"])
    if phase not in phases:
        raise SearchError(f"search: mixture preset {preset!r} has no phase {phase!r} (it has {', '.join(phases)})")
    buckets_file, metrics_file = repo / "data/mixture/buckets.parquet", repo / "metrics/mixture.json"
    if not buckets_file.exists() or not metrics_file.exists():
        raise SearchError(f"search: no mixture built in {repo} (data/mixture, metrics/mixture.json): run "
                          f"`dvc repro mixture` first; the epoch caps need each bucket's available tokens")
    table = pq.read_table(buckets_file, columns=["bucket", "available_tokens"]).to_pylist()
    available = {r["bucket"]: int(r["available_tokens"]) for r in table}
    budget = int(json.loads(metrics_file.read_text())["token_budget"])
    weights = phases[phase]["weights"]
    searched = sorted(b for b, w in weights.items() if w > 0 and b in available)
    if len(searched) < 2:
        shown = ", ".join(sorted(available)[:6]) + (" ..." if len(available) > 6 else "")
        raise SearchError(f"search: phase {phase!r} of {preset!r} weights {len(searched)} bucket(s) the built mixture "
                          f"has ({shown}); a search needs two or more. A preset bucketed otherwise (its "
                          f"tokenize.buckets: {(params.get('tokenize') or {}).get('buckets')}) needs its buckets built "
                          f"first: `dvc exp run -S mixture={preset} mixture`")
    caps = {b: min(1.0, c) for b, c in epoch_caps(mixture, phase, available, budget).items() if b in searched}
    total = sum(weights[b] for b in searched)
    prior = {b: weights[b] / total for b in searched}
    over = [b for b in searched if prior[b] > caps[b]]
    if over:
        raise SearchError(f"search: the preset {preset!r} itself exceeds the epoch cap of {', '.join(over)} "
                          f"(weight {prior[over[0]]:.3f} > {caps[over[0]]:.3f} at a budget of {budget:,} tokens)")
    swarm = Swarm(preset=preset, phase=phase, rung=rung, buckets=searched, prior=prior, caps=caps,
                  fixed={b: float(w) for b, w in weights.items() if b not in searched})
    rng = np.random.default_rng(seed)
    alpha = np.array([concentration * prior[b] for b in searched])
    cap = np.array([caps[b] for b in searched])
    tries = 0
    while len(swarm.draws) < runs:
        tries += 1
        if tries > 1000 * runs:
            raise SearchError(f"search: fewer than {runs} draws within the epoch caps in {tries - 1} tries; "
                              f"raise the concentration or max_epochs")
        w = rng.dirichlet(alpha)
        w = np.round(w, 4)
        w[-1] = round(1.0 - w[:-1].sum(), 4)
        if w.min() < 0 or (w > cap).any():
            continue  # outside the caps: the full run could not plan it
        swarm.draws.append({b: float(x) for b, x in zip(searched, w)})
    return swarm


# ---------------------------------------------------------------------------------------------------------
# 2. Experiments through DVC's queue


def overrides_of(swarm: Swarm, weights: Mapping[str, float], name: str, seeds: int = 1) -> list[str]:
    """The `-S` overrides of one swarm member: the preset, its phase's weights, the rung trained `seeds` times
    (a swarm member once; the verifying pair more)."""
    inner = ",".join(f"{b}:{weights.get(b, swarm.fixed.get(b, 0.0)):g}" for b in [*swarm.buckets, *swarm.fixed])
    return [f"mixture={swarm.preset}", f"mixture.name={name}",
            f"mixture.phases.{swarm.phase}.weights={{{inner}}}", f"++scouts.{swarm.rung}.seeds={seeds}"]  # ++: the rung may not set it


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True).stdout


def pipeline_inputs(repo: Path, rung: str) -> tuple[str, list[str]]:
    """What an experiment targeting scout@<rung> runs from, as DVC sees it: every stage it reaches upstream,
    with its command and the content hash of each file or folder it depends on (DVC's own hashing of the
    workspace: code, tracked data, upstream outputs; committed or not), and the params.yaml keys they declare."""
    # DVC's repository classes: only when the pipeline's inputs are hashed
    from dvc.dependency.param import ParamsDependency
    from dvc.repo import Repo

    stages, keys = {}, set()
    with Repo(str(repo)) as dvc_repo:
        for stage in dvc_repo.stage.collect(f"{repo.resolve() / 'dvc.yaml'}:scout@{rung}", with_deps=True):
            deps = {}
            for dep in stage.deps:
                if isinstance(dep, ParamsDependency):
                    keys.update(dep.params or [])
                else:
                    deps[dep.def_path] = dep.get_hash().value if dep.exists else None  # not built yet
            stages[stage.addressing] = {"cmd": stage.cmd, "deps": deps}
    return json.dumps(stages, sort_keys=True), sorted(keys)


def _at(params: Mapping, key: str):
    node = params
    for part in key.split("."):
        node = node.get(part) if isinstance(node, Mapping) else None
    return node


def experiment_name(pipeline: str, params: Mapping, prefix: str = "swarm") -> str:
    """A swarm member's name: the hash of the pipeline it runs from and of the parameter values its stages read
    (params.yaml as its overrides compose it). Anything else (documentation, tests, another preset file in
    conf/, a stage downstream of the rung) leaves it, and so its result, as it was."""
    digest = hashlib.sha256((pipeline + json.dumps(params, sort_keys=True)).encode()).hexdigest()
    return f"{prefix}-{digest[:12]}"


def _dvc(repo: Path, *args: str) -> subprocess.CompletedProcess:
    proc = subprocess.run(["dvc", *args], cwd=repo, capture_output=True, text=True)
    if proc.returncode != 0:
        last = (proc.stderr.strip() or proc.stdout.strip()).splitlines()[-1:] or ["no output"]
        raise SearchError(f"search: `dvc {' '.join(args[:3])} ...` failed: {last[0]}")
    return proc


def held(repo: Path) -> dict[str, str]:
    """{name: commit} of every finished experiment in the repository, on any baseline (DVC keeps each as a git
    ref, refs/exps/<baseline>/<name>)."""
    out = {}
    for line in _git(repo, "for-each-ref", "--format=%(refname) %(objectname)", "refs/exps").splitlines():
        ref, sha = line.rsplit(" ", 1)
        parts = ref.split("/")
        if len(parts) >= 5:  # refs/exps/ab/cdef.../<name>; refs/exps/celery/... are the queue's own
            out[parts[-1]] = sha
    return out


def _queue_status(repo: Path) -> str:
    return subprocess.run(["dvc", "queue", "status"], cwd=repo, capture_output=True, text=True).stdout


def run_experiments(repo: Path, members: Sequence[tuple[str, list[str]]], rung: str, jobs: int,
                    log=print) -> dict[str, str]:
    """Queue the members DVC does not already hold, run the queue `jobs` at a time, and return {name: commit}."""
    have = held(repo)
    todo = [(name, overrides) for name, overrides in members if name not in have]
    if todo:
        failed_before = _queue_status(repo)
        for name, overrides in todo:
            if name in failed_before:  # an earlier failed run of the same inputs holds the name until removed
                subprocess.run(["dvc", "queue", "remove", name], cwd=repo, capture_output=True, text=True)
            args = ["exp", "run", "--queue", "-n", name]
            for o in overrides:
                args += ["-S", o]
            _dvc(repo, *args, f"scout@{rung}")
    jobs = max(1, min(jobs, len(todo)))  # a worker with nothing to run costs a DVC start-up (the verifying run: one)
    log(f"search: {len(members) - len(todo)} of {len(members)} experiments already held by DVC; "
        f"running {len(todo)} with {jobs} worker(s)")
    if todo:
        start = time.monotonic()
        # --run-all starts `jobs` workers on the queue and returns when it is empty. Its output goes nowhere, not
        # into pipes: a worker daemon inherits them, and a temporary worker that never left after an empty queue
        # (DVC's queue, treeverse/dvc#10398) held a pipe open for 37 minutes after every task had succeeded, so
        # reading the output waited on it, not on the run. Failures are read from `dvc queue logs` below.
        subprocess.run(["dvc", "exp", "run", "--run-all", "-j", str(jobs)], cwd=repo,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        no_worker = 0  # polls in a row that found work left and no worker to do it
        while any(word in (status := _queue_status(repo)) for word in ("Queued", "Running")):
            no_worker = no_worker + 1 if "Worker status: 0 active, 0 idle" in status else 0
            if no_worker == 1 and "Queued" in status:  # workers that left with tasks queued (treeverse/dvc#10562)
                subprocess.run(["dvc", "queue", "start", "-j", str(jobs)], cwd=repo, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
            if no_worker > 12:  # a minute with no worker: what did not finish is named below
                break
            time.sleep(5)  # each poll is a DVC start-up (0.7 CPU-s)
        # A worker left idle on the empty queue is stopped: with nothing queued or running, `dvc queue stop`
        # stops only idle workers.
        try:
            subprocess.run(["dvc", "queue", "stop"], cwd=repo, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           timeout=120)
        except subprocess.TimeoutExpired:
            log("search: `dvc queue stop` did not return in 120 s; a DVC queue worker may be left running")
        log(f"search: ran {len(todo)} experiments in {time.monotonic() - start:.0f} s")
        have = held(repo)
    failed = [n for n, _ in members if n not in have]
    if failed:
        reason = ""
        logs = subprocess.run(["dvc", "queue", "logs", failed[0]], cwd=repo, capture_output=True, text=True)
        lines = [ln for ln in (logs.stdout + logs.stderr).splitlines() if ln.strip()]
        if lines:
            reason = f"; {failed[0]}'s last line: {lines[-1][:300]}"
        raise SearchError(f"search: {len(failed)} experiment(s) did not finish ({', '.join(failed[:4])}"
                          f"{' ...' if len(failed) > 4 else ''}){reason}")
    return {n: have[n] for n, _ in members}


def scout_result(repo: Path, rev: str, rung: str, name: str) -> dict:
    """The rung's metrics at an experiment's revision (metrics/train/scout/<rung>.json, through DVC)."""
    try:
        data = _read_json(revision_fs(str(repo), rev, name), f"metrics/train/scout/{rung}.json", rev, name)
    except CompareError as exc:
        raise SearchError(f"search: {exc}") from None
    return data.get("scout", data)


def rung_runs(repo: Path, rev: str, rung: str, name: str) -> list[dict]:
    """The summary of each of the rung's runs at an experiment's revision, seed 0 first: the rung's, then its seed
    replicas' (data/train/scout/<rung>/replicas/seed<k>), read through one file system."""
    fs = revision_fs(str(repo), rev, name)
    root = f"data/train/scout/{rung}"
    try:
        paths = [f"{root}/summary.json"]
        if fs.exists(f"{root}/replicas"):
            paths += sorted((f"{p}/summary.json" for p in fs.ls(f"{root}/replicas", detail=False)),
                            key=lambda p: int(p.rsplit("seed", 1)[1].split("/")[0]))
        return [_read_json(fs, p, rev, name) for p in paths]
    except CompareError as exc:
        raise SearchError(f"search: {exc}") from None


def gain(preset: Sequence[Mapping], proposal: Sequence[Mapping], metric: str) -> dict:
    """preset - proposal on `metric` (positive: the proposal is better on a lower-is-better metric), each side the
    mean over its seeds, with two σ: `sigma` as compare gives it (each side's σ of one run, the larger of its seed
    spread and its checkpoint noise, tokenmill.evaluate.signal.combine_replicas, over sqrt(seeds), in quadrature)
    and `paired_sigma`, the spread over seeds of the per-seed differences (the two sides share seed k's
    initialisation and data order) over sqrt(seeds): None with one seed."""
    p, q = combine_replicas(list(preset))[metric], combine_replicas(list(proposal))[metric]
    seeds = min(len(preset), len(proposal))
    diffs = np.array([a[metric][0] - b[metric][0] for a, b in zip(preset, proposal)])
    return {"preset": p[0], "proposal": q[0], "gain": p[0] - q[0],
            "sigma": float(np.hypot(p[1] or 0.0, q[1] or 0.0) / np.sqrt(seeds)),
            "paired_sigma": float(diffs.std(ddof=1) / np.sqrt(seeds)) if seeds > 1 else None}


# ---------------------------------------------------------------------------------------------------------
# 3-4. The log-linear fit and the proposal


@dataclass
class Fit:
    """log L_b = coef[b] . w for each response b (a held-out bucket), and the mean over them."""

    buckets: list[str]                  # the weights' order
    responses: list[str]                # the held-out buckets fitted
    coef: dict[str, list[float]]

    def predict(self, w: np.ndarray) -> dict[str, float]:
        w = np.asarray(w, dtype=float)
        return {r: float(np.exp(np.asarray(self.coef[r]) @ w)) for r in self.responses}

    def metric(self, w: np.ndarray) -> float:
        values = self.predict(w)
        return float(np.mean([values[r] for r in self.responses]))


def fit(W: np.ndarray, losses: Mapping[str, np.ndarray], buckets: Sequence[str]) -> Fit:
    """Least squares of log loss on the weights, per response (no intercept: the weights sum to one, so the
    intercept is already a combination of them)."""
    coef = {}
    for r, y in losses.items():
        coef[r] = np.linalg.lstsq(W, np.log(y), rcond=None)[0].tolist()
    return Fit(buckets=list(buckets), responses=sorted(losses), coef=coef)


def metric_of(losses: Mapping[str, np.ndarray]) -> np.ndarray:
    return np.mean([losses[r] for r in sorted(losses)], axis=0)


def leave_one_out(W: np.ndarray, losses: Mapping[str, np.ndarray], buckets: Sequence[str]) -> dict:
    """The fit's error predicting each run from the others, against predicting every run by the others' mean."""
    y = metric_of(losses)
    fitted, naive = [], []
    for i in range(len(y)):
        keep = np.arange(len(y)) != i
        f = fit(W[keep], {r: v[keep] for r, v in losses.items()}, buckets)
        fitted.append(f.metric(W[i]) - y[i])
        naive.append(float(y[keep].mean()) - y[i])
    rmse = lambda e: float(np.sqrt(np.mean(np.square(e))))  # noqa: E731
    return {"rmse": rmse(fitted), "naive_rmse": rmse(naive), "beats_naive": rmse(fitted) < rmse(naive),
            "rmse_sigma": _rmse_sigma(fitted), "naive_rmse_sigma": _rmse_sigma(naive)}


def _rmse_sigma(errors: Sequence[float]) -> float:
    """The standard error of an RMSE over n runs: that of the mean squared error (its spread over sqrt(n)),
    carried through the square root (delta method: / 2 RMSE)."""
    sq = np.square(np.asarray(errors, dtype=float))
    if len(sq) < 2 or sq.mean() == 0:
        return 0.0
    return float(sq.std(ddof=1) / np.sqrt(len(sq)) / (2 * np.sqrt(sq.mean())))


def propose(f: Fit, W: np.ndarray, caps: Mapping[str, float], keep: Mapping[str, float] | None = None) -> np.ndarray:
    """The weights minimising the fitted metric on the simplex, each within the swarm's sampled range and its cap
    (SLSQP from every swarm point; the objective, a sum of exponentials of linear functions, is convex).
    keep: buckets held at a given weight (those the metric cannot see: no held-out documents)."""
    from scipy.optimize import minimize  # 0.8 s to import: only when a proposal is fitted

    lo = W.min(axis=0)
    hi = np.minimum(W.max(axis=0), [caps[b] for b in f.buckets])
    for b, w in (keep or {}).items():
        j = f.buckets.index(b)
        lo[j] = hi[j] = w
    bounds = list(zip(lo, np.maximum(lo, hi)))
    constraint = {"type": "eq", "fun": lambda w: w.sum() - 1.0}
    best = None
    for start in W:
        res = minimize(f.metric, np.clip(start, lo, hi), method="SLSQP", bounds=bounds, constraints=[constraint])
        if res.success and abs(res.x.sum() - 1) < 1e-6 and (best is None or res.fun < best.fun):
            best = res
    if best is None:
        raise SearchError("search: the proposal's optimisation found no point within the caps and the swarm's range")
    w = np.clip(np.round(best.x, 4), 0, None)
    w[int(np.argmax(w))] += round(1.0 - w.sum(), 4)  # rounded, still summing to one
    return w


def bootstrap_interval(W: np.ndarray, losses: Mapping[str, np.ndarray], buckets: Sequence[str], at: np.ndarray,
                       draws: int = 1000, level: float = 0.9, seed: int = 0) -> list[float]:
    """The fitted metric at `at` over fits to the swarm's runs resampled with replacement."""
    rng = np.random.default_rng(seed)
    values = []
    n = len(W)
    for _ in range(draws):
        i = rng.integers(0, n, size=n)
        values.append(fit(W[i], {r: v[i] for r, v in losses.items()}, buckets).metric(at))
    tail = (1 - level) / 2 * 100
    return [float(np.percentile(values, tail)), float(np.percentile(values, 100 - tail))]


# ---------------------------------------------------------------------------------------------------------
# The search, end to end


def write_preset(repo: Path, swarm: Swarm, name: str, weights: Mapping[str, float], header: Sequence[str]) -> Path:
    """conf/mixture/<name>.yaml: the preset's file with the searched phase's weights replaced."""
    text = (repo / "conf" / "mixture" / f"{swarm.preset}.yaml").read_text()
    source = yaml.safe_load(text)
    # A preset that sets more than the mixture (the topic preset's tokenize.buckets) is a `_global_` package, its
    # mixture one key of it; the proposal keeps the same form, so it composes as its preset does.
    package = "_global_" if text.startswith("# @package _global_") else "mixture"
    mixture = source["mixture"] if package == "_global_" else source
    mixture["name"] = name
    mixture["phases"][swarm.phase]["weights"] = {**{b: float(weights[b]) for b in swarm.buckets}, **swarm.fixed}
    path = repo / "conf" / "mixture" / f"{name}.yaml"
    body = yaml.safe_dump(source, sort_keys=False, default_flow_style=None)
    path.write_text(f"# @package {package}\n" + "".join(f"# {line}\n" for line in header) + body)
    return path


def search(repo: str | Path = ".", preset: str | None = None, phase: str | None = None, rung: str | None = None,
           runs: int = 12, jobs: int = 2, concentration: float = 20.0, seed: int = 0, name: str | None = None,
           verify: bool = True, verify_seeds: int = 2, log=print) -> dict:
    repo = Path(repo).resolve()
    base = compose_params(repo, [])
    preset = preset or base["mixture"]["name"]
    if not (repo / "conf" / "mixture" / f"{preset}.yaml").exists():
        raise SearchError(f"search: no mixture preset conf/mixture/{preset}.yaml")
    rung = rung or next(iter(base.get("scouts") or {}), None)
    if rung is None:
        raise SearchError("search: the configuration has no scout ladder (scouts section)")
    swarm = plan(repo, preset, phase, rung, runs, concentration, seed)
    if verify and verify_seeds < 1:
        raise SearchError(f"search: verify_seeds is {verify_seeds}; the proposal and the preset need 1 seed or more "
                          "(2 or more give the gain a σ from the seed spread)")
    if runs <= len(swarm.buckets):
        raise SearchError(f"search: {runs} runs cannot fit {len(swarm.buckets)} weights per bucket; "
                          f"use more runs than buckets ({len(swarm.buckets) + 1} or more, 2-3x that is better)")
    name = name or f"{preset}_searched"
    hydra = subprocess.run(["dvc", "config", "hydra.enabled"], cwd=repo, capture_output=True, text=True)
    if hydra.stdout.strip().lower() != "true":
        raise SearchError("search: DVC's Hydra composition is off here (`dvc config hydra.enabled true`, as this "
                          "project ships it): the swarm's overrides select a preset from conf/")
    pipeline, keys = pipeline_inputs(repo, rung)

    def member(weights: Mapping[str, float], mixture_name: str, seeds: int = 1) -> tuple[str, list[str]]:
        overrides = overrides_of(swarm, weights, mixture_name, seeds)
        params = compose_params(repo, overrides)
        return experiment_name(pipeline, {k: _at(params, k) for k in keys}), overrides

    members = [member(w, "swarm") for w in swarm.draws]
    revs = run_experiments(repo, members, rung, jobs, log)

    rows = []
    for (exp, overrides), w in zip(members, swarm.draws):
        result = scout_result(repo, revs[exp], rung, exp)
        rows.append({"experiment": exp, "rev": revs[exp], "weights": w,
                     "heldout_loss": result["heldout_loss"], "heldout_mean": result.get("heldout_mean")})
    responses = sorted(set.intersection(*(set(r["heldout_loss"]) for r in rows)))
    W = np.array([[r["weights"][b] for b in swarm.buckets] for r in rows])
    losses = {b: np.array([r["heldout_loss"][b] for r in rows], dtype=float) for b in responses}
    model = fit(W, losses, swarm.buckets)
    # A bucket without held-out documents is invisible to the metric: the law would trade it away for nothing
    # it can measure (the demo's legal went to 0), so it keeps the preset's weight.
    unseen = {b: swarm.prior[b] for b in swarm.buckets if b not in responses}
    proposal = propose(model, W, swarm.caps, keep=unseen)
    prior_w = np.array([swarm.prior[b] for b in swarm.buckets])
    out = {
        "preset": preset, "name": name, "phase": swarm.phase, "rung": rung, "runs": runs, "seed": seed,
        "concentration": concentration, "commit": _git(repo, "rev-parse", "HEAD").strip(),
        # The content address of the pipeline the experiments ran from: their names derive from it.
        "pipeline": hashlib.sha256(pipeline.encode()).hexdigest()[:16],
        "metric": "heldout_mean", "buckets": swarm.buckets, "responses": responses, "caps": swarm.caps,
        "prior": swarm.prior, "kept_at_preset": sorted(unseen), "swarm": rows, "fit": {"coef": model.coef, "loo": leave_one_out(W, losses, swarm.buckets)},
        "proposal": {b: float(x) for b, x in zip(swarm.buckets, proposal)},
        "predicted": model.metric(proposal), "predicted_buckets": model.predict(proposal),
        "interval": bootstrap_interval(W, losses, swarm.buckets, proposal, seed=seed),
        "prior_predicted": model.metric(prior_w),
        "swarm_best": min(float(np.mean([r["heldout_loss"][b] for b in responses])) for r in rows),
        # How often this rung's verdict on the metric was the full run's, where that was measured.
        "track_record": track.line(track.load(repo), rung, "heldout_mean"),
    }
    if verify:
        out["verified"] = verify_pair(repo, swarm, member, out["proposal"], name, responses, jobs, verify_seeds, log)
    lo, hi = out["interval"]
    header = [f"Proposed by `tokenmill search` from {runs} scout-only experiments ({rung}, one seed each) around "
              f"{preset}'s {swarm.phase} weights,",
              f"on commit {out['commit'][:10]} (pipeline {out['pipeline']}): "
              f"predicted held-out mean loss at {rung} {out['predicted']:.4f} (90% interval [{lo:.4f}, {hi:.4f}]),",
              f"the preset's own predicted {out['prior_predicted']:.4f}; the swarm's best measured {out['swarm_best']:.4f}."]
    if verify:
        v = out["verified"]
        header.append(f"Verified by experiment {v['experiment']} ({verify_seeds} seed(s)): measured {v['measured']:.4f}; "
                      f"gain over the preset {v['gain']['gain']:+.4f} ± {v['gain']['sigma']:.4f}.")
    header.append(f"Every figure: {RESULTS_DIR}/{name}.json. Weights are held within each bucket's epoch cap.")
    out["preset_file"] = str(write_preset(repo, swarm, name, out["proposal"], header).relative_to(repo))
    (repo / RESULTS_DIR).mkdir(parents=True, exist_ok=True)
    (repo / RESULTS_DIR / f"{name}.json").write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    return out


def verify_pair(repo: Path, swarm: Swarm, member, proposal: Mapping[str, float], name: str,
                responses: Sequence[str], jobs: int, seeds: int, log=print) -> dict:
    """The proposal and the preset, each trained at the rung with `seeds` seeds in one queue: the proposal's
    measured metric (the mean over seeds) and its gain over the preset, on the metric and on the in-loop
    benchmarks' bits per byte, each with its σ."""
    rung = swarm.rung
    pair = [member(proposal, name, seeds), member(swarm.prior, swarm.preset, seeds)]
    revs = run_experiments(repo, pair, rung, jobs, log)
    (exp, _), (base, _) = pair
    summaries = {e: rung_runs(repo, revs[e], rung, e) for e in (exp, base)}
    runs = {e: [run_figures(x) for x in summaries[e]] for e in summaries}
    # The first seed's losses per bucket, as the swarm's members have them.
    per_bucket = {e: {b: summaries[e][0]["heldout_loss"][b] for b in responses} for e in summaries}
    pooled = {e: combine_replicas(runs[e])["heldout_mean"] for e in (exp, base)}
    out = {"experiment": exp, "rev": revs[exp], "seeds": seeds,
           "measured": pooled[exp][0], "measured_sigma": pooled[exp][1], "measured_buckets": per_bucket[exp],
           "preset": {"experiment": base, "rev": revs[base], "measured": pooled[base][0],
                      "measured_sigma": pooled[base][1], "measured_buckets": per_bucket[base]},
           "gain": gain(runs[base], runs[exp], "heldout_mean")}
    bpb = "benchmarks_mean.bpb"
    if all(bpb in r for e in (exp, base) for r in runs[e]):
        out["benchmarks_bpb_gain"] = gain(runs[base], runs[exp], bpb)
    return out


def render(out: Mapping) -> str:
    loo = out["fit"]["loo"]
    lines = [f"search: {out['runs']} scouts ({out['rung']}) around {out['preset']}'s {out['phase']} weights",
             f"  fit: leave-one-out error {loo['rmse']:.4f} ± {loo.get('rmse_sigma', 0):.4f} against "
             f"{loo['naive_rmse']:.4f} ± {loo.get('naive_rmse_sigma', 0):.4f} for the swarm's mean "
             f"({'beats' if loo['beats_naive'] else 'does not beat'} it)",
             "  bucket      prior   proposal  cap"]
    for b in out["buckets"]:
        lines.append(f"  {b:<10}  {out['prior'][b]:.3f}   {out['proposal'][b]:.3f}     {out['caps'][b]:.3f}")
    lo, hi = out["interval"]
    lines.append(f"  predicted held-out mean loss {out['predicted']:.4f} [{lo:.4f}, {hi:.4f}]; the preset's "
                 f"{out['prior_predicted']:.4f}; the swarm's best measured {out['swarm_best']:.4f}")
    if "verified" in out:
        v = out["verified"]
        inside = lo <= v["measured"] <= hi
        lines.append(f"  verified ({v['seeds']} seed(s)): measured {v['measured']:.4f} "
                     f"({'inside' if inside else 'outside'} the interval); the preset {v['preset']['measured']:.4f}")
        for key, what in (("gain", "held-out mean loss"), ("benchmarks_bpb_gain", "benchmarks' bits per byte")):
            if key in v:
                g = v[key]
                paired = "" if g["paired_sigma"] is None else f", paired over seeds ± {g['paired_sigma']:.4f}"
                lines.append(f"  gain over the preset on {what}: {g['gain']:+.4f} ± {g['sigma']:.4f}{paired} "
                             "(positive: the proposal is better)")
    if out.get("track_record"):
        lines.append(f"  {out['track_record']}")
    lines.append(f"  written: {out['preset_file']} ({RESULTS_DIR}/{out['name']}.json)")
    return "\n".join(lines)
