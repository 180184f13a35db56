"""The noise `tokenmill compare` reports, on experiments made by hand whose answers are worked out here by
another route than compare's own: the paired bootstrap's σ and interval against the closed form of a
bootstrap (the plug-in variance over n, a binomial count's quantiles, the delta method of a ratio), the
training noise carried to the metric's value, the combined σ and the verdict at 2σ, the replicas' spread and
the scouts' seed spread.

(Beside tests/test_compare.py, which covers the verdicts; the evaluate stage's own stderrs are tested in
tests/test_evaluate.py.)
"""

from __future__ import annotations

import io
import json
import math

import pytest

from tokenmill.evaluate import compare as C

DRAWS = 20000  # the bootstrap's σ within about 0.5% of its limit: a 2% tolerance still parts n from n - 1 at n = 10


def _bench(name: str, pairs: list[tuple[float, float]], metric: str = "acc") -> tuple[C.Experiment, C.Experiment]:
    a = C.Experiment(name="a", rev="a", items={name: {f"{name}/{i}": {metric: x} for i, (x, _) in enumerate(pairs)}})
    b = C.Experiment(name="b", rev="b", items={name: {f"{name}/{i}": {metric: y} for i, (_, y) in enumerate(pairs)}})
    return a, b


def test_paired_bootstrap_sigma_and_interval_of_a_mean_by_hand():
    """Ten items, a - b = +1 on two of them and 0 on the rest (three both right, five both wrong).

    The bootstrap resamples the ten items with replacement, the same draws for both: the mean difference of a
    draw is X / 10 with X ~ Binomial(10, 0.2). Its σ is the plug-in sd over sqrt(n): sqrt(0.2 x 0.8 / 10) =
    0.126491 (sqrt(0.16 / 9) = 0.133333 with n - 1; sqrt(0.5 x 0.5 / 10 + 0.3 x 0.7 / 10) = 0.214476 with a's and
    b's items drawn apart). The 95% interval's ends are the binomial's 2.5% and 97.5% quantiles over 10:
    P(X = 0) = 0.8^10 = 0.107 > 0.025, so 0; P(X <= 4) = 0.967 < 0.975 <= P(X <= 5) = 0.994, so 0.5.
    """
    pairs = [(1.0, 0.0)] * 2 + [(1.0, 1.0)] * 3 + [(0.0, 0.0)] * 5
    a, b = _bench("arc_easy", pairs)
    d = C.difference(a, b, "arc_easy.acc", draws=DRAWS)
    assert d["value_a"] == pytest.approx(0.5) and d["value_b"] == pytest.approx(0.3)
    assert d["difference"] == pytest.approx(0.2) and d["items"] == 10
    assert d["sigma_items"] == pytest.approx(math.sqrt(0.016), rel=0.02)
    assert d["interval"] == pytest.approx([0.0, 0.5], abs=1e-9)
    # No training noise recorded: the combined σ is the items' alone, and 0.2 < 2 x 0.126 is not separated.
    assert d["sigma_training_a"] == d["sigma_training_b"] == 0.0
    assert d["sigma"] == pytest.approx(d["sigma_items"]) and not d["separated"]


def test_paired_bootstrap_is_stratified_over_benchmarks_by_hand():
    """benchmarks_mean.acc over two benchmarks of 10 and 20 items, resampled within each: the mean of two
    independent means has σ sqrt(se1^2 + se2^2) / 2. arc: two of ten +1 (se^2 = 0.16 / 10); copa: ten of twenty
    +1 (se^2 = 0.25 / 20). σ = sqrt(0.016 + 0.0125) / 2 = 0.084410 (twice that summed over the benchmarks
    instead of averaged)."""
    arc = [(1.0, 0.0)] * 2 + [(0.0, 0.0)] * 8
    copa = [(1.0, 0.0)] * 10 + [(1.0, 1.0)] * 10
    a, b = _bench("arc_easy", arc)
    a2, b2 = _bench("copa", copa)
    a.items.update(a2.items)
    b.items.update(b2.items)
    d = C.difference(a, b, "benchmarks_mean.acc", draws=DRAWS)
    assert d["difference"] == pytest.approx((0.2 + 0.5) / 2) and d["items"] == 30
    assert d["sigma_items"] == pytest.approx(math.sqrt(0.016 + 0.0125) / 2, rel=0.02)
    # Each benchmark alone: its own σ.
    assert C.difference(a, b, "copa.acc", draws=DRAWS)["sigma_items"] == pytest.approx(math.sqrt(0.0125), rel=0.02)


def _heldout(bucket_docs: dict[str, list[tuple[int, float, float]]]) -> tuple[C.Experiment, C.Experiment]:
    """Experiments a and b on held-out documents (bytes, bits of b, bits of a - b) per bucket; the log-likelihoods
    are nats (bits x ln 2, negative) as the evaluate stage logs them."""
    a = C.Experiment(name="a", rev="a")
    b = C.Experiment(name="b", rev="b")
    for bucket, docs in bucket_docs.items():
        for i, (nbytes, bits_b, diff) in enumerate(docs):
            b.heldout.setdefault(bucket, {})[f"{bucket}{i}"] = (-bits_b * math.log(2), nbytes)
            a.heldout.setdefault(bucket, {})[f"{bucket}{i}"] = (-(bits_b + diff) * math.log(2), nbytes)
    return a, b


def test_paired_bootstrap_of_heldout_bits_per_byte_by_the_delta_method():
    """Held-out bits per byte is sum(bits) / sum(bytes) per bucket, then the mean over buckets. With a and b
    on the same documents (same bytes), a - b in a draw is sum(y) / sum(x) with y = bits_a - bits_b: a ratio
    estimator, whose σ by the delta method is sqrt(mean((y - r x)^2) / n) / mean(x).

    Bits of b vary a lot from document to document (1 to 3 bits per byte) and cancel in the pair.
      web:  10 documents of 50 bytes, y = 5 +- 5: r = 0.1, residuals +-5: σ = sqrt(25 / 10) / 50 = 0.031623
            (exact here: x is constant, the ratio linear in y).
      code: 20 documents of 100 or 300 bytes, y = 0.1 x +- 10: r = 0.1, residuals +-10:
            σ = sqrt(100 / 20) / 200 = 0.011180 (to first order).
      both: σ = sqrt(0.031623^2 + 0.011180^2) / 2 = 0.016771.
    """
    web = [(50, 50 * (1 + (i % 3)), 5 + (5 if i % 2 else -5)) for i in range(10)]
    code = [(100 if i < 10 else 300, (100 if i < 10 else 300) * (1 + (i % 4) / 2),
             (10 if i < 10 else 30) + (10 if i % 2 else -10)) for i in range(20)]
    a, b = _heldout({"web": web, "code": code})
    web_d = C.difference(a, b, "heldout_bpb.web", draws=DRAWS)
    assert web_d["difference"] == pytest.approx(0.1)
    assert web_d["sigma_items"] == pytest.approx(math.sqrt(2.5) / 50, rel=0.02)
    code_d = C.difference(a, b, "heldout_bpb.code", draws=DRAWS)
    assert code_d["difference"] == pytest.approx(0.1)
    assert code_d["sigma_items"] == pytest.approx(math.sqrt(5) / 200, rel=0.04)  # first order: within 4%
    both = C.difference(a, b, "heldout_bpb", draws=DRAWS)
    assert both["difference"] == pytest.approx(0.1) and both["items"] == 30
    assert both["sigma_items"] == pytest.approx(math.sqrt(0.001 + 0.000125) / 2, rel=0.03)


def test_combined_sigma_and_the_two_sigma_verdict_by_hand():
    """Every item of a is b's plus a constant: the items' σ is 0 (every draw differs by exactly that constant).
    The full runs' noise-window σ 0.3 and 0.4 combine to sqrt(0.09 + 0.16) = 0.5: separated beyond 2σ = 1.0."""
    for shift, separated in ((1.1, True), (0.9, False)):
        pairs = [(1.0 + 0.25 * i + shift, 1.0 + 0.25 * i) for i in range(8)]
        a, b = _bench("arc_easy", pairs, "bpb")
        a.noise, b.noise = {"arc_easy.bpb": 0.3}, {"arc_easy.bpb": 0.4}
        d = C.difference(a, b, "arc_easy.bpb", draws=2000)
        assert d["sigma_items"] == pytest.approx(0.0, abs=1e-9)
        assert d["interval"] == pytest.approx([shift, shift])
        assert (d["sigma_training_a"], d["sigma_training_b"]) == (0.3, 0.4)
        assert d["sigma"] == pytest.approx(0.5)
        assert d["separated"] is separated, shift


def test_training_sigma_is_carried_to_the_metric_by_hand():
    """heldout_bpb's training noise: the run's noise-window σ is in nats per token of its held-out loss, carried
    relatively: 0.2 / 4.0 x 2.0 bits per byte = 0.1; the scouts' relative seed spread 0.03 x 2.0 = 0.06; the
    larger wins (0.1), or the seed spread when it is larger (0.08 x 2.0 = 0.16). A benchmark metric's window σ is
    in its own unit: taken as it is."""
    e = C.Experiment(name="e", rev="e", noise={"heldout_mean": 0.2, "arc_easy.acc": 0.02}, heldout_loss=4.0,
                     seed_noise={"heldout_mean": 0.03, "arc_easy.acc": 0.1})
    assert C.training_sigma(e, "heldout_bpb", 2.0) == pytest.approx(0.1)
    assert C.training_sigma(e, "heldout_bpb.code", 2.0) == pytest.approx(0.1)
    e.seed_noise["heldout_mean"] = 0.08
    assert C.training_sigma(e, "heldout_bpb", 2.0) == pytest.approx(0.16)
    # acc 0.4: the window's 0.02 against the seed spread's 0.1 x 0.4 = 0.04.
    assert C.training_sigma(e, "arc_easy.acc", 0.4) == pytest.approx(0.04)
    assert C.training_sigma(C.Experiment(name="x", rev="x"), "arc_easy.acc", 0.4) == 0.0


def test_seed_replicas_spread_is_the_sample_sd_by_hand():
    """Three full runs of one recipe score bpb 1.0, 1.2 and 1.4: their spread is the sample sd (n - 1),
    sqrt((0.04 + 0 + 0.04) / 2) = 0.2 (0.163 over n), every replica's training noise."""
    exps = []
    for name, value, recipe in (("r0", 1.0, "same"), ("r1", 1.2, "same"), ("r2", 1.4, "same"), ("other", 3.0, "x")):
        exps.append(C.Experiment(name=name, rev=name, recipe=recipe,
                                 items={"arc_easy": {f"i{k}": {"bpb": value} for k in range(5)}}))
    out = C.compare(exps, "arc_easy.bpb")
    sigma = {r["name"]: r["sigma_training"] for r in out["ranking"]}
    assert sigma == pytest.approx({"r0": 0.2, "r1": 0.2, "r2": 0.2, "other": 0.0})


class _Files:
    """A revision's files as compare reads them (DVCFileSystem's ls and open), from a dict of JSON documents."""

    def __init__(self, files: dict[str, dict]):
        self.files = files

    def ls(self, path: str, detail: bool = False) -> list[str]:
        prefix = path.rstrip("/") + "/"
        children = sorted({"/" + prefix + p[len(prefix):].split("/", 1)[0] for p in self.files if p.startswith(prefix)})
        if not children:
            raise FileNotFoundError(path)
        return children

    def open(self, path: str, mode: str = "r"):
        if path not in self.files:
            raise FileNotFoundError(path)
        return io.StringIO(json.dumps(self.files[path]))


def test_scouts_seed_spread_is_relative_and_from_the_largest_seeded_rung_by_hand():
    """The largest scout rung trained with several seeds gives each metric's seed σ relative to its mean:
    held-out loss 3.0, 3.2, 3.4 (mean 3.2, sample sd 0.2): 0.0625; acc 0.30, 0.34, 0.38 (mean 0.34, sd 0.04):
    0.117647. The smaller rung (params 10) and the larger one with one finished seed (params 99) are not used."""
    def summary(params, loss, acc):
        return {"params": params, "heldout_loss": {"code": loss - 0.5, "web": loss + 0.5},
                "benchmarks_mean": {"acc": acc, "acc_stderr": 0.05}}

    files = {
        "data/train/scout/s1/summary.json": summary(10, 5.0, 0.1),
        "data/train/scout/s1/replicas/seed1/summary.json": summary(10, 9.0, 0.9),
        "data/train/scout/s2/summary.json": summary(20, 3.0, 0.30),
        "data/train/scout/s2/replicas/seed1/summary.json": summary(20, 3.2, 0.34),
        "data/train/scout/s2/replicas/seed2/summary.json": summary(20, 3.4, 0.38),
        "data/train/scout/s3/summary.json": summary(99, 1.0, 0.9),
        "data/train/scout/s3/replicas/seed1/run.json": {},  # a replica that has not finished: no summary
    }
    noise, source = C._seed_noise(_Files(files), "rev", "exp")
    assert noise == pytest.approx({"heldout_mean": 0.2 / 3.2, "benchmarks_mean.acc": 0.04 / 0.34})
    assert source == ("s2", 3, 0)  # the verdict names where the σ came from and how many seeds it rests on
    # A seed record that measured s2 (the same parameter count) with 6 seeds at a relative σ of 0.1 on the held-out
    # loss: pooled by degrees of freedom, (2 x 0.0625^2 + 5 x 0.1^2) / 7 = 0.0082589 -> 0.0908789; acc, which
    # the record lacks, keeps the rung's own. A record of another shape of s2 (params 21) is not this rung's.
    record = {"rungs": {"s2": {"params": 20, "seeds": 6, "relative_sigma": {"heldout_mean": 0.1}},
                        "s1": {"params": 10, "seeds": 6, "relative_sigma": {"heldout_mean": 0.5}}}}
    noise, source = C._seed_noise(_Files(files), "rev", "exp", record)
    assert noise == pytest.approx({"heldout_mean": 0.0908789, "benchmarks_mean.acc": 0.04 / 0.34}, rel=1e-5)
    assert source == ("s2", 3, 6)
    record["rungs"]["s2"]["params"] = 21
    assert C._seed_noise(_Files(files), "rev", "exp", record) == (pytest.approx(
        {"heldout_mean": 0.2 / 3.2, "benchmarks_mean.acc": 0.04 / 0.34}), ("s2", 3, 0))
