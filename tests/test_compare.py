"""`tokenmill compare`: the verdict follows the noise. Paired bootstrap over items, the training noise of each
experiment, the winner only beyond both; and through the real DVC client on experiments of the tiny run."""

import json
import math

import numpy as np
import pytest

from tokenmill.evaluate import compare as C


def _exp(name, bpb_shift=0.0, acc_shift=0.0, n=200, seed=0, window=None, heldout_docs=40, item_noise=0.0):
    """An experiment whose items are one shared population (the same item ids, as two runs scoring the same
    evaluation set) moved by a shift, plus per-experiment item noise."""
    rng = np.random.default_rng(seed)
    base = np.random.default_rng(42)
    bpb = base.gamma(9.0, 0.4, size=n)
    acc = (base.random(n) < 0.3).astype(float)
    flip = rng.random(n) < item_noise
    items = {f"arc_easy/{i}": {"bpb": float(bpb[i] + bpb_shift + rng.normal(0, 0.3)),
                               "acc": float(1 - acc[i] if flip[i] else acc[i])} for i in range(n)}
    if acc_shift:
        for i, key in enumerate(items):
            if i < int(acc_shift * n) and items[key]["acc"] == 0:
                items[key]["acc"] = 1.0
    size = base.integers(500, 5000, size=heldout_docs)
    heldout = {"code": {f"d{i}": (float(-size[i] * math.log(2) * (2.0 + bpb_shift + rng.normal(0, 0.05))), int(size[i]))
                        for i in range(heldout_docs)}}
    exp = C.Experiment(name=name, rev=name, heldout=heldout, items={"arc_easy": items})
    if window is not None:
        exp.noise = {"heldout_mean": window, "arc_easy.bpb": window}
        exp.heldout_loss = 4.0
    return exp


def test_a_real_difference_wins_and_a_reshuffle_does_not():
    a, b = _exp("a", seed=1), _exp("better", bpb_shift=-0.15, seed=2)
    out = C.compare([a, b], "arc_easy.bpb")
    assert out["winner"] == "better" and out["ranking"][0]["name"] == "better"
    pair = out["pairs"][0]
    assert pair["difference"] == pytest.approx(-0.15, abs=0.06) and pair["interval"][1] < 0
    # The same population with fresh item noise only: no winner, and the verdict says why.
    same = C.compare([_exp("a", seed=1), _exp("b", seed=3)], "arc_easy.bpb")
    assert same["winner"] is None and same["verdict"].startswith("no winner: the difference is within the noise")


def test_the_bootstrap_is_paired():
    # A shift far below the spread between items but identical on every item: an unpaired comparison (two
    # independent means, se ~ 1.2 / sqrt(200) each) could not see it; the paired one does.
    a, b = _exp("a", seed=1), _exp("b", bpb_shift=-0.12, seed=1)
    pair = C.difference(a, b, "arc_easy.bpb")
    spread = np.std([r["bpb"] for r in a.items["arc_easy"].values()])
    unpaired = math.sqrt(2) * spread / math.sqrt(200)
    assert pair["sigma_items"] < unpaired / 3
    assert pair["separated"]


def test_training_noise_can_hold_back_a_verdict():
    # The same item-level difference, but each full run moves by σ 0.1 between checkpoints: within the noise.
    quiet = C.compare([_exp("a", seed=1, window=0.0), _exp("b", bpb_shift=-0.15, seed=2, window=0.0)], "arc_easy.bpb")
    noisy = C.compare([_exp("a", seed=1, window=0.1), _exp("b", bpb_shift=-0.15, seed=2, window=0.1)], "arc_easy.bpb")
    assert quiet["winner"] == "b" and noisy["winner"] is None
    assert "no seed spread measured for" in quiet["verdict"]  # the verdict says what noise it could not see
    assert noisy["pairs"][0]["sigma_training_a"] == pytest.approx(0.1)
    # The held-out loss's window σ (nats per token) is carried to bits per byte relatively: 0.1 / 4.0 of 2.0.
    exp = _exp("a", window=0.1)
    assert C.training_sigma(exp, "heldout_bpb", 2.0) == pytest.approx(0.05)
    exp.seed_noise = {"heldout_mean": 0.05}  # the scouts' seeds move it more: that one counts
    assert C.training_sigma(exp, "heldout_bpb", 2.0) == pytest.approx(0.1)
    seeded = [_exp("a", seed=1, window=0.0), _exp("b", bpb_shift=-0.15, seed=2, window=0.0)]
    for e in seeded:
        e.seed_noise = {"arc_easy.bpb": 0.05}  # 5% of ~3.6 bits: a second seed moves it by ~0.18
    out = C.compare(seeded, "arc_easy.bpb")
    assert out["winner"] is None and "no seed spread" not in out["verdict"]


def test_seed_replicas_of_a_full_run_are_its_training_noise():
    """Experiments whose parameters differ only in the seeds are one recipe: the spread of their full runs is
    that recipe's noise where the scouts' estimate is smaller (a rung's 2 seeds can give a sixth of its σ: RESULTS,
    "The full run's seed spread against its ladder's"), and a replica is no rival of the winner."""
    base = C.recipe_of({"train": {"seed": 0, "data_seed": 0, "lr": 1e-3}, "mixture": {"name": "default"}})
    assert base == C.recipe_of({"train": {"seed": 1, "data_seed": 1, "lr": 1e-3}, "mixture": {"name": "default"}})
    assert base != C.recipe_of({"train": {"seed": 0, "data_seed": 0, "lr": 2e-3}, "mixture": {"name": "default"}})
    other = C.recipe_of({"train": {"seed": 0, "data_seed": 0, "lr": 1e-3}, "mixture": {"name": "no_code"}})

    def run(name, shift, seed, recipe):
        e = _exp(name, bpb_shift=shift, seed=seed, window=0.0)
        e.seed_noise, e.recipe = {"arc_easy.bpb": 0.001}, recipe  # scouts that barely move
        return e

    # Two seeds of the baseline 0.20 apart; the other mixture 0.15 below the better of them. On the scouts'
    # noise alone it would win; against the baseline's own seed spread (σ 0.14) it does not.
    exps = [run("base", 0.0, 1, base), run("base-seed1", 0.20, 2, base), run("mix", -0.15, 3, other)]
    out = C.compare(exps, "arc_easy.bpb")
    ranking = {r["name"]: r for r in out["ranking"]}
    assert ranking["base"]["replicas"] == ["base-seed1"] and ranking["mix"]["replicas"] == []
    assert ranking["base"]["sigma_training"] == pytest.approx(0.2 / math.sqrt(2), rel=0.25)
    assert out["winner"] is None
    scouts_only = C.compare([run("base", 0.0, 1, "a"), run("mix", -0.15, 3, "b")], "arc_easy.bpb")
    assert scouts_only["winner"] == "mix"
    assert "no full-run seed replica for base, mix" in scouts_only["verdict"]  # what it could not measure
    for e in (exps := [run("base", 0.0, 1, "a"), run("mix", -0.15, 3, "b")]):
        e.seed_source = ("s2", 2, 0)
    # ... and how little the scouts' σ rests on: 2 seeds are one degree of freedom, the true σ up to 16x it
    # (χ²: sqrt(1 / 0.00393) = 15.95 at the 5% quantile; on the demo s2's first 2 seeds gave a sixth of its 6 seeds')
    assert ("s2's 2 seeds: 1 degree of freedom, the true σ between 0.5x and 16x the measured one at 90%"
            in C.compare(exps, "arc_easy.bpb")["verdict"])
    assert "5 degrees of freedom, the true σ between 0.7x and 2.1x" in C.seed_sigma_range("s2", 6)
    # 2 seeds of the experiment pooled with 6 of the seed record: 1 + 5 = 6 degrees of freedom
    # (sqrt(6 / 12.59) = 0.69, sqrt(6 / 1.635) = 1.92)
    assert ("s2's 2 seeds pooled with the 6 of the seed record (benchmarks/decision/seed_record.json): 6 degrees "
            "of freedom, the true σ between 0.7x and 1.9x") in C.seed_sigma_range("s2", 2, 6)
    # The baseline's seeds 0.02 apart: the same other mixture wins, and the baseline's seed replica is not a
    # rival of the baseline when the baseline is best.
    close = [run("base", 0.0, 1, base), run("base-seed1", 0.02, 2, base), run("mix", -0.15, 3, other)]
    assert C.compare(close, "arc_easy.bpb")["winner"] == "mix"
    worse = [run("base", 0.0, 1, base), run("base-seed1", 0.02, 2, base), run("mix", 0.30, 3, other)]
    out = C.compare(worse, "arc_easy.bpb")
    assert out["winner"] == "base" and "its seed replicas: base-seed1" in out["verdict"]
    assert "no full-run seed replica for mix " in out["verdict"]
    assert [p["replicas"] for p in out["pairs"]] == [True, False]
    assert "seed replicas of one recipe" in C.render(out, [])


def test_heldout_bits_per_byte_is_the_ratio_of_sums():
    exp = _exp("a", heldout_docs=3)
    docs = exp.heldout["code"].values()
    expected = -sum(ll for ll, _ in docs) / sum(n for _, n in docs) / math.log(2)
    assert C.value_of(exp, "heldout_bpb.code") == pytest.approx(expected)
    assert C.value_of(exp, "heldout_bpb") == pytest.approx(expected)  # one bucket: the mean is that bucket
    assert C.lower_is_better("heldout_bpb.code") and not C.lower_is_better("arc_easy.acc")


def test_errors_name_the_metric_or_the_items():
    a = _exp("a")
    with pytest.raises(C.CompareError, match=r"a: unknown metric 'arc_easy\.f1' \(known: heldout_bpb"):
        C.value_of(a, "arc_easy.f1")
    with pytest.raises(C.CompareError, match="no held-out documents of bucket 'legal'"):
        C.value_of(a, "heldout_bpb.legal")
    other = _exp("b")
    other.items = {"arc_easy": {f"x{k}": v for k, v in other.items["arc_easy"].items()}}
    with pytest.raises(C.CompareError, match="share no item of 'arc_easy'"):
        C.difference(a, other, "arc_easy.bpb")
    with pytest.raises(C.CompareError, match="two experiments or more"):
        C.compare([a], "arc_easy.bpb")


def test_render_shows_ranking_pairs_verdict_and_data():
    a, b = _exp("a", seed=1), _exp("better", bpb_shift=-0.15, seed=2)
    a.mixture = {"planned": {"code": 10, "web": 90}, "unique_documents": 50, "heldout_documents": 2}
    b.mixture = {"planned": {"code": 40, "web": 60}, "unique_documents": 55, "heldout_documents": 2}
    text = C.render(C.compare([a, b], "arc_easy.bpb"), C.data_differences([a, b]))
    assert "arc_easy.bpb (lower is better)" in text and "better wins on arc_easy.bpb" in text
    assert "95% interval" in text and "code tokens" in text and "  better  55  2  40  60" in text


# --- through DVC on a clone that never built its own commit ----------------------------------------------

EVALUATE = '''import json, math, pathlib, yaml
shift = yaml.safe_load(open("params.yaml"))["shift"]
out = pathlib.Path("data/evaluate/samples")
out.mkdir(parents=True, exist_ok=True)
with open(out / "tm_heldout_web.jsonl", "w") as f:
    for i in range(30):  # bits per byte 2 + shift (+ a little per document)
        n = 200 + 37 * i
        f.write(json.dumps({"bucket": "web", "doc_id": f"d{i}", "bytes": n,
                            "loglikelihood": -n * math.log(2) * (2.0 + shift + 0.01 * (i % 7))}) + "\\n")
'''


def test_a_clone_that_never_built_main_compares_its_experiments_and_names_main(tmp_path):
    """A user clones the project (git carries dvc.lock, not the DVC cache), runs two experiments and types
    `tokenmill compare`: main's outputs are not in the clone's cache. Each unreadable revision is named with why
    and what to run, and the experiments that can be read are compared; with fewer than two left, one line says
    so. A real git clone and real `dvc exp run`s of a one-stage pipeline that writes what compare reads."""
    from tiny_run import run

    origin, clone = tmp_path / "origin", tmp_path / "clone"
    origin.mkdir()
    (origin / "evaluate.py").write_text(EVALUATE)
    (origin / "params.yaml").write_text("shift: 0.0\ntrain: {seed: 0}\n")
    (origin / "dvc.yaml").write_text("stages:\n  evaluate:\n    cmd: python evaluate.py\n    deps: [evaluate.py]\n"
                                     "    params: [shift]\n    outs: [data/evaluate]\n")
    for args in (["git", "init", "-q", "-b", "main"], ["dvc", "init", "-q"], ["dvc", "repro", "-q"],
                 ["git", "add", "-A"], ["git", "commit", "-qm", "main, built"]):
        run(args, origin)
    run(["git", "clone", "-q", str(origin), str(clone)], tmp_path)
    for name, shift in (("wide", "0.5"), ("narrow", "0.25")):
        run(["dvc", "exp", "run", "-q", "-S", f"shift={shift}", "-n", name], clone)

    proc = run(["tokenmill", "compare", "--metric", "heldout_bpb.web", "--json"], clone)
    result = json.loads(proc.stdout)["comparisons"][0]
    assert [r["name"] for r in result["ranking"]] == ["narrow", "wide"] and result["winner"] == "narrow"
    assert result["ranking"][0]["value"] == pytest.approx(2.25 + 0.03, abs=0.01)
    left_out = [line for line in proc.stderr.splitlines() if line.startswith("tokenmill: left out")]
    assert len(left_out) == 1 and "left out main: its outputs are not in this clone's DVC cache" in left_out[0]
    assert "dvc pull" in left_out[0] and "dvc repro" in left_out[0]

    proc = run(["tokenmill", "compare", "wide", "main", "nosuch", "--metric", "heldout_bpb.web"], clone, check=False)
    assert proc.returncode == 2 and proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 3 and "Traceback" not in proc.stderr
    assert lines[0].startswith("tokenmill: left out main: its outputs are not in this clone's DVC cache")
    assert lines[1].startswith("tokenmill: left out nosuch: no experiment, branch, tag or commit")
    assert lines[2] == ("tokenmill: compare needs two readable experiments or more, got 1 (wide); the others are "
                        "left out above")


def test_identical_experiments_render_without_dividing_by_zero():
    """Two runs with the same outputs (the same parameters twice, or an experiment equal to its baseline) have no
    noise and no difference: the pair is `identical`, not a division by zero."""
    a, b = _exp("a"), _exp("b")
    b.items, b.heldout = a.items, a.heldout
    result = C.compare([a, b], "heldout_bpb.code")
    text = C.render(result, [])
    assert "identical" in text and result["winner"] is None


RECORD = {"measured_on": "the demo (scale cpu_demo) at commit abc1234", "recipes": ["a", "b", "c", "d"],
          "full_run_seeds": 2, "rungs": {"s1": {"heldout_mean": {"pairs": 6, "separated": 2, "agreed": 1,
                                                                 "agreed_all_pairs": 4, "compute_fraction": 0.0512}},
                                         "s3": {"heldout_mean": {"pairs": 6, "separated": 0, "agreed": 0,
                                                                 "agreed_all_pairs": 5, "compute_fraction": 0.21}}}}


def _rung(name, value, sigma):
    return C.Experiment(name=name, rev=name, rung_figures={"heldout_mean": (value, sigma)})


def test_a_verdict_at_a_scout_rung_follows_the_means_sigma_and_carries_its_track_record():
    """At a rung the best wins only beyond 2 √(σa² + σb²) of the rung means' σ; the verdict names the rung and
    says how often that rung and metric agreed with the full run where it was measured."""
    # 0.1 apart: beyond 2 x hypot(0.03, 0.02) = 0.072, so a wins; at σ 0.04 each (0.113) it does not.
    won = C.compare_rung([_rung("b", 6.6, 0.02), _rung("a", 6.5, 0.03)], "s1", "heldout_mean", RECORD)
    assert won["winner"] == "a" and [r["name"] for r in won["ranking"]] == ["a", "b"]
    assert won["pairs"][0]["sigma"] == pytest.approx(math.hypot(0.03, 0.02))
    assert won["verdict"] == "a wins on heldout_mean at scout s1"
    assert "ranked 1 of 2 recipe pairs as the full run did" in won["track_record"]
    assert "4 of 6 pairs in all" in won["track_record"] and "5.1% of the full run's compute" in won["track_record"]
    held = C.compare_rung([_rung("b", 6.6, 0.04), _rung("a", 6.5, 0.04), _rung("c", 7.2, 0.01)], "s1",
                          "heldout_mean", RECORD)
    assert held["winner"] is None and held["verdict"].startswith("no winner at scout s1") and "(a vs b)" in held["verdict"]
    # A higher-is-better metric ranks the other way round.
    hi = [C.Experiment(name=n, rev=n, rung_figures={"benchmarks_mean.prob_norm": (v, 0.001)}) for n, v in
          (("x", 0.30), ("y", 0.35))]
    assert C.compare_rung(hi, "s1", "benchmarks_mean.prob_norm")["winner"] == "y"
    text = C.render(won, [])
    assert won["verdict"] in text and won["track_record"] in text and "items" not in text


def test_a_track_record_says_what_was_not_measured():
    from tokenmill.evaluate import track

    assert "none measured" in track.line(None, "s1", "heldout_mean")
    assert "no recipe pair of 6 differed beyond the full run's noise" in track.line(RECORD, "s3", "heldout_mean")
    assert "s2 on heldout_mean was not measured" in track.line(RECORD, "s2", "heldout_mean")
    with pytest.raises(C.CompareError, match="--rung compares"):
        C.compare_rung([_rung("a", 1, 0), _rung("b", 2, 0)], "s1", "arc_easy.acc")
