"""Evaluation of an exported checkpoint with lm-eval: held-out perplexity per bucket, benchmarks, and scores on
all and on clean (uncontaminated) items."""

from tokenmill.evaluate.run import heldout_documents, run_evaluation
from tokenmill.evaluate.scores import dirty_items, split_score
from tokenmill.evaluate.tasks import BenchmarkError, load_benchmark

__all__ = ["BenchmarkError", "dirty_items", "heldout_documents", "load_benchmark", "run_evaluation", "split_score"]
