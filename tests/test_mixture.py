"""The sampling plan (contract 9): deterministic, proportional, never held-out, within the epoch cap."""

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from tokenmill.mixture import MixtureError, build_plan, document_bucket_weights, parse_phases

BUCKETS = {"web/high": 400, "web/low": 900, "code": 500, "reference": 150}


def _index(seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    rows = []
    for bucket, n in BUCKETS.items():
        lengths = rng.integers(20, 3000, n)
        for i, length in enumerate(lengths):
            rows.append({"doc_id": f"{bucket}-{i:05d}", "bucket": bucket, "shard": f"tokens/{bucket}/s.bin",
                         "offset": int(i * 3001), "length": int(length)})
    return pa.Table.from_pylist(rows)


PHASES = parse_phases({
    "bulk": {"fraction": 0.8, "weights": {"web/high": 0.3, "web/low": 0.3, "code": 0.3, "reference": 0.1}},
    "anneal": {"fraction": 0.2, "weights": {"web/high": 0.5, "reference": 0.5}},
})
BUDGET = 2_000_000


def _plan(index=None, **kw):
    args = dict(phases=PHASES, token_budget=BUDGET, seed=11, max_epochs=4.0, heldout_fraction=0.02)
    args.update(kw)
    return build_plan(_index() if index is None else index, **args)


def test_identical_across_runs_and_input_order():
    a = _plan()["plan"]
    shuffled = _index().take(np.random.default_rng(5).permutation(sum(BUCKETS.values())))
    b = _plan(index=shuffled)["plan"]
    assert a.equals(b)
    assert not a.equals(_plan(seed=12)["plan"])  # the seed matters


def test_weights_respected_per_phase():
    plan = _plan()["plan"]
    for phase in PHASES:
        rows = plan.filter(pc.equal(plan["phase"], phase.name))
        total = pc.sum(pc.add(rows["length"], 1)).as_py()
        assert abs(total - BUDGET * phase.fraction) / (BUDGET * phase.fraction) < 0.01
        for bucket, w in phase.weights.items():
            got = pc.sum(pc.add(rows.filter(pc.equal(rows["bucket"], bucket))["length"], 1)).as_py()
            # Stated tolerance: within 1% of the phase's tokens (a bucket overshoots by at most one document).
            assert abs(got / total - w / sum(phase.weights.values())) < 0.01, (phase.name, bucket)


def test_buckets_are_interleaved_not_blocked():
    plan = _plan()["plan"].to_pylist()
    bulk = [r["bucket"] for r in plan if r["phase"] == "bulk"]
    # Every window of 40 documents holds the three big buckets of the bulk phase.
    for start in range(0, len(bulk) - 40, 40):
        assert {"web/high", "web/low", "code"} <= set(bulk[start:start + 40])


def test_held_out_documents_are_never_planned():
    result = _plan(heldout_fraction=0.05)
    held = set(result["heldout"]["doc_id"].to_pylist())
    assert held and not held & set(result["plan"]["doc_id"].to_pylist())
    for bucket in BUCKETS:  # reserved in every bucket, about the asked fraction
        n = sum(1 for d in held if d.startswith(bucket + "-"))
        assert 0 < n < 0.12 * BUCKETS[bucket]
    # Held-out membership is per document: it does not change when other documents are added or removed.
    smaller = _index().filter(pc.invert(pc.starts_with(_index()["doc_id"], "code-")))
    held_small = set(_plan(index=smaller, heldout_fraction=0.05, phases=parse_phases(
        {"bulk": {"fraction": 1.0, "weights": {"web/high": 1}}}))["heldout"]["doc_id"].to_pylist())
    assert held_small == {d for d in held if not d.startswith("code-")}


def test_epoch_cap_fails_clearly_and_repeats_are_counted():
    with pytest.raises(MixtureError, match="bucket 'reference' would be repeated .* max_epochs is 1.5"):
        _plan(max_epochs=1.5)
    plan = _plan(max_epochs={"default": 4, "reference": 4})["plan"]
    ref = plan.filter(pc.equal(plan["bucket"], "reference")).to_pylist()
    epochs = max(r["epoch"] for r in ref)
    assert epochs >= 1  # reference is small: it is repeated
    # A document is never repeated before every document of its bucket has been seen once.
    first_epoch = [r["doc_id"] for r in ref if r["epoch"] == 0]
    assert len(first_epoch) == len(set(first_epoch))


def test_stream_offsets_are_contiguous():
    plan = _plan()["plan"]
    start = plan["stream_start"].to_numpy()
    length = plan["length"].to_numpy()
    assert start[0] == 0 and np.array_equal(start[1:], start[:-1] + length[:-1] + 1)
    assert plan["position"].to_pylist() == list(range(plan.num_rows))


def test_buckets_the_corpus_lacks_are_renormalised_away():
    """A preset weighting a bucket the corpus lacks (a crawl has no code) plans over the buckets that exist, in
    proportion to their weights, and names the missing ones; a phase with nothing left is an error."""
    phases = parse_phases({"p": {"fraction": 1.0, "weights": {"books": 0.5, "web/high": 0.25, "code": 0.25}}})
    result = _plan(phases=phases)
    assert result["missing"] == ["books"]
    planned = {b: 0 for b in BUCKETS}
    for b, n in zip(result["plan"]["bucket"].to_pylist(), result["plan"]["length"].to_pylist()):
        planned[b] += n + 1
    assert planned["web/low"] == planned["reference"] == 0
    # half each, as 0.25 : 0.25 renormalised; each bucket overshoots its quota by at most one document
    assert abs(planned["web/high"] - BUDGET / 2) < 3001 and abs(planned["code"] - BUDGET / 2) < 3001
    with pytest.raises(MixtureError, match="phase 'p' weights only buckets with no documents \\(books\\)"):
        _plan(phases=parse_phases({"p": {"fraction": 1.0, "weights": {"books": 1.0}}}))


def test_bad_phases():
    with pytest.raises(MixtureError, match="must sum to 1"):
        parse_phases({"p": {"fraction": 0.5, "weights": {"code": 1}}})
    with pytest.raises(MixtureError, match=r"mixture\.phases\.p\.weight: unknown parameter"):
        parse_phases({"p": {"fraction": 1.0, "weight": {"code": 1}}})


def test_document_bucket_weights_fold_tiers():
    assert document_bucket_weights({"web/high": 0.3, "web/low": 0.2, "code": 0.5}) == {"code": 0.5, "web": 0.5}
