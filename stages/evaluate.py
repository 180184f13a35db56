"""DVC stage `evaluate`: lm-eval on the exported model, with scores on all and on clean items.

Usage (dvc.yaml): python stages/evaluate.py <export stage> <plan stage> <documents stage> <backcheck stage>
Held-out bits per byte per mixture bucket on the plan's held-out documents (their text from the documents
stage); every benchmark of `decontaminate.benchmarks`, its dirty items taken from the documents stage's
contamination table, its suspects (clean_strict leaves them out too) from the backcheck stage's. Then, over the
ladder (the scouts and the full run, their in-loop scores and noise in data/train), signal, noise and their ratio
per metric (tokenmill.evaluate.signal), and the decision metric the track record chose
(tokenmill.evaluate.track.decision_metric: the same for the baseline and its experiments). metrics/decision.json,
the stage's one DVC metric, is the headline `dvc exp show` compares (headline below); metrics/evaluate.json keeps
the detail.
"""

import sys

from tokenmill.evaluate.params import Evaluate
from tokenmill.evaluate import track
from tokenmill.evaluate.evalset import METRICS, benchmark_means
from tokenmill.evaluate.run import heldout_documents, run_evaluation
from tokenmill.evaluate.signal import CANDIDATES, ladder_table, read_ladder
from tokenmill.runtime import StageRun, input_id, load_params, script, write_json


def main(export_stage: str, plan_stage: str, documents_stage: str, backcheck_stage: str) -> int:
    p = load_params("evaluate", "decontaminate.benchmarks")
    run_cfg = Evaluate.resolve(p["evaluate"]).model_dump(exclude={"inloop_items"})  # the evalset stage's key
    benchmarks = p["decontaminate"]["benchmarks"]
    with StageRun("evaluate", "data/evaluate", {**run_cfg, "benchmarks": benchmarks},
                  libraries=("lm-eval", "torch", "transformers")) as run:
        for stage in (export_stage, plan_stage, documents_stage, backcheck_stage):
            run.input_hashes[stage] = input_id(f"data/{stage}")
        heldout = heldout_documents(f"data/{plan_stage}/heldout.parquet", f"data/{documents_stage}/documents")
        out = run_evaluation(f"data/{export_stage}/hf", benchmarks, heldout,
                             f"data/{documents_stage}/contamination", run.tmp,
                             suspects=f"data/{backcheck_stage}/suspects", **run_cfg)
        run.timing.update(out["timing"])
        run.metrics.update(summary_metrics(out["results"]))
        ladder = read_ladder("data/train")
        rows = ladder_table(ladder, CANDIDATES)
        chosen = run.metrics["decision_metric"] = track.decision_metric(track.load())
        run.metrics["ladder"] = {r["metric"]: {k: None if r[k] is None else round(r[k], 6)
                                               for k in ("signal", "noise", "snr", "order")} for r in rows}
        if caveat := track.caveat(chosen, run.metrics["ladder"]):
            print(f"evaluate: {caveat}", file=sys.stderr)
    write_json("metrics/decision.json", headline(run.metrics, ladder.get("pretrain", {})))
    print(f"evaluate: {run.metrics.get('benchmarks_mean')}; decision metric {run.metrics['decision_metric']}")
    return 0


def headline(metrics: dict, full_run: dict[str, tuple[float, float | None]]) -> dict:
    """The figures a mixture decision rests on, each beside its noise, in a dozen columns: the decision metric,
    the full run's value on it and its σ over the noise window, and held-out bits per byte per bucket with their
    standard errors over documents. Everything else (per benchmark, per item, per run) is in the detail files
    that `tokenmill compare` and the report read."""
    name = metrics["decision_metric"]
    value, sigma = full_run.get(name, (None, None)) if name else (None, None)
    return {"decision_metric": name,
            "decision": None if value is None else round(value, 6),
            "decision_sigma": None if sigma is None else round(sigma, 6),
            "heldout_bpb": metrics["bits_per_byte"], "heldout_bpb_stderr": metrics["bits_per_byte_stderr"]}


def summary_metrics(results: dict) -> dict:
    """The evaluation's detail (metrics/evaluate.json), each figure beside its standard error: bits per byte per held-out
    bucket; per benchmark acc, acc_norm, prob_norm and bpb on all and on clean items (evalset.py defines
    them); their mean over the benchmarks."""
    heldout = results["heldout"]["buckets"]
    out: dict = {"bits_per_byte": {b: r["bits_per_byte"] for b, r in sorted(heldout.items())},
                 "bits_per_byte_stderr": {b: r["bits_per_byte_stderr"] for b, r in sorted(heldout.items())}}
    scored = {}
    for name, r in sorted(results["benchmarks"].items()):
        if "metrics" not in r:
            continue
        scored[name] = r["metrics"]
        entry: dict = {"dirty_items": r["dirty_items"], "suspect_items": r["suspect_items"], "items": r["items"]}
        for m in METRICS:
            if m in r["metrics"]:
                s = r["metrics"][m]
                entry.update({m: s["all"], f"{m}_stderr": s["all_stderr"], f"{m}_clean": s["clean"],
                              f"{m}_clean_stderr": s["clean_stderr"], f"{m}_clean_strict": s["clean_strict"],
                              f"{m}_clean_strict_stderr": s["clean_strict_stderr"]})
        out[name] = entry
    mean = {k: round(v, 6) for k, v in benchmark_means(scored).items()}
    if mean:
        out["benchmarks_mean"] = mean
    return out


if __name__ == "__main__":
    sys.exit(script(main))
