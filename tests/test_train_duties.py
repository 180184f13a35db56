"""The training loop's periodic duties (tokenmill.train.loop): the recorded run they must reproduce exactly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import loop_golden
from train_helpers import shared_text


def _canonical(value) -> str:
    return json.dumps(value, sort_keys=True)  # NaN compares equal to NaN as text


def test_the_refactored_loop_reproduces_the_recorded_run_exactly(tmp_path):
    """tests/loop_golden.py's scenario (every duty of the loop in one tiny run: evaluations with benchmarks at
    the noise window, asynchronous checkpoints, health probes and an injected embedding collapse, a weight
    corruption, a poisoned update rolled back, a stop and a resume, DVCLive, canaries), against
    tests/loop_golden.json, which the loop of commit 96e4b84 (the 262-line _run, before its duties were split
    out) recorded; recorded twice, and once more in another directory, byte-identical each time. Steps, losses,
    gradient norms, learning rates, skips, held-out and benchmark scores, rollbacks, health rows and alarms,
    canary exposures, printed lines, the DVCLive series, the sha256 of every checkpoint's tensors and trainer
    state and of the final weights: all equal, exactly."""
    shared_text()  # skips (or fails under CI=true) without the shared data
    golden = json.loads(loop_golden.GOLDEN.read_text())
    here = loop_golden.fingerprint()
    if here != golden["fingerprint"]:
        pytest.skip(f"the record's floats come from {golden['fingerprint']}, this is {here}: rerecord it with "
                    f"tests/loop_golden.py at commit {golden['recorded_at_commit'][:7]} to compare here")
    got = loop_golden.run_in_subprocess(tmp_path)
    for key in sorted(set(golden) - {"recorded_at_commit", "fingerprint"}):
        if key == "tables":
            for name in sorted(golden["tables"]):
                assert _canonical(got["tables"][name]) == _canonical(golden["tables"][name]), f"table {name}"
        elif key == "live":
            for name in sorted(set(golden["live"]) | set(got["live"])):
                assert _canonical(got["live"].get(name)) == _canonical(golden["live"].get(name)), f"DVCLive {name}"
        else:
            assert _canonical(got[key]) == _canonical(golden[key]), key
    assert set(got) == set(golden) - {"recorded_at_commit"}
