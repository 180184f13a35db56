"""DVC stage `domains`: each document's topic (clusters of the embed stage's vectors), format and toxicity score;
and the same labels for the documents an earlier stage dropped (read from the ingested documents).

Usage (dvc.yaml): python stages/domains.py <documents stage> <embed stage> <ingest stage>
"""

import sys
from pathlib import Path

from tokenmill.domains.labels import label_documents
from tokenmill.domains.params import Domains, Embed
from tokenmill.runtime import StageRun, load_params, script


def stage(p: dict, input_stage: str, embed_stage: str, all_stage: str | None = None,
          data_root: str | Path = "data") -> dict:
    """all_stage: the stage holding every document (ingest), whose documents missing from input_stage are
    labelled in dropped_before.parquet (with p["embed"], the embed stage's parameters); None: not labelled."""
    data_root, params = Path(data_root), Domains.resolve(p["domains"])
    embed_p = Embed.resolve(p.get("embed") or {}) if all_stage else None
    with StageRun("domains", data_root / "domains", params.model_dump(), input_stage=input_stage,
                  libraries=("faiss-cpu", "scikit-learn", "alt-profanity-check", "numpy", "wordllama")) as run:
        run.record(label_documents(data_root / input_stage, data_root / embed_stage, params, p["execution"], run.tmp,
                                   None if all_stage is None else data_root / all_stage, embed_p))
    return run.manifest


def main(input_stage: str, embed_stage: str, all_stage: str) -> None:
    m = stage(load_params("domains", "embed", "execution"), input_stage, embed_stage, all_stage)
    dropped = m.get("dropped_before_labelled")
    print(f"domains: {m['counts']['in']} documents -> {m['counts']['out']} kept, {len(m['topics'])} topics"
          + ("" if dropped is None else f"; {dropped} documents dropped before labelled"))


if __name__ == "__main__":
    sys.exit(script(main))
