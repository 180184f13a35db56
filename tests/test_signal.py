"""Signal, noise and the decision metric over a ladder (tokenmill.evaluate.signal), on hand-made figures whose
answers are worked out here by hand."""

from __future__ import annotations

import math

import pytest

from tokenmill.evaluate.signal import combine_replicas, decision_metric, ladder_table, separated


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
    # The highest SNR ranks backwards, so the decision rests on the held-out loss.
    assert decision_metric(list(rows.values())) == "heldout_mean"
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
    """heldout_mean has the higher SNR, but over measured recipe pairs the rungs ordered bpb as the full run did
    11 times in 12 and the held-out loss 2 in 6: bpb decides. A record that separated no pair of a candidate, or
    a candidate whose ladder runs backwards, leaves the choice to SNR."""
    ladder = {
        "scout/s1": {"heldout_mean": (6.0, 0.01), "benchmarks_mean.bpb": (4.0, 0.1), "benchmarks_mean.prob_norm": (0.4, 0.001)},
        "scout/s2": {"heldout_mean": (5.5, 0.01), "benchmarks_mean.bpb": (3.8, 0.1), "benchmarks_mean.prob_norm": (0.35, 0.001)},
        "pretrain": {"heldout_mean": (5.0, 0.01), "benchmarks_mean.bpb": (3.5, 0.1), "benchmarks_mean.prob_norm": (0.3, 0.001)},
    }
    rows = ladder_table(ladder)
    assert decision_metric(rows) == "heldout_mean"

    def entry(separated, agreed):
        return {"pairs": 6, "separated": separated, "agreed": agreed, "agreed_all_pairs": agreed, "compute_fraction": 0.1}

    record = {"rungs": {
        "s1": {"heldout_mean": entry(2, 1), "benchmarks_mean.bpb": entry(4, 4), "benchmarks_mean.prob_norm": entry(5, 5)},
        "s2": {"heldout_mean": entry(2, 0), "benchmarks_mean.bpb": entry(4, 4), "benchmarks_mean.prob_norm": entry(5, 5)},
        "s3": {"heldout_mean": entry(2, 1), "benchmarks_mean.bpb": entry(4, 3)}}}
    # prob_norm agreed 10 of 10 but ranks this ladder backwards (order -1): not a candidate.
    assert decision_metric(rows, record) == "benchmarks_mean.bpb"
    # A tie in agreement goes to the candidate with more separated pairs.
    record["rungs"]["s3"]["heldout_mean"] = entry(8, 8)
    record["rungs"]["s1"]["heldout_mean"] = entry(2, 2)
    record["rungs"]["s2"]["heldout_mean"] = entry(2, 2)
    record["rungs"]["s3"]["benchmarks_mean.bpb"] = entry(5, 5)
    assert decision_metric(rows, record) == "benchmarks_mean.bpb"  # 13 of 13 against 12 of 12
    record["rungs"]["s3"]["benchmarks_mean.bpb"] = entry(4, 4)
    assert decision_metric(rows, record) == "heldout_mean"  # 12 of 12 each: the higher SNR
    nothing = {"rungs": {"s1": {m: entry(0, 0) for m in ("heldout_mean", "benchmarks_mean.bpb")}}}
    assert decision_metric(rows, nothing) == "heldout_mean"
