"""The annealing test: what a source is worth at the end of training, judged as Llama 3 judged small sets.

The full run is branched where its learning rate starts to decay (WSD's stable phase ends at the plan's decay
phase, train.schedule.decay_phase; the trainer keeps that checkpoint, train.checkpoint.keep_decay_start), and
annealed twice from it with the full run's recipe: once with the source mixed into the decay phase at a share,
once without it. Both arms start from the same state and read the same windows but for the source's, so their
difference is the source's effect; each is scored as every run is (held-out loss per bucket, the in-loop
benchmarks, each with its noise-window σ) and the verdict is compare's: a difference beyond 2 combined σ. Both
arms evaluate at the same steps, so the difference also has a paired σ (its spread over the noise window, where
the decay both arms share cancels): a difference beyond 2 paired σ but not 2 σ is said as such.

Each arm's plan is the full run's plan up to the branch (the checkpoint's past), then the decay phase planned
again at the arm's length with the arm's weights, each bucket's stream carrying on where the bulk left it
(tokenmill.mixture.build_plan): without the source, the phase's weights with its buckets removed; with it, those
scaled by 1 - share and the source's buckets given the share between them. The arm trains `steps_fraction` of the
full run's steps on it, its learning rate decaying from the full run's stable value to the floor.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Iterable, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tokenmill.evaluate.signal import combine_replicas, figure_series, lower_is_better, run_figures
from tokenmill.mixture import PLAN, Phase

ARMS = ("with", "without")
RESULT = "result.json"  # data/anneal/<name>/result.json: one test's figures and verdicts
BRANCH = "branch.json"  # beside an arm's plan: the step it branched at (the lineage's reader: lineage.tables)


class AnnealError(ValueError):
    """An annealing test that cannot be run; the message names the anneal, the parameter or the file at fault."""


def source_buckets(index: pa.Table, source: str, name: str) -> list[str]:
    """The buckets the source's tokens fill (the token index's `source` column). The arms reweight buckets, so
    a bucket another source shares would carry that source too: an error naming it."""
    mine = index.filter(pc.equal(index.column("source"), source))
    buckets = sorted(set(mine.column("bucket").to_pylist()))
    if not buckets:
        known = sorted(set(index.column("source").to_pylist()))
        raise AnnealError(f"anneals.{name}.source: {source!r} has no tokens in the token index (sources with "
                          f"tokens: {', '.join(known)})")
    others = index.filter(pc.and_(pc.is_in(index.column("bucket"), pa.array(buckets)),
                                  pc.not_equal(index.column("source"), source)))
    if others.num_rows:
        shared = sorted(set(zip(others.column("bucket").to_pylist(), others.column("source").to_pylist())))
        raise AnnealError(f"anneals.{name}.source: {source!r} shares bucket(s) "
                          f"{', '.join(f'{b} with {s}' for b, s in shared)}; give it a bucket of its own "
                          f"(sources.{source}.bucket)")
    return buckets


def arm_phases(phases: Sequence[Phase], phase: str, buckets: Sequence[str], share: float, fraction: float,
               name: str) -> dict[str, list[Phase]]:
    """The phases each arm plans. The decay phase is planned at the arm's length (`fraction` of the token budget:
    the arm reads all of it, so the share holds over every token it trains on), with its weights without the
    source's buckets, and with them at `share` (split evenly between them) and the others scaled by 1 - share.
    Every other phase as it is."""
    if phase not in [p.name for p in phases]:
        raise AnnealError(f"anneals.{name}: the plan has no phase {phase!r} (train.schedule.decay_phase) to anneal "
                          f"over; its phases: {', '.join(p.name for p in phases)}")
    out: dict[str, list[Phase]] = {arm: [] for arm in ARMS}
    for p in phases:
        if p.name != phase:
            for arm in ARMS:
                out[arm].append(p)
            continue
        rest = {b: w for b, w in p.weights.items() if b not in buckets and w > 0}
        total = sum(rest.values())
        if total <= 0:
            raise AnnealError(f"anneals.{name}: without {', '.join(buckets)} phase {phase!r} has no weight left "
                              f"to anneal on (mixture.phases.{phase}.weights)")
        without = {b: w / total for b, w in sorted(rest.items())}
        with_ = {**{b: (1 - share) * w for b, w in without.items()}, **{b: share / len(buckets) for b in buckets}}
        out["without"].append(replace(p, fraction=fraction, weights=without,
                                      min_doc_tokens={b: v for b, v in p.min_doc_tokens.items() if b in without}))
        out["with"].append(replace(p, fraction=fraction, weights=dict(sorted(with_.items()))))
    return out


def _first(plan: pa.Table, phase: str) -> int:
    hits = np.flatnonzero(np.asarray(plan.column("phase").to_pylist(), dtype=object) == phase)
    return int(hits[0]) if len(hits) else plan.num_rows


def branch(full: pa.Table, arm: pa.Table, phase: str, at_token: int, canaries: Iterable[str] = ()) -> pa.Table:
    """The arm's plan: the full run's plan up to stream token `at_token` (the first token of the branch step's
    window; the document that straddles it is cut there), then the arm's own rows of `phase` on: the arm's steps
    from the branch read only its own decay phase, and its learning rate decays from there (WSD decays over the
    plan's decay phase). The arm's plan before `phase` must place the documents the full run's does (canaries,
    planted over the whole stream, may sit elsewhere): else the buckets' streams would not carry on from the full
    run's, and that is an error."""
    full, arm = full.sort_by("position"), arm.sort_by("position")
    planted = pa.array(sorted(set(canaries)), pa.string())

    def documents(t: pa.Table) -> list[tuple]:
        t = t.filter(pc.invert(pc.is_in(t.column("doc_id"), planted)))
        return list(zip(t.column("doc_id").to_pylist(), t.column("epoch").to_pylist()))

    before = _first(full, phase)
    if documents(full.slice(0, before)) != documents(arm.slice(0, _first(arm, phase))):
        raise AnnealError(f"anneal: the plan before phase {phase!r} differs from the full run's (data/mixture): "
                          f"rebuild the mixture stage")
    starts = full.column("stream_start").to_numpy()
    if before < full.num_rows and at_token > starts[before]:
        raise AnnealError(f"anneal: the full run's decay begins at stream token {at_token:,}, inside phase {phase!r} "
                          f"(from token {int(starts[before]):,}): there is no stable phase's end to branch from")
    head = full.slice(0, int(np.searchsorted(starts, at_token, side="left")))
    if head.num_rows:  # the document that straddles the branch ends (with its end-of-text) at at_token
        last = head.num_rows - 1
        lengths = head.column("length").to_numpy().copy()
        lengths[last] = min(lengths[last], at_token - int(starts[last]) - 1)
        head = head.set_column(head.schema.get_field_index("length"), "length", pa.array(lengths, pa.int64()))
    rows = pa.concat_tables([head.select(PLAN.names), arm.slice(_first(arm, phase)).select(PLAN.names)])
    lengths = rows.column("length").to_numpy() + 1
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]) if rows.num_rows else np.zeros(0, np.int64)
    return rows.set_column(0, "position", pa.array(np.arange(rows.num_rows), pa.int64())) \
               .set_column(rows.schema.get_field_index("stream_start"), "stream_start", pa.array(starts, pa.int64()))


def arm_steps(full_steps: int, fraction: float, noise_points: int, noise_stride: int) -> int:
    """Steps each arm trains: the fraction of the full run's steps, at least the noise window's span plus one (its
    evaluations must fall inside the arm for the arm to have a σ)."""
    return max(round(fraction * full_steps), (noise_points - 1) * noise_stride + 1)


def figures(summary: Mapping) -> dict[str, tuple[float, float | None]]:
    """The figures an arm is judged on: held-out loss (mean and per bucket) and the benchmarks' means."""
    return {k: v for k, v in run_figures(summary, per_bucket=True).items()
            if k.startswith("heldout") or k.startswith("benchmarks_mean.")}


def series(run_dir: str | Path, steps: Iterable[int]) -> dict[str, dict[int, float]]:
    """Each figure's value at the given evaluation steps of a finished run, from its heldout.parquet and
    benchmarks.parquet (tokenmill.evaluate.signal.figure_series, as the run's own noise window reads them)."""
    steps = set(steps)
    held = [h for h in pq.read_table(Path(run_dir) / "heldout.parquet").to_pylist() if h["step"] in steps]
    bench = Path(run_dir) / "benchmarks.parquet"
    rows = [r for r in pq.read_table(bench).to_pylist() if r["step"] in steps] if bench.exists() else []
    return figure_series(held, rows)


def paired_sigma(with_: Sequence[Mapping[int, float]], without: Sequence[Mapping[int, float]]) -> float | None:
    """The noise of the difference with - without: over the noise window's evaluations, which both arms make at the
    same steps from the same checkpoint, the sample standard deviation of the per-step differences (pooled over the
    seeds), so the decay both arms share cancels out of it; with several seeds, the larger of that and the spread
    of the final differences over the seeds."""
    variances, finals = [], []
    for w, wo in zip(with_, without):
        common = sorted(set(w) & set(wo))
        diffs = [w[s] - wo[s] for s in common]
        if len(diffs) >= 2:
            variances.append(float(np.var(diffs, ddof=1)))
        if common:
            finals.append(diffs[-1])
    if not variances:
        return None
    sigma = math.sqrt(sum(variances) / len(variances))
    return max(sigma, float(np.std(finals, ddof=1))) if len(finals) >= 2 else sigma


def verdicts(arms: Mapping[str, Sequence[Mapping]], windows: Mapping[str, Sequence[Mapping]] | None = None) -> list[dict]:
    """One row per figure both arms have: each arm's value and σ (its seeds combined as a rung's are), the
    difference with - without, its σ (the two combined, as compare judges two runs), the paired σ (paired_sigma,
    from `windows`: each arm's seeds' series over the noise window) and the verdict: `with` or `without` when the
    better one is ahead by more than 2 σ; `with (paired)` / `without (paired)` when only by more than 2 paired σ;
    else `neither`."""
    combined = {arm: combine_replicas([figures(s) for s in arms[arm]]) for arm in ARMS}
    rows = []
    for metric in sorted(set(combined["with"]) & set(combined["without"])):
        (w, ws), (wo, wos) = combined["with"][metric], combined["without"][metric]
        sigma = math.sqrt((ws or 0.0) ** 2 + (wos or 0.0) ** 2)
        paired = paired_sigma(*([run.get(metric, {}) for run in windows[arm]] for arm in ARMS)) if windows else None
        lower = lower_is_better(metric)
        diff = w - wo
        better = "with" if (diff < 0) == lower else "without"
        verdict = "neither"
        if abs(diff) > 2 * sigma:
            verdict = better
        elif paired and abs(diff) > 2 * paired:
            verdict = f"{better} (paired)"
        rows.append({"metric": metric, "with": w, "with_sigma": ws, "without": wo, "without_sigma": wos,
                     "difference": diff, "sigma": sigma, "paired_sigma": paired, "lower_is_better": lower,
                     "verdict": verdict})
    return rows


def read_results(out_root: str | Path = "data/anneal") -> dict[str, dict]:
    """{name: result} of every annealing test under out_root (the report's and the value card's reader)."""
    root = Path(out_root)
    return {p.parent.name: json.loads(p.read_text()) for p in sorted(root.glob(f"*/{RESULT}"))} if root.is_dir() else {}
