"""Evaluation: lm-eval on an exported checkpoint (run.py, tasks.py: held-out bits per byte per bucket,
benchmarks, scores on all and on clean items), and the in-loop evaluation set every training run scores
(evalset.py). This package file stays light (no lm-eval, no decontam import): the training processes import
tokenmill.evaluate.evalset, and a GPU node has neither."""

from typing import Any, Mapping

from tokenmill.evaluate.scores import dirty_items, split_score
from tokenmill.runtime import ParamError, merge_params

__all__ = ["DEFAULTS", "dirty_items", "resolve_params", "split_score"]

# The `evaluate` section (conf/evaluate/default.yaml; tests/test_config.py keeps the two equal).
DEFAULTS: dict[str, Any] = {"limit": 100, "heldout_limit": 64, "batch_size": 16, "device": "cpu",
                            "dtype": "float32", "inloop_items": 24}


def resolve_params(params: Mapping[str, Any] | None) -> dict[str, Any]:
    p = merge_params("evaluate", DEFAULTS, params, types={"limit": int, "heldout_limit": int})
    for key in ("limit", "heldout_limit"):
        if p[key] is not None and p[key] < 1:
            raise ParamError(f"evaluate.{key}: expected a positive count or null, got {p[key]!r}")
    if p["batch_size"] < 1:
        raise ParamError(f"evaluate.batch_size: expected a positive count, got {p['batch_size']!r}")
    if p["inloop_items"] < 0:
        raise ParamError(f"evaluate.inloop_items: expected a count (0: no in-loop benchmarks), got {p['inloop_items']!r}")
    if p["device"] not in ("cpu", "cuda") or p["dtype"] not in ("float32", "bfloat16", "float16"):
        bad = "device" if p["device"] not in ("cpu", "cuda") else "dtype"
        raise ParamError(f"evaluate.{bad}: expected one of {'cpu, cuda' if bad == 'device' else 'float32, bfloat16, float16'}, "
                         f"got {p[bad]!r}")
    return p
