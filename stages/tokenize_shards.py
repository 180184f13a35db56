"""DVC stage `tokenize` (named tokenize_shards.py: a stages/tokenize.py would shadow the stdlib module)."""

from tokenmill.runtime import load_params
from tokenmill.tokenize import run_tokenize


def main() -> None:
    p = load_params()
    m = run_tokenize(p["tokenize"], p.get("execution"), data_root="data", input_stage="decontaminate")
    print(f"tokenize: {m['vocab_size']}-token vocabulary, {m['dtype']} shards")


if __name__ == "__main__":
    main()
