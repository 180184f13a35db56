"""dedup benchmarks: MinHash signature speed against datasketch, the detection curve, clustering a million
documents out of core, and datatrove's MinHash dedup side by side on the same documents.

    .venv/bin/python benchmarks/bench_dedup.py                       # everything, about 5-8 minutes on 2 cores
    .venv/bin/python benchmarks/bench_dedup.py --docs 200000 --skip-datatrove

Real text: Project Gutenberg books read in place from ../shared/data/text/gutenberg/en, split into paragraphs.
datatrove runs from a separate virtualenv (default /tmp/dtvenv: `python -m venv /tmp/dtvenv &&
/tmp/dtvenv/bin/pip install datatrove regex tokenizers "xxhash<4" pyarrow`; xxhash 4 breaks datatrove's MinHash:
"Strings must be encoded before hashing"); it is never installed into .venv. benchmarks/bench_stages.py runs
section 4 (bench_datatrove) too, beside its filter and PII comparisons.
Prints a Markdown section for benchmarks/RESULTS.md and writes the numbers as JSON next to --work.
"""

from __future__ import annotations

import argparse
import datetime
import gzip
import itertools
import json
import os
import platform
import random
import re
import resource
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from benchlib import peak_rss_mb
from tokenmill import schema
from tokenmill.dedup import cluster, minhash
from tokenmill.dedup.params import Dedup
from tokenmill.dedup.stage import SketchTask, _binary_column, lsh_shape, sketch_shard

ROOT = Path(__file__).resolve().parents[1]
BOOKS = ROOT / ".." / "shared" / "data" / "text" / "gutenberg" / "en"


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def paragraphs(min_words: int) -> list[str]:
    out, seen = [], set()
    for path in sorted(BOOKS.glob("*.txt.gz")):
        text = gzip.decompress(path.read_bytes()).decode("utf-8", "replace")
        start, end = text.find("*** START OF"), text.find("*** END OF")
        body = text[text.find("\n", start) + 1 if start >= 0 else 0:end if end >= 0 else len(text)]
        for para in re.split(r"\n\s*\n", body):
            words = para.split()
            flat = " ".join(words)
            if len(words) >= min_words and flat not in seen:
                seen.add(flat)
                out.append(flat)
    return out


def edit(text: str, rate: float, vocab: list[str], rng: random.Random) -> str:
    out = []
    for word in text.split():
        if rng.random() >= rate:
            out.append(word)
        elif rng.random() < 0.5:
            out.append(rng.choice(vocab))
    return " ".join(out)


def _jaccard(a: str, b: str) -> float:
    sa, sb = set(minhash.shingles(a)), set(minhash.shingles(b))
    return len(sa & sb) / len(sa | sb)


def doc_row(doc_id: str, text: str, i: int) -> dict:
    return {"doc_id": doc_id, "text": text, "source": "gutenberg", "bucket": "books", "licence": "pd",
            "snapshot": "bench", "url": None, "record_id": None, "crawl_date": None, "content_type": None,
            "charset": None, "file": "bench", "locator": str(i)}


# --- 1. signatures ---------------------------------------------------------------------------------------

def bench_signatures(paras: list[str], n_slow: int) -> dict:
    from datasketch import MinHash

    texts = paras[:n_slow]
    shingles = [[" ".join(s).encode() for s in minhash.shingles(t)] for t in texts]
    n_sh = sum(map(len, shingles))

    def update_loop():
        for sh in shingles:
            m = MinHash(num_perm=128)
            for s in sh:
                m.update(s)

    previous = _previous_minhash()  # the per-document implementation this one replaced, for comparison
    # The machine may be shared: interleave them and keep each one's fastest run.
    minhash.signatures(texts[:10])
    previous.signatures(texts[:10])
    t_update = t_bulk = t_ours = t_prev = float("inf")
    for _ in range(2):
        t_update = min(t_update, _timed(update_loop))
        t_bulk = min(t_bulk, _timed(lambda: MinHash.bulk(shingles, num_perm=128)))
        t_prev = min([t_prev] + [_timed(lambda: previous.signatures(texts)) for _ in range(3)])
        t_ours = min([t_ours] + [_timed(lambda: minhash.signatures(texts)) for _ in range(5)])
    t_all = min(_timed(lambda: minhash.signatures(paras)) for _ in range(3))
    res = {
        "docs": len(texts), "shingles_per_doc": round(n_sh / len(texts), 1),
        "datasketch_update_us_per_doc": round(t_update / len(texts) * 1e6, 1),
        "datasketch_bulk_us_per_doc": round(t_bulk / len(texts) * 1e6, 1),
        "tokenmill_us_per_doc": round(t_ours / len(texts) * 1e6, 1),
        "previous_us_per_doc": round(t_prev / len(texts) * 1e6, 1),
        "speedup_vs_update": round(t_update / t_ours, 1), "speedup_vs_bulk": round(t_bulk / t_ours, 1),
        "tokenmill_docs_per_s_all": round(len(paras) / t_all), "all_docs": len(paras),
        "all_words_per_s": round(sum(len(p.split()) for p in paras) / t_all),
    }
    log(f"signatures: {res}")
    return res


PREVIOUS_MINHASH = "82b73cf~1"  # the commit before signatures were batched


def _previous_minhash():
    """tokenmill.dedup.minhash as of PREVIOUS_MINHASH (git show), loaded as a module of its own."""
    import importlib.util

    src = subprocess.run(["git", "-C", str(ROOT), "show", f"{PREVIOUS_MINHASH}:src/tokenmill/dedup/minhash.py"],
                         capture_output=True, text=True, check=True).stdout
    path = Path("/tmp") / f"previous_minhash_{os.getpid()}.py"
    path.write_text(src, encoding="utf-8")
    spec = importlib.util.spec_from_file_location("previous_minhash", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    path.unlink()
    return module


def _cpu_seconds() -> float:
    """User + system seconds of this process (all threads) and its finished children."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


# --- 2. detection curve ----------------------------------------------------------------------------------

def bench_curve(paras: list[str], n_pairs: int, work: Path) -> dict:
    rng = random.Random(99)
    base = rng.sample(paras[:-200], n_pairs)
    vocab = sorted({w for p in paras[-200:] for w in p.split()})
    edits = [edit(p, 0.15 * rng.random() ** 1.5, vocab, rng) for p in base]
    jac = np.array([_jaccard(a, b) for a, b in zip(base, edits)])
    p = Dedup()
    bands, rows = lsh_shape(p.near)
    shard = work / "curve.parquet"
    schema.write_parquet([doc_row(f"o{i}", t, i) for i, t in enumerate(base)] +
                         [doc_row(f"e{i}", t, i) for i, t in enumerate(edits)], schema.DOCUMENT, shard)
    sketch_shard(SketchTask(0, str(shard), str(work / "curve"), p, bands, rows))
    con = cluster.connect(work / "curve", "1GB", 2)
    cluster.register_inputs(con, work / "curve")
    cluster.candidate_pairs(con, p.near.bucket_window)
    a, b, j = cluster.score_pairs(con, "SELECT a, b FROM pairs", p.near.num_perm)
    con.close()
    n = len(base)
    designed = a + n == b
    cand, det = np.zeros(n, bool), np.zeros(n, bool)
    cand[a[designed]] = True
    det[a[designed][j[designed] >= p.near.threshold]] = True
    theory = minhash.candidate_probability(jac, bands, rows)
    edges = [0.0, 0.3, 0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95, 1.0001]
    rows_out = []
    for lo, hi in itertools.pairwise(edges):
        m = (jac >= lo) & (jac < hi)
        if m.any():
            rows_out.append({"bin": f"[{lo:.2f}, {min(hi, 1.0):.2f}{']' if hi > 1 else ')'}", "pairs": int(m.sum()),
                             "candidate": round(float(cand[m].mean()), 3),
                             "theory": round(float(theory[m].mean()), 3),
                             "detected": round(float(det[m].mean()), 3)})
    res = {"bands": bands, "rows": rows, "threshold": p.near.threshold, "pairs": n, "curve": rows_out,
           "recall_j_ge_085": round(float(det[jac >= 0.85].mean()), 4),
           "fpr_j_le_05": round(float(det[jac <= 0.5].mean()), 4),
           "unrelated_pairs_detected": int(np.sum(~designed & (j >= p.near.threshold)))}
    log(f"curve: recall {res['recall_j_ge_085']} fpr {res['fpr_j_le_05']}")
    return res


# --- 3. clustering a million documents -------------------------------------------------------------------

def make_synthetic(work: Path, n_docs: int, shards: int, seed: int = 5) -> dict:
    """Signatures and band hashes as the sketch pass writes them, with planted clusters:
    20 per 1000 documents in near-duplicate clusters of 2-6 (each member a copy of its cluster's seed
    signature with 0-10% of positions redrawn, so estimated Jaccard to the seed >= 0.9), one template cluster
    of 5000 documents (a bucket far larger than the window), and 1% exact copies."""
    rng = np.random.default_rng(seed)
    p = Dedup()
    bands, rows = lsh_shape(p.near)
    num_perm = p.near.num_perm
    n_clusters = n_docs // 250
    sizes = rng.integers(2, 7, n_clusters)
    sizes = np.append(sizes, 5000)
    members = int(sizes.sum())
    label = np.full(n_docs, -1, dtype=np.int64)
    perm = rng.permutation(n_docs)
    label[perm[:members]] = np.repeat(np.arange(len(sizes)), sizes)
    exact_src = perm[members:members + n_docs // 100]  # these copy the exact key of another singleton
    exact_of = np.arange(n_docs)
    exact_of[exact_src] = perm[members + n_docs // 100: members + 2 * (n_docs // 100)]
    seeds = rng.integers(0, 2 ** 32, (len(sizes), num_perm), dtype=np.uint32)
    per = -(-n_docs // shards)
    for s in range(shards):
        lo, hi = s * per, min(n_docs, (s + 1) * per)
        idx = np.arange(lo, hi)
        doc = (np.int64(s) << 32) + (idx - lo)
        sig = rng.integers(0, 2 ** 32, (hi - lo, num_perm), dtype=np.uint32)
        lab = label[lo:hi]
        m = lab >= 0
        f = rng.uniform(0, 0.1, m.sum())[:, None]
        keep_seed = rng.random((m.sum(), num_perm)) >= f
        sig[m] = np.where(keep_seed, seeds[lab[m]], sig[m])
        exact_hash = [f"{x:032x}" for x in exact_of[lo:hi]]
        out = {"docs": pa.table({"doc": doc, "doc_id": [f"{x:024x}" for x in idx],
                                 "chars": rng.integers(200, 20000, hi - lo), "exact_hash": exact_hash}),
               "sigs": pa.table({"doc": doc, "sig": _binary_column(sig)}),
               "bands": pa.table({"doc": np.repeat(doc, bands),
                                  "band": np.tile(np.arange(bands, dtype=np.int16), hi - lo),
                                  "band_hash": minhash.band_hashes(sig, bands, rows).reshape(-1)}),
               "truth": pa.table({"doc": doc, "planted": lab})}
        for name, table in out.items():
            (work / name).mkdir(parents=True, exist_ok=True)
            pq.write_table(table, work / name / f"{s:06d}.parquet", compression="zstd")
    planted_dups = int(members - len(sizes))
    return {"docs": n_docs, "planted_clusters": len(sizes), "planted_docs": members,
            "planted_near_duplicates": planted_dups, "planted_exact_copies": len(exact_src),
            "bands": bands, "rows": rows, "sig_bytes": num_perm * 4}


def cluster_child(work: Path, memory_limit: str, threads: int) -> None:
    """Runs in a subprocess so that its peak RSS is the clustering step's own."""
    p = Dedup()
    t = {}
    t0 = time.perf_counter()
    con = cluster.connect(work, memory_limit, threads)
    cluster.register_inputs(con, work)
    n_exact = cluster.exact_duplicates(con)
    t["exact_s"] = time.perf_counter() - t0
    t1 = time.perf_counter()
    steps: dict = {}
    stats = cluster.near_duplicates(con, p.near.num_perm, p.near.threshold, True,
                                    p.near.bucket_window, "SELECT doc FROM exact WHERE rank > 1", steps)
    t["near_total_s"] = time.perf_counter() - t1
    t1 = time.perf_counter()
    cluster.write_verdicts(con, work / "verdicts.parquet", True, True)
    t["verdicts_s"] = time.perf_counter() - t1
    t["total_s"] = time.perf_counter() - t0
    con.execute(f"CREATE VIEW truth AS SELECT * FROM read_parquet('{work}/truth/*.parquet')")
    found = con.execute("""
        SELECT count(*) FILTER (WHERE t.planted >= 0 AND c.doc <> c.rep_doc),
               count(*) FILTER (WHERE t.planted < 0)
        FROM clusters c JOIN truth t USING (doc)""").fetchall()[0]
    impure = con.execute("""
        SELECT count(*) FROM (SELECT c.rep_doc FROM clusters c JOIN truth t USING (doc)
                              GROUP BY c.rep_doc HAVING count(DISTINCT t.planted) > 1)""").fetchall()[0][0]
    con.close()
    print(json.dumps({**{k: round(v, 2) for k, v in t.items()}, **stats, "exact_duplicates": int(n_exact),
                      "steps_s": steps, "planted_found": int(found[0]),
                      "unplanted_in_clusters": int(found[1]), "impure_clusters": int(impure),
                      "peak_rss_mb": round(peak_rss_mb())}))


def bench_clustering(work: Path, n_docs: int, memory_limit: str, threads: int) -> dict:
    shutil.rmtree(work, ignore_errors=True)
    t0 = time.perf_counter()
    meta = make_synthetic(work, n_docs, shards=max(1, n_docs // 100_000))
    meta["generate_s"] = round(time.perf_counter() - t0, 1)
    meta["parquet_mb"] = {d: round(sum(f.stat().st_size for f in (work / d).glob("*.parquet")) / 2 ** 20)
                          for d in ("docs", "sigs", "bands")}
    log(f"synthetic: {meta}")
    out = subprocess.run([sys.executable, __file__, "_cluster", str(work), memory_limit, str(threads)],
                         check=True, capture_output=True, text=True)
    res = {**meta, **json.loads(out.stdout.strip().splitlines()[-1]), "memory_limit": memory_limit,
           "threads": threads}
    log(f"clustering: {res}")
    shutil.rmtree(work, ignore_errors=True)
    return res


# --- 4. datatrove side by side ---------------------------------------------------------------------------

DATATROVE_DRIVER = textwrap.dedent('''
    import json, resource, sys, time
    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.dedup import MinhashDedupBuckets, MinhashDedupCluster, MinhashDedupFilter, \\
        MinhashDedupSignature
    from datatrove.pipeline.dedup.minhash import MinhashConfig
    from datatrove.pipeline.readers import ParquetReader
    from datatrove.pipeline.writers import JsonlWriter
    from datatrove.utils.word_tokenizers import WordTokenizer

    class Whitespace(WordTokenizer):
        # datatrove's English tokenizer is nltk's, which needs the punkt model (a download); simplify_text
        # already lower-cases and strips punctuation, so splitting on whitespace gives the same words.
        def __init__(self):
            super().__init__("en")
        def word_tokenize(self, text):
            return text.split()
        def sent_tokenize(self, text):
            return [text]
        def span_tokenize(self, text):
            return [(0, len(text))]

    inp, work, workers = sys.argv[1], sys.argv[2], int(sys.argv[3])
    cfg = MinhashConfig()  # 5-grams, 14 buckets x 8 hashes
    t, cpu = {}, {}
    def cpu_s():  # user + system seconds of this process and its finished children (pool workers)
        me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime
    def run(name, pipeline, tasks):
        t0, c0 = time.perf_counter(), cpu_s()
        LocalPipelineExecutor(pipeline=pipeline, tasks=tasks, workers=workers, logging_dir=f"{work}/logs/{name}",
                              start_method="fork").run()
        t[name] = round(time.perf_counter() - t0, 2)
        cpu[name] = round(cpu_s() - c0, 2)
    run("signatures", [ParquetReader(inp), MinhashDedupSignature(f"{work}/sigs", config=cfg, language=Whitespace())],
        workers)
    run("buckets", [MinhashDedupBuckets(f"{work}/sigs", f"{work}/buckets", config=cfg)], cfg.num_buckets)
    run("cluster", [MinhashDedupCluster(f"{work}/buckets", f"{work}/remove", config=cfg)], 1)
    run("filter", [ParquetReader(inp), MinhashDedupFilter(f"{work}/remove",
                   exclusion_writer=JsonlWriter(f"{work}/removed")), JsonlWriter(f"{work}/kept")], workers)
    t["total"] = round(sum(t.values()), 2)
    cpu["total"] = round(sum(cpu.values()), 2)
    print(json.dumps({**t, "cpu": cpu}))
''')


def bench_datatrove(paras: list[str], work: Path, python: str, workers: int) -> dict:
    """The same documents through tokenmill's dedup (exact + near, lines off) and datatrove's 4 MinHash steps."""
    rng = random.Random(3)
    vocab = sorted({w for p in paras[:500] for w in p.split()})
    n = len(paras)
    docs = list(paras)
    # Planted: 2000 near copies (0-3% of words edited: true Jaccard about 0.75-1), 1000 distant copies
    # (8-15% edited: about 0.3-0.55, which must stay) and 500 exact copies.
    # Disjoint sources, so that a pair is caught only through its own copy.
    sources = rng.sample(range(n), 3500)
    near_src, far_src, exact_src = sources[:2000], sources[2000:3000], sources[3000:]
    docs += [edit(paras[i], 0.03 * rng.random(), vocab, rng) for i in near_src]
    docs += [edit(paras[i], 0.08 + 0.07 * rng.random(), vocab, rng) for i in far_src]
    docs += [paras[i] for i in exact_src]
    copies = [(src, n + k) for k, src in enumerate(near_src + far_src)]
    pair_j = np.array([_jaccard(docs[a], docs[b]) for a, b in copies])
    order = list(range(len(docs)))
    rng.shuffle(order)
    docs = [docs[i] for i in order]
    ids = [""] * len(docs)
    for pos, i in enumerate(order):
        ids[pos] = f"d{i:07d}"  # the id keeps the index before shuffling: copy n + k pairs with its source
    planted = {"copies": [(f"d{a:07d}", f"d{b:07d}") for a, b in copies],
               "exact": [(f"d{src:07d}", f"d{n + 3000 + k:07d}") for k, src in enumerate(exact_src)]}
    shutil.rmtree(work, ignore_errors=True)
    n_shards = max(2, workers)
    (work / "dt_input").mkdir(parents=True)
    for s in range(n_shards):
        sl = slice(s, None, n_shards)
        schema.write_parquet([doc_row(d, t, i) for i, (d, t) in enumerate(zip(ids[sl], docs[sl]))],
                             schema.DOCUMENT, work / "tm" / "input" / "documents" / f"part-{s:05d}.parquet")
        pq.write_table(pa.table({"id": ids[sl], "text": docs[sl]}), work / "dt_input" / f"part-{s:05d}.parquet")
    res: dict = {"docs": len(docs), "words": sum(len(t.split()) for t in docs)}

    sys.path.insert(0, str(ROOT))
    from stages import dedup as dedup_stage  # the stage as dvc runs it

    cwd = os.getcwd()
    os.chdir(work)  # StageRun writes metrics/ here, not into the project
    try:
        t0, c0 = time.perf_counter(), _cpu_seconds()
        m = dedup_stage.stage({"dedup": {"lines": {"enabled": False}},
                               "execution": {"backend": "local", "workers": workers}}, "input", work / "tm")
        res["tokenmill_s"] = round(time.perf_counter() - t0, 2)
        res["tokenmill_cpu_s"] = round(_cpu_seconds() - c0, 2)
    finally:
        os.chdir(cwd)
    res["tokenmill_removed"] = m["counts"]["by_action"].get("drop", 0)
    res["tokenmill_by_reason"] = m["counts"]["by_reason"]
    removed_tm = {r["doc_id"] for r in schema.read_parquet(
        sorted((work / "tm" / "dedup" / "decisions").glob("*.parquet")), schema.DECISION).to_pylist()
        if r["action"] == "drop"}

    bins = [(0.0, 0.5), (0.5, 0.7), (0.7, 0.8), (0.8, 0.85), (0.85, 0.9), (0.9, 1.01)]

    def caught(removed: set[str]) -> dict:
        """Planted pairs of which one document was removed: exact copies, and copies by true Jaccard bin."""
        hit = np.array([a in removed or b in removed for a, b in planted["copies"]])
        out = {"exact": sum(a in removed or b in removed for a, b in planted["exact"])}
        for lo, hi in bins:
            m = (pair_j >= lo) & (pair_j < hi)
            out[f"[{lo}, {min(hi, 1.0)}{']' if hi > 1 else ')'}"] = [int(hit[m].sum()), int(m.sum())]
        return out

    res["tokenmill_caught"] = caught(removed_tm)
    log(f"tokenmill: {res}")

    if not python or not Path(python).exists():
        res["datatrove"] = f"not run: no interpreter at {python!r}"
        return res
    driver = work / "datatrove_driver.py"
    driver.write_text(DATATROVE_DRIVER)
    out = subprocess.run([python, str(driver), str(work / "dt_input"), str(work / "dt"), str(workers)],
                         capture_output=True, text=True)
    if out.returncode != 0:
        res["datatrove"] = "failed: " + out.stderr[-2000:]
        return res
    res["datatrove_s"] = json.loads(out.stdout.strip().splitlines()[-1])
    res["datatrove_cpu_s"] = res["datatrove_s"].pop("cpu")
    removed_dt = set()
    for f in (work / "dt" / "removed").glob("*.jsonl.gz"):
        with gzip.open(f, "rt") as fh:
            removed_dt |= {json.loads(line)["id"] for line in fh}
    version = subprocess.run([python, "-c", "from importlib.metadata import version; print(version('datatrove'))"],
                             capture_output=True, text=True).stdout.strip()
    res.update(datatrove_version=version, datatrove_removed=len(removed_dt), datatrove_caught=caught(removed_dt),
               removed_by_both=len(removed_tm & removed_dt),
               speedup=round(res["datatrove_s"]["total"] / res["tokenmill_s"], 2),
               cpu_speedup=round(res["datatrove_cpu_s"]["total"] / res["tokenmill_cpu_s"], 2))
    log(f"datatrove: {res}")
    return res


# --- report ----------------------------------------------------------------------------------------------

def markdown(r: dict, argv: list[str]) -> str:
    s, c, k, d = r["signatures"], r["curve"], r.get("clustering"), r.get("datatrove")
    lines = [
        "## dedup (MinHash signatures, LSH clustering, datatrove comparison)",
        "",
        f"Machine: {r['machine']}. Date: {r['date']}. Command: `{' '.join(argv)}`. The machine was shared: load "
        f"average (1, 5, 15 min) {r['load_before']} before and {r['load_after']} after, so times are upper bounds.",
        "",
        f"**Signatures** ({s['docs']} Gutenberg paragraphs of >= 100 words, {s['shingles_per_doc']} word "
        "5-gram shingles per document, 128 permutations; tokenmill's time starts from raw text, datasketch's from "
        "prepared shingle bytes):",
        "",
        "| implementation | µs / document | speed-up |",
        "| --- | ---: | ---: |",
        f"| datasketch `MinHash.update` loop | {s['datasketch_update_us_per_doc']} | 1 |",
        f"| datasketch `MinHash.bulk` | {s['datasketch_bulk_us_per_doc']} | "
        f"{round(s['datasketch_update_us_per_doc'] / s['datasketch_bulk_us_per_doc'], 1)} |",
        f"| tokenmill, per document (before {PREVIOUS_MINHASH.split('~')[0]}) | {s['previous_us_per_doc']} | "
        f"{round(s['datasketch_update_us_per_doc'] / s['previous_us_per_doc'], 1)} |",
        f"| tokenmill.dedup.minhash.signatures, batched | {s['tokenmill_us_per_doc']} | {s['speedup_vs_update']} |",
        "",
        f"All {s['all_docs']} paragraphs: {s['tokenmill_docs_per_s_all']} documents/s, "
        f"{s['all_words_per_s']} words/s on one core.",
        "",
        f"**Detection curve** ({c['pairs']} pairs of a Gutenberg paragraph and an edited copy; LSH b={c['bands']}, "
        f"r={c['rows']}, verification at estimated J >= {c['threshold']}): recall at true J >= 0.85 = "
        f"{c['recall_j_ge_085']}, detections at true J <= 0.5 = {c['fpr_j_le_05']}, unrelated pairs detected = "
        f"{c['unrelated_pairs_detected']}.",
        "",
        "| true Jaccard | pairs | candidate (measured) | candidate 1-(1-J^r)^b | detected after verification |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    lines += [f"| {row['bin']} | {row['pairs']} | {row['candidate']} | {row['theory']} | {row['detected']} |"
              for row in c["curve"]]
    if k is None:
        return "\n".join(lines)
    lines += [
        "",
        f"**Clustering {k['docs']:,} documents** (synthetic signatures and band hashes in Parquet, "
        f"{k['parquet_mb']['sigs']} MB of signatures and {k['parquet_mb']['bands']} MB of band hashes; "
        f"{k['planted_clusters'] - 1:,} planted clusters of 2-6 plus one of 5,000, {k['planted_exact_copies']:,} "
        f"exact copies; DuckDB memory_limit {k['memory_limit']}, {k['threads']} threads):",
        "",
        "| step | seconds |",
        "| --- | ---: |",
        f"| exact-duplicate groups | {k['exact_s']} |",
        f"| candidate pairs (band self-join, window 100) | {k['steps_s']['candidate_pairs']} |",
        f"| verification (signatures joined in, compared in numpy batches) | {k['steps_s']['verify']} |",
        f"| connected components (scipy) | {k['steps_s']['components']} |",
        f"| representatives + Jaccard to them | {k['steps_s']['representatives']} |",
        f"| verdicts table | {k['verdicts_s']} |",
        f"| **total global step** | **{k['total_s']}** |",
        "",
        f"Peak RSS of the clustering process: **{k['peak_rss_mb']} MB**. Candidate pairs {k['candidate_pairs']:,}, "
        f"verified {k['verified_pairs']:,}, clusters {k['clusters']:,}; planted near duplicates "
        f"{k['planted_near_duplicates']:,}, found {k['planted_found']:,}; clusters mixing planted groups "
        f"{k['impure_clusters']}; documents outside planted groups put in clusters {k['unplanted_in_clusters']}; "
        f"exact duplicates {k['exact_duplicates']:,}.",
        "",
    ]
    if d:
        lines.append(f"**Side by side with datatrove** ({d['docs']:,} Gutenberg paragraphs of >= 50 words, "
                     f"{d['words']:,} words, with planted copies: 2,000 near (0-3% of words edited), 1,000 distant "
                     f"(8-15% edited) and 500 exact; {r['workers']} worker(s) each):")
        lines.append("")
        if "datatrove_s" in d:
            dt, tc, dc = d["datatrove_s"], d["tokenmill_caught"], d["datatrove_caught"]
            lines += [
                "| system | seconds | documents removed |",
                "| --- | ---: | ---: |",
                f"| tokenmill dedup: exact + near (128 permutations, b=14 r=9, verified at J >= 0.8), lines off; "
                f"reads and writes documents and decisions | {d['tokenmill_s']} | {d['tokenmill_removed']:,} |",
                f"| datatrove {d['datatrove_version']} MinHash: 4 steps (signatures {dt['signatures']}, buckets "
                f"{dt['buckets']}, cluster {dt['cluster']}, filter {dt['filter']}); 14 x 8 = 112 hashes, no "
                f"verification | {dt['total']} | {d['datatrove_removed']:,} |",
                "",
                f"tokenmill took {d['speedup']}x less time. Planted pairs caught (one of the two removed):",
                "",
                "| planted pair (true 5-gram Jaccard) | tokenmill | datatrove |",
                "| --- | ---: | ---: |",
                f"| exact copy | {tc['exact']} / 500 | {dc['exact']} / 500 |",
            ]
            lines += [f"| edited copy, J in {k} | {tc[k][0]} / {tc[k][1]} | {dc[k][0]} / {dc[k][1]} |"
                      for k in tc if k != "exact"]
            lines += [
                "",
                "Each system keeps a different member of a cluster (tokenmill the longest, datatrove the first "
                f"it read), so only {d['removed_by_both']:,} removed documents are the same ones. datatrove keeps "
                "every LSH candidate (its S-curve midpoint is (1/14)^(1/8) = 0.72), so it also removes pairs below "
                "0.8; tokenmill verifies each candidate by signature agreement. datatrove ran with a whitespace "
                "word tokenizer after its own text simplification (its English default is nltk's, which needs the "
                "punkt model, a download); it needed `regex`, `tokenizers`, `orjson` and `xxhash<4` beside it "
                "(with xxhash 4 it fails: `Strings must be encoded before hashing`).",
            ]
        else:
            lines.append(f"tokenmill: {d['tokenmill_s']} s, {d['tokenmill_removed']} removed. datatrove: "
                         f"{d['datatrove']}")
    return "\n".join(lines)


def growth(sizes: list[int], work: Path, memory_limit: str, threads: int) -> str:
    """The global clustering step at several corpus sizes (issue 21): time, peak memory and planted recall,
    and what the curve says about one node."""
    runs = [bench_clustering(work / f"synthetic-{n}", n, memory_limit, threads) for n in sizes]
    lines = [
        "## Deduplication's global step from 1 to 10 million documents",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
        f"{datetime.date.today().isoformat()}. Command: `python benchmarks/bench_dedup.py --growth "
        f"{','.join(map(str, sizes))} --workers {threads} --memory-limit {memory_limit}`. Synthetic signatures and "
        "band hashes as the sketch pass writes them (bench_dedup.make_synthetic: 20 in 1,000 documents in planted "
        "near-duplicate clusters of 2-6, one template cluster of 5,000 per million, 1% exact copies); the "
        "clustering runs in its own process (tokenmill.dedup.cluster: DuckDB band self-join, verification in "
        "numpy, scipy connected components), its peak RSS measured there.",
        "",
        "| documents | signatures on disk | exact step s | candidate pairs s | verification s | components s "
        "| representatives s | **total s** | peak RSS | planted near-duplicates found | impure clusters |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in runs:
        st = r["steps_s"]
        lines.append(f"| {r['docs']:,} | {r['parquet_mb']['sigs'] + r['parquet_mb']['bands']:,} MB | {r['exact_s']} | "
                     f"{st['candidate_pairs']} | {st['verify']} | {st['components']} | {st['representatives']} | "
                     f"**{r['total_s']}** | {r['peak_rss_mb']:,} MB | {r['planted_found']:,} of "
                     f"{r['planted_near_duplicates']:,} ({r['planted_found'] / r['planted_near_duplicates']:.1%}) | "
                     f"{r['impure_clusters']} |")
    last = runs[-1]
    per_doc = last["total_s"] / last["docs"] * 1e6
    lines += [
        "",
        "Growth of the total from one size to the next: "
        + ", ".join(f"{b['total_s'] / a['total_s']:.1f}x for {b['docs'] / a['docs']:.1f}x the documents"
                    for a, b in zip(runs, runs[1:]))
        + f" (the band self-join sorts, and spills once its table outgrows DuckDB's `memory_limit`, {memory_limit}); "
        "the peak memory stays at that limit plus the Python side. The issue's target (10 million documents in 5 minutes and 4 GB on 2 "
        f"cores) holds with room: {last['total_s']} s and {last['peak_rss_mb']:,} MB. At {per_doc:.1f} µs a "
        "document, one node stops being enough on time before memory: a Common Crawl snapshot's ~3 billion pages "
        f"(the issue's figure) would take ~{per_doc * 3e9 / 3.6e9:.0f} hours on this step at linear growth (more, "
        "by the sort) and "
        f"~{3e9 * 512 / 1e12:.1f} TB of signatures on one disk. What takes over then: the band self-join "
        "partitioned by band-hash range, each partition a Ray task over its shard of the band table (pairs never "
        "cross partitions: a pair shares a band hash), the pairs unioned before the connected components, which "
        "stay on one node (a few seconds per million pairs here). Not implemented: the 10-million target did "
        "not need it.",
    ]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=1_000_000, help="documents for the clustering benchmark")
    ap.add_argument("--slow-docs", type=int, default=1000, help="documents for the datasketch timings")
    ap.add_argument("--pairs", type=int, default=1500, help="pairs for the detection curve")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--memory-limit", default="2GB")
    ap.add_argument("--datatrove", default="/tmp/dtvenv/bin/python", help="python of a venv with datatrove")
    ap.add_argument("--skip-datatrove", action="store_true")
    ap.add_argument("--signatures-only", action="store_true", help="signatures and detection curve only")
    ap.add_argument("--work", type=Path, default=Path("/tmp/bench_dedup"))
    ap.add_argument("--growth", default=None, help="only the clustering at these sizes, e.g. 1000000,3000000,10000000")
    ap.add_argument("--write", action="store_true", help="with --growth: replace its section in benchmarks/RESULTS.md")
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("TOKENMILL_PROGRESS", "0")
    if args.growth:
        text = growth([int(n) for n in args.growth.split(",")], args.work, args.memory_limit, args.workers)
        print(text)
        if args.write:
            sys.path.insert(0, str(Path(__file__).parent))
            from benchlib import write_section

            write_section(Path(__file__).parent / "RESULTS.md", text.splitlines()[0], text)
        return
    log("reading Gutenberg")
    long_paras = paragraphs(100)
    results = {
        "date": datetime.date.today().isoformat(),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
                   f"{platform.platform()}",
        "workers": args.workers,
        "load_before": [round(x, 1) for x in os.getloadavg()],
        "signatures": bench_signatures(long_paras, args.slow_docs),
        "curve": bench_curve(long_paras, args.pairs, args.work),
    }
    if not args.signatures_only:
        results["clustering"] = bench_clustering(args.work / "synthetic", args.docs, args.memory_limit, args.workers)
    else:
        args.skip_datatrove = True
    if not args.skip_datatrove:
        results["datatrove"] = bench_datatrove(paragraphs(50), args.work / "side_by_side", args.datatrove,
                                               args.workers)
    results["load_after"] = [round(x, 1) for x in os.getloadavg()]
    (args.work / "results.json").write_text(json.dumps(results, indent=2))
    print(markdown(results, ["python", "benchmarks/bench_dedup.py"] + sys.argv[1:]))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "_cluster":
        cluster_child(Path(sys.argv[2]), sys.argv[3], int(sys.argv[4]))
    else:
        main()
