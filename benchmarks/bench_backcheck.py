"""The embedding back-checks measured (issue 44): semantic duplicates and semantic contamination, their
precision and recall per kind of rewrite beside the layer before them (MinHash; n-grams), what they find on the
demo, and what they cost.

Parts (each writes its figures into --out, a JSON file, and prints a table):
- pairs:  labelled document pairs built from real text (tests/paraphrase.py: the same story with sentences
          reordered, words swapped from tests/data/synonyms.tsv, clauses dropped, all three; an article and its
          own lead paragraphs — duplicates —; templated pages with different facts and two real articles on one
          topic — not duplicates). Per kind and threshold: the share the cosine of the embed stage's vectors
          flags, and the share MinHash flags (the dedup stage's signatures, 5-word shingles, 128 permutations,
          estimated Jaccard >= dedup.near.threshold). Pairs of seed 0 chose the shipped threshold; seed 1 draws
          other articles and templates, the figures on data the threshold was not tuned on.
- items:  tests/data/paraphrased_items.jsonl (real benchmark items rewritten by rules: clauses reordered,
          synonyms, the question turned into a statement, the options spelled out in prose) and clean documents
          on the same topics (tests/paraphrase.py's same_topic_documents), each also set in the middle of a real
          page as a paragraph of its own, and run into a paragraph of one (no blank line around it). Recall per rewrite kind (the nearest item is the rewritten one, at or above the threshold) and
          false positives, for the embedding check (backcheck.stage.embed_items, semantic.nearest_items, over the
          document's vector and its paragraph windows as the stage has them; and the vector alone) and the
          n-gram layer (decontaminate's processor at its shipped rules), on the same documents and items.
- demo:   what the back-checks found on the built demo (data/backcheck, data/tokenize): documents, tokens,
          examples, and the stage's seconds per 1,000 documents beside the other curation stages (runs/*.json).
- scale:  semantic.neighbours on n unit vectors (real demo vectors, perturbed), exact and inverted file, seconds
          and the inverted file's recall of the exact pairs; the projection to 10 million documents.

Usage: python benchmarks/bench_backcheck.py pairs items demo scale [--out benchmarks/backcheck/figures.json]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"
sys.path.insert(0, str(ROOT / "tests"))

from tokenmill.backcheck import semantic  # noqa: E402
from tokenmill.backcheck.params import Backcheck  # noqa: E402
from tokenmill.backcheck.stage import embed_items  # noqa: E402
from tokenmill.decontam.params import Decontaminate  # noqa: E402
from tokenmill.decontam.stage import DecontamProcessor  # noqa: E402
from tokenmill.dedup import minhash  # noqa: E402
from tokenmill.dedup.params import Dedup  # noqa: E402
from tokenmill.domains.embed import embed_texts, read_vectors  # noqa: E402
from tokenmill.domains.params import Embed  # noqa: E402

THRESHOLDS = (0.8, 0.85, 0.9, 0.92, 0.94, 0.95, 0.96, 0.97, 0.98, 0.99)
DUPLICATES, ITEMS = Backcheck().duplicates.threshold, Backcheck().contamination.threshold


def _cosines(a: list[str], b: list[str]) -> np.ndarray:
    return (embed_texts(a) * embed_texts(b)).sum(axis=1)


def _minhash_flags(a: list[str], b: list[str]) -> np.ndarray:
    near = Dedup().near
    sa = minhash.signatures(a, near.ngram, near.num_perm, near.seed)
    sb = minhash.signatures(b, near.ngram, near.num_perm, near.seed)
    return np.array([minhash.jaccard_estimate(x, y) >= near.threshold for x, y in zip(sa, sb)])


def pairs(seed: int, per_kind: int) -> dict:
    import paraphrase  # tests/paraphrase.py: the rewrite rules the tests use too
    rows = paraphrase.labelled_pairs(SHARED, per_kind=per_kind, seed=seed)
    kinds = sorted({r["kind"] for r in rows}, key=lambda k: [r["kind"] for r in rows].index(k))
    cos = _cosines([r["a"] for r in rows], [r["b"] for r in rows])
    mh = _minhash_flags([r["a"] for r in rows], [r["b"] for r in rows])
    label = np.array([r["duplicate"] for r in rows])
    kind = np.array([r["kind"] for r in rows])
    out = {"seed": seed, "kinds": {}, "thresholds": {}}
    for k in kinds:
        m = kind == k
        out["kinds"][k] = {"pairs": int(m.sum()), "duplicate": bool(label[m][0]),
                           "cosine_median": round(float(np.median(cos[m])), 4),
                           "cosine_min": round(float(cos[m].min()), 4), "cosine_max": round(float(cos[m].max()), 4),
                           "minhash_flagged": round(float(mh[m].mean()), 3),
                           "flagged": {f"{t:g}": round(float((cos[m] >= t).mean()), 3) for t in THRESHOLDS}}
    for t in THRESHOLDS:
        flagged = cos >= t
        tp, fp = int((flagged & label).sum()), int((flagged & ~label).sum())
        out["thresholds"][f"{t:g}"] = {"precision": round(tp / max(1, tp + fp), 3),
                                       "recall": round(tp / int(label.sum()), 3),
                                       "beyond_minhash": round(float((flagged & label & ~mh).sum() / max(1, (label & ~mh).sum())), 3)}
    tp, fp = int((mh & label).sum()), int((mh & ~label).sum())
    out["minhash"] = {"precision": round(tp / max(1, tp + fp), 3), "recall": round(tp / int(label.sum()), 3)}
    return out


def _print_pairs(res: dict) -> None:
    print(f"\nlabelled pairs, seed {res['seed']}: share flagged per kind (cosine >= t | MinHash)")
    shown = [f"{t:g}" for t in THRESHOLDS]
    print(f"{'kind':16} {'dup':>4} {'n':>4} {'median':>7} " + " ".join(f"{t:>5}" for t in shown) + "  MinHash")
    for k, v in res["kinds"].items():
        print(f"{k:16} {'yes' if v['duplicate'] else 'no':>4} {v['pairs']:>4} {v['cosine_median']:>7.3f} "
              + " ".join(f"{v['flagged'][t]:>5.2f}" for t in shown) + f"  {v['minhash_flagged']:.2f}")
    print("precision " + " ".join(f"{res['thresholds'][t]['precision']:>5.2f}" for t in shown)
          + f"  {res['minhash']['precision']:.2f}")
    print("recall    " + " ".join(f"{res['thresholds'][t]['recall']:>5.2f}" for t in shown)
          + f"  {res['minhash']['recall']:.2f}")


def _spec(path: Path) -> dict:
    rel = path.relative_to(SHARED / "eval")
    fmt = "mmlu_csv" if path.suffix == ".csv" or rel.parts[0] == "mmlu" else rel.parts[0]
    return {"name": str(rel.with_suffix("")).replace("/", "_"), "format": fmt, "path": str(path)}


def items() -> dict:
    import paraphrase
    rows = [json.loads(line) for line in (ROOT / "tests/data/paraphrased_items.jsonl").read_text().splitlines()]
    files = sorted({r["benchmark_file"] for r in rows})
    specs = [_spec(SHARED / f) for f in files]
    if any(s["format"] == "mmlu_csv" for s in specs):  # the MMLU reader reads a folder of CSV files
        specs = [s if s["format"] != "mmlu_csv" else {**s, "path": str(Path(s["path"]).parent)} for s in specs]
        specs = list({s["path"]: s for s in specs}.values())
    started = time.process_time()
    names, vectors = embed_items(specs, Embed())
    item_seconds = time.process_time() - started
    from tokenmill.decontam.readers import read_items
    texts = [t for s in specs for _, _, t, _ in read_items(s)]
    norm = [" ".join(t.lower().split()) for t in texts]

    def source_item(r: dict) -> int:
        q = " ".join(r["question"].lower().split())[:80]
        a = " ".join(r["answer"].lower().split())
        hits = [i for i, t in enumerate(norm) if q in t and a in t]
        return hits[0] if hits else -1

    keys = {(r["benchmark_file"], r["row"]) for r in rows}
    unique = {k: next(r for r in rows if (r["benchmark_file"], r["row"]) == k) for k in sorted(keys)}
    source = {k: source_item(r) for k, r in unique.items()}
    clean = paraphrase.same_topic_documents(list(unique.values()), SHARED)
    pages = [c["text"] for c in clean]
    docs, kinds, targets = [], [], []
    for r in rows:
        docs.append(r["text"])
        kinds.append(r["kind"])
        targets.append(source[(r["benchmark_file"], r["row"])])
    for i, r in enumerate(rows):  # the rewrite set in the middle of a real page on its topic
        page = pages[i % len(pages)]
        half = len(page) // 2
        cut = page.rfind(" ", 0, half) if " " in page[:half] else half
        docs.append(page[:cut] + "\n\n" + r["text"] + "\n\n" + page[cut:])
        kinds.append(r["kind"] + "_in_page")
        targets.append(source[(r["benchmark_file"], r["row"])])
    for i, r in enumerate(rows):  # the harder case: run into a paragraph of the page, no blank line around it
        page = pages[(i + 1) % len(pages)]
        half = len(page) // 2
        cut = page.rfind(" ", 0, half) if " " in page[:half] else half
        docs.append(page[:cut] + " " + " ".join(r["text"].split()) + " " + page[cut:])
        kinds.append(r["kind"] + "_in_paragraph")
        targets.append(source[(r["benchmark_file"], r["row"])])
    docs += pages
    kinds += ["same_topic_clean"] * len(pages)
    targets += [-1] * len(pages)
    started = time.process_time()
    doc_vectors = embed_texts(docs)
    nearest, sims = semantic.nearest_items(doc_vectors, vectors)
    embed_seconds = time.process_time() - started
    pooled = (nearest.copy(), sims.copy())
    # As the stage does with contamination.paragraphs: each paragraph and pair of paragraphs too, the nearest wins.
    con = Backcheck().contamination
    pieces, owner = [], []
    for i, d in enumerate(docs):
        w = semantic.paragraph_windows(d, con.min_paragraph_words, Embed().chunk_chars)
        pieces += w
        owner += [i] * len(w)
    near_w, sim_w = semantic.nearest_items(embed_texts(pieces, max_chunks=1), vectors)
    for k, o in enumerate(owner):
        if sim_w[k] > sims[o]:
            nearest[o], sims[o] = near_w[k], sim_w[k]
    paragraph_seconds = time.process_time() - started - embed_seconds
    processor = DecontamProcessor(Decontaminate(benchmarks=specs))
    ngram = np.array([o.action == "drop" for o in processor.texts(docs)])
    kinds_a, targets_a = np.array(kinds), np.array(targets)
    out = {"items": len(unique), "items_found": int(sum(v >= 0 for v in source.values())),
           "index_items": len(names), "kinds": {}, "thresholds": {}}
    for k in dict.fromkeys(kinds):
        m = kinds_a == k
        right = nearest[m] == targets_a[m]
        entry = {"documents": int(m.sum()), "ngram_flagged": round(float(ngram[m].mean()), 3),
                 "cosine_median": round(float(np.median(sims[m])), 4)}
        for t in THRESHOLDS:
            hit = sims[m] >= t
            entry[f"{t:g}"] = round(float((hit & right).mean() if k != "same_topic_clean" else hit.mean()), 3)
        entry["either"] = round(float(((sims[m] >= ITEMS) & (right | (k == "same_topic_clean")) | ngram[m]).mean()), 3)
        hit = pooled[1][m] >= ITEMS  # the document's own vector alone (contamination.paragraphs: false)
        entry["pooled_only"] = round(float((hit & (pooled[0][m] == targets_a[m])).mean() if k != "same_topic_clean"
                                           else hit.mean()), 3)
        out["kinds"][k] = entry
    out["seconds"] = {"embed_items_cpu": round(item_seconds, 2), "embed_and_search_docs_cpu": round(embed_seconds, 2),
                      "paragraph_windows": len(pieces), "embed_and_search_paragraphs_cpu": round(paragraph_seconds, 2),
                      "documents": len(docs)}
    return out


def _print_items(res: dict) -> None:
    print(f"\nparaphrased items: {res['items']} items ({res['items_found']} located among the index's "
          f"{res['index_items']}); share flagged per kind (recall; false positives for same_topic_clean)")
    shown = [f"{t:g}" for t in THRESHOLDS]
    print(f"{'kind':28} {'n':>4} {'median':>7} " + " ".join(f"{t:>5}" for t in shown) + "  n-gram  either  pooled")
    for k, v in res["kinds"].items():
        print(f"{k:28} {v['documents']:>4} {v['cosine_median']:>7.3f} " + " ".join(f"{v[t]:>5.2f}" for t in shown)
              + f"  {v['ngram_flagged']:>6.2f}  {v['either']:>6.2f}  {v['pooled_only']:>6.2f}")
    print(f"  (cosine: the document's vector and its {res['seconds']['paragraph_windows']} paragraph windows, the "
          f"nearest; pooled: the document's own vector alone, at {ITEMS:g})")


def demo() -> dict:
    import duckdb
    con = duckdb.connect()
    data = ROOT / "data"
    dup = con.execute(f"""
        SELECT count(*) FILTER (WHERE NOT kept), count(DISTINCT cluster), max(cluster_size)
        FROM read_parquet('{data}/backcheck/semantic_duplicates/*.parquet')""").fetchone()
    tokens = con.execute(f"""
        SELECT coalesce(sum(t.length + 1), 0), count(DISTINCT s.doc_id), any_value(t.bucket)
        FROM read_parquet('{data}/backcheck/semantic_duplicates/*.parquet') s
        JOIN read_parquet('{data}/tokenize/index/*.parquet') t USING (doc_id) WHERE NOT s.kept""").fetchone()
    all_tokens = con.execute(f"SELECT sum(length + 1) FROM read_parquet('{data}/tokenize/index/*.parquet')").fetchone()[0]
    by_bucket = con.execute(f"""
        SELECT d.bucket, count(*) FROM read_parquet('{data}/backcheck/semantic_duplicates/*.parquet') s
        JOIN read_parquet('{data}/backcheck/documents/*.parquet') d USING (doc_id) WHERE NOT s.kept
        GROUP BY ALL ORDER BY 2 DESC""").fetchall()
    examples = con.execute(f"""
        SELECT s.similarity, s.cluster_size, d.url, k.url, left(d.text, 90), left(k.text, 90)
        FROM read_parquet('{data}/backcheck/semantic_duplicates/*.parquet') s
        JOIN read_parquet('{data}/backcheck/documents/*.parquet') d USING (doc_id)
        JOIN read_parquet('{data}/backcheck/documents/*.parquet') k ON k.doc_id = s.nearest_doc_id
        WHERE NOT s.kept ORDER BY hash(s.doc_id) LIMIT 6""").fetchall()
    suspects = con.execute(f"SELECT count(*) FROM read_parquet('{data}/backcheck/suspects/*.parquet')").fetchone()[0]
    documents = json.loads((ROOT / "metrics/backcheck.json").read_text())["documents"]["in"]
    seconds = {}
    for stage in ("filter", "pii", "dedup", "quality", "decontaminate", "embed", "backcheck", "domains"):
        wall = json.loads((ROOT / "runs" / f"{stage}.json").read_text())["seconds"]
        metrics = json.loads((ROOT / "metrics" / f"{stage}.json").read_text())
        n = metrics["documents_embedded"] if stage == "embed" else metrics["documents"]["in"]
        seconds[stage] = {"documents_in": n, "wall_seconds": wall, "per_1000": round(1000 * wall / max(1, n), 2)}
    return {"documents": documents, "semantic_duplicates": dup[0], "clusters": dup[1], "largest_cluster": dup[2],
            "duplicate_tokens": int(tokens[0]), "tokens": int(all_tokens), "by_bucket": by_bucket,
            "suspects": suspects, "examples": examples, "stage_seconds": seconds}


def scale(sizes: list[int]) -> dict:
    ids, base = read_vectors(ROOT / "data/embed")
    rng = np.random.default_rng(0)
    out = {}
    for n in sizes:
        # Real vectors moved apart (noise of norm 0.5: cosine about 0.8 between two draws of one document), and
        # one in twenty a near copy of another row (noise of norm 0.1: cosine about 0.99): planted duplicates.
        d = base.shape[1]
        x = base[rng.integers(0, len(base), n)] + rng.normal(0, 0.5 / math.sqrt(d), (n, d))
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        copies = rng.choice(n, n // 20, replace=False)
        x[copies] = x[rng.integers(0, n, copies.size)] + rng.normal(0, 0.1 / math.sqrt(d), (copies.size, d))
        x = (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)
        row = {}
        for name, exact_below in (("exact", 10 ** 12), ("ivf", 1)):
            if name == "exact" and n > 200_000:
                continue
            started = time.perf_counter()
            found = semantic.neighbours(x, DUPLICATES, k=16, exact_below=exact_below, probe=8)
            row[name] = {"seconds": round(time.perf_counter() - started, 2), "pairs": int(found.first.size)}
            row[name]["_pairs"] = set(zip(found.first.tolist(), found.second.tolist()))
        if "exact" in row:
            want, got = row["exact"]["_pairs"], row["ivf"]["_pairs"]
            row["ivf"]["recall_of_exact"] = round(len(got & want) / max(1, len(want)), 4)
        for v in row.values():
            v.pop("_pairs")
        out[str(n)] = row
        print(n, row, flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("parts", nargs="+", choices=("pairs", "items", "demo", "scale"))
    ap.add_argument("--out", default=str(ROOT / "benchmarks/backcheck/figures.json"))
    ap.add_argument("--per-kind", type=int, default=40)
    ap.add_argument("--sizes", default="10000,50000,200000,1000000")
    args = ap.parse_args()
    out_path = Path(args.out)
    figures = json.loads(out_path.read_text()) if out_path.exists() else {}
    if "pairs" in args.parts:
        figures["pairs"] = [pairs(seed, args.per_kind) for seed in (0, 1)]
        for res in figures["pairs"]:
            _print_pairs(res)
    if "items" in args.parts:
        figures["items"] = items()
        _print_items(figures["items"])
    if "demo" in args.parts:
        figures["demo"] = demo()
        print(json.dumps(figures["demo"], indent=1, default=str))
    if "scale" in args.parts:
        figures["scale"] = scale([int(s) for s in args.sizes.split(",")])
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(figures, indent=1, default=str) + "\n")


if __name__ == "__main__":
    main()
