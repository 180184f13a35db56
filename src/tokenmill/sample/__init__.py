"""The embedded default corpus: a small, deterministic crawl, code, reference and evaluation set built
from the Python installation, with planted cases whose expected fate is recorded in ground_truth.json."""

from __future__ import annotations

from typing import Any, Mapping

from tokenmill.runtime import ParamError, merge_params

from .build import build_reference, build_sample

__all__ = ["DEFAULTS", "build_reference", "build_sample", "resolve_params"]

# The parameters and their defaults: the `sample:` of conf/source/sample.yaml, the default source preset
# (tests/test_config.py keeps the two equal); conf/source/crawl.yaml sets every key for a real crawl.
DEFAULTS = {"enabled": True, "n_docs": 12000, "seed": 1234, "eval_items": 200, "planted_eval_items": 24,
            "planted_benchmark_items": 22}


def resolve_params(params: Mapping[str, Any] | None) -> dict[str, Any]:
    """params over DEFAULTS: an unknown key, a wrong type or a negative count is a ParamError naming the
    full dotted key."""
    p = merge_params("sample", DEFAULTS, params)
    for key in ("n_docs", "eval_items", "planted_eval_items", "planted_benchmark_items"):
        if p[key] < 0:
            raise ParamError(f"sample.{key}: expected a count (0 or more), got {p[key]!r}")
    # Only the embedded crawl plants items; a real crawl's run (enabled: false) ignores the count.
    if p["enabled"] and p["planted_eval_items"] > p["eval_items"]:
        raise ParamError(f"sample.planted_eval_items: expected at most sample.eval_items ({p['eval_items']}), "
                         f"got {p['planted_eval_items']!r}: planted items are some of the eval items")
    return p
