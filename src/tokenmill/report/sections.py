"""The report's sections: each reads its inputs, draws its plots (PNG, matplotlib's Agg backend) and returns
the HTML of its tables. A section whose input does not exist yet says so ("not run") instead of failing.

Every figure is drawn by a function of plain Python data, so a section's SQL and its plot stay side by side.
"""

from __future__ import annotations

import csv
import html
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping, Sequence

import matplotlib

matplotlib.use("Agg")  # no display: the report is built by a DVC stage on a headless machine

import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)
import matplotlib.ticker  # noqa: E402
import numpy as np

from tokenmill.forecast import law
from tokenmill.forecast import record as forecast_record
from tokenmill.lineage import canary_exposure

KEPT, DROPPED, OTHER = "#4C72B0", "#DD8452", "#55A868"


@dataclass
class Section:
    key: str
    title: str
    status: str = "ok"  # ok | not run
    note: str = ""  # why it was not run, or what the numbers mean
    html: list[str] = field(default_factory=list)
    images: list[str] = field(default_factory=list)  # file names under the plots folder


class Plots:
    """Writes figures into out_dir/plots and remembers their names."""

    def __init__(self, out_dir: Path):
        self.dir = out_dir / "plots"
        self.dir.mkdir(parents=True, exist_ok=True)

    def save(self, fig, name: str) -> str:
        fig.tight_layout()
        # No "Software" text chunk: the same data gives the same bytes whatever matplotlib wrote it.
        fig.savefig(self.dir / f"{name}.png", dpi=100, metadata={"Software": None})
        plt.close(fig)
        return f"{name}.png"


# ---------------------------------------------------------------------------------------------------------
# HTML helpers


def esc(value) -> str:
    return html.escape("" if value is None else str(value))


def fmt(value, digits: int = 4) -> str:
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if not math.isfinite(value):
            return str(value)
        if value != 0 and (abs(value) >= 1e6 or abs(value) < 1e-3):
            return f"{value:.3e}"
        return f"{value:.{digits}g}"
    return str(value)


def table(header: Sequence[str], rows: Iterable[Sequence], numeric_from: int = 1) -> str:
    out = ["<table><thead><tr>", *(f"<th>{esc(h)}</th>" for h in header), "</tr></thead><tbody>"]
    for row in rows:
        out.append("<tr>" + "".join(
            f'<td class="{"num" if i >= numeric_from else "txt"}">{esc(v if isinstance(v, str) else fmt(v))}</td>'
            for i, v in enumerate(row)) + "</tr>")
    out.append("</tbody></table>")
    return "".join(out)


def _tables(con) -> set[str]:
    return {r[0] for r in con.execute("SHOW TABLES").fetchall()}


def _not_run(section: Section, why: str) -> Section:
    section.status, section.note = "not run", why
    return section


# ---------------------------------------------------------------------------------------------------------
# Data half: funnel, languages, quality, duplicates, mixture, contamination


def funnel(con, plots: Plots) -> Section:
    s = Section("funnel", "Data funnel")
    stages = con.execute("""SELECT stage, documents_in, documents_out FROM stages
                            WHERE stage_order IS NOT NULL ORDER BY stage_order""").fetchall()
    if not stages:
        return _not_run(s, "the lineage holds no document stage")
    # Tokens per stage: only the token stage counts tokens; before it they are estimated from the text
    # length at ingest (text_chars) at the corpus's own tokens per character, measured on every tokenized
    # document (token_index length over its final text length).
    chars = dict(con.execute("""
        SELECT o.stage, sum(d.scores['text_chars']) FROM stage_outputs o
        JOIN decisions d ON d.doc_id = o.doc_id AND d.stage = 'ingest' GROUP BY ALL""").fetchall())
    tables = _tables(con)
    per_char = tokenized = planned = None
    if "token_index" in tables:
        tokenized, text = con.execute("""SELECT sum(t.length), sum(d.final_text_chars) FROM token_index t
                                         JOIN documents d USING (doc_id)""").fetchone()
        per_char = tokenized / text if text else None
    if "plan" in tables:
        planned = con.execute("SELECT sum(length) FROM plan").fetchone()[0]
    drops = con.execute("""SELECT stage, reason, count(*) FROM decisions WHERE action = 'drop'
                           GROUP BY ALL ORDER BY min(stage_order), 3 DESC, reason""").fetchall()

    names = [r[0] for r in stages]
    kept = [r[2] for r in stages]
    dropped = [r[1] - r[2] for r in stages]
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    y = range(len(names))[::-1]
    axes[0].barh(list(y), kept, color=KEPT, label="out")
    axes[0].barh(list(y), dropped, left=kept, color=DROPPED, label="dropped")
    axes[0].set_yticks(list(y), names)
    axes[0].set_xlabel("documents")
    axes[0].set_title("documents in per stage: out + dropped")
    axes[0].legend(loc="lower right")
    est = [(chars.get(n) or 0) * per_char for n in names] if per_char else []
    labels = names + (["tokenized"] if tokenized else []) + (["planned (training)"] if planned else [])
    values = est + ([tokenized] if tokenized else []) + ([planned] if planned else [])
    if values:
        yy = range(len(values))[::-1]
        colors = [OTHER] * len(est) + [KEPT] * (len(values) - len(est))
        axes[1].barh(list(yy), values, color=colors)
        axes[1].set_yticks(list(yy), labels if est else labels[len(names):])
        axes[1].set_xlabel("tokens")
        axes[1].set_title("tokens after each stage (green: estimated)")
    else:
        axes[1].set_axis_off()
    s.images.append(plots.save(fig, "funnel"))
    s.html.append(table(["stage", "documents in", "out", "dropped", "tokens out (estimated)"],
                        [(n, i, o, i - o, round((chars.get(n) or 0) * per_char) if per_char else None)
                         for n, i, o in stages]))
    if per_char:
        s.note = (f"Tokens before the token stage are estimated at {per_char:.3f} tokens per character (measured "
                  f"on the tokenized documents); {tokenized:,} tokens were tokenized"
                  + (f" and {planned:,} planned for training (with repeats)." if planned else "."))
    s.html.append("<h3>Drop reasons</h3>")
    s.html.append(table(["stage", "reason", "documents"], drops, numeric_from=2))
    return s


def languages(con, plots: Plots) -> Section:
    s = Section("languages", "Languages (filter stage)")
    rows = con.execute("""
        SELECT coalesce(json_extract_string(details, '$.language'), '(not identified)') AS language,
               count(*) FILTER (WHERE action <> 'drop') AS kept, count(*) FILTER (WHERE action = 'drop') AS dropped
        FROM decisions WHERE stage = 'filter' GROUP BY ALL ORDER BY kept + dropped DESC, language""").fetchall()
    if not rows:
        return _not_run(s, "no filter decisions in the lineage")
    scores = con.execute("""SELECT action, scores['language_score'] FROM decisions
                            WHERE stage = 'filter' AND scores['language_score'] IS NOT NULL""").fetchall()
    top = rows[:15]
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    y = list(range(len(top)))[::-1]
    axes[0].barh(y, [r[1] for r in top], color=KEPT, label="kept")
    axes[0].barh(y, [r[2] for r in top], left=[r[1] for r in top], color=DROPPED, label="dropped")
    axes[0].set_yticks(y, [r[0] for r in top])
    axes[0].set_xlabel("documents")
    axes[0].set_title("identified language (fastText lid.176)")
    axes[0].legend(loc="lower right")
    _histogram(axes[1], scores, "language score (confidence of the identified language)")
    s.images.append(plots.save(fig, "languages"))
    s.note = ("The language the filter identified; dropped counts every filter rule, not only the language rule. "
              "Buckets that skip language identification have none. The table lists every language, the plot "
              "the 15 most frequent.")
    s.html.append(table(["language", "kept", "dropped"], rows))
    return s


def _histogram(ax, action_values: Sequence[tuple[str, float]], xlabel: str, bins: int = 20) -> None:
    kept = [v for a, v in action_values if a != "drop" and v is not None]
    dropped = [v for a, v in action_values if a == "drop" and v is not None]
    if not kept and not dropped:
        ax.text(0.5, 0.5, "no scores", ha="center", va="center")
        return
    lo, hi = min(kept + dropped), max(kept + dropped)
    edges = [lo + (hi - lo) * i / bins for i in range(bins + 1)] if hi > lo else bins
    ax.hist([kept, dropped], bins=edges, stacked=True, color=[KEPT, DROPPED], label=["kept", "dropped"])
    ax.set_xlabel(xlabel)
    ax.set_ylabel("documents")
    ax.legend()


def quality(con, plots: Plots) -> Section:
    s = Section("quality", "Quality scores")
    rows = con.execute("""SELECT r.bucket, d.action, d.scores['quality_score'] FROM decisions d
                          JOIN records r USING (doc_id)
                          WHERE d.stage = 'quality' AND d.scores['quality_score'] IS NOT NULL""").fetchall()
    if not rows:
        return _not_run(s, "no quality scores in the lineage (the quality stage has not run)")
    buckets = sorted({r[0] for r in rows})
    fig, axes = plt.subplots(1, len(buckets), figsize=(3.6 * len(buckets) + 1, 3.4), squeeze=False)
    for ax, bucket in zip(axes[0], buckets):
        _histogram(ax, [(a, v) for b, a, v in rows if b == bucket], "P(high quality)")
        ax.set_title(bucket)
    s.images.append(plots.save(fig, "quality"))
    summary = con.execute("""
        SELECT r.bucket, d.reason, count(*), min(d.scores['quality_score']), median(d.scores['quality_score']),
               max(d.scores['quality_score'])
        FROM decisions d JOIN records r USING (doc_id) WHERE d.stage = 'quality'
        GROUP BY ALL ORDER BY 1, 2""").fetchall()
    s.html.append(table(["bucket", "decision", "documents", "min score", "median", "max"], summary, numeric_from=2))
    s.note = "The fastText classifier's P(high quality) for every document that reached the stage, kept or not."
    return s


def duplicates(con, plots: Plots) -> Section:
    s = Section("duplicates", "Duplicate clusters")
    # A near-duplicate cluster's size is on its kept representative; an exact group is its representative
    # plus the exact duplicates that name it.
    near = [r[0] for r in con.execute("""
        SELECT CAST(json_extract(details, '$.cluster_size') AS BIGINT) FROM decisions
        WHERE stage = 'dedup' AND action <> 'drop'
          AND json_extract(details, '$.cluster_size') IS NOT NULL""").fetchall()]
    exact = [r[0] for r in con.execute("""
        SELECT 1 + count(*) FROM decisions WHERE stage = 'dedup' AND reason = 'exact_duplicate'
        GROUP BY json_extract_string(details, '$.duplicate_of')""").fetchall()]
    counts = dict(con.execute("SELECT reason, count(*) FROM decisions WHERE stage = 'dedup' GROUP BY ALL").fetchall())
    if not counts:
        return _not_run(s, "no dedup decisions in the lineage")
    fig, ax = plt.subplots(figsize=(7, 3.4))
    sizes = sorted(set(near) | set(exact)) or [2]
    width = 0.4
    ax.bar([x - width / 2 for x in sizes], [near.count(x) for x in sizes], width, color=KEPT, label="near (MinHash)")
    ax.bar([x + width / 2 for x in sizes], [exact.count(x) for x in sizes], width, color=DROPPED, label="exact")
    ax.set_xlabel("documents in the cluster")
    ax.set_ylabel("clusters")
    ax.set_xticks(sizes)
    ax.legend()
    s.images.append(plots.save(fig, "duplicates"))
    s.html.append(table(["dedup decision", "documents"], sorted(counts.items())))
    kinds = [("near", len(near), sum(near), max(near, default=None)),
             ("exact", len(exact), sum(exact), max(exact, default=None))]
    if "semantic_duplicates" in _tables(con):
        kinds.append(("semantic (after MinHash)", *con.execute("""
            SELECT count(DISTINCT cluster), count(*), max(cluster_size) FROM semantic_duplicates""").fetchone()))
    s.html.append(table(["cluster kind", "clusters", "documents in them", "largest"], kinds))
    if "semantic_duplicates" in _tables(con):
        examples = con.execute("""
            SELECT s.doc_id, r.url, s.cluster, k.url, s.cluster_size, s.similarity, s.action
            FROM semantic_duplicates s JOIN records r USING (doc_id) JOIN records k ON k.doc_id = s.cluster
            WHERE NOT s.kept ORDER BY s.cluster_size DESC, s.cluster, s.similarity DESC LIMIT 20""").fetchall()
        s.html.append("<h3>Semantic duplicates: the same meaning in other words (embedding back-check, "
                      "largest clusters first)</h3>")
        s.html.append(table(["doc_id", "url", "kept doc_id", "kept url", "cluster size", "cosine to nearest",
                             "action"], examples, numeric_from=4)
                      if examples else "<p>No semantic duplicate at backcheck.duplicates.threshold.</p>")
        s.note = ("Semantic duplicates are found after MinHash, from the embed stage's vectors; a cluster keeps "
                  "its longest document, and the others are only reported unless backcheck.duplicates.action "
                  "is drop. Embedding similarity also joins templated pages and pages on one topic: review "
                  "before dropping (precision per kind of pair: benchmarks/RESULTS.md, \"Embedding back-checks\").")
    return s


def mixture(con, plots: Plots) -> Section:
    s = Section("mixture", "Mixture: planned vs available tokens")
    if "plan_buckets" not in _tables(con):
        return _not_run(s, "no plan in the lineage (the mixture stage has not run)")
    rows = con.execute("""SELECT bucket, phase, available_tokens, planned_tokens, planned_documents,
                                 distinct_documents, epochs FROM plan_buckets ORDER BY bucket, phase""").fetchall()
    if not rows:
        return _not_run(s, "the plan is empty")
    buckets = sorted({r[0] for r in rows})
    phases = sorted({r[1] for r in rows if r[1] is not None})  # a bucket no phase weights has phase NULL
    available = {r[0]: r[2] for r in rows}
    planned = {(r[0], r[1]): r[3] for r in rows}
    fig, ax = plt.subplots(figsize=(8, 3.6))
    n = len(phases) + 1
    width = 0.8 / n
    xs = range(len(buckets))
    ax.bar([x - 0.4 + width / 2 for x in xs], [available[b] for b in buckets], width, color="#999999",
           label="available")
    for i, phase in enumerate(phases, start=1):
        ax.bar([x - 0.4 + width * (i + 0.5) for x in xs], [planned.get((b, phase), 0) for b in buckets], width,
               label=f"planned: {phase}")
    ax.set_xticks(list(xs), buckets)
    ax.set_yscale("log")
    ax.set_ylabel("tokens (log)")
    ax.legend(fontsize=8)
    s.images.append(plots.save(fig, "mixture"))
    s.html.append(table(["bucket", "phase", "available tokens", "planned tokens", "planned documents",
                         "distinct documents", "epochs"], rows, numeric_from=2))
    s.note = "epochs = planned / available tokens of the bucket in that phase; above 1 the plan repeats documents."
    return s


def domains(con, plots: Plots) -> Section:
    s = Section("domains", "Domains: topics, formats and the toxicity tag")
    if "topics" not in _tables(con):
        return _not_run(s, "no topics in the lineage (the domains stage has not run)")
    named = con.execute("SELECT topic, name, documents, examples FROM topics ORDER BY topic").fetchall()
    # The mix at the domains stage (every document it clustered) and in the plan (tokens the run reads).
    seen = con.execute("""SELECT topic, format, count(*) FROM documents WHERE labelled_by = 'clustered'
                          GROUP BY ALL""").fetchall()
    planned = []
    if "plan" in _tables(con):
        planned = con.execute("""SELECT d.topic, d.format, sum(p.length) FROM plan p JOIN documents d USING (doc_id)
                                 WHERE d.topic IS NOT NULL GROUP BY ALL""").fetchall()  # canaries: no topic
    topics = [t for t, *_ in named]
    formats = sorted({f for _, f, _ in seen if f is not None})
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.6))
    for ax, rows, unit in ((axes[0], seen, "documents labelled"), (axes[1], planned, "tokens planned")):
        total = sum(n for *_, n in rows) or 1
        bottom = np.zeros(len(topics))
        for f in formats:
            share = np.array([sum(n for t, ff, n in rows if t == topic and ff == f) / total for topic in topics])
            ax.bar(range(len(topics)), share, bottom=bottom, label=f)
            bottom += share
        ax.set_xticks(range(len(topics)), topics, rotation=90, fontsize=7)
        ax.set_ylabel(f"share of {unit}")
    axes[1].legend(fontsize=7)
    s.images.append(plots.save(fig, "domains"))
    by_topic = {t: (sum(n for tt, _, n in seen if tt == t), sum(n for tt, _, n in planned if tt == t)) for t in topics}
    plan_total = sum(n for *_, n in planned) or None
    s.html.append(table(["topic", "name", "documents", "share of planned tokens", "nearest its centre"],
                        [(t, name, n, None if plan_total is None else by_topic[t][1] / plan_total,
                          ", ".join(examples[:2])) for t, name, n, examples in named], numeric_from=2))
    s.html.append(table(["format", "documents", "share of planned tokens"],
                        [(f, sum(n for _, ff, n in seen if ff == f),
                          None if plan_total is None else sum(n for _, ff, n in planned if ff == f) / plan_total)
                         for f in formats]))
    tox = con.execute("""SELECT r.bucket, d.format, count(*), sum(CASE WHEN d.toxicity_tagged THEN 1 ELSE 0 END),
                                 max(d.toxicity)
                         FROM documents d JOIN records r USING (doc_id) WHERE d.labelled_by = 'clustered'
                         GROUP BY ALL ORDER BY 1, 2""").fetchall()
    s.html.append(table(["source bucket", "format", "documents", "toxicity-tagged", "highest score"], tox,
                        numeric_from=2))
    every_format = [f for (f,) in con.execute("SELECT DISTINCT format FROM documents WHERE format IS NOT NULL "
                                              "ORDER BY 1").fetchall()]  # a dropped document's may be new here
    for label, names in (("format", every_format), ("topic", topics)):
        header, rows = mix_per_stage(con, label, names)
        if rows:
            s.html.append(f"<h3>The {label} mix each stage kept and dropped</h3>")
            s.html.append(table(header, rows, numeric_from=2))
    tagged = con.execute("""SELECT doc_id, url, format, toxicity, dropped_at IS NOT NULL FROM documents
                            WHERE toxicity_tagged ORDER BY toxicity DESC LIMIT 10""").fetchall()
    if tagged:
        s.html.append(table(["tagged document", "url", "format", "toxicity", "dropped"], tagged, numeric_from=3))
    s.note = ("Topics are k-means clusters of the document embeddings, named by their most distinctive words; "
              "the toxicity score tags (and removes only where domains.toxicity.drop_above is set). A document an "
              "earlier stage dropped is labelled too, with the nearest topic (domains.label_dropped), so the mix "
              "per stage shows what each stage removed from each format and topic (shares of its documents; the "
              "plan: of its tokens); a record ingest dropped has no text and no label. Review a "
              "slice's tagged documents with `tokenmill audit sql`: the score's false positives per slice are in "
              "benchmarks/RESULTS.md, \"Toxicity\".")
    return s


def mix_per_stage(con, label: str, names: Sequence[str]) -> tuple[list[str], list[tuple]]:
    """Per document stage (in pipeline order) the documents it kept and those it dropped, each with the share of
    every value of `label` (format or topic) among them; then the plan's share of tokens. Unlabelled documents
    (records ingest dropped, which have no text) are counted on their own."""
    counts = con.execute(f"""SELECT dc.stage_order, dc.stage, dc.action = 'drop', d.{label}, count(*)
                             FROM decisions dc JOIN documents d USING (doc_id) GROUP BY ALL""").fetchall()
    if not any(value is not None for *_, value, _ in counts):
        return [], []
    stages = sorted({(order, stage) for order, stage, *_ in counts})
    rows = []
    for order, stage in stages:
        for dropped in (False, True):
            mine = {value: n for o, st, d, value, n in counts if o == order and d == dropped}
            total = sum(n for v, n in mine.items() if v is not None)
            if not mine:
                continue
            rows.append((stage, "dropped" if dropped else "kept", sum(mine.values()), mine.get(None, 0),
                         *(mine.get(v, 0) / total if total else None for v in names)))
    if "plan" in _tables(con):
        planned = dict(con.execute(f"""SELECT d.{label}, sum(p.length) FROM plan p JOIN documents d USING (doc_id)
                                       WHERE d.{label} IS NOT NULL GROUP BY ALL""").fetchall())
        total = sum(planned.values())
        if total:
            rows.append(("plan", "tokens", total, 0, *(planned.get(v, 0) / total for v in names)))
    return ["stage", "documents", "count", "unlabelled", *names], rows


def contamination(con, plots: Plots) -> Section:
    s = Section("contamination", "Contamination")
    if "contamination" not in _tables(con):
        return _not_run(s, "no contamination table in the lineage (the decontaminate stage has not run)")
    rows = con.execute("""
        SELECT benchmark, count(DISTINCT item_id) FILTER (WHERE contaminated) AS dirty_items,
               count(DISTINCT doc_id) FILTER (WHERE contaminated) AS documents,
               count(*) FILTER (WHERE status = 'near_miss') AS near_misses,
               count(DISTINCT item_id) FILTER (WHERE status = 'suspect') AS suspect_items,
               count(DISTINCT doc_id) FILTER (WHERE status = 'suspect') AS suspects,
               string_agg(DISTINCT action, ', ' ORDER BY action) AS action
        FROM contamination GROUP BY ALL ORDER BY benchmark""").fetchall()
    if not rows:
        s.note = "No document overlaps any configured benchmark item."
        return s
    s.html.append(table(["benchmark", "dirty items", "documents", "near misses (kept)", "suspect items",
                         "suspect documents", "action"], rows))
    if "benchmarks" in _tables(con):
        provenance = con.execute("""
            SELECT b.benchmark, b.origin, b.licence || CASE WHEN b.non_commercial THEN ' (non-commercial)' ELSE '' END,
                   b.items, b.items_in_source, count(DISTINCT c.item_id) FILTER (WHERE c.contaminated),
                   b.package || '==' || b.version
            FROM benchmarks b LEFT JOIN contamination c ON c.benchmark = b.benchmark
            GROUP BY ALL ORDER BY b.benchmark""").fetchall()
        if provenance:
            s.html.append("<h3>Real benchmarks: origin and licence</h3>")
            s.html.append(table(["benchmark", "origin", "licence", "items", "items in source", "dirty items",
                                 "read from"], provenance, numeric_from=3))
    top = con.execute("""
        SELECT c.benchmark, c.item_id, c.doc_id, r.url, c.overlap_fraction, c.contaminated
        FROM contamination c JOIN records r USING (doc_id) WHERE c.status <> 'suspect'
        ORDER BY c.contaminated DESC, c.overlap_fraction DESC, c.benchmark, c.item_id LIMIT 50""").fetchall()
    s.html.append("<h3>Overlaps (strongest 50)</h3>")
    s.html.append(table(["benchmark", "item", "doc_id", "url", "overlap", "contaminated"], top, numeric_from=4))
    suspects = con.execute("""
        SELECT c.benchmark, c.item_id, c.doc_id, r.url, coalesce(left(c.passage, 120), '(the whole document)'),
               c.similarity, c.action
        FROM contamination c JOIN records r USING (doc_id) WHERE c.status = 'suspect'
        ORDER BY c.similarity DESC, c.benchmark, c.item_id LIMIT 50""").fetchall()
    s.html.append("<h3>Suspects: nearest a benchmark item's meaning, not its words (embedding back-check, "
                  "strongest 50)</h3>")
    s.html.append(table(["benchmark", "item", "doc_id", "url", "nearest passage", "cosine", "action"], suspects,
                        numeric_from=5)
                  if suspects else "<p>No document is a suspect at backcheck.contamination.threshold.</p>")
    fig, ax = plt.subplots(figsize=(7, 3.2))
    fractions = [("drop" if c else "keep", f) for c, f in con.execute(
        "SELECT contaminated, overlap_fraction FROM contamination WHERE status <> 'suspect'").fetchall()]
    _histogram(ax, fractions, "overlap fraction of the item (n-grams found in the document)")
    ax.legend(["near miss", "contaminated"])
    s.images.append(plots.save(fig, "contamination"))
    return s


def canaries(con, plots: Plots) -> Section:
    """Exposure of the planted canaries against the visits each run trained (tokenmill.canaries)."""
    s = Section("canaries", "Memorisation of planted canaries")
    if "canaries" not in _tables(con):
        return _not_run(s, "no canaries in the lineage (tokenize.canaries.sets is 0, or the lineage predates them)")
    rows = canary_exposure(con)
    if not rows:
        return _not_run(s, "no training run has finished: exposure is measured in each run's final model")
    top = max(r["candidates"] for r in rows) + 1
    s.note = (f"Each canary is a random secret planted as a document and visited a set number of times. Exposure "
              f"(Carlini et al. 2019) is log2 of how much likelier the model finds the secret than random ones of "
              f"the same format: 0 bits is no memorisation, {math.log2(top):.1f} the most {top - 1} candidates "
              f"can show; the extrapolated value fits a normal to the candidates.")
    by: dict[tuple[str, int], list[dict]] = {}
    for r in rows:
        by.setdefault((r["run"], r["planned_visits"]), []).append(r)
    s.html.append(table(["run", "planned visits", "canaries", "trained visits (mean)", "exposure (mean bits)",
                         "extrapolated (mean bits)"],
                        [(run, v, len(g), sum(r["trained_visits"] for r in g) / len(g),
                          sum(r["exposure"] for r in g) / len(g), sum(r["exposure_fit"] for r in g) / len(g))
                         for (run, v), g in sorted(by.items())]))
    fig, ax = plt.subplots(figsize=(7, 3.6))
    for run in sorted({r["run"] for r in rows}):
        mine = [r for r in rows if r["run"] == run]
        ax.plot([r["trained_visits"] for r in mine], [r["exposure"] for r in mine], "o", alpha=0.7, label=run)
    ax.set_xscale("symlog", base=2, linthresh=1)
    ax.set_xlabel("visits trained")
    ax.set_ylabel("exposure (bits)")
    ax.legend(fontsize=8)
    s.images.append(plots.save(fig, "canaries"))
    return s


# ---------------------------------------------------------------------------------------------------------
# Training


def _tsv(path: Path) -> list[tuple[int, float]]:
    if not path.exists():
        return []
    with open(path, newline="") as f:
        reader = csv.DictReader(f, delimiter="\t")
        col = [c for c in (reader.fieldnames or []) if c not in ("step", "timestamp")]
        return [(int(r["step"]), float(r[col[0]])) for r in reader] if col else []


def _live_dir(project: Path, run: str) -> Path:
    return project / "dvclive" / run.replace("@", "/")


def training(con, plots: Plots, project: Path) -> Section:
    s = Section("training", "Training runs")
    tables = _tables(con)
    if "train_steps" not in tables:
        return _not_run(s, "no training run has finished (data/train holds no steps.parquet)")
    runs = [r[0] for r in
            con.execute("SELECT DISTINCT run FROM train_steps ORDER BY run = 'pretrain' DESC, run").fetchall()]
    summary_rows = []
    for run in runs:
        steps = con.execute("SELECT step, loss, grad_norm, lr, skipped FROM train_steps WHERE run = ? ORDER BY step",
                            [run]).fetchall()
        held = con.execute("SELECT step, bucket, loss FROM train_heldout WHERE run = ? ORDER BY bucket, step",
                           [run]).fetchall() if "train_heldout" in tables else []
        spikes = con.execute("SELECT step, reason, loss, grad_norm, window_mean_loss, window_mean_grad_norm, "
                             "len(doc_ids) FROM train_spikes WHERE run = ? ORDER BY step", [run]).fetchall() \
            if "train_spikes" in tables else []
        alarms = con.execute("SELECT step, alarm, \"group\", value, threshold FROM train_health_alarms WHERE run = ? "
                             "ORDER BY step, alarm, \"group\"", [run]).fetchall() \
            if "train_health_alarms" in tables else []
        rollbacks = con.execute("SELECT rollback, reason, excursion_start, detected_at, resumed_from, band_upper, "
                                "undone_losses, skipped_steps, len(doc_ids), lr_scale FROM train_rollbacks "
                                "WHERE run = ? ORDER BY rollback", [run]).fetchall() \
            if "train_rollbacks" in tables else []
        speed = _tsv(_live_dir(project, run) / "plots" / "metrics" / "perf" / "tokens_per_second.tsv")
        fig, axes = plt.subplots(1, 5, figsize=(17, 3.2))
        x = [r[0] for r in steps]
        trained = [(r[0], r[1]) for r in steps if r[1] is not None]  # a batch a rollback skipped has no loss
        axes[0].plot(*zip(*trained), color=KEPT, lw=1)
        skipped = [(r[0], r[1]) for r in steps if r[4] and r[1] is not None]
        if skipped:
            axes[0].scatter(*zip(*skipped), color="red", marker="x", zorder=3, label="skipped (spike)")
        for k, (n, _, _, detected, resumed, _, undone, *_) in enumerate(rollbacks):
            # The undone steps as they went before the rollback, and where the run went back to.
            axes[0].plot(range(resumed, resumed + len(undone)), undone, color="#999999", lw=1, ls="--",
                         label="undone (rolled back)" if k == 0 else None)
            axes[0].axvline(resumed, color="red", lw=0.8, ls=":", label="rollback" if k == 0 else None)
        if skipped or rollbacks:
            axes[0].legend(fontsize=7)
        axes[0].set_title("training loss")
        for bucket in sorted({h[1] for h in held}):
            pts = [(h[0], h[2]) for h in held if h[1] == bucket]
            axes[1].plot(*zip(*pts), marker="o", ms=3, label=bucket)
        if held:
            axes[1].legend(fontsize=7)
        axes[1].set_title("held-out loss per bucket")
        axes[2].plot(x, [r[2] for r in steps], color=DROPPED, lw=1)
        axes[2].set_title("gradient norm (before clipping)")
        axes[3].plot(x, [r[3] for r in steps], color=OTHER, lw=1)
        axes[3].set_title("learning rate")
        if speed:
            axes[4].plot(*zip(*speed), color="#8172B2", marker=".", lw=1)
        else:
            axes[4].text(0.5, 0.5, "no DVCLive perf log", ha="center", va="center")
        axes[4].set_title("tokens / s")
        for ax in axes:
            ax.set_xlabel("step")
        fig.suptitle(run)
        # A file name a browser reads as a path: '#' (a seed replica's, an anneal arm's) would start a URL fragment.
        name = "train_" + re.sub(r"[^A-Za-z0-9_.-]", "_", run)
        s.images.append(plots.save(fig, name))
        final_held = {b: l for st, b, l in held if st == max(h[0] for h in held)} if held else {}
        summary_rows.append((run, len(steps), sum(r[4] for r in steps), steps[-1][1] if steps else None,
                             sum(final_held.values()) / len(final_held) if final_held else None,
                             sum(v for _, v in speed) / len(speed) if speed else None, len(spikes), len(alarms),
                             len(rollbacks)))
        if spikes:
            s.html.append(f"<h3>Spikes of {esc(run)}</h3>")
            s.html.append(table(["step", "reason", "loss", "grad norm", "window mean loss", "window mean grad norm",
                                 "documents in the batch"], spikes))
        if rollbacks:  # tokenmill.train.rollback: docs/training.md, "When a run goes wrong"
            s.html.append(f"<h3>Rollbacks of {esc(run)}</h3>")
            s.html.append(table(["rollback", "reason", "excursion from step", "detected after step",
                                 "back to step", "band upper edge", "skipped steps", "documents skipped",
                                 "learning rate x"],
                                [(n, why, start, det, back, upper, f"{sk[0]}-{sk[-1]}", docs, scale)
                                 for n, why, start, det, back, upper, _, sk, docs, scale in rollbacks]))
        if alarms:  # tokenmill.train.health: docs/training.md, "When a run goes wrong"
            s.html.append(f"<h3>Health alarms of {esc(run)}</h3>")
            s.html.append(table(["step", "alarm", "group", "value", "threshold"], alarms))
    s.html.insert(0, table(["run", "steps", "skipped", "final loss", "final held-out (mean)", "mean tokens/s",
                            "spikes", "health alarms", "rollbacks"], summary_rows))
    if not any(r[6] for r in summary_rows):
        s.note = "No loss spike: every step's update was applied."
    if not any(r[7] for r in summary_rows):
        s.note = (s.note + " " if s.note else "") + "No health alarm (embedding collapse, gradient-norm drift)."
    if not any(r[8] for r in summary_rows):
        s.note = (s.note + " " if s.note else "") + "No rollback: no loss excursion outlasted its window."
    return s


# ---------------------------------------------------------------------------------------------------------
# Scaling forecast and evaluation


def scaling(plots: Plots, prediction: Mapping | None, comparison: Mapping | None, incomparable: str | None,
            missing: str) -> Section:
    s = Section("scaling", "Scaling forecast")
    if prediction is None:
        return _not_run(s, missing)

    pts = prediction["points"]
    target = prediction["target"]["compute"]
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.scatter([p["compute"] for p in pts], [p["value"] for p in pts], color=KEPT, zorder=3, label="scouts")
    for p in pts:
        ax.annotate(p["name"], (p["compute"], p["value"]), textcoords="offset points", xytext=(4, 4), fontsize=8)
    lo = min(p["compute"] for p in pts) / 1.5
    hi = max(target, max(p["compute"] for p in pts)) * 1.5
    grid = np.geomspace(lo, hi, 200)
    par = prediction["parameters"]
    if "alpha" in par:  # a law in parameters and tokens has no curve in compute: its value at each rung
        ax.scatter([p["compute"] for p in pts], [r["fitted"] for r in prediction["residuals"]], marker="x",
                   color="#777777", zorder=3, label=f"fit: {par['E']:.3g} + {par['A']:.3g}·N^-{par['alpha']:.3g} + "
                                                    f"{par['B']:.3g}·D^-{par['beta']:.3g}")
    else:
        ax.plot(grid, law(par, grid), color="#777777", lw=1,
                label=f"fit: {par['E']:.3g} + {par['a']:.3g}·C^-{par['b']:.3g}" if par["E"] else
                f"fit: {par['a']:.3g}·C^-{par['b']:.3g}")
    cal = prediction.get("calibration") or {}
    ax.scatter([target], [prediction["predicted_loss"]], marker="*", s=160, color=DROPPED, zorder=4,
               label="forecast (before the run)" + (", moved by its record" if cal.get("applied") else ""))
    if cal.get("applied"):  # the law's own point, before the record of earlier full runs moved it
        ax.scatter([target], [prediction["law"]["predicted_loss"]], marker="*", s=160, facecolors="none",
                   edgecolors=DROPPED, zorder=4, label="the law alone")
    if prediction.get("interval"):
        # A line, not an error bar: the bootstrap interval need not contain the point fit (a skewed law).
        ax.vlines([target], *prediction["interval"], color=DROPPED, lw=2, zorder=3,
                  label=f"forecast interval ({prediction['config']['interval']:.0%})")
    if comparison is not None:
        ax.scatter([comparison["actual_compute"]], [comparison["actual_loss"]], marker="D", color=OTHER, zorder=4,
                   label="actual")
    ax.set_xscale("log")
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())  # minor labels overlap on a short decade
    ax.set_xlabel("training compute C (FLOPs)")
    ax.set_ylabel(f"final held-out loss ({prediction['config']['loss']})")
    ax.legend(fontsize=8)
    s.images.append(plots.save(fig, "scaling"))
    rows = [(p["name"], p.get("params"), p.get("tokens"), p["compute"], p["value"], r["fitted"])
            for p, r in zip(pts, prediction["residuals"])]
    s.html.append(table(["run", "parameters", "tokens", "compute (FLOPs)", "held-out loss", "fitted"], rows))
    s.html.append(table(["", "value"], [
        ("form", prediction["form"]), ("parameters", json.dumps({k: round(v, 6) for k, v in par.items()})),
        ("rms log residual", prediction["rms_log_residual"]), ("degrees of freedom", prediction["degrees_of_freedom"]),
        ("target compute", target), ("extrapolation (target / largest scout)", prediction["extrapolation"]),
        *((("law's misfit: leave-one-out log error per log compute", misfit["log_error_per_log_compute"]),
           ("law's misfit at the target (σ of log loss, in the interval)", misfit["log_sigma"]))
          if (misfit := prediction.get("misfit")) else ()),
        *((("the law's forecast", prediction["law"]["predicted_loss"]),
           ("forecast", f"{forecast_record.describe(cal)}; {cal['source']}"))
          if cal.get("applied") else (("record of earlier full runs", f"not applied: {cal['reason']}"),) if cal else ()),
        ("predicted loss", prediction["predicted_loss"]),
        *((("actual loss", comparison["actual_loss"]), ("error (actual - predicted)", comparison["error"]),
           ("relative error", comparison["relative_error"]),
           ("trained the compute forecast", comparison["compute_as_predicted"])) if comparison else
          (("actual loss", f"not comparable: {incomparable}" if incomparable else
            "not run: the full run has not finished"),)),
    ]))
    actual = {"loss": comparison, "bpb": (comparison or {}).get("bpb")}
    rows = []
    for name, f in (("held-out loss", {**prediction, "predicted": prediction["predicted_loss"]}),
                    ("benchmark bits per byte", prediction.get("bpb"))):
        if not f or "predicted" not in f:
            continue
        key = "loss" if name == "held-out loss" else "bpb"
        got = actual[key]
        value = None if got is None else got["actual_loss" if key == "loss" else "actual"]
        back = f.get("backtest") or {}
        rows.append((name, f["predicted"], _interval_text(f.get("interval")), f["naive"],
                     "not run" if value is None else value,
                     "" if got is None else ("yes" if got["beats_naive"] else "NO"),
                     f"{back['held_out']}: {back['relative_error']:+.1%} (naive {back['naive_error'] / back['actual']:+.1%})"
                     if "predicted" in back else back.get("skipped", "")))
    s.html.append("<h3>Forecast against the naive predictor (the largest scout's value)</h3>")
    s.html.append(table(["quantity", "forecast", "interval", "naive", "actual", "forecast closer than naive",
                         "back-test: largest scout from the others (relative error)"], rows))
    if prediction.get("excluded"):
        s.html.append(table(["excluded scout", "reason"], [(e["name"], e["reason"]) for e in prediction["excluded"]]))
    return s


def _interval_text(interval) -> str:
    return f"[{interval[0]:.4g}, {interval[1]:.4g}]" if interval else "no noise estimate"


def evaluation(results: Mapping | None, missing: str) -> Section:
    s = Section("evaluation", "Evaluation")
    if results is None:
        return _not_run(s, missing)
    held = results.get("heldout", {}).get("buckets", {})
    if held:
        s.html.append("<h3>Held-out perplexity per mixture bucket</h3>")
        s.html.append(table(["bucket", "documents", "bits per byte", "word perplexity", "byte perplexity"],
                            [(b, h["documents"], _pm(h["bits_per_byte"], h.get("bits_per_byte_stderr")),
                              h["word_perplexity"], h["byte_perplexity"]) for b, h in sorted(held.items())]))
    rows, skipped = [], []
    for name, b in sorted(results.get("benchmarks", {}).items()):
        if "skipped" in b:
            skipped.append((name, b["skipped"]))
            continue
        for metric, m in sorted(b.get("metrics", {}).items()):
            rows.append((name, metric, b["items"], b["dirty_items"], b.get("suspect_items", 0),
                         _pm(m["all"], m["all_stderr"]), _pm(m["clean"], m["clean_stderr"]),
                         _pm(m.get("clean_strict"), m.get("clean_strict_stderr")),
                         _pm(m["difference"], m["difference_stderr"])))
    s.html.append("<h3>Benchmarks: all items, clean items, and clean of suspects too</h3>")
    if rows:
        s.html.append(table(["benchmark", "metric", "items", "dirty items", "suspect items", "all", "clean",
                             "clean (strict)", "all - clean"], rows, numeric_from=2))
    else:
        s.html.append("<p>No benchmark was scored.</p>")
    if skipped:
        s.html.append(table(["benchmark", "not scored because"], skipped))
    s.note = ("Dirty items are those the contamination table marks contaminated; the clean score leaves them out, "
              "the strict clean score leaves out the suspects too (items some document is near in meaning: the "
              "embedding back-check). "
              "± is the standard error over items. acc: the most likely choice is the gold one; acc_norm: the "
              "same per character; prob_norm: the gold choice's probability among the choices; bpb: bits per "
              "byte of the gold answer (lower is better).")
    return s


def signal_noise(ladder: Mapping[str, Mapping], rows: list[dict], decision: str | None) -> Section:
    """Per metric over the ladder (tokenmill.evaluate.signal): each run's final value ± its σ (checkpoint
    noise, with the seed spread for rungs trained with several seeds), signal, noise and their ratio."""
    s = Section("signal_noise", "Which metric to trust: signal and noise over the ladder")
    if not rows:
        return _not_run(s, "no finished training runs with in-loop evaluations")
    runs = list(ladder)
    body = [(r["metric"] + (" (decision)" if r["metric"] == decision else ""),
             *[_pm(r["values"][run], r["sigmas"][run]) for run in runs],
             r["signal"], r["noise"], r["snr"], r["order"]) for r in rows]
    s.html.append(table(["metric", *runs, "signal", "noise", "SNR", "order (Kendall τ)"], body, numeric_from=1))
    s.note = (f"Decision metric: {decision or 'none'} (of the held-out loss and the benchmark means, the one whose "
              "scout verdicts agreed most often with the full run's in the track record; the same for every "
              "experiment). Signal: largest minus smallest final value over the runs; noise: root "
              "mean square of the runs' σ (± after each value: the spread over the run's last evaluations, "
              "pooled with the spread over seeds where a rung has several); order: Kendall's τ between the runs' "
              "order by training compute and by the metric (1: every larger run scores better).")
    return s


def anneals(results: Mapping[str, Mapping]) -> Section:
    """Each annealing test (tokenmill.anneal): the source, the arms' weights, where it branched and its cost, and
    per figure both arms ± σ, the difference, its σ and the verdict."""
    s = Section("anneal", "Annealing tests: a source added at the end of training")
    if not results:
        return _not_run(s, "no annealing test has run (anneals in params.yaml, the anneal stage)")
    for name, r in results.items():
        weights = {arm: ", ".join(f"{b} {w:.2f}" for b, w in r["weights"][arm].items()) for arm in ("with", "without")}
        s.html.append(f"<h3>{esc(name)}: {esc(r['source'])} ({esc(', '.join(r['buckets']))}) at {r['share']:g} of the "
                      f"{esc(r['phase'])} phase</h3>")
        s.html.append(f"<p>Branched from the full run at step {r['branch_step']:,} (where its decay begins); each arm "
                      f"trains {r['steps_per_arm']:,} steps × {r['seeds']} seed(s): {r['cost']['arm_steps']:,} steps, "
                      f"{r['cost']['fraction_of_full_run']:.1%} of the full run's {r['cost']['full_steps']:,}. "
                      f"Weights with: {esc(weights['with'])}; without: {esc(weights['without'])}.</p>")
        rows = [(v["metric"], _pm(v["with"], v["with_sigma"]), _pm(v["without"], v["without_sigma"]), v["difference"],
                 v["sigma"], v.get("paired_sigma"), v["verdict"]) for v in r["verdicts"]]
        s.html.append(table(["figure", "with", "without", "with − without", "σ", "paired σ", "better (beyond 2σ)"], rows))
    s.note = ("Both arms start from the same checkpoint with the full run's recipe and anneal over the first steps of "
              "the decay phase; only the decay phase's weights differ. ± is each arm's noise-window σ (pooled with the "
              "seed spread with several seeds); σ of the difference combines the two, as compare does; paired σ is "
              "the spread of the difference itself over the noise window (both arms evaluate at the same steps, so "
              "the decay they share cancels): a verdict marked (paired) is beyond 2 paired σ only. Held-out figures are losses "
              "(lower is better); benchmarks_mean.bpb too, the others higher-is-better.")
    return s


def context_use(project: Path) -> Section:
    """How each finished run uses its context (tokenmill.train.context): held-out loss by token position up to the
    longest sequence it trained on, and the retrieval probe (nats per answer token gained from a needle read that
    far back)."""
    s = Section("context", "Use of context: loss by position and the retrieval probe")
    runs = {}
    # The training runs and the anneal's arms (the report's deps: data/train, data/anneal).
    for path in sorted([*(project / "data" / "train").glob("**/summary.json"),
                        *(project / "data" / "anneal").glob("**/summary.json")]):
        ctx = (read_json(path) or {}).get("context")
        if ctx and path.parent.parts[-2:-1] != ("replicas",):
            runs[str(path.parent.relative_to(project / "data"))] = ctx
    if not runs:
        return _not_run(s, "no finished run has measured its use of context")
    buckets = list(dict.fromkeys(b for c in runs.values() for b in c["loss_by_position"]))
    probes = sorted({k for c in runs.values() for k in c["probe"] if k != "mean"},
                    key=lambda k: (int(k.split("@")[0]), float(k.split("@")[1])))
    rows = [(run, c["longest"], c["rope_theta"], *[c["loss_by_position"].get(b, {}).get("loss") for b in buckets],
             c["probe"].get("mean"), *[c["probe"].get(k) for k in probes]) for run, c in runs.items()]
    s.html.append(table(["run", "longest", "RoPE θ", *[f"loss {b}" for b in buckets], "probe mean",
                         *[f"probe {k}" for k in probes]], rows))
    s.note = ("Loss by position: each held-out document from its first token, the loss of each token by how many of its "
              "document's tokens precede it (lower at late positions: the model uses that context). Probe "
              "<length>@<depth>: a 24-token needle of held-out text at that depth of a haystack of that length, its "
              "first 8 tokens repeated at the end; the loss of the last 16 without the needle minus with it, in nats "
              "per token (0: no retrieval). docs/long_context.md.")
    return s


def _pm(value, stderr) -> str:
    if value is None:
        return "–"
    return f"{value:.4f} ± {stderr:.4f}" if stderr is not None else f"{value:.4f}"


def read_json(path: Path | None) -> dict | None:
    """The file's JSON, None when it does not exist; a damaged file is an error naming it."""
    if path is None or not path.exists():
        return None
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"report: {path} is not valid JSON ({exc})") from None

