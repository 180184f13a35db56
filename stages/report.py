"""DVC stage `report`: reports/index.html with its plots, from the lineage, the runs, the forecast and the
evaluation.

Usage (dvc.yaml): python stages/report.py <forecast stage> <evaluate stage>
"""

import sys

from tokenmill.report import build_report
from tokenmill.runtime import script, write_json


def main(forecast_stage: str, evaluate_stage: str) -> int:
    built = build_report(".", "reports", forecast=f"data/{forecast_stage}/prediction.json",
                         evaluation=f"data/{evaluate_stage}/results.json")
    # The forecast's error once the full run has trained (the prediction itself is metrics/forecast.json).
    comparison = built.get("forecast_comparison") or {}
    write_json("metrics/report.json", {"forecast_error": {k: comparison[k] for k in (
        "predicted_loss", "actual_loss", "error", "relative_error") if k in comparison}})
    print(f"report: reports/index.html ({len(built.get('images', []))} plots)")
    if comparison:
        print(f"report: forecast {comparison['predicted_loss']:.3f}, actual {comparison['actual_loss']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(script(main))
