"""DVC stage `report`: reports/index.html with its plots, from the lineage, the runs, the forecast and the
evaluation.

Usage (dvc.yaml): python stages/report.py <forecast stage> <evaluate stage>
"""

import sys

from tokenmill.report import build_report
from tokenmill.runtime import StageRun, input_id, script


def main(forecast_stage: str, evaluate_stage: str) -> int:
    # A StageRun like every other stage: reports/ swapped in whole, its manifest, and a run record in runs/
    # (so the audit's stage_runs has a row for the report too).
    with StageRun("report", "reports", {}, libraries=("matplotlib",)) as run:
        run.input_hashes.update({name: input_id(path) for name, path in (
            ("lineage", "lineage"), (forecast_stage, f"data/{forecast_stage}"), (evaluate_stage, f"data/{evaluate_stage}"))})
        built = build_report(".", run.tmp, forecast=f"data/{forecast_stage}/prediction.json",
                             evaluation=f"data/{evaluate_stage}/results.json")
        # The forecast's error once the full run has trained (the prediction itself is metrics/forecast.json).
        # Its actual - predicted is `residual` here: DVC reads any metric key named `error` as a failure to load
        # the file ("DVC failed to load some metrics", dvc.utils.errored_revisions).
        comparison = built.get("forecast_comparison") or {}
        run.metrics["forecast_error"] = {name: comparison[k] for name, k in (
            ("predicted_loss", "predicted_loss"), ("actual_loss", "actual_loss"), ("residual", "error"),
            ("relative_error", "relative_error")) if k in comparison}
    print(f"report: reports/index.html ({len(built.get('images', []))} plots)")
    if comparison:
        print(f"report: forecast {comparison['predicted_loss']:.3f}, actual {comparison['actual_loss']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(script(main))
