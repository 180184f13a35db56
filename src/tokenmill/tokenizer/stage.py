"""The tokenizer stage: train on the final documents, export the HF twin, audit every bucket.

It keeps or drops no document, so it writes no decisions (input_stage=None: `audit verify` has nothing to
conserve here). Outputs, in data/tokenizer/: tokenizer.model, tokenizer.vocab, meta.json, hf/, audit.json and
the manifest; metrics/tokenizer.json holds the deterministic figures (vocabulary, sample, audit).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Mapping

from tokenmill.runtime import StageResult, input_id

from .audit import audit
from .core import Tokenizer
from .params import Tokenizer as TokenizerParams
from .sample import parquet_source
from .train import train_tokenizer

AUDIT_BYTES = 5_000_000  # per bucket, read from the start of the shards


def train_and_audit(input_dir: str | Path, params: TokenizerParams, weights: Mapping[str, float] | None,
                    out_dir: str | Path, audit_bytes_per_bucket: int = AUDIT_BYTES) -> StageResult:
    """Train from input_dir/documents/*.parquet (a stage's output folder) with these bucket weights (None: the
    corpus's own proportions) into out_dir, with its Hugging Face twin and the audit of every bucket."""
    input_dir, out_dir = Path(input_dir), Path(out_dir)
    shards = sorted((input_dir / "documents").glob("*.parquet"))
    if not shards:
        raise FileNotFoundError(f"no document shards in {input_dir / 'documents'}")
    result = StageResult()
    result.input_hashes[input_dir.name] = input_id(input_dir)
    meta = train_tokenizer(parquet_source(shards), weights, params, out_dir)
    report = audit(Tokenizer(out_dir), parquet_source(shards), max_bytes_per_bucket=audit_bytes_per_bucket)
    (out_dir / "audit.json").write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
    result.extra.update({"vocab_size": meta["vocab_size"], "model_sha1": meta["model_sha1"]})
    result.timing["seconds_by_step"] = meta["seconds"]
    result.metrics["tokenizer"] = {
        "vocab_size": meta["vocab_size"],
        "sample_bytes": {b: s["sample_bytes"] for b, s in meta["sample"]["buckets"].items()},
        "missing_buckets": meta["sample"]["missing_buckets"],
        "audit": {b: {k: m[k] for k in ("bytes_per_token", "tokens_per_word", "byte_fallback_rate",
                                        "fragmented")} for b, m in report.items()},
    }
    return result
