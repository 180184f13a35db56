"""Signal and noise over a ladder (tokenmill.evaluate.signal) and the decision metric the track record picks
(tokenmill.evaluate.track), on hand-made figures whose answers are worked out here by hand."""

from __future__ import annotations

import math

import pytest

from tokenmill.evaluate.signal import combine_replicas, ladder_table, separated
from tokenmill.evaluate.track import caveat, decision_metric


def test_signal_noise_snr_and_order_by_hand():
    # Runs in order of compute. heldout_mean falls with compute (lower is better): order +1.
    # benchmarks_mean.prob_norm is further from its noise but ranks the ladder backwards: order -1.
    ladder = {
        "scout/s1": {"heldout_mean": (6.0, 0.10), "benchmarks_mean.prob_norm": (0.40, 0.001)},
        "scout/s2": {"heldout_mean": (5.5, 0.20), "benchmarks_mean.prob_norm": (0.35, 0.001)},
        "pretrain": {"heldout_mean": (5.0, 0.20), "benchmarks_mean.prob_norm": (0.30, 0.001)},
    }
    rows = {r["metric"]: r for r in ladder_table(ladder)}
    held = rows["heldout_mean"]
    assert held["signal"] == pytest.approx(1.0)
    assert held["noise"] == pytest.approx(math.sqrt((0.01 + 0.04 + 0.04) / 3))  # 0.1732
    assert held["snr"] == pytest.approx(1.0 / 0.17320508)
    assert held["order"] == 1.0 and held["lower_is_better"]
    prob = rows["benchmarks_mean.prob_norm"]
    assert prob["snr"] == pytest.approx(100.0) and prob["order"] == -1.0
    # One pair out of order of three: tau = (2 - 1) / 3.
    ladder["scout/s2"]["heldout_mean"] = (6.2, 0.2)
    assert {r["metric"]: r for r in ladder_table(ladder)}["heldout_mean"]["order"] == pytest.approx(1 / 3)


def test_seed_replicas_pool_the_larger_noise():
    a = {"heldout_mean": (6.0, 0.01)}
    b = {"heldout_mean": (6.2, 0.03)}
    value, sigma = combine_replicas([a, b])["heldout_mean"]
    assert value == pytest.approx(6.1)
    assert sigma == pytest.approx(math.sqrt(0.02))  # seeds: sd of (6.0, 6.2) = 0.1414 > window RMS 0.0224
    c = {"heldout_mean": (6.0, 0.5)}
    assert combine_replicas([a, c])["heldout_mean"][1] == pytest.approx(math.sqrt((0.01 ** 2 + 0.5 ** 2) / 2))


def test_two_runs_are_told_apart_beyond_two_combined_sigma():
    assert separated((6.0, 0.1), (5.5, 0.2))  # 0.5 > 2 x 0.2236
    assert not separated((6.0, 0.2), (5.5, 0.2))  # 0.5 < 2 x 0.2828


def test_the_track_record_picks_the_decision_metric_where_it_measured_the_candidates():
    """Over measured recipe pairs the rungs ordered bpb as the full run did 11 times in 12 and the held-out loss
    2 times in 6: bpb decides. prob_norm was never separated from the full run's noise: not measured."""
    def entry(separated, agreed):
        return {"pairs": 6, "separated": separated, "agreed": agreed, "agreed_all_pairs": agreed, "compute_fraction": 0.1}

    record = {"rungs": {
        "s1": {"heldout_mean": entry(2, 1), "benchmarks_mean.bpb": entry(4, 4), "benchmarks_mean.prob_norm": entry(0, 0)},
        "s2": {"heldout_mean": entry(2, 0), "benchmarks_mean.bpb": entry(4, 4), "heldout.code": entry(9, 9)},
        "s3": {"heldout_mean": entry(2, 1), "benchmarks_mean.bpb": entry(4, 3)}}}
    # heldout.code agreed 9 of 9, but a bucket's loss is not a candidate: a mixture moves it by design.
    assert decision_metric(record) == "benchmarks_mean.bpb"
    # A tie in agreement goes to the candidate with more separated pairs.
    record["rungs"]["s3"]["heldout_mean"] = entry(8, 8)
    record["rungs"]["s1"]["heldout_mean"] = entry(2, 2)
    record["rungs"]["s2"]["heldout_mean"] = entry(2, 2)
    record["rungs"]["s3"]["benchmarks_mean.bpb"] = entry(5, 5)
    assert decision_metric(record) == "benchmarks_mean.bpb"  # 13 of 13 against 12 of 12
    # 12 of 12 each: the earlier candidate, the held-out loss.
    record["rungs"]["s3"]["benchmarks_mean.bpb"] = entry(4, 4)
    assert decision_metric(record) == "heldout_mean"
    record["rungs"]["s3"]["heldout_mean"] = entry(7, 7)
    assert decision_metric(record) == "benchmarks_mean.bpb"  # 12 of 12 against 11 of 11: more pairs
    # No record, or one that separated no pair of any candidate: the held-out loss.
    assert decision_metric(None) == "heldout_mean"
    assert decision_metric({"rungs": {"s1": {m: entry(0, 0) for m in ("heldout_mean", "benchmarks_mean.bpb")}}}) \
        == "heldout_mean"



def test_a_ladder_that_ranks_the_decision_metric_backwards_or_lacks_it_is_named():
    """The metric stays the record's; the evaluate stage says what this ladder holds against it."""
    backwards = {"scout/s1": {"heldout_mean": (6.0, 0.1), "benchmarks_mean.bpb": (3.4, 0.1)},
                 "pretrain": {"heldout_mean": (5.0, 0.1), "benchmarks_mean.bpb": (3.5, 0.1)}}
    rows = {r["metric"]: r for r in ladder_table(backwards)}
    assert caveat("heldout_mean", rows) is None  # the full run better: order +1
    assert "does not rank benchmarks_mean.bpb by compute (Kendall's tau -1.0)" in caveat("benchmarks_mean.bpb", rows)
    assert "not every run of the ladder records the decision metric benchmarks_mean.acc" in \
        caveat("benchmarks_mean.acc", rows)
    tied = {"scout/s1": {"heldout_mean": (5.0, 0.1)}, "pretrain": {"heldout_mean": (5.0, 0.1)}}
    assert "Kendall's tau 0.0" in caveat("heldout_mean", {r["metric"]: r for r in ladder_table(tied)})
