"""DVC stage `decontaminate`: n-gram overlap of every document with every configured benchmark item.

Usage (dvc.yaml): python stages/decontaminate.py <input stage>
"""

import sys
from pathlib import Path

from tokenmill.decontam import decontaminate
from tokenmill.decontam.params import Decontaminate
from tokenmill.runtime import StageRun, load_params, script


def stage(p: dict, input_stage: str, data_root: str | Path = "data") -> dict:
    data_root, params = Path(data_root), Decontaminate.resolve(p["decontaminate"])
    with StageRun("decontaminate", data_root / "decontaminate", params.model_dump(), input_stage=input_stage) as run:
        run.record(decontaminate(data_root / input_stage, params, p["execution"], run.tmp))
    return run.manifest


def main(input_stage: str) -> None:
    m = stage(load_params("decontaminate", "execution"), input_stage)
    print(f"decontaminate: {m['counts']['in']} documents -> {m['counts']['out']} kept")


if __name__ == "__main__":
    sys.exit(script(main))
