"""How a model uses its context: held-out loss by token position and a retrieval probe (docs/long_context.md).

Both are built from the plan's held-out documents, so every run of a plan is measured on the same tokens, and
both are pure functions of the plan and the run's longest sequence (no clock, no global random state).

Loss by position: each held-out document on its own, from its first token, cut at the longest trained length;
every target token's loss falls in the bucket of its position (the tokens of its own document before it), with
edges 128, 512, 2K, 8K, 32K up to the longest length. A model that uses far context has a lower loss at late
positions than at early ones; one that does not, the same.

Retrieval probe (a passkey test made of real text): a haystack of held-out text of the probe's length, a needle
(24 tokens of another held-out document) put at a depth of it (0.1: near the start), and at the end the
needle's first 8 tokens again as the cue; the probe scores the 16 tokens that followed the cue in the needle.
Its control is the same haystack with another span of text where the needle was. The figure is the control's
loss minus the needle's, in nats per answer token: how much the model gains from having read the needle that
far back (0: it does not retrieve; a perfect copier gains the answer's whole loss).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

EDGES = (128, 512, 2048, 8192, 32768, 131072)  # position buckets: 0-128, 128-512, 512-2K, ...
DEPTHS = (0.1, 0.5, 0.9)  # where the needle sits, as a fraction of the haystack
NEEDLE, CUE = 24, 8  # needle tokens, the first CUE of them repeated at the end as the cue
CASES = 8  # probe cases per length and depth
MOST_DOCUMENTS = 64  # held-out documents scored by position


def position_buckets(longest: int) -> list[tuple[int, int]]:
    """[(lo, hi)] positions up to the longest sequence: (0, 128), (128, 512), ... the last cut at `longest`."""
    out, lo = [], 0
    for edge in EDGES:
        hi = min(edge, longest)
        if hi > lo:
            out.append((lo, hi))
        lo = hi
        if hi == longest:
            break
    return out


def label(lo: int, hi: int) -> str:
    def k(n: int) -> str:
        return f"{n // 1024}K" if n >= 2048 and n % 1024 == 0 else str(n)
    return f"{k(lo)}-{k(hi)}"


def position_sequences(documents: list[np.ndarray], longest: int, most: int = MOST_DOCUMENTS) -> list[np.ndarray]:
    """Each document of 2 tokens or more cut at longest + 1 tokens (inputs and targets); the longest first, at
    most `most` (the late positions are only in long documents)."""
    docs = sorted((d for d in documents if len(d) >= 2), key=lambda d: -len(d))[:most]
    return [d[:longest + 1] for d in docs]


def loss_by_position(losses: list[np.ndarray], longest: int) -> dict[str, dict]:
    """{bucket label: {"loss": mean nats, "tokens": count}} of per-target losses (losses[i][p]: the target at
    position p + 1 given positions 0..p); a bucket no document reaches is left out."""
    out = {}
    for lo, hi in position_buckets(longest):
        values = [x[lo:hi] for x in losses if len(x) > lo]
        n = sum(len(v) for v in values)
        if n:
            out[label(lo, hi)] = {"loss": float(np.concatenate(values).astype(np.float64).mean()), "tokens": n}
    return out


@dataclass(frozen=True)
class ProbeCase:
    length: int
    depth: float
    needle: np.ndarray  # the probe's window with the needle (inputs and the answer), `length` tokens
    control: np.ndarray  # the same with another span where the needle was
    answer: int  # tokens scored at the end of each


def probe_cases(documents: list[np.ndarray], lengths: list[int], depths=DEPTHS, cases: int = CASES,
                seed: int = 0) -> list[ProbeCase]:
    """`cases` probes per length and depth from the held-out text (see the module's docstring). The haystack and
    the spans are drawn from the documents joined without end-of-text (a document mask would otherwise cut the
    cue off from the needle); a needle comes from a stretch of text other than its haystack's."""
    pool = np.concatenate(documents) if documents else np.zeros(0, dtype=np.uint32)
    rng = np.random.default_rng(seed)
    out = []
    for length in lengths:
        hay = length - NEEDLE - NEEDLE  # haystack, the needle (or its control span), then cue + answer
        if hay < 1 or len(pool) < 2 * length:
            continue
        for depth in depths:
            for _ in range(cases):
                start = int(rng.integers(0, len(pool) - hay))
                haystack = pool[start:start + hay]
                spans = []
                while len(spans) < 2:  # the needle and the control's span, neither from the haystack's stretch
                    at = int(rng.integers(0, len(pool) - NEEDLE))
                    if at + NEEDLE <= start or at >= start + hay:
                        spans.append(pool[at:at + NEEDLE])
                needle, other = spans
                cut = int(depth * hay)
                out.append(ProbeCase(length, depth,
                                     np.concatenate([haystack[:cut], needle, haystack[cut:], needle]),
                                     np.concatenate([haystack[:cut], other, haystack[cut:], needle]),
                                     NEEDLE - CUE))
    return out


def probe_figures(cases: list[ProbeCase], needle_ll: np.ndarray, control_ll: np.ndarray) -> dict[str, float]:
    """{"<length>@<depth>": nats per answer token gained from the needle}, and "mean" over every case."""
    gains: dict[str, list[float]] = {}
    for c, a, b in zip(cases, needle_ll, control_ll):
        gains.setdefault(f"{c.length}@{c.depth:g}", []).append((float(a) - float(b)) / c.answer)
    out = {k: float(np.mean(v)) for k, v in gains.items()}
    if gains:
        out["mean"] = float(np.mean([g for v in gains.values() for g in v]))
    return out
