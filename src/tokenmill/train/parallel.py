"""Parallelism applied to the plain model from outside (torchtitan's order): float8 linears, tensor parallel,
activation checkpointing, torch.compile per block, then FSDP2 per block and at the root.

One code path for every layout: a single process is a 1-rank mesh (FSDP2 over one rank is a no-op for the
maths and keeps parameters, checkpoints and resume the same DTensors as on a cluster). CPU runs use gloo and
an explicit CPU mesh, GPU runs NCCL. APIs used exist in torch 2.11 and 2.13.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor
from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, RowwiseParallel,
                                               SequenceParallel, parallelize_module)
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

from tokenmill.train.config import MeshShape, ParallelConfig
from tokenmill.train.model import Transformer


@dataclass(frozen=True)
class Layout:
    mesh: DeviceMesh
    dp_mesh: DeviceMesh  # what FSDP shards over (2-D for HSDP: replicate x shard)
    tp_mesh: DeviceMesh | None
    dp_rank: int  # this rank's slice of each global batch
    dp_replicate: int
    dp_shard: int
    tp: int

    @property
    def dp_size(self) -> int:
        return self.dp_replicate * self.dp_shard

    def describe(self) -> dict:
        return {"mesh": dict(zip(self.mesh.mesh_dim_names, self.mesh.shape)), "dp_size": self.dp_size, "tp": self.tp}


def build_mesh(device_type: str, shape: MeshShape) -> Layout:
    """dp_replicate x dp_shard x tp over the process group (tokenmill.train.config.mesh_shape checked that it
    fills the world); size-1 dimensions are left out except dp_shard."""
    dims = ([("dp_replicate", shape.dp_replicate)] if shape.dp_replicate > 1 else []) + [("dp_shard", shape.dp_shard)]
    dims += [("tp", shape.tp)] if shape.tp > 1 else []
    mesh = init_device_mesh(device_type, tuple(s for _, s in dims), mesh_dim_names=tuple(n for n, _ in dims))
    if len(dims) == 1:
        return Layout(mesh, mesh, None, mesh.get_local_rank(), 1, shape.dp_shard, 1)
    dp_names = tuple(n for n, _ in dims if n != "tp")
    dp_mesh = mesh[dp_names] if len(dp_names) > 1 else mesh[dp_names[0]]
    dp_rank = mesh.get_local_rank("dp_shard")
    if shape.dp_replicate > 1:
        dp_rank += mesh.get_local_rank("dp_replicate") * shape.dp_shard
    tp_mesh = mesh["tp"] if shape.tp > 1 else None
    return Layout(mesh, dp_mesh, tp_mesh, dp_rank, shape.dp_replicate, shape.dp_shard, shape.tp)


def apply_tp(model: Transformer, tp_mesh: DeviceMesh) -> None:
    """Megatron-style: q/k/v and w1/w3 column-wise, wo and w2 row-wise, norms sequence-parallel (activations
    between blocks are split along the sequence), the output layer column-wise with vocabulary-sharded logits
    for loss_parallel (the full logits never exist on one rank)."""
    parallelize_module(model, tp_mesh, {
        "tok_embeddings": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1)),
        "norm": SequenceParallel(),
        "output": ColwiseParallel(input_layouts=Shard(1), output_layouts=Shard(-1), use_local_output=False),
    })
    for block in model.layers.values():
        plan = {
            "attention_norm": SequenceParallel(),
            "attention": PrepareModuleInput(input_layouts=(Shard(1), None, None, None),
                                            desired_input_layouts=(Replicate(), None, None, None)),
            "attention.wq": ColwiseParallel(),
            "attention.wk": ColwiseParallel(),
            "attention.wv": ColwiseParallel(),
            "attention.wo": RowwiseParallel(output_layouts=Shard(1)),
            "ffn_norm": SequenceParallel(),
            "feed_forward": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
            "feed_forward.w1": ColwiseParallel(),
            "feed_forward.w2": RowwiseParallel(output_layouts=Shard(1)),
            "feed_forward.w3": ColwiseParallel(),
        }
        if block.attention.q_norm is not None:
            # Per-head norms see only this rank's heads (dim 2 of B, S, H, D): replicated weights whose
            # gradients are summed over the TP ranks, which a plain parameter would not get.
            plan["attention.q_norm"] = SequenceParallel(sequence_dim=2, use_local_output=True)
            plan["attention.k_norm"] = SequenceParallel(sequence_dim=2, use_local_output=True)
        parallelize_module(block, tp_mesh, plan)


# Selective activation checkpointing keeps what is expensive to recompute (matmuls, attention) and
# recomputes the cheap element-wise work (norms, SiLU, RoPE), torchtitan's op-level policy without its
# every-other-matmul refinement.
_SAVE = {torch.ops.aten.mm.default, torch.ops.aten.addmm.default, torch.ops.aten.bmm.default,
         torch.ops.aten._scaled_dot_product_flash_attention.default,
         torch.ops.aten._scaled_dot_product_efficient_attention.default,
         torch.ops.aten._scaled_dot_product_cudnn_attention.default}


def _selective_policy(ctx, op, *args, **kwargs):
    return CheckpointPolicy.MUST_SAVE if op in _SAVE else CheckpointPolicy.PREFER_RECOMPUTE


def _checkpointed(forward, selective: bool):
    context_fn = functools.partial(create_selective_checkpoint_contexts, _selective_policy) if selective else None

    @functools.wraps(forward)
    def run(*args):
        if context_fn is None:
            return checkpoint(forward, *args, use_reentrant=False)
        return checkpoint(forward, *args, use_reentrant=False, context_fn=context_fn)

    return run


def apply_ac(model: Transformer, mode: str) -> None:
    """Recompute each block's activations in backward. The block's forward is replaced on the instance
    rather than wrapping the module, so parameter names (and checkpoints) do not depend on this setting."""
    if mode == "none":
        return
    for block in model.layers.values():
        block.forward = _checkpointed(block.forward, selective=(mode == "selective"))


def apply_compile(model: Transformer, tensor_parallel: bool = False) -> None:
    """torch.compile each block in place (module.compile keeps names); blocks share one compiled graph.

    Under tensor parallelism the row-wise embedding hands the first block its sequence shard as an
    AsyncCollectiveTensor (a reduce-scatter not yet waited on). A compiled block given such an input returns a
    zero gradient for it on torch 2.13 (not on 2.11): the embedding would never learn while every other
    gradient looked right. A clone of the embedding's output waits for the collective and passes a plain
    tensor (one activation copy per step, on both versions)."""
    for block in model.layers.values():
        block.compile(fullgraph=False)
    if tensor_parallel:
        model.tok_embeddings.register_forward_hook(lambda module, args, out: out.clone())


def apply_fsdp(model: Transformer, dp_mesh: DeviceMesh, param_dtype: torch.dtype, reduce_dtype: torch.dtype,
               sharded: bool) -> None:
    """FSDP2 per block and at the root. Unsharded (one rank per replica): nothing is freed by resharding, so
    parameters stay gathered (cast to param_dtype) between forward and backward."""
    mp = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=reduce_dtype)
    # Blocks do not cast their inputs: the hidden state arrives in param_dtype from the embedding anyway, and
    # the RoPE tables must stay float32 (cast to bf16 they would lose the angle's low digits at long positions,
    # and GPU runs would rotate differently from CPU runs).
    block_mp = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=reduce_dtype, cast_forward_inputs=False)
    blocks = list(model.layers.values())
    for i, block in enumerate(blocks):
        # The last block's parameters are needed again at once by backward: keep them gathered.
        fully_shard(block, mesh=dp_mesh, mp_policy=block_mp, reshard_after_forward=sharded and i < len(blocks) - 1)
    fully_shard(model, mesh=dp_mesh, mp_policy=mp, reshard_after_forward=sharded)


def set_micro_batch(model: torch.nn.Module, layout: Layout, last: bool) -> None:
    """Gradient communication for the micro-batch about to run (gradient accumulation).

    Unsharded (dp_shard 1, one GPU or pure replication): parameters stay gathered and gradients accumulate
    in reduce_dtype until the last micro-batch, which alone reduces them: one cast of the parameters and one
    reduction per step instead of one per micro-batch, at no memory cost (sharded and unsharded are the same
    size). Sharded: every micro-batch reduce-scatters within its shard group (keeping full gradients would
    cost the memory FSDP saves), but the all-reduce across replicas (HSDP, across nodes) waits for the last."""
    if layout.dp_shard == 1:
        model.set_requires_gradient_sync(last)
        model.set_reshard_after_backward(last)
    elif layout.dp_replicate > 1:
        model.set_requires_all_reduce(last)


def write_param(param: torch.Tensor, full: torch.Tensor) -> None:
    """Set a (possibly sharded) parameter from its whole value, which every rank computed alike: a DTensor keeps
    its own shard of it, without communication (src_data_rank None: each rank slices its local copy)."""
    if isinstance(param, DTensor):
        param.copy_(distribute_tensor(full, param.device_mesh, param.placements, src_data_rank=None))
    else:
        param.copy_(full)


def apply_float8(model: Transformer, recipe: str) -> None:
    """torchao's float8 training (train.parallel.float8): every linear of the blocks computes its three matrix
    products in float8 with dynamic scales (tensorwise: one scale per tensor; rowwise: one per row, more
    accurate, slower kernels), keeping its weight, its name and its checkpoint in param_dtype. The output layer
    stays as it is (torchtitan's choice too: the logits' precision matters most). Dimensions must be multiples of
    16 for the float8 kernels: every preset's are."""
    if recipe == "none":
        return
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training  # 4.5 s to import: only for a float8 recipe

    convert_to_float8_training(model.layers, config=Float8LinearConfig.from_recipe_name(recipe))


def parallelize(model: Transformer, layout: Layout, par: ParallelConfig, device_type: str) -> None:
    apply_float8(model, par.float8)
    if layout.tp_mesh is not None:
        apply_tp(model, layout.tp_mesh)
    apply_ac(model, par.activation_checkpoint)
    if par.compile:
        apply_compile(model, tensor_parallel=layout.tp_mesh is not None)
    param_dtype = par.param_dtype
    if param_dtype == "auto":
        param_dtype = "bfloat16" if device_type == "cuda" else "float32"
    apply_fsdp(model, layout.dp_mesh, getattr(torch, param_dtype), getattr(torch, par.reduce_dtype),
               sharded=layout.dp_shard > 1)
