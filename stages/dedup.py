"""DVC stage `dedup`: exact duplicates, MinHash-LSH near-duplicate clusters, repeated boilerplate lines."""

from tokenmill.dedup import run_dedup
from tokenmill.runtime import load_params


def main() -> None:
    p = load_params()
    m = run_dedup(p["dedup"], p.get("execution"), data_root="data", input_stage="pii")
    print(f"dedup: {m['counts']['in']} documents -> {m['counts']['out']} kept")


if __name__ == "__main__":
    main()
