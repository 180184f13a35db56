"""DVC stage `tokenizer`: SentencePiece (lossless settings) + its exact Hugging Face tokenizer.json twin."""

from tokenmill.mixture import document_bucket_weights
from tokenmill.runtime import load_params
from tokenmill.tokenizer import run_tokenizer


def main() -> None:
    p = load_params()
    # The training sample follows the mixture (its first phase), so every bucket the model trains on is
    # represented in the vocabulary in proportion to how much of it training will see.
    weights = document_bucket_weights(p["mixture"]["phases"][0]["weights"])
    m = run_tokenizer(p["tokenizer"], weights, data_root="data", input_stage="decontaminate")
    print(f"tokenizer: seconds per step {m['tokenizer']['seconds']}")


if __name__ == "__main__":
    main()
