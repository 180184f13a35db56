"""`tokenmill compare`: which experiment wins on a metric, and whether the difference is larger than the noise.

Everything is read through DVC's own API at each experiment's revision (dvc.api.exp_show to list and name
them, dvc.api.open for the files in the cache, no checkout): the evaluate stage's per-item results
(data/evaluate/samples: every benchmark item's scores, every held-out document's log-likelihood and bytes),
the full run's summary (its noise-window σ per metric), the scouts' metrics (the seed spread of the replicas)
and the mixture's metrics (tokens per bucket, documents).

For every pair of experiments the difference of a metric is judged against two kinds of noise:
  items    a paired bootstrap over the items (benchmark items, held-out documents) both experiments scored,
           resampled within each benchmark or bucket with the same draws for both: how much the difference
           depends on which items the evaluation happened to hold.
  training how far the metric moves when only the seed or the checkpoint does: per experiment the larger of the
           full run's noise-window σ and the seed spread of the largest scout trained with several seeds
           (relative to its value, carried to the full run's value; tokenmill.evaluate.signal).
           When the compared experiments hold seed replicas of a full run — experiments whose params.yaml differ
           only in train.seed and train.data_seed, the same recipe — the spread of their values is that
           recipe's training noise where it is larger: a rung's 2 seeds are one degree of freedom, and on the
           demo they gave a sixth of the σ its 6 seeds give, which is the full run's (RESULTS.md, "The full
           run's seed spread against its ladder's"). So the rung's seeds are pooled with the seed record's
           (SEED_RECORD) where it measured that rung, and the verdict says how many seeds the σ rests on.
The difference wins when it exceeds k = 2 times sqrt(σ_items² + σ_train,a² + σ_train,b²), the rule of
tokenmill.evaluate.signal.separated; otherwise the verdict is "no winner: the difference is within the noise".
The winner must be separated from every experiment of another recipe; its own seed replicas are not rivals.

Metrics (lower is better for bits per byte, higher for the rest):
  heldout_bpb             the mean over buckets of each bucket's held-out bits per byte (the decision metric
                          heldout_mean's per-document counterpart: the same tokenizer for every run)
  heldout_bpb.<bucket>    one bucket's
  benchmarks_mean.<m>     the mean over benchmarks of acc, acc_norm, prob_norm or bpb
  <benchmark>.<m>         one benchmark's
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import yaml

from tokenmill.evaluate import track
from tokenmill.evaluate.signal import combine_replicas, lower_is_better, run_figures, separated

SAMPLES = "data/evaluate/samples"
HELDOUT_PREFIX, BENCH_PREFIX = "tm_heldout_", "tm_bench_"
K_SIGMA = 2.0
# The training runs' decision metric (tokenmill.evaluate.signal.CANDIDATES) -> the per-item metric it stands for.
FROM_DECISION = {"heldout_mean": "heldout_bpb"}


class CompareError(ValueError):
    """A comparison that cannot be made: the message names the experiment, metric or file."""


@dataclass
class Experiment:
    """What one experiment's revision holds for a comparison."""

    name: str
    rev: str
    heldout: dict[str, dict[str, tuple[float, int]]] = field(default_factory=dict)  # bucket: doc_id: (ll, bytes)
    items: dict[str, dict[str, dict]] = field(default_factory=dict)  # benchmark: item_id: scores
    noise: dict[str, float] = field(default_factory=dict)  # metric: σ of the full run's noise window
    seed_noise: dict[str, float] = field(default_factory=dict)  # metric: relative seed spread of the scouts
    seed_source: tuple[str, int, int] | None = None  # the rung seed_noise comes from, its seeds, the record's seeds
    mixture: dict = field(default_factory=dict)  # metrics/mixture.json
    heldout_loss: float | None = None  # the full run's final held-out loss (mean over buckets), nats per token
    decision_metric: str | None = None
    recipe: str | None = None  # digest of params.yaml without the seeds: equal recipes are seed replicas
    replica_noise: dict[str, float] = field(default_factory=dict)  # metric: σ over the recipe's full runs (compare)
    rung_figures: dict[str, tuple[float, float | None]] = field(default_factory=dict)  # load_rung: (mean, σ of it)


SEEDS = ("seed", "data_seed")  # train.<key>: what seed replicas of one recipe differ in


def recipe_of(params: Mapping) -> str:
    """The digest of a run's parameters with train.seed and train.data_seed left out."""
    params = dict(params)
    params["train"] = {k: v for k, v in (params.get("train") or {}).items() if k not in SEEDS}
    return hashlib.sha1(json.dumps(params, sort_keys=True, default=str).encode()).hexdigest()[:12]


# ---------------------------------------------------------------------------------------------------------
# Reading experiments through DVC


def experiments(repo: str = ".") -> list[dict]:
    """[{name, rev}] of `dvc exp show`: the workspace, the baseline commit and every experiment on it."""
    import dvc.api  # DVC's API (0.5 s to import): only when experiments are read, not for a run's figures

    rows = dvc.api.exp_show(repo=repo)
    out = []
    for row in rows:
        rev = row.get("rev")
        name = row.get("Experiment") or rev
        if not rev or row.get("State") in ("Failed", "Queued", "Running"):
            continue
        out.append({"name": name, "rev": rev, "typ": row.get("typ")})
    return out


def resolve(wanted: Sequence[str], repo: str = ".") -> list[tuple[str, str]]:
    """(name, rev) for each wanted experiment name, revision or `workspace`; all of `dvc exp show` when empty."""
    known = experiments(repo)
    if not wanted:
        return [(e["name"], e["rev"]) for e in known if e["rev"] != "workspace"]
    out = []
    for w in wanted:
        match = [e for e in known if w in (e["name"], e["rev"])]
        if match:
            out.append((w, match[0]["rev"]))
        else:  # any git revision DVC can read (a branch, a tag, a commit)
            out.append((w, w))
    return out


def revision_fs(repo: str, rev: str, name: str):
    """The files of `repo` at `rev` (git-tracked and DVC-tracked alike), read without a checkout. One per
    revision: each dvc.api.open builds DVC's index of the revision again (parsing dvc.yaml and dvc.lock), and
    an experiment's ~40 files took 17 s that way against ~1 s through one file system (RESULTS "Compare")."""
    from dvc.api import DVCFileSystem  # as above

    try:
        return DVCFileSystem(repo, rev=None if rev == "workspace" else rev)
    except Exception as exc:  # DVC's own errors: an unknown revision, not a DVC repository
        raise _dvc_error(name, rev, exc) from None


def _open(fs, path: str, rev: str, name: str, mode: str = "r"):
    try:
        return fs.open(path, mode=mode)
    except Exception as exc:  # DVC raises its own errors for a missing path or cache entry
        raise CompareError(f"{name}: cannot read {path} at {rev}: {type(exc).__name__}: {exc}".split("\n")[0]) from None


def _read_json(fs, path: str, rev: str, name: str, missing_ok: bool = False):
    try:
        with _open(fs, path, rev, name) as f:
            return json.load(f)
    except CompareError:
        if missing_ok:
            return None
        raise


def _dvc_error(name: str, rev: str, exc: Exception) -> CompareError:
    """One line for DVC's error reading a revision: what is wrong and what to run.

    An evaluation DVC knows (dvc.lock names its outputs) whose files this machine's cache lacks (a fresh clone,
    a branch built elsewhere) is `DataIndexDirError: failed to load directory`; an unknown name, `RevError`."""
    kind = type(exc).__name__
    if kind == "RevError":
        return CompareError(f"{name}: no experiment, branch, tag or commit of that name here (`dvc exp show` "
                            f"lists the experiments; `dvc exp pull <remote> {name}` fetches another's)")
    if "DataIndex" not in kind:
        return CompareError(f"{name}: {kind}: {exc}".split("\n")[0])
    short = rev[:7] if len(rev) == 40 else rev
    return CompareError(f"{name}: its outputs are not in this clone's DVC cache ({type(exc).__name__}: "
                        f"{str(exc).splitlines()[0]}): fetch them with `dvc pull` (a DVC remote), or rebuild them "
                        f"with `git checkout {short} && dvc repro`, or leave {name} out by naming the experiments "
                        f"to compare")


def load(name: str, rev: str, repo: str = ".") -> Experiment:
    """One experiment's per-item results, noise and mixture at its revision."""
    exp = Experiment(name=name, rev=rev)
    fs = revision_fs(repo, rev, name)
    try:
        files = sorted(p.rsplit("/", 1)[-1] for p in fs.ls(SAMPLES, detail=False))
    except FileNotFoundError:
        raise CompareError(f"{name}: no {SAMPLES} at {rev}: the evaluate stage has not run there "
                           f"(`dvc exp run` or `dvc repro` runs it)") from None
    except Exception as exc:  # DVC's own errors
        raise _dvc_error(name, rev, exc) from None
    for file in files:
        with _open(fs, f"{SAMPLES}/{file}", rev, name) as f:
            rows = [json.loads(line) for line in f if line.strip()]
        if file.startswith(HELDOUT_PREFIX):
            for r in rows:
                exp.heldout.setdefault(r["bucket"], {})[r["doc_id"]] = (float(r["loglikelihood"]), int(r["bytes"]))
        elif file.startswith(BENCH_PREFIX):
            exp.items[file[len(BENCH_PREFIX):].removesuffix(".jsonl")] = {r["item_id"]: r for r in rows}
    summary = _read_json(fs, "data/train/pretrain/summary.json", rev, name, missing_ok=True) or {}
    exp.noise = {k: v for k, v in (summary.get("noise") or {}).items() if isinstance(v, (int, float))}
    heldout = summary.get("heldout_loss") or {}
    exp.heldout_loss = sum(heldout.values()) / len(heldout) if heldout else None
    exp.seed_noise, exp.seed_source = _seed_noise(fs, rev, name, load_seed_record(repo))
    exp.mixture = _read_json(fs, "metrics/mixture.json", rev, name, missing_ok=True) or {}
    evaluated = _read_json(fs, "metrics/evaluate.json", rev, name, missing_ok=True) or {}
    exp.decision_metric = evaluated.get("decision_metric")

    with _open(fs, "params.yaml", rev, name) as f:
        exp.recipe = recipe_of(yaml.safe_load(f) or {})
    return exp


def load_all(chosen: Sequence[tuple[str, str]], repo: str = ".",
             rung: str | None = None) -> tuple[list[Experiment], list[str]]:
    """The experiments that can be read (their full runs' evaluation, or with `rung` that scout rung's figures,
    load_rung), and one line for each that cannot (why, and what to run): a clone that ran experiments but never
    built its own commit still compares the experiments."""
    exps, unreadable = [], []
    for name, rev in chosen:
        try:
            exps.append(load_rung(name, rev, rung, repo) if rung else load(name, rev, repo))
        except CompareError as exc:
            unreadable.append(str(exc))
    return exps, unreadable


SEED_RECORD = Path("benchmarks/decision/seed_record.json")  # benchmarks/bench_seed_spread.py writes it


def load_seed_record(repo: str | Path = ".") -> dict | None:
    """The measured seed spread per rung in a project (None when it was never measured there)."""
    path = Path(repo) / SEED_RECORD
    return json.loads(path.read_text()) if path.exists() else None


def relative_seed_sigma(summaries: Sequence[Mapping]) -> dict[str, float]:
    """{metric: the sample σ over a rung's seed replicas relative to their mean} for every metric of
    tokenmill.evaluate.signal.run_figures the summaries share (the seed record holds these; compare pools them)."""
    figures = [run_figures(s) for s in summaries]
    out = {}
    for metric in sorted(set.intersection(*(set(f) for f in figures))):
        values = np.array([f[metric][0] for f in figures], dtype=float)
        if values.mean():
            out[metric] = float(values.std(ddof=1) / abs(values.mean()))
    return out


def _seed_noise(fs, rev: str, name: str, record: Mapping | None = None
                ) -> tuple[dict[str, float], tuple[str, int, int] | None]:
    """({metric: the seed σ relative to the value}, (rung, seeds, the record's seeds)) of the largest scout rung
    trained with several seeds (its summary and its replicas' under data/train/scout/<rung>, tokenmill.train.stage),
    per metric of tokenmill.evaluate.signal.run_figures: heldout_mean, benchmarks_mean.<m>, <benchmark>.<m>.
    The largest, not a pool over the rungs: on the demo the smallest rung's relative σ is a quarter of the full
    run's, the next one's equals it. Where the seed record measured that rung (the same parameter count) the
    rung's own variance is pooled with the record's, each weighted by its degrees of freedom: the demo ladder's
    2 seeds are one degree of freedom, and there its first two gave a sixth of the σ of six (RESULTS.md, "The full
    run's seed spread against its ladder's")."""
    best, best_params, source = {}, -1, None
    try:
        rungs = fs.ls("data/train/scout", detail=False)
    except FileNotFoundError:
        return {}, None
    for rung in rungs:
        summaries = _rung_summaries(fs, rung.lstrip("/"), rev, name)
        if len(summaries) < 2 or (summaries[0].get("params") or 0) <= best_params:
            continue
        label = rung.rstrip("/").rsplit("/", 1)[-1]
        measured = ((record or {}).get("rungs") or {}).get(label)
        if not measured or measured.get("params") != summaries[0].get("params"):
            measured = None  # another shape of the rung: its record is not this rung's
        best_params, best, source = summaries[0]["params"], {}, (label, len(summaries), 0)
        dof = len(summaries) - 1
        for metric, relative in relative_seed_sigma(summaries).items():
            if measured and metric in measured["relative_sigma"]:
                m = measured["seeds"] - 1
                relative = math.sqrt((dof * relative ** 2 + m * measured["relative_sigma"][metric] ** 2) / (dof + m))
                source = (label, len(summaries), measured["seeds"])
            best[metric] = relative
    return best, source


# ---------------------------------------------------------------------------------------------------------
# Metrics over items, with a paired bootstrap


def metric_names(exp: Experiment) -> list[str]:
    names = ["heldout_bpb", *(f"heldout_bpb.{b}" for b in sorted(exp.heldout))] if exp.heldout else []
    scored = sorted({m for items in exp.items.values() for r in items.values() for m in ("acc", "acc_norm", "prob_norm", "bpb")
                     if m in r})
    names += [f"benchmarks_mean.{m}" for m in scored]
    names += [f"{b}.{m}" for b in sorted(exp.items) for m in scored]
    return names


def _groups(exp: Experiment, metric: str) -> tuple[str, dict[str, dict[str, tuple]]]:
    """(kind, {group: {id: row}}) of the items a metric is computed from: held-out documents per bucket
    ('ratio', rows (loglikelihood, bytes)) or benchmark items per benchmark ('mean', rows (score,))."""
    if metric.startswith("heldout_bpb"):
        buckets = sorted(exp.heldout) if metric == "heldout_bpb" else [metric.split(".", 1)[1]]
        missing = [b for b in buckets if b not in exp.heldout]
        if missing:
            raise CompareError(f"{exp.name}: no held-out documents of bucket {missing[0]!r} (it has {sorted(exp.heldout)})")
        return "ratio", {b: exp.heldout[b] for b in buckets}
    bench, _, m = metric.rpartition(".")
    benches = [b for b in sorted(exp.items) if b != "tokenmill_heldout"] if bench == "benchmarks_mean" else [bench]
    if not benches or any(b not in exp.items for b in benches) or m not in ("acc", "acc_norm", "prob_norm", "bpb"):
        raise CompareError(f"{exp.name}: unknown metric {metric!r} (known: {', '.join(metric_names(exp))})")
    return "mean", {b: {i: (r[m],) for i, r in exp.items[b].items() if m in r} for b in benches}


def _stat(kind: str, groups: Sequence[np.ndarray]) -> np.ndarray:
    """The metric of groups of rows (each (..., n, columns)): the mean over groups of each group's mean
    (benchmarks) or bits per byte (held-out: -sum loglikelihood / sum bytes / ln 2). Leading axes (bootstrap
    draws) are kept."""
    if kind == "ratio":
        per = [-g[..., 0].sum(-1) / g[..., 1].sum(-1) / math.log(2) for g in groups]
    else:
        per = [g[..., 0].mean(-1) for g in groups]
    return np.mean(per, axis=0)


def value_of(exp: Experiment, metric: str) -> float:
    """The metric over every item the experiment scored."""
    kind, groups = _groups(exp, metric)
    return float(_stat(kind, [np.array(list(g.values()), dtype=float) for g in groups.values()]))


def training_sigma(exp: Experiment, metric: str, value: float) -> float:
    """How far the metric moves with the seed or the checkpoint alone (module docstring): the larger of the
    full run's noise-window σ and the scouts' relative seed spread, both carried to `value`."""
    source = "heldout_mean" if metric.startswith("heldout_bpb") else metric
    window = exp.noise.get(source)
    if window is not None and source == "heldout_mean":
        # The window's σ is in nats per token of the run's own held-out loss: carried to bits per byte relatively.
        window = window / exp.heldout_loss * value if exp.heldout_loss else None
    relative_seed = exp.seed_noise.get(source)
    known = [s for s in (window, None if relative_seed is None else relative_seed * value,
                         exp.replica_noise.get(metric)) if s is not None]
    return max(known) if known else 0.0


def seed_sigma_range(rung: str, seeds: int, recorded: int = 0) -> str:
    """How far a σ over `seeds` seeds (pooled with `recorded` seeds of the seed record) may be from the true one:
    its 90% interval (χ² with the degrees of freedom of both) as factors of it."""
    from scipy import stats  # only when a verdict carries it

    df = seeds - 1 + max(recorded - 1, 0)
    low, high = (math.sqrt(df / stats.chi2.ppf(q, df)) for q in (0.95, 0.05))
    pooled = f" pooled with the {recorded} of the seed record ({SEED_RECORD})" if recorded else ""
    return (f"{rung}'s {seeds} seeds{pooled}: {df} degree{'s' if df > 1 else ''} of freedom, the true σ between "
            f"{low:.1f}x and {high:.{0 if high >= 10 else 1}f}x the measured one at 90%")


def replicas(exps: Sequence[Experiment]) -> dict[str, list[str]]:
    """name: the names of the other experiments of its recipe (its seed replicas)."""
    out = {}
    for e in exps:
        out[e.name] = [o.name for o in exps if o is not e and e.recipe is not None and o.recipe == e.recipe]
    return out


def difference(a: Experiment, b: Experiment, metric: str, draws: int = 2000, seed: int = 0,
               level: float = 0.95) -> dict:
    """a - b on the items both scored: the point difference, its paired bootstrap interval and σ, the training
    noise of each, and whether the difference exceeds K_SIGMA combined σ."""
    kind, ga = _groups(a, metric)
    _, gb = _groups(b, metric)
    rows_a, rows_b = [], []
    for group in ga:
        ids = sorted(set(ga[group]) & set(gb.get(group, {})))
        if not ids:
            raise CompareError(f"{a.name} and {b.name} share no item of {group!r} for {metric}: their evaluations "
                               f"held different items (another mixture seed or evaluate.limit)")
        rows_a.append(np.array([ga[group][i] for i in ids], dtype=float))
        rows_b.append(np.array([gb[group][i] for i in ids], dtype=float))
    # One set of draws for both experiments (paired), within each group (stratified).
    rng = np.random.default_rng(seed)
    idx = [rng.integers(0, len(r), size=(draws, len(r))) for r in rows_a]
    diff_draws = _stat(kind, [r[i] for r, i in zip(rows_a, idx)]) - _stat(kind, [r[i] for r, i in zip(rows_b, idx)])
    value_a, value_b = float(_stat(kind, rows_a)), float(_stat(kind, rows_b))
    tail = (1 - level) / 2 * 100
    sigma_items = float(np.std(diff_draws, ddof=1))
    sa, sb = training_sigma(a, metric, value_a), training_sigma(b, metric, value_b)
    sigma = math.sqrt(sigma_items ** 2 + sa ** 2 + sb ** 2)
    return {"metric": metric, "a": a.name, "b": b.name, "value_a": value_a, "value_b": value_b,
            "difference": value_a - value_b,
            "interval": [float(np.percentile(diff_draws, tail)), float(np.percentile(diff_draws, 100 - tail))],
            "sigma_items": sigma_items, "sigma_training_a": sa, "sigma_training_b": sb, "sigma": sigma,
            "items": int(sum(len(r) for r in rows_a)), "separated": abs(value_a - value_b) > K_SIGMA * sigma}


def compare(exps: Sequence[Experiment], metric: str) -> dict:
    """Rank the experiments on a metric and judge the best against every other: a winner only when it is
    separated from each of them (`difference`)."""
    if len(exps) < 2:
        raise CompareError(f"compare needs two experiments or more, got {len(exps)}")
    lower = lower_is_better(metric)
    values = {e.name: value_of(e, metric) for e in exps}
    twins = replicas(exps)
    for e in exps:  # a recipe trained with several seeds: the spread of its full runs
        if twins[e.name]:
            e.replica_noise[metric] = float(np.std([values[n] for n in (e.name, *twins[e.name])], ddof=1))
    ranked = sorted(exps, key=lambda e: values[e.name] * (1 if lower else -1))
    best = ranked[0]
    pairs = [difference(best, other, metric) for other in ranked[1:]]
    for p in pairs:
        p["replicas"] = p["b"] in twins[best.name]
    rivals = [p for p in pairs if not p["replicas"]]
    winner = best.name if rivals and all(p["separated"] for p in rivals) else None
    close = [p["b"] for p in pairs if not p["separated"]]
    mates = f" (its seed replicas: {', '.join(twins[best.name])})" if twins[best.name] else ""
    verdict = (f"{best.name} wins on {metric}{mates}" if winner else
               f"no winner: the difference is within the noise ({best.name} vs {', '.join(close)})")
    unseeded = [e.name for e in exps if not e.seed_noise and not e.replica_noise]
    single = [e.name for e in exps if e.seed_noise and not e.replica_noise]
    if single:
        # The scouts' seed spread carried to the full run. On the demo the rung below it moves as much (relative
        # σ 0.93% over 6 seeds, the full run 1.0% over 3), but a rung's 2 seeds are one degree of freedom: their
        # σ was a sixth of that (RESULTS.md, "The full run's seed spread against its ladder's").
        sources = sorted({e.seed_source for e in exps if e.name in single and e.seed_source})
        verdict += (f" — no full-run seed replica for {', '.join(single)} (the same parameters with train.seed and "
                    f"train.data_seed changed): its training noise is carried from its scouts "
                    f"({'; '.join(seed_sigma_range(*s) for s in sources)})")
    if unseeded:
        # Without seed replicas the training noise is the checkpoint noise alone, which can be far smaller
        # than a second seed's move (RESULTS.md, "Compare": seed pairs of the e2e build moved the held-out code
        # bits per byte by 0.035, the checkpoints' σ there is 0.007-0.04).
        verdict += (f" — no seed spread measured for {', '.join(unseeded)} (train a scout rung with seeds: 2 or "
                    f"more): the noise above is that of the items and the checkpoints only")
    return {"metric": metric, "lower_is_better": lower,
            "ranking": [{"name": e.name, "rev": e.rev, "value": values[e.name],
                         "sigma_training": training_sigma(e, metric, values[e.name]),
                         "replicas": twins[e.name]} for e in ranked],
            "pairs": pairs, "winner": winner, "verdict": verdict}


# ---------------------------------------------------------------------------------------------------------
# A verdict made at a scout rung (experiments that trained only the ladder: a search's swarm, a quick check)

RUNG_METRICS = ("heldout_mean", "benchmarks_mean.bpb", "benchmarks_mean.prob_norm", "benchmarks_mean.acc",
                "benchmarks_mean.acc_norm")


def load_rung(name: str, rev: str, rung: str, repo: str = ".") -> Experiment:
    """One experiment's figures at a scout rung: {metric: (the mean over the rung's seed replicas, the σ of that
    mean)} in `rung_figures`, from the rung's summary and its replicas' (data/train/scout/<rung>, through DVC),
    combined as the ladder combines them (tokenmill.evaluate.signal.combine_replicas: per run the larger of the
    seed spread and the checkpoint σ; over √seeds for their mean); and the mixture's metrics."""
    exp = Experiment(name=name, rev=rev)
    root, fs = f"data/train/scout/{rung}", revision_fs(repo, rev, name)
    runs = _rung_summaries(fs, root, rev, name)
    if not runs:
        raise CompareError(f"{name}: no scout {rung} at {rev} ({root}/summary.json): the rung has not trained there "
                           f"(`dvc exp run scout@{rung}` trains it)")
    combined = combine_replicas([run_figures(s) for s in runs])
    exp.rung_figures = {m: (v, None if sd is None else sd / math.sqrt(len(runs))) for m, (v, sd) in combined.items()}
    exp.mixture = _read_json(fs, "metrics/mixture.json", rev, name, missing_ok=True) or {}
    return exp


def _rung_summaries(fs, root: str, rev: str, name: str) -> list[dict]:
    """The summaries of a scout rung's runs at a revision: the rung's own first (none when it has not trained),
    then its seed replicas' (root/replicas/*, tokenmill.train.stage)."""
    first = _read_json(fs, f"{root}/summary.json", rev, name, missing_ok=True)
    if first is None:
        return []
    try:
        replicas = sorted(r.lstrip("/") for r in fs.ls(f"{root}/replicas", detail=False))
    except FileNotFoundError:
        replicas = []
    except Exception as exc:  # DVC's own errors (outputs not in this clone's cache)
        raise _dvc_error(name, rev, exc) from None
    return [first, *(s for r in replicas if (s := _read_json(fs, f"{r}/summary.json", rev, name, missing_ok=True)))]


def compare_rung(exps: Sequence[Experiment], rung: str, metric: str, record: Mapping | None = None) -> dict:
    """Rank the experiments on a metric as one scout rung measured it; the best wins when it is separated from
    every other by more than K_SIGMA combined σ of the rung's means (tokenmill.evaluate.signal.separated). The
    verdict carries the rung's track record on that metric (tokenmill.evaluate.track)."""
    if metric not in RUNG_METRICS:
        raise CompareError(f"--rung compares {', '.join(RUNG_METRICS)}; got {metric!r}")
    if len(exps) < 2:
        raise CompareError(f"compare needs two experiments or more, got {len(exps)}")
    missing = [e.name for e in exps if metric not in e.rung_figures]
    if missing:
        raise CompareError(f"{', '.join(missing)}: scout {rung} has no {metric} (its runs scored no benchmarks?)")
    lower = lower_is_better(metric)
    ranked = sorted(exps, key=lambda e: e.rung_figures[metric][0] * (1 if lower else -1))
    best, pairs = ranked[0], []
    for other in ranked[1:]:
        (va, sa), (vb, sb) = best.rung_figures[metric], other.rung_figures[metric]
        sa, sb = sa or 0.0, sb or 0.0
        sigma = math.hypot(sa, sb)
        pairs.append({"metric": metric, "a": best.name, "b": other.name, "value_a": va, "value_b": vb,
                      "difference": va - vb, "interval": [va - vb - 1.96 * sigma, va - vb + 1.96 * sigma],
                      "sigma_items": 0.0, "sigma_training_a": sa, "sigma_training_b": sb, "sigma": sigma,
                      "items": 0, "separated": separated((va, sa), (vb, sb), K_SIGMA), "replicas": False})
    winner = best.name if all(p["separated"] for p in pairs) else None
    close = [p["b"] for p in pairs if not p["separated"]]
    verdict = (f"{best.name} wins on {metric} at scout {rung}" if winner else
               f"no winner at scout {rung}: the difference is within the noise ({best.name} vs {', '.join(close)})")
    return {"metric": metric, "rung": rung, "lower_is_better": lower,
            "ranking": [{"name": e.name, "rev": e.rev, "value": e.rung_figures[metric][0],
                         "sigma_training": e.rung_figures[metric][1] or 0.0, "replicas": []} for e in ranked],
            "pairs": pairs, "winner": winner, "verdict": verdict, "track_record": track.line(record, rung, metric)}


def data_differences(exps: Sequence[Experiment]) -> list[dict]:
    """Per experiment: planned tokens per bucket, unique documents and held-out documents (metrics/mixture.json)."""
    return [{"name": e.name, "planned": e.mixture.get("planned") or {},
             "unique_documents": e.mixture.get("unique_documents"),
             "heldout_documents": e.mixture.get("heldout_documents")} for e in exps]


def _sigmas(p: Mapping) -> str:
    """How many σ apart a pair is; with no noise at all (identical items and no training noise: the same outputs
    twice) the count is undefined, not infinite."""
    if p["sigma"] > 0:
        return f"{abs(p['difference']) / p['sigma']:.1f} σ"
    return "identical" if p["difference"] == 0 else "no noise measured"


def render(result: Mapping, data: Sequence[Mapping]) -> str:
    """The comparison as text: the ranking with σ, each pair's difference and interval, the verdict, the data."""
    m = result["metric"]
    lines = [f"{m} ({'lower' if result['lower_is_better'] else 'higher'} is better)", ""]
    width = max(len(r["name"]) for r in result["ranking"])
    for r in result["ranking"]:
        mates = f"; seed replicas: {', '.join(r['replicas'])}" if r.get("replicas") else ""
        lines.append(f"  {r['name']:<{width}}  {r['value']:.4f}  (training noise σ {r['sigma_training']:.4f}{mates})")
    lines.append("")
    for p in result["pairs"]:
        lo, hi = p["interval"]
        if "rung" in result:  # a scout rung's means: their σ is the seeds' and the checkpoints', no items
            lines.append(f"  {p['a']} - {p['b']}: {p['difference']:+.4f}, σ {p['sigma_training_a']:.4f} / "
                         f"{p['sigma_training_b']:.4f} (the rung's seeds and checkpoints): {_sigmas(p)} "
                         f"({'separated' if p['separated'] else 'within the noise'})")
            continue
        lines.append(f"  {p['a']} - {p['b']}: {p['difference']:+.4f}, 95% interval over {p['items']} items "
                     f"[{lo:+.4f}, {hi:+.4f}]; σ items {p['sigma_items']:.4f}, training {p['sigma_training_a']:.4f} "
                     f"/ {p['sigma_training_b']:.4f}: {_sigmas(p)} "
                     f"({'separated' if p['separated'] else 'within the noise'}"
                     f"{', seed replicas of one recipe' if p.get('replicas') else ''})")
    lines += ["", result["verdict"], *([result["track_record"]] if result.get("track_record") else []), ""]
    buckets = sorted({b for d in data for b in d["planned"]})
    if buckets:
        lines.append("data: " + "  ".join(["documents", "held out", *(f"{b} tokens" for b in buckets)]))
        for d in data:
            lines.append(f"  {d['name']:<{width}}  {d['unique_documents']}  {d['heldout_documents']}  " +
                         "  ".join(str(d["planned"].get(b, 0)) for b in buckets))
    return "\n".join(lines)
