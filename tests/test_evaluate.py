"""Evaluation with lm-eval on a tiny trained and exported model, on real benchmark files (../shared/data/eval)
and real held-out text: prompts as lm-eval's own tasks build them, held-out perplexity per bucket against a
direct computation, and scores that split into all and clean exactly along a contamination table made by the
real decontaminate code from a page that copies benchmark items.
"""

from __future__ import annotations

import json
import math
import re
import statistics
from pathlib import Path

import pyarrow as pa
import pytest
import torch

from tokenmill import schema
from tokenmill.decontam.params import Decontaminate
from tokenmill.decontam.readers import item_id, read_items
from tokenmill.decontam.stage import CONTAMINATION, DecontamProcessor
from tokenmill.evaluate import dirty_items
from tokenmill.evaluate.run import heldout_documents, run_evaluation
from tokenmill.evaluate.tasks import BenchmarkError, load_benchmark
from tokenmill.export import export_run
from train_helpers import PROJECT_ROOT, build_corpus, shared_text, tiny_run
from conftest import missing_shared_data  # skips, or fails under CI=true

SEQ = 128
LIMIT = 12


def shared_eval() -> Path:
    path = PROJECT_ROOT / ".." / "shared" / "data" / "eval"
    if not path.is_dir():
        missing_shared_data(str(path))
    return path.resolve()


def specs() -> list[dict]:
    e = shared_eval()
    return [
        {"name": "arc_easy", "format": "llm_foundry", "path": str(e / "llm_foundry" / "arc_easy.jsonl")},
        {"name": "hellaswag", "format": "hellaswag", "path": str(e / "hellaswag" / "hellaswag_val_subset.jsonl")},
        {"name": "winogrande", "format": "llm_foundry", "path": str(e / "llm_foundry" / "winogrande.jsonl")},
        {"name": "lambada", "format": "llm_foundry", "path": str(e / "llm_foundry" / "lambada_openai.jsonl")},
        {"name": "mmlu", "format": "mmlu_csv", "path": str(e / "mmlu" / "test" / "anatomy_test.csv")},
        {"name": "copa", "format": "llm_foundry", "path": str(e / "llm_foundry" / "copa.jsonl")},
        {"name": "gsm8k", "format": "gsm8k", "path": str(e / "gsm8k" / "test.jsonl")},
        {"name": "tokenmill_heldout", "format": "tokenmill", "path": "data/sample/eval/absent.jsonl", "optional": True},
    ]


# Items copied into a crawled page: (benchmark, position in its file), all within the first LIMIT items.
PLANTED = [("arc_easy", 2), ("hellaswag", 7), ("winogrande", 5), ("lambada", 1), ("mmlu", 3)]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    """A tiny Qwen3-layout model (QK-norm) trained 8 steps on real text, exported."""
    from tokenmill.train.loop import train

    root = build_corpus(tmp_path_factory.mktemp("eval_corpus"))
    train(tiny_run(max_steps=8, seq_len=SEQ, global_batch=2), root, root / "run", None)
    export_run(root / "run", root / "tokenizer" / "hf", root / "hf")
    return root / "hf"


def paragraphs(n: int, min_chars: int = 400) -> list[str]:
    text = (shared_text() / "wikitext-2" / "test.txt").read_text(encoding="utf-8")
    return [p.strip() for p in text.split("\n") if len(p.strip()) > min_chars][:n]


@pytest.fixture(scope="module")
def contamination(tmp_path_factory) -> tuple[Path, dict[str, set[str]]]:
    """The contamination table of the real decontaminate processor over a page that copies the PLANTED
    items (the reader's text: question and gold answer) between real paragraphs, and a clean page."""
    by_name = {s["name"]: s for s in specs()}
    planted: dict[str, set[str]] = {}
    copies = []
    for name, position in PLANTED:
        _, iid, text, _ = list(read_items(by_name[name]))[position]
        planted.setdefault(name, set()).add(iid)
        copies.append(text)
    prose = paragraphs(4)
    page = "\n\n".join([prose[0], *copies, prose[1]])
    docs = [{"doc_id": "page-copies", "text": page}, {"doc_id": "page-clean", "text": "\n\n".join(prose[2:])}]
    benches = [s for s in specs() if s["format"] != "tokenmill"]
    processor = DecontamProcessor(Decontaminate.resolve({"benchmarks": benches}))
    rows = []
    for doc, outcome in zip(docs, processor.batch(docs)):
        for overlap in (outcome.details or {}).get("overlaps", []):
            rows.append({"doc_id": doc["doc_id"], "action": outcome.action, **overlap})
    path = tmp_path_factory.mktemp("contamination") / "contamination.parquet"
    schema.write_parquet(rows, CONTAMINATION, path)
    return path, planted


@pytest.fixture(scope="module")
def heldout_rows() -> list[dict]:
    gutenberg = sorted((shared_text() / "gutenberg").rglob("*.txt*"))
    assert gutenberg, "no Gutenberg text"
    rows = [{"doc_id": f"wiki-{i}", "bucket": "reference", "text": p} for i, p in enumerate(paragraphs(3))]
    # A short document: one rolling window, so its log-likelihood can be recomputed by hand below.
    rows.append({"doc_id": "wiki-short", "bucket": "reference", "text": paragraphs(40, 150)[-1][:200]})
    book = _read(gutenberg[0]).replace("\r\n", "\n")  # Gutenberg files have CRLF line ends
    books = [p.strip() for p in book.split("\n\n") if len(p.strip()) > 300][10:13]
    assert len(books) == 3
    rows += [{"doc_id": f"book-{i}", "bucket": "web/high", "text": p} for i, p in enumerate(books)]
    rows += [{"doc_id": "blank", "bucket": "reference", "text": "  \n"},
             {"doc_id": "gone", "bucket": "web/high", "text": None}]
    return rows


def _read(path: Path) -> str:
    import gzip

    data = gzip.open(path).read() if path.suffix == ".gz" else path.read_bytes()
    return data.decode("utf-8", errors="replace")


@pytest.fixture(scope="module")
def eval_clocks() -> dict[str, tuple[float, float]]:
    """(start, end) on time.perf_counter of lm-eval's model load (HFLM) and evaluation (simple_evaluate) in the
    `evaluation` run, timed from outside tokenmill."""
    return {}


@pytest.fixture(scope="module")
def evaluation(model_dir, contamination, heldout_rows, tmp_path_factory, eval_clocks) -> tuple[dict, Path]:
    import time

    import lm_eval
    import lm_eval.models.huggingface as hf

    def timed(name, fn):
        def call(*args, **kwargs):
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                eval_clocks[name] = (start, time.perf_counter())
        return call

    out = tmp_path_factory.mktemp("eval") / "evaluate"
    with pytest.MonkeyPatch.context() as mp:  # run_evaluation imports both from their modules when it runs
        mp.setattr(hf, "HFLM", timed("load", hf.HFLM))
        mp.setattr(lm_eval, "simple_evaluate", timed("evaluate", lm_eval.simple_evaluate))
        result = run_evaluation(model_dir, specs(), heldout_rows, contamination[0], out, limit=LIMIT, batch_size=8)
    return result, out


def _samples(out: Path, results: dict, name: str) -> list[dict]:
    task = f"tm_bench_{name}"
    assert results["samples"][task] == f"samples/{task}.jsonl"
    return [json.loads(line) for line in (out / "samples" / f"{task}.jsonl").read_text().splitlines()]


def test_clean_and_all_scores_split_exactly_along_the_contamination_table(evaluation, contamination):
    result, out = evaluation
    results = result["results"]
    table_dirty = dirty_items(contamination[0])
    planted = contamination[1]
    # The real decontaminate code found every copied item. It may name more: HellaSwag items sharing the
    # copied item's context are contaminated by its prompt alone.
    assert set(table_dirty) == set(planted) and all(planted[b] <= table_dirty[b] for b in planted)
    for name in ("arc_easy", "hellaswag", "winogrande", "lambada", "mmlu", "copa"):
        bench, samples = results["benchmarks"][name], _samples(out, results, name)
        ids = [s["item_id"] for s in samples]
        assert len(ids) == len(set(ids)) == bench["items"]
        assert planted.get(name, set()) <= set(ids), f"{name}: a planted item was not scored"
        dirty = table_dirty.get(name, set()) & set(ids)
        assert bench["dirty_items_not_evaluated"] == len(table_dirty.get(name, set()) - set(ids))
        assert {s["item_id"] for s in samples if s["dirty"]} == dirty
        assert bench["dirty_items"] == len(dirty) and bench["clean_items"] == len(ids) - len(dirty)
        for metric, score in bench["metrics"].items():
            values = [s[metric] for s in samples]
            clean = [s[metric] for s in samples if s["item_id"] not in dirty]
            assert score["all"] == pytest.approx(sum(values) / len(values), abs=1e-6)
            if metric in ("acc", "acc_norm"):  # lm-eval's own aggregate (prob_norm and bpb are not lm-eval's)
                assert score["all"] == pytest.approx(bench["lm_eval"][metric], abs=1e-6)
            assert score["clean"] == pytest.approx(sum(clean) / len(clean), abs=1e-6)
            assert score["difference"] == pytest.approx(score["all"] - score["clean"], abs=2e-6)
            if dirty:
                n, nd, nc = len(values), len(dirty), len(clean)
                # all - clean is a weighted sum of the items' scores: 1/n on a dirty item, 1/n - 1/nc on a
                # clean one. With the items independent and of one variance, estimated by the sample variance
                # of all n, its standard error is that deviation times the weights' Euclidean norm.
                weights = [1 / n if x["item_id"] in dirty else 1 / n - 1 / nc for x in samples]
                expected = statistics.stdev(values) * math.hypot(*weights)
                assert score["difference_stderr"] == pytest.approx(expected, abs=1e-6)
                assert score["dirty"] == pytest.approx(
                    sum(x[metric] for x in samples if x["item_id"] in dirty) / nd, abs=1e-6)
            else:
                assert score["difference"] == 0.0 and score["dirty"] is None
    assert results["benchmarks"]["copa"]["dirty_items"] == 0


def test_per_item_logs_agree_with_their_loglikelihoods(evaluation):
    result, out = evaluation
    results = result["results"]
    for name in ("arc_easy", "hellaswag", "mmlu", "copa", "winogrande"):
        docs = {d["item_id"]: d for d in load_benchmark(next(s for s in specs() if s["name"] == name), LIMIT).docs}
        for s in _samples(out, results, name):
            lls = s["loglikelihoods"]
            assert s["gold"] == docs[s["item_id"]]["gold"]
            assert s["acc"] == float(max(range(len(lls)), key=lls.__getitem__) == s["gold"])
            if "acc_norm" in s:  # lm-eval normalises by the characters of the choice
                norm = [ll / len(c) for ll, c in zip(lls, docs[s["item_id"]]["choices"])]
                assert s["acc_norm"] == float(max(range(len(norm)), key=norm.__getitem__) == s["gold"])
            # The gold choice's share of the choices' probability mass, and its bits per UTF-8 byte as scored
            # (after lm-eval's " " delimiter): from the log-likelihoods lm-eval logged.
            assert s["prob_norm"] == pytest.approx(math.exp(lls[s["gold"]]) / sum(math.exp(x) for x in lls), abs=1e-6)
            answer = (docs[s["item_id"]]["choices"][s["gold"]] if name != "winogrande"
                      else docs[s["item_id"]]["continuation"])
            assert s["bpb"] == pytest.approx(-lls[s["gold"]] / math.log(2) / len((" " + answer).encode()), abs=1e-5)


def test_prompts_are_lm_evals(model_dir, evaluation):
    """ARC's gold log-likelihood in the logs equals the model's own on "Question: ...\\nAnswer: <choice>";
    HellaSwag documents equal lm-eval's built-in hellaswag preprocessing; MMLU's lm-eval's template."""
    import datasets
    from lm_eval.tasks.hellaswag.utils import process_docs
    from transformers import AutoModelForCausalLM, AutoTokenizer

    result, out = evaluation
    first = json.loads((shared_eval() / "llm_foundry" / "arc_easy.jsonl").read_text().splitlines()[0])
    sample = _samples(out, result["results"], "arc_easy")[0]
    assert sample["item_id"] == item_id("arc_easy", first)
    tok = AutoTokenizer.from_pretrained(str(model_dir))
    model = AutoModelForCausalLM.from_pretrained(str(model_dir)).eval()
    context = first["query"] + "\nAnswer:"
    whole = tok(context + " " + first["choices"][first["gold"]])["input_ids"]
    n_ctx = len(tok(context)["input_ids"])
    with torch.no_grad():
        logp = torch.log_softmax(model(torch.tensor([whole])).logits.float(), -1)[0]
    expected = sum(float(logp[i - 1, whole[i]]) for i in range(n_ctx, len(whole)))
    assert sample["loglikelihoods"][first["gold"]] == pytest.approx(expected, abs=1e-3)

    hs_spec = next(s for s in specs() if s["name"] == "hellaswag")
    records = [json.loads(line) for line in Path(hs_spec["path"]).read_text().splitlines()[:5]]
    theirs = process_docs(datasets.Dataset.from_list(records))
    ours = load_benchmark(hs_spec, 5).docs
    assert [(d["query"], d["choices"], d["gold"]) for d in ours] == [(t["query"], t["choices"], t["gold"]) for t in theirs]

    mmlu = load_benchmark(next(s for s in specs() if s["name"] == "mmlu"), 1).docs[0]
    import csv

    with open(shared_eval() / "mmlu" / "test" / "anatomy_test.csv", encoding="utf-8", newline="") as f:
        row = list(csv.reader(f))[1]
    assert mmlu["query"] == ("The following are multiple choice questions (with answers) about anatomy.\n\n"
                             f"{row[0].strip()}\nA. {row[1]}\nB. {row[2]}\nC. {row[3]}\nD. {row[4]}\nAnswer:")
    assert mmlu["choices"] == ["A", "B", "C", "D"] and mmlu["gold"] == int(row[5])


def test_heldout_perplexity_per_bucket(model_dir, evaluation, heldout_rows):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    result, out = evaluation
    held = result["results"]["heldout"]
    assert held["dropped"] == {"missing_text": 1, "empty_text": 1, "over_limit": 0}
    for bucket, task in (("reference", "tm_heldout_reference"), ("web/high", "tm_heldout_web_high")):
        texts = [r["text"] for r in heldout_rows if r["bucket"] == bucket and r["text"] and r["text"].strip()]
        b = held["buckets"][bucket]
        assert b["documents"] == len(texts)
        assert b["bytes"] == sum(len(t.encode("utf-8")) for t in texts)
        assert b["words"] == sum(len(re.split(r"\s+", t)) for t in texts)
        assert b["bits_per_byte"] == pytest.approx(-b["loglikelihood"] / (b["bytes"] * math.log(2)), rel=1e-5)
        assert b["word_perplexity"] == pytest.approx(math.exp(-b["loglikelihood"] / b["words"]), rel=1e-5)
        assert len((out / "samples" / f"{task}.jsonl").read_text().splitlines()) == len(texts)
    # The short document, by hand: end-of-text, then its tokens, each scored given everything before it.
    short = next(r for r in heldout_rows if r["doc_id"] == "wiki-short")["text"]
    tok = AutoTokenizer.from_pretrained(str(model_dir))
    ids = [tok.eos_token_id] + tok(short)["input_ids"]
    assert len(ids) <= SEQ + 1
    model = AutoModelForCausalLM.from_pretrained(str(model_dir)).eval()
    with torch.no_grad():
        logp = torch.log_softmax(model(torch.tensor([ids[:-1]])).logits.float(), -1)[0]
    expected = sum(float(logp[i, ids[i + 1]]) for i in range(len(ids) - 1))
    logged = [json.loads(line) for line in (out / "samples" / "tm_heldout_reference.jsonl").read_text().splitlines()]
    assert next(r for r in logged if r["doc_id"] == "wiki-short")["loglikelihood"] == pytest.approx(expected, abs=1e-3)


def test_skipped_and_missing_benchmarks_are_reported(evaluation, eval_clocks):
    result, out = evaluation
    b = result["results"]["benchmarks"]
    assert b["gsm8k"]["skipped"].startswith("generation benchmark")
    assert b["tokenmill_heldout"]["skipped"] == "missing (optional)"
    assert set(b) == {s["name"] for s in specs()}
    # Throughput: the items scored (one sample line each: benchmark items and held-out documents) over the
    # evaluation's time, which the clocks around lm-eval bound: at least simple_evaluate's own time, at most
    # the time from the model loaded to the end (the task index is built in between; measured 2.482 s and
    # 2.485 s, the model load 1.33 s). 0.05 s of slack for the scheduler: counting the model load or the
    # reading of the benchmark files in would still fall outside.
    timing = result["timing"]
    items = sum(len(p.read_text().splitlines()) for p in (out / "samples").glob("*.jsonl"))
    assert timing["items"] == items == sum(x["items"] for x in b.values() if "items" in x) + sum(
        h["documents"] for h in result["results"]["heldout"]["buckets"].values())
    (load_start, load_end), (eval_start, eval_end) = eval_clocks["load"], eval_clocks["evaluate"]
    assert load_end <= eval_start
    assert timing["model_load_seconds"] == pytest.approx(load_end - load_start, abs=0.05)
    low, high = eval_end - eval_start - 0.05, eval_end - load_end + 0.05
    assert low <= timing["evaluate_seconds"] <= high, (timing, eval_clocks)
    assert items / high <= timing["items_per_second"] <= items / low, (timing, eval_clocks)
    text = json.dumps(result["results"])
    assert "seconds" not in text and "per_second" not in text  # timings are returned, not written


def test_results_are_deterministic(model_dir, heldout_rows, contamination, tmp_path):
    spec = [s for s in specs() if s["name"] in ("copa", "winogrande")]
    outs = []
    for k in range(2):
        run_evaluation(model_dir, spec, heldout_rows[:2], contamination[0], tmp_path / f"e{k}", limit=4)
        outs.append({p.relative_to(tmp_path / f"e{k}"): p.read_bytes() for p in sorted((tmp_path / f"e{k}").rglob("*"))
                     if p.is_file()})
    assert outs[0] == outs[1] and len(outs[0]) == 4  # results.json and three sample logs
    assert not list(tmp_path.glob(".tmp-*"))


def test_bad_inputs_fail_in_one_line_or_are_recorded(model_dir, tmp_path):
    with pytest.raises(FileNotFoundError, match="benchmark 'arc'"):
        run_evaluation(model_dir, [{"name": "arc", "format": "llm_foundry", "path": str(tmp_path / "no.jsonl")}],
                       None, None, tmp_path / "out")
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"id": "x1", "context": "A cat", "choices": ["sat", "ran"], "gold": 7}) + "\n")
    with pytest.raises(BenchmarkError, match="item x1: gold 7 outside its 2 choices"):
        run_evaluation(model_dir, [{"name": "t", "format": "tokenmill", "path": str(bad)}], None, None, tmp_path / "out")
    assert not (tmp_path / "out").exists()
    # An item whose answer cannot fit the model's context is a recorded drop, not a crash of the run.
    long = tmp_path / "long.jsonl"
    long.write_text(json.dumps({"id": "ok", "context": "The sky is", "choices": ["blue", "green"], "gold": 0}) + "\n"
                    + json.dumps({"id": "huge", "context": "Then", "choices": [" ".join(paragraphs(2)), "no"],
                                  "gold": 1}) + "\n")
    result = run_evaluation(model_dir, [{"name": "t", "format": "tokenmill", "path": str(long)}], None, None,
                            tmp_path / "out")
    bench = result["results"]["benchmarks"]["t"]
    assert bench["items"] == 1 and bench["dropped"] == {"continuation_longer_than_context": ["huge"]}


def test_heldout_documents_join_text_and_keep_the_missing(tmp_path):
    held = pa.table({"doc_id": ["a", "b", "c"], "bucket": ["web", "web", "code"], "shard": ["s"] * 3,
                     "offset": [0, 5, 9], "length": [5, 4, 3]})
    schema.write_parquet(held, held.schema, tmp_path / "heldout.parquet")
    docs = pa.table({"doc_id": ["a", "c", "z"], "text": ["alpha text", "gamma()", "not held out"]})
    schema.write_parquet(docs, docs.schema, tmp_path / "documents" / "00000.parquet")
    rows = heldout_documents(tmp_path / "heldout.parquet", tmp_path / "documents").to_pylist()
    assert rows == [{"doc_id": "c", "bucket": "code", "text": "gamma()"},
                    {"doc_id": "a", "bucket": "web", "text": "alpha text"},
                    {"doc_id": "b", "bucket": "web", "text": None}]


def test_only_contaminating_rows_make_items_dirty():
    rows = [{"benchmark": "arc", "item_id": "1", "contaminated": True},
            {"benchmark": "arc", "item_id": "2", "contaminated": False},  # a near miss
            {"benchmark": "mmlu", "item_id": "1", "contaminated": True}]
    assert dirty_items(rows) == {"arc": {"1"}, "mmlu": {"1"}}
    assert dirty_items(pa.Table.from_pylist(rows)) == {"arc": {"1"}, "mmlu": {"1"}}


def test_difference_stderr_by_hand_and_by_simulation():
    """split_score's difference (all - clean) and its standard error, against a case worked by hand and
    against the spread of the difference over many simulated benchmarks."""
    import numpy as np

    from tokenmill.evaluate.scores import split_score

    # By hand: scores 1, 0, 1, 0 with item a dirty. all = 1/2, clean = 1/3, difference 1/6. The sample
    # variance of all four is (4 x 1/4) / 3 = 1/3; all - clean = a/4 + (b + c + d)(1/4 - 1/3) has variance
    # 1/3 x (1/16 + 3/144) = 1/36: a standard error of 1/6.
    score = split_score({"a": 1.0, "b": 0.0, "c": 1.0, "d": 0.0}, {"a"})
    # (split_score rounds to 6 decimals)
    assert score["all"] == 0.5 and score["clean"] == pytest.approx(1 / 3, abs=1e-6) and score["dirty"] == 1.0
    assert score["difference"] == pytest.approx(1 / 6, abs=1e-6)
    assert score["difference_stderr"] == pytest.approx(1 / 6, abs=1e-6)
    assert split_score({"a": 1.0, "b": 0.0}, set())["difference_stderr"] == 0.0

    # By simulation: 4000 benchmarks of 40 items, 6 of them dirty, accuracy 0.3 on every item (no real lift).
    # The difference's spread over the draws is its true standard error, sqrt(p(1 - p) x 6 / (40 x 34)) =
    # 0.0304; the reported one, estimated from each draw's own items, must average to it (within 3%: the
    # spread of 4000 draws is known to about 1.1%).
    rng = np.random.default_rng(17)
    draws = rng.random((4000, 40)) < 0.3
    ids = [f"i{k}" for k in range(40)]
    scores = [split_score(dict(zip(ids, map(float, row))), set(ids[:6])) for row in draws]
    spread = float(np.std([sc["difference"] for sc in scores], ddof=1))
    assert spread == pytest.approx(math.sqrt(0.3 * 0.7 * 6 / (40 * 34)), rel=0.03)
    assert float(np.mean([sc["difference_stderr"] for sc in scores])) == pytest.approx(spread, rel=0.03)


# ---------------------------------------------------------------------------------------------------------
# Standard errors on numbers worked out by hand (issue 40): every stderr evaluate reports, each against a
# value derived here by another route than the code's (a binomial proportion's closed form, the delta method
# by hand, the spread over simulated evaluations), so a wrong convention (n for n - 1), a missing square root,
# a variance for a standard error or all items for the clean ones fails.


def test_mean_stderr_on_all_and_clean_items_by_hand():
    from tokenmill.evaluate.scores import split_score

    # Accuracy 1, 0, 1, 0, 1 with item a dirty. A 0/1 score's sample variance (n - 1) is n p (1 - p) / (n - 1),
    # so the documented stderr s / sqrt(n) is sqrt(p (1 - p) / (n - 1)):
    #   all   p = 3/5 over 5 items: sqrt(0.24 / 4) = sqrt(0.06)   = 0.244949
    #   clean p = 1/2 over 4 items: sqrt(0.25 / 3) = sqrt(1/12)   = 0.288675
    # (with n for n - 1 they would be 0.219089 and 0.25; all items for clean would repeat 0.244949.)
    score = split_score({"a": 1.0, "b": 0.0, "c": 1.0, "d": 0.0, "e": 1.0}, {"a"})
    assert score["all"] == pytest.approx(0.6) and score["clean"] == pytest.approx(0.5)
    assert score["all_stderr"] == pytest.approx(math.sqrt(0.06), abs=1e-6)
    assert score["clean_stderr"] == pytest.approx(math.sqrt(1 / 12), abs=1e-6)
    # A continuous score: 0.2, 0.4, 0.9 (mean 0.5, squared deviations 0.09 + 0.01 + 0.16 = 0.26, sample
    # variance 0.13): stderr sqrt(0.13 / 3) = 0.208167. Dirty 0.9 leaves 0.2, 0.4: sd 0.141421, se 0.1.
    score = split_score({"x": 0.2, "y": 0.4, "z": 0.9}, {"z"})
    assert score["all_stderr"] == pytest.approx(0.208167, abs=1e-6)
    assert score["clean_stderr"] == pytest.approx(0.1, abs=1e-6)
    # One item has no spread: no stderr rather than 0 (and no clean items at all: none either).
    single = split_score({"x": 0.7, "y": 0.1}, {"x"})
    assert single["clean_stderr"] is None and single["all_stderr"] == pytest.approx(0.3, abs=1e-6)
    assert split_score({"x": 0.7}, {"x"})["clean_stderr"] is None


def test_mean_stderr_matches_the_spread_over_simulated_benchmarks():
    """The reported all_stderr of a 30-item accuracy averages (as its square) the true variance of the mean
    over 4000 simulated benchmarks: p (1 - p) / n = 0.007 (se 0.0837). With n for n - 1 it would be 3.4% low."""
    import numpy as np

    from tokenmill.evaluate.scores import split_score

    rng = np.random.default_rng(5)
    draws = (rng.random((4000, 30)) < 0.3).astype(float)
    ids = [f"i{k}" for k in range(30)]
    scores = [split_score(dict(zip(ids, row)), set(ids[:5])) for row in draws]
    # s^2 / n is unbiased for the variance of the mean: its average over the draws is p (1 - p) / n.
    assert float(np.mean([s["all_stderr"] ** 2 for s in scores])) == pytest.approx(0.3 * 0.7 / 30, rel=0.015)
    # Clean items: 25 of them, variance of their mean p (1 - p) / 25.
    assert float(np.mean([s["clean_stderr"] ** 2 for s in scores])) == pytest.approx(0.3 * 0.7 / 25, rel=0.015)


def _write_requests(path: Path, items: list[dict]) -> list[float]:
    """An in-loop evaluation set (evalset.REQUESTS) of hand-made items; returns their log-likelihoods in
    request order. Each item: benchmark, item_id, dirty, gold, probabilities of its choices, chars, bytes."""
    from tokenmill.evaluate.evalset import REQUESTS

    rows, lls = [], []
    for it in items:
        for i, p in enumerate(it["p"]):
            rows.append({"benchmark": it["bench"], "item_id": it["id"], "dirty": it["dirty"], "gold": it["gold"],
                         "choice": i, "choices": len(it["p"]), "answer_chars": it["chars"][i],
                         "answer_bytes": it["bytes"][i], "context": [1, 2], "continuation": [3]})
            lls.append(math.log(p))
    schema.write_parquet(rows, REQUESTS, path)
    return lls


def test_inloop_scores_stderr_of_every_metric_by_hand(tmp_path):
    """EvalSet.scores on four items whose acc, acc_norm, prob_norm and bpb are worked out by hand below, item
    i1 dirty: each metric's stderr on all and on clean items against the sample sd / sqrt(n) of those values."""
    from tokenmill.evaluate.evalset import EvalSet

    items = [
        # gold choice 0, p 0.5 vs 0.25: acc 1; per char ln .5 / 1 < ln .25 / 8: acc_norm 0;
        # prob_norm 0.5 / 0.75 = 2/3; bpb 1 bit / 2 bytes = 0.5
        {"bench": "arc", "id": "i1", "dirty": True, "gold": 0, "p": [0.5, 0.25], "chars": [1, 8], "bytes": [2, 9]},
        # gold 1 (p 0.25 < 0.5): acc 0, acc_norm 0; prob_norm 1/3; bpb 2 bits / 2 bytes = 1.0
        {"bench": "arc", "id": "i2", "dirty": False, "gold": 1, "p": [0.5, 0.25], "chars": [4, 4], "bytes": [5, 2]},
        # gold 1 (0.5 > 0.125): acc 1, acc_norm 1; prob_norm 0.5 / 0.625 = 0.8; bpb 1 bit / 4 bytes = 0.25
        {"bench": "arc", "id": "i3", "dirty": False, "gold": 1, "p": [0.125, 0.5], "chars": [2, 2], "bytes": [3, 4]},
        # gold 0 (0.25 < 0.5): acc 0; per char ln .25 / 16 > ln .5 / 1: acc_norm 1; prob_norm 1/3; bpb 2 / 1 = 2.0
        {"bench": "arc", "id": "i4", "dirty": False, "gold": 0, "p": [0.25, 0.5], "chars": [16, 1], "bytes": [1, 7]},
    ]
    lls = _write_requests(tmp_path / "requests.parquet", items)
    scores = EvalSet(tmp_path / "requests.parquet", seq_len=8).scores(lls)["arc"]
    by_hand = {"acc": [1, 0, 1, 0], "acc_norm": [0, 0, 1, 1], "prob_norm": [2 / 3, 1 / 3, 0.8, 1 / 3],
               "bpb": [0.5, 1.0, 0.25, 2.0]}
    for metric, values in by_hand.items():
        clean = values[1:]
        s = scores[metric]
        assert s["all"] == pytest.approx(statistics.mean(values), abs=1e-6), metric
        assert s["all_stderr"] == pytest.approx(statistics.stdev(values) / 2, abs=1e-6), metric
        assert s["clean"] == pytest.approx(statistics.mean(clean), abs=1e-6), metric
        assert s["clean_stderr"] == pytest.approx(statistics.stdev(clean) / math.sqrt(3), abs=1e-6), metric
    # acc by the binomial closed form: all p = 1/2 of 4: sqrt(0.25 / 3); clean p = 1/3 of 3: sqrt((2/9) / 2) = 1/3.
    assert scores["acc"]["all_stderr"] == pytest.approx(math.sqrt(1 / 12), abs=1e-6)
    assert scores["acc"]["clean_stderr"] == pytest.approx(1 / 3, abs=1e-6)


def test_macro_average_stderr_over_benchmarks_by_hand():
    """The mean over k independent benchmarks has variance sum(se^2) / k^2: se 0.3 and 0.4 give 0.25 (not
    their mean 0.35, nor 0.5 / sqrt 2); the clean column uses the clean stderrs (0.06, 0.08: 0.05)."""
    from tokenmill.evaluate.evalset import benchmark_means, macro_average

    scores = {"arc": {"acc": {"all": 0.2, "all_stderr": 0.3, "clean": 0.1, "clean_stderr": 0.06}},
              "copa": {"acc": {"all": 0.6, "all_stderr": 0.4, "clean": 0.5, "clean_stderr": 0.08}}}
    assert macro_average(scores, "acc") == pytest.approx((0.4, 0.25))
    assert macro_average(scores, "acc", "clean") == pytest.approx((0.3, 0.05))
    means = benchmark_means(scores)
    assert means["acc_stderr"] == pytest.approx(0.25) and means["acc_clean_stderr"] == pytest.approx(0.05)


def test_heldout_bits_per_byte_stderr_by_the_delta_method_by_hand():
    """Bits per byte of a held-out set is sum(bits) / sum(bytes), a ratio estimator. By hand for documents of
    (bits, bytes) (10, 10), (30, 20), (20, 10): r = 60 / 40 = 1.5; residuals bits - r bytes: -5, 0, 5; their
    sample variance 50 / 2 = 25; Var(r) ~ 25 / (n mean_bytes^2) = 25 / (3 x (40/3)^2): se = sqrt(3) / 8."""
    from tokenmill.evaluate.run import _heldout_result
    from tokenmill.evaluate.scores import ratio_stderr

    assert ratio_stderr([10, 30, 20], [10, 20, 10]) == pytest.approx(math.sqrt(3) / 8)
    # Through the held-out result, from the logged natural-log likelihoods (bits = -ll / ln 2).
    rows = [{"loglikelihood": -bits * math.log(2), "words": 1, "bytes": nbytes} for bits, nbytes in
            ((10, 10), (30, 20), (20, 10))]
    aggregated = {"word_perplexity,none": 1.0, "byte_perplexity,none": 1.0, "bits_per_byte,none": 1.5}
    assert _heldout_result(rows, aggregated)["bits_per_byte_stderr"] == pytest.approx(math.sqrt(3) / 8, abs=1e-6)
    assert ratio_stderr([10], [10]) is None


def test_heldout_bits_per_byte_stderr_matches_the_spread_over_simulated_sets():
    """Over 3000 simulated held-out sets of 60 documents of uneven length, the spread of sum(bits) / sum(bytes)
    is its true standard error; the reported one must average to it (within 4%: the spread of 3000 draws is
    known to about 1.3%). A per-document mean of ratios, or bytes summed instead of averaged, would be far off."""
    import numpy as np

    from tokenmill.evaluate.scores import ratio_stderr

    rng = np.random.default_rng(11)
    nbytes = rng.integers(200, 5000, size=(3000, 60)).astype(float)
    bits = nbytes * rng.normal(1.2, 0.3, size=(3000, 60))  # a per-document bits per byte around 1.2
    ratios = bits.sum(1) / nbytes.sum(1)
    spread = float(np.std(ratios, ddof=1))
    reported = [ratio_stderr(list(b), list(n)) for b, n in zip(bits, nbytes)]
    assert float(np.mean(reported)) == pytest.approx(spread, rel=0.04)


def test_benchmark_result_stderr_on_all_and_clean_items_by_hand():
    """run.py's per-benchmark metrics from lm-eval's samples: acc as lm-eval scored it, prob_norm and bpb from
    the logged log-likelihoods, each with its stderr on all and on clean items (item q1 dirty)."""
    from tokenmill.evaluate.run import _benchmark_result, _benchmark_rows
    from tokenmill.evaluate.tasks import Benchmark

    bench = Benchmark(name="arc", format="tokenmill", kind="multiple_choice")
    # Choices "a" and "bb": scored " a" (2 bytes) and " bb" (3 bytes).
    samples = [{"doc_id": k, "doc": {"item_id": iid, "gold": gold, "choices": ["a", "bb"]},
                "filtered_resps": [(math.log(p0), False), (math.log(p1), False)], "acc": acc, "acc_norm": acc}
               for k, (iid, gold, p0, p1, acc) in enumerate([("q1", 0, 0.75, 0.25, 1.0), ("q2", 1, 0.75, 0.25, 0.0),
                                                             ("q3", 0, 0.5, 0.5, 1.0), ("q4", 1, 0.125, 0.875, 1.0),
                                                             ("q5", 0, 0.25, 0.75, 0.0)])]
    rows = _benchmark_rows(bench, samples, {"q1"}, {"q1", "q3"})  # q3 a suspect of the embedding back-check
    result = _benchmark_result(bench, rows, {}, {"q1"})
    m = result["metrics"]
    assert (result["dirty_items"], result["suspect_items"], result["clean_strict_items"]) == (1, 1, 3)
    # clean_strict leaves out q1 (dirty) and q3 (suspect): acc 0, 1, 0, mean 1/3, sample variance 1/3, se 1/3.
    assert m["acc"]["clean_strict"] == pytest.approx(1 / 3, abs=1e-6)
    assert m["acc"]["clean_strict_stderr"] == pytest.approx(1 / 3, abs=1e-6)
    assert m["acc"]["clean"] == pytest.approx(0.5, abs=1e-6)  # clean keeps the suspect
    # acc 1, 0, 1, 1, 0: all p = 3/5 of 5: sqrt(0.24 / 4); clean 0, 1, 1, 0: p = 1/2 of 4: sqrt(0.25 / 3).
    assert m["acc"]["all_stderr"] == pytest.approx(math.sqrt(0.06), abs=1e-6)
    assert m["acc"]["clean_stderr"] == pytest.approx(math.sqrt(1 / 12), abs=1e-6)
    # prob_norm 0.75, 0.25, 0.5, 0.875, 0.25: mean 0.525; squared deviations 0.050625, 0.075625, 0.000625,
    # 0.1225, 0.075625 sum to 0.325: sample variance 0.08125, se sqrt(0.08125 / 5) = 0.127475.
    assert m["prob_norm"]["all_stderr"] == pytest.approx(math.sqrt(0.08125 / 5), abs=1e-6)
    # clean 0.25, 0.5, 0.875, 0.25: mean 0.46875; squared deviations 0.0478515625 (twice), 0.0009765625 and
    # 0.1650390625 sum to 0.26171875: se sqrt(0.26171875 / 3 / 4) = 0.147682.
    assert m["prob_norm"]["clean_stderr"] == pytest.approx(math.sqrt(0.26171875 / 12), abs=1e-6)
    # bpb: q2 gold "bb" at p 1/4 is 2 bits over 3 bytes; q5 gold "a" at 1/4, 2 bits over 2 bytes.
    bpb = [-math.log2(0.75) / 2, 2 / 3, 1 / 2, -math.log2(0.875) / 3, 1.0]
    assert m["bpb"]["all_stderr"] == pytest.approx(statistics.stdev(bpb) / math.sqrt(5), abs=1e-6)
    assert m["bpb"]["clean_stderr"] == pytest.approx(statistics.stdev(bpb[1:]) / 2, abs=1e-6)


def test_stage_metrics_carry_each_stderr_beside_its_own_figure():
    """stages/evaluate.py's metrics (what `dvc exp show` compares): each figure beside its own stderr, the clean
    one beside the clean stderr, the held-out bits per byte beside theirs, the mean over benchmarks by hand."""
    from stages.evaluate import summary_metrics

    def split(all_, se, clean, clean_se, strict=None, strict_se=None):
        return {"all": all_, "all_stderr": se, "clean": clean, "clean_stderr": clean_se,
                "clean_strict": clean if strict is None else strict,
                "clean_strict_stderr": clean_se if strict_se is None else strict_se}

    results = {"heldout": {"buckets": {"code": {"bits_per_byte": 1.5, "bits_per_byte_stderr": 0.216506}}},
               "benchmarks": {"arc": {"items": 5, "dirty_items": 1, "suspect_items": 1,
                                      "metrics": {"acc": split(0.6, 0.244949, 0.5, 0.288675, 1 / 3, 1 / 3)}},
                              "copa": {"items": 4, "dirty_items": 0, "suspect_items": 0,
                                       "metrics": {"acc": split(0.5, 0.288675, 0.5, 0.288675)}},
                              "gsm8k": {"skipped": "generation benchmark"}}}
    out = summary_metrics(results)
    assert out["bits_per_byte"] == {"code": 1.5} and out["bits_per_byte_stderr"] == {"code": 0.216506}
    assert out["arc"] == {"items": 5, "dirty_items": 1, "suspect_items": 1, "acc": 0.6, "acc_stderr": 0.244949,
                          "acc_clean": 0.5, "acc_clean_stderr": 0.288675, "acc_clean_strict": 1 / 3,
                          "acc_clean_strict_stderr": 1 / 3}
    # Mean over the two benchmarks: sqrt(0.244949^2 + 0.288675^2) / 2 = sqrt(0.06 + 1/12) / 2 = 0.189297.
    assert out["benchmarks_mean"]["acc_stderr"] == pytest.approx(math.sqrt(0.06 + 1 / 12) / 2, abs=1e-6)
    assert out["benchmarks_mean"]["acc_clean_stderr"] == pytest.approx(math.sqrt(2 / 12) / 2, abs=1e-6)
