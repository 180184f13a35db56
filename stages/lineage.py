"""DVC stage `lineage`: lineage/lineage.duckdb from every stage's records, decisions and manifests.

Usage (dvc.yaml): python stages/lineage.py <token stage> <plan stage>
The document stages are those that led to the token stage's input, in the order their manifests link them.
Exits non-zero when conservation fails: a pipeline that lost a document must not look finished.
"""

import sys
from pathlib import Path

from tokenmill.lineage import build_database
from tokenmill.lineage.params import Lineage
from tokenmill.runtime import StageRun, load_params, read_manifest, script, stage_chain


def stage(p: dict, last_stage: str, token_stage: str | None = None, plan_stage: str | None = None,
          data_root: str | Path = "data", out_dir: str | Path = "lineage", plots_dir: str | Path = "plots") -> dict:
    """The database over the document stages ending at `last_stage` (their order follows the manifests' input
    links); its manifest lists the conservation problems and the planted cases handled wrongly."""
    data_root, cfg = Path(data_root), Lineage.resolve(p["lineage"])  # a misspelt key stops here
    stages = stage_chain(data_root, last_stage)
    params = {"sources": p["sources"], "ground_truth": str(cfg.ground_truth), "stages": stages,
              "token_stage": token_stage, "plan_stage": plan_stage}
    with StageRun("lineage", out_dir, params, libraries=("duckdb",)) as run:
        run.record(build_database(data_root, stages, p["sources"], run.tmp, token_stage, plan_stage,
                                  cfg.ground_truth, plots_dir, p.get("execution")))
    return run.manifest


def main(token_stage: str, plan_stage: str) -> int:
    last = read_manifest(f"data/{token_stage}")["input_stage"]
    m = stage(load_params("sources", "lineage", "execution"), last, token_stage, plan_stage)
    for problem in m["conservation_violations"]:
        print(f"lineage: {problem}", file=sys.stderr)
    for case in m.get("planted_wrong", []):
        print(f"lineage: planted case not handled as its ground truth says: {case}", file=sys.stderr)
    print(f"lineage: built lineage/lineage.duckdb; {len(m['conservation_violations'])} conservation problem(s)")
    return 1 if m["conservation_violations"] else 0


if __name__ == "__main__":
    sys.exit(script(main))
