"""`tokenmill search`: the draws stay within the full run's epoch caps, the log-linear fit finds a planted law's
optimum better than any mixture the swarm sampled, and, through the real DVC queue on the tiny run, a swarm of
scout-only experiments proposes a preset that one more scout verifies; a rerun with unchanged inputs runs
nothing, a larger swarm runs only the new draws and refits."""

import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

import tiny_run
from tokenmill import search as S

ROOT = Path(__file__).resolve().parents[1]


def test_epoch_caps_count_the_other_phases_share():
    # budget 1,000 tokens; bucket a has 100 available and max_epochs 4: at most 400 tokens over the run. The
    # anneal phase (10%) gives it half its weight: 50 tokens; the bulk phase (90%) may take 350: w <= 0.3889.
    mixture = {"max_epochs": {"default": 4, "b": 1},
               "phases": {"bulk": {"fraction": 0.9, "weights": {"a": 1, "b": 1}},
                          "anneal": {"fraction": 0.1, "weights": {"a": 1, "b": 1}}}}
    caps = S.epoch_caps(mixture, "bulk", {"a": 100, "b": 10_000}, 1000)
    assert caps["a"] == pytest.approx((400 / 1000 - 0.05) / 0.9)
    assert caps["b"] == pytest.approx((10_000 / 1000 - 0.05) / 0.9)  # plenty: capped at 1 by the caller


def _project(tmp_path: Path, available: dict[str, int], budget: int) -> Path:
    """conf/ of this checkout, and the built mixture's two files a search reads."""
    shutil.copytree(ROOT / "conf", tmp_path / "conf")
    (tmp_path / "data" / "mixture").mkdir(parents=True)
    (tmp_path / "metrics").mkdir()
    pq.write_table(pa.table({"bucket": list(available), "available_tokens": list(available.values())}),
                   tmp_path / "data" / "mixture" / "buckets.parquet")
    (tmp_path / "metrics" / "mixture.json").write_text(json.dumps({"token_budget": budget}))
    return tmp_path


def test_draws_are_seeded_within_the_caps_and_a_larger_swarm_extends_a_smaller(tmp_path):
    # The demo's buckets, with legal scarce: at a budget of 1M tokens its cap in the bulk phase is 0.25.
    available = {"web/high": 409_000, "web/low": 516_000, "code": 8_400_000, "reference": 358_000, "legal": 56_250}
    repo = _project(tmp_path, available, 1_000_000)
    swarm = S.plan(repo, "default", None, "s1", 12, concentration=20, seed=0)
    assert swarm.phase == "bulk" and swarm.buckets == sorted(available)
    assert swarm.caps["legal"] == pytest.approx(4 * 56_250 / 1_000_000 / 0.9)
    for w in swarm.draws:
        assert sum(w.values()) == pytest.approx(1, abs=1e-9)
        assert all(w[b] <= swarm.caps[b] + 1e-12 for b in w)
    assert S.plan(repo, "default", None, "s1", 12, 20, 0).draws == swarm.draws
    assert S.plan(repo, "default", None, "s1", 16, 20, 0).draws[:12] == swarm.draws
    assert S.plan(repo, "default", None, "s1", 12, 20, 1).draws != swarm.draws
    # The draws centre on the preset (Dirichlet mean = its weights).
    mean = {b: np.mean([w[b] for w in S.plan(repo, "default", None, "s1", 400, 20, 0).draws]) for b in available}
    assert all(abs(mean[b] - swarm.prior[b]) < 0.02 for b in available if swarm.prior[b] < 0.2)


def test_a_swarm_over_the_topic_preset_draws_weights_over_topic_buckets(tmp_path):
    """`tokenmill search --preset topics`: the buckets are the domains stage's topics (tokenize.buckets [topic]),
    the draws centre on the preset's uniform weights and keep each topic within its epoch cap."""
    # The demo's twelve topics by size (RESULTS, "The domains found on the demo"), t11 the scarcest.
    sizes = [2_900_000, 1_800_000, 1_200_000, 900_000, 800_000, 700_000, 600_000, 500_000, 400_000, 300_000,
             200_000, 40_000]
    available = {f"t{i:02d}": n for i, n in enumerate(sizes)}
    repo = _project(tmp_path, available, 1_000_000)
    swarm = S.plan(repo, "topics", None, "s1", 24, concentration=20, seed=0)
    assert swarm.phase == "bulk" and swarm.buckets == sorted(available)
    assert swarm.prior == pytest.approx({b: 1 / 12 for b in available})
    assert swarm.caps["t11"] == pytest.approx((4 * 40_000 / 1_000_000 - 0.1 / 12) / 0.9)
    for w in swarm.draws:
        assert set(w) == set(available) and sum(w.values()) == pytest.approx(1, abs=1e-9)
        assert all(w[b] <= swarm.caps[b] + 1e-12 for b in w)
    assert len({tuple(sorted(w.items())) for w in swarm.draws}) == 24
    # Its proposal is written in the topic preset's form (a `_global_` package that buckets by topic as well),
    # and composes to the proposed weights and the topic buckets (a `mixture` package lost the buckets, and
    # writing one failed on the demo: KeyError 'phases').
    proposal = dict(swarm.draws[0])
    S.write_preset(repo, swarm, "topics_searched", proposal, ["a test"])
    params = S.compose_params(repo, ["mixture=topics_searched"])
    assert params["tokenize"]["buckets"] == ["topic"] and params["mixture"]["name"] == "topics_searched"
    assert params["mixture"]["phases"]["bulk"]["weights"] == pytest.approx(proposal)
    assert params["mixture"]["phases"]["anneal"]["weights"] == {b: 1 for b in available}  # the other phase as it was


def test_a_preset_beyond_its_own_cap_and_unknown_names_are_one_line_errors(tmp_path):
    repo = _project(tmp_path, {"web/high": 1000, "web/low": 10**6, "code": 10**6, "reference": 10**6,
                               "legal": 10**6}, 1_000_000)
    with pytest.raises(S.SearchError, match="exceeds the epoch cap of web/high"):
        S.plan(repo, "default", None, "s1", 12, 20, 0)
    with pytest.raises(S.SearchError, match="no scout rung 's9'"):
        S.plan(repo, "default", None, "s9", 12, 20, 0)
    with pytest.raises(S.SearchError, match="has no phase 'warmup'"):
        S.plan(repo, "default", "warmup", "s1", 12, 20, 0)
    # The topic preset on a mixture built over sources and tiers (the demo as built): what to run first.
    with pytest.raises(S.SearchError, match=r"weights 0 bucket\(s\) the built mixture has \(code, legal, reference, "
                       r"web/high, web/low\).*tokenize.buckets: \['topic'\].*`dvc exp run -S mixture=topics mixture`"):
        S.plan(repo, "topics", None, "s1", 24, 20, 0)


def _planted(buckets, runs, noise, seed=0):
    """A swarm of mixtures scored by a known law: log L_b = t_b . w, every bucket's loss falling with its own
    weight and rising a little with the others'."""
    rng = np.random.default_rng(seed)
    k = len(buckets)
    T = np.full((k, k), 0.25) + np.diag([-1.2, -0.6, -0.9, -0.3])[:k, :k] + np.log(3.0)
    W = rng.dirichlet(np.full(k, 12.0) * np.array([0.4, 0.3, 0.2, 0.1])[:k], size=runs)
    truth = lambda w: float(np.mean(np.exp(T @ w)))  # noqa: E731
    losses = {b: np.exp(W @ T[i]) * (1 + noise * rng.standard_normal(runs)) for i, b in enumerate(buckets)}
    return W, losses, truth


def test_the_fit_finds_a_mixture_better_than_every_one_it_sampled():
    buckets = ["code", "reference", "web/high", "web/low"]
    W, losses, truth = _planted(buckets, runs=16, noise=0.003)
    model = S.fit(W, losses, buckets)
    w = S.propose(model, W, {b: 1.0 for b in buckets})
    assert w.sum() == pytest.approx(1) and (w >= W.min(0) - 1e-4).all() and (w <= W.max(0) + 1e-4).all()  # 4 decimals
    # Taking the best sampled mixture (the naive choice) is beaten by the law's optimum, measured by the truth.
    assert truth(w) < min(truth(x) for x in W)
    lo, hi = S.bootstrap_interval(W, losses, buckets, w)
    assert lo <= truth(w) <= hi and lo < hi
    loo = S.leave_one_out(W, losses, buckets)
    assert loo["beats_naive"] and loo["rmse"] < 0.5 * loo["naive_rmse"]


def test_the_proposal_respects_the_epoch_cap_whatever_the_law_prefers():
    buckets = ["code", "reference", "web/high", "web/low"]
    W, losses, _ = _planted(buckets, runs=16, noise=0.0)
    model = S.fit(W, losses, buckets)
    free = S.propose(model, W, {b: 1.0 for b in buckets})
    capped = S.propose(model, W, {"code": float(free[0]) - 0.05, "reference": 1.0, "web/high": 1.0, "web/low": 1.0})
    assert capped[0] <= free[0] - 0.05 + 1e-4 and capped.sum() == pytest.approx(1)


def test_a_bucket_the_metric_cannot_see_keeps_the_presets_weight():
    buckets = ["code", "reference", "web/high", "web/low"]
    W, losses, _ = _planted(buckets, runs=16, noise=0.0)
    del losses["web/low"]  # no held-out documents of web/low: nothing says what its weight is worth
    model = S.fit(W, losses, buckets)
    assert S.propose(model, W, {b: 1.0 for b in buckets})[3] == pytest.approx(W[:, 3].min(), abs=1e-4)
    kept = S.propose(model, W, {b: 1.0 for b in buckets}, keep={"web/low": 0.1})
    assert kept[3] == pytest.approx(0.1, abs=1e-4) and kept.sum() == pytest.approx(1)


def test_a_noise_only_swarm_does_not_beat_the_swarm_mean():
    # Losses that do not depend on the weights: the leave-one-out check must say the fit found nothing.
    buckets = ["code", "reference", "web/high", "web/low"]
    rng = np.random.default_rng(3)
    W = rng.dirichlet(np.full(4, 5.0), size=12)
    losses = {b: 6.0 + 0.05 * rng.standard_normal(12) for b in buckets}
    assert not S.leave_one_out(W, losses, buckets)["beats_naive"]


def test_the_leave_one_out_errors_sigma_is_the_spread_of_an_rmse_over_swarms():
    # 4,000 swarms of 12 runs whose errors are N(0, 1): the RMSE moves from swarm to swarm by about 1/sqrt(2n) =
    # 0.20; each swarm's own σ estimate must say so on average (sd(e)/sqrt(n), the σ of a mean, says 0.29).
    rng = np.random.default_rng(0)
    errors = rng.normal(size=(4000, 12))
    rmse = np.sqrt(np.mean(errors ** 2, axis=1))
    estimates = np.array([S._rmse_sigma(e) for e in errors])
    assert np.mean(estimates) == pytest.approx(np.std(rmse), rel=0.15)
    assert S._rmse_sigma([0.0, 0.0, 0.0]) == 0.0 and S._rmse_sigma([0.3]) == 0.0  # nothing to spread


def test_a_gain_carries_the_compare_sigma_and_the_spread_of_its_per_seed_differences():
    run = lambda v, window: {"heldout_mean": (v, window)}  # noqa: E731  (value, σ of its noise window)
    preset = [run(6.80, 0.01), run(6.90, 0.01)]      # seeds 0 and 1: this seed pair alone spreads by 0.0707
    proposal = [run(6.78, 0.01), run(6.86, 0.01)]    # the same seeds: better by 0.02 and 0.04
    g = S.gain(preset, proposal, "heldout_mean")
    assert g["gain"] == pytest.approx(0.03) and g["preset"] == pytest.approx(6.85)
    # As compare: each side's σ of one run is its seed spread (larger than the window), over sqrt(2) seeds.
    assert g["sigma"] == pytest.approx(np.hypot(np.std([6.80, 6.90], ddof=1), np.std([6.78, 6.86], ddof=1)) / np.sqrt(2))
    # Paired: the differences 0.02 and 0.04 spread by 0.0141, over sqrt(2): the shared seed effect cancels.
    assert g["paired_sigma"] == pytest.approx(np.std([0.02, 0.04], ddof=1) / np.sqrt(2)) and g["paired_sigma"] < g["sigma"] / 4
    one = S.gain([run(6.7, 0.05)], [run(6.8, 0.05)], "heldout_mean")
    assert one["gain"] == pytest.approx(-0.1) and one["paired_sigma"] is None and one["sigma"] == pytest.approx(np.hypot(0.05, 0.05))


def test_an_experiment_name_changes_with_what_its_stages_read_and_nothing_else(tmp_path):
    # The stages up to scout@s1 as DVC sees them: a file they read changes the name, a file they do not leaves it.
    repo = tmp_path / "repo"
    tiny_run.copy_project(repo)
    tiny_run.run(["git", "init", "-q"], repo)
    tiny_run.run(["dvc", "init", "-q"], repo)
    from tokenmill.config import compose
    compose([], conf_dir=repo / "conf", output=repo / "params.yaml")  # dvc.yaml's foreach reads it
    params = S.compose_params(repo, [])
    pipeline, keys = S.pipeline_inputs(repo, "s1")
    assert {"scouts.s1", "train", "mixture", "model", "sample"} <= set(keys)
    name = S.experiment_name(pipeline, {k: S._at(params, k) for k in keys})
    again = S.pipeline_inputs(repo, "s1")[0]
    assert S.experiment_name(again, {k: S._at(params, k) for k in keys}) == name
    (repo / "README.md").write_text("documentation only")  # read by no stage
    (repo / "conf" / "mixture" / "another.yaml").write_text("name: another\n")  # a preset no stage reads
    assert S.pipeline_inputs(repo, "s1")[0] == pipeline
    with open(repo / "src" / "tokenmill" / "train" / "loop.py", "a") as f:
        f.write("\n# an edit to the training code\n")
    assert S.pipeline_inputs(repo, "s1")[0] != pipeline
    moved = {k: S._at(params, k) for k in keys}
    moved["train"] = {**moved["train"], "seed": 7}
    assert S.experiment_name(pipeline, moved) != name


# ---------------------------------------------------------------------------------------------------------
# Through DVC's queue on the tiny run


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return tiny_run.build(tmp_path_factory.mktemp("tiny"))


@pytest.fixture(scope="module")
def swarm(tiny):
    """The first search of the tiny run: six scout-only experiments of rung s1 and the verifying one."""
    first = tiny_run.run(SEARCH, tiny)
    return json.loads(first.stdout), first.stderr


SEARCH = ["tokenmill", "search", "--rung", "s1", "--runs", "6", "--jobs", "2", "--json"]


@pytest.mark.slow  # a swarm of scout-only experiments through `dvc exp run --queue` on the tiny run
def test_a_swarm_through_the_dvc_queue_proposes_and_verifies_a_preset(tiny, swarm):
    out, log = swarm
    assert "0 of 6 experiments already held" in log
    # Every swarm member and the verifying run are DVC experiments of this commit, each with its scout's metrics.
    shown = tiny_run.run(["dvc", "exp", "show", "--json"], tiny).stdout
    for row in out["swarm"]:
        assert row["experiment"] in shown and set(row["heldout_loss"]) == set(out["responses"])
    # The proposal and the preset itself, verified with two seeds each (the same seeds): the gain, on the metric
    # and on the benchmarks' bits per byte, each with a σ from the two sides' seed spread.
    verified = out["verified"]
    assert verified["experiment"] in shown and verified["preset"]["experiment"] in shown and verified["seeds"] == 2
    for side in (verified, verified["preset"]):
        fs = S.revision_fs(str(tiny), side["rev"], side["experiment"])
        root = "data/train/scout/s1"
        losses = [json.loads(fs.read_text(f"{root}/{p}summary.json"))["heldout_loss"] for p in ("", "replicas/seed1/")]
        assert losses[0] != losses[1]  # two seeds, read from the experiment's own outputs
        assert side["measured"] == pytest.approx(np.mean([np.mean(list(h.values())) for h in losses]), rel=1e-9)
        assert side["measured_sigma"] > 0
    g = verified["gain"]
    assert g["gain"] == pytest.approx(verified["preset"]["measured"] - verified["measured"], rel=1e-9)
    assert g["sigma"] > 0 and g["paired_sigma"] > 0 and verified["benchmarks_bpb_gain"]["paired_sigma"] > 0
    assert f"gain over the preset {g['gain']:+.4f} ± {g['sigma']:.4f}" in \
        (tiny / "conf" / "mixture" / "default_searched.yaml").read_text()
    preset = yaml.safe_load((tiny / "conf" / "mixture" / "default_searched.yaml").read_text())
    weights = preset["phases"][out["phase"]]["weights"]
    assert {b: weights[b] for b in out["buckets"]} == out["proposal"]
    assert sum(out["proposal"].values()) == pytest.approx(1, abs=1e-6)
    assert all(out["proposal"][b] <= out["caps"][b] + 1e-9 for b in out["buckets"])
    text = (tiny / "conf" / "mixture" / "default_searched.yaml").read_text()
    assert f"measured {out['verified']['measured']:.4f}" in text and "predicted held-out mean loss" in text
    # The preset composes and validates like any other.
    from tokenmill.params import problems
    params = S.compose_params(tiny, ["mixture=default_searched"])
    assert params["mixture"]["name"] == "default_searched" and not problems(params)


@pytest.mark.slow  # reruns the tiny run's search twice
def test_a_rerun_runs_nothing_and_a_larger_swarm_runs_only_its_new_draw(tiny, swarm):
    out, _ = swarm
    again = tiny_run.run(SEARCH, tiny)
    assert "6 of 6 experiments already held by DVC; running 0" in again.stderr
    assert "2 of 2 experiments already held by DVC; running 0" in again.stderr
    assert json.loads(again.stdout) == out
    # A larger swarm: only the new draw runs, and the fit is made again over seven runs (its proposal is not
    # verified here: that is the first search's part, and would cost two more experiments).
    larger = tiny_run.run([*SEARCH[:5], "7", *SEARCH[6:], "--no-verify", "--name", "larger"], tiny)
    assert "6 of 7 experiments already held by DVC; running 1" in larger.stderr
    grown = json.loads(larger.stdout)
    assert len(grown["swarm"]) == 7 and grown["swarm"][:6] == out["swarm"] and grown["fit"] != out["fit"]
    assert "verified" not in grown and (tiny / "conf" / "mixture" / "larger.yaml").exists()


@pytest.mark.slow  # the tiny run's search and forecast on the decision page, in headless chromium
def test_the_decision_page_opens_in_a_browser(tiny, swarm, tmp_path):
    from test_compare import _exp
    from test_report import Chromium, _chromium

    from tokenmill.evaluate import compare as C
    from tokenmill.report.decision import build_decision_page

    out, _ = swarm
    a, b = _exp("baseline", seed=1), _exp("better", bpb_shift=-0.15, seed=2)
    twin = _exp("baseline-seed2", seed=3)
    results = [C.compare([a, b], "arc_easy.bpb"), C.compare([a, twin], "arc_easy.bpb")]
    summary = build_decision_page(tmp_path / "page", results, C.data_differences([a, b, twin]),
                                  [tiny / "searches" / "default_searched.json"], project=tiny)
    assert summary["sections"] == {"ranking-0": "ok", "ranking-1": "ok", "search-0": "ok", "scaling": "ok",
                                   "value": "not run"}  # no value card here (tests/test_value.py writes its own)
    browser = Chromium(_chromium(), tmp_path / "profile")
    try:
        page = browser.open((tmp_path / "page" / "index.html").resolve().as_uri())
        images = browser.evaluate("Array.from(document.images, i => ({src: i.getAttribute('src'), "
                                  "complete: i.complete, width: i.naturalWidth}))", page)
        text = browser.evaluate("document.body.innerText", page)
    finally:
        browser.close()
    assert sorted(i["src"] for i in images) == summary["images"] and len(images) == 4
    assert all(i["complete"] and i["width"] > 0 for i in images), images
    assert "better wins on arc_easy.bpb" in text and "no winner: the difference is within the noise" in text
    assert f"{out['verified']['measured']:.4g}" in text and "Forecast against the naive predictor" in text
