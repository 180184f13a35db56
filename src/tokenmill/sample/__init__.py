"""The embedded default corpus: a small, deterministic crawl, code, reference and evaluation set built
from the Python installation, with planted cases whose expected fate is recorded in ground_truth.json.

The parameters and their defaults: tokenmill.sample.params.Sample, the `sample:` of conf/source/sample.yaml, the
default source preset (tests/test_config.py keeps the two equal); conf/source/crawl.yaml sets every key for a
real crawl."""

from __future__ import annotations

from .build import build_reference, build_sample

__all__ = ["build_reference", "build_sample"]
