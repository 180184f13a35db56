"""The tokenizer stage: train on the final documents, export the HF twin, audit every bucket.

It keeps or drops no document, so it writes no decisions (input_stage=None: `audit verify` has nothing to
conserve here). Outputs, in data/tokenizer/: tokenizer.model, tokenizer.vocab, meta.json, hf/, audit.json and
the manifest; metrics/tokenizer.json holds the deterministic figures (vocabulary, sample, audit).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

from tokenmill.runtime import StageRun, input_id

from .audit import audit
from .core import Tokenizer
from .sample import parquet_source
from .train import resolve_params, train_tokenizer

STAGE = "tokenizer"
AUDIT_BYTES = 5_000_000  # per bucket, read from the start of the shards


def run_tokenizer(params: Mapping[str, Any] | None, weights: Mapping[str, float] | None,
                  data_root: str | Path, input_stage: str,
                  audit_bytes_per_bucket: int = AUDIT_BYTES) -> dict:
    """Train from data/<input_stage>/documents/*.parquet with these bucket weights (None: the corpus's own
    proportions); returns the manifest."""
    p = resolve_params(params)
    data_root = Path(data_root)
    in_dir = data_root / input_stage / "documents"
    shards = sorted(in_dir.glob("*.parquet"))
    if not shards:
        raise FileNotFoundError(f"no document shards in {in_dir}")
    recorded = {**p, "weights": dict(sorted((weights or {}).items())) or None,
                "audit_bytes_per_bucket": audit_bytes_per_bucket}
    with StageRun(STAGE, data_root / STAGE, recorded, input_stage=None,
                  libraries=("sentencepiece", "tokenizers", "protobuf")) as run:
        run.input_hashes[input_stage] = input_id(data_root / input_stage)
        meta = train_tokenizer(parquet_source(shards), weights, p, run.tmp)
        report = audit(Tokenizer(run.tmp), parquet_source(shards), max_bytes_per_bucket=audit_bytes_per_bucket)
        (run.tmp / "audit.json").write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
        run.extra.update({"vocab_size": meta["vocab_size"], "model_sha1": meta["model_sha1"]})
        run.timing["seconds_by_step"] = meta["seconds"]
        run.metrics["tokenizer"] = {
            "vocab_size": meta["vocab_size"],
            "sample_bytes": {b: s["sample_bytes"] for b, s in meta["sample"]["buckets"].items()},
            "missing_buckets": meta["sample"]["missing_buckets"],
            "audit": {b: {k: m[k] for k in ("bytes_per_token", "tokens_per_word", "byte_fallback_rate",
                                            "fragmented")} for b, m in report.items()},
        }
    return run.manifest
