"""The training stream of the mixture plan, cut into global batches and sliced per data-parallel rank.

The stream is, for each plan row in position order, shard[offset : offset + length] followed by one
end-of-text token; a row's `stream_start` is its offset in the stream. With L = seq_len, B = global_batch and
T = L x B, step N reads stream[N*T : (N+1)*T + 1]: sequence j of the stream has inputs stream[j*L : j*L+L]
and targets stream[j*L+1 : j*L+L+1]. Rank r of R data-parallel ranks gets sequences r*B/R .. (r+1)*B/R - 1
of the step, split into micro-batches in order. `tokenmill audit step N` reports the same token range.
A plan phase may read longer sequences (mixture.phases.<name>.seq_len, in the plan's manifest): a step of that
phase still reads its T tokens, as T / L' sequences of L' tokens, so the step -> token range is unchanged.

The batch of a step is a pure function of (plan, step): the data cursor in a checkpoint is the step.
"""

from __future__ import annotations

import hashlib
import json
import os
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq


class DataError(ValueError):
    """Training data that cannot be read as the contract says; the message names the file."""


def tokens_hash(tokens: np.ndarray) -> str:
    """blake2b-16 of the tokens as uint32 little-endian: what `tokenmill audit step` compares against."""
    return hashlib.blake2b(np.asarray(tokens, dtype="<u4").tobytes(), digest_size=16).hexdigest()


def read_token_manifest(tokens_dir: Path) -> dict:
    path = Path(tokens_dir) / "manifest.json"
    if not path.exists():
        raise DataError(f"no token manifest at {path}: run the tokenize stage first")
    m = json.loads(path.read_text())
    missing = [k for k in ("vocab_size", "eos_id", "dtype") if k not in m]
    if missing:
        raise DataError(f"{path} lacks {', '.join(missing)}")
    if m["dtype"] not in ("uint16", "uint32"):
        raise DataError(f"{path}: dtype must be uint16 or uint32, got {m['dtype']!r}")
    return m


class _Shards:
    """Token files memory-mapped on first use (a run touches each shard many times)."""

    def __init__(self, root: Path, dtype: str):
        self.root, self.dtype, self.maps = Path(root), np.dtype(dtype), {}

    def __getitem__(self, shard: str) -> np.ndarray:
        if shard not in self.maps:
            path = self.root / shard
            if not path.exists():
                raise DataError(f"token shard {path} named by the plan does not exist")
            self.maps[shard] = np.memmap(path, dtype=self.dtype, mode="r")
        return self.maps[shard]


def _spans(shard_of: list[str], offsets: np.ndarray, lengths: np.ndarray, shards: _Shards, eos_id: int,
           starts: np.ndarray, a: int, b: int) -> np.ndarray:
    """Tokens [a, b) of a stream whose documents (each + eos) start at `starts`."""
    out = np.empty(b - a, dtype=np.uint32)
    i = int(np.searchsorted(starts, a, side="right")) - 1
    pos = a
    while pos < b:
        if i >= len(starts):
            raise DataError(f"stream tokens [{a}, {b}) run past the end of the stream ({pos})")
        start, n = int(starts[i]), int(lengths[i])
        lo, hi = pos - start, min(b - start, n + 1)  # document-relative; index n is its end-of-text
        if lo < n:
            doc = shards[shard_of[i]]
            end = min(hi, n)
            if int(offsets[i]) + end > len(doc):
                raise DataError(f"plan row {i} reads tokens up to {int(offsets[i]) + end} of {shard_of[i]}, "
                                f"which holds {len(doc)}")
            out[pos - a:pos - a + end - lo] = doc[int(offsets[i]) + lo:int(offsets[i]) + end]
        if hi == n + 1:
            out[start + n - a] = eos_id
        pos = start + hi
        i += 1
    return out


@dataclass(frozen=True)
class Batch:
    step: int
    inputs: np.ndarray  # (sequences of this rank, L), uint32
    targets: np.ndarray
    digest: Future | None  # of tokens_hash, computed beside the step; None on a rank that does not record
    phase: str  # plan phase of the step's first token

    @property
    def tokens_hash(self) -> str | None:
        """Of the whole step's inputs, stream[W*T : (W+1)*T] (None where this rank does not record)."""
        return None if self.digest is None else self.digest.result()


class PlanStream:
    """The plan's token stream over memory-mapped shards."""

    def __init__(self, tokens_dir: str | Path, plan_dir: str | Path):
        self.tokens_dir, self.plan_dir = Path(tokens_dir), Path(plan_dir)
        m = read_token_manifest(self.tokens_dir)
        self.vocab_size, self.eos_id, self.dtype = int(m["vocab_size"]), int(m["eos_id"]), m["dtype"]
        plan_path = self.plan_dir / "plan.parquet"
        if not plan_path.exists():
            raise DataError(f"no plan at {plan_path}: run the mixture stage first")
        plan = pq.read_table(plan_path, columns=["position", "phase", "doc_id", "shard", "offset", "length",
                                                 "stream_start"]).sort_by("position")
        self.doc_ids = plan.column("doc_id").to_pylist()
        self.phases = plan.column("phase").to_pylist()
        self.shard_of = plan.column("shard").to_pylist()
        self.offsets = plan.column("offset").to_numpy()
        self.lengths = plan.column("length").to_numpy()
        self.starts = plan.column("stream_start").to_numpy()
        expected = np.concatenate([[0], np.cumsum(self.lengths + 1)[:-1]]) if len(self.starts) else self.starts
        if not np.array_equal(self.starts, expected):
            bad = int(np.flatnonzero(self.starts != expected)[0])
            raise DataError(f"{plan_path}: stream_start of position {bad} is {int(self.starts[bad])}, "
                            f"expected {int(expected[bad])} (documents + end-of-text back to back)")
        self.total_tokens = int(self.starts[-1] + self.lengths[-1] + 1) if len(self.starts) else 0
        self.shards = _Shards(self.tokens_dir, self.dtype)
        # {phase: sequence length} the mixture stage recorded; a phase not named reads the run's train.seq_len.
        manifest = self.plan_dir / "manifest.json"
        self.phase_seq_len = {str(k): int(v) for k, v in
                              (json.loads(manifest.read_text()).get("phase_seq_len") or {}).items()} \
            if manifest.exists() else {}

    def read(self, a: int, b: int) -> np.ndarray:
        """Stream tokens [a, b) as uint32."""
        if not 0 <= a <= b <= self.total_tokens:
            raise DataError(f"stream tokens [{a}, {b}) outside the plan's {self.total_tokens} tokens")
        return _spans(self.shard_of, self.offsets, self.lengths, self.shards, self.eos_id, self.starts, a, b)

    def rows_in(self, a: int, b: int) -> range:
        """Plan positions with at least one token in stream [a, b)."""
        lo = int(np.searchsorted(self.starts, a, side="right")) - 1
        hi = int(np.searchsorted(self.starts, b, side="left"))
        return range(max(lo, 0), hi)

    def phase_start(self, phase: str) -> int | None:
        """Stream offset of the phase's first document, None when the plan has no such phase."""
        for i, p in enumerate(self.phases):
            if p == phase:
                return int(self.starts[i])
        return None


class BatchLoader:
    """Global batches of the plan stream, this rank's slice of them, and the step's token hash.

    Step N reads window N of the stream (stream[N*T : (N+1)*T + 1]) unless `order` is set: then window
    order[N]. A seed replica of a scout (train.data_seed) trains on the same windows in another order, shuffled
    within each phase (seeded_order).

    record: this rank records the step's token hash (the run's rank 0, which writes the step table). It reads
    the whole step and hashes it on a thread of its own while the step computes (blake2b releases the GIL); the
    other ranks read only their slice. Every rank reading and hashing the whole global batch on the step's
    critical path cost about 10 ms per 2M-token step, per rank."""

    def __init__(self, stream: PlanStream, seq_len: int, global_batch: int, dp_rank: int = 0, dp_size: int = 1,
                 order: np.ndarray | None = None, record: bool = True):
        if global_batch % dp_size:
            raise DataError(f"train.global_batch ({global_batch}) must be divisible by the data-parallel "
                            f"size ({dp_size})")
        self.stream, self.L, self.B = stream, seq_len, global_batch
        self.dp_rank, self.dp_size = dp_rank, dp_size
        self.T = seq_len * global_batch
        # Each phase's sequence length; every step holds T tokens, so a phase's length must split them evenly
        # over the data-parallel ranks.
        self.lengths = {p: stream.phase_seq_len.get(p, seq_len) for p in dict.fromkeys(stream.phases)}
        for p, length in self.lengths.items():
            if self.T % length or (self.T // length) % dp_size:
                raise DataError(f"phase {p!r} reads sequences of {length} tokens: a step's {self.T:,} tokens "
                                f"(train.seq_len x train.global_batch) must make a whole number of them on each of "
                                f"the {dp_size} data-parallel rank(s)")
        self.longest = max([seq_len, *self.lengths.values()])
        # Step N needs one token past its inputs for the last target.
        self.steps_available = max(0, (stream.total_tokens - 1) // self.T)
        self.fault = _parse_fault(os.environ.get("TOKENMILL_FAULT", ""))
        self.order = order
        self._hasher = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tokens-hash") if record else None

    def seeded_order(self, steps: int, seed: int) -> np.ndarray:
        """The run's `steps` windows in an order drawn with `seed`, each shuffled within its plan phase (the
        phase of its first token), so the curriculum holds: a seed replica sees the anneal phase's windows
        last, as the plan does. Shuffled across phases, a replica of the e2e test's full run (bulk 90%,
        anneal 10%) ended its training on bulk windows and its held-out loss moved 0.3-0.4 nats from the
        plan-order run, a change of data schedule that read as seed noise (RESULTS, "Compare")."""
        rng = np.random.default_rng(seed)
        phase_of = [self.phase(w) for w in range(steps)]
        order, start = [], 0
        for end in [i for i in range(1, steps) if phase_of[i] != phase_of[i - 1]] + [steps]:
            order.append(start + rng.permutation(end - start))
            start = end
        return np.concatenate(order) if order else np.zeros(0, dtype=np.int64)

    def phase(self, window: int) -> str:
        """The plan phase of the window's first token."""
        return self.stream.phases[self.stream.rows_in(window * self.T, window * self.T + 1)[0]]

    def window(self, step: int) -> int:
        """The stream window step `step` reads."""
        return int(self.order[step]) if self.order is not None else step

    def step_tokens(self, step: int) -> np.ndarray:
        """The whole step, stream[W*T : (W+1)*T + 1] of its window W, after any injected fault (see
        _parse_fault)."""
        w = self.window(step)
        if w >= self.steps_available:
            raise DataError(f"step {step} is past the plan: it holds {self.steps_available} steps of {self.T} tokens")
        tokens = self.stream.read(w * self.T, (w + 1) * self.T + 1)
        if step in self.fault.get("corrupt_step", ()):
            # A test hook: replace the step with random ids, as a broken shard or a bad host would.
            rng = np.random.default_rng(step)
            tokens = rng.integers(0, self.stream.vocab_size, size=tokens.shape, dtype=np.uint32)
        return tokens

    def longest_in(self, steps: int) -> int:
        """The longest sequence the first `steps` steps read (a scout that stops before a long phase: its base)."""
        phases = {self.phase(w) for w in range(min(steps, self.steps_available))} if len(self.lengths) > 1 \
            else set(self.lengths)
        return max([self.L, *(self.lengths[p] for p in phases)])

    def seq_len(self, step: int) -> int:
        """The sequence length of the step: its window's phase's."""
        return self.lengths.get(self.phase(self.window(step)), self.L)

    def batch(self, step: int) -> Batch:
        w = self.window(step)
        phase = self.phase(w)
        L = self.lengths.get(phase, self.L)
        per_rank = self.T // L // self.dp_size
        a = self.dp_rank * per_rank * L
        digest = None
        if self._hasher is not None or step in self.fault.get("corrupt_step", ()):
            tokens = self.step_tokens(step)
            mine = tokens[a:a + per_rank * L + 1]
            if self._hasher is not None:
                digest = self._hasher.submit(tokens_hash, tokens[:-1])
        else:
            if w >= self.steps_available:
                raise DataError(f"step {step} is past the plan: it holds {self.steps_available} steps of {self.T} "
                                f"tokens")
            mine = self.stream.read(w * self.T + a, w * self.T + a + per_rank * L + 1)
        return Batch(step, mine[:-1].reshape(per_rank, L), mine[1:].reshape(per_rank, L), digest, phase)

    def doc_ids(self, step: int) -> list[str]:
        """Documents with tokens among the step's inputs or targets, in stream order (repeats once)."""
        w = self.window(step)
        rows = self.stream.rows_in(w * self.T, (w + 1) * self.T + 1)
        return list(dict.fromkeys(self.stream.doc_ids[i] for i in rows))


def _parse_fault(spec: str) -> dict:
    """TOKENMILL_FAULT="corrupt_step=5,7;kill_in_checkpoint=4;slow_checkpoint=2": failures injected by tests
    (never in runs); slow_checkpoint: an asynchronous checkpoint's write starts that many seconds late;
    collapse_embedding: before that step the embedding's rows are put onto one direction; hang_at, kill_at:
    once per run (tokenmill.train.faults.fire_once), the last rank sleeps for good, or kills itself, before
    that step; corrupt_weights_at: once per run, the last rank's parameters are nudged before that step;
    poison_step: that step's update is applied at 1000x the learning rate (duties.py), a bad update the spike
    guard cannot see coming, which sends the loss up for good (a rollback's test)."""
    out: dict = {}
    known = ("corrupt_step", "kill_in_checkpoint", "slow_checkpoint", "collapse_embedding", "hang_at", "kill_at",
             "corrupt_weights_at", "poison_step")
    for part in filter(None, (p.strip() for p in spec.split(";"))):
        key, _, value = part.partition("=")
        if key not in known:
            raise ValueError(f"TOKENMILL_FAULT: unknown fault {key!r} ({', '.join(known)})")
        out[key] = {int(v) for v in value.split(",") if v}
    return out


def heldout_sequences(tokens_dir: str | Path, plan_dir: str | Path, seq_len: int, per_bucket: int,
                      eos_id: int, dtype: str) -> dict[str, np.ndarray]:
    """{bucket: (n, seq_len + 1) uint32} from heldout.parquet: each bucket's held-out documents in doc_id order,
    each + end-of-text, cut into windows of seq_len + 1 tokens; at most per_bucket windows, only full ones.
    A bucket too small for one window is left out (the summary lists the buckets it evaluated)."""
    path = Path(plan_dir) / "heldout.parquet"
    if per_bucket == 0 or not path.exists():
        return {}
    table = pq.read_table(path, columns=["doc_id", "bucket", "shard", "offset", "length"])
    shards = _Shards(Path(tokens_dir), dtype)
    out = {}
    for bucket in sorted(set(table.column("bucket").to_pylist())):
        t = table.filter(pc.equal(table.column("bucket"), bucket)).sort_by("doc_id")
        lengths = t.column("length").to_numpy()
        starts = np.concatenate([[0], np.cumsum(lengths + 1)[:-1]])
        total = int(lengths.sum() + len(lengths))
        n = min(per_bucket, max(0, (total - 1) // seq_len))
        if n == 0:
            continue
        flat = _spans(t.column("shard").to_pylist(), t.column("offset").to_numpy(), lengths, shards, eos_id,
                      starts, 0, n * seq_len + 1)
        idx = np.arange(n)[:, None] * seq_len + np.arange(seq_len + 1)[None, :]
        out[bucket] = flat[idx]
    return out


def heldout_documents(tokens_dir: str | Path, plan_dir: str | Path, dtype: str) -> list[np.ndarray]:
    """The plan's held-out documents' tokens (no end-of-text), in doc_id order, each whole (the use-of-context
    measures, tokenmill.train.context, read them from their first token)."""
    path = Path(plan_dir) / "heldout.parquet"
    if not path.exists():
        return []
    shards = _Shards(Path(tokens_dir), dtype)
    table = pq.read_table(path, columns=["doc_id", "shard", "offset", "length"]).sort_by("doc_id")
    return [np.asarray(shards[r["shard"]][r["offset"]:r["offset"] + r["length"]], dtype=np.uint32)
            for r in table.to_pylist()]
