"""Planted canaries (tokenmill.canaries): planned exactly as configured, and measured so that memorisation shows.

The last test trains a real model on real text with canaries planted at 0 (controls, never planted), 1 and 96
visits: a secret the model read 96 times must rank far above random secrets of its format, and above every
control, which only the model's prior over digit strings ranks.
"""

from __future__ import annotations

import math

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from train_helpers import build_corpus, tiny_run

from tokenmill import canaries
from tokenmill.mixture import build_plan, parse_phases
from tokenmill.mixture.params import Mixture
from tokenmill.tokenize import INDEX
from tokenmill.canaries import Canaries

CONFIG = {"sets": 3, "visits": [0, 1, 96], "digits": 8, "candidates": 255, "seed": 0}


def _index(n: int) -> list[dict]:
    return [{"doc_id": f"web-{i:03d}", "source": "web", "bucket": "web", "shard": "tokens/web/0.bin",
             "offset": 100 * i, "length": 99} for i in range(n)]


def test_each_canary_is_planned_exactly_its_visits_spread_over_the_stream_and_never_held_out():
    design = canaries.design(Canaries.resolve({**CONFIG, "visits": [1, 3, 40]}))
    rows = _index(200) + [{"doc_id": c["doc_id"], "source": "canary", "bucket": "canary",
                           "shard": canaries.SHARD, "offset": 30 * i, "length": 29} for i, c in enumerate(design)]
    mixture = Mixture.resolve({"name": "t", "phases": {"bulk": {"fraction": 1.0, "weights": {"web": 1.0}}}})
    phases = parse_phases(mixture.phases)
    visits = {c["doc_id"]: c["planned_visits"] for c in design}
    index = pa.Table.from_pylist(rows, schema=INDEX)
    without = build_plan(pa.Table.from_pylist(rows[:200], schema=INDEX), phases, 60_000, 5, heldout_fraction=0.1)
    got = build_plan(index, phases, 60_000, 5, heldout_fraction=0.1, canaries=visits)
    plan = got["plan"].to_pylist()
    for doc_id, k in visits.items():
        positions = [r["position"] for r in plan if r["doc_id"] == doc_id]
        assert len(positions) == k and [r["epoch"] for r in plan if r["doc_id"] == doc_id] == list(range(k))
        if k == 40:  # spread: the visits reach both ends of the stream, not one block
            assert positions[0] < len(plan) * 0.15 and positions[-1] > len(plan) * 0.85
    assert not set(visits) & set(got["heldout"].column("doc_id").to_pylist())
    # The other documents keep the plan they had without canaries, in the same order.
    assert [r["doc_id"] for r in plan if r["bucket"] != "canary"] == without["plan"].column("doc_id").to_pylist()
    ends = [r["stream_start"] + r["length"] + 1 for r in plan]
    assert [r["stream_start"] for r in plan[1:]] == ends[:-1]  # one stream, no gap, no overlap


def test_exposure_is_log2_of_the_candidates_over_the_rank():
    lls = [-20.0 - i for i in range(255)]  # candidates at -20 ... -274
    assert canaries.exposure(-10.0, lls)["exposure"] == pytest.approx(8.0)  # likelier than all 255: rank 1
    assert canaries.exposure(-300.0, lls)["exposure"] == 0.0  # less likely than all: rank 256
    middle = canaries.exposure(-147.5, lls)  # above 128 of the 255
    assert middle["rank"] == 129 and middle["exposure"] == pytest.approx(math.log2(256 / 129))
    # Beyond the sample's resolution the normal fit goes on: 10 standard deviations is ~78 bits, not 8.
    far = canaries.exposure(-147.0 + 10 * 73.75, lls)
    assert far["exposure"] == pytest.approx(8.0) and 70 < far["exposure_fit"] < 90


@pytest.mark.slow  # trains a model for ~370 steps and scores 2,300 requests (about 15 s)
def test_a_canary_read_96_times_is_exposed_far_above_the_unplanted_controls(tmp_path):
    from tokenmill.train.loop import train

    corpus = build_corpus(tmp_path, token_budget=60_000, canaries=CONFIG)
    train(tiny_run(checkpoint={"interval": 10_000}), corpus, tmp_path / "run", None)
    rows = pq.read_table(tmp_path / "run" / "canaries.parquet").to_pylist()
    by = {v: [r for r in rows if r["planned_visits"] == v] for v in CONFIG["visits"]}
    assert {v: len(g) for v, g in by.items()} == {0: 3, 1: 3, 96: 3}
    assert all(r["candidates"] == 255 and 1 <= r["rank"] <= 256 for r in rows)
    mean = {v: sum(r["exposure"] for r in g) / 3 for v, g in by.items()}
    # Measured: 96 visits 8.0, 8.0, 4.0 bits; controls 0.3-1.8; one visit 0.3-1.9 (the prior, not memory).
    assert mean[96] > mean[0] + 3 and min(r["exposure"] for r in by[96]) > max(r["exposure"] for r in by[0])
    # Read 96 times: the median one likelier than all but at most two of 255 random secrets (measured: rank 1).
    assert sorted(r["rank"] for r in by[96])[1] <= 3
