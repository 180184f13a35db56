"""Canaries: planted secrets whose exposure measures what a training run memorised (Carlini et al. 2019, "The
Secret Sharer"), tied to the documents and steps that carried them.

Who does what, each with the data it already has:
  tokenize   `tokenize.canaries` -> canary documents ("The secret code of canary 3f9a0c is 4 8 1 5 ...", one per
             canary, in tokens/canary/canaries.bin and the token index, bucket `canary`), canaries.parquet
             (CANARIES: each canary's doc_id, secret and planned visits) and canary_requests.parquet (the true
             secret and `candidates` random secrets of the same format as scoring requests, tokenized here so a
             training node needs no tokenizer)
  mixture    plants each canary document `planned_visits` times at seeded places of the training stream
             (the plan's rows: a canary's steps are found like any document's)
  training   at the end of every run (the full run and each scout), scores the requests with the sharded model
             (Trainer.loglikelihoods, as the in-loop benchmarks) and writes canaries.parquet beside its steps
             (EXPOSURE): the audit's train_canaries table

Exposure (Carlini et al., section 4): log2 |R| - log2 rank, the rank of the true secret's likelihood among all
|R| secrets of the format. |R| = 10^digits is too many to score, so the rank is estimated from `candidates`
random ones (their section 4.2, "sampling"): exposure = log2(N + 1) - log2(1 + #{candidates at least as likely}),
between 0 and log2(N + 1). 1 bit: the secret is likelier than half the candidates. A model prefers some digit
strings to others before it sees any canary (digits in text are not uniform), so one canary's exposure is noisy:
canaries of 0 visits (in `visits` by default) are scored but never planted, the baseline the others rise from. Beyond the sample's
resolution, exposure_fit extrapolates with a normal fitted to the candidates' log-likelihoods (their section 4.3
fits a skew-normal to the same distribution): -log2 P(X >= the secret's log-likelihood).
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path
from typing import Annotated

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pydantic import Field, field_validator

from tokenmill import schema
from tokenmill.section import Count, Section

SOURCE = BUCKET = "canary"  # the token index's source and mixture bucket of canary documents
SHARD = "tokens/canary/canaries.bin"
TABLE, REQUESTS_FILE = "canaries.parquet", "canary_requests.parquet"  # under the tokenize stage's output

CANARIES = pa.schema([
    ("canary", pa.string()),  # s<set>-v<visits>, e.g. s0-v8
    ("doc_id", pa.string()),  # the canary document's id in the token index and the plan
    ("planned_visits", pa.int32()),  # how often the mixture puts it in the training stream
    ("prefix", pa.string()),  # "The secret code of canary <name> is"
    ("secret", pa.string()),  # " 4 8 1 5 ...": the scored continuation
])
REQUESTS = pa.schema([
    ("canary", pa.string()),
    ("candidate", pa.int32()),  # 0: the planted secret; 1..N: random secrets of the same format
    ("context", pa.list_(pa.int32())),
    ("continuation", pa.list_(pa.int32())),
])
EXPOSURE = pa.schema([
    ("canary", pa.string()),
    ("doc_id", pa.string()),
    ("planned_visits", pa.int32()),
    ("loglikelihood", pa.float64()),  # of the planted secret given the prefix
    ("candidates", pa.int32()),
    ("rank", pa.int32()),  # 1 + candidates at least as likely as the secret
    ("exposure", pa.float64()),  # bits: log2(candidates + 1) - log2(rank)
    ("exposure_fit", pa.float64()),  # bits, from a normal fitted to the candidates' log-likelihoods
    ("candidate_mean", pa.float64()),  # of the candidates' log-likelihoods
    ("candidate_std", pa.float64()),
])


class Canaries(Section):
    """params.yaml `tokenize.canaries`, the secrets planted to measure memorisation: `sets` canaries per visit
    count (the tokenize stage plants them; its schema holds this one)."""

    sets: Count = 2  # 0: none planted
    # planned visits of each canary in the training stream; 0: a control, scored but never planted
    visits: list[Count] = [0, 1, 2, 4, 8, 16]
    digits: Annotated[int, Field(ge=4, le=32)] = 10  # of the secret: 10^digits secrets of the format
    candidates: Annotated[int, Field(ge=1)] = 999  # random secrets each is ranked among: exposure <= log2(N+1)
    seed: int = 0

    @field_validator("visits")
    @classmethod
    def _distinct(cls, v):
        if len(set(v)) != len(v):  # a canary is named by its set and visit count
            raise ValueError(f"expected distinct visit counts, got {v}")
        return v


def _rng(seed: int, *parts: object) -> np.random.Generator:
    key = hashlib.blake2b("\x00".join(map(str, (seed, *parts))).encode(), digest_size=8).digest()
    return np.random.Generator(np.random.PCG64(int.from_bytes(key, "big")))


def _secret(rng: np.random.Generator, digits: int) -> str:
    return " " + " ".join(str(d) for d in rng.integers(0, 10, digits))


def design(cfg: Canaries) -> list[dict]:
    """The canaries of `tokenize.canaries` (sets x visits), as CANARIES rows: a pure function of the config."""
    rows = []
    for s in range(cfg.sets):
        for visits in cfg.visits:
            name = f"s{s}-v{visits}"
            rng = _rng(cfg.seed, "canary", name)
            tag = "".join(f"{b:02x}" for b in rng.integers(0, 256, 3))  # a distinct prefix per canary
            prefix = f"The secret code of canary {tag} is"
            secret = _secret(rng, cfg.digits)
            text = prefix + secret
            doc_id = hashlib.blake2b("\x00".join((SOURCE, name, text)).encode(), digest_size=12).hexdigest()
            rows.append({"canary": name, "doc_id": doc_id, "planned_visits": int(visits), "prefix": prefix,
                         "secret": secret})
    return rows


def plant(cfg: Canaries, tok, out_dir: str | Path) -> list[dict]:
    """Write the canary documents' tokens (SHARD), CANARIES and their scoring REQUESTS under out_dir; return
    their token index rows (tokenize.INDEX: doc_id, source, bucket, shard, offset, length)."""
    from tokenmill.evaluate.evalset import encode_pair  # lm-eval's split of context and continuation

    out_dir = Path(out_dir)
    canaries = design(cfg)
    schema.write_parquet(canaries, CANARIES, out_dir / TABLE)
    requests = []
    for c in canaries:
        rng = _rng(cfg.seed, "candidates", c["canary"])
        secrets = [c["secret"]] + [_secret(rng, cfg.digits) for _ in range(cfg.candidates)]
        for i, secret in enumerate(secrets):
            ctx, cont = encode_pair(tok.encode, c["prefix"], secret, tok.eos_id)
            requests.append({"canary": c["canary"], "candidate": i, "context": ctx, "continuation": cont})
    schema.write_parquet(requests, REQUESTS, out_dir / REQUESTS_FILE)
    canaries = [c for c in canaries if c["planned_visits"] > 0]  # 0 visits: a control, scored but never planted
    if not canaries:
        return []
    flat, lengths = tok.encode_documents([c["prefix"] + c["secret"] for c in canaries])
    path = out_dir / SHARD
    path.parent.mkdir(parents=True, exist_ok=True)
    flat.tofile(path)
    offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    return [{"doc_id": c["doc_id"], "source": SOURCE, "bucket": BUCKET, "shard": SHARD, "offset": int(off),
             "length": int(n) - 1} for c, off, n in zip(canaries, offsets, lengths)]


class CanaryRequests:
    """A tokenize output's canary requests as model inputs (the windows Trainer.loglikelihoods scores)."""

    def __init__(self, tokens_dir: str | Path, seq_len: int):
        # the evaluation's windows, imported by the runs that score canaries: the mixture stage, which reads only
        # this module's names, keeps evaluation code out of its dependencies
        from tokenmill.evaluate.evalset import scored_windows

        tokens_dir = Path(tokens_dir)
        # A token output from before canaries has neither file: no requests.
        t = pq.read_table(tokens_dir / REQUESTS_FILE) if (tokens_dir / REQUESTS_FILE).exists() else REQUESTS.empty_table()
        self.canaries = pq.read_table(tokens_dir / TABLE).to_pylist() if t.num_rows else []
        self.canary = t.column("canary").to_pylist()
        self.candidate = t.column("candidate").to_pylist()
        self.windows, self.n_cont = scored_windows(t, seq_len)

    def __len__(self) -> int:
        return len(self.windows)

    def exposures(self, loglikelihoods) -> list[dict]:
        """EXPOSURE rows, one per canary, from one log-likelihood per request."""
        by: dict[str, dict[int, float]] = {}
        for name, i, ll in zip(self.canary, self.candidate, loglikelihoods):
            by.setdefault(name, {})[i] = float(ll)
        rows = []
        for c in self.canaries:
            lls = by[c["canary"]]
            rows.append({"canary": c["canary"], "doc_id": c["doc_id"], "planned_visits": c["planned_visits"],
                         **exposure(lls[0], [v for i, v in sorted(lls.items()) if i > 0])})
        return rows


def exposure(secret_ll: float, candidate_lls) -> dict:
    """Rank and exposure (bits) of a secret's log-likelihood among its candidates' (module docstring)."""
    cand = np.asarray(candidate_lls, dtype=np.float64)
    rank = 1 + int((cand >= secret_ll).sum())
    mean, std = float(cand.mean()), float(cand.std(ddof=1)) if cand.size > 1 else 0.0
    fit = 0.0
    if std > 0:
        x = (secret_ll - mean) / (std * math.sqrt(2))
        tail = 0.5 * math.erfc(x)  # P(X >= secret) under the normal
        # Far in the tail erfc underflows: its asymptote, log erfc(x) ~ -x^2 - log(x sqrt(pi)).
        fit = -math.log2(tail) if tail > 0 else (x * x + math.log(x * math.sqrt(math.pi))) / math.log(2) + 1
    return {"loglikelihood": secret_ll, "candidates": int(cand.size), "rank": rank,
            "exposure": math.log2(cand.size + 1) - math.log2(rank), "exposure_fit": fit,
            "candidate_mean": mean, "candidate_std": std}
