"""Which metric to trust: signal, noise and their ratio over a ladder of runs ("Signal and Noise", 2025).

Every training run records, per metric, its final value and its noise: the standard deviation over the
evaluations of its noise window (tokenmill.train.loop.noise_window) and, for a scout rung trained with
several seeds, the standard deviation over the replicas' final values. Over the ladder (the scouts and the
full run):
  signal  the spread of the runs' final values (largest minus smallest): how far apart the metric puts models
          that differ by design (size, tokens)
  noise   the root mean square of the runs' σ: how far it moves when nothing but the checkpoint or the seed
          does
  snr     signal / noise. A metric with a higher SNR ranks models correctly more often (the paper's finding);
          the table shows it for every candidate (tokenmill.evaluate.track.decision_metric picks the one
          decisions rest on, from the measured track record).
  order   Kendall's tau between the runs' order by training compute and their order by the metric (better
          last): 1 when every larger run scores better. A metric can be far from its noise and still rank
          the ladder wrongly; the table shows both.
Two runs are told apart when their difference exceeds 2 sqrt(σa² + σb²).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Iterable, Mapping

import numpy as np

# The metrics a decision can rest on: the held-out loss (mean over buckets) and the in-loop benchmark means.
CANDIDATES = ("heldout_mean", "benchmarks_mean.bpb", "benchmarks_mean.prob_norm", "benchmarks_mean.acc_norm",
              "benchmarks_mean.acc")


def lower_is_better(metric: str) -> bool:
    """Losses and bits per byte are better lower: every held-out figure (heldout_mean, heldout.<bucket>,
    heldout_bpb.<bucket>) and a benchmark's bpb on all or clean items (arc_easy.bpb, benchmarks_mean.bpb_clean);
    accuracies and probabilities are better higher."""
    return metric.startswith("heldout") or metric.rsplit(".", 1)[-1].startswith("bpb")


def figure_series(heldout: Iterable[Mapping], bench: Iterable[Mapping]) -> dict[str, dict[int, float]]:
    """Each figure's value at each evaluation step of a run, from its held-out rows ({step, bucket, loss}) and
    in-loop benchmark rows ({step, benchmark, metric, all, ...}): heldout.<bucket>, heldout_mean (over the
    buckets), benchmarks_mean.<metric> (benchmark_means, on all and clean items) and <benchmark>.<metric> (on
    all items). The run's noise window (tokenmill.train.loop) and the anneal's paired σ read them."""
    from tokenmill.evaluate.evalset import benchmark_means  # pyarrow: not for the readers of a ladder's figures

    series: dict[str, dict[int, float]] = {}
    by_bucket: dict[int, list[float]] = {}
    for h in heldout:
        by_bucket.setdefault(h["step"], []).append(h["loss"])
        series.setdefault(f"heldout.{h['bucket']}", {})[h["step"]] = h["loss"]
    for step, losses in by_bucket.items():
        series.setdefault("heldout_mean", {})[step] = float(np.mean(losses))
    by_step: dict[int, dict] = {}
    for r in bench:
        by_step.setdefault(r["step"], {}).setdefault(r["benchmark"], {})[r["metric"]] = r
    for step, scores in by_step.items():
        for name, value in benchmark_means(scores).items():
            if not name.endswith("_stderr"):
                series.setdefault(f"benchmarks_mean.{name}", {})[step] = value
        for name, metrics in scores.items():
            for metric, r in metrics.items():
                if r["all"] is not None:
                    series.setdefault(f"{name}.{metric}", {})[step] = r["all"]
    return series


def run_figures(summary: Mapping, per_bucket: bool = False) -> dict[str, tuple[float, float | None]]:
    """{metric: (final value, σ over the noise window)} of one run's summary (tokenmill.train.loop). per_bucket:
    also each bucket's held-out loss as heldout.<bucket> (the mixture's questions are per bucket)."""
    noise = summary.get("noise") or {}
    out: dict[str, tuple[float, float | None]] = {}
    heldout = summary.get("heldout_loss") or {}
    if heldout:
        out["heldout_mean"] = (sum(heldout.values()) / len(heldout), noise.get("heldout_mean"))
    if per_bucket:
        out.update({f"heldout.{b}": (loss, noise.get(f"heldout.{b}")) for b, loss in sorted(heldout.items())})
    for name, value in (summary.get("benchmarks_mean") or {}).items():
        if not name.endswith("_stderr"):
            out[f"benchmarks_mean.{name}"] = (value, noise.get(f"benchmarks_mean.{name}"))
    for bench, metrics in (summary.get("benchmarks") or {}).items():
        for metric, s in metrics.items():
            if s.get("all") is not None:
                out[f"{bench}.{metric}"] = (s["all"], noise.get(f"{bench}.{metric}"))
    return out


def combine_replicas(replicas: list[dict[str, tuple[float, float | None]]]) -> dict[str, tuple[float, float | None]]:
    """One rung trained with several seeds: the mean of the replicas' values, and a σ that pools the
    checkpoint noise with the spread over seeds (the larger of the two per metric, so a single seed's
    window never hides the seed variance)."""
    if len(replicas) == 1:
        return dict(replicas[0])
    out = {}
    for metric in set.intersection(*(set(r) for r in replicas)):
        values = [r[metric][0] for r in replicas]
        mean = sum(values) / len(values)
        seed_sigma = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
        window = [r[metric][1] for r in replicas if r[metric][1] is not None]
        checkpoint_sigma = math.sqrt(sum(s * s for s in window) / len(window)) if window else 0.0
        out[metric] = (mean, max(seed_sigma, checkpoint_sigma))
    return out


def ladder_table(runs: Mapping[str, Mapping[str, tuple[float, float | None]]],
                 metrics: Iterable[str] | None = None) -> list[dict]:
    """One row per metric present in every run: each run's value and σ, signal, noise, snr (module docstring)."""
    if not runs:
        return []
    common = set.intersection(*(set(r) for r in runs.values()))
    names = [m for m in (metrics if metrics is not None else sorted(common)) if m in common]
    rows = []
    for metric in names:
        values = {run: figures[metric][0] for run, figures in runs.items()}
        sigmas = [figures[metric][1] for figures in runs.values() if figures[metric][1] is not None]
        signal = max(values.values()) - min(values.values())
        noise = math.sqrt(sum(s * s for s in sigmas) / len(sigmas)) if sigmas else None
        lower = lower_is_better(metric)
        rows.append({"metric": metric, "values": values,
                     "sigmas": {run: figures[metric][1] for run, figures in runs.items()},
                     "signal": signal, "noise": noise,
                     "snr": signal / noise if noise else None,
                     "order": _kendall([-v if lower else v for v in values.values()]),
                     "lower_is_better": lower})
    return rows


def _kendall(scores: list[float]) -> float | None:
    """Kendall's tau between positions 0..n-1 (runs by compute) and the scores (higher is better)."""
    pairs = [(i, j) for i in range(len(scores)) for j in range(i + 1, len(scores))]
    if not pairs:
        return None
    sign = [(scores[j] > scores[i]) - (scores[j] < scores[i]) for i, j in pairs]
    return sum(sign) / len(pairs)


def separated(a: tuple[float, float | None], b: tuple[float, float | None], k: float = 2.0) -> bool:
    """Whether two runs' values differ by more than k combined σ."""
    sigma = math.sqrt((a[1] or 0.0) ** 2 + (b[1] or 0.0) ** 2)
    return abs(a[0] - b[0]) > k * sigma


def read_ladder(train_root: str | Path) -> dict[str, dict[str, tuple[float, float | None]]]:
    """{run: figures} of the finished runs under data/train, in order of training compute: scout/<rung>
    (with its seed replicas, scout/<rung>/replicas/seed<k>, combined) and pretrain."""
    train_root = Path(train_root)
    found = []
    for summary in sorted(train_root.glob("scout/*/summary.json")):
        replicas = sorted(summary.parent.glob("replicas/*/summary.json"))
        first = json.loads(summary.read_text())
        found.append((first.get("total_flops") or 0, f"scout/{summary.parent.name}", combine_replicas(
            [run_figures(json.loads(p.read_text())) for p in (summary, *replicas)])))
    full = train_root / "pretrain" / "summary.json"
    if full.exists():
        s = json.loads(full.read_text())
        found.append((s.get("total_flops") or 0, "pretrain", run_figures(s)))
    return {name: figures for _, name, figures in sorted(found, key=lambda f: f[0])}
