"""A source's worth on three candidates a user could add to the demo (issue 45, item 4; RESULTS.md, "A source's
worth: three candidates, card, scouts, anneal and the full run").

    python benchmarks/bench_source_value.py --project . --work /tmp/candidates [--books 6] [--steps all]

The candidates, each through the three steps of README's "Is this source worth adding?":
  mirror_reference  a mirror of a source the corpus has: the demo's reference Parquet files declared again as a
                    source of their own (bucket `mirror`): everything it holds, the corpus holds already
  books             a new domain: Project Gutenberg books (../shared/data/text/gutenberg/en), their licence and
                    boilerplate cut at the START/END markers, in pieces of about 1,000 words at paragraph breaks
                    (JSONL, bucket `books`)
  sample_licenses   a templated source already in the mixture: the licence texts (bulk phase, 5%)

Steps (each reads what the last wrote; `--steps` picks some):
  build    a clone of the project sharing its DVC cache, the candidates declared (conf/source/sample.yaml) with an
           annealing test each, `dvc repro`: the whole pipeline with them, the anneals included
  cards    `tokenmill value <candidate> --json` for each
  paired   `tokenmill value <candidate> --paired` (new sources at --weight in every phase)
  confirm  the full run trained again with the books in its bulk phase at --weight (`dvc exp run ... pretrain`):
           its held-out loss per bucket against the base full run's, beside the scouts' and the anneal's verdicts
Writes <work>/results.json and prints Markdown.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import yaml

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
NEW_SOURCES = {
    "mirror_reference": {"format": "parquet", "paths": ["data/sample/reference/*.parquet"], "root": "data/sample",
                         "bucket": "mirror", "licence": "PSF-2.0", "snapshot": "mirror-2026", "id_field": "title"},
    "books": {"format": "jsonl", "paths": ["data/raw/books/*.jsonl.gz"], "root": "data/raw", "bucket": "books",
              "licence": "public-domain", "snapshot": "gutenberg-en"},
}
SHARES = {"mirror_reference": 0.5, "books": 0.2, "sample_licenses": 0.2}
_MARK = re.compile(r"^\*\*\* ?(START|END) OF (THIS|THE) PROJECT GUTENBERG", re.M)


def _run(cmd: list[str], cwd: Path, log: Path) -> float:
    started = time.perf_counter()
    env = {**os.environ, "DVC_NO_ANALYTICS": "1", "TOKENMILL_PROGRESS": "0"}
    with open(log, "a") as f:
        f.write(f"\n$ {' '.join(cmd)}\n")
        f.flush()
        proc = subprocess.run(cmd, cwd=cwd, stdout=f, stderr=subprocess.STDOUT, env=env)
    if proc.returncode:
        sys.exit(f"{' '.join(cmd)} failed ({proc.returncode}): see {log}")
    return time.perf_counter() - started


def book_pieces(path: Path, words: int = 1000, most: int = 60) -> list[str]:
    """A Gutenberg book's text between its START and END markers, in pieces of about `words` words at paragraph
    breaks; at most `most` pieces."""
    text = gzip.open(path, "rt", encoding="utf-8", errors="replace").read().replace("\r\n", "\n")
    marks = [m.start() for m in _MARK.finditer(text)]
    if len(marks) >= 2:
        text = text[text.index("\n", marks[0]) + 1:marks[1]]
    pieces, current, count = [], [], 0
    for para in (p.strip() for p in text.split("\n\n")):
        if not para:
            continue
        current.append(para)
        count += len(para.split())
        if count >= words:
            pieces.append("\n\n".join(current))
            current, count = [], 0
            if len(pieces) == most:
                break
    return pieces


def build(project: Path, work: Path, books: int, log: Path) -> dict:
    repo = work / "repo"
    if not repo.exists():
        _run(["git", "clone", "-q", str(project), str(repo)], work, log)
        _run(["dvc", "cache", "dir", "--local", str(project / ".dvc" / "cache")], repo, log)
        _run(["dvc", "checkout", "-q"], repo, log)
    out = repo / "data" / "raw" / "books"
    out.mkdir(parents=True, exist_ok=True)
    with gzip.open(out / "gutenberg-en.jsonl.gz", "wt", encoding="utf-8") as f:
        for path in sorted((SHARED / "text" / "gutenberg" / "en").glob("*.txt.gz"))[:books]:
            for i, piece in enumerate(book_pieces(path)):
                f.write(json.dumps({"id": f"{path.name.split('.')[0]}-{i:03d}", "text": piece, "url": None}) + "\n")
    conf = repo / "conf" / "source" / "sample.yaml"
    spec = yaml.safe_load(conf.read_text())
    spec["sources"].update(NEW_SOURCES)
    spec["anneals"] = {**spec.get("anneals", {}), **{name.split("_")[0]: {"source": name, "share": share}
                                                     for name, share in SHARES.items()}}
    conf.write_text("# @package _global_\n" + yaml.safe_dump(spec, sort_keys=False))
    _run([sys.executable, "-m", "tokenmill.config"], repo, log)
    # The books are committed (data/raw is git-ignored): DVC's queue runs each paired experiment in a copy of the
    # commit, which would not hold an untracked file.
    _run(["git", "add", "-A"], repo, log)
    _run(["git", "add", "-f", "data/raw/books"], repo, log)
    _run(["git", "commit", "-qm", "candidates", "--allow-empty"], repo, log)
    seconds = _run(["dvc", "repro"], repo, log)
    return {"repro_seconds": round(seconds, 1),
            "base_pretrain": json.loads((repo / "data" / "train" / "pretrain" / "summary.json").read_text()),
            "anneals": {p.parent.name: json.loads(p.read_text()) for p in sorted((repo / "data" / "anneal").glob("*/result.json"))}}


def cards(work: Path, log: Path) -> dict:
    repo, out = work / "repo", {}
    for name in SHARES:
        seconds = _run(["tokenmill", "value", name, "--out", str(work / "cards" / f"{name}.json")], repo, log)
        out[name] = {"seconds": round(seconds, 1), "card": json.loads((work / "cards" / f"{name}.json").read_text())}
    return out


def paired(work: Path, weight: float, log: Path) -> dict:
    repo, out = work / "repo", {}
    for name in SHARES:
        extra = ["--weight", str(weight)] if name in NEW_SOURCES else []
        seconds = _run(["tokenmill", "value", name, "--paired", *extra, "--out", str(work / "paired" / f"{name}.json")],
                       repo, log)
        out[name] = {"seconds": round(seconds, 1), "card": json.loads((work / "paired" / f"{name}.json").read_text())}
    return out


def confirm(work: Path, weight: float, log: Path) -> dict:
    repo = work / "repo"
    seconds = _run(["dvc", "exp", "run", "-S", f"++mixture.phases.bulk.weights.books={weight}", "pretrain"], repo, log)
    summary = json.loads((repo / "data" / "train" / "pretrain" / "summary.json").read_text())
    _run(["git", "checkout", "--", "params.yaml"], repo, log)
    _run(["dvc", "checkout", "-q", "-f"], repo, log)
    return {"seconds": round(seconds, 1), "with_books": summary}


def report(results: dict) -> str:
    lines = []
    base = results.get("build", {}).get("base_pretrain")
    with_books = results.get("confirm", {}).get("with_books")
    if base and with_books:
        lines += ["| bucket | full run without books | with books in the bulk | difference |", "| --- | ---: | ---: | ---: |"]
        for b in sorted(base["heldout_loss"]):
            a, w = base["heldout_loss"][b], with_books["heldout_loss"].get(b)
            lines.append(f"| {b} | {a:.4f} ± {base['noise'].get(f'heldout.{b}') or 0:.4f} | "
                         f"{w:.4f} ± {with_books['noise'].get(f'heldout.{b}') or 0:.4f} | {w - a:+.4f} |")
    for name, r in (results.get("paired") or {}).items():
        p = r["card"]["paired"]
        lines += ["", f"paired scouts {name}: {p['rung']}, {p['seeds']} seeds a side, weight {p['weight']} "
                      f"({r['seconds']:.0f} s); difference = with - without",
                  "| figure | with | without | difference | σ | paired σ | verdict |",
                  "| --- | ---: | ---: | ---: | ---: | ---: | --- |"]
        lines += [f"| {m['metric']} | {m['with']:.4f} | {m['without']:.4f} | {-m['gain']:+.4f} | {m['sigma']:.4f} | "
                  f"{'–' if m['paired_sigma'] is None else format(m['paired_sigma'], '.4f')} | {m['verdict']} |"
                  for m in p["metrics"]]
    for name, r in (results.get("build", {}).get("anneals") or {}).items():
        lines += ["", f"anneal {name}: {r['source']} at {r['share']} from step {r['branch_step']}, "
                      f"{r['cost']['fraction_of_full_run']:.1%} of the full run",
                  "| figure | with | without | difference | σ | better |", "| --- | ---: | ---: | ---: | ---: | --- |"]
        lines += [f"| {v['metric']} | {v['with']:.4f} | {v['without']:.4f} | {v['difference']:+.4f} | {v['sigma']:.4f} | "
                  f"{v['verdict']} |" for v in r["verdicts"]]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--project", type=Path, default=Path("."))
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--books", type=int, default=6, help="Gutenberg books read (60 pieces of ~1,000 words at most each)")
    ap.add_argument("--weight", type=float, default=0.1, help="a new source's weight in the paired runs and the full run")
    ap.add_argument("--steps", default="all", help="comma-separated: build, cards, paired, confirm")
    args = ap.parse_args()
    steps = ["build", "cards", "paired", "confirm"] if args.steps == "all" else args.steps.split(",")
    args.work.mkdir(parents=True, exist_ok=True)
    store, log = args.work / "results.json", args.work / "log.txt"
    results = json.loads(store.read_text()) if store.exists() else {}
    for step in steps:
        if step == "build":
            results["build"] = build(args.project.resolve(), args.work, args.books, log)
        elif step == "cards":
            results["cards"] = cards(args.work, log)
        elif step == "paired":
            results["paired"] = paired(args.work, args.weight, log)
        elif step == "confirm":
            results["confirm"] = confirm(args.work, args.weight, log)
        store.write_text(json.dumps(results, indent=1, default=str) + "\n")
    print(report(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
