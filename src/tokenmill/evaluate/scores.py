"""Contamination-aware scores: a benchmark's score on all its items, on its clean items, and the difference.

An item is dirty when the contamination table has a row (benchmark, item_id) with contaminated = true (the
overlap met the decontaminate stage's rule; near misses are not dirty). The table and the evaluation name
items with the same function, tokenmill.decontam.readers.item_id.

Stderr: a mean's is the sample standard deviation over sqrt(n), as lm-eval computes it (mean_stderr). The
difference all - clean equals (n_dirty / n) x (dirty - clean), a difference of two independent means over
disjoint items; its stderr is (n_dirty / n) x s x sqrt(1/n_dirty + 1/n_clean) with s the standard deviation
of all items (pooled: one dirty item has no standard deviation of its own).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Iterable, Mapping

import pyarrow as pa
import pyarrow.parquet as pq


def dirty_items(contamination: str | Path | pa.Table | Iterable[Mapping] | None) -> dict[str, set[str]]:
    """{benchmark: item_ids with a contaminating overlap} from the contamination table (a Parquet file, an
    Arrow table, rows, or None for none)."""
    if contamination is None:
        return {}
    if isinstance(contamination, (str, Path)):
        path = Path(contamination)
        if not path.exists():
            raise FileNotFoundError(f"evaluate: contamination table {path} not found")
        contamination = pq.read_table(path, columns=["benchmark", "item_id", "contaminated"])
    rows = contamination.to_pylist() if isinstance(contamination, pa.Table) else list(contamination)
    out: dict[str, set[str]] = {}
    for r in rows:
        if r["contaminated"]:
            out.setdefault(r["benchmark"], set()).add(r["item_id"])
    return out


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def _std(xs: list[float]) -> float | None:
    if len(xs) < 2:
        return None
    m = sum(xs) / len(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))


def _stderr(xs: list[float]) -> float | None:
    s = _std(xs)
    return None if s is None else s / math.sqrt(len(xs))


def split_score(values: Mapping[str, float], dirty: set[str]) -> dict:
    """{all, all_stderr, clean, clean_stderr, dirty, difference, difference_stderr} of one metric, values
    keyed by item_id. difference = all - clean: positive when the dirty items lift the score."""
    everything = list(values.values())
    clean = [v for k, v in values.items() if k not in dirty]
    soiled = [v for k, v in values.items() if k in dirty]
    out = {"all": _mean(everything), "all_stderr": _stderr(everything), "clean": _mean(clean),
           "clean_stderr": _stderr(clean), "dirty": _mean(soiled)}
    if not soiled:
        out["difference"], out["difference_stderr"] = 0.0, 0.0
    elif not clean:
        out["difference"], out["difference_stderr"] = None, None
    else:
        n, nd, nc = len(everything), len(soiled), len(clean)
        s = _std(everything) or 0.0
        out["difference"] = out["all"] - out["clean"]
        out["difference_stderr"] = (nd / n) * s * math.sqrt(1 / nd + 1 / nc)
    return {k: (None if v is None else round(v, 6)) for k, v in out.items()}


def ratio_stderr(numerators: list[float], denominators: list[float]) -> float | None:
    """Standard error of sum(numerators) / sum(denominators) over n documents (the delta method for a ratio
    estimator): bits per byte of a held-out set is the bits of all its documents over all their bytes, so a
    long document weighs more than a short one, and its spread is that of the residuals y_i - r x_i."""
    n = len(numerators)
    if n < 2:
        return None
    r = sum(numerators) / sum(denominators)
    mean_x = sum(denominators) / n
    residual = sum((y - r * x) ** 2 for y, x in zip(numerators, denominators)) / (n - 1)
    return math.sqrt(residual / n) / mean_x
