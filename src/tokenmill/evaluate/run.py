"""run_evaluation: lm-eval 0.4 on an exported checkpoint, fully offline, with contamination-aware scores.

One lm-eval run (simple_evaluate, one model load) over task folders generated into a temporary directory
(tasks.py): held-out perplexity per mixture bucket (loglikelihood_rolling), and every configured benchmark.
`TaskManager(include_path=..., include_defaults=False)` indexes only those folders (the built-in tasks
take seconds to index and would reach for the hub).

Output directory, written in place (the evaluate stage's StageRun gives a fresh temporary folder and swaps it in
whole, runtime.swap_into_place):
    results.json          deterministic: settings, held-out perplexity per bucket, per benchmark items, dirty
                          items and every metric on all / clean items with the difference (scores.py).
                          Timings are not in it: run_evaluation returns them separately.
    samples/<task>.jsonl  one line per item: item_id, dirty, gold, the log-likelihood of each choice, the
                          per-item metrics (held-out: doc_id, bucket, log-likelihood, words, bytes).

The prefix token of rolling perplexity windows is the end-of-text id: the model saw it before every document
in training and never saw a <s> (tokenmill separates documents by end-of-text only).
"""

from __future__ import annotations

import json
import math
import os
import tempfile
import time
from importlib.metadata import version
from pathlib import Path
from typing import Any, Iterable, Mapping

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from tokenmill.evaluate.evalset import METRICS, answer_bytes, item_scores
from tokenmill.evaluate.scores import dirty_items, ratio_stderr, split_score
from tokenmill.evaluate.tasks import Benchmark, BenchmarkError, drop_overlong, load_benchmark, task_name, write_task

OFFLINE = {"HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
ROUND = 6  # digits kept in results: identical runs on one machine agree to far more; BLAS builds may not


def heldout_documents(heldout_parquet: str | Path, documents_dir: str | Path) -> pa.Table:
    """doc_id, bucket, text of the mixture's held-out documents (heldout.parquet) joined with the documents
    of the stage the tokenizer read (documents/*.parquet). A held-out document without text there keeps a
    null text, so run_evaluation counts it as a drop (missing_text) instead of losing it."""
    heldout_parquet, documents_dir = Path(heldout_parquet), Path(documents_dir)
    if not heldout_parquet.exists():
        raise FileNotFoundError(f"evaluate: {heldout_parquet} not found")
    shards = sorted(documents_dir.glob("*.parquet"))
    if not shards:
        raise FileNotFoundError(f"evaluate: no documents/*.parquet in {documents_dir}")
    con = duckdb.connect()
    files = "[" + ", ".join("'" + str(p).replace("'", "''") + "'" for p in shards) + "]"
    held = "'" + str(heldout_parquet).replace("'", "''") + "'"
    return con.sql(f"""
        SELECT h.doc_id, h.bucket, d.text
        FROM read_parquet({held}) h LEFT JOIN read_parquet({files}) d USING (doc_id)
        ORDER BY h.bucket, h.doc_id
    """).to_arrow_table()


def _heldout_by_bucket(heldout: pa.Table | Iterable[Mapping] | None, limit: int | None) -> tuple[dict, dict]:
    """({bucket: [{doc_id, bucket, text}] sorted by doc_id, at most `limit`}, {reason: dropped count})."""
    if heldout is None:
        return {}, {}
    rows = heldout.to_pylist() if isinstance(heldout, pa.Table) else list(heldout)
    buckets: dict[str, list[dict]] = {}
    drops = {"missing_text": 0, "empty_text": 0, "over_limit": 0}
    for r in sorted(rows, key=lambda r: (r["bucket"], r["doc_id"])):
        if r.get("text") is None:
            drops["missing_text"] += 1
        elif not r["text"].strip():
            drops["empty_text"] += 1
        elif limit is not None and len(buckets.get(r["bucket"], [])) >= limit:
            drops["over_limit"] += 1
        else:
            buckets.setdefault(r["bucket"], []).append({"doc_id": r["doc_id"], "bucket": r["bucket"],
                                                        "text": r["text"]})
    return buckets, drops


def suspect_items(suspects: str | Path | None) -> dict[str, set[str]]:
    """{benchmark: item_ids some document is a suspect of} from the backcheck stage's suspects table (a folder of
    Parquet files; None for none): the items the strict clean score leaves out besides the dirty ones."""
    if suspects is None:
        return {}
    path = Path(suspects)
    files = sorted(path.glob("*.parquet")) if path.is_dir() else []
    if not files:
        raise FileNotFoundError(f"evaluate: no suspects table in {path} (run the backcheck stage)")
    out: dict[str, set[str]] = {}
    for f in files:
        for r in pq.read_table(f, columns=["benchmark", "item_id"]).to_pylist():
            out.setdefault(r["benchmark"], set()).add(r["item_id"])
    return out


def _r(x: float | None) -> float | None:
    return None if x is None else round(float(x), ROUND)


def _choice_lls(sample: dict) -> list[float]:
    # filtered_resps: one (log-likelihood, is_greedy) per request of the document
    return [_r(resp[0]) for resp in sample["filtered_resps"]]


def _benchmark_rows(bench: Benchmark, samples: list[dict], dirty: set[str], suspect: set[str]) -> list[dict]:
    """One row per item: lm-eval's per-item acc / acc_norm and log-likelihoods, and from those the two
    continuous metrics lm-eval does not compute for multiple choice: prob_norm and bpb of the gold answer."""
    rows = []
    for s in sorted(samples, key=lambda s: s["doc_id"]):
        doc = s["doc"]
        row: dict[str, Any] = {"item_id": doc["item_id"], "dirty": doc["item_id"] in dirty,
                               "suspect": doc["item_id"] in suspect}
        if bench.kind == "loglikelihood":
            ll, greedy = s["filtered_resps"][0]
            row.update({"loglikelihood": _r(ll), "greedy": bool(greedy), "acc": float(s["acc"]),
                        "bpb": _r(-ll / (math.log(2) * answer_bytes(doc["continuation"])))})
        else:
            lls = [resp[0] for resp in s["filtered_resps"]]
            gold = int(doc["gold"])
            row.update({"gold": gold, "loglikelihoods": _choice_lls(s), "acc": float(s["acc"])})
            if "acc_norm" in s:
                row["acc_norm"] = float(s["acc_norm"])
            answers = doc["choices"] if bench.kind == "multiple_choice" else [doc["continuation"]] * len(lls)
            derived = item_scores(lls, gold, [len(a) for a in answers], [answer_bytes(a) for a in answers])
            row["prob_norm"], row["bpb"] = _r(derived["prob_norm"]), _r(derived["bpb"])
        rows.append(row)
    return rows


def _benchmark_result(bench: Benchmark, rows: list[dict], aggregated: Mapping, dirty_in_table: set[str]) -> dict:
    ids = {r["item_id"] for r in rows}
    dirty = {r["item_id"] for r in rows if r["dirty"]}
    suspect = {r["item_id"] for r in rows if r["suspect"]}
    metrics = {}
    for m in (m for m in METRICS if rows and m in rows[0]):  # evalset.py defines them
        values = {r["item_id"]: r[m] for r in rows}
        metrics[m] = split_score(values, dirty)
        strict = split_score(values, dirty | suspect)  # the suspects left out as well
        metrics[m].update({"clean_strict": strict["clean"], "clean_strict_stderr": strict["clean_stderr"]})
    out = {"format": bench.format, "kind": bench.kind, "items": len(rows), "dirty_items": len(dirty),
           "clean_items": len(rows) - len(dirty), "suspect_items": len(suspect - dirty),
           "clean_strict_items": len(rows) - len(dirty | suspect), "duplicate_records": bench.duplicates,
           # Dirty items of the table this run did not score (a limit, or an id the file no longer holds).
           "dirty_items_not_evaluated": len(dirty_in_table - ids), "metrics": metrics,
           "dropped": {reason: sorted(item_ids) for reason, item_ids in sorted(bench.dropped.items())}}
    # lm-eval's own aggregate over all items: the "all" column must equal it.
    out["lm_eval"] = {m: _r(aggregated[f"{m},none"]) for m in metrics if f"{m},none" in aggregated}
    if bench.kind == "loglikelihood":
        out["perplexity"] = _r(aggregated["perplexity,none"])
    return out


def _heldout_result(rows: list[dict], aggregated: Mapping) -> dict:
    ll = sum(r["loglikelihood"] for r in rows)
    words, nbytes = sum(r["words"] for r in rows), sum(r["bytes"] for r in rows)
    bits = [-r["loglikelihood"] / math.log(2) for r in rows]
    return {"documents": len(rows), "words": words, "bytes": nbytes, "loglikelihood": _r(ll),
            "word_perplexity": _r(aggregated["word_perplexity,none"]),
            "byte_perplexity": _r(aggregated["byte_perplexity,none"]),
            "bits_per_byte": _r(aggregated["bits_per_byte,none"]),
            "bits_per_byte_stderr": _r(ratio_stderr(bits, [r["bytes"] for r in rows]))}


def run_evaluation(model_dir: str | Path, benchmarks: list[dict], heldout: pa.Table | Iterable[Mapping] | None,
                   contamination: str | Path | pa.Table | Iterable[Mapping] | None, out_dir: str | Path, *,
                   suspects: str | Path | None = None, limit: int | None = None,
                   heldout_limit: int | None = None, batch_size: int = 16, device: str = "cpu",
                   dtype: str = "float32") -> dict:
    """Evaluate the Hugging Face checkpoint in model_dir; write out_dir; return {"results", "timing"}.

    benchmarks: the decontaminate stage's entries ({name, format, path[, optional]}); a missing optional one
    is listed as missing, a missing required one fails before anything runs. heldout: rows {doc_id, bucket,
    text} (heldout_documents() builds them). contamination: the decontaminate stage's table; suspects: the
    backcheck stage's (clean_strict leaves out their items too; None: clean_strict equals clean). limit: items
    per benchmark (the first of each file); heldout_limit: documents per bucket (the first by doc_id).
    """
    for key, value in OFFLINE.items():  # never a hub request, whatever the caller's environment says
        os.environ[key] = value
    model_dir, out_dir = Path(model_dir), Path(out_dir)
    config_file = model_dir / "config.json"
    if not config_file.exists():
        raise FileNotFoundError(f"evaluate: {config_file} not found (export the run first)")
    config = json.loads(config_file.read_text())
    eos_id, max_length = config["eos_token_id"], config["max_position_embeddings"]
    dirty, suspect = dirty_items(contamination), suspect_items(suspects)
    loaded = [(spec, load_benchmark(spec, limit)) for spec in benchmarks]  # every file checked before the model loads
    count_tokens = _token_counter(model_dir)
    for _, bench in loaded:
        if bench is not None and bench.kind is not None:
            drop_overlong(bench, count_tokens, max_length)
            if not bench.docs:
                raise BenchmarkError(f"evaluate: benchmark {bench.name!r}: every item's continuation is longer "
                                     f"than the model's context ({max_length} tokens)")
    buckets, drops = _heldout_by_bucket(heldout, heldout_limit)

    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="tokenmill-eval-") as tmp_root:
        tasks_dir = Path(tmp_root)
        taken: set[str] = set()
        heldout_tasks = {b: task_name("tm_heldout_", b, taken) for b in sorted(buckets)}
        for bucket, task in heldout_tasks.items():
            write_task(tasks_dir, task, "loglikelihood_rolling", buckets[bucket])
        bench_tasks = {}
        for spec, bench in loaded:
            if bench is not None and bench.kind is not None:
                bench_tasks[bench.name] = task_name("tm_bench_", bench.name, taken)
                write_task(tasks_dir, bench_tasks[bench.name], bench.kind, bench.docs)
        output, load_seconds, eval_seconds = _simple_evaluate(model_dir, tasks_dir, sorted(taken), eos_id,
                                                              batch_size, device, dtype)

    results: dict[str, Any] = {
        "settings": {"limit": limit, "heldout_limit": heldout_limit, "num_fewshot": 0, "dtype": dtype,
                     "prefix_token_id": eos_id, "lm_eval": _version("lm_eval"),
                     "transformers": _version("transformers")},
        "model": _model_summary(model_dir),
        "heldout": {"buckets": {}, "dropped": drops},
        "benchmarks": {},
    }
    logs: dict[str, list[dict]] = {}
    for bucket, task in heldout_tasks.items():
        rows = [{"doc_id": s["doc"]["doc_id"], "bucket": bucket, "loglikelihood": s["word_perplexity"][0],
                 "words": s["word_perplexity"][1], "bytes": s["byte_perplexity"][1]}
                for s in sorted(output["samples"][task], key=lambda s: s["doc_id"])]
        results["heldout"]["buckets"][bucket] = _heldout_result(rows, output["results"][task])
        logs[task] = [{**r, "loglikelihood": _r(r["loglikelihood"])} for r in rows]
    for spec, bench in loaded:
        name = spec["name"]
        if bench is None:
            results["benchmarks"][name] = {"format": spec["format"], "skipped": "missing (optional)",
                                           "path": str(spec["path"])}
            continue
        if bench.kind is None:
            results["benchmarks"][name] = {"format": bench.format, "skipped": bench.skipped}
            continue
        task = bench_tasks[name]
        rows = _benchmark_rows(bench, output["samples"][task], dirty.get(name, set()), suspect.get(name, set()))
        results["benchmarks"][name] = _benchmark_result(bench, rows, output["results"][task], dirty.get(name, set()))
        results["benchmarks"][name]["samples"] = f"samples/{task}.jsonl"  # the audit's eval_items read it
        logs[task] = rows
    results["samples"] = {t: f"samples/{t}.jsonl" for t in sorted(logs)}

    _write_outputs(out_dir, results, logs)
    items = sum(len(r) for r in logs.values())
    timing = {"seconds": round(time.perf_counter() - started, 3), "model_load_seconds": round(load_seconds, 3),
              "evaluate_seconds": round(eval_seconds, 3), "items": items,
              "items_per_second": round(items / eval_seconds, 3) if eval_seconds > 0 else None,
              "device": device, "batch_size": batch_size}
    return {"results": results, "timing": timing}


def _simple_evaluate(model_dir: Path, tasks_dir: Path, tasks: list[str], eos_id: int, batch_size: int,
                     device: str, dtype: str) -> tuple[dict, float, float]:
    # lm-eval's model class brings transformers and torch (1.2 s and more): only in the evaluate stage's run
    from lm_eval import simple_evaluate
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager

    t0 = time.perf_counter()
    lm = HFLM(pretrained=str(model_dir), device=device, batch_size=batch_size, dtype=dtype,
              prefix_token_id=eos_id, trust_remote_code=False)
    t1 = time.perf_counter()
    manager = TaskManager(include_path=str(tasks_dir), include_defaults=False)
    # bootstrap_iters=0: no resampling (seconds per task, and random); scores.py computes the stderrs.
    output = simple_evaluate(model=lm, tasks=tasks, task_manager=manager, log_samples=True, bootstrap_iters=0,
                             random_seed=0, numpy_random_seed=0, torch_random_seed=0, fewshot_random_seed=0,
                             verbosity="WARNING")
    missing = [t for t in tasks if t not in output["results"]]
    if missing:
        raise RuntimeError(f"evaluate: lm-eval returned no results for {missing}")
    return output, t1 - t0, time.perf_counter() - t1


def _token_counter(model_dir: Path):
    from transformers import AutoTokenizer  # as lm-eval: only in the evaluate stage's run

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    return lambda text: len(tok(text, add_special_tokens=False)["input_ids"])


def _model_summary(model_dir: Path) -> dict:
    export = model_dir / "export.json"
    if export.exists():
        e = json.loads(export.read_text())
        return {k: e.get(k) for k in ("architecture", "source", "step", "params", "vocab_size")}
    config = json.loads((model_dir / "config.json").read_text())
    return {"architecture": (config.get("architectures") or [None])[0]}


def _version(package: str) -> str:
    return version(package)


def _write_outputs(out_dir: Path, results: dict, logs: dict[str, list[dict]]) -> None:
    # Written in place: the stage's StageRun gives it a fresh temporary folder and swaps that in whole.
    (out_dir / "samples").mkdir(parents=True, exist_ok=True)
    (out_dir / "results.json").write_text(json.dumps(results, indent=2, sort_keys=True, allow_nan=False) + "\n")
    for task, rows in logs.items():
        with open(out_dir / "samples" / f"{task}.jsonl", "w", encoding="utf-8") as f:
            for row in rows:
                f.write(json.dumps(row, sort_keys=True, ensure_ascii=False) + "\n")

