"""DVC stage `quality`: train the fastText quality classifier, score every document, cut the crawl buckets.

Usage (dvc.yaml): python stages/quality.py <input stage>
"""

import sys

from tokenmill.quality import run_quality
from tokenmill.runtime import load_params, script


def main(input_stage: str) -> None:
    p = load_params("quality", "execution")
    m = run_quality(p["quality"], p["execution"], data_root="data", input_stage=input_stage)
    print(f"quality: {m['counts']['in']} documents -> {m['counts']['out']} kept")


if __name__ == "__main__":
    sys.exit(script(main))
