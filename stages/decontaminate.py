"""DVC stage `decontaminate`: n-gram overlap of every document with every configured benchmark item.

Usage (dvc.yaml): python stages/decontaminate.py <input stage>
"""

import sys

from tokenmill.decontam import run_decontaminate
from tokenmill.runtime import load_params, script


def main(input_stage: str) -> None:
    p = load_params("decontaminate", "execution")
    m = run_decontaminate(p["decontaminate"], p["execution"], data_root="data", input_stage=input_stage)
    print(f"decontaminate: {m['counts']['in']} documents -> {m['counts']['out']} kept")


if __name__ == "__main__":
    sys.exit(script(main))
