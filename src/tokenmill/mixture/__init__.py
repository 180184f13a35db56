"""The sampling plan: which documents training reads, in which order, in which phase (contract 9).

The plan is a pure function of (token index, weights, token budget, phases, seed): no clock, no global RNG,
no dependence on file order. Training reads it front to back as one token stream (each document followed
by end-of-text), cut into steps of `tokens_per_step`, so the batch of any step can be recomputed from the
plan alone (`tokenmill audit step N`).

How a plan is built, per phase:
  1. every bucket's share of the phase budget is weight x phase tokens;
  2. a bucket's documents (held-out ones excluded) are visited in a seeded random order per epoch, and the
     bucket's stream carries on across phases, so the anneal phase sees documents the bulk phase did not
     before it repeats any;
  3. buckets are interleaved smoothly: each document is placed at the fraction of its bucket's phase quota
     it reaches, and the phase is sorted by that position (stride scheduling), so every window of the
     stream holds the buckets in their proportions.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tokenmill.mixture.params import Phase as PhaseParams
from tokenmill.train import config


class MixtureError(ValueError):
    """A mixture that cannot be planned; the message says which bucket and why."""


PLAN = pa.schema([
    ("position", pa.int64()),  # order in the training stream
    ("phase", pa.string()),
    ("bucket", pa.string()),
    ("doc_id", pa.string()),
    ("epoch", pa.int32()),  # 0 for the first visit of a document, 1 for its first repeat, ...
    ("shard", pa.string()),
    ("offset", pa.int64()),  # token offset of the document in its shard
    ("length", pa.int64()),  # tokens of the document, end-of-text not included
    ("stream_start", pa.int64()),  # token offset of the document in the training stream
])


@dataclass(frozen=True)
class Phase:
    name: str
    fraction: float  # of the token budget
    weights: dict[str, float]
    seq_len: int | None = None  # None: the run's train.seq_len
    min_doc_tokens: Mapping[str, int] = field(default_factory=dict)  # bucket -> shortest document placed


def _unit(seed: int, *parts: str) -> float:
    """A deterministic number in [0, 1) from a seed and names (portable: no Python hash())."""
    h = hashlib.blake2b(("\x00".join([str(seed), *parts])).encode(), digest_size=8).digest()
    return int.from_bytes(h, "big") / 2**64


def _permutation(n: int, seed: int, bucket: str, epoch: int) -> np.ndarray:
    key = int.from_bytes(hashlib.blake2b(f"{seed}\x00{bucket}\x00{epoch}".encode(), digest_size=8).digest(), "big")
    return np.random.Generator(np.random.PCG64(key)).permutation(n)


def parse_phases(phases: Mapping[str, PhaseParams]) -> list[Phase]:
    """The resolved section's phases, {name: {fraction, weights}} in training order (a mapping, so `dvc exp
    show` names every weight), as the plan reads them. The schema (tokenmill.mixture.params.Mixture) has
    checked them: fractions summing to 1, weights >= 0 with a positive sum."""
    return [Phase(str(name), p.fraction, dict(p.weights), p.seq_len, dict(p.min_doc_tokens))
            for name, p in phases.items()]


def phase_seq_len(phases: list[Phase], seq_len: int, tokens_per_step: int) -> dict[str, int]:
    """{phase: its sequence length} as training reads it (the plan's manifest records it). A step keeps its
    tokens in every phase, so a phase's length must divide them; a MixtureError names the phase otherwise."""
    out = {}
    for ph in phases:
        length = ph.seq_len or seq_len
        if tokens_per_step % length:
            raise MixtureError(f"mixture.phases.{ph.name}.seq_len: {length} does not divide a step's "
                               f"{tokens_per_step:,} tokens (train.seq_len x train.global_batch)")
        out[ph.name] = length
    return out


def split_heldout(index: pa.Table, fraction: float, seed: int) -> pa.Array:
    """True for documents reserved for evaluation: a seeded per-document draw, stable as the corpus grows."""
    return pa.array([_unit(seed, "heldout", d) < fraction for d in index.column("doc_id").to_pylist()])


def build_plan(index: pa.Table, phases: list[Phase], token_budget: int, seed: int,
               max_epochs: Mapping[str, float] | float = 4.0, heldout_fraction: float = 0.0,
               cap_budget: bool = False, canaries: Mapping[str, int] | None = None,
               excluded: Mapping[str, frozenset[str]] | None = None) -> dict:
    """index: columns doc_id, bucket, shard, offset, length. Returns plan, bucket summary, held-out ids.

    A bucket the budget would repeat more than its max_epochs stops the plan (MixtureError), unless
    cap_budget: then the budget shrinks to the most the epoch caps allow (the budget was derived, not asked
    for: a corpus too small for the model trains on what it has). The result's token_budget is the budget
    planned, requested_budget the one given, and capped_by the bucket that set the cap (None: not capped).
    No document is planned past its bucket's cap: a bucket at its cap ends its phase's quota short of it by
    less than a document, instead of overshooting it.

    canaries: {doc_id: planned visits} of the index's canary documents (tokenmill.canaries). They are never
    held out and never weighted: each is placed exactly that many times, at seeded places of the finished
    stream (plant_canaries). A canary of 0 visits is a control that was never planted: not in the index.

    excluded: {phase: doc_ids} that phase never places (documents tagged toxic kept out of the anneal). The
    bucket's stream passes over such a document (its turn in that epoch is spent) and takes the next, so the
    phase's quota is filled from the others and the bulk, which excludes nothing, is planned as without it.
    """
    excluded = excluded or {}
    canaries = {doc_id: v for doc_id, v in (canaries or {}).items() if v > 0}
    if canaries:
        planted = pc.is_in(index.column("doc_id"), pa.array(sorted(canaries), pa.string()))
        canary_rows, index = index.filter(planted), index.filter(pc.invert(planted))
        if canary_rows.num_rows != len(canaries):
            raise MixtureError(f"mixture: {len(canaries)} canaries listed, {canary_rows.num_rows} in the token index")
    heldout_mask = split_heldout(index, heldout_fraction, seed)
    heldout = index.filter(heldout_mask)
    train = index.filter(pc.invert(heldout_mask))
    # Sorting by doc_id makes the plan independent of shard order and executor.
    train = train.sort_by([("bucket", "ascending"), ("doc_id", "ascending")])
    buckets = sorted(set(train.column("bucket").to_pylist()))
    by_bucket = {b: train.filter(pc.equal(train.column("bucket"), b)) for b in buckets}
    available = {b: int(pc.sum(t.column("length")).as_py() or 0) + t.num_rows for b, t in by_bucket.items()}

    # A preset names buckets a corpus may lack (a crawl has no code): their weight is spread over the
    # buckets that exist, in proportion (the caller warns, naming them). A phase left with none is an error.
    missing = sorted({b for ph in phases for b, w in ph.weights.items() if w > 0 and b not in by_bucket})
    phases = [Phase(ph.name, ph.fraction, {b: w for b, w in ph.weights.items() if b in by_bucket}, ph.seq_len,
                    ph.min_doc_tokens) for ph in phases]
    for ph in phases:
        if sum(ph.weights.values()) <= 0:
            raise MixtureError(f"mixture: phase {ph.name!r} weights only buckets with no documents "
                               f"({', '.join(missing)}); the corpus has {', '.join(buckets) or 'none'}: "
                               f"weight one of those in mixture.phases.{ph.name}.weights")

    # Tokens each bucket must supply over the whole run, checked against the epoch cap before any work.
    def cap_of(b: str) -> float:
        return max_epochs.get(b, max_epochs.get("default", 4.0)) if isinstance(max_epochs, Mapping) else max_epochs

    share: dict[str, float] = {}  # each bucket's part of the budget, over all phases
    for ph in phases:
        total_w = sum(ph.weights.values())
        for b, w in ph.weights.items():
            share[b] = share.get(b, 0.0) + ph.fraction * w / total_w
    requested, capped_by = token_budget, None
    over = {b: token_budget * f / (cap_of(b) * available[b]) for b, f in share.items() if f > 0}
    if cap_budget and over and max(over.values()) > 1:
        capped_by = max(over, key=lambda b: (over[b], b))  # the bucket that runs out first sets the budget
        token_budget = int(cap_of(capped_by) * available[capped_by] / share[capped_by])
        while token_budget > 0 and any(token_budget * f > cap_of(b) * available[b] for b, f in share.items()):
            token_budget -= 1  # float rounding: never past a cap
    wanted = {b: token_budget * f for b, f in share.items()}
    for b, tokens in wanted.items():
        cap = cap_of(b)
        if tokens > cap * available[b]:
            raise MixtureError(
                f"mixture: bucket {b!r} would be repeated {tokens / available[b]:.2f} times "
                f"({tokens:,.0f} tokens wanted, {available[b]:,} available) but max_epochs is {cap}; "
                f"lower its weight, lower the budget or raise max_epochs")

    cursor = {b: 0 for b in buckets}  # documents consumed so far in each bucket's endless stream
    # Each phase fills its quota and overshoots it by up to one document; over several phases those overshoots
    # add up past a quota the caps allow exactly (a capped budget), and would read a bucket's documents one time
    # more than max_epochs. A bucket stops where its next document would take it past its cap.
    room = {b: cap_of(b) * available[b] for b in buckets}  # tokens a bucket may still supply
    orders: dict[tuple[str, int], np.ndarray] = {}  # the visiting order of each bucket's epochs
    rows: list[tuple] = []
    for ph in phases:
        total_w = sum(ph.weights.values())
        placed = []
        for b in sorted(ph.weights):
            quota = token_budget * ph.fraction * ph.weights[b] / total_w
            if quota <= 0:
                continue
            t = by_bucket[b]
            n = t.num_rows
            ids, shards = t.column("doc_id").to_pylist(), t.column("shard").to_pylist()
            offsets, lengths = t.column("offset").to_numpy(), t.column("length").to_numpy()
            skip, passed = excluded.get(ph.name, frozenset()), 0
            shortest = ph.min_doc_tokens.get(b, 0)
            got = 0
            while got < quota:
                epoch, i = divmod(cursor[b], n)
                if (b, epoch) not in orders:
                    orders[(b, epoch)] = _permutation(n, seed, b, epoch)
                j = int(orders[(b, epoch)][i])
                if ids[j] in skip or lengths[j] < shortest:
                    cursor[b] += 1
                    passed += 1
                    if passed > n:  # every document of the bucket is kept out of this phase
                        if not shortest:
                            raise MixtureError(f"mixture: phase {ph.name!r} excludes every document of bucket {b!r} "
                                               f"(tagged by the domains stage); drop its weight in that phase or "
                                               f"the phase from mixture.exclude_tagged_from")
                        raise MixtureError(f"mixture: phase {ph.name!r}: every document of bucket {b!r} is shorter "
                                           f"than min_doc_tokens {shortest:,} (or tagged, where the phase excludes "
                                           f"tagged ones); lower mixture.phases.{ph.name}.min_doc_tokens.{b} or drop "
                                           f"the bucket's weight in that phase")
                    continue
                size = int(lengths[j]) + 1  # + end-of-text
                if size > room[b]:
                    break
                room[b] -= size
                placed.append(((got + size / 2) / quota, b, ids[j], epoch, shards[j], int(offsets[j]), int(lengths[j])))
                got += size
                cursor[b] += 1
                passed = 0  # counts the documents passed over since the last one placed
        placed.sort(key=lambda r: (r[0], r[1], r[2], r[3]))
        rows.extend((ph.name, *r[1:]) for r in placed)

    if canaries:
        rows = plant_canaries(rows, canary_rows, canaries, seed)
    lengths = np.array([r[6] for r in rows], dtype=np.int64) + 1
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]) if rows else np.array([], dtype=np.int64)
    plan = pa.table({
        "position": pa.array(np.arange(len(rows)), pa.int64()),
        "phase": [r[0] for r in rows], "bucket": [r[1] for r in rows], "doc_id": [r[2] for r in rows],
        "epoch": pa.array([r[3] for r in rows], pa.int32()), "shard": [r[4] for r in rows],
        "offset": pa.array([r[5] for r in rows], pa.int64()), "length": pa.array([r[6] for r in rows], pa.int64()),
        "stream_start": pa.array(starts, pa.int64()),
    }, schema=PLAN)
    return {"plan": plan, "heldout": heldout, "available": available, "wanted": wanted, "missing": missing,
            "token_budget": token_budget, "requested_budget": requested, "capped_by": capped_by}


def plant_canaries(rows: list[tuple], canary_rows: pa.Table, visits: Mapping[str, int], seed: int) -> list[tuple]:
    """rows (phase, bucket, doc_id, epoch, shard, offset, length) with each canary document inserted visits[doc]
    times, visit v before the row at a seeded fraction of the stream: spread over the run, so a scout that
    trains a part of the stream sees about that part of each canary's visits. epoch counts the visits."""
    inserts = []
    for c in canary_rows.to_pylist():
        for v in range(visits[c["doc_id"]]):
            at = int(_unit(seed, "canary", c["doc_id"], str(v)) * len(rows))
            inserts.append((at, c["doc_id"], v, c))
    out, i, seen = [], 0, {}
    for at, doc_id, _, c in sorted(inserts, key=lambda x: x[:3]):
        out.extend(rows[i:at])
        i = max(i, at)
        phase = rows[min(at, len(rows) - 1)][0] if rows else ""
        seen[doc_id] = seen.get(doc_id, -1) + 1  # the epoch: visits in stream order
        out.append((phase, c["bucket"], doc_id, seen[doc_id], c["shard"], int(c["offset"]), int(c["length"])))
    return out + rows[i:]


def tokens_per_step(train_cfg: Mapping) -> int:
    return int(train_cfg["seq_len"]) * int(train_cfg["global_batch"])


def token_budget(budget_cfg: Mapping, model_cfg: Mapping, vocab_size: int) -> int:
    """The full run's token budget (tokenmill.train.config.token_budget), with the parameter count of the model
    definition itself (model_size), not an estimate."""
    params = config.model_size(model_cfg, vocab_size)["params"] if not budget_cfg.get("token_budget") else 0
    return config.token_budget(budget_cfg.get("token_budget"), budget_cfg["tokens_per_param"], params)


def document_bucket_weights(weights: Mapping[str, float]) -> dict[str, float]:
    """Mixture-bucket weights folded onto document buckets (web/high + web/low -> web)."""
    out: dict[str, float] = {}
    for name, w in weights.items():
        out[name.split("/", 1)[0]] = out.get(name.split("/", 1)[0], 0.0) + float(w)
    return dict(sorted(out.items()))
