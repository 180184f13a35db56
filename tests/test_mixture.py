"""The sampling plan (contract 9): deterministic, proportional, never held-out, within the epoch cap."""

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from tokenmill.mixture import MixtureError, build_plan, document_bucket_weights
from tokenmill.mixture import parse_phases as _parse_phases
from tokenmill.mixture.params import Mixture
from tokenmill.runtime import ParamError

def parse_phases(phases: dict) -> list:
    """The plan's phases of a `mixture.phases` mapping, resolved as the stage script resolves its section."""
    return _parse_phases(Mixture.resolve({"name": "t", "phases": phases}).phases)


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
    with pytest.raises(ParamError, match="mixture.phases: the fractions must sum to 1"):
        Mixture.resolve({"name": "t", "phases": {"p": {"fraction": 0.5, "weights": {"code": 1}}}})
    with pytest.raises(ParamError, match=r"mixture\.phases\.p\.weight: unknown parameter"):
        Mixture.resolve({"name": "t", "phases": {"p": {"fraction": 1.0, "weight": {"code": 1}}}})


def test_document_bucket_weights_fold_tiers():
    assert document_bucket_weights({"web/high": 0.3, "web/low": 0.2, "code": 0.5}) == {"code": 0.5, "web": 0.5}


# ---------------------------------------------------------------------------------------------------------
# A bucket's own epoch cap (mixture.max_epochs.<bucket>), below and above the default cap (issue 40): the
# planned repetitions of each bucket, counted in the plan, against its cap and its available tokens counted here.


def _capped_index() -> pa.Table:
    """code: 50 documents, web: 80 documents of uneven lengths (so a phase's quota ends inside a document)."""
    rng = np.random.default_rng(3)
    rows = [{"doc_id": f"{bucket}-{i:03d}", "bucket": bucket, "shard": "s.bin", "offset": 0, "length": int(n)}
            for bucket, count, high in (("code", 50, 400), ("web", 80, 170))
            for i, n in enumerate(rng.integers(50, high, count))]
    return pa.Table.from_pylist(rows)


def _available(index: pa.Table) -> dict[str, int]:
    """Tokens of each bucket read once: its documents' lengths, each + 1 for the end-of-text."""
    out: dict[str, int] = {}
    for r in index.to_pylist():
        out[r["bucket"]] = out.get(r["bucket"], 0) + r["length"] + 1
    return out


def _visits(plan: pa.Table, bucket: str) -> tuple[int, int]:
    """(planned tokens of the bucket, the most times one of its documents is read)."""
    rows = [r for r in plan.to_pylist() if r["bucket"] == bucket]
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["doc_id"]] = counts.get(r["doc_id"], 0) + 1
    return sum(r["length"] + 1 for r in rows), max(counts.values())


TWO_PHASES = {"bulk": {"fraction": 0.7, "weights": {"code": 0.5, "web": 0.5}},
              "anneal": {"fraction": 0.3, "weights": {"code": 0.5, "web": 0.5}}}


def test_a_bucket_cap_below_the_default_caps_that_bucket_alone():
    """max_epochs {code: 2} (default 4) with a budget too large for the corpus, derived (cap_budget): code, half
    of every phase, runs out first, at 2 x its tokens, so the budget is 2 x available(code) / 0.5; web, given the
    same tokens from fewer, is read about 2.9 times, past code's cap and within the default's."""
    index = _capped_index()
    avail = _available(index)
    assert 2 < 2 * avail["code"] / avail["web"] < 3  # web's epochs at code's cap: 2.43, between 2 and the default 4
    caps = Mixture.resolve({"name": "t", "phases": TWO_PHASES, "max_epochs": {"code": 2}}).max_epochs
    assert caps == {"default": 4, "code": 2}  # the bucket's cap merged over the default
    result = build_plan(index, parse_phases(TWO_PHASES), 10**9, seed=7, max_epochs=caps, cap_budget=True)
    assert result["capped_by"] == "code"
    assert 4 * avail["code"] - 2 <= result["token_budget"] <= 4 * avail["code"]
    code_tokens, code_reads = _visits(result["plan"], "code")
    assert code_tokens <= 2 * avail["code"] and code_reads <= 2  # within its own cap, in every phase together
    assert code_tokens >= 2 * avail["code"] - 2 * 401  # and up to it: short of it by under a document per phase
    web_tokens, web_reads = _visits(result["plan"], "web")
    assert 2 < web_tokens / avail["web"] < 4 and web_reads == 3  # the default cap, not code's
    # Asked for (no cap_budget), a budget that would read code 2.5 times fails, naming code and its own cap.
    with pytest.raises(MixtureError, match=r"bucket 'code' would be repeated 2\.50 times .* max_epochs is 2"):
        build_plan(index, parse_phases(TWO_PHASES), 5 * avail["code"], seed=7, max_epochs=caps)


def test_a_bucket_cap_above_the_default_lets_that_bucket_alone_repeat_more():
    """max_epochs {code: 6} (default 4): a budget reading code 5 times plans (the default would refuse it), 7
    times fails naming code's cap 6; web at 5 epochs fails at the default 4."""
    index = _capped_index()
    avail = _available(index)
    caps = {"default": 4, "code": 6}
    heavy = {"bulk": {"fraction": 0.7, "weights": {"code": 0.8, "web": 0.2}},
             "anneal": {"fraction": 0.3, "weights": {"code": 0.8, "web": 0.2}}}
    budget = int(5 * avail["code"] / 0.8)  # code's share 0.8: 5 epochs; web's 0.2: under 4 (1.25 x 5 x code / web)
    result = build_plan(index, parse_phases(heavy), budget, seed=7, max_epochs=caps)
    code_tokens, code_reads = _visits(result["plan"], "code")
    # 5 epochs, give or take a document per phase (each phase's quota ends inside one)
    assert abs(code_tokens - 5 * avail["code"]) <= 2 * 401 and code_reads in (5, 6)
    web_tokens, _ = _visits(result["plan"], "web")
    assert web_tokens / avail["web"] < 4
    with pytest.raises(MixtureError, match=r"bucket 'code' would be repeated 4\.80 times .* max_epochs is 4"):
        build_plan(index, parse_phases(heavy), int(4.8 * avail["code"] / 0.8), seed=7, max_epochs={"default": 4})
    with pytest.raises(MixtureError, match=r"bucket 'code' would be repeated 7\.00 times .* max_epochs is 6"):
        build_plan(index, parse_phases(heavy), 7 * avail["code"] * 5 // 4, seed=7, max_epochs=caps)
    # Derived: the budget grows to code's own cap 6, where the default would have stopped it at 4.
    capped = build_plan(index, parse_phases(heavy), 10**9, seed=7, max_epochs=caps, cap_budget=True)
    assert capped["capped_by"] == "code" and abs(capped["token_budget"] - 6 * avail["code"] / 0.8) <= 2
    code_tokens, code_reads = _visits(capped["plan"], "code")
    assert 5.9 < code_tokens / avail["code"] <= 6 and code_reads <= 6
    # web's own share at 5 epochs is past the default cap of 4: refused, naming web.
    even = int(5 * avail["web"] / 0.5)
    assert even * 0.5 / avail["code"] < 6
    with pytest.raises(MixtureError, match=r"bucket 'web' would be repeated 5\.00 times .* max_epochs is 4"):
        build_plan(index, parse_phases(TWO_PHASES), even, seed=7, max_epochs=caps)


def test_tagged_documents_are_kept_out_of_the_named_phase_only():
    """mixture.exclude_tagged_from: [anneal] places no tagged document in the anneal; the bulk is planned exactly
    as without the setting, and the anneal still fills its quota and weights from the untagged documents."""
    index = _index()
    tagged = frozenset(f"web/high-{i:05d}" for i in range(0, 400, 3)) | frozenset(f"reference-{i:05d}" for i in range(0, 150, 2))
    plain = _plan()["plan"]
    kept_out = _plan(excluded={"anneal": tagged})["plan"]
    def rows(plan, phase):
        return plan.filter(pc.equal(plan["phase"], phase))
    assert rows(kept_out, "bulk").equals(rows(plain, "bulk"))
    anneal = rows(kept_out, "anneal")
    assert not set(anneal["doc_id"].to_pylist()) & tagged
    assert set(rows(plain, "anneal")["doc_id"].to_pylist()) & tagged  # without it the anneal holds tagged ones
    assert set(rows(kept_out, "bulk")["doc_id"].to_pylist()) & tagged  # tagged, not dropped: the bulk reads them
    total = pc.sum(pc.add(anneal["length"], 1)).as_py()
    assert abs(total - BUDGET * 0.2) / (BUDGET * 0.2) < 0.01
    high = pc.sum(pc.add(anneal.filter(pc.equal(anneal["bucket"], "web/high"))["length"], 1)).as_py()
    assert abs(high / total - 0.5) < 0.01
    # A phase left with no document of a weighted bucket is an error naming both.
    everything = frozenset(f"reference-{i:05d}" for i in range(150))
    with pytest.raises(MixtureError, match="phase 'anneal' excludes every document of bucket 'reference'"):
        _plan(excluded={"anneal": everything})
    with pytest.raises(ParamError, match="mixture.exclude_tagged_from: expected phases of this mixture"):
        Mixture.resolve({"name": "t", "phases": {"all": {"fraction": 1.0, "weights": {"code": 1}}},
                         "exclude_tagged_from": ["anneal"]})
