"""DVC stage `backcheck`: semantic duplicates and paraphrased benchmark items, from the embed stage's vectors.

Usage (dvc.yaml): python stages/backcheck.py <documents stage> <embed stage>
"""

import sys
from pathlib import Path

from tokenmill.backcheck.params import Backcheck
from tokenmill.backcheck.stage import backcheck_documents
from tokenmill.domains.params import Embed
from tokenmill.runtime import StageRun, load_params, script


def stage(p: dict, input_stage: str, embed_stage: str, data_root: str | Path = "data") -> dict:
    data_root, params = Path(data_root), Backcheck.resolve(p["backcheck"])
    embed, benchmarks = Embed.resolve(p["embed"]), p["decontaminate"]["benchmarks"]
    with StageRun("backcheck", data_root / "backcheck", {**params.model_dump(), "benchmarks": benchmarks},
                  input_stage=input_stage, libraries=("faiss-cpu", "scipy", "wordllama", "numpy")) as run:
        run.record(backcheck_documents(data_root / input_stage, data_root / embed_stage, params, embed, benchmarks,
                                       p["execution"], run.tmp))
    return run.manifest


def main(input_stage: str, embed_stage: str) -> None:
    m = stage(load_params("backcheck", "embed", "decontaminate.benchmarks", "execution"), input_stage, embed_stage)
    dup, con = m.get("duplicates", {}), m.get("contamination", {})
    print(f"backcheck: {m['counts']['in']} documents -> {m['counts']['out']} kept; "
          f"{dup.get('duplicates', 0)} semantic duplicates in {dup.get('clusters', 0)} clusters, "
          f"{con.get('suspects', 0)} suspects of {con.get('suspect_items', 0)} items")


if __name__ == "__main__":
    sys.exit(script(main))
