"""A plain Llama-style decoder: RMSNorm, RoPE, SwiGLU, grouped-query attention through SDPA (FlexAttention
with a document-causal block mask when documents are masked from each other).

No parallelism here and no torch.distributed import: parallel.py shards these modules from outside
(torchtitan style). Attention reshapes with -1 heads so the same code runs on the local heads of a
tensor-parallel shard. Parameter counts match config.model_size exactly (a test checks it).
"""

from __future__ import annotations

import functools
import math
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention.flex_attention import BlockMask, create_block_mask, flex_attention

from tokenmill.train.config import ModelConfig


@functools.cache
def _compiled_flex():
    return torch.compile(flex_attention)


def _flex(device: torch.device):
    """FlexAttention, compiled on a GPU: there it generates one fused kernel for the block mask (eager flex
    materialises the scores, as the explicit mask of SDPA's math kernel did: 32 heads x 4096^2 fp32 per layer
    at the H100 presets, 16 GiB). Eager on CPU, where the compiled kernel gains nothing at these sizes.
    Inside a compiled block the block's own compile fuses it: wrapping it again there made the first trace
    create the wrapper, and the guard on that global recompiled the block at the next call (seen on an H100,
    2026-11-26: a second compile of every block, 16.0 s first step against 13.2)."""
    if device.type != "cuda" or torch.compiler.is_compiling():
        return flex_attention
    return _compiled_flex()


def rope_tables(head_dim: int, max_len: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of position x frequency, (max_len, head_dim / 2), in float32."""
    freqs = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    angles = torch.outer(torch.arange(max_len, dtype=torch.float32), freqs)
    return angles.cos(), angles.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x: (B, S, H, D); cos/sin broadcastable to (B, S, 1, D/2). Rotates interleaved pairs, in float32."""
    xf = x.float().unflatten(-1, (-1, 2))
    a, b = xf[..., 0], xf[..., 1]
    out = torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).flatten(-2)
    return out.type_as(x)


def document_layout(tokens: torch.Tensor, eos_id: int, flex: bool) -> tuple[torch.Tensor, BlockMask | torch.Tensor]:
    """Positions that restart after every end-of-text, and the mask allowing attention only to earlier tokens
    of the same document; the end-of-text token belongs to the document it ends. flex: FlexAttention's block
    mask (blocks of 128 x 128 wholly outside it are skipped, never computed); otherwise a (B, 1, S, S) boolean
    mask for SDPA, which then runs its math kernel over the whole square (what CPU training uses: FlexAttention
    has no backward on CPU in torch 2.11-2.13)."""
    is_eos = (tokens == eos_id).to(torch.int64)
    doc = torch.cumsum(is_eos, dim=1) - is_eos  # documents started before each token
    idx = torch.arange(tokens.shape[1], device=tokens.device).expand_as(tokens)
    # Start of each token's document: the largest index whose previous token is eos (or 0).
    starts = torch.where(torch.cat([torch.ones_like(is_eos[:, :1]), is_eos[:, :-1]], dim=1).bool(), idx, 0)
    positions = idx - torch.cummax(starts, dim=1).values
    if not flex:
        same_doc = doc.unsqueeze(2) == doc.unsqueeze(1)
        causal = torch.ones(tokens.shape[1], tokens.shape[1], dtype=torch.bool, device=tokens.device).tril()
        return positions, (same_doc & causal).unsqueeze(1)

    def same_document_causal(b, h, q, kv):
        return (doc[b, q] == doc[b, kv]) & (q >= kv)

    S = tokens.shape[1]
    mask = create_block_mask(same_document_causal, tokens.shape[0], None, S, S, device=tokens.device)
    return positions, mask


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.head_dim = cfg.head_dim
        self.q_per_kv = cfg.n_heads // cfg.kv_heads
        self.wq = nn.Linear(cfg.d_model, cfg.n_heads * cfg.head_dim, bias=False)
        self.wk = nn.Linear(cfg.d_model, cfg.kv_heads * cfg.head_dim, bias=False)
        self.wv = nn.Linear(cfg.d_model, cfg.kv_heads * cfg.head_dim, bias=False)
        self.wo = nn.Linear(cfg.n_heads * cfg.head_dim, cfg.d_model, bias=False)
        self.q_norm = nn.RMSNorm(cfg.head_dim, eps=cfg.norm_eps) if cfg.qk_norm else None
        self.k_norm = nn.RMSNorm(cfg.head_dim, eps=cfg.norm_eps) if cfg.qk_norm else None

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: BlockMask | torch.Tensor | None):
        B, S, _ = x.shape
        # -1 heads: under tensor parallelism each rank holds n_heads / tp query and kv heads.
        q = self.wq(x).view(B, S, -1, self.head_dim)
        k = self.wk(x).view(B, S, -1, self.head_dim)
        v = self.wv(x).view(B, S, -1, self.head_dim)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # (B, H, S, D)
        # enable_gqa lets the kernel share each kv head among its query heads without copying k and v.
        gqa = self.q_per_kv > 1
        if mask is None:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
        elif isinstance(mask, BlockMask):
            out = _flex(q.device)(q, k, v, block_mask=mask, enable_gqa=gqa)
        else:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=gqa)
        return self.wo(out.transpose(1, 2).reshape(B, S, -1))


class FeedForward(nn.Module):
    """SwiGLU: w2(silu(w1 x) * w3 x)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.w1 = nn.Linear(cfg.d_model, cfg.hidden_dim, bias=False)
        self.w3 = nn.Linear(cfg.d_model, cfg.hidden_dim, bias=False)
        self.w2 = nn.Linear(cfg.hidden_dim, cfg.d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.attention_norm = nn.RMSNorm(cfg.d_model, eps=cfg.norm_eps)
        self.attention = Attention(cfg)
        self.ffn_norm = nn.RMSNorm(cfg.d_model, eps=cfg.norm_eps)
        self.feed_forward = FeedForward(cfg)

    def forward(self, x, cos, sin, mask):
        x = x + self.attention(self.attention_norm(x), cos, sin, mask)
        return x + self.feed_forward(self.ffn_norm(x))


class Transformer(nn.Module):
    """tokens (B, S) -> logits (B, S, vocab). eos_id is used only by document masking.

    width_mult: μP (Maximal Update Parametrisation, Tensor Programs V), d_model over the width the recipe was
    tuned at (train.mup_base_width); None: the standard parametrisation. Under μP the hidden matrices are drawn
    with σ ∝ 1/sqrt(fan_in) (init_std at the base width), the logits are divided by width_mult, and the optimizer
    gives the hidden matrices the learning rate / width_mult (loop.param_groups): the activations' scale after an
    update then does not grow with width, and the best learning rate found at a small width holds at a large one
    (tests/test_train_core.py, RESULTS "μP").

    Attention keeps SDPA's 1/sqrt(head_dim). μP's 1/head_dim is for models whose heads grow wider; every ladder
    and preset here widens by adding heads of a fixed size (32, 48, 128), where the two differ by a constant,
    and that constant cost 0.14 nats of held-out loss at width 256 with the same best learning rate (RESULTS,
    "μP: the best learning rate across widths")."""

    def __init__(self, cfg: ModelConfig, vocab_size: int, max_seq_len: int, eos_id: int | None = None,
                 width_mult: float | None = None):
        super().__init__()
        if cfg.document_mask and eos_id is None:
            raise ValueError("model.document_mask needs the tokenizer's eos_id")
        self.cfg, self.vocab_size, self.eos_id, self.width_mult = cfg, vocab_size, eos_id, width_mult
        # The document mask through FlexAttention: None is on a GPU (see document_layout).
        self.flex: bool | None = None
        self.tok_embeddings = nn.Embedding(vocab_size, cfg.d_model)
        # A ModuleDict keyed "0".."n-1" keeps the state-dict names stable when parallel.py wraps blocks.
        self.layers = nn.ModuleDict({str(i): Block(cfg) for i in range(cfg.n_layers)})
        self.norm = nn.RMSNorm(cfg.d_model, eps=cfg.norm_eps)
        self.output = nn.Linear(cfg.d_model, vocab_size, bias=False)
        if cfg.tie_embeddings:
            self.output.weight = self.tok_embeddings.weight
        cos, sin = rope_tables(cfg.head_dim, max_seq_len, cfg.rope_theta)
        # Not parameters and not in the state dict: recomputed from the config on every load, and from the
        # phase's base when a long-context phase changes it (set_rope_theta).
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        self.rope_theta = cfg.rope_theta

    @torch.no_grad()
    def init_weights(self, seed: int, write: Callable[[torch.Tensor, torch.Tensor], None] | None = None) -> None:
        """Deterministic from the seed alone (one CPU generator, parameters in a fixed order).

        Normal(0, init_std) for every matrix, with the output projections of each block (wo, w2) scaled by
        1/sqrt(2 n_layers) (GPT-2), so the residual stream's variance does not grow with depth; norms at 1.
        Under μP the blocks' matrices by 1/sqrt(width_mult) more (σ ∝ 1/sqrt(fan_in), the full pre-sharding
        fan-in); the embedding and output tables keep init_std.
        Each parameter's whole value is drawn in turn and handed to `write`: the training stage builds the model
        on the meta device, shards it, materialises only this rank's shards and passes parallel.write_param,
        which keeps the shard's part of the draw. So the values do not depend on the layout, and no rank holds
        more than one whole parameter at a time; every rank still draws all of them on its CPU (the same values
        as before meta initialisation: drawing per parameter on the GPU would change every run's numbers)."""
        write = write or (lambda param, full: param.copy_(full))
        g = torch.Generator(device="cpu").manual_seed(seed)
        std = self.cfg.init_std
        hidden = std / math.sqrt(self.width_mult) if self.width_mult is not None else std
        deep = hidden / math.sqrt(2 * self.cfg.n_layers)

        def normal_(p: torch.Tensor, s: float) -> None:
            full = torch.randn(p.shape, generator=g, dtype=torch.float32).mul_(s)
            write(p, full.to(device=p.device, dtype=p.dtype))

        normal_(self.tok_embeddings.weight, std)
        for block in self.layers.values():
            a, f = block.attention, block.feed_forward
            for lin, s in ((a.wq, hidden), (a.wk, hidden), (a.wv, hidden), (a.wo, deep), (f.w1, hidden),
                           (f.w3, hidden), (f.w2, deep)):
                normal_(lin.weight, s)
        if not self.cfg.tie_embeddings:
            normal_(self.output.weight, std)
        for m in self.modules():
            if isinstance(m, nn.RMSNorm):
                write(m.weight, torch.ones(m.weight.shape, dtype=m.weight.dtype, device=m.weight.device))
        self.rope_theta = None
        self.set_rope_theta(self.cfg.rope_theta)

    @torch.no_grad()
    def set_rope_theta(self, theta: float) -> None:
        """RoPE's tables at base theta (a long-context phase's, train.rope_scaling), in place: the buffers keep
        their device and shape, so a compiled block sees the same inputs and is not compiled again."""
        if theta == self.rope_theta:
            return
        cos, sin = rope_tables(self.cfg.head_dim, self.rope_cos.shape[0], theta)
        self.rope_cos.copy_(cos)
        self.rope_sin.copy_(sin)
        self.rope_theta = theta

    def forward(self, tokens: torch.Tensor, select: torch.Tensor | None = None) -> torch.Tensor:
        """Logits (B, S, vocab); with select (B, K) positions, only at those (B, K, vocab): evaluation
        scores a few answer tokens after a long context, and on a small model the output layer is most of
        the cost (vocab x d per token against about 12 d^2 per layer). Not under tensor parallelism, where
        the activations reaching the output layer are split along the sequence."""
        S = tokens.shape[1]
        if self.cfg.document_mask:
            flex = self.flex if self.flex is not None else tokens.device.type == "cuda"
            positions, mask = document_layout(tokens, self.eos_id, flex)
            cos, sin = self.rope_cos[positions].unsqueeze(2), self.rope_sin[positions].unsqueeze(2)
        else:
            mask = None
            cos, sin = self.rope_cos[:S].view(1, S, 1, -1), self.rope_sin[:S].view(1, S, 1, -1)
        h = self.tok_embeddings(tokens)
        for block in self.layers.values():
            h = block(h, cos, sin, mask)
        if select is not None:
            h = h.gather(1, select.unsqueeze(-1).expand(-1, -1, h.shape[-1]))
        h = self.norm(h)
        if self.width_mult is not None:
            h = h / self.width_mult  # μP's logits / width_mult, on the d_model side: the output layer is linear
        return self.output(h)


def lm_loss(logits: torch.Tensor, targets: torch.Tensor, z_loss: float = 0.0,
            vocab_sharded: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """(loss to optimise, cross-entropy) as means over all tokens; logits in float32 (bf16 CE loses digits).

    z-loss adds z_loss x mean(logsumexp(logits)^2), pulling the softmax normaliser towards 1 (PaLM).
    vocab_sharded: the logits are split over the vocabulary (tensor parallel, under loss_parallel). The
    normaliser is then taken from a max and a sum of exponentials, two reductions DTensor finishes with an
    all-reduce of one value per token; torch.logsumexp has no sharded rule and all-gathered the whole float32
    logits first (counted with CommDebugMode: tests/test_train_distributed.py).
    """
    flat = logits.flatten(0, 1).float()
    ce = F.cross_entropy(flat, targets.flatten(0, 1))
    if z_loss > 0:
        if vocab_sharded:
            top = flat.detach().amax(dim=-1, keepdim=True)
            lse = (flat - top).exp().sum(dim=-1).log() + top.squeeze(-1)
        else:
            lse = torch.logsumexp(flat, dim=-1)
        return ce + z_loss * lse.pow(2).mean(), ce
    return ce, ce
