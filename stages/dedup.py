"""DVC stage `dedup`: exact duplicates, MinHash-LSH near-duplicate clusters, repeated boilerplate lines.

Usage (dvc.yaml): python stages/dedup.py <input stage>
"""

import sys

from tokenmill.dedup import run_dedup
from tokenmill.runtime import load_params, script


def main(input_stage: str) -> None:
    p = load_params("dedup", "execution")
    m = run_dedup(p["dedup"], p["execution"], data_root="data", input_stage=input_stage)
    print(f"dedup: {m['counts']['in']} documents -> {m['counts']['out']} kept")


if __name__ == "__main__":
    sys.exit(script(main))
