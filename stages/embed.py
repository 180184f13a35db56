"""DVC stage `embed`: a unit vector per kept document (a static embedding model inside its wheel; chunks pooled).

Usage (dvc.yaml): python stages/embed.py <documents stage>
"""

import sys
from pathlib import Path

from tokenmill.domains.embed import embed_documents
from tokenmill.domains.params import Embed
from tokenmill.runtime import StageRun, load_params, script


def stage(p: dict, input_stage: str, data_root: str | Path = "data") -> dict:
    data_root, params = Path(data_root), Embed.resolve(p["embed"])
    with StageRun("embed", data_root / "embed", params.model_dump(), input_stage=input_stage,
                  libraries=("wordllama", "numpy")) as run:
        run.record(embed_documents(data_root / input_stage, params, p["execution"], run.tmp))
    return run.manifest


def main(input_stage: str) -> None:
    m = stage(load_params("embed", "execution"), input_stage)
    print(f"embed: {m['model']}, {m['dim']}-dimensional vectors")


if __name__ == "__main__":
    sys.exit(script(main))
