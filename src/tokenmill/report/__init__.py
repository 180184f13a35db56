"""The report: one HTML page with PNG plots that a person opens in a browser (reports/index.html).

build_report reads what the pipeline produced — the lineage database (documents, decisions, plan,
contamination; the audit connection adds the training runs' tables), DVCLive's logs for tokens/s, the
scaling forecast and the evaluation results — and writes

    <out_dir>/index.html         the sections below, each with its plots and tables
    <out_dir>/plots/*.png        the figures (matplotlib, Agg backend)
    <out_dir>/report.json        which sections were built and which were not run, and the images

Sections: data funnel (documents and tokens per stage, drop reasons), languages, quality scores, duplicate
clusters, mixture planned vs available, contamination, training curves and spikes of every run, the
scaling fit with the forecast (and the actual loss once the full run finished), the evaluation with all
and clean columns, and the annealing tests (a source added at the decay, with against without). An input that does not exist yet (no evaluation, no forecast) makes its section say
"not run" and why; it never stops the report. The folder is written under a temporary name and renamed.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tokenmill.anneal import read_results
from tokenmill.evaluate import track
from tokenmill.evaluate.signal import CANDIDATES, ladder_table, read_ladder
from tokenmill.forecast import ForecastError, compare
from tokenmill.lineage import DB_NAME, audit_tables, connect
from tokenmill.report import sections as S

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1200px; color: #222; }
h1 { margin-bottom: 0.2em; } h2 { border-bottom: 1px solid #ccc; padding-bottom: 0.2em; margin-top: 2em; }
nav a { margin-right: 1em; } .notrun { color: #a33; font-weight: bold; } .note { color: #555; }
table { border-collapse: collapse; margin: 0.8em 0; font-size: 0.9em; }
th, td { border: 1px solid #ddd; padding: 3px 8px; } th { background: #f3f3f3; }
td.num { text-align: right; font-variant-numeric: tabular-nums; } td.txt { max-width: 40em; overflow-wrap: anywhere; }
img { max-width: 100%; display: block; }
"""


def build_report(project: str | Path = ".", out_dir: str | Path = "reports", *, lineage_db: str | Path | None = None,
                 forecast: str | Path | None = None, evaluation: str | Path | None = None,
                 title: str = "tokenmill report") -> dict:
    """Write the report of the project at `project` into out_dir; return report.json's content.

    lineage_db: default <project>/lineage/lineage.duckdb (required: the report is about its data).
    forecast: the forecast JSON (tokenmill.forecast.fit_and_predict's result); the full run's
    data/train/pretrain/summary.json, when it exists, gives the actual loss to compare with.
    evaluation: the evaluate stage's results.json. Either missing: its section says "not run".
    """
    project, out_dir = Path(project), Path(out_dir)
    db = Path(lineage_db) if lineage_db else project / "lineage" / DB_NAME
    forecast_path = Path(forecast) if forecast else None
    evaluation_path = Path(evaluation) if evaluation else None
    plots = start(out_dir)

    # The training tables come from this project's data/train, wherever the database file lies.
    con = connect(db, extra=audit_tables(project))  # FileNotFoundError naming a missing database
    try:
        built = [S.funnel(con, plots), S.languages(con, plots), S.quality(con, plots), S.duplicates(con, plots),
                 S.domains(con, plots),
                 S.mixture(con, plots), S.contamination(con, plots), S.training(con, plots, project), S.canaries(con, plots)]
    finally:
        con.close()

    scaling, comparison = forecast_section(plots, project, forecast_path)
    built.append(scaling)
    built.append(S.evaluation(S.read_json(evaluation_path),
                              f"no evaluation results at {evaluation_path}: the evaluate stage has not run"
                              if evaluation_path else "no evaluation results given"))
    ladder = read_ladder(project / "data" / "train")
    rows = ladder_table(ladder, CANDIDATES)
    built.append(S.signal_noise(ladder, rows, track.decision_metric(track.load(project))))  # as the evaluate stage
    built.append(S.anneals(read_results(project / "data" / "anneal")))
    built.append(S.context_use(project))

    return publish(out_dir, title, built, "report.json", forecast_comparison=comparison)


def start(out_dir: Path) -> S.Plots:
    """A page's folder, emptied: a page replaces the last one whole. The report stage passes its StageRun's
    fresh temporary folder, which the StageRun swaps in (one swap, the stage contract's)."""
    if out_dir.exists():
        shutil.rmtree(out_dir)
    out_dir.mkdir(parents=True)
    return S.Plots(out_dir)


def publish(out_dir: Path, title: str, built: list[S.Section], summary_name: str, **extra) -> dict:
    """index.html and the summary (which sections were built, which not and why, the images, `extra`)."""
    (out_dir / "index.html").write_text(render(title, built), encoding="utf-8")
    summary = {"sections": {s.key: s.status for s in built},
               "not_run": {s.key: s.note for s in built if s.status != "ok"},
               "images": sorted(f"plots/{i}" for s in built for i in s.images), **extra}
    (out_dir / summary_name).write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
    return summary


def forecast_section(plots: S.Plots, project: Path, forecast_path: Path | None) -> tuple[S.Section, dict | None]:
    """The scaling section: the forecast at forecast_path against the full run's actual loss, once it trained."""
    prediction = S.read_json(forecast_path)
    actual = S.read_json(project / "data" / "train" / "pretrain" / "summary.json")
    comparison, incomparable = None, None
    if prediction is not None and actual is not None:
        try:
            comparison = compare(prediction, actual)
        except ForecastError as exc:  # e.g. the full run reports other held-out buckets: shown, not fatal
            incomparable = str(exc)
    missing = (f"no forecast at {forecast_path}: the forecast stage has not run" if forecast_path
               else "no forecast given")
    return S.scaling(plots, prediction, comparison, incomparable, missing), comparison


def render(title: str, built: list[S.Section]) -> str:
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">', f"<title>{S.esc(title)}</title>",
             f"<style>{STYLE}</style></head><body>", f"<h1>{S.esc(title)}</h1>", "<nav>",
             *(f'<a href="#{s.key}">{S.esc(s.title)}</a>' for s in built), "</nav>"]
    for s in built:
        parts.append(f'<section id="{s.key}"><h2>{S.esc(s.title)}</h2>')
        if s.status != "ok":
            parts.append(f'<p class="notrun">Not run: {S.esc(s.note)}</p></section>')
            continue
        if s.note:
            parts.append(f'<p class="note">{S.esc(s.note)}</p>')
        parts.extend(f'<img src="plots/{S.esc(i)}" alt="{S.esc(s.title)}: {S.esc(i)}">' for i in s.images)
        parts.extend(s.html)
        parts.append("</section>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"
