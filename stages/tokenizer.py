"""DVC stage `tokenizer`: SentencePiece (lossless settings) + its exact Hugging Face tokenizer.json twin.

Usage (dvc.yaml): python stages/tokenizer.py <documents stage>

The training sample is drawn with the tokenizer's own bucket weights (`tokenizer.sample_weights`), not the
mixture's: one vocabulary serves every mixture experiment, so mixtures are compared on the same tokens.
"""

import sys
from pathlib import Path

from tokenmill.runtime import StageRun, load_params, script
from tokenmill.tokenizer import AUDIT_BYTES, train_and_audit
from tokenmill.tokenizer.params import Tokenizer


def stage(p: dict, input_stage: str, data_root: str | Path = "data", audit_bytes_per_bucket: int = AUDIT_BYTES) -> dict:
    data_root, params = Path(data_root), Tokenizer.resolve(p["tokenizer"])
    # Not given: the corpus's own proportions (an empty mapping given stays one: no bucket weighted).
    weights = dict(params.sample_weights) if "sample_weights" in params.model_fields_set else None
    recorded = {**params.model_dump(exclude={"sample_weights"}),  # recorded as the weights, below
                "weights": dict(sorted((weights or {}).items())) or None,
                "audit_bytes_per_bucket": audit_bytes_per_bucket}
    # It keeps or drops no document, so it has no input stage to conserve (input_stage=None for `audit verify`).
    with StageRun("tokenizer", data_root / "tokenizer", recorded, input_stage=None,
                  libraries=("sentencepiece", "tokenizers", "protobuf")) as run:
        run.record(train_and_audit(data_root / input_stage, params, weights, run.tmp, audit_bytes_per_bucket))
    return run.manifest


def main(input_stage: str) -> None:
    m = stage(load_params("tokenizer"), input_stage)
    print(f"tokenizer: {m['vocab_size']}-token vocabulary")


if __name__ == "__main__":
    sys.exit(script(main))
