"""The tokenizer's training sample: documents drawn from each bucket in proportion to the mixture weights.

A bucket's share of the sample is measured in UTF-8 bytes, not documents, so one long book counts as much
as a thousand short pages of the same size. The draw is a pure function of (documents, weights,
sample_bytes, seed): every bucket has its own seeded permutation of its documents, documents are taken in
that order until the bucket's byte target is met, and the last one is cut to fit exactly. A bucket smaller
than its target is repeated (whole passes, each in a fresh order) — this is what the mixture does to it in
training, so the tokenizer sees the same proportions the model will.

Sources are read twice (lengths first, then the chosen texts), never held in memory as a whole: a source is
either {bucket: list of texts} or a zero-argument callable that returns a fresh iterator of
(bucket, text) pairs each time it is called (see `parquet_source`).
"""

from __future__ import annotations

import hashlib
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Iterator, Mapping, Sequence

import numpy as np
import pyarrow.parquet as pq

Stream = Callable[[], Iterable[tuple[str, str]]]
Source = Mapping[str, Sequence[str]] | Stream


def as_stream(source: Source) -> Stream:
    """Either form of source as a re-callable stream of (bucket, text) pairs."""
    if callable(source):
        return source
    if not isinstance(source, Mapping):
        raise TypeError("texts_by_bucket must be {bucket: [texts]} or a callable returning (bucket, text) pairs")

    def stream() -> Iterator[tuple[str, str]]:
        for bucket in sorted(source):
            for text in source[bucket]:
                yield bucket, text

    return stream


def parquet_source(paths: Iterable[Path | str], text_column: str = "text", bucket_column: str = "bucket",
                   batch_rows: int = 1024) -> Stream:
    """A stream over document shards (schema.DOCUMENT) that reads only the two columns it needs."""
    files = sorted(str(p) for p in paths)

    def stream() -> Iterator[tuple[str, str]]:
        for f in files:
            pf = pq.ParquetFile(f)
            for batch in pf.iter_batches(batch_size=batch_rows, columns=[bucket_column, text_column]):
                buckets = batch.column(0).to_pylist()
                texts = batch.column(1).to_pylist()
                for b, t in zip(buckets, texts):
                    if t:
                        yield b, t

    return stream


def _bucket_seed(seed: int, bucket: str) -> np.random.SeedSequence:
    # Python's hash() is salted per process; a digest of the name is stable across runs and machines.
    digest = int.from_bytes(hashlib.blake2b(bucket.encode(), digest_size=8).digest(), "little")
    return np.random.SeedSequence([int(seed), digest])


@dataclass
class BucketPlan:
    """Which documents of one bucket go into the sample: counts[i] whole copies of document i, plus
    the first `partial_bytes` bytes of document `partial_index` once more (when partial_index >= 0)."""

    target_bytes: int
    counts: np.ndarray
    partial_index: int = -1
    partial_bytes: int = 0
    available_bytes: int = 0
    documents: int = 0

    @property
    def epochs(self) -> float:
        """How many times the bucket is read over: > 1 means it is repeated to meet its share."""
        return self.target_bytes / self.available_bytes if self.available_bytes else 0.0


@dataclass
class SamplePlan:
    buckets: dict[str, BucketPlan] = field(default_factory=dict)
    shares: dict[str, float] = field(default_factory=dict)  # normalised weights of the buckets drawn from
    missing: list[str] = field(default_factory=list)  # weighted buckets with no text at all


def plan_sample(lengths: Mapping[str, Sequence[int]], weights: Mapping[str, float], sample_bytes: int,
                seed: int) -> SamplePlan:
    """Decide the sample from document byte lengths alone (pure function; see the module docstring)."""
    if sample_bytes <= 0:
        raise ValueError(f"sample_bytes must be positive, got {sample_bytes}")
    bad = {b: w for b, w in weights.items() if w < 0}
    if bad:
        raise ValueError(f"negative bucket weights: {bad}")
    present = {b: float(w) for b, w in weights.items() if w > 0 and sum(lengths.get(b, ())) > 0}
    missing = sorted(b for b, w in weights.items() if w > 0 and b not in present)
    if not present:
        raise ValueError(f"no text in any bucket with a positive weight (weights {dict(weights)}, "
                         f"buckets with text {sorted(b for b in lengths if sum(lengths[b]) > 0)})")
    total_w = sum(present.values())
    plan = SamplePlan(shares={b: w / total_w for b, w in sorted(present.items())}, missing=missing)
    # Largest-remainder rounding: the bucket targets add up to exactly sample_bytes.
    raw = {b: sample_bytes * s for b, s in plan.shares.items()}
    targets = {b: int(v) for b, v in raw.items()}
    for b in sorted(raw, key=lambda b: (targets[b] - raw[b], b))[: sample_bytes - sum(targets.values())]:
        targets[b] += 1
    for b, target in targets.items():
        lens = np.asarray(lengths[b], dtype=np.int64)
        counts = np.zeros(len(lens), dtype=np.int32)
        bp = BucketPlan(target_bytes=target, counts=counts, available_bytes=int(lens.sum()), documents=len(lens))
        rng = np.random.default_rng(_bucket_seed(seed, b))
        remaining = target
        while remaining > 0:
            order = rng.permutation(len(lens))
            cum = np.cumsum(lens[order])
            n_whole = int(np.searchsorted(cum, remaining, side="right"))  # documents that fit whole
            counts[order[:n_whole]] += 1
            remaining -= int(cum[n_whole - 1]) if n_whole else 0
            if n_whole < len(order) and remaining > 0:
                bp.partial_index, bp.partial_bytes = int(order[n_whole]), remaining
                remaining = 0
        plan.buckets[b] = bp
    return plan


def _line_chunks(line: str, limit: int) -> Iterator[str]:
    """A line cut into pieces of at most `limit` UTF-8 bytes, at character boundaries.

    SentencePiece skips training sentences longer than max_sentence_length; cutting them keeps their text.
    """
    data = line.encode("utf-8")
    if len(data) <= limit:
        yield line
        return
    pos = 0
    while pos < len(data):
        end = min(pos + limit, len(data))
        while end < len(data) and end > pos + 1 and (data[end] & 0xC0) == 0x80:  # inside a character
            end -= 1
        yield data[pos:end].decode("utf-8", "ignore")
        pos = end


def write_sample(stream: Stream, weights: Mapping[str, float] | None, sample_bytes: int, seed: int, path: Path,
                 max_line_bytes: int) -> dict:
    """Draw the sample and write it to `path` as SentencePiece training lines; returns its statistics.

    SentencePiece reads one sentence per line, so documents are split at "\\n" (the newline itself is a
    user-defined piece and needs no statistics) and empty lines are left out. "\\r" and tabs stay in the
    lines: "\\r" of CRLF text is a user-defined piece too.
    """
    lengths: dict[str, array] = {}
    for bucket, text in stream():  # pass 1: byte lengths only
        lengths.setdefault(bucket, array("q")).append(len(text.encode("utf-8")))
    if weights is None:  # no mixture given: the corpus's own proportions
        weights = {b: float(sum(v)) for b, v in lengths.items()}
    plan = plan_sample(lengths, weights, sample_bytes, seed)

    index = {b: 0 for b in plan.buckets}
    written = {b: 0 for b in plan.buckets}
    docs = {b: 0 for b in plan.buckets}
    lines = 0
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8", newline="\n") as out:
        for bucket, text in stream():  # pass 2: the chosen texts
            bp = plan.buckets.get(bucket)
            if bp is None:
                continue
            i = index[bucket]
            index[bucket] += 1
            copies = [text] * int(bp.counts[i])
            if i == bp.partial_index:
                copies.append(text.encode("utf-8")[: bp.partial_bytes].decode("utf-8", "ignore"))
            for doc in copies:
                docs[bucket] += 1
                written[bucket] += len(doc.encode("utf-8"))
                for line in doc.split("\n"):
                    if not line:
                        continue
                    for chunk in _line_chunks(line, max_line_bytes):
                        out.write(chunk)
                        out.write("\n")
                        lines += 1
    for b, n in index.items():
        if n != plan.buckets[b].documents:
            raise RuntimeError(f"the source yielded {n} documents of bucket {b!r} on the second pass, "
                               f"{plan.buckets[b].documents} on the first: it must be re-readable unchanged")
    return {
        "sample_bytes": sum(written.values()),
        "lines": lines,
        "missing_buckets": plan.missing,  # weighted, but without any text
        "unweighted_buckets": sorted(b for b in lengths if b not in plan.buckets),  # text, but no weight
        "buckets": {
            b: {
                "weight_share": round(plan.shares[b], 6),
                "target_bytes": bp.target_bytes,
                "sample_bytes": written[b],  # may fall short of the target by a cut character
                "sample_documents": docs[b],
                "available_bytes": bp.available_bytes,
                "available_documents": bp.documents,
                "epochs": round(bp.epochs, 4),
            }
            for b, bp in plan.buckets.items()
        },
    }
