"""DVC stage `tokenize` (named tokenize_shards.py: a stages/tokenize.py would shadow the stdlib module).

Usage (dvc.yaml): python stages/tokenize_shards.py <documents stage> <tokenizer stage> <scores stage>
(the scores stage is the one whose decisions hold the quality scores that split buckets into tiers).
"""

import sys

from tokenmill.runtime import load_params, script
from tokenmill.tokenize import run_tokenize


def main(input_stage: str, tokenizer_stage: str, scores_stage: str) -> None:
    p = load_params("tokenize", "execution")
    m = run_tokenize(p["tokenize"], p["execution"], data_root="data", input_stage=input_stage,
                     tokenizer_stage=tokenizer_stage, scores_stage=scores_stage)
    print(f"tokenize: {m['vocab_size']}-token vocabulary, {m['dtype']} shards")


if __name__ == "__main__":
    sys.exit(script(main))
