"""A training run as a Hugging Face checkpoint that transformers loads with no custom code.

Architecture: LlamaForCausalLM for a plain model; with `qk_norm` Qwen3ForCausalLM, the architecture shipped
with transformers whose attention applies a per-head RMSNorm to queries and keys before RoPE, as
tokenmill.train.model does (Llama has no q/k norm). Every other part maps one to one (SwiGLU MLP without
bias, RMSNorm before attention and MLP, final norm, optional tied embeddings, grouped-query attention).

RoPE: tokenmill rotates interleaved pairs (x[2i], x[2i+1]) by frequency i; transformers' rotate_half pairs
(x[i], x[i + D/2]). Reordering each head's output rows of wq and wk by [0, 2, 4, ..., 1, 3, 5, ...] turns one
into the other (the attention scores are dot products, unchanged by permuting q and k alike); the q/k norm
weights act on those same per-head coordinates, so they take the same permutation. wv and wo are untouched.

Where the weights come from: the run's final/model.safetensors (consolidated float32, written by
tokenmill.train.loop), or the DCP checkpoint of a chosen step, read into one process from however many
FSDP/TP shards wrote it (DCP reassembles full tensors from its metadata; no process group is needed).

μP (train.mup_base_width): the run's logits are divided by width_mult, which transformers' Llama and Qwen3 do
not do; the export folds it into the weights: lm_head is the output table / width_mult (a tied table is untied
for it).

Not carried over: `document_mask` (positions restarting after each end-of-text inside one sequence).
transformers attends causally over the whole input; on text without an end-of-text token inside it the
two models compute the same thing (the export test checks logits on such text).
"""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path
from typing import Any, Mapping

import torch
import torch.distributed.checkpoint as dcp
from safetensors.torch import load_file, save_file
from tokenizers import Tokenizer
from torch.distributed.checkpoint.metadata import TensorStorageMetadata

from tokenmill.train.checkpoint import _name, complete_checkpoints
from tokenmill.train.config import ModelConfig, parse_model

# The tokenizer stage's Hugging Face files (tokenmill.tokenizer.hf.save_hf); tokenizer.json is required.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja")


class ExportError(ValueError):
    """A run or tokenizer that cannot be exported; the message names the file or key."""


# ---------------------------------------------------------------------------------------------------------
# Reading the run


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise ExportError(f"export: {path} not found") from None
    except json.JSONDecodeError as e:
        raise ExportError(f"export: {path} is not JSON ({e.msg})") from None


def load_final(run_dir: Path) -> tuple[dict[str, torch.Tensor], dict]:
    """(tokenmill state dict, final/config.json) of a finished run."""
    final = run_dir / "final"
    weights = final / "model.safetensors"
    if not weights.exists():
        raise ExportError(f"export: {weights} not found (the run has not finished; export a step instead)")
    return load_file(str(weights)), _read_json(final / "config.json")


def checkpoint_dir(run_dir: Path, step: int) -> Path:
    root = run_dir / "checkpoints"
    path = root / _name(step)
    if not (path / ".metadata").exists():
        have = [s for s, _ in complete_checkpoints(root)]
        raise ExportError(f"export: no complete checkpoint of step {step} in {root} (complete: {have or 'none'})")
    return path


def load_step(run_dir: Path, step: int) -> dict[str, torch.Tensor]:
    """The model weights of checkpoints/step_<N>, gathered into full float32 tensors in this process.

    The checkpoint's metadata lists every tensor's global shape; DCP fills plain tensors of those shapes
    from the shards of all ranks, whatever mesh wrote them. Optimizer state and trainer state are not read.
    """
    path = checkpoint_dir(run_dir, step)
    meta = dcp.FileSystemReader(str(path)).read_metadata().state_dict_metadata
    model = {key.removeprefix("model."): torch.empty(m.size, dtype=m.properties.dtype)
             for key, m in meta.items() if key.startswith("model.") and isinstance(m, TensorStorageMetadata)}
    if not model:
        raise ExportError(f"export: {path} holds no model weights")
    with warnings.catch_warnings():  # "assuming the intent is to load in a single process": it is
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        dcp.load({"model": model}, checkpoint_id=str(path), no_dist=True)
    return {k: v.float() for k, v in model.items()}


def run_meta(run_dir: Path, weights: Mapping[str, torch.Tensor], tokenizer_eos: int | None) -> dict:
    """{model, vocab_size, eos_id, seq_len} of the run: final/config.json when the run finished, otherwise
    the stage's run_config.json (vocabulary from the embedding table, eos from the tokenizer)."""
    final = run_dir / "final" / "config.json"
    if final.exists():
        return _read_json(final)
    cfg_file = run_dir / "run_config.json"
    if not cfg_file.exists():
        raise ExportError(f"export: neither {final} nor {cfg_file} found: the model configuration is unknown")
    run_cfg = _read_json(cfg_file)
    if "tok_embeddings.weight" not in weights:
        raise ExportError(f"export: the checkpoint of {run_dir} has no tok_embeddings.weight")
    base = run_cfg["train"].get("mup_base_width")
    return {"model": run_cfg["model"], "vocab_size": int(weights["tok_embeddings.weight"].shape[0]),
            "eos_id": tokenizer_eos, "seq_len": run_cfg["train"]["seq_len"],
            "width_mult": None if base is None else run_cfg["model"]["d_model"] / base}


# ---------------------------------------------------------------------------------------------------------
# The conversion


def rope_permutation(head_dim: int) -> torch.Tensor:
    """Indices taking a head's interleaved-pair layout to the rotate_half layout."""
    return torch.cat([torch.arange(0, head_dim, 2), torch.arange(1, head_dim, 2)])


def _permute_heads(weight: torch.Tensor, head_dim: int) -> torch.Tensor:
    """Reorder the output rows of a q or k projection (heads x head_dim, d_model) head by head."""
    perm = rope_permutation(head_dim)
    out_features, in_features = weight.shape
    return weight.view(out_features // head_dim, head_dim, in_features)[:, perm, :].reshape(out_features, in_features)


def expected_keys(cfg: ModelConfig) -> set[str]:
    keys = {"tok_embeddings.weight", "norm.weight"}
    if not cfg.tie_embeddings:
        keys.add("output.weight")
    for i in range(cfg.n_layers):
        p = f"layers.{i}."
        keys |= {p + k for k in ("attention_norm.weight", "ffn_norm.weight", "attention.wq.weight",
                                 "attention.wk.weight", "attention.wv.weight", "attention.wo.weight",
                                 "feed_forward.w1.weight", "feed_forward.w2.weight", "feed_forward.w3.weight")}
        if cfg.qk_norm:
            keys |= {p + "attention.q_norm.weight", p + "attention.k_norm.weight"}
    return keys


def to_hf_state_dict(weights: Mapping[str, torch.Tensor], cfg: ModelConfig,
                     width_mult: float | None = None) -> dict[str, torch.Tensor]:
    """tokenmill names -> transformers Llama/Qwen3 names, q/k rows in rotate_half order, float32; μP's output
    multiplier folded in (width_mult: see the module's docstring).

    A tied run's output.weight (the embedding table under a second name, present in DCP checkpoints) is
    left out: transformers ties lm_head to embed_tokens from config.tie_word_embeddings (not under μP, where
    lm_head is a scaled copy).
    """
    weights = dict(weights)
    if cfg.tie_embeddings:
        weights.pop("output.weight", None)
    want = expected_keys(cfg)
    missing, unknown = sorted(want - set(weights)), sorted(set(weights) - want)
    if missing or unknown:
        raise ExportError(f"export: the weights do not match the model config: missing {missing[:5]}, "
                          f"unexpected {unknown[:5]}")
    hd = cfg.head_dim
    out = {"model.embed_tokens.weight": weights["tok_embeddings.weight"], "model.norm.weight": weights["norm.weight"]}
    if width_mult is not None:
        out["lm_head.weight"] = weights["tok_embeddings.weight" if cfg.tie_embeddings else "output.weight"] / width_mult
    elif not cfg.tie_embeddings:
        out["lm_head.weight"] = weights["output.weight"]
    perm = rope_permutation(hd)
    for i in range(cfg.n_layers):
        src, dst = f"layers.{i}.", f"model.layers.{i}."
        out[dst + "input_layernorm.weight"] = weights[src + "attention_norm.weight"]
        out[dst + "post_attention_layernorm.weight"] = weights[src + "ffn_norm.weight"]
        out[dst + "self_attn.q_proj.weight"] = _permute_heads(weights[src + "attention.wq.weight"], hd)
        out[dst + "self_attn.k_proj.weight"] = _permute_heads(weights[src + "attention.wk.weight"], hd)
        out[dst + "self_attn.v_proj.weight"] = weights[src + "attention.wv.weight"]
        out[dst + "self_attn.o_proj.weight"] = weights[src + "attention.wo.weight"]
        if cfg.qk_norm:
            out[dst + "self_attn.q_norm.weight"] = weights[src + "attention.q_norm.weight"][perm]
            out[dst + "self_attn.k_norm.weight"] = weights[src + "attention.k_norm.weight"][perm]
        out[dst + "mlp.gate_proj.weight"] = weights[src + "feed_forward.w1.weight"]
        out[dst + "mlp.up_proj.weight"] = weights[src + "feed_forward.w3.weight"]
        out[dst + "mlp.down_proj.weight"] = weights[src + "feed_forward.w2.weight"]
    # safetensors refuses views sharing storage; every tensor gets its own contiguous float32 copy.
    return {k: v.detach().to(torch.float32).contiguous().clone() for k, v in out.items()}


def hf_config(cfg: ModelConfig, vocab_size: int, seq_len: int, eos_id: int, bos_id: int | None,
              pad_id: int | None, tied: bool | None = None) -> dict:
    """config.json for LlamaForCausalLM (no qk_norm) or Qwen3ForCausalLM (qk_norm).

    max_position_embeddings is the training sequence length: lm-eval takes it as the model's context and
    cuts rolling-perplexity windows to it, the longest positions the model was trained on.
    """
    common = {
        "vocab_size": vocab_size, "hidden_size": cfg.d_model, "intermediate_size": cfg.hidden_dim,
        "num_hidden_layers": cfg.n_layers, "num_attention_heads": cfg.n_heads,
        "num_key_value_heads": cfg.kv_heads, "head_dim": cfg.head_dim, "hidden_act": "silu",
        "max_position_embeddings": seq_len, "initializer_range": cfg.init_std, "rms_norm_eps": cfg.norm_eps,
        "rope_parameters": {"rope_type": "default", "rope_theta": float(cfg.rope_theta)},
        "tie_word_embeddings": cfg.tie_embeddings if tied is None else tied, "attention_bias": False, "attention_dropout": 0.0,
        "bos_token_id": bos_id, "eos_token_id": eos_id, "pad_token_id": pad_id, "use_cache": True,
        "dtype": "float32",
    }
    if cfg.qk_norm:
        from transformers import Qwen3Config  # transformers: 1.1 s to import, only for the config the export writes

        config = Qwen3Config(**common, use_sliding_window=False, architectures=["Qwen3ForCausalLM"])
    else:
        from transformers import LlamaConfig  # as above

        config = LlamaConfig(**common, mlp_bias=False, pretraining_tp=1, architectures=["LlamaForCausalLM"])
    return config.to_dict()


# ---------------------------------------------------------------------------------------------------------
# The export


def _tokenizer_ids(tokenizer_dir: Path) -> dict[str, int | None]:
    """bos, eos, pad and unk ids of the tokenizer stage's tokenizer.json (by the token strings its
    tokenizer_config.json names)."""
    tok_file = tokenizer_dir / "tokenizer.json"
    if not tok_file.exists():
        raise ExportError(f"export: {tok_file} not found (the tokenizer stage writes it to <tokenizer>/hf)")
    tok = Tokenizer.from_file(str(tok_file))
    conf_file = tokenizer_dir / "tokenizer_config.json"
    conf = _read_json(conf_file) if conf_file.exists() else {}
    ids = {}
    for name in ("bos", "eos", "pad", "unk"):
        token = conf.get(f"{name}_token")
        if isinstance(token, Mapping):  # an AddedToken serialised as a dict
            token = token.get("content")
        ids[name] = tok.token_to_id(token) if token else None
    return ids


def export_run(run_dir: str | Path, tokenizer_dir: str | Path, out_dir: str | Path,
               step: int | None = None) -> dict:
    """Write out_dir: config.json, model.safetensors, generation_config.json and the tokenizer files.

    step None exports final/; a step number exports checkpoints/step_<N>. Written in place: the export stage's
    StageRun hands it a fresh temporary folder and swaps it in whole (runtime.swap_into_place). Returns a
    summary (architecture, parameters, source) that is also written to out_dir/export.json.
    """
    run_dir, tokenizer_dir, out_dir = Path(run_dir), Path(tokenizer_dir), Path(out_dir)
    ids = _tokenizer_ids(tokenizer_dir)
    if step is None:
        weights, meta = load_final(run_dir)
        source = "final"
    else:
        weights = load_step(run_dir, int(step))
        meta = run_meta(run_dir, weights, ids["eos"])
        source = f"checkpoints/step_{int(step):08d}"
    cfg = parse_model(meta["model"])
    vocab, eos = int(meta["vocab_size"]), meta["eos_id"]
    if eos is None or ids["eos"] != eos:
        raise ExportError(f"export: the run's eos_id {eos} is not the tokenizer's eos id {ids['eos']} "
                          f"({tokenizer_dir}): the run was trained with another tokenizer")
    tok_vocab = _tokenizer_size(tokenizer_dir)
    if tok_vocab > vocab:
        raise ExportError(f"export: the tokenizer has {tok_vocab} tokens, the model's vocabulary {vocab}")

    width_mult = meta.get("width_mult")
    hf_weights = to_hf_state_dict(weights, cfg, width_mult)
    tied = "lm_head.weight" not in hf_weights
    config = hf_config(cfg, vocab, int(meta["seq_len"]), eos, ids["bos"], ids["pad"], tied)

    # Written in place: the stage's StageRun gives it a fresh temporary folder and swaps that in whole.
    out_dir.mkdir(parents=True, exist_ok=True)
    save_file(hf_weights, str(out_dir / "model.safetensors"), metadata={"format": "pt"})
    _write_json(out_dir / "config.json", config)
    # Greedy by default and no BOS: the model never saw one (documents are separated by end-of-text only).
    _write_json(out_dir / "generation_config.json", {"bos_token_id": ids["bos"], "eos_token_id": eos,
                                                 "pad_token_id": ids["pad"], "do_sample": False})
    for name in TOKENIZER_FILES:
        if (tokenizer_dir / name).exists():
            shutil.copyfile(tokenizer_dir / name, out_dir / name)
    summary = {
        "architecture": config["architectures"][0], "model_type": config["model_type"], "source": source,
        "step": step, "params": sum(t.numel() for t in hf_weights.values()), "vocab_size": vocab,
        "eos_id": eos, "tie_embeddings": tied, "qk_norm": cfg.qk_norm, "width_mult": width_mult,
        "document_mask_dropped": cfg.document_mask, "model": cfg.model_dump(),
    }
    _write_json(out_dir / "export.json", summary)
    return summary


def _tokenizer_size(tokenizer_dir: Path) -> int:
    return Tokenizer.from_file(str(tokenizer_dir / "tokenizer.json")).get_vocab_size(with_added_tokens=True)


def _write_json(path: Path, obj: Any) -> None:
    path.write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n")
