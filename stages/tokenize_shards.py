"""DVC stage `tokenize` (named tokenize_shards.py: a stages/tokenize.py would shadow the stdlib module).

Usage (dvc.yaml): python stages/tokenize_shards.py <documents stage> <tokenizer stage> <scores stage>
(the scores stage is the one whose decisions hold the quality scores that split buckets into tiers).
"""

import sys
from pathlib import Path

from tokenmill.runtime import StageRun, load_params, script
from tokenmill.tokenize import tokenize_documents
from tokenmill.tokenize.params import Tokenize


def stage(p: dict, input_stage: str, tokenizer_stage: str, scores_stage: str, data_root: str | Path = "data") -> dict:
    data_root, params = Path(data_root), Tokenize.resolve(p["tokenize"])
    with StageRun("tokenize", data_root / "tokenize", params.model_dump(), input_stage=input_stage,
                  libraries=("sentencepiece", "numpy")) as run:
        run.record(tokenize_documents(data_root / input_stage, data_root / tokenizer_stage, data_root / scores_stage,
                                      params, p["execution"], run.tmp))
    return run.manifest


def main(input_stage: str, tokenizer_stage: str, scores_stage: str) -> None:
    m = stage(load_params("tokenize", "execution"), input_stage, tokenizer_stage, scores_stage)
    print(f"tokenize: {m['vocab_size']}-token vocabulary, {m['dtype']} shards")


if __name__ == "__main__":
    sys.exit(script(main))
