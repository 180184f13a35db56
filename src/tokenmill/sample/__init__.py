"""The embedded default corpus: a small, deterministic crawl, code, reference and evaluation set built
from the Python installation, with planted cases whose expected fate is recorded in ground_truth.json."""

from .build import build_reference, build_sample

__all__ = ["build_reference", "build_sample"]
