"""`tokenmill audit ...`: answer, from lineage.duckdb, what happened to a document, a stage, the pipeline.
`tokenmill compare ...`: which experiment wins on a metric, and whether the difference is beyond the noise.
`tokenmill search ...`: a mixture's weights chosen from a swarm of scout-only experiments."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from pathlib import Path

import duckdb

from tokenmill import lineage
from tokenmill.lineage import audit as Q  # the audit's queries; this module parses and prints

DEFAULT_DB = str(Path("lineage") / lineage.DB_NAME)


def _table(rows: list[tuple], header: list[str]) -> str:
    cells = [header] + [["" if v is None else str(v) for v in r] for r in rows]
    widths = [min(80, max(len(c[i]) for c in cells)) for i in range(len(header))]
    # Columns are padded to at most 80 characters but never cut: auditors copy ids and urls from here.
    lines = ["  ".join(c[i].ljust(widths[i]) for i in range(len(header))).rstrip() for c in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def audit_doc(con, key: str) -> int:
    stories = Q.document(con, key)
    if not stories:
        print(f"no record with doc_id or url {key!r}", file=sys.stderr)
        return 1
    for r in stories:
        print(f"document {r['doc_id']}")
        for k in Q.RECORD_FIELDS[1:]:
            print(f"  {k:<14}{r[k]}")
        for offset, error in r["read_errors"]:
            print(f"  read error    file {r['file']} at byte {offset}: {error}")
        for stage, action, reason, scores, details in r["decisions"]:
            print(f"  {stage:<14}{action} ({reason})")
            if scores:
                items = [f"{k}={v:g}" for k, v in sorted(scores.items())]
                for i in range(0, len(items), 4):  # four to a line: the filter records thirty-odd measures
                    print(("                scores: " if i == 0 else " " * 24) + ", ".join(items[i:i + 4]))
            if details:
                for k, v in sorted(json.loads(details).items()):
                    if k == "duplicate_of":  # name the kept document by its url too
                        url = Q.url_of(con, v)
                        v = f"{v} ({url})" if url else v
                    print(f"                {k}: {v}")
        for bucket, shard, offset, length in r["tokens"]:
            print(f"  tokens        {length} tokens in {shard} from token {offset} (mixture bucket {bucket})")
        if r["plan"] is not None:
            heldout, repeats, phases = r["plan"]
            where = "held out for evaluation" if heldout else f"planned {repeats} time(s) ({phases or 'no phase'})"
            print(f"  mixture       {where}")
        seen = r["steps"]
        for run in sorted({s[0] for s in seen}):
            steps = [s for s in seen if s[0] == run]
            skipped = sum(1 for s in steps if s[3])
            shown = ", ".join(str(s[1]) for s in steps[:12]) + (" ..." if len(steps) > 12 else "")
            print(f"  trained       {run}: {len(steps)} step(s) ({shown})"
                  + (f", {skipped} of them skipped" if skipped else ""))
        fate = r["fate"]
        if fate[0] == "kept":
            print("  fate          kept by every stage")
        else:
            print(f"  fate          dropped at {fate[1]} ({fate[2]})")
        print()
    return 0


def audit_stage(con, stage: str) -> int:
    try:
        s = Q.stage(con, stage)
    except LookupError as exc:
        print(exc, file=sys.stderr)
        return 1
    how = f"run {s['run'][0]}, {s['run'][1]:.1f} s" if s["run"] else "no run record here"
    print(f"stage {stage}: {s['documents_in']} documents in, {s['documents_out']} out ({how})\n")
    print(_table(s["reasons"], ["action", "reason", "documents"]))
    return 0


def audit_verify(con, data_root: Path) -> int:
    stale = lineage.stale_runs(data_root)
    problems = lineage.verify(con) + lineage.verify_training(con, data_root, stale=stale)
    if problems:
        for p in problems:
            print(p)
        print(f"conservation FAILED: {len(problems)} problem(s)", file=sys.stderr)
        return 1
    print(f"conservation holds for every stage: {', '.join(Q.stage_names(con))}")
    runs = [r for r in lineage.training_runs(con) if r not in stale]
    if runs:
        print(f"training runs fed exactly the plan's tokens (steps checked by hash): {', '.join(runs)}")
    if stale:
        print(f"not checked, trained on an earlier plan (`dvc repro` retrains them): {', '.join(stale)}")
    return 0


def audit_step(con, step: int, run: str | None = None) -> int:
    """Runs read the plan's windows in their own order (train.data_seed), so a step is one run's: `run`, by
    default the full run once it has trained; before any run, window `step` of the plan's stream."""
    try:
        s = Q.step(con, step, run)
    except LookupError as exc:
        print(f"tokenmill: {exc}", file=sys.stderr)
        return 1
    run, window, per_step = s["run"], s["window"], s["per_step"]
    whose = f"run {run}'s step {step}" if run else f"step {step} (no training run yet: the plan's order)"
    print(f"{whose}: window {window}, tokens {window * per_step} to {(window + 1) * per_step} of the training "
          f"stream, {len(s['spans'])} document span(s)")
    if s["trained"] is not None:
        t = s["trained"]
        fate = f"update skipped ({t['skip_reason']})" if t["skipped"] else "update applied"
        print(f"run {run}: loss {t['loss']:.4f}, gradient norm {t['grad_norm']:.4f}, learning rate {t['lr']:.3g}, "
              f"{fate}; fed tokens hash {t['tokens_hash']}")
    print()
    print(_table(s["spans"], ["position", "phase", "bucket", "doc_id", "epoch", "shard", "offset", "first_token",
                              "end_token"]))
    return 0


def audit_item(con, benchmark: str, item_id: str) -> int:
    """One benchmark item's story: the documents that overlapped it and their fates, the planned and trained
    steps that carried them, and the item's scores in the evaluation with its benchmark's all vs clean."""
    try:
        s = Q.item(con, benchmark, item_id)
    except LookupError as exc:
        print(f"tokenmill: {exc}", file=sys.stderr)
        return 1
    print(f"item {item_id} of {benchmark}: {len(s['documents'])} overlapping document(s), "
          + ("dirty (an overlap reached decontaminate's limits)" if s["dirty"] else
             "suspect (a document near its meaning: backcheck)" if s["suspect"] else "clean"))
    for d in s["documents"]:
        doc_id, url, fraction, matched, ngrams, contaminated, action, fate, at, reason, status, cosine = d["overlap"]
        print(f"  document {doc_id}  {url or ''}")
        if status == "suspect":
            print(f"    suspect       cosine {cosine:.3f} to the item's question and answer, no n-gram overlap: "
                  + ("dropped" if action == "drop" else "reported, kept"))
        else:
            kind = f"contaminated, {action}" if contaminated else "near miss, kept"
            print(f"    overlap       {matched} of the item's {ngrams} n-grams ({fraction:.2f}): {kind}")
        print("    fate          " + ("kept by every stage" if fate == "kept" else f"dropped at {at} ({reason})"))
        print(f"    planned       {d['visits']} visit(s) in the training stream")
        for run in sorted({x[0] for x in d["steps"]}):
            steps = [x[1] for x in d["steps"] if x[0] == run]
            shown = ", ".join(map(str, steps[:12])) + (" ..." if len(steps) > 12 else "")
            print(f"    trained       {run}: {len(steps)} step(s) ({shown})")
    row = s["scored"]
    if row is None:
        print("evaluation    not scored (not evaluated yet, or beyond evaluate.limit)")
        return 0
    got = ", ".join(f"{m} {row[m]:.4g}" for m in lineage.ITEM_METRICS if row[m] is not None)
    side = "left out of the clean score (dirty)" if row["dirty"] else "in the clean score"
    print(f"evaluation    {got}; {side}")
    for metric, n, n_dirty, everything, clean, diff, stderr, n_suspect, strict in s["scores"]:
        diff_text = "n/a" if diff is None else f"{diff:+.4f} ± {stderr:.4f}"
        clean_text = "n/a" if clean is None else f"{clean:.4f}"
        strict_text = "n/a" if strict is None else f"{strict:.4f}"
        print(f"  {benchmark} {metric}: all {everything:.4f} over {n} items, clean {clean_text} without "
              f"{n_dirty} dirty (strict {strict_text} without {n_suspect} suspect(s) too), difference {diff_text}")
    return 0


def audit_canary(con, name: str) -> int:
    """One planted canary's story: its document and secret's format, the visits planned and the steps of each
    run that trained it, and the exposure that left in each run's final model (tokenmill.canaries)."""
    try:
        s = Q.canary(con, name)
    except LookupError as exc:
        print(f"tokenmill: {exc}", file=sys.stderr)
        return 1
    print(f"canary {name}: document {s['doc_id']}, {s['planned_visits']} planned visit(s)")
    print(f"  text          {s['text']}")
    print(f"  planned       at stream positions {', '.join(map(str, s['positions'])) or 'none'}")
    if not s["runs"]:
        print("  trained       no training run has finished yet")
    for r in s["runs"]:
        steps = ", ".join(map(str, r["steps"][:12])) + (" ..." if len(r["steps"]) > 12 else "")
        print(f"  {r['run']:<15} {r['trained_visits']} visit(s) trained (steps {steps or 'none'}); exposure "
              f"{r['exposure']:.2f} bits (rank {r['rank']} of {r['candidates'] + 1}), {r['exposure_fit']:.2f} "
              f"extrapolated")
    return 0


def audit_sql(con, query: str) -> int:
    rel = con.sql(query)
    if rel is None:
        return 0
    print(_table(rel.fetchall(), list(rel.columns)))
    return 0


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):
        # One line, not argparse's usage block: the user needs the mistake, --help has the rest.
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def _one_line(exc: BaseException) -> str:
    return "tokenmill: " + " ".join(f"{type(exc).__name__}: {exc}".split())


def _audit(args) -> int:
    try:
        con = lineage.connect(args.db)
    except FileNotFoundError as exc:
        print(f"tokenmill: {exc}", file=sys.stderr)
        return 2
    except duckdb.Error as exc:  # not a DuckDB file, or one from an incompatible version
        print(_one_line(exc), file=sys.stderr)
        return 2
    with con:
        try:
            if args.what == "doc":
                return audit_doc(con, args.key)
            if args.what == "stage":
                return audit_stage(con, args.name)
            if args.what == "verify":
                return audit_verify(con, Path(args.db).resolve().parent.parent / "data")
            if args.what == "step":
                return audit_step(con, args.n, args.run)
            if args.what == "canary":
                return audit_canary(con, args.name)
            if args.what == "item":
                return audit_item(con, args.benchmark, args.item_id)
            return audit_sql(con, args.query)
        except duckdb.Error as exc:  # a bad query, a refused one, or a database from an older version
            print(_one_line(exc), file=sys.stderr)
            return 2


def _compare(args) -> int:
    from tokenmill.evaluate import compare as C  # each command loads its own modules (DVC's API here): `tokenmill audit` stays quick

    try:
        chosen = C.resolve(args.experiments, args.repo)
        if args.rung:  # a verdict at a scout rung (experiments that trained the ladder only)
            exps, unreadable = C.load_all(chosen, args.repo, rung=args.rung)
        else:
            exps, unreadable = C.load_all(chosen, args.repo)
        for line in unreadable:  # each revision left out, why, and what to run
            print(f"tokenmill: left out {line}", file=sys.stderr)
        if len(exps) < 2:
            raise C.CompareError(f"compare needs two readable experiments or more, got {len(exps)}"
                                 + (f" ({', '.join(e.name for e in exps)})" if exps else "")
                                 + ("; the others are left out above" if unreadable else ""))
        if args.rung:  # the rung's track record against the full run goes beside each verdict
            record = C.track.load(args.repo)
            results = [C.compare_rung(exps, args.rung, m, record) for m in (args.metric or ["heldout_mean"])]
        else:
            metrics = args.metric or [C.FROM_DECISION.get(exps[0].decision_metric, exps[0].decision_metric or "heldout_bpb")]
            results = [C.compare(exps, m) for m in metrics]
    except C.CompareError as exc:
        print(f"tokenmill: {exc}", file=sys.stderr)
        return 2
    data = C.data_differences(exps)
    if args.html:
        from tokenmill.report.decision import build_decision_page  # matplotlib: only for the page

        searches = args.search if args.search is not None else sorted((Path(args.repo) / "searches").glob("*.json"))
        build_decision_page(args.html, results, data, searches, project=args.repo)
        print(f"tokenmill: the decision page is {Path(args.html) / 'index.html'}", file=sys.stderr)
    if args.json:
        print(json.dumps({"comparisons": results, "data": data}, indent=1))
    else:
        print("\n\n".join(C.render(r, data) for r in results))
    return 0


def _search(args) -> int:
    from tokenmill import search as S  # DVC's repo and scipy: only for `search`

    try:
        out = S.search(args.repo, preset=args.preset, phase=args.phase, rung=args.rung, runs=args.runs,
                       jobs=args.jobs, concentration=args.concentration, seed=args.seed, name=args.name,
                       verify=not args.no_verify, verify_seeds=args.verify_seeds,
                       log=lambda line: print(line, file=sys.stderr))
    except S.SearchError as exc:
        print(f"tokenmill: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(out, indent=1) if args.json else S.render(out))
    return 0


def _release(args) -> int:
    from tokenmill import croissant  # mlcroissant: only for `release`

    out = Path(args.repo) / args.out
    try:
        facts = croissant.write_release(args.repo, out)
    except (FileNotFoundError, ValueError) as exc:
        print(f"tokenmill release: {exc}", file=sys.stderr)
        return 2
    print(f"release: {facts['documents']} documents, {facts['tokens']} tokens, {len(facts['files'])} files, "
          f"croissant.json and README.md in {out}")
    return 0


def _openlineage(args) -> int:
    from tokenmill import openlineage as OL  # the OpenLineage client: only for `openlineage`

    try:
        path = OL.write(OL.events(args.repo, args.parent), Path(args.repo) / args.out)
        print(f"openlineage: {len(path.read_text().splitlines())} events in {path}")
        if args.send:
            sent, total = OL.send(Path(args.repo) / args.out)
            print(f"openlineage: sent {sent}; all {total} delivered")
    except OL.OpenLineageError as exc:
        print(f"tokenmill openlineage: {exc}", file=sys.stderr)
        return 2
    return 0


def _value(args) -> int:
    from tokenmill import value  # the tokenizer and the text measures: only for `value`
    from tokenmill.search import SearchError  # DVC's queue, for the paired experiments: only for `value`

    try:
        c = value.card(args.repo, args.source, args.sample)
        if args.paired:
            c["paired"] = value.paired(args.repo, args.source, args.rung, args.seeds, args.jobs, args.weight,
                                       log=lambda m: print(m, file=sys.stderr))
    except (LookupError, SearchError) as exc:
        print(f"tokenmill {exc}", file=sys.stderr)
        return 2
    out = value.write(c, Path(args.repo) / (args.out or f"reports/value/{args.source}.json"))
    print(json.dumps(c, indent=1, default=str) if args.json else value.render(c))
    print(f"value: the card is in {out}", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = _Parser(prog="tokenmill", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    audit = sub.add_parser("audit", help="query the lineage database")
    audit.add_argument("--db", default=DEFAULT_DB, help=f"lineage database (default {DEFAULT_DB})")
    what = audit.add_subparsers(dest="what", required=True, parser_class=_Parser)
    what.add_parser("doc", help="a document's source record and every decision").add_argument("key", help="doc_id or url")
    what.add_parser("stage", help="counts by action and reason").add_argument("name")
    what.add_parser("verify", help="conservation across all stages; non-zero exit on any violation")
    step = what.add_parser("step", help="the documents and token spans of one training step")
    step.add_argument("n", type=int)
    step.add_argument("--run", default=None, help="the training run whose step it is, with its loss and update "
                                                  "(pretrain, scout@s1, ...; default: pretrain once trained)")
    item = what.add_parser("item", help="a benchmark item: the documents that overlapped it, their fates and "
                                        "steps, and its score (all vs clean)")
    item.add_argument("benchmark")
    item.add_argument("item_id")
    what.add_parser("canary", help="a planted canary: its visits, the steps that trained it, its exposure per "
                                   "run").add_argument("name", help="s<set>-v<visits>, e.g. s0-v8")
    what.add_parser("sql", help="run a read-only SQL query (files, extensions and settings are out of reach)"
                    ).add_argument("query")
    cmp = sub.add_parser("compare", help="which experiment wins on a metric, and whether it is beyond the noise")
    cmp.add_argument("experiments", nargs="*", help="experiment names or revisions (`dvc exp show`; none: all of "
                                                    "them), `workspace` for the working tree")
    cmp.add_argument("--metric", action="append", help="heldout_bpb, heldout_bpb.<bucket>, benchmarks_mean.<m>, "
                                                       "<benchmark>.<m> (default: the evaluate stage's decision "
                                                       "metric); repeatable")
    cmp.add_argument("--rung", help="judge at this scout rung (experiments that trained the ladder only), on "
                                    "heldout_mean or benchmarks_mean.<m>; the verdict carries the rung's measured "
                                    "track record against the full run")
    cmp.add_argument("--repo", default=".", help="the DVC repository (default: here)")
    cmp.add_argument("--json", action="store_true", help="the numbers as JSON")
    cmp.add_argument("--html", metavar="DIR", help="also write the decision page (DIR/index.html, with plots)")
    cmp.add_argument("--search", action="append", metavar="FILE",
                     help="a mixture search's results for the page (default: every searches/*.json)")
    srch = sub.add_parser("search", help="choose a mixture's weights from a swarm of scout-only experiments "
                                         "(dvc exp run --queue)")
    srch.add_argument("--preset", help="the mixture preset searched around (default: params.yaml's mixture.name)")
    srch.add_argument("--phase", help="the phase whose weights are searched (default: the largest)")
    srch.add_argument("--rung", help="the scout rung each experiment trains (default: the ladder's first)")
    srch.add_argument("--runs", type=int, default=12, help="experiments in the swarm (default 12)")
    srch.add_argument("--jobs", type=int, default=2, help="experiments run at a time (default 2)")
    srch.add_argument("--concentration", type=float, default=20.0,
                      help="of the Dirichlet around the preset's weights: larger draws closer (default 20)")
    srch.add_argument("--seed", type=int, default=0, help="of the draws and the bootstrap (default 0)")
    srch.add_argument("--name", help="the proposed preset's name (default: <preset>_searched)")
    srch.add_argument("--no-verify", action="store_true", help="skip the scout runs of the proposal and the preset")
    srch.add_argument("--verify-seeds", type=int, default=2,
                      help="seeds each of the proposal and the preset is trained with to verify the gain (default 2)")
    srch.add_argument("--repo", default=".", help="the DVC repository (default: here)")
    srch.add_argument("--json", action="store_true", help="every figure as JSON")
    ol = sub.add_parser("openlineage", help="OpenLineage events of every stage run (lineage/openlineage.ndjson); "
                                            "--send delivers them to OPENLINEAGE_URL")
    ol.add_argument("--repo", default=".", help="the built project (default: here)")
    ol.add_argument("--out", default="lineage", help="where the events go (default: lineage/)")
    ol.add_argument("--parent", help="the pipeline run they belong to (default: the git revision)")
    ol.add_argument("--send", action="store_true", help="send what was not delivered yet to OPENLINEAGE_URL")
    rel = sub.add_parser("release", help="the curated corpus with a Croissant file and a dataset card (release/)")
    rel.add_argument("--repo", default=".", help="the built project (default: here)")
    rel.add_argument("--out", default="release", help="the release folder, replaced whole (default: release/)")
    val = sub.add_parser("value", help="a data source's value card: what it adds, read from the built project "
                                        "(reports/value/<source>.json; the decision page shows every card)")
    val.add_argument("source", help="a source declared in the configuration and ingested (sources.<name>)")
    val.add_argument("--repo", default=".", help="the built project (default: here)")
    val.add_argument("--sample", type=int, default=2000,
                     help="documents read each side for the text measures (default 2000)")
    val.add_argument("--out", help="the card's JSON (default: reports/value/<source>.json)")
    val.add_argument("--json", action="store_true", help="print the card as JSON")
    val.add_argument("--paired", action="store_true", help="also train scout-only experiments of the mixture with "
                                                           "and without the source (dvc exp run --queue)")
    val.add_argument("--rung", help="the rung the paired experiments train (default: the ladder's first)")
    val.add_argument("--seeds", type=int, default=2, help="seeds of each side (default 2)")
    val.add_argument("--jobs", type=int, default=2, help="experiments run at a time (default 2)")
    val.add_argument("--weight", type=float, help="the source's weight in every phase for the `with` side "
                                                  "(default: the preset's; needed when it has none)")
    args = parser.parse_args(argv)
    try:
        code = {"compare": _compare, "search": _search, "openlineage": _openlineage,
            "release": _release, "value": _value}.get(args.command, _audit)(args)
        sys.stdout.flush()  # a closed pipe shows up here at the latest, while it can still be handled
        return code
    except BrokenPipeError:
        # `tokenmill audit ... | head`: the reader has what it wanted. Point stdout at /dev/null so that the
        # interpreter's final flush does not raise again, and exit as a process ended by SIGPIPE would.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE


if __name__ == "__main__":
    sys.exit(main())
