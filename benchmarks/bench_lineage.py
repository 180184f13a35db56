"""The lineage database build (tokenmill.lineage.build_database) at 1, 3 and 10 million documents: wall time,
CPU time, peak memory and database size, on synthetic stage outputs written with the real schemas.

    .venv/bin/python benchmarks/bench_lineage.py                                   # 1M, 3M and 10M documents
    .venv/bin/python benchmarks/bench_lineage.py --sizes 1000000,3000000,10000000 --write   # and RESULTS.md
    .venv/bin/python benchmarks/bench_lineage.py --sizes 20000,50000 --jobs 1      # a check in seconds

What is generated (under --work, default /tmp/bench-lineage/docs-<N>, reused when a previous run generated the
same size with the same settings): the outputs of the document stages ingest, filter, pii, dedup, quality and
decontaminate (dvc.yaml's order), each with manifest.json, documents/ (tokenmill.schema.DOCUMENT) and
decisions/ (schema.DECISION) in shards of --shard-docs input documents, the same file names through the chain
as tokenmill.docstage writes them; ingest also records/ (schema.RECORD, one row per record read) and
read_errors/ (schema.READ_ERROR); decontaminate its contamination table (decontam.CONTAMINATION, the one
STAGE_TABLES entry); tokenize its index/ (tokenize.INDEX), unless --no-tokens. Every shard is written by
tokenmill.schema.write_parquet (zstd, 64 Ki-row row groups), as the stages write theirs. Each stage drops a
realistic fraction of its input with the reasons the stages give (PLANS below); kept documents flow on.

What is timed: tokenmill.lineage.build_database itself, in a child process so that its peak RSS is the
build's own (VmHWM; the child's ru_maxrss would carry the parent's across fork and exec): input ids, build(),
verify(), the fates count and funnel(), the funnel plot file, with --memory-limit and --threads given as
the stage's execution.duckdb_memory_limit and execution.workers. The mixture plan (plan tables and the held-out check of verify) and the planted-case
scoring (ground truth of the embedded corpus) are left out. After the build, the database is checked
against what was generated: a wrong build fails the benchmark.

Prints a Markdown section for benchmarks/RESULTS.md; --write replaces it there. Numbers also go to
<work>/results.json.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from benchlib import peak_rss_mb
from tokenmill import schema

TITLE = "## The lineage build from 1 to 10 million documents"
GEN_VERSION = 2  # bump when the generated data changes: older data under --work is then regenerated
STAGES = ["ingest", "filter", "pii", "dedup", "quality", "decontaminate"]
# As conf/source/crawl.yaml declares them; the share of the input files each source gets.
SOURCES = {
    "crawl_warc": {"format": "warc", "paths": ["data/raw/warc/**/*.warc*"], "bucket": "web",
                   "licence": "cc-terms-of-use", "snapshot": "CC-MAIN"},
    "crawl_wet": {"format": "wet", "paths": ["data/raw/wet/**/*.wet*"], "bucket": "web",
                  "licence": "cc-terms-of-use", "snapshot": "CC-MAIN"},
    "crawl_jsonl": {"format": "jsonl", "paths": ["data/raw/jsonl/**/*.jsonl*"], "bucket": "web",
                    "licence": "odc-by", "snapshot": "dolma"},
}
SOURCE_SHARE = [0.80, 0.12, 0.08]
RECORD_TYPE = ["response", "conversion", "jsonl"]
FILE_PATTERN = ["warc/CC-MAIN-20241201162023-20241201192023-{:05d}.warc.gz",
                "wet/CC-MAIN-20241201162023-20241201192023-{:05d}.warc.wet.gz",
                "jsonl/dolma-cc-{:05d}.jsonl.zst"]

# Per stage: (action, reason, fraction of the stage's input); the last entry takes the rest. Reasons are those
# the stages give (ingest.Drop, filters, pii, dedup.stage, quality, decontam.stage); fractions are typical of a
# Common Crawl snapshot through such a pipeline: ~3% unreadable, half filtered, ~10% duplicates, 30% cut on
# quality, ~0.1% contaminated. Score keys: what each stage records per document.
PLANS = {
    "ingest": ([("drop", "empty_text", 0.015), ("drop", "not_content", 0.008), ("drop", "http_status", 0.005),
                ("drop", "oversized", 0.002), ("keep", "extracted", None)],
               ["payload_bytes", "text_chars"]),
    "filter": ([("drop", "language", 0.18), ("drop", "gopher_word_count", 0.08),
                ("drop", "gopher_repetition", 0.07), ("drop", "gopher_stop_words", 0.05),
                ("drop", "gopher_alpha_word_frac", 0.04), ("drop", "gopher_dup_line_frac", 0.03),
                ("drop", "c4_terminal_punct_char_frac", 0.02), ("drop", "fineweb_line_punct_ratio", 0.02),
                ("drop", "gopher_mean_word_length", 0.01), ("keep", "passed", None)],
               ["c4_terminal_punct_char_frac", "fineweb_char_dup_ratio", "fineweb_line_punct_ratio",
                "fineweb_short_line_ratio", "gopher_alpha_word_frac", "gopher_dup_line_frac",
                "gopher_mean_word_length", "gopher_repetition", "gopher_stop_words", "gopher_word_count",
                "language_score"]),
    "pii": ([("modify", "redacted", 0.04), ("keep", "no_pii", None)],
            ["pii_credit_card", "pii_email", "pii_iban", "pii_ip_address", "pii_phone", "pii_ssn"]),
    "dedup": ([("drop", "exact_duplicate", 0.03), ("drop", "near_duplicate", 0.07),
               ("modify", "repeated_lines_removed", 0.05), ("keep", "unique", None)],
              ["chars_removed", "lines_removed", "max_jaccard"]),
    "quality": ([("drop", "below_quality_cut", 0.30), ("keep", "above_quality_cut", None)], ["quality_score"]),
    "decontaminate": ([("drop", "contaminated", 0.001), ("keep", "clean", None)],
                      ["matched_items", "max_matched_words", "max_overlap_fraction"]),
}
NEAR_MISS = 0.005  # decontaminate: kept documents with a near-miss overlap recorded (details + contamination)
BENCHMARKS = ["arc_challenge", "arc_easy", "hellaswag", "piqa", "winogrande"]


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# --- generation ----------------------------------------------------------------------------------------------

_HEX = np.frombuffer(b"0123456789abcdef", np.uint8)


def _fixed_strings(chars: np.ndarray) -> pa.Array:
    """An (n, w) uint8 matrix of ASCII as n strings of w characters, without a Python object per row."""
    n, w = chars.shape
    offsets = np.arange(0, w * (n + 1), w, dtype=np.int32)
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(np.ascontiguousarray(chars)))


def _hex(b: np.ndarray) -> pa.Array:
    """Bytes (n, k) as n lowercase hex strings of 2k characters."""
    out = np.empty((b.shape[0], 2 * b.shape[1]), np.uint8)
    out[:, 0::2], out[:, 1::2] = _HEX[b >> 4], _HEX[b & 15]
    return _fixed_strings(out)


def doc_ids(g: np.ndarray) -> pa.Array:
    """24 hex characters, as schema.make_doc_id (blake2b, 12 bytes): a bijection of the global index mixed
    into the first 8 bytes (so ids are unique and unordered), 4 more bytes of another mix."""
    g = g.astype(np.uint64)
    a = (g * np.uint64(0x9E3779B97F4A7C15)) ^ np.uint64(0x5851F42D4C957F2D)
    b = ((g * np.uint64(0xC2B2AE3D27D4EB4F)) >> np.uint64(32)).astype(np.uint32)
    raw = np.concatenate([a.astype(">u8").view(np.uint8).reshape(-1, 8),
                          b.astype(">u4").view(np.uint8).reshape(-1, 4)], axis=1)
    return _hex(raw)


def _take(values: list, idx: np.ndarray, type_=pa.string()) -> pa.Array:
    return pa.array(values, type_).take(pa.array(idx.astype(np.int32)))


def _num(x: np.ndarray) -> pa.Array:
    return pc.cast(pa.array(x), pa.string())


def _join(*parts) -> pa.Array:
    return pc.binary_join_element_wise(*[pa.scalar(p) if isinstance(p, str) else p for p in parts], "")


def base_text(seed: int) -> bytes:
    """~8 MB of words from a 20,000-word vocabulary, Zipf-distributed: documents are windows of it."""
    rng = np.random.default_rng([seed, 7])
    letters = np.frombuffer(b"etaoinshrdlcumwfgypbvkjxqz", np.uint8)
    p = 1 / np.arange(1, 27) ** 0.9
    lengths = rng.integers(2, 11, 20000) + 1  # each word with its trailing space
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    chars = letters[rng.choice(26, int(lengths.sum()), p=p / p.sum())]
    chars[starts + lengths - 1] = ord(" ")
    words = np.minimum(rng.zipf(1.15, 1_400_000), 20000) - 1
    n = lengths[words]
    at = np.repeat(starts[words] - np.concatenate([[0], np.cumsum(n)[:-1]]), n) + np.arange(int(n.sum()))
    return chars[at].tobytes()


def _texts(rng: np.random.Generator, base: np.ndarray, n: int) -> pa.Array:
    """n texts of 150-650 characters, consecutive windows of the base text from a random start."""
    lengths = rng.integers(150, 651, n)
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    start = int(rng.integers(0, len(base)))
    data = np.resize(np.roll(base, -start), int(offsets[-1]))
    return pa.LargeStringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(data))


def _scores(rng: np.random.Generator, keys: list[str], n: int) -> pa.Array:
    k = len(keys)
    offsets = pa.array(np.arange(0, k * n + 1, k, dtype=np.int32))
    values = pa.array(np.round(rng.random(n * k), 6))
    return pa.MapArray.from_arrays(offsets, _take(keys, np.tile(np.arange(k), n)), values,
                                   type=schema.DECISION.field("scores").type)


def _null_where(mask: np.ndarray, values: pa.Array) -> pa.Array:
    return pc.if_else(pa.array(mask), values, pa.scalar(None, pa.string()))


def _details(stage: str, reasons: list[str], cat: np.ndarray, ids: pa.Array, rng: np.random.Generator) -> pa.Array:
    """The decision's details (JSON text or null) as the stages write them for these reasons."""
    n = len(cat)
    reason = np.array(reasons)[cat]
    if stage == "ingest":
        return _null_where(reason == "http_status", _join('{"error": "HTTP ', _num(rng.choice([404, 403, 500], n)),
                                                          '"}'))
    if stage == "dedup":
        other = ids.take(pa.array(rng.integers(0, n, n)))
        exact = _join('{"duplicate_of": "', other, '"}')
        near = _join('{"cluster_id": ', _num(rng.integers(0, 1 << 40, n)), ', "duplicate_of": "', other,
                     '", "jaccard_estimate": ', _num(np.round(rng.uniform(0.8, 1, n), 4)), "}")
        return pc.if_else(pa.array(reason == "exact_duplicate"), exact,
                          _null_where(reason == "near_duplicate", near))
    if stage == "quality":
        return _null_where(reason == "below_quality_cut", pa.array(np.full(n, '{"cutoff": 0.412371}')))
    return pa.nulls(n, pa.string())


def _decisions(stage: str, ids: pa.Array, rng: np.random.Generator):
    """A stage's decisions over its input documents: (table, category per document, plan)."""
    plan, keys = PLANS[stage]
    n = len(ids)
    cum = np.cumsum([f for *_, f in plan[:-1]])
    cat = np.searchsorted(cum, rng.random(n), side="right")
    actions, reasons = [a for a, _, _ in plan], [r for _, r, _ in plan]
    details = _details(stage, reasons, cat, ids, rng)
    table = pa.Table.from_arrays([ids, _take([stage], np.zeros(n, np.int32)), _take(actions, cat),
                                  _take(reasons, cat), _scores(rng, keys, n), details], schema=schema.DECISION)
    return table, cat, plan


def _contamination(ids: pa.Array, cat: np.ndarray, plan: list, rng: np.random.Generator):
    """decontaminate: details and contamination rows for contaminated (2 overlaps each) and near-miss (1) documents."""
    from tokenmill.decontam import CONTAMINATION

    n = len(ids)
    dropped = np.array([a for a, _, _ in plan])[cat] == "drop"
    near = ~dropped & (rng.random(n) < NEAR_MISS)
    per_doc = np.where(dropped, 2, np.where(near, 1, 0))
    rows = np.repeat(np.arange(n), per_doc)
    m = len(rows)
    bench = rng.integers(0, len(BENCHMARKS), m)
    item_words = rng.integers(12, 60, m)
    contaminated = dropped[rows]
    frac = np.where(contaminated, rng.uniform(0.8, 1, m), rng.uniform(0.6, 0.8, m))
    matched = np.round(frac * item_words).astype(np.int64)
    item_id = _hex(rng.integers(0, 256, (m, 8), dtype=np.uint8))
    table = pa.Table.from_arrays(
        [ids.take(pa.array(rows)), _take(BENCHMARKS, bench), item_id, matched // 2 + 1, item_words // 2 + 1,
         pa.array(np.round(matched / item_words, 6)), pa.array(contaminated),
         _take(["keep", "drop"], contaminated.astype(np.int32)), pa.array(matched), pa.array(item_words)],
        schema=CONTAMINATION)
    # details: the overlaps of each document as JSON, one per document with any
    overlap = _join('{"benchmark": "', table["benchmark"].combine_chunks(), '", "contaminated": ',
                    _take(["false", "true"], contaminated.astype(np.int32)), ', "item_id": "',
                    table["item_id"].combine_chunks(), '", "matched_words": ', _num(matched), "}")
    first = np.concatenate([[0], np.cumsum(per_doc)[:-1]])
    with_any = per_doc > 0
    one = overlap.take(pa.array(first[with_any]))
    two = overlap.take(pa.array(np.minimum(first[with_any] + 1, m - 1)))
    text = pc.if_else(pa.array(per_doc[with_any] == 2), _join('{"overlaps": [', one, ", ", two, "]}"),
                      _join('{"overlaps": [', one, "]}"))
    details = np.full(n, None, dtype=object)
    details[with_any] = text.to_numpy(zero_copy_only=False)  # a few per thousand documents
    return pa.array(details, pa.string()), table


def generate_shard(task: dict) -> dict:
    """One shard of every stage: records and ingest decisions for docs [lo, lo+n), then the chain."""
    root, s, lo, n, seed, dpf = Path(task["root"]), task["shard"], task["lo"], task["n"], task["seed"], task["dpf"]
    rng = np.random.default_rng([seed, s])
    name = f"part-{s:05d}.parquet"
    g = np.arange(lo, lo + n, dtype=np.int64)
    ids = doc_ids(g)
    file_k = g // dpf
    src_i = task["src_of_file"][file_k - file_k[0]]
    files = np.unique(file_k).tolist()
    file_names = [f"{FILE_PATTERN[task['src_of_file'][k - file_k[0]]].format(k)}" for k in files]
    file_col = _take(file_names, file_k - files[0])
    source = _take(list(SOURCES), src_i)
    bucket = _take(["web"], np.zeros(n, np.int32))
    locator = _num((g - file_k * dpf) * 41_000 + rng.integers(0, 40_000, n))
    url = _join("https://www.site", _num(rng.integers(0, 300_000, n)), ".example.org/", ids.cast(pa.string()), "/")
    record_id = _join("<urn:uuid:", _hex(rng.integers(0, 256, (n, 16), dtype=np.uint8)), ">")
    crawl_date = _take([f"2024-12-{d:02d}T{h:02d}:17:03Z" for d in range(1, 15) for h in range(0, 24, 3)],
                       rng.integers(0, 14 * 8, n))
    content_type = _take(["text/html", "text/html; charset=UTF-8", "application/xhtml+xml", "text/plain"],
                         rng.choice(4, n, p=[0.55, 0.35, 0.06, 0.04]))
    records = pa.Table.from_arrays(
        [ids, source, bucket, file_col, locator, _take(RECORD_TYPE, src_i), url, record_id, crawl_date,
         content_type, pa.array(np.minimum(rng.lognormal(10.3, 1.0, n), 2 ** 31).astype(np.int64)),
         _hex(rng.integers(0, 256, (n, 20), dtype=np.uint8))], schema=schema.RECORD)
    schema.write_parquet(records, schema.RECORD, root / "ingest" / "records" / name)
    err_files = [i for i, k in enumerate(files) if k % 50 == 7]  # one file in fifty ends in a read error
    errors = pa.Table.from_arrays(
        [_take(list(SOURCES), np.array([task["src_of_file"][files[i] - file_k[0]] for i in err_files], np.int32)),
         pa.array([file_names[i] for i in err_files], pa.string()),
         pa.array(rng.integers(10 ** 6, 10 ** 9, len(err_files)), pa.int64()),
         pa.array(["truncated gzip stream: unexpected end of data"] * len(err_files), pa.string())],
        schema=schema.READ_ERROR)
    schema.write_parquet(errors, schema.READ_ERROR, root / "ingest" / "read_errors" / name)

    base = np.frombuffer(task["base"], np.uint8)
    out: dict = {"records": n, "read_errors": len(err_files), "stages": {}}
    docs = None
    contamination = None
    for stage in STAGES:
        stage_ids = ids if stage == "ingest" else docs["doc_id"].combine_chunks()
        decisions, cat, plan = _decisions(stage, stage_ids, rng)
        if stage == "decontaminate":
            details, contamination = _contamination(stage_ids, cat, plan, rng)
            decisions = decisions.set_column(5, "details", details)
        keep = np.array([a != "drop" for a, _, _ in plan])[cat]
        if stage == "ingest":
            kept = records.filter(pa.array(keep))
            docs = pa.Table.from_arrays(
                [kept["doc_id"], _texts(rng, base, kept.num_rows), kept["source"], kept["bucket"],
                 _take([c["licence"] for c in SOURCES.values()],
                       pc.index_in(kept["source"], pa.array(list(SOURCES))).to_numpy(zero_copy_only=False)),
                 _take([c["snapshot"] for c in SOURCES.values()],
                       pc.index_in(kept["source"], pa.array(list(SOURCES))).to_numpy(zero_copy_only=False)),
                 kept["url"], kept["record_id"], kept["crawl_date"], kept["content_type"],
                 _take(["utf-8"], np.zeros(kept.num_rows, np.int32)), kept["file"], kept["locator"]],
                schema=schema.DOCUMENT)
        else:
            docs = docs.filter(pa.array(keep))
        schema.write_parquet(decisions, schema.DECISION, root / stage / "decisions" / name)
        schema.write_parquet(docs, schema.DOCUMENT, root / stage / "documents" / name)
        counts = np.bincount(cat, minlength=len(plan))
        out["stages"][stage] = {"in": len(cat), "out": int(keep.sum()),
                                "by_reason": {f"{a}:{r}": int(c) for (a, r, _), c in zip(plan, counts)}}
    out["final_text_chars"] = int(pc.sum(pc.binary_length(docs["text"])).as_py() or 0)
    out["contamination"] = contamination
    # tokenize: one index row per final document, ~4 characters a token
    k = docs.num_rows
    length = (pc.binary_length(docs["text"]).to_numpy() // 4).astype(np.int64)
    offset = np.concatenate([[0], np.cumsum(length + 1)[:-1]]).astype(np.int64)
    from tokenmill.tokenize import INDEX

    index = pa.Table.from_arrays([docs["doc_id"].combine_chunks(), docs["source"].combine_chunks(),
                                  docs["bucket"].combine_chunks(),
                                  _take([f"tokens/{s:05d}.bin"], np.zeros(k, np.int32)),
                                  pa.array(offset), pa.array(length)], schema=INDEX)
    schema.write_parquet(index, INDEX, root / "tokenize" / "index" / name)
    out["tokens"] = int((length + 1).sum())
    return out


def _manifest(stage: str, input_stage: str | None, c: dict, **extra) -> dict:
    by_action: dict = {}
    for key, n in c["by_reason"].items():
        by_action[key.split(":")[0]] = by_action.get(key.split(":")[0], 0) + n
    counts = {"in": c["in"], "out": c["out"], "by_action": dict(sorted(by_action.items())),
              "by_reason": {k: v for k, v in sorted(c["by_reason"].items()) if v}}
    digest = hashlib.sha1(json.dumps([stage, counts, sorted(extra)], sort_keys=True).encode()).hexdigest()
    return {"stage": stage, "input_stage": input_stage, "counts": counts, "digest": digest, **extra}


def gen_params(n: int, args) -> dict:
    return {"version": GEN_VERSION, "docs": n, "seed": args.seed, "shard_docs": args.shard_docs,
            "docs_per_file": args.docs_per_file}


def generate(root: Path, n: int, args) -> dict:
    """The stage outputs for n documents under root; root/bench_meta.json marks a complete generation."""
    from tokenmill.decontam import CONTAMINATION

    params = gen_params(n, args)
    meta_file = root / "bench_meta.json"
    if meta_file.exists() and not args.regenerate:
        meta = json.loads(meta_file.read_text())
        if meta["params"] == params:
            log(f"{n:,} documents: reusing the data generated in {meta['generate_s']} s under {root}")
            return {**meta, "reused": True}
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    t0 = time.perf_counter()
    n_files = -(-n // args.docs_per_file)
    src_of_file = np.random.default_rng([args.seed, 1]).choice(len(SOURCES), n_files, p=SOURCE_SHARE).astype(np.int32)
    base = base_text(args.seed)
    shards = max(2, -(-n // args.shard_docs))
    per = -(-n // shards)
    tasks = []
    for s in range(shards):
        lo, hi = s * per, min(n, (s + 1) * per)
        k0, k1 = lo // args.docs_per_file, (hi - 1) // args.docs_per_file
        tasks.append({"root": str(root), "shard": s, "lo": lo, "n": hi - lo, "seed": args.seed,
                      "dpf": args.docs_per_file, "src_of_file": src_of_file[k0:k1 + 1], "base": base})
    log(f"{n:,} documents: generating {shards} shards under {root} ({args.jobs} process(es))")
    if args.jobs > 1:
        with ProcessPoolExecutor(args.jobs) as ex:
            parts = list(ex.map(generate_shard, tasks))
    else:
        parts = [generate_shard(t) for t in tasks]

    # manifests, with the counts summed over shards; the contamination table as one sorted file
    expected = {"records": sum(p["records"] for p in parts), "read_errors": sum(p["read_errors"] for p in parts),
                "final_text_chars": sum(p["final_text_chars"] for p in parts),
                "tokens": sum(p["tokens"] for p in parts), "stages": {}}
    for stage in STAGES:
        c = {"in": 0, "out": 0, "by_reason": {}}
        for p in parts:
            ps = p["stages"][stage]
            c["in"] += ps["in"]
            c["out"] += ps["out"]
            for k, v in ps["by_reason"].items():
                c["by_reason"][k] = c["by_reason"].get(k, 0) + v
        expected["stages"][stage] = c
    contamination = pa.concat_tables([p["contamination"] for p in parts]).sort_by(
        [("doc_id", "ascending"), ("benchmark", "ascending"), ("item_id", "ascending")])
    schema.write_parquet(contamination, CONTAMINATION,
                         root / "decontaminate" / "contamination" / "contamination.parquet")
    expected["contamination_rows"] = contamination.num_rows
    source_files = {}
    for k in range(n_files):
        src = list(SOURCES)[src_of_file[k]]
        key = f"{src}:{FILE_PATTERN[src_of_file[k]].format(k)}"
        source_files[key] = hashlib.sha1(key.encode()).hexdigest()
    for i, stage in enumerate(STAGES):
        extra = {}
        if stage == "ingest":
            extra = {"read_errors": expected["read_errors"], "files": n_files,
                     "source_files": dict(sorted(source_files.items()))}
        if stage == "decontaminate":
            extra = {"contamination": {"overlaps": contamination.num_rows}}
        m = _manifest(stage, STAGES[i - 1] if i else None, expected["stages"][stage], **extra)
        (root / stage / "manifest.json").write_text(json.dumps(m, indent=1, sort_keys=True))
    final = expected["stages"][STAGES[-1]]["out"]
    tok = _manifest("tokenize", STAGES[-1], {"in": final, "out": final, "by_reason": {}}, dtype="uint16")
    (root / "tokenize" / "manifest.json").write_text(json.dumps(tok, indent=1, sort_keys=True))

    sizes = {d.name: sum(f.stat().st_size for f in d.rglob("*") if f.is_file()) for d in root.iterdir() if d.is_dir()}
    meta = {"params": params, "expected": expected, "generate_s": round(time.perf_counter() - t0, 1),
            "shards": shards, "files": n_files, "bytes": sizes}
    meta_file.write_text(json.dumps(meta, indent=1))
    log(f"{n:,} documents: generated in {meta['generate_s']} s, {sum(sizes.values()) / 2 ** 20:,.0f} MiB")
    return {**meta, "reused": False}


# --- the timed build (child process) -------------------------------------------------------------------------

def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def build_child(data_root: Path, out_dir: Path, memory_limit: str, threads: int, tokens: bool) -> None:
    """Runs in its own process so that the peak RSS is the build's: build_database as the lineage stage calls
    it, with the connection's memory limit and threads set, and each of its steps timed."""
    import duckdb

    import tokenmill.lineage as lineage

    # The stage's own setting: execution.duckdb_memory_limit and execution.workers (DuckDB's threads).
    execution = {"duckdb_memory_limit": memory_limit, "workers": threads}
    steps: dict = {}

    def timed(name, fn):
        def run(*a, **kw):
            t, c = time.perf_counter(), _cpu()
            try:
                return fn(*a, **kw)
            finally:
                steps[name] = {"wall_s": round(time.perf_counter() - t, 2), "cpu_s": round(_cpu() - c, 2)}
        return run

    for name in ("build", "verify", "funnel"):
        setattr(lineage, name, timed(name, getattr(lineage, name)))
    rss_before = round(peak_rss_mb())
    t, c = time.perf_counter(), _cpu()
    result = lineage.build_database(data_root, STAGES, SOURCES, out_dir, "tokenize" if tokens else None, None,
                                    None, out_dir / "plots", execution)
    wall, cpu = time.perf_counter() - t, _cpu() - c
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(json.dumps({"wall_s": round(wall, 2), "cpu_s": round(cpu, 2), "steps": steps,
                      "peak_rss_mb": round(peak_rss_mb()), "rss_before_mb": rss_before,
                      "ru_maxrss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
                      "children_peak_rss_mb": round(kids.ru_maxrss / 1024),
                      "children_cpu_s": round(kids.ru_utime + kids.ru_stime, 2),
                      "fates": result.metrics["fates"],
                      "conservation_violations": result.extra["conservation_violations"],
                      "duckdb": duckdb.__version__}))


def check(db: Path, exp: dict, tokens: bool) -> list[str]:
    """The database against what was generated; returns the mismatches (empty: the build is right)."""
    import duckdb

    con = duckdb.connect(str(db), read_only=True)
    q = lambda sql: con.execute(sql).fetchall()  # noqa: E731
    st = exp["stages"]
    n = exp["records"]
    drops = {s: sum(v for k, v in c["by_reason"].items() if k.startswith("drop:")) for s, c in st.items()}
    modifies = sum(v for c in st.values() for k, v in c["by_reason"].items() if k.startswith("modify:"))
    kept = st[STAGES[-1]]["out"]
    got = {
        "documents rows": q("SELECT count(*) FROM documents")[0][0],
        "records rows": q("SELECT count(*) FROM records")[0][0],
        "distinct documents": q("SELECT count(DISTINCT doc_id) FROM documents")[0][0],
        "kept": q("SELECT count(*) FROM documents WHERE fate = 'kept'")[0][0],
        "dropped": q("SELECT count(*) FROM documents WHERE fate = 'dropped'")[0][0],
        "dropped per stage": dict(q("SELECT dropped_at, count(*) FROM documents WHERE fate = 'dropped' GROUP BY 1")),
        "drop reasons": dict(q("SELECT dropped_at || ':' || drop_reason, count(*) FROM documents "
                               "WHERE fate = 'dropped' GROUP BY 1")),
        "times modified": q("SELECT sum(times_modified) FROM documents")[0][0],
        "final text chars": q("SELECT sum(final_text_chars), count(final_text_chars) FROM documents")[0],
        "decisions rows": q("SELECT count(*) FROM decisions")[0][0],
        "stage_outputs rows": q("SELECT count(*) FROM stage_outputs")[0][0],
        "read_errors rows": q("SELECT count(*) FROM read_errors")[0][0],
        "contamination rows": q("SELECT count(*) FROM contamination")[0][0],
        "sources records": q("SELECT sum(records), sum(kept) FROM sources")[0],
    }
    want = {
        "documents rows": n, "records rows": n, "distinct documents": n, "kept": kept, "dropped": n - kept,
        "dropped per stage": {s: d for s, d in drops.items() if d},
        "drop reasons": {f"{s}:{k.split(':', 1)[1]}": v for s, c in st.items() for k, v in c["by_reason"].items()
                         if k.startswith("drop:") and v},
        "times modified": modifies,
        "final text chars": (exp["final_text_chars"], kept),
        "decisions rows": sum(c["in"] for c in st.values()),
        "stage_outputs rows": sum(c["out"] for c in st.values()),
        "read_errors rows": exp["read_errors"],
        "contamination rows": exp["contamination_rows"],
        "sources records": (n, kept),
    }
    if tokens:
        got["token_index rows"] = q("SELECT count(*), sum(length + 1) FROM token_index")[0]
        want["token_index rows"] = (kept, exp["tokens"])
    con.close()
    return [f"{k}: database {got[k]!r}, generated {want[k]!r}" for k in want
            if (tuple(got[k]) if isinstance(got[k], (tuple, list)) else got[k]) != want[k]]


def bench_size(n: int, args) -> dict:
    data_root = args.work / f"docs-{n}"
    meta = generate(data_root, n, args)
    out_dir = args.work / f"db-{n}"
    shutil.rmtree(out_dir, ignore_errors=True)
    out_dir.mkdir(parents=True)
    log(f"{n:,} documents: building the lineage (memory_limit {args.memory_limit}, {args.threads} threads)")
    proc = subprocess.run([sys.executable, __file__, "_build", str(data_root), str(out_dir), args.memory_limit,
                           str(args.threads), "1" if args.tokens else "0"], capture_output=True, text=True)
    if proc.returncode:
        sys.stderr.write(proc.stderr)
        raise SystemExit(f"the build of {n:,} documents failed (exit {proc.returncode})")
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    db = out_dir / "lineage.duckdb"
    res["db_bytes"] = db.stat().st_size
    problems = check(db, meta["expected"], args.tokens)
    problems += [f"conservation: {p}" for p in res["conservation_violations"]]
    exp = meta["expected"]
    want_fates = {"dropped": n - exp["stages"][STAGES[-1]]["out"], "kept": exp["stages"][STAGES[-1]]["out"]}
    if res["fates"] != want_fates:
        problems.append(f"build_database fates {res['fates']}, generated {want_fates}")
    if problems:
        raise SystemExit(f"the lineage of {n:,} documents is wrong:\n  " + "\n  ".join(problems))
    log(f"{n:,} documents: built in {res['wall_s']} s ({res['cpu_s']} CPU-s), peak RSS {res['peak_rss_mb']} MB, "
        f"database {res['db_bytes'] / 2 ** 20:,.0f} MiB; checks passed")
    if not args.keep_db:
        shutil.rmtree(out_dir, ignore_errors=True)
    return {"docs": n, **res, "generate_s": meta["generate_s"], "reused": meta["reused"], "shards": meta["shards"],
            "files": meta["files"], "data_bytes": meta["bytes"], "expected": exp}


# --- report --------------------------------------------------------------------------------------------------

def _mb(b: float) -> str:
    return f"{b / 2 ** 20:,.0f} MB"


def markdown(runs: list[dict], args, argv: list[str]) -> str:
    sys.path.insert(0, str(Path(__file__).parent))
    from benchlib import machine

    m = machine(["duckdb", "pyarrow"])
    e = runs[-1]["expected"]["stages"]
    frac = {s: 1 - c["out"] / c["in"] for s, c in e.items()}
    mods = {s: sum(v for k, v in c["by_reason"].items() if k.startswith("modify:")) / c["in"] for s, c in e.items()}
    read = lambda r: sum(v for k, v in r["data_bytes"].items())  # noqa: E731
    lines = [
        TITLE,
        "",
        f"Machine: {m['cpu']}, {m['nproc']} cores, {m['ram_gib']:.0f} GiB RAM, Python {m['python']}, "
        f"DuckDB {m['versions']['duckdb']}, pyarrow {m['versions']['pyarrow']}; {datetime.date.today().isoformat()}; "
        f"load average before {runs[0]['load_before']}. Command: `python {' '.join(argv)}`.",
        "",
        "Synthetic stage outputs with the real schemas (tokenmill.schema.DOCUMENT, DECISION, RECORD, READ_ERROR; "
        "decontam.CONTAMINATION; tokenize.INDEX), written by schema.write_parquet in shards of "
        f"{args.shard_docs:,} input documents, {args.docs_per_file:,} records per source file: ingest drops "
        f"{frac['ingest']:.1%}, filter {frac['filter']:.1%}, pii none (modifies {mods['pii']:.1%}), dedup "
        f"{frac['dedup']:.1%} (modifies {mods['dedup']:.1%}), quality {frac['quality']:.1%}, decontaminate "
        f"{frac['decontaminate']:.2%}, so {e[STAGES[-1]]['out'] / e['ingest']['in']:.1%} of the records are kept; "
        "every decision has the stage's score keys (2-11). Texts are 150-650 characters; real extracted pages are "
        "usually longer, but the build reads no stage's text except the last stage's, as length(text), so the "
        "text length shows in that one scan only. Timed: "
        "tokenmill.lineage.build_database in its own process, whose peak RSS is the figure (VmHWM: the child's "
        "ru_maxrss would include the parent's, which Linux carries across fork and exec), on a file database, "
        + f"with execution.duckdb_memory_limit {args.memory_limit} and execution.workers {args.threads} (DuckDB's "
        "memory limit and threads, as the lineage stage sets them); " + ("with the tokenize stage's index; "
                                                                        if args.tokens else "without the token index; ")
        + "without the mixture plan and the planted-case scoring. Each database was checked against what was "
        "generated (documents = records, kept and dropped per stage and reason, modifications, final text "
        "characters, conservation). Generation is not in the build time.",
        "",
        "| documents | kept | decisions | Parquet of the stages | **build s** | CPU s | peak RSS | database | "
        "build() s | verify() s | funnel() s | rest s |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in runs:
        x = r["expected"]["stages"]
        st = r["steps"]
        rest = round(r["wall_s"] - sum(v["wall_s"] for v in st.values()), 2)
        lines.append(f"| {r['docs']:,} | {x[STAGES[-1]]['out']:,} | {sum(c['in'] for c in x.values()):,} | "
                     f"{_mb(read(r))} | **{r['wall_s']}** | {r['cpu_s']} | {r['peak_rss_mb']:,} MB | "
                     f"{_mb(r['db_bytes'])} | {st['build']['wall_s']} | {st['verify']['wall_s']} | "
                     f"{st['funnel']['wall_s']} | {rest} |")
    last = runs[-1]
    us = last["wall_s"] / last["docs"] * 1e6
    pages = 2.64e9  # CC-MAIN-2024-51 (docs/scaling.md)
    db_per_doc = last["db_bytes"] / last["docs"]
    in_per_doc = read(last) / last["docs"]
    gen = "; ".join(f"{r['docs']:,}: {r['generate_s']} s" + (" (generated by an earlier run, reused)"
                                                              if r["reused"] else "") for r in runs)
    threads = f"{args.threads} thread{'s' if args.threads > 1 else ''}"
    hours, in_tb, db_tb = us * pages / 3.6e9, in_per_doc * pages / 1e12, db_per_doc * pages / 1e12
    limit_mb = _parse_mb(args.memory_limit)
    peaks = ", ".join(f"{r['peak_rss_mb']:,}" for r in runs)
    memory = f"Peak RSS {peaks} MB from the smallest size to the largest, "
    if limit_mb is None:
        memory += f"with DuckDB's own memory_limit (80% of {m['ram_gib']:.0f} GiB). "
    elif last["peak_rss_mb"] <= limit_mb + runs[0]["rss_before_mb"] + 256:
        memory += (f"within DuckDB's memory_limit ({args.memory_limit}) plus the process's own "
                   f"{runs[0]['rss_before_mb']} MB: memory is not what stops one node. ")
    else:
        memory += (f"over DuckDB's memory_limit ({args.memory_limit}) plus the process's own "
                   f"{runs[0]['rss_before_mb']} MB: something outside DuckDB's buffer manager grows with the "
                   "corpus. ")
    lines += [
        "",
        f"Generating the data (not timed above, {args.jobs} process(es)): {gen}. The build's process holds "
        f"{runs[0]['rss_before_mb']} MB before it starts (Python, DuckDB, pyarrow); `rest` is the input ids, the "
        "fates count and the plot file.",
        "",
        ("Growth of the build from one size to the next: "
         + ", ".join(f"{b['wall_s'] / a['wall_s']:.1f}x for {b['docs'] / a['docs']:.1f}x the documents"
                     for a, b in zip(runs, runs[1:])) + ". " if len(runs) > 1 else "")
        + f"The database takes {db_per_doc:.0f} bytes a document. "
        + memory
        + f"At {us:.1f} µs a document on {threads}, a Common Crawl snapshot's 2.64 billion pages (CC-MAIN-2024-51, "
        f"docs/scaling.md) would take ~{hours:.0f} hours in this build at linear growth (more where a sort or join "
        f"spills), read ~{in_tb:.1f} TB of stage outputs (more with real texts) and write a ~{db_tb:.1f} TB "
        "database file: one node stops being enough there on time and on the one-file database. Not implemented: "
        "the build would then be partitioned by doc_id (every join and conservation check here is per document), "
        "one database per partition.",
    ]
    return "\n".join(lines)


def _parse_mb(limit: str) -> float | None:
    units = {"KB": 1 / 1000, "MB": 1, "GB": 1000, "TB": 10 ** 6, "KIB": 1 / 1024, "MIB": 1, "GIB": 1024,
             "TIB": 1024 ** 2}
    s = limit.strip().upper().replace(" ", "")
    for u in sorted(units, key=len, reverse=True):
        if s.endswith(u):
            try:
                return float(s[:-len(u)]) * units[u]
            except ValueError:
                return None
    return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1000000,3000000,10000000", help="documents (records read at ingest)")
    ap.add_argument("--work", type=Path, default=Path("/tmp/bench-lineage"))
    ap.add_argument("--memory-limit", default="2GB",
                    help="execution.duckdb_memory_limit for the build (the shipped default is 2GB)")
    ap.add_argument("--threads", type=int, default=2, help="DuckDB threads of the build's connection")
    ap.add_argument("--jobs", type=int, default=2, help="processes generating shards")
    ap.add_argument("--shard-docs", type=int, default=1_000_000, help="input documents per shard")
    ap.add_argument("--docs-per-file", type=int, default=30_000, help="records per source file")
    ap.add_argument("--seed", type=int, default=5)
    ap.add_argument("--no-tokens", dest="tokens", action="store_false", help="leave the tokenize stage out")
    ap.add_argument("--regenerate", action="store_true", help="regenerate data even where it is reusable")
    ap.add_argument("--keep-db", action="store_true", help="keep <work>/db-<N>/lineage.duckdb")
    ap.add_argument("--write", action="store_true", help="replace the section in benchmarks/RESULTS.md")
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("TOKENMILL_PROGRESS", "0")
    runs = []
    for n in (int(x) for x in args.sizes.split(",")):
        load = [round(x, 1) for x in os.getloadavg()]
        runs.append({**bench_size(n, args), "load_before": load})
    (args.work / "results.json").write_text(json.dumps(
        {"date": datetime.date.today().isoformat(), "machine": f"{platform.machine()}, {os.cpu_count()} cores",
         "args": {k: str(v) for k, v in vars(args).items()}, "runs": runs}, indent=1))
    text = markdown(runs, args, ["benchmarks/bench_lineage.py"] + sys.argv[1:])
    print(text)
    if args.write:
        sys.path.insert(0, str(Path(__file__).parent))
        from benchlib import write_section

        write_section(Path(__file__).parent / "RESULTS.md", TITLE, text)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "_build":
        build_child(Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4], int(sys.argv[5]), sys.argv[6] == "1")
    else:
        main()
