"""Peak GPU memory of one training step, computed from the model's shape and the run's layout: what a
long-context phase costs per GPU before a GPU runs it (docs/long_context.md, "The GPU preset").

Every term is bytes the code holds, counted from its tensors, with no constant fitted to a measurement:
  state        float32 parameters, gradients and AdamW's two moments (16 bytes a parameter), sharded by FSDP over
               dp_shard x tp GPUs (HSDP's replicas each hold a shard set);
  gathered     two blocks' parameters unsharded in param_dtype (the block computing and the one FSDP prefetches);
               unsharded (dp_shard 1), every parameter: nothing is freed by resharding, so FSDP keeps them
               gathered between forward and backward (tokenmill.train.parallel.apply_fsdp);
  activations  what backward keeps per token of a micro-batch, in param_dtype, split over tp by sequence
               parallelism; per block: the inputs of the two RMSNorms and of every matmul, q, k and v, the
               attention output (the SDPA flash or cuDNN kernel keeps no seq x seq matrix, only its log-sum-exp),
               the gate and up projections, SiLU's output and the down projection's input. activation_checkpoint
               full keeps each block's input only and recomputes one block at a time; selective (the matmul
               outputs kept, the element-wise ops recomputed) keeps q, k, v, the attention output and the three
               FFN products;
  logits       the output layer's logits in param_dtype plus their float32 log-softmax (the compiled loss fuses the
               cast), split over tp (vocabulary-parallel).
The total is the larger of the step's peak (the sum of those terms) and, unsharded, the gradient reduction's:
  reduction    the state, every parameter gathered, and each gradient twice more (the micro-batch's in
               param_dtype, its copy in reduce_dtype for the reduction), 24 bytes a parameter in bf16/float32.
               Measured on one H200: 24.0 bytes a parameter at 6 and at 8 blocks of the 8B model with full
               checkpointing, in runs from 4K to 32K (benchmarks/RESULTS.md, "Long context on GPU"). Which of FSDP2's
               buffers hold those bytes was not traced on the GPU; on CPU such a run peaks in the second step's
               backward, after a block's gradient reduction. It sets the peak where activations are few (full
               checkpointing) and the model deep.
Checked against the runs measured on one H100/H200 (tests/test_train_memory.py): it stays above each measured
peak by at most a quarter (the allocator reuses buffers the count treats as live, and compile fuses some away:
the logits and the recompute are the terms it counts most generously).
"""

from __future__ import annotations

from tokenmill.train.config import ModelConfig, TrainConfig, mesh_shape, model_size

GiB = 2 ** 30
STATE_BYTES = 16  # a parameter's float32 value, gradient and AdamW's two moments


def step_memory(model: ModelConfig, train: TrainConfig, vocab_size: int, world: int,
                seq_len: int | None = None) -> dict:
    """{term: bytes per GPU} of a step at seq_len (default train.seq_len) and "total"; the micro-batch keeps its
    tokens at any length (tokenmill.train.trainer.Trainer.micro_batch_at)."""
    shape = mesh_shape(train, world)
    par = train.parallel
    p_bytes = 2 if par.param_dtype in ("bfloat16", "auto") else 4
    size = model_size(model, vocab_size)
    tp, shard = par.tp, shape.dp_shard
    unsharded = shard == 1
    r_bytes = 2 if par.reduce_dtype == "bfloat16" else 4
    L = seq_len or train.seq_len
    tokens = shape.micro_batch * train.seq_len  # tokens of one micro-batch, at any sequence length
    d, f, kv = model.d_model, model.hidden_dim, model.kv_heads * model.head_dim
    q = model.n_heads * model.head_dim
    per_token = {
        # per block, elements kept for backward: norm inputs 2d; q/k/v input d; q, k, v; attention output q;
        # wo input (= attention output, counted once); FFN input d; gate, up f each; SiLU output f; w2 input f
        "none": 2 * d + d + q + 2 * kv + q + d + 4 * f,
        "selective": d + q + 2 * kv + q + 3 * f,  # the block input and the matmul outputs
        "full": d,  # the block input only
    }[par.activation_checkpoint]
    block_params = (size["params"] - size["embedding_params"]
                    - (0 if model.tie_embeddings else vocab_size * d)) / model.n_layers
    out = {
        "state": STATE_BYTES * size["params"] / (shard * tp),
        "gathered": (size["params"] if unsharded else 2 * block_params) * p_bytes / tp,
        "activations": model.n_layers * per_token * tokens * p_bytes / tp,
        "recompute": (0 if par.activation_checkpoint == "none" else
                      (2 * d + d + q + 2 * kv + q + d + 4 * f) * tokens * p_bytes / tp),
        "logits": tokens * vocab_size * (p_bytes + 4) / tp,
    }
    out = {k: int(v) for k, v in out.items()}
    reduction = int((STATE_BYTES + 2 * p_bytes + r_bytes) * size["params"] / tp) if unsharded else 0
    out["total"] = max(sum(out.values()), reduction)
    out["reduction"] = reduction
    out["seq_len"], out["tokens_per_micro_batch"] = L, tokens
    return out
