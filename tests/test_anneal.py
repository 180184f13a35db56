"""The annealing test (tokenmill.anneal, the `anneal` stage) on the tiny run's real build (tests/tiny_run.py).

The build's anneal stage ran under dvc with the sample preset's test (the reference text, bucket `reference`, at 0.5
of the anneal). The tiny run's plan overshoots its budget (a few long documents), so its full run decays over its
last fifth, before the plan's anneal phase: the branch is where the decay begins, not a phase boundary. The checks:
each arm's plan is the full run's up to the branch and then its own decay phase, with the share asked for; the arms
resumed from the full run's own checkpoint (their steps before the branch are the full run's, record for record)
and decay from there over their own windows; the lineage maps each arm's steps from the branch on to its own plan;
a changed share retrains only the `with` arm.
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import tiny_run
from tokenmill import lineage
from tokenmill.anneal import AnnealError, arm_phases, read_results, source_buckets
from tokenmill.anneal.stage import branch_point, run_anneals
from tokenmill.mixture import Phase
from tokenmill.params import problems
from tokenmill.runtime import load_params


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return tiny_run.build(tmp_path_factory.mktemp("tiny"))


def _params(repo: Path) -> dict:
    return load_params("anneals", "mixture", "model", "train", path=repo / "params.yaml")


def _steps(path: Path) -> list[dict]:
    return pq.read_table(path / "steps.parquet").sort_by("step").to_pylist()


def test_the_arms_plans_keep_the_full_runs_past_and_give_the_source_its_share(tiny):
    full = pq.read_table(tiny / "data" / "mixture" / "plan.parquet").sort_by("position").to_pylist()
    result = read_results(tiny / "data" / "anneal")["reference"]
    share, per_step = result["share"], tiny_per_step(tiny)
    at, n = result["branch_step"] * per_step, result["steps_per_arm"]
    head = sum(1 for r in full if r["stream_start"] < at)
    for arm in ("with", "without"):
        plan = pq.read_table(tiny / "data" / "anneal" / "reference" / "plans" / arm / "plan.parquet").sort_by("position").to_pylist()
        assert plan[:head - 1] == full[:head - 1]  # the checkpoint's past: the same rows, positions and offsets
        cut = plan[head - 1]  # the document that straddles the branch, cut there (its end-of-text at the branch)
        assert {**cut, "length": None} == {**full[head - 1], "length": None}
        assert cut["stream_start"] + cut["length"] + 1 == at
        tail = plan[head:]
        assert tail[0]["stream_start"] == at and {r["phase"] for r in tail} == {"anneal"}
        assert [r["position"] for r in plan] == list(range(len(plan)))
        assert all(b["stream_start"] == a["stream_start"] + a["length"] + 1 for a, b in zip(plan, plan[1:]))
        # The decay phase is planned at the arm's length: it holds the arm's steps, and more only by each bucket's
        # last document (a quota is filled by whole documents).
        tokens = sum(r["length"] + 1 for r in tail)
        longest = {}
        for r in tail:
            longest[r["bucket"]] = max(longest.get(r["bucket"], 0), r["length"] + 1)
        assert n * per_step < tokens <= n * per_step + sum(longest.values())
        ref = sum(r["length"] + 1 for r in tail if r["bucket"] == "reference")
        if arm == "with":  # the share, within a document or two (each bucket's quota overshoots by < 1 document)
            biggest = max(r["length"] + 1 for r in tail)
            assert abs(ref / tokens - share) <= 2 * biggest / tokens, (ref / tokens, biggest)
            read = _read_share(tail, at, n * per_step, "reference")  # what the arm's steps read of it
            assert abs(read - share) < 0.2, read
        else:
            assert ref == 0
        weights = result["weights"][arm]
        rest = {b: w for b, w in _params(tiny)["mixture"]["phases"]["anneal"]["weights"].items() if b != "reference"}
        for b, w in rest.items():  # the other buckets keep their proportions among themselves
            assert weights[b] == pytest.approx(w / sum(rest.values()) * (1 - share if arm == "with" else 1))


def tiny_per_step(repo: Path) -> int:
    return json.loads((repo / "data" / "mixture" / "manifest.json").read_text())["tokens_per_step"]


def _read_share(tail: list[dict], start: int, tokens: int, bucket: str) -> float:
    """The bucket's share of stream tokens [start, start + tokens)."""
    inside = [(max(r["stream_start"], start), min(r["stream_start"] + r["length"] + 1, start + tokens), r["bucket"])
              for r in tail]
    return sum(b - a for a, b, k in inside if b > a and k == bucket) / tokens


def test_the_arms_resume_from_the_full_runs_checkpoint_and_decay_from_there(tiny):
    result = read_results(tiny / "data" / "anneal")["reference"]
    full = _steps(tiny / "data" / "train" / "pretrain")
    at = branch_point({"model": _params(tiny)["model"], "train": _params(tiny)["train"]},
                      tiny / "data" / "tokenize", tiny / "data" / "mixture")
    k = result["branch_step"]
    assert k == at["step"] and 0 < k < len(full)
    assert full[k + 1]["lr"] < full[k]["lr"] == full[k - 1]["lr"]  # where the full run's decay begins
    assert (tiny / "data" / "train" / "pretrain" / "checkpoints" / f"step_{k:08d}" / ".metadata").is_file()
    for arm in ("with", "without"):
        steps = _steps(tiny / "data" / "anneal" / "reference" / arm)
        assert len(steps) == k + result["steps_per_arm"]
        # the arm never trained steps 0..k-1: they are the full run's records, carried in its checkpoint
        assert steps[:k] == full[:k]
        lrs = [s["lr"] for s in steps[k:]]
        assert lrs[0] == full[k]["lr"] and lrs == sorted(lrs, reverse=True) and lrs[1] < lrs[0]
        assert lrs[-1] == pytest.approx(steps[k - 1]["lr"] * 0.1)  # down to the floor (min_lr_ratio) at the end
        assert [s["stream_window"] for s in steps[k:]] != list(range(k, len(steps)))  # shuffled (data_seed 0) ...
        assert sorted(s["stream_window"] for s in steps[k:]) == list(range(k, len(steps)))  # ... the arm's own windows
    with_, without = (_steps(tiny / "data" / "anneal" / "reference" / a) for a in ("with", "without"))
    assert [s["tokens_hash"] for s in with_[k:]] != [s["tokens_hash"] for s in without[k:]]
    assert result["cost"]["fraction_of_full_run"] == pytest.approx(2 * result["steps_per_arm"] / len(full), abs=1e-4)
    assert result["cost"]["fraction_of_full_run"] <= 0.11  # the default: a tenth of the full run
    rows = {r["metric"]: r for r in result["verdicts"]}
    assert {"heldout_mean", "benchmarks_mean.bpb", "benchmarks_mean.prob_norm"} <= set(rows)
    assert {f"heldout.{b}" for b in json.loads((tiny / "data" / "train" / "pretrain" / "summary.json").read_text())
            ["heldout_loss"]} <= set(rows)
    for metric, r in rows.items():  # losses and bits per byte (all and clean items) lower, the scores higher
        assert r["lower_is_better"] == (metric.startswith("heldout") or "bpb" in metric), metric
    assert {"benchmarks_mean.bpb_clean", "benchmarks_mean.acc_norm"} <= set(rows)
    for r in rows.values():  # each arm's noise-window σ exists (the arm is longer than the noise window)
        assert r["with_sigma"] is not None and r["without_sigma"] is not None
        assert r["sigma"] == pytest.approx(math.hypot(r["with_sigma"], r["without_sigma"]))
        assert r["difference"] == pytest.approx(r["with"] - r["without"])
        better = "with" if (r["difference"] < 0) == r["lower_is_better"] else "without"
        paired = r["paired_sigma"] is not None and abs(r["difference"]) > 2 * r["paired_sigma"]
        assert r["verdict"] == (better if abs(r["difference"]) > 2 * r["sigma"] else
                                f"{better} (paired)" if paired else "neither")
    # The paired σ: the spread of the per-step difference of the held-out mean over the noise window, recomputed here
    # from the arms' own evaluation tables.
    window = json.loads((tiny / "data" / "anneal" / "reference" / "with" / "summary.json").read_text())["noise_steps"]
    means = {}
    for arm in ("with", "without"):
        held = pq.read_table(tiny / "data" / "anneal" / "reference" / arm / "heldout.parquet").to_pylist()
        means[arm] = [sum(h["loss"] for h in held if h["step"] == s) / sum(1 for h in held if h["step"] == s)
                      for s in window]
    diffs = [a - b for a, b in zip(means["with"], means["without"])]
    assert len(diffs) == 3 and rows["heldout_mean"]["paired_sigma"] == pytest.approx(statistics.stdev(diffs))
    assert diffs[-1] == pytest.approx(rows["heldout_mean"]["difference"])
    metrics = json.loads((tiny / "metrics" / "anneal.json").read_text())
    assert metrics["reference"]["heldout_mean.verdict"] == rows["heldout_mean"]["verdict"]


def test_the_lineage_maps_each_arms_steps_to_its_own_plan_from_the_branch(tiny):
    from tokenmill.train.data import tokens_hash

    con = lineage.connect(tiny / "lineage" / lineage.DB_NAME)
    try:
        runs = lineage.training_runs(con)
        assert {"anneal@reference#with", "anneal@reference#without", "pretrain"} <= set(runs)
        k = read_results(tiny / "data" / "anneal")["reference"]["branch_step"]
        for run in ("anneal@reference#with", "anneal@reference#without"):
            for step in (k - 1, k, k + 3):
                window, recorded = con.execute("SELECT stream_window, tokens_hash FROM train_steps WHERE run = ? AND "
                                               "step = ?", [run, step]).fetchone()
                assert tokens_hash(lineage.step_tokens(con, tiny / "data", window, run, step)) == recorded
                if step >= k:  # read from the mixture's plan instead, the step's tokens are other ones
                    assert tokens_hash(lineage.step_tokens(con, tiny / "data", window)) != recorded
        assert lineage.verify_training(con, tiny / "data") == []
        # A reference document the with arm placed in its anneal: read by the with arm's steps past the branch,
        # by no step of the without arm past it.
        doc = con.execute("""SELECT doc_id FROM train_plans WHERE run = 'anneal@reference#with' AND phase = 'anneal'
                             AND bucket = 'reference' AND stream_start >= (SELECT min(stream_start) FROM train_plans
                             WHERE run = 'anneal@reference#with' AND phase = 'anneal') ORDER BY position LIMIT 1""").fetchone()[0]
        steps = lineage.steps_of_document(con, doc)
        assert [s for run, s, *_ in steps if run == "anneal@reference#with" and s >= k]
        assert not [s for run, s, *_ in steps if run == "anneal@reference#without" and s >= k]
        # Before the branch an arm's steps are the full run's, document for document.
        before = {(s, l) for run, s, l, _ in steps if run == "pretrain" and s < k}
        assert before == {(s, l) for run, s, l, _ in steps if run == "anneal@reference#with" and s < k}
    finally:
        con.close()


def test_the_report_shows_each_test_with_both_arms_and_the_verdict(tiny):
    page = (tiny / "reports" / "index.html").read_text()
    result = read_results(tiny / "data" / "anneal")["reference"]
    assert "Annealing tests" in page and "sample_reference (reference) at 0.5 of the anneal phase" in page
    assert f"Branched from the full run at step {result['branch_step']:,}" in page
    assert json.loads((tiny / "reports" / "report.json").read_text())["sections"]["anneal"] == "ok"


def test_a_changed_share_reruns_only_the_anneal_stage(tiny):
    """Content-addressed: a changed share is a change of the anneal stage's parameters alone (and of `check`, which
    validates every parameter and writes the same output), not of the full run or anything before it."""
    params = tiny / "params.yaml"
    text = params.read_text()
    assert text.count("    share: 0.5\n") == 1
    try:
        params.write_text(text.replace("    share: 0.5\n", "    share: 0.4\n"))
        out = tiny_run.run(["dvc", "status"], tiny).stdout
    finally:
        params.write_text(text)
    assert {line.rstrip(":") for line in out.splitlines() if line and not line[0].isspace()} == {"check", "anneal"}, out


@pytest.mark.slow
def test_a_changed_share_retrains_only_the_with_arm(tiny, tmp_path):
    p = _params(tiny)
    spec = {"source": "sample_reference", "share": 0.3}
    out, metrics, runs = tmp_path / "anneal", tmp_path / "anneal.json", tmp_path / "runs"
    first = run_anneals({"t": spec}, p, data_root=tiny / "data", out_root=out, metrics_path=metrics, runs_dir=runs)["t"]

    def last_checkpoint(arm: str) -> int:
        return max((c / ".metadata").stat().st_mtime_ns for c in (out / "t" / arm / "checkpoints").glob("step_*"))

    before = {arm: last_checkpoint(arm) for arm in ("with", "without")}
    second = run_anneals({"t": {**spec, "share": 0.6}}, p, data_root=tiny / "data", out_root=out,
                         metrics_path=metrics, runs_dir=runs)["t"]
    assert last_checkpoint("without") == before["without"]  # resumed at its last step: nothing trained
    assert last_checkpoint("with") != before["with"]
    assert second["weights"]["with"]["reference"] == pytest.approx(0.6)
    without = {r["metric"]: r["without"] for r in second["verdicts"]}
    assert without == {r["metric"]: r["without"] for r in first["verdicts"]}
    assert {r["metric"]: r["with"] for r in second["verdicts"]} != {r["metric"]: r["with"] for r in first["verdicts"]}
    # The tests the configuration no longer names are removed with their runs.
    run_anneals({}, p, data_root=tiny / "data", out_root=out, metrics_path=metrics, runs_dir=runs)
    assert not (out / "t").exists() and json.loads(metrics.read_text()) == {}


def test_a_source_sharing_a_bucket_or_with_nothing_left_without_it_is_refused_by_name(tiny):
    index = pq.read_table(tiny / "data" / "tokenize" / "index")
    assert source_buckets(index, "sample_licenses", "t") == ["legal"]
    with pytest.raises(AnnealError, match=r"anneals\.t\.source: 'nowhere' has no tokens"):
        source_buckets(index, "nowhere", "t")
    phases = [Phase("bulk", 0.9, {"web": 1.0}), Phase("anneal", 0.1, {"legal": 1.0})]
    with pytest.raises(AnnealError, match="phase 'anneal' has no weight left"):
        arm_phases(phases, "anneal", ["legal"], 0.2, 0.05, "t")
    arms = arm_phases([Phase("bulk", 0.9, {"web": 1.0}), Phase("anneal", 0.1, {"web": 3.0, "code": 1.0})],
                      "anneal", ["legal"], 0.2, 0.05, "t")
    assert arms["with"][1].weights == pytest.approx({"web": 0.6, "code": 0.2, "legal": 0.2})
    assert arms["with"][1].fraction == arms["without"][1].fraction == 0.05  # planned at the arm's length
    assert arms["without"][1].weights == pytest.approx({"web": 0.75, "code": 0.25})
    assert arms["with"][0] == arms["without"][0] == Phase("bulk", 0.9, {"web": 1.0})


def test_the_configuration_check_names_a_bad_anneal(tiny):
    params = load_params(path=tiny / "params.yaml")
    assert not [line for line in problems(params) if line.startswith("anneals")]
    bad = {**params, "anneals": {"x": {"source": "sample_nothing", "share": 1.5, "colour": 1}}}
    lines = problems(bad)
    assert any(line.startswith("anneals.x.share:") for line in lines), lines
    assert any(line.startswith("anneals.x.colour:") for line in lines), lines
    assert any(line.startswith("anneals.x.source: expected a declared source") for line in lines), lines


def test_the_run_records_digest_reads_results_plans_and_arm_manifests_never_checkpoints(tmp_path):
    """The anneal stage's run record digests what the anneals hold (each test's result and plans, each arm by its
    content digest), not the arms' checkpoints: DCP's files are not byte-stable, and at 8B they are ~100 GB."""
    from tokenmill.anneal.stage import anneal_digest

    test = tmp_path / "reference"
    for arm in ("with", "without"):
        (test / arm / "checkpoints" / "step_4").mkdir(parents=True)
        (test / arm / "checkpoints" / "step_4" / "__0_0.distcp").write_bytes(b"shard")
        (test / arm / "manifest.json").write_text(json.dumps({"digest": f"content-of-{arm}"}))
        (test / "plans" / arm).mkdir(parents=True)
        (test / "plans" / arm / "plan.parquet").write_bytes(arm.encode())
    (test / "result.json").write_text("{}")
    first = anneal_digest(tmp_path)
    (test / "with" / "checkpoints" / "step_4" / "__0_0.distcp").write_bytes(b"another save of the same state")
    assert anneal_digest(tmp_path) == first
    for path, content in ((test / "without" / "manifest.json", json.dumps({"digest": "retrained"})),
                          (test / "plans" / "with" / "plan.parquet", "replanned"), (test / "result.json", '{"a": 1}')):
        before = path.read_text()
        path.write_text(content)
        assert anneal_digest(tmp_path) != first, path
        path.write_text(before)
    assert anneal_digest(tmp_path) == first
