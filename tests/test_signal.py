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
