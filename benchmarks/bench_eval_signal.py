"""Which metric to trust on the demo ladder, and what the evaluation costs: the figures of RESULTS.md,
"Evaluation: signal and noise".

Run in a project where `make demo` (or `dvc repro`) has finished:
    python benchmarks/bench_eval_signal.py [--project .]

Prints, as Markdown:
1. per candidate metric, each run's final value ± its σ (the noise window's spread; for a rung with seed
   replicas, the larger of that and the spread over seeds), the signal, the noise, the SNR
   (tokenmill.evaluate.signal), and whether the smallest scout and the full run are more than 2 σ apart;
2. what the evaluation cost: the benchmarks and evalset stages, each run's in-loop benchmark scoring
   (DVCLive perf/benchmark_eval_seconds) and the evaluate stage (lm-eval), from the run records;
3. the standard error per benchmark metric at the evaluate stage's item count, and what other counts give
   (standard errors scale as 1 / sqrt(items)).
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from tokenmill.evaluate.signal import CANDIDATES, decision_metric, ladder_table, read_ladder, separated


def _seconds(project: Path, stage: str) -> float | None:
    path = project / "runs" / f"{stage}.json"
    return json.loads(path.read_text())["seconds"] if path.exists() else None


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--project", default=".")
    project = Path(ap.parse_args().project)
    ladder = read_ladder(project / "data" / "train")
    rows = ladder_table(ladder, CANDIDATES)
    runs = list(ladder)
    smallest, full = runs[0], "pretrain"
    print("| metric | " + " | ".join(runs) + " | signal | noise | SNR | order (Kendall τ) | smallest scout vs full run |")
    print("|" + " --- |" * (len(runs) + 6))
    for r in rows:
        cells = [f"{r['values'][run]:.4f} ± {r['sigmas'][run]:.4f}" if r["sigmas"][run] is not None
                 else f"{r['values'][run]:.4f}" for run in runs]
        a, b = ladder[smallest][r["metric"]], ladder[full][r["metric"]]
        gap = (a[0] - b[0]) / math.hypot(a[1] or 0.0, b[1] or 0.0)
        gap = gap if r["lower_is_better"] else -gap  # positive: the full run is the better one
        verdict = "separated" if separated(a, b) else "not separated"
        direction = "full run better" if gap > 0 else "SMALLEST SCOUT BETTER"
        print(f"| {r['metric']} | " + " | ".join(cells) +
              f" | {r['signal']:.4f} | {r['noise']:.4f} | {r['snr']:.1f} | {r['order']:+.2f} | "
              f"{verdict}, {direction} ({abs(gap):.1f} σ) |")
    print(f"\ndecision metric: {decision_metric(rows)}\n")

    print("| evaluation cost | seconds |\n| --- | --- |")
    for stage in ("benchmarks", "evalset", "evaluate"):
        print(f"| stage {stage} | {_seconds(project, stage)} |")
    total = 0.0
    for live in sorted((project / "dvclive").rglob("metrics.json")):
        secs = json.loads(live.read_text()).get("perf", {}).get("benchmark_eval_seconds")
        if secs is not None:
            total += secs
            print(f"| in-loop benchmarks, {live.parent.relative_to(project / 'dvclive')} | {secs:.1f} |")
    print(f"| in-loop benchmarks, all runs with DVCLive | {total:.1f} |")
    for replica in sorted((project / "runs").glob("scout@*#seed*.json")):
        print(f"| seed replica {replica.stem} (its whole training) | {json.loads(replica.read_text())['seconds']:.1f} |")

    results = json.loads((project / "data" / "evaluate" / "results.json").read_text())
    scored = {n: b for n, b in results["benchmarks"].items() if "metrics" in b}
    items = {b["items"] for b in scored.values()}
    print(f"\nstandard error of each metric over the benchmarks' {sorted(items)} items (lm-eval, full run), and "
          f"at other item counts (x sqrt(n / m)):\n")
    metrics = ("acc", "acc_norm", "prob_norm", "bpb")
    print("| items | " + " | ".join(f"{m} stderr (mean over benchmarks)" for m in metrics) + " |")
    print("|" + " --- |" * (len(metrics) + 1))
    n = max(items)
    mean_se = {m: sum(b["metrics"][m]["all_stderr"] for b in scored.values() if m in b["metrics"]) /
               sum(1 for b in scored.values() if m in b["metrics"]) for m in metrics}
    for m_items in (24, 50, 100, 200, 1000):
        print(f"| {m_items} | " + " | ".join(f"{mean_se[m] * math.sqrt(n / m_items):.4f}" for m in metrics) + " |")


if __name__ == "__main__":
    main()
