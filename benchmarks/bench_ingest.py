"""Ingest and HTML-extraction throughput on real data, resiliparse vs trafilatura.

    python benchmarks/bench_ingest.py [--repeat N] [--out FILE]
    python benchmarks/bench_ingest.py --extraction-only [--repeat N] [--out FILE]

Measures, side by side in one run:
  (a) ingest of every WARC / ARC / WET file under ../shared/data/warc through tokenmill.ingest.ingest_file,
      one task per file, with the local executor at 1 worker (inline: figures are per core) and at 2
      workers (spawned process pool, pool start-up included, as the ingest stage pays it);
  (b) extract_html alone on the pages of trafilatura's evaluation set (already decoded, in memory);
  (c) peak resident memory of each configuration: every configuration runs in a fresh subprocess
      (this script with --single NAME), so peaks never mix;
  (d) extraction quality of (b) against the evaluation set's ground truth: precision, recall and F1 of the
      "with" (main content) and "without" (boilerplate) snippets, counted per snippet and weighted by tokens.
--extraction-only runs (b)-(d) alone, for resiliparse, the cascade and trafilatura, and writes the section
"## HTML extraction: quality and speed" instead.
Each configuration runs --repeat times inside its subprocess and the fastest repetition is reported
(warm caches, least disturbed by the rest of the machine); CPU seconds are recorded beside wall seconds,
so per-core rates stay meaningful on a shared machine. Prints a Markdown table and writes the section
"## Ingest and HTML extraction" of --out (benchmarks/RESULTS.md), replacing an older copy of that section
and leaving every other section alone.
"""

from __future__ import annotations

import argparse
import datetime as dt
import gzip
import json
import os
import re
import resource
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import unicodedata
from dataclasses import asdict
from pathlib import Path

from benchlib import machine, write_section

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / ".." / "shared" / "data"
SECTION = "## Ingest and HTML extraction"
INGEST_LIBRARIES = ("tokenmill", "resiliparse", "trafilatura", "warcio", "lxml", "pyarrow")
EXTRACTORS = ("resiliparse", "trafilatura")
# Extraction alone also measures the cascade (resiliparse, cleaned, trafilatura for the few pages it leaves
# nearly empty); whole-archive ingest keeps the two libraries.
EXTRACTION_EXTRACTORS = ("resiliparse", "cascade", "trafilatura")
QUALITY_SECTION = "## HTML extraction: quality and speed"
# name -> (kind, extractor, workers)
CONFIGS = {**{f"ingest-{ex}-w{w}": ("ingest", ex, w) for ex in EXTRACTORS for w in (1, 2)},
           **{f"extract-{ex}-w1": ("extract", ex, 1) for ex in EXTRACTION_EXTRACTORS}}
# WAT files hold JSON metadata, not content; everything else under warc/ is WARC, ARC or WET.
ARCHIVE = re.compile(r"\.(warc|arc|wet)(\.gz)?$")


def archive_files(data: Path) -> list[Path]:
    files = sorted(p for p in (data / "warc").rglob("*") if p.is_file() and ARCHIVE.search(p.name))
    if not files:
        sys.exit(f"no WARC/ARC/WET files under {data / 'warc'}")
    return files


def archive_format(path: Path) -> str:
    return "wet" if ".wet" in path.name else "arc" if ".arc" in path.name else "warc"


def eval_entries(data: Path) -> list[dict]:
    """evaldata.json's entries ({file, with, without}) in sorted-url order, the order of eval_pages()."""
    entries = json.loads((data / "html" / "trafilatura" / "evaldata.json").read_text(encoding="utf-8"))
    return [entries[url] for url in sorted(entries)]


_TOKEN = re.compile(r"\w+")


def _tokens(text: str) -> str:
    return " " + " ".join(_TOKEN.findall(unicodedata.normalize("NFC", text).lower())) + " "


def extraction_quality(texts: list[str], entries: list[dict]) -> dict:
    """Precision, recall and F1 of extracted texts against the snippets of the evaluation set.

    A snippet is found when its word-token sequence (\\w+, lower-cased, NFC) occurs in the text's, so line
    breaks and punctuation do not decide. "with" snippets found are true positives, missed ones false
    negatives, "without" snippets found false positives; "snippet" counts each snippet once (trafilatura's own
    evaluation), "token" weighs it by its number of tokens, so a 40-word paragraph outweighs "Kontakt".
    """
    n = dict(tp=0, fn=0, fp=0, ttp=0, tfn=0, tfp=0)
    for text, entry in zip(texts, entries, strict=True):
        hay = _tokens(text)
        for kind in ("with", "without"):
            for snippet in entry[kind]:
                needle = _tokens(snippet)
                hit, size = needle in hay, len(needle.split())
                key = ("tp" if hit else "fn") if kind == "with" else ("fp" if hit else None)
                if key:
                    n[key] += 1
                    n["t" + key] += size
    out = {}
    for prefix in ("", "t"):
        tp, fn, fp = n[prefix + "tp"], n[prefix + "fn"], n[prefix + "fp"]
        p, r = tp / (tp + fp), tp / (tp + fn)
        name = "token" if prefix else "snippet"
        out[name] = {"precision": p, "recall": r, "f1": 2 * p * r / (p + r)}
    out["empty"] = sum(1 for t in texts if not t.strip())
    return out


def eval_pages(data: Path) -> list[bytes]:
    """Raw bytes of every page evaldata.json names, in sorted-url order."""
    html_dir = data / "html" / "trafilatura"
    entries = json.loads((html_dir / "evaldata.json").read_text(encoding="utf-8"))
    pages = []
    for url in sorted(entries):
        name = entries[url]["file"]
        candidates = [html_dir / folder / f"{name}.gz" for folder in ("eval", "cache")]
        path = next((c for c in candidates if c.exists()), None)
        if path is None:
            sys.exit(f"{name} is in neither eval/ nor cache/ under {html_dir}")
        pages.append(gzip.decompress(path.read_bytes()))
    return pages


def _cpu_seconds() -> float:
    """CPU time of this process and of its finished children (pool workers), user + system."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def _machine_busy_seconds() -> float:
    """CPU-seconds all processes on the machine have spent busy since boot (/proc/stat, every core)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")  # guest time is already in user


def _timed(fn):
    """(result, wall s, CPU s, other load). Per-core figures use CPU time: on a machine shared with other
    work, wall time stretches with the other load, the CPU time a configuration needs much less so.
    Other load = cores kept busy by everything else on the machine during the run, on average."""
    wall, cpu, busy = time.perf_counter(), _cpu_seconds(), _machine_busy_seconds()
    out = fn()
    wall, cpu = time.perf_counter() - wall, _cpu_seconds() - cpu
    return out, wall, cpu, max(0.0, (_machine_busy_seconds() - busy - cpu) / wall)


def wait_until_quiet(timeout: float, threshold: float = 0.25, window: float = 5.0) -> float:
    """Wait (up to timeout s) until other work keeps fewer than `threshold` cores busy over `window` s."""
    deadline = time.monotonic() + timeout
    while True:
        busy, t = _machine_busy_seconds(), time.monotonic()
        time.sleep(window)
        other = (_machine_busy_seconds() - busy) / (time.monotonic() - t)
        if other < threshold or time.monotonic() >= deadline:
            return other


def _rss_mb(who: int = resource.RUSAGE_SELF) -> float:
    return resource.getrusage(who).ru_maxrss / 1024  # Linux reports KiB


# --- one configuration, in its own process ----------------------------------------------------------------

def run_single(name: str, repeat: int, data: Path) -> dict:
    kind, extractor, workers = CONFIGS[name]
    os.environ["TOKENMILL_PROGRESS"] = "0"
    from tokenmill.ingest.text import decode, extract_html, normalise

    # Warm-up outside the timing: the extractor is imported lazily on its first call.
    extract_html("<html><body><p>warm up</p></body></html>", extractor)
    if kind == "ingest":
        result = _bench_ingest(extractor, workers, repeat, data)
    else:
        html = [decode(raw)[0] for raw in eval_pages(data)]
        result = {"pages": len(html), "input_mb": sum(len(h.encode("utf-8")) for h in html) / 1e6,
                  "rss_before_mb": _rss_mb()}
        runs = [_timed(lambda: [extract_html(h, extractor) for h in html]) for _ in range(repeat)]
        texts, wall, cpu, other = min(runs, key=lambda r: r[1])
        result.update(seconds=wall, cpu_seconds=cpu, other_load=other, all_seconds=[r[1] for r in runs],
                      text_chars=sum(len(t) for t in texts),
                      quality=extraction_quality([normalise(t) for t in texts], eval_entries(data)))
        # The same on the even- and odd-numbered pages apart: a rule tuned on these pages that only fits some of
        # them shows up as a gain on one half and none (or a loss) on the other.
        normalised, entries = [normalise(t) for t in texts], eval_entries(data)
        result["quality_halves"] = {half: extraction_quality(normalised[start::2], entries[start::2])["token"]["f1"]
                                    for half, start in (("even", 0), ("odd", 1))}
    result.update(name=name, kind=kind, extractor=extractor, workers=workers, peak_rss_mb=_rss_mb(),
                  peak_child_rss_mb=_rss_mb(resource.RUSAGE_CHILDREN))
    if kind == "ingest":  # after the peaks are taken: reading Parquet here would raise this process's peak
        out = result.pop("out_dir")
        result["kept_by_fallback"] = _fallback_count(Path(out) / "decisions")
        shutil.rmtree(out)
    return result


def _bench_ingest(extractor: str, workers: int, repeat: int, data: Path) -> dict:
    from tokenmill.execution import LocalExecutor
    from tokenmill.ingest import IngestTask, Source

    files = archive_files(data)
    rss_before = _rss_mb()
    runs, out = [], None
    for _ in range(repeat):
        if out:
            shutil.rmtree(out)
        out = tempfile.mkdtemp(prefix="bench_ingest_")  # the last run's shards are kept for _fallback_count
        tasks = [IngestTask(source=asdict(Source(name="bench", format=archive_format(p), paths=[str(p)],
                                                 bucket="web", licence="various")),
                            path=str(p), file=p.name, shard=f"bench-{i:05d}", out_dir=out,
                            extractor=extractor, max_payload_bytes=10_000_000)
                 for i, p in enumerate(files)]
        timed, wall, cpu, other = _timed(
            lambda: LocalExecutor(workers).map(_ingest_file_timed, tasks, desc="ingest"))
        slowest = max(((Path(t.path).name, sec) for t, (_, sec) in zip(tasks, timed)), key=lambda x: x[1])
        runs.append((wall, cpu, other, slowest))
    counts, kept_by_file = {}, {}  # identical in every run (ingest is deterministic); from the last one
    for r, _ in timed:
        kept_by_file[r["file"].split(":", 1)[1]] = r["counts"].get("keep:extracted", 0)
        for key, n in r["counts"].items():
            counts[key] = counts.get(key, 0) + n
    wall, cpu, other, slowest = min(runs)
    return {"files": len(files), "input_mb": sum(p.stat().st_size for p in files) / 1e6,
            "records": sum(counts.values()), "kept": counts.get("keep:extracted", 0),
            "counts": dict(sorted(counts.items())), "kept_by_file": kept_by_file, "slowest_file": slowest,
            "out_dir": out, "seconds": wall, "cpu_seconds": cpu, "other_load": other,
            "all_seconds": [r[0] for r in runs], "rss_before_mb": rss_before}


def _fallback_count(decisions: Path) -> int:
    """Kept documents whose decision says another extractor than the configured one produced the text."""
    import pyarrow.parquet as pq

    n = 0
    for shard in sorted(decisions.glob("*.parquet")):
        t = pq.read_table(shard, columns=["action", "details"]).to_pydict()
        n += sum(1 for a, d in zip(t["action"], t["details"]) if a == "keep" and d and "fallback" in d)
    return n


def _ingest_file_timed(task) -> tuple[dict, float]:
    """ingest_file, plus the seconds this one file took (its lower bound on any number of workers)."""
    from tokenmill.ingest import ingest_file

    t = time.perf_counter()
    return ingest_file(task), time.perf_counter() - t


def pool_startup(workers: int) -> float:
    """Seconds for a fresh spawn pool to import the ingest code in every worker and return."""
    from tokenmill.execution import LocalExecutor

    os.environ["TOKENMILL_PROGRESS"] = "0"
    t = time.perf_counter()
    LocalExecutor(workers).map(_import_ingest, list(range(workers)))
    return time.perf_counter() - t


def _import_ingest(_):
    import tokenmill.ingest  # noqa: F401  (what a worker imports before its first task)

    return os.getpid()


# --- the driver -------------------------------------------------------------------------------------------



def run_config(name: str, repeat: int, data: Path) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--single", name, "--repeat", str(repeat),
           "--data", str(data)]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def table(res: dict) -> str:
    rows = ["| ingest (a) | workers | wall s | CPU s | records/s | kept docs/s | input MB/s | "
            "kept docs per CPU-s | wall speed-up vs 1 worker | peak RSS MB | other load (cores) |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for ex in EXTRACTORS:
        base = res[f"ingest-{ex}-w1"]
        for w in (1, 2):
            r = res[f"ingest-{ex}-w{w}"]
            s, c = r["seconds"], r["cpu_seconds"]
            rss = f"{r['peak_rss_mb']:.0f}" + (f" + {w} × ≤{r['peak_child_rss_mb']:.0f}" if w > 1 else "")
            rows.append(f"| {ex} | {w} | {s:.2f} | {c:.2f} | {r['records'] / s:,.0f} | {r['kept'] / s:,.1f} | "
                        f"{r['input_mb'] / s:.2f} | {r['kept'] / c:,.1f} | {base['seconds'] / s:.2f}× | {rss} | "
                        f"{r['other_load']:.2f} |")
    rows += ["", "| HTML extraction alone (b) | pages | wall s | CPU s | pages/s | pages per CPU-s | CPU-ms/page | "
             "HTML MB/s | peak RSS MB | other load (cores) |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for ex in EXTRACTION_EXTRACTORS:
        r = res[f"extract-{ex}-w1"]
        s = r["seconds"]
        c = r["cpu_seconds"]
        rows.append(f"| {ex} | {r['pages']} | {s:.2f} | {c:.2f} | {r['pages'] / s:,.1f} | {r['pages'] / c:,.1f} | "
                    f"{1000 * c / r['pages']:.2f} | {r['input_mb'] / s:.2f} | {r['peak_rss_mb']:.0f} | "
                    f"{r['other_load']:.2f} |")
    return "\n".join(rows)


def section(res: dict, startup: float, info: dict, command: str, started: str, elapsed: float,
            quiet: float) -> str:
    ing = {ex: res[f"ingest-{ex}-w1"] for ex in EXTRACTORS}
    ext = {ex: res[f"extract-{ex}-w1"] for ex in EXTRACTORS}
    # Ratios from CPU seconds: equal to wall seconds for these inline single-core runs on an idle machine, and
    # much less disturbed than wall seconds when the machine is shared.
    ms = {ex: 1000 * ext[ex]["cpu_seconds"] / ext[ex]["pages"] for ex in EXTRACTORS}
    a = ing["resiliparse"]
    big = sum(n for f, n in a["kept_by_file"].items() if f.startswith("aut_") and "docs" not in f)
    counts = ", ".join(f"{k} {v}" for k, v in a["counts"].items())
    def slow(ex: str) -> str:
        name, sec = res[f"ingest-{ex}-w2"]["slowest_file"]
        return f"{ex}: {name}, {sec:.2f} s of {res[f'ingest-{ex}-w2']['seconds']:.2f} s"

    speedup = {ex: ing[ex]["seconds"] / res[f"ingest-{ex}-w2"]["seconds"] for ex in EXTRACTORS}
    v = info["versions"]
    return f"""{SECTION}

- Machine: {info['nproc']} cores ({info['cpu']}), {info['ram_gib']:.1f} GiB RAM, {info['os']}.
- Software: Python {info['python']}, tokenmill {v['tokenmill']}, resiliparse {v['resiliparse']}, \
trafilatura {v['trafilatura']}, warcio {v['warcio']}, lxml {v['lxml']}, pyarrow {v['pyarrow']}.
- Command, from the project root with .venv active: `{command}`
- Date: {started}; {elapsed:.0f} s in all. Before starting, other work kept {quiet:.2f} cores busy.
- Inputs: (a) all {a['files']} WARC / ARC / WET files under `../shared/data/warc` ({a['input_mb']:.1f} MB on disk,
  mostly gzip; {a['records']} records), one `ingest_file` task per file through the local executor, Parquet
  shards written to a temporary directory; outcomes with resiliparse: {counts}
  ({a['kept_by_fallback']} of the kept documents extracted by the trafilatura fallback after resiliparse found no
  text; trafilatura: {ing['trafilatura']['kept']} kept).
  (b) the {ext['resiliparse']['pages']} pages of trafilatura's evaluation set ({ext['resiliparse']['input_mb']:.1f} MB
  of HTML), decoded beforehand; only `extract_html` is timed.
- Method: every configuration runs in a fresh subprocess, {a['repeats']} run(s) each; the fastest is reported.
  At 1 worker the executor runs inline, so those rows are per core. "kept docs per CPU-s" divides by the CPU
  time of the run (main process and pool workers), which other load on the machine inflates far less. Peak RSS
  is `ru_maxrss` of the subprocess (imports and inputs included: {a['rss_before_mb']:.0f} MB before the first
  ingest; the extraction rows hold all pages in memory) and, with the pool, of its largest worker.

{table(res)}
{_load_warning(res, info['nproc'])}
**resiliparse extracts HTML {ext['trafilatura']['cpu_seconds'] / ext['resiliparse']['cpu_seconds']:.1f}× as fast as \
trafilatura** per core ({ms['resiliparse']:.1f} vs {ms['trafilatura']:.1f} CPU-ms per page); over whole archives,
where reading, hashing and Parquet writing are shared costs, ingest with resiliparse is
{ing['trafilatura']['cpu_seconds'] / ing['resiliparse']['cpu_seconds']:.1f}× as fast (CPU seconds; \
{ing['trafilatura']['seconds'] / ing['resiliparse']['seconds']:.1f}× in wall time).
Two workers gave {speedup['resiliparse']:.2f}× (resiliparse) and {speedup['trafilatura']:.2f}× (trafilatura) the
1-worker speed. Their wall time includes starting the spawn pool ({startup:.1f} s for 2 workers to import the
ingest code, measured separately), and one task is one file: the two largest files (aut_warc_example,
aut_arc_example) hold {big} of the {a['kept']} kept documents, and no number of workers finishes before the
slowest single file ({slow('resiliparse')}; {slow('trafilatura')}).
"""


def quality_section(res: dict, info: dict, command: str, started: str, elapsed: float, quiet: float) -> str:
    rows = ["| extractor | token precision | token recall | token F1 | snippet precision | snippet recall | "
            "snippet F1 | token F1, even pages | token F1, odd pages | empty pages | CPU-ms/page | "
            "per-core speed vs trafilatura | other load (cores) |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    ms = {ex: 1000 * res[f"extract-{ex}-w1"]["cpu_seconds"] / res[f"extract-{ex}-w1"]["pages"]
          for ex in EXTRACTION_EXTRACTORS}
    for ex in EXTRACTION_EXTRACTORS:
        r = res[f"extract-{ex}-w1"]
        q, t, sn = r["quality"], r["quality"]["token"], r["quality"]["snippet"]
        rows.append(f"| {ex} | {t['precision']:.4f} | {t['recall']:.4f} | **{t['f1']:.4f}** | {sn['precision']:.4f} | "
                    f"{sn['recall']:.4f} | {sn['f1']:.4f} | {r['quality_halves']['even']:.4f} | "
                    f"{r['quality_halves']['odd']:.4f} | {q['empty']} | {ms[ex]:.2f} | "
                    f"{ms['trafilatura'] / ms[ex]:.1f}× | {r['other_load']:.2f} |")
    f1 = {ex: res[f"extract-{ex}-w1"]["quality"]["token"]["f1"] for ex in EXTRACTION_EXTRACTORS}
    gap, speed = f1["trafilatura"] - f1["cascade"], ms["trafilatura"] / ms["cascade"]
    verdict = (f"The cascade is {gap:.3f} token F1 below trafilatura (target: at most 0.01, "
               f"{'met' if gap <= 0.01 else 'not met'}) at {speed:.1f}× its per-core speed (target: at least 5×, "
               f"{'met' if speed >= 5 else 'not met'}); resiliparse alone is {f1['trafilatura'] - f1['resiliparse']:.3f} "
               f"below.")
    v = info["versions"]
    r0 = res["extract-resiliparse-w1"]
    return f"""{QUALITY_SECTION}

- Machine: {info['nproc']} cores ({info['cpu']}), {info['ram_gib']:.1f} GiB RAM, {info['os']}.
- Software: Python {info['python']}, tokenmill {v['tokenmill']}, resiliparse {v['resiliparse']}, \
trafilatura {v['trafilatura']}, lxml {v['lxml']}.
- Command, from the project root with .venv active: `{command}`
- Date: {started}; {elapsed:.0f} s in all. Before starting, other work kept {quiet:.2f} cores busy.
- Input: the {r0['pages']} pages of trafilatura's evaluation set (`../shared/data/html/trafilatura`,
  {r0['input_mb']:.1f} MB of HTML), decoded beforehand; `extract_html(html, extractor)` is timed in a fresh
  subprocess per extractor, {r0['repeats']} run(s), the fastest reported; CPU-ms/page is its CPU time per page.
- Ground truth: evaldata.json lists for each page snippets that must be extracted ("with") and boilerplate
  that must not ("without"). A snippet counts as found when its sequence of word tokens (\\w+, lower-cased)
  occurs in the normalised text's. Precision = found "with" / (found "with" + found "without"), recall = found
  "with" / all "with"; "snippet" counts every snippet once (trafilatura's own evaluation), "token" weighs it by
  its length in tokens, so a 40-word paragraph outweighs a leaked "Kontakt".
- Extractors: resiliparse = `extract_plain_text(main_content=True)` (the ingest default); cascade =
  `tokenmill.ingest.text.extract_cascade` (resiliparse without comment sections and with boilerplate selectors,
  forms and trafilatura's discard names removed, re-run inside the article container when one is recognised,
  lines after the last sentence cut, trafilatura `fast=True` for pages left under 200 characters);
  trafilatura = `trafilatura.extract(include_tables=True)` with its default fallbacks.

{chr(10).join(rows)}

{verdict}
"""


def _load_warning(res: dict, nproc: int) -> str:
    """A note naming the runs that had to share cores: their own workers plus other work exceeded nproc."""
    hit = [n for n, r in res.items() if r["workers"] + r["other_load"] > nproc + 0.25]
    if not hit:
        return ""
    return (f"\n*Other work on the machine competed for cores during {', '.join(hit)} (last column): those "
            f"wall-clock figures, and a 2-worker speed-up among them, understate an idle machine; the per-CPU-second "
            f"columns are the steadier per-core figures. `--wait-quiet 600` waits for an idle machine first.*\n")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeat", type=int, default=2, help="repetitions per configuration; the best is reported")
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "RESULTS.md",
                   help="Markdown file whose ingest section is (re)written")
    p.add_argument("--data", type=Path, default=DATA, help="the shared data folder (default ../shared/data)")
    p.add_argument("--wait-quiet", type=float, default=0, metavar="SECONDS",
                   help="first wait up to SECONDS for other work to keep fewer than 0.25 cores busy")
    p.add_argument("--extraction-only", action="store_true",
                   help="measure extraction speed and quality alone and write its own section")
    p.add_argument("--single", choices=sorted(CONFIGS), help=argparse.SUPPRESS)  # internal: one configuration
    args = p.parse_args(argv)

    if args.single:
        print(json.dumps(run_single(args.single, args.repeat, args.data.resolve())))
        return

    quiet = wait_until_quiet(args.wait_quiet)
    started = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    t0 = time.perf_counter()
    res = {}
    for name in CONFIGS:
        if args.extraction_only and not name.startswith("extract-"):
            continue
        print(f"running {name} ...", file=sys.stderr, flush=True)
        res[name] = run_config(name, args.repeat, args.data.resolve())
        res[name]["repeats"] = args.repeat
        r = res[name]
        print(f"  {r['seconds']:.2f} s wall, {r['cpu_seconds']:.2f} s CPU (wall per run: "
              f"{', '.join(f'{s:.2f}' for s in r['all_seconds'])}), peak RSS {r['peak_rss_mb']:.0f} MB, "
              f"other load {r['other_load']:.2f} cores",
              file=sys.stderr, flush=True)
    command = shlex.join(["python", "benchmarks/bench_ingest.py", *(argv if argv is not None else sys.argv[1:])])
    if args.extraction_only:
        text = quality_section(res, machine(INGEST_LIBRARIES), command, started, time.perf_counter() - t0, quiet)
        print(text)
        write_section(args.out, QUALITY_SECTION, text)
        print(f"wrote {args.out}", file=sys.stderr)
        return
    startup = min(pool_startup(2) for _ in range(args.repeat))
    text = section(res, startup, machine(INGEST_LIBRARIES), command, started, time.perf_counter() - t0, quiet)
    print(text)
    write_section(args.out, SECTION, text)
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
