"""DVC stage `lineage`: lineage/lineage.duckdb from every stage's records, decisions and manifests.

Usage (dvc.yaml): python stages/lineage.py <token stage> <plan stage>
The document stages are those that led to the token stage's input, in the order their manifests link them.
Exits non-zero when conservation fails: a pipeline that lost a document must not look finished.
"""

import sys

from tokenmill.lineage import resolve_params, run_lineage
from tokenmill.runtime import load_params, read_manifest, script


def main(token_stage: str, plan_stage: str) -> int:
    p = load_params("sources", "lineage")
    cfg = resolve_params(p["lineage"])  # before any work: a misspelt key stops the stage here
    last = read_manifest(f"data/{token_stage}")["input_stage"]
    result = run_lineage(p["sources"], "data", "lineage", last, token_stage, plan_stage,
                         ground_truth=cfg["ground_truth"])
    for problem in result["problems"]:
        print(f"lineage: {problem}", file=sys.stderr)
    for case in result["planted_wrong"]:
        print(f"lineage: planted case not handled as its ground truth says: {case}", file=sys.stderr)
    print(f"lineage: built lineage/lineage.duckdb; {len(result['problems'])} conservation problem(s)")
    return 1 if result["problems"] else 0


if __name__ == "__main__":
    sys.exit(script(main))
