"""DVC stage `dedup`: exact duplicates, MinHash-LSH near-duplicate clusters, repeated boilerplate lines.

Usage (dvc.yaml): python stages/dedup.py <input stage>
"""

import sys
from pathlib import Path

from tokenmill.dedup import deduplicate
from tokenmill.dedup.params import Dedup
from tokenmill.runtime import StageRun, load_params, script


def stage(p: dict, input_stage: str, data_root: str | Path = "data") -> dict:
    data_root, params = Path(data_root), Dedup.resolve(p["dedup"])
    with StageRun("dedup", data_root / "dedup", params.model_dump(), input_stage=input_stage,
                  libraries=("numpy", "duckdb")) as run:
        run.record(deduplicate(data_root / input_stage, params, p["execution"], run.tmp))
    return run.manifest


def main(input_stage: str) -> None:
    m = stage(load_params("dedup", "execution"), input_stage)
    print(f"dedup: {m['counts']['in']} documents -> {m['counts']['out']} kept")


if __name__ == "__main__":
    sys.exit(script(main))
