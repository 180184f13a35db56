"""Long context at demo scale (issue 46, item 4; RESULTS.md, "Long context at demo scale").

    python benchmarks/bench_long_context.py --project . --work /tmp/longctx [--seeds 2]

The demo's full run three ways, each at `--seeds` seeds (train.seed = train.data_seed = k), from the demo's own
token index and evaluation set:
  base      the demo as it is: every phase at 256 tokens
  long      the anneal phase (the last tenth of the tokens, where WSD decays) at 1,024 tokens, its reference and
            web/high documents of 512 tokens or more (mixture.phases.anneal.seq_len, min_doc_tokens); RoPE's
            base unchanged (train.rope_scaling.kind none)
  long_ntk  the same plan with RoPE's base NTK-scaled in the long phase (kind ntk: 10,000 x 4^(32/30))
Each run is the pipeline's own stage commands (stages/mixture.py, stages/train.py pretrain) in a folder of its
own whose params.yaml is composed from conf/ with the variant's overrides (benchmarks/bench_decision_accuracy.py's
way); the base's seed 0 is the demo's full run itself when the demo is built (the same code and parameters).
Reported per variant: held-out loss by position and the retrieval probe (each run's summary `context`), the
held-out mean and the benchmarks' bits per byte, the run's wall time. Writes <work>/results.json.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_decision_accuracy import _folder, _stage  # noqa: E402  (a sibling script: the same run folders)

LONG = ["++mixture.phases.anneal.seq_len=1024",
        "++mixture.phases.anneal.min_doc_tokens={reference:512,web/high:512}"]
VARIANTS = {"base": [], "long": LONG, "long_ntk": [*LONG, "train.rope_scaling.kind=ntk"]}


def run_variant(project: Path, work: Path, name: str, overrides: list[str], seeds: int) -> dict:
    shared = {"data/tokenize": project / "data/tokenize", "data/evalset": project / "data/evalset"}
    log, seconds = work / name / "log.txt", {}
    for k in range(seeds):
        folder = work / name / f"seed{k}"
        extra = [f"++train.seed={k}", f"++train.data_seed={k}"] if k else []
        links = dict(shared)
        if name != "base" and k:  # the variant's plan, planned once
            links["data/mixture"] = work / name / "seed0" / "data/mixture"
        _folder(project, folder, [*overrides, *extra], links)
        summary = folder / "data/train/pretrain/summary.json"
        demo = project / "data/train/pretrain"
        if name == "base" and k == 0 and not summary.exists() and (demo / "summary.json").exists():
            shutil.copytree(demo, folder / "data/train/pretrain", dirs_exist_ok=True)  # the demo's own full run
            seconds["pretrain#0"] = "the demo's"
            continue
        if not (folder / "data/mixture/plan.parquet").exists():
            seconds[f"mixture#{k}"] = round(_stage(project, folder, ["mixture.py", "tokenize"], log), 1)
        if not summary.exists():
            seconds[f"pretrain#{k}"] = round(_stage(project, folder, ["train.py", "pretrain", "mixture", "tokenize",
                                                                      "evalset"], log), 1)
    return seconds


def figures(work: Path, name: str, seeds: int) -> dict:
    runs = [json.loads((work / name / f"seed{k}" / "data/train/pretrain/summary.json").read_text())
            for k in range(seeds)]
    out = {"runs": len(runs), "context": [r["context"] for r in runs]}
    per = {"heldout_mean": [float(np.mean(list(r["heldout_loss"].values()))) for r in runs],
           "benchmarks_mean.bpb": [r["benchmarks_mean"]["bpb"] for r in runs],
           "probe.mean": [r["context"]["probe"].get("mean") for r in runs]}
    for b in runs[0]["context"]["loss_by_position"]:
        per[f"position.{b}"] = [r["context"]["loss_by_position"].get(b, {}).get("loss") for r in runs]
    for k in runs[0]["context"]["probe"]:
        per[f"probe.{k}"] = [r["context"]["probe"].get(k) for r in runs]
    out["figures"] = {m: {"mean": float(np.mean(v)), "seeds": v,
                          "sd": float(np.std(v, ddof=1)) if len(v) > 1 else None}
                      for m, v in per.items() if all(x is not None for x in v)}
    out["seconds"] = [r.get("timing", {}).get("loop_seconds") for r in runs]
    return out


def report(results: dict) -> str:
    names = list(results["variants"])
    metrics = list(dict.fromkeys(m for n in names for m in results["variants"][n]["figures"]))
    lines = ["| figure | " + " | ".join(names) + " |", "| --- |" + " ---: |" * len(names)]
    for m in metrics:
        cells = []
        for n in names:
            f = results["variants"][n]["figures"].get(m)
            cells.append("–" if f is None else f"{f['mean']:.4f}" + (f" ± {f['sd']:.4f}" if f["sd"] is not None else ""))
        lines.append(f"| {m} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--project", type=Path, default=Path("."))
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--variants", default=",".join(VARIANTS))
    args = ap.parse_args()
    project, work = args.project.resolve(), args.work.resolve()
    store = work / "results.json"
    results = json.loads(store.read_text()) if store.exists() else {"variants": {}, "seconds": {}}
    for name in args.variants.split(","):
        results["seconds"][name] = run_variant(project, work, name, VARIANTS[name], args.seeds)
        results["variants"][name] = figures(work, name, args.seeds)
        store.write_text(json.dumps(results, indent=1) + "\n")
    print(report(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
