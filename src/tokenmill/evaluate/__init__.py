"""Evaluation: lm-eval on an exported checkpoint (run.py, tasks.py: held-out bits per byte per bucket,
benchmarks, scores on all and on clean items), and the in-loop evaluation set every training run scores
(evalset.py). This package file stays light (no lm-eval, no decontam import): the training processes import
tokenmill.evaluate.evalset, and a GPU node has neither."""

from typing import Any, Mapping

from tokenmill.evaluate.scores import dirty_items, split_score

from tokenmill.params import defaults, resolve

__all__ = ["DEFAULTS", "dirty_items", "resolve_params", "split_score"]

# The `evaluate` section (conf/evaluate/default.yaml; tests/test_config.py keeps the two equal).
DEFAULTS: dict[str, Any] = defaults("evaluate")


def resolve_params(params: Mapping[str, Any] | None) -> dict[str, Any]:
    return resolve("evaluate", params)
