"""DVC stage `domains`: each document's topic (clusters of the embed stage's vectors), format and toxicity score.

Usage (dvc.yaml): python stages/domains.py <documents stage> <embed stage>
"""

import sys
from pathlib import Path

from tokenmill.domains.labels import label_documents
from tokenmill.domains.params import Domains
from tokenmill.runtime import StageRun, load_params, script


def stage(p: dict, input_stage: str, embed_stage: str, data_root: str | Path = "data") -> dict:
    data_root, params = Path(data_root), Domains.resolve(p["domains"])
    with StageRun("domains", data_root / "domains", params.model_dump(), input_stage=input_stage,
                  libraries=("faiss-cpu", "scikit-learn", "alt-profanity-check", "numpy")) as run:
        run.record(label_documents(data_root / input_stage, data_root / embed_stage, params, p["execution"], run.tmp))
    return run.manifest


def main(input_stage: str, embed_stage: str) -> None:
    m = stage(load_params("domains", "execution"), input_stage, embed_stage)
    print(f"domains: {m['counts']['in']} documents -> {m['counts']['out']} kept, {len(m['topics'])} topics")


if __name__ == "__main__":
    sys.exit(script(main))
