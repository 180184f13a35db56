"""The value card of a data source: what it adds to the corpus, read from a built project in seconds (issue 45).

The question a data team asks most often is "is this source worth adding?". The card answers the part that needs
no training run, from what the pipeline already recorded about the source's documents:
- acceptance: records read, and per curation stage the documents it kept, changed and dropped, with the reasons,
  and the bytes of text it kept (tokens at the source's measured bytes per token); tokens kept and planned;
- unique information: the documents dedup dropped, as copies of the source's own documents or of the rest of the
  corpus, and the rest's documents dropped as copies of the source's; repeated lines inside a document and
  template lines shared by many of its documents, beside the rest's;
- tokenizer friendliness: bytes per token and pieces per word against the rest, and the frequent words the
  tokenizer cuts into the most pieces;
- risk: documents PII redaction changed (per kind), the toxicity tag's share, the licence, the documents that
  overlapped benchmark items (n-gram and embedding back-check);
- where it lands: its documents' topics and formats, where the domains stage ran.
With `paired` (`tokenmill value <source> --paired`), what its tokens are worth to a model: scout-only experiments
of the mixture with the source and without it, through DVC's queue, each rung trained at two seeds: per held-out
bucket, the held-out mean, the benchmarks' bits per byte and the planted canaries' exposure, the gain of adding it
with its σ, the verdict and the rung's measured track record.

Counts come from the lineage (lineage/lineage.duckdb); the text measures read the source's documents from the
stage outputs (ingest's for repetition, the last document stage's for the tokenizer) and a sample of the rest of
the same size (at most `sample` documents each side, the first by doc_id: a content hash, so an unbiased draw).
A source must have been ingested (declared in the configuration and `dvc repro lineage` run); its weight in the
mixture may be zero.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.dataset as ds

from tokenmill import lineage
from tokenmill import search as S
from tokenmill.evaluate import track
from tokenmill.anneal import read_results
from tokenmill.evaluate.signal import run_figures
from tokenmill.lineage.audit import tables as _tables
from tokenmill.tokenizer import Tokenizer

WORD = re.compile(r"[^\W\d_]{3,}")  # words of letters: what "pieces per word" and the fragmented terms count
TEMPLATE_MIN_DOCS = 3  # a line repeated in this many documents of one source (and in 1% of them) is a template's


def card(project: str | Path, source: str, sample: int = 2000) -> dict:
    """The value card of `source` in the built project at `project` (a dict, JSON-ready)."""
    project = Path(project)
    con = lineage.connect(project / "lineage" / lineage.DB_NAME, extra={})
    try:
        declared = [r[0] for r in con.execute("SELECT source FROM sources ORDER BY source").fetchall()]
        if source not in declared:
            raise LookupError(f"value: no source {source!r} in the lineage (it has {', '.join(declared)}): declare "
                              f"it under sources in the configuration and run `dvc repro lineage`")
        out = {"source": _source(con, source), "stages": _stages(con, source), "tokens": _tokens(con, source),
               "duplicates": _duplicates(con, source), "pii": _pii(con, source), "toxicity": _toxicity(con, source),
               "contamination": _contamination(con, source), "domains": _domains(con, source)}
        stages = [r[0] for r in con.execute("SELECT stage FROM stages WHERE stage_order IS NOT NULL "
                                            "ORDER BY stage_order").fetchall()]
    finally:
        con.close()
    data = project / "data"
    last = next((s for s in reversed(stages) if (data / s / "documents").is_dir()), None)
    out["repetition"] = _repetition(data / stages[0], source, sample) if stages else None
    tokenizer = data / "tokenizer" / "tokenizer.model"
    out["tokenizer"] = (_tokenizer(Tokenizer(tokenizer), data / last, source, sample)
                        if last and tokenizer.is_file() else None)
    # Bytes of text each stage kept of the source (its output's documents), and tokens at the sample's rate.
    rate = (out["tokenizer"] or {}).get("source", {}).get("bytes_per_token")
    for st in out["stages"]:
        folder = data / st["stage"] / "documents"
        st["bytes_kept"] = _bytes(folder, source) if folder.is_dir() else None
        st["tokens_kept_estimate"] = round(st["bytes_kept"] / rate) if st["bytes_kept"] is not None and rate else None
    # The annealing tests of this source the anneal stage ran (tokenmill.anneal): the verdict at the end of training.
    out["anneals"] = {name: r for name, r in read_results(data / "anneal").items() if r["source"] == source}
    return out


def _bytes(folder: Path, source: str) -> int:
    table = ds.dataset(str(folder), format="parquet").to_table(columns=["text"], filter=pc.field("source") == source)
    return int(pc.sum(pc.binary_length(table["text"])).as_py() or 0)


def _rows(con, sql: str, params: list) -> list[dict]:
    cur = con.execute(sql, params)
    names = [d[0] for d in cur.description]
    return [dict(zip(names, r)) for r in cur.fetchall()]


def _source(con, source: str) -> dict:
    row = _rows(con, "SELECT source, format, bucket, licence, snapshot, files, records, kept, read_errors "
                     "FROM sources WHERE source = ?", [source])[0]
    row["documents"] = con.execute("SELECT count(*) FROM documents WHERE source = ?", [source]).fetchone()[0]
    return row


def _stages(con, source: str) -> list[dict]:
    """Per document stage, in order: the source's documents in, kept, modified and dropped, and the reasons."""
    rows = con.execute("""SELECT dc.stage_order, dc.stage, dc.action, dc.reason, count(*)
                          FROM decisions dc JOIN documents d USING (doc_id) WHERE d.source = ?
                          GROUP BY ALL ORDER BY 1, 3, 4""", [source]).fetchall()
    out: dict[str, dict] = {}
    for _, stage, action, reason, n in rows:
        s = out.setdefault(stage, {"stage": stage, "in": 0, "keep": 0, "modify": 0, "drop": 0, "reasons": {}})
        s["in"] += n
        s[action] = s.get(action, 0) + n
        s["reasons"][f"{action}:{reason}"] = n
    return list(out.values())


def _tokens(con, source: str) -> dict:
    kept = con.execute("SELECT coalesce(sum(length), 0) FROM token_index WHERE source = ?", [source]).fetchone()[0]
    total = con.execute("SELECT coalesce(sum(length), 0) FROM token_index WHERE bucket <> 'canary'").fetchone()[0]
    planned = con.execute("""SELECT coalesce(sum(p.length), 0) FROM plan p JOIN documents d USING (doc_id)
                             WHERE d.source = ?""", [source]).fetchone()[0]
    plan_total = con.execute("SELECT coalesce(sum(length), 0) FROM plan").fetchone()[0]
    return {"kept": int(kept), "share_of_corpus": kept / total if total else None, "planned": int(planned),
            "share_of_plan": planned / plan_total if plan_total else None, "in_mixture": planned > 0}


def _duplicates(con, source: str) -> dict:
    """The dedup stage's drops of the source's documents, split by whose copy they were (the kept document's
    source), and the rest's documents dropped as copies of the source's."""
    dropped = con.execute("""SELECT dc.reason, k.source = d.source, count(*)
                             FROM decisions dc JOIN documents d USING (doc_id)
                             LEFT JOIN documents k ON k.doc_id = json_extract_string(dc.details, '$.duplicate_of')
                             WHERE dc.stage = 'dedup' AND dc.action = 'drop' AND d.source = ?
                             GROUP BY ALL""", [source]).fetchall()
    seen = con.execute("""SELECT count(*) FROM decisions dc JOIN documents d USING (doc_id)
                          WHERE dc.stage = 'dedup' AND d.source = ?""", [source]).fetchone()[0]
    copied = con.execute("""SELECT count(*) FROM decisions dc JOIN documents d USING (doc_id)
                            JOIN documents k ON k.doc_id = json_extract_string(dc.details, '$.duplicate_of')
                            WHERE dc.stage = 'dedup' AND dc.action = 'drop' AND k.source = ? AND d.source <> ?""",
                         [source, source]).fetchone()[0]
    by_reason = Counter()
    within = against = 0
    for reason, same, n in dropped:
        by_reason[reason] += n
        within += n if same else 0
        against += n if same is False else 0
    total = sum(by_reason.values())
    out = {"dedup_input": seen, "dropped": total, "rate": total / seen if seen else None, "by_reason": dict(by_reason),
           "copies_within_source": within, "copies_of_the_rest": against, "rest_dropped_as_its_copies": copied}
    if "semantic_duplicates" in _tables(con):
        out["semantic_clusters_with_the_rest"] = con.execute(
            """SELECT count(DISTINCT s.cluster) FROM semantic_duplicates s JOIN documents d USING (doc_id)
               WHERE d.source = ? AND s.cluster IN (SELECT s2.cluster FROM semantic_duplicates s2
                                                    JOIN documents d2 USING (doc_id) WHERE d2.source <> ?)""",
            [source, source]).fetchone()[0]
    return out


def _pii(con, source: str) -> dict:
    rows = con.execute("""SELECT dc.action, dc.scores FROM decisions dc JOIN documents d USING (doc_id)
                          WHERE dc.stage = 'pii' AND d.source = ?""", [source]).fetchall()
    kinds = Counter()
    for action, scores in rows:
        if action == "modify":
            kinds.update({k.removeprefix("pii_"): int(v) for k, v in (scores or {}).items() if v})
    return {"documents": len(rows), "redacted": sum(1 for a, _ in rows if a == "modify"), "found": dict(kinds)}


def _toxicity(con, source: str) -> dict:
    n, tagged, top = con.execute("""SELECT count(toxicity), count(*) FILTER (WHERE toxicity_tagged), max(toxicity)
                                    FROM documents WHERE source = ?""", [source]).fetchone()
    return {"scored": n, "tagged": tagged, "share": tagged / n if n else None, "highest": top}


def _contamination(con, source: str) -> dict:
    present = _tables(con)
    out = {}
    if "contamination" in present:
        docs, items = con.execute("""SELECT count(DISTINCT c.doc_id), count(DISTINCT c.benchmark || '/' || c.item_id)
                                     FROM contamination c JOIN documents d USING (doc_id)
                                     WHERE c.contaminated AND d.source = ?""", [source]).fetchone()
        out.update({"documents": docs, "items": items})
        out["benchmarks"] = dict(con.execute(
            """SELECT c.benchmark, count(DISTINCT c.item_id) FROM contamination c JOIN documents d USING (doc_id)
               WHERE c.contaminated AND d.source = ? GROUP BY 1 ORDER BY 1""", [source]).fetchall())
    if "suspects" in present:
        out["semantic_suspects"] = con.execute("""SELECT count(*) FROM suspects s JOIN documents d USING (doc_id)
                                                  WHERE d.source = ?""", [source]).fetchone()[0]
    return out


def _domains(con, source: str) -> dict | None:
    if "topics" not in _tables(con):
        return None
    names = dict(con.execute("SELECT topic, name FROM topics").fetchall())
    kept = "fate = 'kept'"
    topics = con.execute(f"""SELECT topic, count(*) FROM documents WHERE source = ? AND {kept} AND topic IS NOT NULL
                             GROUP BY 1 ORDER BY 2 DESC, 1""", [source]).fetchall()
    formats = con.execute(f"""SELECT format, count(*) FROM documents WHERE source = ? AND {kept}
                              AND format IS NOT NULL GROUP BY 1 ORDER BY 2 DESC, 1""", [source]).fetchall()
    return {"topics": [{"topic": t, "name": names.get(t), "documents": n} for t, n in topics],
            "formats": dict(formats)}


# ---------------------------------------------------------------------------------------------------------
# Measures of the text


def _texts(stage_dir: Path, source: str, sample: int) -> tuple[list[str], list[str]]:
    """(the source's texts, the rest's): at most `sample` each, the first by doc_id."""
    dataset = ds.dataset(str(stage_dir / "documents"), format="parquet")
    table = dataset.to_table(columns=["doc_id", "source", "text"]).sort_by("doc_id")
    mine = pc.equal(table["source"], source)
    return (table.filter(mine)["text"].to_pylist()[:sample],
            table.filter(pc.invert(mine))["text"].to_pylist()[:sample])


def repetition(texts: list[str]) -> dict:
    """repeated_line_share: the share of a document's non-empty lines that repeat an earlier line of it, averaged
    over the documents; template_share: the share of all non-empty lines that occur in at least
    TEMPLATE_MIN_DOCS documents and 1% of them (navigation, footers, licence headers)."""
    per_doc, in_docs, lines_total = [], Counter(), 0
    for text in texts:
        lines = [s.strip() for s in (text or "").splitlines() if s.strip()]
        if not lines:
            continue
        per_doc.append(1 - len(set(lines)) / len(lines))
        in_docs.update(set(lines))
        lines_total += len(lines)
    floor = max(TEMPLATE_MIN_DOCS, 0.01 * len(per_doc))
    templated = 0
    for text in texts:
        templated += sum(1 for s in (text or "").splitlines() if s.strip() and in_docs[s.strip()] >= floor)
    return {"documents": len(per_doc), "repeated_line_share": sum(per_doc) / len(per_doc) if per_doc else None,
            "template_share": templated / lines_total if lines_total else None}


def _repetition(stage_dir: Path, source: str, sample: int) -> dict:
    mine, rest = _texts(stage_dir, source, sample)
    return {"source": repetition(mine), "rest": repetition(rest), "read_from": stage_dir.name}


def tokenizer_measures(tok: Tokenizer, texts: list[str], top: int = 10) -> dict:
    """Bytes per token and pieces per word (letter words of 3 or more, each encoded after a space as it mostly
    stands in text) over `texts`; of its 500 most frequent words, the `top` cut into the most pieces."""
    ids = tok.encode_batch(texts)
    tokens = sum(len(x) for x in ids)
    nbytes = sum(len(t.encode("utf-8")) for t in texts)
    words = Counter(w for t in texts for w in WORD.findall(t))
    pieces = {w: len(p) for w, p in zip(words, tok.encode_batch([" " + w for w in words]))}
    n = sum(words.values())
    frequent = [w for w, _ in words.most_common(500) if pieces[w] > 1]  # a word the vocabulary holds is no cost
    worst = sorted(frequent, key=lambda w: (-pieces[w], -words[w], w))[:top]
    return {"documents": len(texts), "bytes_per_token": nbytes / tokens if tokens else None,
            "pieces_per_word": sum(pieces[w] * c for w, c in words.items()) / n if n else None,
            "fragmented_terms": [{"word": w, "pieces": pieces[w], "count": words[w]} for w in worst]}


def _tokenizer(tok: Tokenizer, stage_dir: Path, source: str, sample: int) -> dict:
    mine, rest = _texts(stage_dir, source, sample)
    return {"source": tokenizer_measures(tok, mine), "rest": tokenizer_measures(tok, rest, top=0),
            "read_from": stage_dir.name}


# ---------------------------------------------------------------------------------------------------------
# Paired scout experiments: the mixture with the source and without it


def source_buckets(project: Path, source: str) -> list[str]:
    """The mixture buckets the source's tokens fill; an error when another source shares one (removing the
    bucket would remove that source too)."""
    con = lineage.connect(project / "lineage" / lineage.DB_NAME, extra={})
    try:
        buckets = [r[0] for r in con.execute("SELECT DISTINCT bucket FROM token_index WHERE source = ? ORDER BY 1",
                                             [source]).fetchall()]
        shared = con.execute(f"""SELECT bucket, string_agg(DISTINCT source, ', ' ORDER BY source) FROM token_index
                                 WHERE bucket IN (SELECT unnest(?)) AND source <> ? GROUP BY 1 ORDER BY 1""",
                             [buckets, source]).fetchall()
    finally:
        con.close()
    if not buckets:
        raise LookupError(f"value: source {source!r} has no tokens (every document was dropped, or tokenize has "
                          f"not run): there is nothing to pair")
    if shared:
        raise LookupError(f"value: source {source!r} shares bucket(s) {', '.join(f'{b} with {o}' for b, o in shared)}"
                          f": the paired runs remove whole buckets; give the source a bucket of its own "
                          f"(sources.{source}.bucket)")
    return buckets


def pair_overrides(params: dict, source: str, buckets: list[str], weight: float | None) -> dict[str, list[str]]:
    """The `-S` overrides of the two sides: `with` (the preset, or each of the source's buckets at weight /
    len(buckets) in every phase when weight is given) and `without` (the source's buckets removed from every
    phase)."""
    mixture = params["mixture"]
    preset, phases = mixture["name"], mixture["phases"]
    present = {ph: [b for b in buckets if (spec.get("weights") or {}).get(b)] for ph, spec in phases.items()}
    if weight is None and not any(present.values()):
        raise LookupError(f"value: source {source!r} (buckets {', '.join(buckets)}) has no weight in mixture "
                          f"{preset}: give the weight to try it at (--weight)")
    with_ = [f"mixture={preset}", f"mixture.name={preset}_with_{source}"]
    if weight is not None:
        with_ += [f"++mixture.phases.{ph}.weights.{b}={weight / len(buckets):g}" for ph in phases for b in buckets]
    without = [f"mixture={preset}", f"mixture.name={preset}_without_{source}"]
    for ph, spec in phases.items():
        gone = [b for b in buckets if b in (spec.get("weights") or {})]
        if gone and len(gone) == len(spec["weights"]):
            raise LookupError(f"value: without source {source!r} phase {ph} of mixture {preset} has no weight left")
        without += [f"~mixture.phases.{ph}.weights.{b}" for b in gone]
    return {"with": with_, "without": without}


def _figures(summary: dict) -> dict:
    out = run_figures(summary, per_bucket=True)
    planted = [v for k, v in (summary.get("canary_exposure") or {}).items() if k != "0"]
    if planted:
        out["canary_exposure"] = (sum(planted) / len(planted), None)
    return out


def verdict(g: dict) -> str:
    """Beyond 2 σ as compare judges (each side's own noise), or within it; where the two sides' seeds pair up
    (seed k of each shares its initialisation and data order) and the difference is beyond 2 paired σ, that too."""
    better = f"better {'with' if g['gain'] > 0 else 'without'} the source"
    if g["sigma"] > 0 and abs(g["gain"]) > 2 * g["sigma"]:
        return f"{better}, beyond 2 σ"
    if g["paired_sigma"] and abs(g["gain"]) > 2 * g["paired_sigma"]:
        return f"within the noise; {better} beyond 2 paired σ"
    return "within the noise"


def paired(project: str | Path, source: str, rung: str | None = None, seeds: int = 2, jobs: int = 2,
           weight: float | None = None, log=print) -> dict:
    """Scout-only experiments of the mixture with the source and without it, each at `seeds` seeds, through DVC's
    queue (named by the hash of their inputs, as `tokenmill search` names its swarm: a rerun runs nothing); per
    metric the gain of adding the source (without - with: positive is better with it) with compare's σ and the
    paired σ, its verdict (beyond 2 σ or within the noise) and the rung's track record."""
    repo = Path(project).resolve()
    base = S.compose_params(repo, [])
    rung = rung or next(iter(base.get("scouts") or {}), None)
    if rung is None or rung not in (base.get("scouts") or {}):
        raise LookupError(f"value: no scout rung {rung!r} in the configuration's ladder "
                          f"({', '.join(base.get('scouts') or {}) or 'none'})")
    if seeds < 1:
        raise LookupError(f"value: seeds is {seeds}; each side needs 1 or more (2 or more give a paired σ)")
    sides = pair_overrides(base, source, source_buckets(repo, source), weight)
    pipeline, keys = S.pipeline_inputs(repo, rung)
    members = []
    for side in ("with", "without"):
        overrides = [*sides[side], f"++scouts.{rung}.seeds={seeds}"]
        composed = S.compose_params(repo, overrides)
        members.append((S.experiment_name(pipeline, {k: S._at(composed, k) for k in keys}, "value"), overrides))
    revs = S.run_experiments(repo, members, rung, jobs, log)
    runs = {side: [_figures(x) for x in S.rung_runs(repo, revs[name], rung, name)]
            for side, (name, _) in zip(("with", "without"), members)}
    record = track.load(repo)
    metrics = sorted(set.intersection(*(set(r) for side in runs.values() for r in side)))
    rows = []
    for m in metrics:
        if not (m == "heldout_mean" or m.startswith("heldout.") or m == "benchmarks_mean.bpb" or m == "canary_exposure"):
            continue
        g = S.gain(runs["without"], runs["with"], m)
        rows.append({"metric": m, "with": g["proposal"], "without": g["preset"], "gain": g["gain"],
                     "sigma": g["sigma"], "paired_sigma": g["paired_sigma"],
                     "verdict": verdict(g) if m != "canary_exposure" else "bits of exposure (higher: more memorised)",
                     "track_record": track.line(record, rung, m) if m in ("heldout_mean", "benchmarks_mean.bpb")
                                     else None})
    return {"rung": rung, "seeds": seeds, "weight": weight, "overrides": sides,
            "experiments": {side: {"name": name, "rev": revs[name]} for side, (name, _) in
                            zip(("with", "without"), members)}, "metrics": rows}


# ---------------------------------------------------------------------------------------------------------
# Showing it


def render(c: dict) -> str:
    """The card as a terminal table."""
    s, t = c["source"], c["tokens"]
    lines = [f"value card: {s['source']} ({s['format']}, bucket {s['bucket']}, licence {s['licence']})",
             f"  records read {s['records']:,} from {s['files']} file(s), {s['read_errors']} read error(s); "
             f"documents {s['documents']:,}",
             f"  tokens kept {t['kept']:,} ({_pct(t['share_of_corpus'])} of the corpus), planned {t['planned']:,} "
             f"({_pct(t['share_of_plan'])} of the plan{'' if t['in_mixture'] else ': not in the mixture'})",
             "", f"  {'stage':<14}{'in':>8}{'kept':>8}{'changed':>9}{'dropped':>9}{'MB kept':>9}{'~tokens':>12}  reasons"]
    for st in c["stages"]:
        reasons = ", ".join(f"{k.split(':', 1)[1]} {v:,}" for k, v in st["reasons"].items() if k.startswith("drop:"))
        mb = "–" if st.get("bytes_kept") is None else f"{st['bytes_kept'] / 1e6:.2f}"
        tok = "–" if st.get("tokens_kept_estimate") is None else f"{st['tokens_kept_estimate']:,}"
        lines.append(f"  {st['stage']:<14}{st['in']:>8,}{st['keep']:>8,}{st['modify']:>9,}{st['drop']:>9,}{mb:>9}"
                     f"{tok:>12}  {reasons}")
    d = c["duplicates"]
    lines += ["", f"  duplicates: {d['dropped']:,} of {d['dedup_input']:,} dropped by dedup ({_pct(d['rate'])}): "
                  f"{d['copies_within_source']:,} copies of its own documents, {d['copies_of_the_rest']:,} of the "
                  f"rest's; {d['rest_dropped_as_its_copies']:,} of the rest's dropped as copies of its"]
    r = c.get("repetition")
    if r:
        lines.append(f"  repeated lines {_pct(r['source']['repeated_line_share'])} (rest "
                     f"{_pct(r['rest']['repeated_line_share'])}), template lines {_pct(r['source']['template_share'])}"
                     f" (rest {_pct(r['rest']['template_share'])})")
    k = c.get("tokenizer")
    if k:
        worst = ", ".join(f"{w['word']} {w['pieces']}" for w in k["source"]["fragmented_terms"][:6])
        lines.append(f"  bytes per token {_num(k['source']['bytes_per_token'])} (rest "
                     f"{_num(k['rest']['bytes_per_token'])}), pieces per word {_num(k['source']['pieces_per_word'])}"
                     f" (rest {_num(k['rest']['pieces_per_word'])}); most cut: {worst}")
    p, x, cont = c["pii"], c["toxicity"], c["contamination"]
    lines.append(f"  PII: {p['redacted']:,} of {p['documents']:,} documents redacted {p['found'] or ''}".rstrip())
    lines.append(f"  toxicity: {x['tagged']:,} of {x['scored']:,} tagged ({_pct(x['share'])})")
    if cont:
        lines.append(f"  contamination: {cont.get('documents', 0):,} documents overlap {cont.get('items', 0):,} "
                     f"benchmark item(s); {cont.get('semantic_suspects', 0):,} semantic suspect(s)")
    pr = c.get("paired")
    if pr:
        lines += ["", f"  paired scout runs at {pr['rung']}, {pr['seeds']} seed(s) each "
                      f"({pr['experiments']['with']['name']} with, {pr['experiments']['without']['name']} without); "
                      f"gain = without - with (positive: better with it)",
                  f"  {'metric':<22}{'with':>9}{'without':>9}{'gain':>9}{'σ':>8}{'paired σ':>10}  verdict"]
        for r in pr["metrics"]:
            ps = "–" if r["paired_sigma"] is None else f"{r['paired_sigma']:.4f}"
            lines.append(f"  {r['metric']:<22}{r['with']:>9.4f}{r['without']:>9.4f}{r['gain']:>+9.4f}"
                         f"{r['sigma']:>8.4f}{ps:>10}  {r['verdict']}")
        for r in pr["metrics"]:
            if r["track_record"]:
                lines.append(f"  {r['metric']}: {r['track_record']}")
    for name, a in (c.get("anneals") or {}).items():
        lines += ["", f"  anneal test {name}: {a['share']:g} of the {a['phase']} phase from step {a['branch_step']:,}, "
                      f"{a['steps_per_arm']} steps per arm ({a['cost']['fraction_of_full_run']:.1%} of the full run); "
                      f"difference = with - without",
                  f"  {'figure':<22}{'with':>9}{'without':>9}{'diff':>9}{'σ':>8}{'paired σ':>10}  better"]
        for r in a["verdicts"]:
            ps = "–" if r.get("paired_sigma") is None else f"{r['paired_sigma']:.4f}"
            lines.append(f"  {r['metric']:<22}{r['with']:>9.4f}{r['without']:>9.4f}{r['difference']:>+9.4f}"
                         f"{r['sigma']:>8.4f}{ps:>10}  {r['verdict']}")
    dom = c.get("domains")
    if dom and dom["topics"]:
        lines.append("  topics: " + ", ".join(f"{x['topic']} {x['name']} {x['documents']:,}" for x in dom["topics"][:4]))
        lines.append("  formats: " + ", ".join(f"{f} {n:,}" for f, n in dom["formats"].items()))
    return "\n".join(lines)


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{x:.1%}"


def _num(x: float | None) -> str:
    return "–" if x is None else f"{x:.2f}"


def write(c: dict, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(c, indent=1, sort_keys=True, default=str) + "\n")
    return path
