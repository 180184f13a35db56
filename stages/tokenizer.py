"""DVC stage `tokenizer`: SentencePiece (lossless settings) + its exact Hugging Face tokenizer.json twin.

Usage (dvc.yaml): python stages/tokenizer.py <documents stage>

The training sample is drawn with the tokenizer's own bucket weights (`tokenizer.sample_weights`), not the
mixture's: one vocabulary serves every mixture experiment, so mixtures are compared on the same tokens.
"""

import sys

from tokenmill.runtime import load_params, script
from tokenmill.tokenizer import run_tokenizer


def main(input_stage: str) -> None:
    p = dict(load_params("tokenizer")["tokenizer"])
    weights = p.pop("sample_weights")
    m = run_tokenizer(p, weights, data_root="data", input_stage=input_stage)
    print(f"tokenizer: {m['vocab_size']}-token vocabulary")


if __name__ == "__main__":
    sys.exit(script(main))
