"""A scout verdict's track record: how often a rung's ranking on a metric was the full run's ranking.

benchmarks/bench_decision_accuracy.py measures it (RESULTS.md, "Decision accuracy: scouts against the full
run"): mixture recipes trained with the scout ladder and with the full run at two seeds; over the recipe pairs
whose full runs differ beyond their noise, the pairs each rung orders as the full run does. It writes the
counts to TRACK_RECORD, committed with the project; `tokenmill compare --rung`, the decision page and
`tokenmill search` print the line for the rung and metric their verdict rests on. The record is a measurement
on the data it was made with (the demo, unless rerun on yours): it says how far a scout verdict has been
trusted to hold, not that it holds for another corpus.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Mapping

from tokenmill.evaluate.signal import CANDIDATES

TRACK_RECORD = Path("benchmarks/decision/track_record.json")


def load(project: str | Path = ".") -> dict | None:
    """The measured record in a project (None when it was never measured there)."""
    path = Path(project) / TRACK_RECORD
    return json.loads(path.read_text()) if path.exists() else None


def decision_metric(record: Mapping | None) -> str:
    """The metric decisions rest on: of the candidates (signal.CANDIDATES) the record measured, the one whose
    rungs ordered the separated recipe pairs as the full run did most often, pooled over the rungs (more
    separated pairs, then the candidates' order, break a tie); how often a verdict holds at scale is what a
    decision needs. Without a measured candidate, the mean held-out loss: the objective the mixture search
    optimizes, recorded by every run.
    It depends on the record alone, never on the ladder at hand, so the baseline and every experiment of it
    decide on one metric and `dvc exp show`'s decision column holds one scale. Chosen per ladder (the highest
    SNR among the candidates that rank it by compute), the demo's balanced experiment decided on heldout_mean
    (5.63) beside its baseline's benchmarks_mean.bpb (3.43). A ladder that ranks the chosen metric backwards is
    named by the evaluate stage, not a reason to switch."""
    measured = []
    for rank, metric in enumerate(CANDIDATES):
        counts = [rung[metric] for rung in ((record or {}).get("rungs") or {}).values() if metric in rung]
        separated_pairs = sum(c["separated"] for c in counts)
        if separated_pairs:
            measured.append((sum(c["agreed"] for c in counts) / separated_pairs, separated_pairs, -rank, metric))
    return max(measured)[3] if measured else "heldout_mean"


def caveat(metric: str, ladder: Mapping[str, Mapping]) -> str | None:
    """What this ladder ({metric: its signal, noise, snr, order}) says against deciding on the metric, or None:
    not every run records it (the headline's decision is empty), or it does not rank the runs by compute."""
    if metric not in ladder:
        return f"not every run of the ladder records the decision metric {metric}: the headline's decision is empty"
    order = ladder[metric]["order"]
    if order is not None and order <= 0:
        return (f"this ladder does not rank {metric} by compute (Kendall's tau {order}): read the scouts' verdicts "
                "on it with care")
    return None


def line(record: Mapping | None, rung: str, metric: str) -> str:
    """One sentence: the rung's agreement with the full run on the metric, with what it was measured on."""
    if record is None:
        return (f"track record: none measured for {rung} on {metric} (python benchmarks/bench_decision_accuracy.py "
                f"writes {TRACK_RECORD})")
    entry = (record.get("rungs") or {}).get(rung, {}).get(metric)
    where = (f"{len(record['recipes'])} recipes of {record['measured_on']}, full runs at {record['full_run_seeds']} "
             f"seeds; {TRACK_RECORD}")
    if entry is None:
        return f"track record: {rung} on {metric} was not measured ({where})"
    if not entry["separated"]:
        return (f"track record: {rung} on {metric} — no recipe pair of {entry['pairs']} differed beyond the full "
                f"run's noise, so its agreement is unmeasured; it ordered {entry['agreed_all_pairs']} of "
                f"{entry['pairs']} pairs as the full run's means ({where})")
    return (f"track record: {rung} on {metric} ranked {entry['agreed']} of {entry['separated']} recipe pairs as the "
            f"full run did (pairs separated beyond the full run's noise; {entry['agreed_all_pairs']} of "
            f"{entry['pairs']} pairs in all), at {entry['compute_fraction']:.1%} of the full run's compute ({where})")
