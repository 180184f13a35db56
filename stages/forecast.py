"""DVC stage `forecast`: the full run's held-out loss predicted from the scouts, before the full run trains.

Usage (dvc.yaml): python stages/forecast.py
It reads the scouts' summaries (data/train/scout/<name>), the full run's size (model, train) with the
vocabulary of data/tokenize and the plan of data/mixture; nothing of the full run itself. Where the record of
earlier full runs of this ladder and shape (benchmarks/decision/forecast_record.json) holds other recipes, the
law's forecast is moved by how far it missed them (tokenmill.forecast.record).
"""

import sys

from tokenmill.forecast import forecast_metrics, forecast_project, forecast_summary
from tokenmill.runtime import StageRun, input_id, load_params, script, write_json


def main() -> int:
    p = load_params("forecast", "scouts", "model", "train", "mixture")
    with StageRun("forecast", "data/forecast", p, libraries=("numpy", "scipy")) as run:
        for name in p["scouts"]:
            run.input_hashes[f"scout@{name}"] = input_id(f"data/train/scout/{name}")
        run.input_hashes.update({"tokenize": input_id("data/tokenize"), "mixture": input_id("data/mixture")})
        prediction = forecast_project(p, "data")
        write_json(run.tmp / "prediction.json", prediction)  # what the report sets the actual loss beside
        run.metrics.update(forecast_metrics(prediction))
    print(f"forecast: {forecast_summary(prediction)}")
    return 0


if __name__ == "__main__":
    sys.exit(script(main))
