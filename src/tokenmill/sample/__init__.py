"""The embedded default corpus: a small, deterministic crawl, code, reference and evaluation set built
from the Python installation, with planted cases whose expected fate is recorded in ground_truth.json."""

from __future__ import annotations

from typing import Any, Mapping


from tokenmill.sample.params import Sample

from .build import build_reference, build_sample

__all__ = ["DEFAULTS", "build_reference", "build_sample", "resolve_params"]

# The parameters and their defaults: the `sample:` of conf/source/sample.yaml, the default source preset
# (tests/test_config.py keeps the two equal); conf/source/crawl.yaml sets every key for a real crawl.
DEFAULTS = Sample.defaults()


def resolve_params(params: Mapping[str, Any] | None) -> dict[str, Any]:
    """params over DEFAULTS, checked by the schema (tokenmill.sample.params.Sample): a ParamError names the key."""
    return Sample.resolve(params).model_dump()
