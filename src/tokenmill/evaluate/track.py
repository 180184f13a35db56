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

TRACK_RECORD = Path("benchmarks/decision/track_record.json")


def load(project: str | Path = ".") -> dict | None:
    """The measured record in a project (None when it was never measured there)."""
    path = Path(project) / TRACK_RECORD
    return json.loads(path.read_text()) if path.exists() else None


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
