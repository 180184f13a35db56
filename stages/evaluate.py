"""DVC stage `evaluate`: lm-eval on the exported model, with scores on all and on clean items.

Usage (dvc.yaml): python stages/evaluate.py <export stage> <plan stage> <documents stage>
Held-out perplexity per mixture bucket on the plan's held-out documents (their text from the documents
stage); every benchmark of `decontaminate.benchmarks`, its dirty items taken from the documents stage's
contamination table.
"""

import sys

from tokenmill.evaluate.run import heldout_documents, run_evaluation
from tokenmill.runtime import StageRun, input_id, load_params, merge_params, script

DEFAULTS = {"limit": None, "heldout_limit": None, "batch_size": 16, "device": "cpu", "dtype": "float32"}


def main(export_stage: str, plan_stage: str, documents_stage: str) -> int:
    p = load_params("evaluate", "decontaminate.benchmarks")
    cfg = merge_params("evaluate", DEFAULTS, p["evaluate"], types={"limit": int, "heldout_limit": int})
    benchmarks = p["decontaminate"]["benchmarks"]
    with StageRun("evaluate", "data/evaluate", {**cfg, "benchmarks": benchmarks},
                  libraries=("lm-eval", "torch", "transformers")) as run:
        for stage in (export_stage, plan_stage, documents_stage):
            run.input_hashes[stage] = input_id(f"data/{stage}")
        heldout = heldout_documents(f"data/{plan_stage}/heldout.parquet", f"data/{documents_stage}/documents")
        out = run_evaluation(f"data/{export_stage}/hf", benchmarks, heldout,
                             f"data/{documents_stage}/contamination", run.tmp, **cfg)
        run.timing.update(out["timing"])
        run.metrics.update(summary_metrics(out["results"]))
    print(f"evaluate: {run.metrics}")
    return 0


def summary_metrics(results: dict) -> dict:
    """What `dvc exp show` compares: bits per byte per held-out bucket; acc on all and on clean items."""
    out = {"bits_per_byte": {b: r["bits_per_byte"] for b, r in sorted(results["heldout"]["buckets"].items())}}
    for name, r in sorted(results["benchmarks"].items()):
        if "metrics" in r:
            acc = r["metrics"].get("acc_norm") or r["metrics"]["acc"]
            out[name] = {"acc": acc["all"], "acc_clean": acc["clean"], "dirty_items": r["dirty_items"]}
    return out


if __name__ == "__main__":
    sys.exit(script(main))
