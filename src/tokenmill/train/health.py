"""Per-layer health of a run: what a global gradient norm hides until the loss shows it.

At the logging interval, for every parameter group (the embedding, each block's attention and MLP with their
norms, the final norm, the output head): the gradient norm before clipping and the update-to-weight ratio
||W_after - W_before|| / ||W_before|| of the optimizer step. Every `svd_interval` steps, the ratio of the
embedding matrix's two largest singular values: a collapsing embedding (its rows falling onto one direction)
drives it up long before the loss moves. Two alarms, each a warning line on rank 0 and a row of the run's
HEALTH_ALARMS table: that ratio past `sigma_ratio_max`, and a group's gradient norm growing by more than
`drift_factor` over the last `drift_horizon` steps (a least-squares slope of its logarithm, so one noisy
interval does not raise it).

Cost (measured in benchmarks/RESULTS.md, "Per-layer health"): on a logging step, one more read of every
gradient (the group norms) and a copy of every parameter shard with one subtraction (the update ratios),
memory-bound passes over this rank's shards, and 3 x groups scalar all-reductions read back in three
transfers; every svd_interval steps, one all-gather of the embedding, a d x d Gram matrix and its
eigenvalues. Nothing on the other steps.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pyarrow as pa
import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor

HEALTH = pa.schema([
    ("step", pa.int64()),  # the optimizer step measured (0-based, as in STEPS)
    ("group", pa.string()),  # embedding, block<i>.attention, block<i>.mlp, final_norm, output
    ("grad_norm", pa.float64()),  # L2 norm of the group's gradient before clipping
    ("update_ratio", pa.float64()),  # ||W_after - W_before|| / ||W_before||; null on a skipped step
])
HEALTH_ALARMS = pa.schema([
    ("step", pa.int64()),
    ("alarm", pa.string()),  # embedding_collapse | grad_norm_drift
    ("group", pa.string()),
    ("value", pa.float64()),  # sigma1/sigma2, or the growth factor over the horizon
    ("threshold", pa.float64()),
])

# Wrappers that activation checkpointing and torch.compile put into parameter names.
_WRAPPERS = re.compile(r"(_checkpoint_wrapped_module|_orig_mod|_fsdp_wrapped_module)\.")


def group_of(name: str) -> str:
    """The health group of a parameter, from its name in tokenmill.train.model.Transformer."""
    name = _WRAPPERS.sub("", name)
    if name.startswith("tok_embeddings."):
        return "embedding"
    if name.startswith("output."):
        return "output"
    if name.startswith("norm."):
        return "final_norm"
    m = re.match(r"layers\.(\d+)\.(attention|attention_norm|feed_forward|ffn_norm)\.", name)
    if m:
        return f"block{m[1]}." + ("attention" if m[2].startswith("attention") else "mlp")
    raise ValueError(f"parameter {name!r} belongs to no health group")


def _full(x: torch.Tensor) -> torch.Tensor:
    return x.full_tensor() if isinstance(x, DTensor) else x


def _norm(tensors: list[torch.Tensor]) -> torch.Tensor:
    return _full(torch.nn.utils.get_total_norm(tensors, 2.0, error_if_nonfinite=False, foreach=True))


class Health:
    """The groups of one model, the measurements above and the alarms. `state` is the run's (checkpointed):
    each group's gradient norms over the drift horizon, the step of the last sigma measurement and the alarms
    in force, so a resumed run judges drift over the same horizon and does not repeat a warning."""

    def __init__(self, model: torch.nn.Module, cfg, state: dict):
        self.cfg = cfg
        self.groups: dict[str, list[torch.nn.Parameter]] = {}
        for name, p in model.named_parameters():  # a tied output layer is the embedding: listed once
            self.groups.setdefault(group_of(name), []).append(p)
        self.embedding = model.tok_embeddings.weight
        self.state = state
        state.setdefault("history", {})  # group -> [[step, grad norm], ...] within the horizon
        state.setdefault("sigma_at", 0)  # the step count at the last sigma measurement
        state.setdefault("active", [])  # "alarm/group" in force: warned once, until it clears

    def grad_norms(self) -> dict[str, float]:
        """Each group's gradient norm, read back in one transfer (2 x groups scalar collectives before it)."""
        names = list(self.groups)
        values = torch.stack([_norm([p.grad for p in self.groups[g] if p.grad is not None]).float() for g in names])
        return dict(zip(names, values.tolist()))

    @torch.no_grad()
    def snapshot(self) -> dict[str, list[torch.Tensor]]:
        """The parameters before the optimizer step (this rank's shards): the update ratio's W_before."""
        return {g: [p.detach().clone() for p in ps] for g, ps in self.groups.items()}

    @torch.no_grad()
    def update_ratios(self, before: dict[str, list[torch.Tensor]]) -> dict[str, float]:
        names = list(self.groups)
        delta = torch.stack([_norm([p.detach() - b for p, b in zip(self.groups[g], before[g])]).float() for g in names])
        size = torch.stack([_norm(before[g]).float() for g in names])
        return dict(zip(names, (delta / size).tolist()))

    @torch.no_grad()
    def sigma_ratio(self) -> float:
        """sigma1 / sigma2 of the embedding matrix (vocabulary x d_model): 1 to a few for a healthy table,
        unbounded as its rows collapse onto one direction. Every rank takes part in the gather."""
        e = _full(self.embedding.detach()).float()
        # From the d x d Gram matrix, not an SVD of the vocabulary x d table: one matmul and a small symmetric
        # eigenproblem (at 32k x 2048, about 0.3 TFLOP and a 2048 x 2048 eigvalsh).
        eig = torch.linalg.eigvalsh((e.T @ e).double()).flip(0).clamp(min=0).sqrt()
        return float(eig[0] / eig[1]) if eig[1] > 0 else math.inf

    def sigma_due(self, steps_done: int) -> bool:
        return steps_done - self.state["sigma_at"] >= self.cfg.svd_interval

    def record(self, step: int, norms: dict[str, float]) -> None:
        """A logging step's group norms into the drift history (what lies beyond the horizon is dropped)."""
        history = self.state["history"]
        for g, v in norms.items():
            history.setdefault(g, []).append([step, v])
        for g in history:
            history[g] = [x for x in history[g] if x[0] > step - self.cfg.drift_horizon]

    def drifts(self) -> dict[str, float]:
        """Growth factor over the horizon of each group whose history spans it (at least four points): the
        exponential of the least-squares slope of log(grad norm) against the step, times the horizon."""
        out = {}
        for g, points in self.state["history"].items():
            if len(points) < 4 or points[-1][0] - points[0][0] < 0.9 * self.cfg.drift_horizon:
                continue
            x = np.array([p[0] for p in points], dtype=float)
            y = np.log(np.maximum([p[1] for p in points], 1e-30))
            out[g] = float(np.exp(np.polyfit(x, y, 1)[0] * self.cfg.drift_horizon))
        return out

    def alarms(self, step: int, sigma: float | None) -> list[dict]:
        """The alarms that start at this step (rows of HEALTH_ALARMS). One in force is not raised again until
        its value has come back under the threshold."""
        checks = [("grad_norm_drift", g, v, self.cfg.drift_factor) for g, v in self.drifts().items()]
        if sigma is not None:
            checks.append(("embedding_collapse", "embedding", sigma, self.cfg.sigma_ratio_max))
        active, raised = set(self.state["active"]), []
        for alarm, group, value, threshold in checks:
            key = f"{alarm}/{group}"
            if value > threshold and key not in active:
                active.add(key)
                raised.append({"step": step, "alarm": alarm, "group": group, "value": value, "threshold": threshold})
            elif value <= threshold:
                active.discard(key)
        self.state["active"] = sorted(active)
        return raised


# The parameters the optimizer updates: under FSDP2 the sharded ones. model.parameters() is not that: between a
# forward and its resharding FSDP2 registers the gathered, unsharded copies on the module instead (measured: a
# change made to them at the start of a step was gone after it, and a checksum of them read the copies).
def optimizer_params(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    return [p for group in optimizer.param_groups for p in group["params"]]


@torch.no_grad()
def checksum(params: list[torch.Tensor]) -> int:
    """An exact checksum of this rank's parameter shards: their bits read as integers and summed in int64
    (integer addition: the same bits give the same sum whatever the order)."""
    total = 0
    for p in params:
        local = (p.to_local() if isinstance(p, DTensor) else p).detach().contiguous()
        bits = {8: torch.int64, 4: torch.int32, 2: torch.int16}[local.element_size()]
        total += int(local.view(bits).to(torch.int64).sum())
    return total


def replica_mismatch(params: list[torch.Tensor], layout, step: int) -> str | None:
    """Compare this rank's shards with their data-parallel replicas' (the ranks that differ only in their
    dp_replicate coordinate hold the same shards); None when they agree or there are no replicas, else one
    line naming the ranks whose parameters differ from the majority (of two, both). A collective over the
    replicate dimension: every rank calls it at the same step."""
    if layout.dp_replicate == 1:
        return None
    group = layout.mesh.get_group("dp_replicate")
    mine = torch.tensor([checksum(params)], dtype=torch.int64, device=params[0].device)
    sums = [torch.zeros_like(mine) for _ in range(layout.dp_replicate)]
    dist.all_gather(sums, mine, group=group)
    values = [int(v) for v in sums]
    if len(set(values)) == 1:
        return None
    ranks = dist.get_process_group_ranks(group)
    majority = max(set(values), key=values.count)
    odd = [r for r, v in zip(ranks, values) if v != majority or values.count(majority) * 2 <= len(values)]
    return (f"silent data corruption: after step {step} the parameters of rank {', '.join(map(str, odd))} differ "
            f"from their data-parallel replicas' (ranks {', '.join(map(str, ranks))}, checksums "
            f"{', '.join(map(str, values))}); the run resumes from the last checkpoint, whose replicas agreed")


@torch.no_grad()
def corrupt(params: list[torch.Tensor]) -> None:
    """A fault for tests (TOKENMILL_FAULT=corrupt_weights_at=<step>): one element of this rank's first
    parameter shard nudged, as a flipped bit in a GPU's memory would."""
    p = params[0]
    (p.to_local() if isinstance(p, DTensor) else p).view(-1)[0] += 1e-3


@torch.no_grad()
def collapse(weight: torch.Tensor) -> None:
    """A fault for tests (TOKENMILL_FAULT=collapse_embedding=<step>): every row of the embedding put onto one
    direction (each keeps its own length and sign), with 1% of its size as noise. Works on a sharded table:
    the direction comes from a fixed seed, the same on every rank."""
    local = weight.to_local() if isinstance(weight, DTensor) else weight
    g = torch.Generator().manual_seed(0)
    direction = torch.randn(local.shape[-1], generator=g)
    direction = (direction / direction.norm()).to(local.device, local.dtype)
    scale = local.norm(dim=-1, keepdim=True)
    noise = torch.randn(local.shape, generator=g).to(local.device, local.dtype) * 0.01 * scale / local.shape[-1] ** 0.5
    local.copy_(torch.sign(local[:, :1]) * scale * direction + noise)
