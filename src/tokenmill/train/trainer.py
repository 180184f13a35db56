"""The pieces of one run on this rank that the loop (and tests) drive: the model, its parallel layout, the
optimizer and its parameter groups, the data loader; the held-out loss and benchmark log-likelihoods."""

from __future__ import annotations

import contextlib
import functools
import math

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.parallel import loss_parallel

from tokenmill.train.config import (RunConfig, mesh_shape)
from tokenmill.train.data import BatchLoader, PlanStream
from tokenmill.train.model import Transformer, lm_loss
from tokenmill.train.parallel import Layout, build_mesh, parallelize, set_micro_batch, write_param

def _world_mean(value: torch.Tensor) -> torch.Tensor:
    """Mean over all ranks. Ranks of one TP group hold the same value, so this is the mean over DP ranks.
    SUM then divide: gloo has no AVG all-reduce."""
    value = value.detach().clone()
    dist.all_reduce(value, op=dist.ReduceOp.SUM)
    return value / dist.get_world_size()


# ---------------------------------------------------------------------------------------------------------
# The model and one step


def param_groups(model: torch.nn.Module, weight_decay: float,
                 width_mult: float | None = None) -> tuple[list[dict], list[float]]:
    """(the optimizer's parameter groups, each group's learning-rate scale). Decay matrices of the linear
    layers only; norms and the embedding table are not decayed (a tied output layer is the embedding table, so
    it is not decayed either). A group's scale multiplies the step's learning rate: 1 / width_mult for the
    blocks' matrices under μP (Adam's update of a matrix whose both sides grow with width), 1 for everything
    else (the embedding, the output layer and the norms have one side of fixed size); 1 everywhere in the
    standard parametrisation. AdamW's decay is lr x weight_decay, so
    it scales with the group's learning rate. The scales stay outside the groups: a checkpoint's groups
    replace the optimizer's when it loads."""
    hidden, output, no_decay, seen = [], [], [], set()
    for name, p in model.named_parameters():
        if id(p) in seen:
            continue
        seen.add(id(p))
        if p.ndim < 2 or "tok_embeddings" in name:
            no_decay.append(p)
        else:
            (output if name.startswith("output.") else hidden).append(p)
    scale = 1.0 / width_mult if width_mult is not None else 1.0
    groups = [({"params": hidden, "weight_decay": weight_decay}, scale),
              ({"params": output, "weight_decay": weight_decay}, 1.0),  # empty when tied
              ({"params": no_decay, "weight_decay": 0.0}, 1.0)]
    kept = [(g, s) for g, s in groups if g["params"]]
    return [g for g, _ in kept], [s for _, s in kept]


class Trainer:
    """The model, optimizer and data of one run on this rank; the pieces the loop (and tests) drive."""

    def __init__(self, cfg: RunConfig, stream: PlanStream, device: torch.device):
        self.cfg, self.stream, self.device = cfg, stream, device
        t = cfg.train
        shape = mesh_shape(t, dist.get_world_size())
        self.layout: Layout = build_mesh(device.type, shape)
        self.loader = BatchLoader(stream, t.seq_len, t.global_batch, self.layout.dp_rank, self.layout.dp_size,
                                  record=dist.get_rank() == 0)
        self.micro_batch = shape.micro_batch
        # RoPE's base per sequence length (train.rope_scaling): a long-context phase may change it.
        self.rope_theta = {L: t.rope_scaling.theta_at(cfg.model, L, t.seq_len) for L in {t.seq_len,
                                                                                       *self.loader.lengths.values()}}
        for length in self.rope_theta:
            self.micro_batch_at(length)  # a length no micro-batch fits stops the run here, not at its phase
        torch.manual_seed(t.seed)
        # Built on the meta device (no memory), sharded, then only this rank's shards are allocated on the
        # device and initialised there: no rank ever holds the whole model (at 0.86B that was 3.4 GB of host
        # memory and 10-20 s of CPU per rank; at 8B it would not fit).
        with torch.device("meta"):
            # RoPE's tables span the longest sequence of any phase.
            model = Transformer(cfg.model, stream.vocab_size, self.loader.longest, stream.eos_id,
                                t.width_mult(cfg.model))
        parallelize(model, self.layout, t.parallel, device.type)
        model.to_empty(device=device)
        model.init_weights(t.seed, write=write_param)
        self.model = model
        # Compiled beside the blocks: fusing the float32 cast, log-softmax and gather saves writing the
        # (micro-batch x seq x vocabulary) float32 logits and their log-softmax (4 GiB each at the H100 preset).
        # Not under TP, where the logits are vocabulary-sharded DTensors for loss_parallel.
        if self.layout.tp_mesh is not None:
            self.loss_fn = functools.partial(lm_loss, vocab_sharded=True)
        else:
            self.loss_fn = torch.compile(lm_loss) if t.parallel.compile else lm_loss
        opt = t.optimizer
        fused = opt.fused if opt.fused is not None else device.type == "cuda"
        groups, self.lr_scales = param_groups(model, opt.weight_decay, t.width_mult(cfg.model))
        self.optimizer = torch.optim.AdamW(groups, lr=opt.lr, betas=opt.betas, eps=opt.eps, fused=fused,
                                           foreach=None if fused else True)

    def micro_batch_at(self, seq_len: int) -> int:
        """Sequences per micro-batch at seq_len: the micro-batch's tokens stay those at train.seq_len (what fits
        in memory at the base length fits at a longer one, activations being per token, attention's aside)."""
        base = self.cfg.train.seq_len
        if (self.micro_batch * base) % seq_len:
            raise ValueError(f"a micro-batch of {self.micro_batch} x {base} tokens (train.micro_batch x "
                             f"train.seq_len) is not a whole number of {seq_len}-token sequences: set "
                             f"train.micro_batch to a multiple of {seq_len // math.gcd(seq_len, base)}")
        return self.micro_batch * base // seq_len

    def use_length(self, seq_len: int) -> None:
        """RoPE's base for sequences of seq_len (the step's phase's); the model's tables change only with it."""
        self.model.set_rope_theta(self.rope_theta[seq_len])

    def _loss_context(self):
        return loss_parallel() if self.layout.tp_mesh is not None else contextlib.nullcontext()

    def _to_device(self, array: np.ndarray) -> torch.Tensor:
        """Host ids to the device as int64. On a GPU through pinned memory without blocking: a copy from
        pageable memory waits for every queued kernel, so the host could not queue the next micro-batch's
        work while the current one runs."""
        t = torch.from_numpy(array.astype(np.int64))
        if self.device.type != "cuda":
            return t
        return t.pin_memory().to(self.device, non_blocking=True)

    def forward_backward(self, inputs: np.ndarray, targets: np.ndarray) -> torch.Tensor:
        """Gradients of the mean loss over this rank's sequences (accumulated over micro-batches);
        returns the mean cross-entropy on this rank (without z-loss).

        Gradient communication happens on the last micro-batch only where it would be repeated for nothing
        (parallel.set_micro_batch: measured on one H100, casting parameters and copying gradients once per
        micro-batch was about 4% of the step)."""
        micro = self.micro_batch_at(inputs.shape[1])
        n_micro = inputs.shape[0] // micro
        if n_micro * micro != inputs.shape[0]:
            raise ValueError(f"{inputs.shape[0]} sequences of {inputs.shape[1]} tokens on this rank do not split "
                             f"into micro-batches of {micro} (train.micro_batch x train.seq_len tokens)")
        x_all, y_all = self._to_device(inputs), self._to_device(targets)  # one copy each for the whole step
        total = torch.zeros((), device=self.device)
        for i in range(n_micro):
            set_micro_batch(self.model, self.layout, last=i == n_micro - 1)
            sl = slice(i * micro, (i + 1) * micro)
            with self._loss_context():
                loss, ce = self.loss_fn(self.model(x_all[sl]), y_all[sl], self.cfg.model.z_loss)
                (loss / n_micro).backward()
            ce = ce.full_tensor() if isinstance(ce, DTensor) else ce
            total += ce.detach() / n_micro
        return total

    def grad_norm(self) -> torch.Tensor:
        grads = [p.grad for p in self.model.parameters() if p.grad is not None]
        norm = torch.nn.utils.get_total_norm(grads, 2.0, error_if_nonfinite=False, foreach=True)
        return norm.full_tensor() if isinstance(norm, DTensor) else norm

    def clip_and_step(self, norm: torch.Tensor, lr: float) -> None:
        for group, scale in zip(self.optimizer.param_groups, self.lr_scales):
            group["lr"] = lr * scale
        params = [p for p in self.model.parameters() if p.grad is not None]
        torch.nn.utils.clip_grads_with_norm_(params, self.cfg.train.clip_grad_norm, norm, foreach=True)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)

    @torch.no_grad()
    def heldout_loss(self, sequences: np.ndarray) -> tuple[float, int]:
        """Mean cross-entropy over whole sequences, split evenly over DP ranks; (loss, sequences used)."""
        n = (len(sequences) // self.layout.dp_size) * self.layout.dp_size
        if n == 0:
            return float("nan"), 0
        per = n // self.layout.dp_size
        mine = sequences[self.layout.dp_rank * per:(self.layout.dp_rank + 1) * per]
        self.model.eval()
        total = torch.zeros((), device=self.device)
        for i in range(0, per, self.micro_batch):
            chunk = mine[i:i + self.micro_batch]
            x = torch.from_numpy(chunk[:, :-1].astype(np.int64)).to(self.device)
            y = torch.from_numpy(chunk[:, 1:].astype(np.int64)).to(self.device)
            with self._loss_context():
                _, ce = lm_loss(self.model(x), y)
            ce = ce.full_tensor() if isinstance(ce, DTensor) else ce
            total += ce * len(chunk) / per
        self.model.train()
        return float(_world_mean(total)), n


    @torch.no_grad()
    def token_losses(self, sequences: list[np.ndarray], batch: int = 8) -> list[np.ndarray]:
        """Each sequence's per-target cross-entropy: out[i][p] is the loss of sequences[i][p + 1] given
        sequences[i][:p + 1]. Split over the DP ranks in contiguous slices as loglikelihoods is (TP ranks of a group
        score the same ones), longest first, padded at the end with end-of-text (causal: padding changes no
        earlier position); one all-reduce gathers them."""
        n = len(sequences)
        lengths = [len(s) - 1 for s in sequences]
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        out = torch.zeros(int(offsets[-1]), dtype=torch.float64, device=self.device)
        per, mine = self._my_share(n, key=lambda j: -lengths[j])
        self.model.eval()
        for i in range(0, per, batch):
            idx = mine[i:i + batch] or [0]  # a rank past its share scores sequence 0 and discards it
            width = max(lengths[j] for j in idx)
            x = np.full((len(idx), width), self.stream.eos_id, dtype=np.int64)
            y = np.full((len(idx), width), -100, dtype=np.int64)
            for r, j in enumerate(idx):
                x[r, :lengths[j]], y[r, :lengths[j]] = sequences[j][:-1], sequences[j][1:]
            with self._loss_context():
                logits = self.model(torch.from_numpy(x).to(self.device))
                ce = F.cross_entropy(logits.flatten(0, 1).float(), torch.from_numpy(y).to(self.device).flatten(),
                                     reduction="none")
            ce = (ce.full_tensor() if isinstance(ce, DTensor) else ce).view(len(idx), width).double()
            if mine[i:i + batch]:
                for r, j in enumerate(idx):
                    out[int(offsets[j]):int(offsets[j + 1])] = ce[r, :lengths[j]]
        self.model.train()
        flat = self._gathered(out)
        return [flat[offsets[j]:offsets[j + 1]] for j in range(n)]

    def _my_share(self, n: int, key) -> tuple[int, list[int]]:
        """This DP rank's contiguous slice of n requests (the TP ranks of its group score the same ones), in the
        order of key; and the slice length every rank loops over (a rank past its share pads)."""
        per = -(-n // self.layout.dp_size)
        first = min(n, self.layout.dp_rank * per)
        return per, sorted(range(first, min(n, first + per)), key=key)

    def _gathered(self, out: torch.Tensor) -> np.ndarray:
        """Every rank's scores, summed in one all-reduce (each request is nonzero on one DP group only; the TP
        ranks of that group hold the same values, so the sum is divided by the TP size)."""
        dist.all_reduce(out, op=dist.ReduceOp.SUM)
        return (out / (dist.get_world_size() // self.layout.dp_size)).cpu().numpy()

    @torch.no_grad()
    def loglikelihoods(self, windows: list[np.ndarray], n_cont: list[int], batch: int | None = None) -> np.ndarray:
        """Log-likelihood of the last n_cont[i] tokens of each window given the tokens before them.

        Requests are split in contiguous slices over the DP ranks (TP ranks of a group score the same ones);
        each rank scores its slice shortest first, so a batch pads little (to a multiple of 16), and every
        rank makes the same number of forward calls (FSDP gathers weights in each), padding its last ones.
        One all-reduce gathers the results. batch: requests per forward call (default: the micro-batch, at least 8;
        the same on every rank)."""
        n = len(windows)
        per, mine = self._my_share(n, key=lambda j: len(windows[j]))
        out = torch.zeros(n, dtype=torch.float64, device=self.device)
        batch = batch or max(self.micro_batch, 8)
        select = self.layout.tp_mesh is None  # logits at the answer positions only (Transformer.forward)
        self.model.eval()
        for i in range(0, per, batch):
            idx = mine[i:i + batch] or [0]  # a rank past its share scores request 0 and discards it
            length = -(-max(len(windows[j]) - 1 for j in idx) // 16) * 16
            width = max(n_cont[j] for j in idx) if select else length
            x = np.full((len(idx), length), self.stream.eos_id, dtype=np.int64)
            y = np.full((len(idx), width), -100, dtype=np.int64)
            at = np.zeros((len(idx), width), dtype=np.int64)
            for r, j in enumerate(idx):
                w, k = windows[j], n_cont[j]
                x[r, :len(w) - 1] = w[:-1]
                start = len(w) - 1 - k  # the input position predicting the answer's first token
                if select:
                    y[r, :k], at[r, :k] = w[-k:], np.arange(start, start + k)
                else:
                    y[r, start:start + k] = w[-k:]
            xt, yt = torch.from_numpy(x).to(self.device), torch.from_numpy(y).to(self.device)
            with self._loss_context():
                logits = self.model(xt, torch.from_numpy(at).to(self.device) if select else None)
                ce = F.cross_entropy(logits.flatten(0, 1).float(), yt.flatten(), reduction="none")
            ce = ce.full_tensor() if isinstance(ce, DTensor) else ce
            if mine[i:i + batch]:
                out[torch.tensor(idx, device=self.device)] = -ce.view(len(idx), width).double().sum(dim=1)
        self.model.train()
        return self._gathered(out)
