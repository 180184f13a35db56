"""The decision page: which experiment to take, and how sure that is, on one HTML page with plots.

`tokenmill compare <experiments> --html <dir>` writes <dir>/index.html (and plots/*.png):
  ranking     per metric: every experiment's value with its training noise (±2σ bars), each pair's
              difference with its bootstrap interval over items and its σ, and the verdict (the winner, or
              "no winner: the difference is within the noise"); the data each experiment trained on.
  search      for every mixture search under searches (tokenmill.search): the swarm's measured loss
              per held-out bucket against that bucket's weight, with the fitted law's response along the
              same bucket's weight (the others scaled to make room); the proposal against the preset, its
              predicted interval and the verifying scout's measured value.
  forecast    the scaling forecast of this workspace's full run with its interval against the actual loss
              (the report's own section, tokenmill.report.sections.scaling).
A part whose input does not exist says "not run" and why, as the report's sections do.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from tokenmill.evaluate import track
from tokenmill.report import forecast_section, publish, sections as S, start
from tokenmill.search import Fit

K_SIGMA = 2.0  # as tokenmill.evaluate.compare: the bars show the band a difference must leave


def ranking(plots: S.Plots, result: Mapping, data: Sequence[Mapping], index: int) -> S.Section:
    m = result["metric"]
    s = S.Section(f"ranking-{index}", f"Ranking on {m}", note=f"{'lower' if result['lower_is_better'] else 'higher'} "
                  f"is better. Verdict: {result['verdict']}")
    names = [r["name"] for r in result["ranking"]]
    values = [r["value"] for r in result["ranking"]]
    sigma = [K_SIGMA * r["sigma_training"] for r in result["ranking"]]
    fig, ax = S.plt.subplots(figsize=(7, 0.5 + 0.45 * len(names)))
    y = np.arange(len(names))[::-1]
    colors = [S.OTHER if n == result["winner"] else S.KEPT for n in names]
    ax.errorbar(values, y, xerr=sigma, fmt="none", ecolor="#999999", capsize=4)
    ax.scatter(values, y, color=colors, zorder=3)
    ax.set_yticks(y, names)
    ax.set_xlabel(f"{m} (bars: ±{K_SIGMA:g}σ of the training noise)")
    s.images.append(plots.save(fig, f"ranking_{index}"))
    s.html.append(S.table(["rank", "experiment", "value", "training noise σ"],
                          [(str(i + 1), r["name"], r["value"], r["sigma_training"])
                           for i, r in enumerate(result["ranking"])], numeric_from=2))
    s.html.append(S.table(["pair", "difference", "95% interval over items", "σ items", "σ training", "items",
                           "difference / σ", "judged"],
                          [(f"{p['a']} - {p['b']}", p["difference"], f"[{p['interval'][0]:+.4f}, {p['interval'][1]:+.4f}]",
                            p["sigma_items"], f"{p['sigma_training_a']:.4f} / {p['sigma_training_b']:.4f}", p["items"],
                            abs(p["difference"]) / p["sigma"] if p["sigma"] else None,
                            "separated" if p["separated"] else "within the noise") for p in result["pairs"]]))
    s.html.append(f"<p><b>{S.esc(result['verdict'])}</b></p>")
    if result.get("track_record"):  # a verdict made at a scout rung: how often that rung was the full run's
        s.html.append(f"<p>{S.esc(result['track_record'])}</p>")
    buckets = sorted({b for d in data for b in d["planned"]})
    if buckets:
        s.html.append(S.table(["experiment", "documents", "held out", *(f"{b} tokens" for b in buckets)],
                              [(d["name"], d["unique_documents"], d["heldout_documents"],
                                *(d["planned"].get(b, 0) for b in buckets)) for d in data]))
    return s


def search_section(plots: S.Plots, found: Mapping, index: int, project: str | Path = ".") -> S.Section:
    """One mixture search (searches/<name>.json): the fitted response per bucket and the proposal."""
    s = S.Section(f"search-{index}", f"Mixture search: {found['name']}",
                  note=f"{found['runs']} scout-only experiments ({found['rung']}, one seed each) around "
                       f"{found['preset']}'s {found['phase']} weights on commit {found['commit'][:10]}; the law "
                       f"log L_b = t_b·w fitted per held-out bucket (leave-one-out error "
                       f"{found['fit']['loo']['rmse']:.4f} against {found['fit']['loo']['naive_rmse']:.4f} for "
                       f"the swarm's mean).")
    buckets, responses = found["buckets"], found["responses"]
    model = Fit(buckets=buckets, responses=responses, coef=found["fit"]["coef"])
    proposal = np.array([found["proposal"][b] for b in buckets])
    fig, axes = S.plt.subplots(1, len(responses), figsize=(3.2 * len(responses), 3.2), squeeze=False)
    for ax, r in zip(axes[0], responses):
        # The response to the same bucket's weight when it exists; otherwise to the weight that moves it most.
        j = buckets.index(r) if r in buckets else int(np.argmax(np.abs(model.coef[r])))
        xs = [row["weights"][buckets[j]] for row in found["swarm"]]
        ax.scatter(xs, [row["heldout_loss"][r] for row in found["swarm"]], color=S.KEPT, s=14, label="swarm")
        grid = np.linspace(min(xs), max(xs), 50)
        curve = []
        for g in grid:  # bucket j at g, the others in the proposal's proportions
            w = proposal * (1 - g) / max(1e-12, 1 - proposal[j])
            w[j] = g
            curve.append(model.predict(w)[r])
        ax.plot(grid, curve, color="#777777", lw=1, label="fit")
        if "verified" in found:
            ax.scatter([found["proposal"][buckets[j]]], [found["verified"]["measured_buckets"][r]], marker="D",
                       color=S.OTHER, zorder=3, label="proposal, measured")
        ax.set_title(f"held-out {r}", fontsize=9)
        ax.set_xlabel(f"weight of {buckets[j]}", fontsize=8)
        ax.set_ylabel("loss", fontsize=8)
    axes[0][0].legend(fontsize=7)
    s.images.append(plots.save(fig, f"search_{index}"))
    s.html.append(S.table(["bucket", "preset", "proposal", "epoch cap", "swarm range"],
                          [(b, found["prior"][b], found["proposal"][b], found["caps"][b],
                            f"{min(r['weights'][b] for r in found['swarm']):.3f}–"
                            f"{max(r['weights'][b] for r in found['swarm']):.3f}") for b in buckets]))
    s.html.append(f"<p>{S.esc(track.line(track.load(project), found['rung'], 'heldout_mean'))}</p>")
    lo, hi = found["interval"]
    verified = found.get("verified")
    s.html.append(S.table(["", "held-out mean loss"], [
        ("the preset, predicted", found["prior_predicted"]),
        ("the swarm's best, measured", found["swarm_best"]),
        ("the proposal, predicted", found["predicted"]),
        ("its 90% interval (bootstrap over the swarm)", f"[{lo:.4f}, {hi:.4f}]"),
        ("the proposal, measured" + (f" ({verified.get('seeds', 1)} seed(s))" if verified else ""),
         verified["measured"] if verified else "not run"),
    ]))
    if verified and "gain" in verified:  # a search made before the preset was verified beside it has none
        rows = []
        for key, what in (("gain", "held-out mean loss"), ("benchmarks_bpb_gain", "benchmarks' bits per byte")):
            if key in verified:
                g = verified[key]
                paired = "—" if g["paired_sigma"] is None else f"± {g['paired_sigma']:.4f}"
                rows.append((what, g["preset"], g["proposal"], f"{g['gain']:+.4f} ± {g['sigma']:.4f}", paired))
        s.html.append(S.table([f"measured at {found['rung']}, {verified['seeds']} seed(s)", "the preset",
                               "the proposal", "gain (positive: the proposal is better) ± σ",
                               "σ of the per-seed differences"], rows))
    return s


def value_section(cards: Sequence[Mapping]) -> S.Section:
    """The value cards `tokenmill value` wrote (reports/value/*.json), one row per source: what it adds."""
    s = S.Section("value", "What each source adds (value cards)",
                  note="From the lineage and the source's text (`tokenmill value <source>`): documents and tokens kept, "
                       "the share dedup dropped and whose copies they were, template lines, bytes per token, PII, "
                       "toxicity and benchmark overlap. A card needs no training run; the paired scout runs and the "
                       "anneal test say what the tokens are worth to the model.")
    rows = []
    for c in cards:
        src, tok, dup = c["source"], c["tokens"], c["duplicates"]
        rep, tz, cont = c.get("repetition") or {}, c.get("tokenizer") or {}, c.get("contamination") or {}
        rows.append((src["source"], src["licence"] or "–", src["records"], tok["kept"], tok["share_of_plan"],
                     dup["rate"], f"{dup['copies_within_source']:,} / {dup['copies_of_the_rest']:,}",
                     (rep.get("source") or {}).get("template_share"), (rep.get("rest") or {}).get("template_share"),
                     (tz.get("source") or {}).get("bytes_per_token"), (tz.get("rest") or {}).get("bytes_per_token"),
                     c["pii"]["redacted"], c["toxicity"]["share"], cont.get("documents", 0)))
    s.html.append(S.table(["source", "licence", "records", "tokens kept", "share of plan", "dedup dropped",
                           "copies: own / rest's", "template lines", "rest", "bytes/token", "rest", "PII redacted",
                           "toxicity-tagged", "benchmark overlap"], rows, numeric_from=2))
    for c in cards:  # the paired scout runs, where `--paired` ran: the gain of adding the source per metric
        pr = c.get("paired")
        if pr:
            s.html.append(f"<h3>{S.esc(c['source']['source'])}: with and without it at {S.esc(pr['rung'])}, "
                          f"{pr['seeds']} seed(s) each (gain = without - with; positive: better with it)</h3>")
            s.html.append(S.table(["metric", "with", "without", "gain", "σ", "paired σ", "verdict"],
                                  [(r["metric"], r["with"], r["without"], r["gain"], r["sigma"], r["paired_sigma"],
                                    r["verdict"]) for r in pr["metrics"]], numeric_from=1))
            lines = [r["track_record"] for r in pr["metrics"] if r["track_record"]]
            s.html.extend(f"<p>{S.esc(x)}</p>" for x in lines)
        for name, a in (c.get("anneals") or {}).items():  # the anneal stage's test of the source
            s.html.append(f"<h3>{S.esc(c['source']['source'])}: anneal test {S.esc(name)}, {a['share']:g} of the "
                          f"{S.esc(a['phase'])} phase, {a['steps_per_arm']} steps per arm "
                          f"({a['cost']['fraction_of_full_run']:.1%} of the full run; difference = with - without)</h3>")
            s.html.append(S.table(["figure", "with", "without", "difference", "σ", "paired σ", "better (beyond 2σ)"],
                                  [(r["metric"], r["with"], r["without"], r["difference"], r["sigma"],
                                    r.get("paired_sigma"), r["verdict"]) for r in a["verdicts"]], numeric_from=1))
    return s


def build_decision_page(out_dir: str | Path, comparisons: Sequence[Mapping], data: Sequence[Mapping],
                        searches: Sequence[Path] = (), project: str | Path = ".",
                        title: str = "tokenmill: which experiment to take") -> dict:
    """Write the page; return {sections, not_run, images} as the report does."""
    out_dir, project = Path(out_dir), Path(project)
    plots = start(out_dir)
    built = [ranking(plots, r, data, i) for i, r in enumerate(comparisons)]
    if searches:
        built += [search_section(plots, json.loads(Path(p).read_text()), i, project) for i, p in enumerate(searches)]
    else:
        built.append(S._not_run(S.Section("search", "Mixture search"),
                                "no searches/*.json here: `tokenmill search` has not run"))
    built.append(forecast_section(plots, project, project / "data" / "forecast" / "prediction.json")[0])
    cards = [json.loads(p.read_text()) for p in sorted((project / "reports" / "value").glob("*.json"))]
    built.append(value_section(cards) if cards else
                 S._not_run(S.Section("value", "What each source adds (value cards)"),
                            "no reports/value/*.json here: `tokenmill value <source>` has not run"))
    return publish(out_dir, title, built, "decision.json")
