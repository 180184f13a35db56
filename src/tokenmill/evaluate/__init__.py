"""Evaluation: lm-eval on an exported checkpoint (run.py, tasks.py: held-out bits per byte per bucket,
benchmarks, scores on all and on clean items), and the in-loop evaluation set every training run scores
(evalset.py). This package file stays light (no lm-eval, no decontam import): the training processes import
tokenmill.evaluate.evalset, and a GPU node has neither. The evaluate section's schema: tokenmill.evaluate.params."""

from tokenmill.evaluate.scores import dirty_items, split_score

__all__ = ["dirty_items", "split_score"]
