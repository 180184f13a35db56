"""DVC stage `quality`: train the fastText quality classifier, score every document, cut the crawl buckets.

Usage (dvc.yaml): python stages/quality.py <input stage>
"""

import sys
from pathlib import Path

from tokenmill.quality import score_and_cut
from tokenmill.quality.params import Quality
from tokenmill.runtime import StageRun, load_params, script


def stage(p: dict, input_stage: str, data_root: str | Path = "data") -> dict:
    data_root, params = Path(data_root), Quality.resolve(p["quality"])  # a typo stops here, before any training
    with StageRun("quality", data_root / "quality", params.model_dump(), input_stage=input_stage,
                  libraries=("fasttext-numpy2", "numpy")) as run:
        run.record(score_and_cut(data_root / input_stage, params, p["execution"], run.tmp))
    return run.manifest


def main(input_stage: str) -> None:
    m = stage(load_params("quality", "execution"), input_stage)
    print(f"quality: {m['counts']['in']} documents -> {m['counts']['out']} kept")


if __name__ == "__main__":
    sys.exit(script(main))
