"""Training library in one process: configuration, sizes and FLOPs, MFU, the model, the plan-stream loader,
the schedule, the spike guard on an injected corrupted batch, and a held-out loss on real text below the
unigram entropy of the tokens it scores."""

from __future__ import annotations

import hashlib
import json
import math
import os
from pathlib import Path

import duckdb
import numpy as np
import pyarrow.parquet as pq
import pytest
import torch

from tokenmill.train.config import TrainConfigError, model_size, parse_model, parse_run
from tokenmill.train.metrics import mfu, peak_flops
from train_helpers import build_corpus, full_train, heldout_targets, tiny_run, unigram_entropy

HAND_MODEL = {"n_layers": 2, "d_model": 64, "n_heads": 4, "n_kv_heads": 2, "ffn_dim": 128}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    return build_corpus(tmp_path_factory.mktemp("train_corpus"))


# ---------------------------------------------------------------------------------------------------------
# Configuration, sizes, FLOPs, MFU


def test_model_size_and_flops_by_hand():
    # Per layer: q 64x64 + k 64x32 + v 64x32 + o 64x64 = 12288; SwiGLU 3 x 64 x 128 = 24576 -> 36864.
    # Two layers 73728 + output 100 x 64 = 80128 matmul parameters. Embedding 6400. Norms 2 x (2 x 64) + 64.
    size = model_size(HAND_MODEL, vocab_size=100, seq_len=32)
    assert size["matmul_params"] == 80128
    assert size["embedding_params"] == 6400
    assert size["params"] == 80128 + 6400 + 320
    # 6 x 80128 + 12 x 2 layers x 64 x 32 = 480768 + 49152; causal halves the attention term.
    assert size["flops_per_token"] == 529920
    assert size["flops_per_token_causal"] == 480768 + 24576


@pytest.mark.parametrize("extra", [{}, {"tie_embeddings": True, "qk_norm": True}, {"ffn_dim": None}])
def test_model_size_counts_the_parameters_the_model_has(extra):
    from tokenmill.train.model import Transformer

    cfg = parse_model({**HAND_MODEL, **extra})
    model = Transformer(cfg, 100, 32)
    assert sum(p.numel() for p in model.parameters()) == model_size(cfg, 100)["params"]


def test_mfu_by_hand():
    # The 0.86B reference shape of NOTES.md: 16 layers, d 2048, 32 heads, 8 KV heads, FFN 5632, vocab 32768.
    cfg = {"n_layers": 16, "d_model": 2048, "n_heads": 32, "n_kv_heads": 8, "ffn_dim": 5632}
    size = model_size(cfg, 32768, seq_len=4096)
    per_layer = 2048 * 2048 * 2 + 2 * 2048 * 512 + 3 * 2048 * 5632  # q, o; k, v (8 x 64 = 512); FFN
    assert per_layer == 45_088_768
    assert size["matmul_params"] == 16 * per_layer + 32768 * 2048 == 788_529_152
    # 6 x 788,529,152 = 4,731,174,912 plus attention 12 x 16 x 2048 x 4096 = 1,610,612,736.
    assert size["flops_per_token"] == 6_341_787_648
    assert size["flops_per_token_causal"] == 4_731_174_912 + 805_306_368
    peak = peak_flops("NVIDIA H100 80GB HBM3")
    assert peak == 989e12
    # NOTES.md: 84.1k tokens/s on one H100 is 54.0% MFU by this count, 47.1% with the causal halving.
    assert mfu(84_100, size["flops_per_token"], 1, peak) == pytest.approx(0.5393, abs=1e-4)
    assert mfu(84_100, size["flops_per_token_causal"], 1, peak) == pytest.approx(0.4708, abs=1e-4)
    assert mfu(84_100 * 8, size["flops_per_token"], 8, peak) == pytest.approx(0.5393, abs=1e-4)
    assert peak_flops("cpu") is None and mfu(1000.0, 1.0, 1, None) is None
    # The other H100s by the names torch reports: PCIe and NVL have lower clocks than the SXM part.
    assert peak_flops("NVIDIA H100 PCIe") == 756e12 and peak_flops("NVIDIA H100 NVL") == 835e12
    assert peak_flops("cpu", override=1e12) == 1e12


def test_config_errors_name_the_key():
    base = tiny_run()
    with pytest.raises(TrainConfigError, match=r"train\.optimizer\.lrr"):
        parse_run({**base, "train": {**base["train"], "optimizer": {"lrr": 1.0}}})
    with pytest.raises(TrainConfigError, match=r"model\.n_layers"):
        parse_run({**base, "model": {**base["model"], "n_layers": "2"}})
    with pytest.raises(TrainConfigError, match=r"train\.schedule\.kind"):
        parse_run({**base, "train": {**base["train"], "schedule": {"kind": "linear"}}})
    with pytest.raises(TrainConfigError, match="tp"):
        parse_run({**base, "train": {**base["train"], "parallel": {"tp": 3}}})
    with pytest.raises(TrainConfigError, match="sections model and train"):
        parse_run({"model": base["model"]})
    with pytest.raises(TrainConfigError, match="must be divisible by n_kv_heads"):
        parse_model({**HAND_MODEL, "n_kv_heads": 3})


CONF = Path(__file__).resolve().parents[1] / "conf"
SCALES = sorted(p.stem for p in (CONF / "scale").glob("*.yaml"))


def _composed(tmp_path: Path, *overrides: str) -> dict:
    """params.yaml as `dvc exp run -S <override> ...` composes it from conf/ (Hydra)."""
    import yaml

    from tokenmill.config import compose

    out = tmp_path / "params.yaml"
    compose(list(overrides), conf_dir=CONF, output=out)
    return yaml.safe_load(out.read_text())


def test_model_presets_parse():
    """Every conf/model preset parses to the model its file describes (no key dropped, renamed or replaced by
    a default), of the size its comment states. By hand at the default 16,384-token vocabulary (per layer:
    q, k, v, o, SwiGLU, norms; then the final norm, embedding and untied output):
    tiny, tied: 16384 + 16384 + 16384 + 147456 + 320 = 196,928 x 4 + 128 + 2,097,152 = 2,884,992;
    gpt_125m: 589824 + 393216 + 589824 + 4718592 + 1664 = 6,293,120 x 12 + 768 + 2 x 12,582,912 = 100,684,032;
    llama_1b: 45,092,864 x 16 + 2048 + 2 x 33,554,432 = 788,596,736 (the comment's 0.79B with 16k);
    llama_8b: 218,112,000 x 32 + 4096 + 2 x 67,108,864 = 7,113,805,824 (7,248,023,552 with the 32k of the
    h100 presets, test_tensor_parallel_is_for_the_8b_preset_only)."""
    import yaml

    sizes = {}
    for path in sorted((CONF / "model").glob("*.yaml")):
        raw = yaml.safe_load(path.read_text())
        cfg = parse_model(raw)
        assert cfg.name == path.stem
        assert {key: getattr(cfg, key) for key in raw} == raw, path.name
        sizes[cfg.name] = model_size(cfg, 16384)["params"]
    assert sizes == {"gpt_125m": 100_684_032, "llama_1b": 788_596_736, "llama_8b": 7_113_805_824,
                     "tiny": 2_884_992}


@pytest.mark.parametrize("scale", SCALES)
def test_scale_presets_fit_their_launch_and_their_ladder_climbs(scale, tmp_path):
    """Every conf/scale preset, composed as `-S scale=<name>` composes it, is a valid run whose mesh fills the
    processes its launch starts, with a global batch that splits over the data-parallel ranks into whole
    micro-batches; the scout ladder the scale selects grows in parameters and tokens, every rung a few
    dozen optimizer steps at least (a rung below one step would give the forecast nothing)."""
    from tokenmill.train.config import mesh_shape
    from tokenmill.train.config import scout_run_config

    p = _composed(tmp_path, f"scale={scale}")
    run = parse_run({"model": p["model"], "train": p["train"]})
    world = run.train.launch.nnodes * run.train.launch.nproc_per_node
    shape = mesh_shape(run.train, world)
    assert shape.dp_size * shape.tp == world and shape.per_rank % shape.micro_batch == 0
    rungs = []
    for name, scout in p["scouts"].items():
        rung = parse_run(scout_run_config(scout, p["train"]))
        params = model_size(rung.model, p["tokenizer"]["vocab_size"])["params"]
        tokens = rung.train.token_budget or int(rung.train.tokens_per_param * params)
        assert tokens // rung.train.tokens_per_step >= 20, (scale, name, tokens)
        rungs.append((params, tokens))
    assert rungs == sorted(rungs) and len(set(rungs)) == len(rungs), rungs


def test_tensor_parallel_is_for_the_8b_preset_only(tmp_path):
    """TP where it pays: the 0.86B presets shard with FSDP/HSDP only; the 8B preset (Llama-3-8B's shape with
    the 32k vocabulary: by hand, per layer 2 x 4096^2 + 2 x 4096 x 1024 + 3 x 4096 x 14336 + 2 x 4096 =
    218,112,000; 32 layers, final norm 4,096, embedding and output 2 x 32768 x 4096: 7,248,023,552) runs TP 2
    inside a node under HSDP 4 x 8, and its layout fills its 64 processes."""
    from tokenmill.train.config import mesh_shape

    for scale, tp in (("h100_1x", 1), ("h100_8x", 1), ("h100_64x", 1), ("h100_64x_8b", 2)):
        p = _composed(tmp_path, f"scale={scale}")
        assert p["train"]["parallel"]["tp"] == tp, scale
    p = _composed(tmp_path, "scale=h100_64x_8b")
    assert model_size(p["model"], p["tokenizer"]["vocab_size"])["params"] == 7_248_023_552
    run = parse_run({"model": p["model"], "train": p["train"]})
    shape = mesh_shape(run.train, 64)
    assert (shape.dp_replicate, shape.dp_shard, shape.tp, shape.per_rank, shape.micro_batch) == (4, 8, 2, 32, 2)
    assert run.train.launch.nproc_per_node % shape.tp == 0  # TP stays inside a node


def test_h100_presets_train_the_reference_shape(tmp_path):
    """Issue 8's reference shape, whose MFU on one H100 is the target: 16 layers, d 2048, 32 heads, 8 KV heads,
    FFN 5632, vocabulary 32768, sequence 4096. By hand: per layer q and o 2 x 2048^2, k and v 2 x 2048 x 512,
    SwiGLU 3 x 2048 x 5632, two norms 2 x 2048 = 45,092,864; 16 layers 721,485,824; final norm 2,048;
    embedding and untied output 2 x 32768 x 2048 = 134,217,728: 855,705,600. The h100 scouts train 20 tokens
    per parameter: 58,729,984 / 125,849,856 / 247,499,776 parameters by the same sums."""
    from tokenmill.train.config import scout_run_config

    for scale in ("h100_1x", "h100_8x", "h100_64x"):
        p = _composed(tmp_path, f"scale={scale}")
        m, vocab = p["model"], p["tokenizer"]["vocab_size"]
        shape = (m["n_layers"], m["d_model"], m["n_heads"], m["n_kv_heads"], m["ffn_dim"], vocab, p["train"]["seq_len"])
        assert shape == (16, 2048, 32, 8, 5632, 32768, 4096), scale
        assert model_size(m, vocab)["params"] == 855_705_600
        assert p["train"]["device"] == "cuda" and p["train"]["parallel"]["compile"] is True
        scouts = [parse_run(scout_run_config(s, p["train"])) for s in p["scouts"].values()]
        assert [model_size(r.model, vocab)["params"] for r in scouts] == [58_729_984, 125_849_856, 247_499_776]
        assert all(r.train.token_budget is None and r.train.tokens_per_param == 20 for r in scouts)
        # The smallest rung's micro-batch is its own (measured faster on one H100), the others the full run's.
        assert [r.train.micro_batch for r in scouts] == [16, p["train"]["micro_batch"], p["train"]["micro_batch"]]


def test_out_of_gpu_memory_is_one_line_naming_the_micro_batch(monkeypatch, tmp_path, capsys):
    """The allocator's error, as a scout at micro-batch 32 raised it on one H100, becomes one line saying what
    to lower (exit 2, like every other configuration error)."""
    import tokenmill.train.loop as loop
    from tokenmill.train.__main__ import main

    def oom(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 16.00 GiB. GPU 0 has a total capacity "
                                     "of 79.18 GiB of which 11.94 GiB is free. Including non-PyTorch memory, ...")

    monkeypatch.setattr(loop, "train", oom)
    (tmp_path / "run.json").write_text("{}")
    assert main(["--config", str(tmp_path / "run.json"), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Tried to allocate 16.00 GiB" in err and "train.micro_batch" in err, err


@pytest.mark.parametrize("micro, message", [
    ("sixteen", "scouts.*.micro_batch: expected a positive integer or null, got 'sixteen'"),
    (0, "scouts.*.micro_batch: expected a positive integer or null, got 0"),
])
def test_a_scout_micro_batch_of_the_wrong_type_names_its_key(micro, message):
    from tokenmill.train.config import scout_run_config

    with pytest.raises(TrainConfigError, match=message.replace("*", r"\*")):
        scout_run_config({"model": {}, "token_budget": None, "micro_batch": micro}, {"micro_batch": 8})


@pytest.mark.parametrize("overrides, message", [
    (["train.parallel.tp=4"], "train.parallel: dp_replicate 1 x dp_shard 8 x tp 4 does not fill 8 processes"),
    (["train.global_batch=510"], "train.global_batch (510) must be divisible by the data-parallel size (8 = "),
    (["train.micro_batch=12"], "train.micro_batch (12) must divide the sequences per data-parallel rank (64 = "),
])
def test_a_layout_that_misfits_its_launch_stops_the_stage_before_torchrun(overrides, message, tmp_path):
    """One line naming the keys, raised before any process starts or any data is read (the data root here
    does not even exist): on a cluster the misfit would otherwise surface after the allocation."""
    from tokenmill.train.config import TrainConfigError
    from tokenmill.train.stage import run_train_stage

    p = _composed(tmp_path, "scale=h100_8x", *overrides)
    with pytest.raises(TrainConfigError) as err:
        run_train_stage("pretrain", {"model": p["model"], "train": p["train"]}, tmp_path / "no-data", "mixture",
                        "tokenize", tmp_path / "out", tmp_path / "live", tmp_path / "m.json")
    assert str(err.value).startswith(message) and "\n" not in str(err.value), str(err.value)
    assert not (tmp_path / "out").exists()


def test_a_cuda_preset_on_a_machine_without_a_gpu_is_one_line(tmp_path):
    """`-S scale=h100_1x` on a laptop: the rank says so in one line (which the stage's LaunchError repeats),
    not with torch's traceback from torch.cuda.set_device. CUDA_VISIBLE_DEVICES="" hides any GPU, so this
    runs on every machine."""
    import subprocess
    import sys

    p = _composed(tmp_path, "scale=h100_1x")
    config = tmp_path / "run.json"
    config.write_text(json.dumps({"model": p["model"], "train": p["train"]}))
    proc = subprocess.run([sys.executable, "-m", "tokenmill.train", "--config", str(config), "--data-root",
                           str(tmp_path), "--out", str(tmp_path / "out")], capture_output=True, text=True,
                          env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("train: train.device is cuda") and "scale=cpu_demo" in proc.stderr, proc.stderr
    assert proc.stderr.count("\n") == 1, proc.stderr


# ---------------------------------------------------------------------------------------------------------
# Model


def test_document_mask_isolates_documents():
    """With document masking a document's logits do not depend on what came before its end-of-text."""
    from tokenmill.train.model import Transformer

    cfg = parse_model({**HAND_MODEL, "document_mask": True})
    model = Transformer(cfg, 100, 32, eos_id=2)
    model.init_weights(0)
    doc = torch.randint(3, 100, (1, 12))
    a = torch.cat([torch.randint(3, 100, (1, 7)), torch.tensor([[2]]), doc], dim=1)
    b = torch.cat([torch.randint(3, 100, (1, 4)), torch.tensor([[2]]), doc], dim=1)
    torch.testing.assert_close(model(a)[:, -12:], model(b)[:, -12:], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(model(a)[:, -12:], model(doc), rtol=1e-5, atol=1e-5)
    plain = Transformer(parse_model(HAND_MODEL), 100, 32)
    plain.init_weights(0)
    assert not torch.allclose(plain(a)[:, -12:], plain(b)[:, -12:], atol=1e-3)  # without it they mix


def test_a_packed_batch_under_document_masking_trains_as_its_documents_would_alone():
    """FlexAttention's document-causal block mask: the loss of three documents packed into one sequence, and its
    gradients, equal what the model computes on each document by itself (the end-of-text token belongs to
    the document it ends; the first token of the next document is predicted from that token, as in training)."""
    from tokenmill.train.model import Transformer, lm_loss

    cfg = parse_model({**HAND_MODEL, "document_mask": True, "init_std": 0.2})
    model = Transformer(cfg, 100, 64, eos_id=2)
    model.init_weights(0)
    g = torch.Generator().manual_seed(0)
    docs = [torch.cat([torch.randint(3, 100, (n,), generator=g), torch.tensor([2])]) for n in (9, 20, 14)]
    packed = torch.cat(docs)[None]  # 46 tokens, three end-of-texts
    loss, _ = lm_loss(model(packed[:, :-1]), packed[:, 1:])
    loss.backward()
    packed_grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    # Alone: each document's own positions, its tokens predicted from its own prefix only; the token after its
    # end-of-text (the next document's first) is predicted from the end-of-text alone, a one-token document.
    total, count = 0.0, 0
    for i, d in enumerate(docs):
        inputs, targets = d[None, :-1], d[None, 1:]
        if i + 1 < len(docs):
            inputs, targets = d[None], torch.cat([d[1:], docs[i + 1][:1]])[None]
        ce, _ = lm_loss(model(inputs), targets)
        total, count = total + ce * targets.numel(), count + targets.numel()
    (total / count).backward()
    assert count == packed.shape[1] - 1
    torch.testing.assert_close(total / count, loss.detach(), rtol=1e-5, atol=1e-6)
    for name, p in model.named_parameters():
        torch.testing.assert_close(p.grad, packed_grads[name], rtol=1e-4, atol=1e-6, msg=name)
    # FlexAttention's block mask (what a GPU runs; no backward on CPU) gives the dense mask's logits.
    with torch.no_grad():
        dense = model(packed)
        model.flex = True
        torch.testing.assert_close(model(packed), dense, rtol=1e-5, atol=1e-5)


def test_flex_attention_inside_a_compiled_block_compiles_the_block_once():
    """On a GPU the blocks are compiled and FlexAttention runs inside them. Wrapping it in a second
    torch.compile there recompiled every block at its second call (seen on an H100: a guard on the wrapper's
    global); inside a compiled region _flex must hand back the plain function for the block's compile to fuse.
    The device is only named here, never touched, so this runs on CPU."""
    from torch.nn.attention.flex_attention import flex_attention

    from tokenmill.train import model as m

    def block(x):
        return x * 2 if m._flex(torch.device("cuda")) is flex_attention else x

    torch._dynamo.reset()
    compiled = torch.compile(block, backend="eager")
    with torch._dynamo.config.patch(error_on_recompile=True):
        assert compiled(torch.ones(3)).sum() == 6
        assert compiled(torch.ones(3)).sum() == 6  # a recompilation raises here

def test_float8_converts_the_blocks_linears_keeps_the_names_and_trains_as_float32_does(corpus, tmp_path, monkeypatch):
    """train.parallel.float8 (torchao): every linear of the blocks becomes a Float8Linear with the recipe's
    scaling, the output layer stays a plain Linear, the parameter names (and so checkpoints and the export) are
    unchanged, and the run learns as the float32 run does. On a CPU torchao emulates the float8 matrix
    products (the casts, scales and rounding are real; only the kernels differ), so this checks the conversion and
    its arithmetic, not the GPU speed (benchmarks/RESULTS.md, "FP8 on one H200")."""
    from torchao.float8.float8_linear import Float8Linear

    from tokenmill.train.model import Transformer
    from tokenmill.train.parallel import apply_float8

    for recipe, scaling in (("tensorwise", "dyn_ten"), ("rowwise", "dyn_axs")):
        model = Transformer(parse_model(HAND_MODEL), 96, 32)
        names = [n for n, _ in model.named_parameters()]
        apply_float8(model, recipe)
        converted = {n for n, m in model.named_modules() if isinstance(m, Float8Linear)}
        linears = {n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
        assert converted == {n for n in linears if n.startswith("layers.")} and converted, recipe
        assert "output" in linears and "output" not in converted
        assert [n for n, _ in model.named_parameters()] == names
        assert scaling in repr(model.layers["0"].attention.wq)
    plain = _run(corpus, tmp_path / "fp32", monkeypatch, max_steps=24, checkpoint={"interval": 100})
    fp8 = _run(corpus, tmp_path / "fp8", monkeypatch, max_steps=24, checkpoint={"interval": 100},
               parallel={"float8": "tensorwise"})
    first = pq.read_table(tmp_path / "fp8" / "steps.parquet").column("loss").to_pylist()[0]
    print(f"\nheld-out after 24 steps: float32 {plain['heldout_loss']}, float8 {fp8['heldout_loss']}")
    for bucket, loss in plain["heldout_loss"].items():
        # Learnt (from 6.25 at the first step: log 512 = 6.24), and within 10% of float32's. Measured: 5.30 and
        # 5.41 against 5.22 and 5.04 (1.5% and 7.5% worse: float8's rounding weighs more at width 64 than at the
        # presets' 2048); a conversion that broke the gradients would stay near the start.
        assert fp8["heldout_loss"][bucket] < first - 0.6 and fp8["heldout_loss"][bucket] == pytest.approx(loss, rel=0.10)
    from safetensors.torch import load_file

    assert sorted(load_file(str(tmp_path / "fp8" / "final" / "model.safetensors"))) == \
        sorted(load_file(str(tmp_path / "fp32" / "final" / "model.safetensors")))


def test_rope_tables_reach_the_blocks_in_float32_under_bf16_parameters():
    """FSDP's mixed precision casts a module's floating inputs to param_dtype; the blocks opt out, so the RoPE
    tables stay float32 under bf16 parameters (the GPU presets) as on CPU, while the hidden state is bf16."""
    import torch.distributed as dist

    from tokenmill.train.config import MeshShape, ParallelConfig
    from tokenmill.train.loop import init_distributed
    from tokenmill.train.model import Transformer
    from tokenmill.train.parallel import build_mesh, parallelize

    device, created = init_distributed("cpu")
    try:
        model = Transformer(parse_model(HAND_MODEL), 100, 32)
        model.init_weights(0)
        layout = build_mesh("cpu", MeshShape(1, 1, 1, 2, 2))
        parallelize(model, layout, ParallelConfig(param_dtype="bfloat16"), "cpu")
        seen = []
        model.layers["0"].register_forward_pre_hook(lambda mod, args: seen.append([a.dtype for a in args[:3]]))
        model(torch.randint(3, 100, (2, 32)))
        assert seen == [[torch.bfloat16, torch.float32, torch.float32]], seen
    finally:
        if created:
            dist.destroy_process_group()


def test_mup_keeps_every_layers_activations_flat_across_widths_where_the_standard_one_grows(corpus):
    """The coordinate check of μP (Tensor Programs V): models of width 64, 128, 256 and 512 (head_dim 32, real
    text) trained 4 steps with AdamW at the same learning rate through the training's own model and parameter
    groups; then the mean |activation| of each block's output and of the logits. Under the standard
    parametrisation Adam moves each weight by about the learning rate whatever the width, so a wider layer's
    output moves more: measured 0.027 -> 1.66 (block 0), 0.074 -> 4.84 (block 1), 0.38 -> 2.12 (logits) from
    width 64 to 512. Under μP (base width 64) they stay within 1.35x of each other (block 1: 0.074, 0.055, 0.059,
    0.061)."""
    from tokenmill.train.data import BatchLoader, PlanStream
    from tokenmill.train.trainer import param_groups
    from tokenmill.train.model import Transformer, lm_loss

    stream = PlanStream(corpus / "tokenize", corpus / "mixture")
    loader = BatchLoader(stream, 64, 16)
    batches = [loader.batch(s) for s in range(5)]

    def scales(width: int, mup: bool) -> dict[str, float]:
        cfg = parse_model({"n_layers": 2, "d_model": width, "n_heads": width // 32, "ffn_dim": 3 * width,
                           "qk_norm": True})
        mult = width / 64 if mup else None
        model = Transformer(cfg, stream.vocab_size, 64, stream.eos_id, mult)
        model.init_weights(0)
        groups, lr_scales = param_groups(model, 0.0, mult)
        opt = torch.optim.AdamW(groups, lr=3e-3, betas=(0.9, 0.95))
        for group, scale in zip(opt.param_groups, lr_scales):
            group["lr"] = 3e-3 * scale
        seen = {}
        for name, module in (("block0", model.layers["0"]), ("block1", model.layers["1"]), ("logits", model.output)):
            module.register_forward_hook(lambda m, i, out, name=name: seen.__setitem__(name, out.abs().mean().item()))
        for step, b in enumerate(batches):
            x, y = (torch.from_numpy(a.astype(np.int64)) for a in (b.inputs, b.targets))
            loss, _ = lm_loss(model(x), y)
            if step < 4:
                loss.backward()
                opt.step()
                opt.zero_grad()
        return seen

    widths = (64, 128, 256, 512)
    standard = {w: scales(w, False) for w in widths}
    mup = {w: scales(w, True) for w in widths}
    for layer in ("block0", "block1", "logits"):
        grown = standard[512][layer] / standard[64][layer]
        values = [mup[w][layer] for w in widths]
        assert grown > 4, (layer, standard)
        assert max(values) / min(values) < 1.5, (layer, mup)


def test_init_is_deterministic_from_the_seed():
    from tokenmill.train.model import Transformer

    cfg = parse_model(HAND_MODEL)
    m1, m2, m3 = (Transformer(cfg, 100, 32) for _ in range(3))
    m1.init_weights(5), m2.init_weights(5), m3.init_weights(6)
    for (n, p1), p2, p3 in zip(m1.named_parameters(), m2.parameters(), m3.parameters()):
        assert torch.equal(p1, p2), n
        assert n.endswith("norm.weight") or not torch.equal(p1, p3), n


# ---------------------------------------------------------------------------------------------------------
# Data


def _stream_from_plan(corpus: Path) -> np.ndarray:
    """The training stream straight from the contract: each plan row's tokens, then end-of-text."""
    manifest = json.loads((corpus / "tokenize" / "manifest.json").read_text())
    plan = pq.read_table(corpus / "mixture" / "plan.parquet").sort_by("position").to_pylist()
    parts = []
    for row in plan:
        tokens = np.fromfile(corpus / "tokenize" / row["shard"], dtype=manifest["dtype"])
        parts += [tokens[row["offset"]:row["offset"] + row["length"]].astype(np.uint32),
                  np.array([manifest["eos_id"]], dtype=np.uint32)]
    return np.concatenate(parts)


def test_loader_batches_follow_the_stream_contract(corpus):
    from tokenmill.train.data import BatchLoader, PlanStream, tokens_hash

    stream = PlanStream(corpus / "tokenize", corpus / "mixture")
    flat = _stream_from_plan(corpus)
    assert stream.total_tokens == len(flat)
    L, B = 32, 8
    full = BatchLoader(stream, L, B)
    ranks = [BatchLoader(stream, L, B, dp_rank=r, dp_size=4, record=r == 0) for r in range(4)]
    for step in (0, 1, 37, full.steps_available - 1):
        want = flat[step * L * B:(step + 1) * L * B + 1]
        batch = full.batch(step)
        np.testing.assert_array_equal(batch.inputs.ravel(), want[:-1])
        np.testing.assert_array_equal(batch.targets[:, :-1], batch.inputs[:, 1:])  # targets: shifted by one
        np.testing.assert_array_equal(batch.targets[:, -1], want[L::L])
        expected_hash = hashlib.blake2b(want[:-1].astype("<u4").tobytes(), digest_size=16).hexdigest()
        assert batch.tokens_hash == tokens_hash(want[:-1]) == expected_hash
        # Rank r of 4 holds sequences 2r, 2r + 1 of the step (the others read only those); the recording rank
        # hashes the whole step.
        parts = [r.batch(step) for r in ranks]
        np.testing.assert_array_equal(np.concatenate([p.inputs for p in parts]), batch.inputs)
        np.testing.assert_array_equal(np.concatenate([p.targets for p in parts]), batch.targets)
        assert [p.tokens_hash for p in parts] == [batch.tokens_hash, None, None, None]
    for loader in (full, ranks[3]):
        with pytest.raises(ValueError, match="past the plan"):
            loader.batch(full.steps_available)



def test_a_seeded_order_shuffles_each_phase_and_keeps_the_curriculum(corpus):
    """train.data_seed (a seed replica) reorders the run's windows within each plan phase: the anneal phase's
    windows still come last. Shuffled across phases, a replica's held-out loss moved 0.3-0.4 nats on the e2e
    build (RESULTS, "Compare"), a change of schedule read as seed noise."""
    from tokenmill.train.data import BatchLoader, PlanStream

    loader = BatchLoader(PlanStream(corpus / "tokenize", corpus / "mixture"), 32, 8)
    steps = loader.steps_available
    plan_phases = [loader.batch(s).phase for s in range(steps)]
    assert plan_phases[0] == "bulk" and plan_phases[-1] == "anneal"
    order = loader.seeded_order(steps, 1)
    assert sorted(order.tolist()) == list(range(steps)) and order.tolist() != list(range(steps))
    loader.order = order
    assert [loader.batch(s).phase for s in range(steps)] == plan_phases  # each step in its planned phase
    first_anneal = plan_phases.index("anneal")
    assert order[:first_anneal].tolist() != list(range(first_anneal))  # bulk itself reordered
    assert order[first_anneal:].tolist() != list(range(first_anneal, steps))  # and the anneal phase
    assert np.array_equal(loader.seeded_order(steps, 1), order) and not np.array_equal(loader.seeded_order(steps, 2), order)
def test_loader_names_a_missing_shard(corpus, tmp_path):
    import shutil

    from tokenmill.train.data import BatchLoader, DataError, PlanStream

    shutil.copytree(corpus / "mixture", tmp_path / "mixture")
    shutil.copytree(corpus / "tokenize", tmp_path / "tokenize")
    (tmp_path / "tokenize" / "tokens" / "books" / "00000.bin").unlink()
    loader = BatchLoader(PlanStream(tmp_path / "tokenize", tmp_path / "mixture"), 32, 8)
    with pytest.raises(DataError, match=r"tokens/books/00000\.bin"):
        for step in range(10):
            loader.batch(step)
    with pytest.raises(DataError, match="no plan"):
        PlanStream(tmp_path / "tokenize", tmp_path / "nowhere")


def test_heldout_sequences_come_from_heldout_documents_only(corpus):
    from tokenmill.train.data import heldout_sequences, read_token_manifest

    m = read_token_manifest(corpus / "tokenize")
    seqs = heldout_sequences(corpus / "tokenize", corpus / "mixture", 32, 8, m["eos_id"], m["dtype"])
    assert sorted(seqs) == ["books", "reference"]
    held = pq.read_table(corpus / "mixture" / "heldout.parquet").to_pylist()
    for bucket, arr in seqs.items():
        assert arr.shape == (8, 33)
        docs = sorted((r for r in held if r["bucket"] == bucket), key=lambda r: r["doc_id"])
        tokens = np.fromfile(corpus / "tokenize" / docs[0]["shard"], dtype=m["dtype"])
        first = tokens[docs[0]["offset"]:docs[0]["offset"] + docs[0]["length"]]
        np.testing.assert_array_equal(arr[0], first[:33])  # documents longer than a window here
    planned = set(pq.read_table(corpus / "mixture" / "plan.parquet").column("doc_id").to_pylist())
    assert planned.isdisjoint(r["doc_id"] for r in held)


# ---------------------------------------------------------------------------------------------------------
# Schedule and spike guard


def test_wsd_decays_over_the_anneal_phase_and_cosine_ends_on_the_floor():
    from tokenmill.train.config import ScheduleConfig
    from tokenmill.train.schedule import make_schedule

    wsd = make_schedule(ScheduleConfig(kind="wsd", warmup_steps=10, min_lr_ratio=0.1), 1.0, 100, 80)
    assert [round(wsd.lr(s), 6) for s in (0, 9, 10, 79, 80)] == [0.1, 1.0, 1.0, 1.0, 1.0]
    assert wsd.lr(99) == pytest.approx(0.1) and wsd.lr(90) == pytest.approx(1 - 0.9 * 10 / 19)
    # No anneal phase inside the run (a scout): the last decay_fraction of its steps.
    short = make_schedule(ScheduleConfig(kind="wsd", warmup_steps=2, decay_fraction=0.2), 1.0, 50, 80)
    assert short.decay_start == 40 and short.lr(49) == pytest.approx(0.1)
    cos = make_schedule(ScheduleConfig(kind="cosine", warmup_steps=10, min_lr_ratio=0.1), 2.0, 100, 80)
    assert cos.lr(10) == pytest.approx(2.0) and cos.lr(99) == pytest.approx(0.2)
    assert cos.lr(10 + 89 // 2) == pytest.approx(1.1, abs=0.02)
    lrs = [cos.lr(s) for s in range(10, 100)]
    assert all(a >= b for a, b in zip(lrs, lrs[1:]))


def test_spike_verdict():
    from tokenmill.train.loop import spike_verdict

    losses, norms = [3.0 + 0.01 * (i % 3) for i in range(20)], [1.0 + 0.02 * (i % 2) for i in range(20)]
    assert spike_verdict(3.02, 1.01, losses, norms, 6.0, 10) is None
    assert spike_verdict(2.0, 1.0, losses, norms, 6.0, 10) is None  # falling fast is fine
    assert spike_verdict(4.5, 1.0, losses, norms, 6.0, 10) == "loss_spike"
    assert spike_verdict(3.0, 5.0, losses, norms, 6.0, 10) == "grad_norm_spike"
    assert spike_verdict(float("nan"), 1.0, losses, norms, 6.0, 10) == "nonfinite"
    assert spike_verdict(3.0, float("inf"), [], [], 6.0, 10) == "nonfinite"
    assert spike_verdict(9.0, 9.0, losses[:5], norms[:5], 6.0, 10) is None  # too little history


# ---------------------------------------------------------------------------------------------------------
# Whole runs in this process


def _run(corpus: Path, out: Path, monkeypatch, fault: str = "", **over) -> dict:
    from tokenmill.train.loop import train

    monkeypatch.setenv("TOKENMILL_FAULT", fault)
    return train(tiny_run(**over), corpus, out, out / "live")


def test_corrupted_batch_fires_the_spike_guard(corpus, tmp_path, monkeypatch):
    """Step 20's tokens replaced by random ids: the update is skipped and the step's documents recorded."""
    from tokenmill.train.data import BatchLoader, PlanStream

    # In the plan's order (data_seed null) step 20 reads window 20, beside windows of the same documents.
    # Shuffled, this corpus's 256-token steps (one or two documents each) change document every step, and one
    # early step (14, data_seed 0) trips the gradient-norm guard by itself: norm 3.8 against a mean of 1.2.
    summary = _run(corpus, tmp_path / "run", monkeypatch, fault="corrupt_step=20", max_steps=24,
                   checkpoint={"interval": 100}, data_seed=None)
    spikes = pq.read_table(tmp_path / "run" / "spikes.parquet").to_pylist()
    assert [s["step"] for s in spikes][:1] == [20]  # nothing before it; its loss is the spike
    assert spikes[0]["reason"] == "loss_spike"
    assert spikes[0]["loss"] > spikes[0]["window_mean_loss"] + 0.5
    monkeypatch.delenv("TOKENMILL_FAULT")
    loader = BatchLoader(PlanStream(corpus / "tokenize", corpus / "mixture"), 32, 8)
    assert spikes[0]["doc_ids"] == loader.doc_ids(20) and len(spikes[0]["doc_ids"]) >= 1
    plan = pq.read_table(corpus / "mixture" / "plan.parquet").to_pylist()
    lo, hi = 20 * 256, 21 * 256 + 1
    assert set(spikes[0]["doc_ids"]) == {r["doc_id"] for r in plan
                                         if r["stream_start"] < hi and r["stream_start"] + r["length"] + 1 > lo}
    steps = pq.read_table(tmp_path / "run" / "steps.parquet").to_pylist()
    assert [s["step"] for s in steps if s["skipped"]] == [s["step"] for s in spikes]
    assert steps[20]["skip_reason"] == "loss_spike"
    # The fed tokens were not the plan's: the recorded hash says so.
    assert steps[20]["tokens_hash"] != loader.batch(20).tokens_hash
    assert steps[19]["tokens_hash"] == loader.batch(19).tokens_hash
    assert summary["skipped_steps"] == len(spikes)


def test_an_excursion_is_judged_against_the_band_before_it_within_its_phase():
    """The tracker (tokenmill.train.rollback.watch): an excursion that comes back inside its band within the
    window is no rollback; one that stays above it is, after exactly `window` steps; a new plan phase is
    judged only against its own history."""
    from types import SimpleNamespace

    from tokenmill.train.rollback import new_track, watch

    cfg, spike = SimpleNamespace(k_sigma=3.0, window=5), SimpleNamespace(window=8, min_history=4)
    noise = [0.02, -0.01, 0.0, 0.01, -0.02, 0.01, 0.0, -0.01]

    def follow(losses, phases=None):
        track, out = new_track(), []
        for step, loss in enumerate(losses):
            out.append(watch(track, step, (phases or ["bulk"] * len(losses))[step], loss, cfg, spike))
        return track, out

    base = [4.0 + e for e in noise]  # mean 4.0; std 0.013, under the floor of 1% of the mean: upper edge 4.12
    track, out = follow(base + [5.0, 5.0, 5.0, 5.0, 3.99])  # four steps up, then back inside
    assert out == [None] * 13 and track["start"] is None
    track, out = follow(base + [5.0] * 6)
    assert out[:12] == [None] * 12  # steps 8-11: four steps of the excursion
    assert out[12] == {"start": 8, "band_mean": pytest.approx(4.0), "band_upper": pytest.approx(4.12)}
    assert out[13]["start"] == 8  # still unrecovered
    assert follow(base + [4.1] * 6)[1] == [None] * 14  # inside the band: not an excursion
    assert follow(base + [float("nan")] * 5)[1][-1]["start"] == 8  # a non-finite loss is above any band
    # The anneal phase sits higher: its first steps build its own band instead of opening an excursion.
    _, out = follow(base + [5.0 + e for e in noise], ["bulk"] * 8 + ["anneal"] * 8)
    assert out == [None] * 16


def test_an_update_that_sends_the_loss_up_for_good_is_rolled_back(corpus, tmp_path, monkeypatch):
    """Step 30's update at 1000x the learning rate (TOKENMILL_FAULT poison_step): its loss and gradient norm were
    normal, so the spike guard let it through, and the loss stays ~20x up for the rest of a run without
    rollback. With it, the run goes back to the checkpoint before the excursion, skips the batches that led
    into it, halves the learning rate and ends where a run that never saw that update and had its learning rate
    halved there ends, up to the three batches it skipped; the rollback survives a stop and resume, and the
    lineage and the report show it."""
    import duckdb

    from tokenmill.lineage import training_tables
    from tokenmill.report import sections
    from tokenmill.train.data import BatchLoader, PlanStream

    steps, poison = 80, 30
    over = {"max_steps": steps, "rollback": {"window": 10, "skip_batches": 3}}  # checkpoints every 4 steps
    wrecked = _run(corpus, tmp_path / "wrecked", monkeypatch, fault=f"poison_step={poison}", max_steps=steps,
                   rollback={"enabled": False})
    # The reference: the same run, its learning rate halved from step 28 on (stopped there, resumed at half).
    from tokenmill.train.loop import train

    monkeypatch.setenv("TOKENMILL_FAULT", "")
    train(tiny_run(**over), corpus, tmp_path / "half", None, stop_after=28)
    half = train(tiny_run(**over, optimizer={"lr": 1.5e-3}), corpus, tmp_path / "half", None)
    # The poisoned run with rollback, stopped after the rollback and resumed.
    monkeypatch.setenv("TOKENMILL_FAULT", f"poison_step={poison}")
    train(tiny_run(**over), corpus, tmp_path / "run", tmp_path / "run" / "live", stop_after=44)
    summary = train(tiny_run(**over), corpus, tmp_path / "run", tmp_path / "run" / "live")

    for bucket, loss in half["heldout_loss"].items():
        assert wrecked["heldout_loss"][bucket] > loss + 10, bucket  # up for good without a rollback
        # Measured: 0.028 (books) and 0.016 (reference) from the three skipped batches; the halved learning
        # rate alone moved the buckets 0.084 and 0.068 from the undisturbed run.
        assert summary["heldout_loss"][bucket] == pytest.approx(loss, abs=0.05), bucket
    assert summary["rollbacks"] == 1

    [row] = pq.read_table(tmp_path / "run" / "rollbacks.parquet").to_pylist()
    # The loss of step 31 is the first above the band; 10 steps above it (31-40) and the run went back to the
    # newest checkpoint before the update that preceded it (step 30's, so at most 30 steps done: 28).
    assert (row["reason"], row["excursion_start"], row["detected_at"], row["resumed_from"]) == \
        ("unrecovered_excursion", 31, 40, 28)
    assert row["skipped_steps"] == [29, 30, 31] and row["lr_scale"] == 0.5
    assert row["band_upper"] < 6 and len(row["undone_losses"]) == 13 and min(row["undone_losses"][3:]) > 20
    monkeypatch.delenv("TOKENMILL_FAULT")
    loader = BatchLoader(PlanStream(corpus / "tokenize", corpus / "mixture"), 32, 8)
    loader.order = loader.seeded_order(steps, 0)
    assert row["skipped_windows"] == [loader.window(s) for s in (29, 30, 31)]
    assert row["doc_ids"] == list(dict.fromkeys(d for s in (29, 30, 31) for d in loader.doc_ids(s)))

    ran = pq.read_table(tmp_path / "run" / "steps.parquet").to_pylist()
    ref = pq.read_table(tmp_path / "half" / "steps.parquet").to_pylist()
    assert [r["step"] for r in ran] == list(range(steps))
    assert [r["replay"] for r in ran] == [0] * 28 + [1] * 13 + [0] * 39  # steps 28-40 ran twice
    assert [r["skip_reason"] for r in ran[29:32]] == ["rolled_back"] * 3 and ran[30]["loss"] is None
    # Before the poisoned update both runs are the same run; at step 28 both start from the same checkpoint
    # at the same halved learning rate, which the resumed run kept.
    assert [r["loss"] for r in ran[:29]] == [r["loss"] for r in ref[:29]]
    assert [r["lr"] for r in ran] == [r["lr"] for r in ref]
    assert [r["tokens_hash"] for r in ran] == [r["tokens_hash"] for r in ref]

    # The lineage's train_rollbacks and the report's loss curve.
    (tmp_path / "run" / "manifest.json").write_text(json.dumps({"stage": "pretrain"}))
    con = duckdb.connect()
    for name, t in training_tables(tmp_path).items():
        con.register(name, t)
    assert con.execute("SELECT run, resumed_from, len(doc_ids) FROM train_rollbacks").fetchall() == \
        [("pretrain", 28, len(row["doc_ids"]))]
    figures = []
    monkeypatch.setattr(sections.Plots, "save", lambda self, fig, name: figures.append(fig) or f"{name}.png")
    section = sections.training(con, sections.Plots(tmp_path / "report"), tmp_path)
    assert "Rollbacks of pretrain" in "".join(section.html)
    curve = figures[0].axes[0]
    undone = [line for line in curve.get_lines() if line.get_label() == "undone (rolled back)"]
    assert len(undone) == 1 and list(undone[0].get_xdata()) == list(range(28, 41))
    assert list(undone[0].get_ydata()) == row["undone_losses"]
    assert any(line.get_label() == "rollback" and line.get_xdata()[0] == 28 for line in curve.get_lines())


def test_an_unrecovered_excursion_past_the_last_rollback_stops_the_run_with_one_line(corpus, tmp_path, monkeypatch):
    from tokenmill.train.loop import TrainError

    with pytest.raises(TrainError) as err:
        _run(corpus, tmp_path / "run", monkeypatch, fault="poison_step=30", max_steps=80,
             rollback={"window": 10, "max_rollbacks": 0})
    message = str(err.value)
    assert "\n" not in message and "for 10 steps from step 31" in message
    assert "after 0 rollbacks (train.rollback.max_rollbacks 0)" in message


def test_a_step_reads_the_device_once_and_a_logging_step_three_times(corpus):
    """Each device-to-host read waits for the GPU to finish everything queued. Counted on CPU with a
    TorchFunctionMode over every tensor method that reads values back (item, tolist, float(), bool(), .cpu(),
    .numpy()): a step reads once (its loss and gradient norm together); a logging step with the per-layer
    health measurements three times (the group norms and the update ratios, each group stacked into one
    read). AdamW's step counters are host tensors on every device and are left out."""
    import torch.distributed as dist
    from torch.overrides import TorchFunctionMode

    from tokenmill.train.data import PlanStream
    from tokenmill.train.health import Health
    from tokenmill.train.loop import Trainer, init_distributed, train_step

    reads = {"item", "tolist", "__float__", "__bool__", "__int__", "__index__", "cpu", "numpy"}

    class Reads(TorchFunctionMode):
        def __init__(self, counters):
            super().__init__()
            self.counters, self.seen = counters, []

        def __torch_function__(self, func, types, args=(), kwargs=None):
            name = getattr(func, "__name__", "")
            if name in reads and args and not any(args[0] is c for c in self.counters()):
                self.seen.append(name)
            return func(*args, **(kwargs or {}))

    device, created = init_distributed("cpu")
    try:
        cfg = parse_run(tiny_run())
        trainer = Trainer(cfg, PlanStream(corpus / "tokenize", corpus / "mixture"), device)
        state = {"records": [], "spikes": [], "losses": [], "norms": [], "consecutive": 0, "rollbacks": [],
                 "health": []}
        health = Health(trainer.model, cfg.train.health, {})
        counters = lambda: [s["step"] for s in trainer.optimizer.state.values()]  # noqa: E731
        for step in range(3):
            with Reads(counters) as mode:
                train_step(trainer, step, 1e-3, state, cfg.train.spike)
            assert mode.seen == ["tolist"], (step, mode.seen)
        with Reads(counters) as mode:
            train_step(trainer, 3, 1e-3, state, cfg.train.spike, health)
        assert mode.seen == ["tolist"] * 3, mode.seen
    finally:
        if created:
            dist.destroy_process_group()


class _Clock:
    """tokenmill.train.duties' `time`, its perf_counter moved only by the test: a step's time and an
    evaluation's time are whatever the test says they were."""

    def __init__(self):
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now

    def __getattr__(self, name):
        import time

        return getattr(time, name)


def test_heldout_loss_beats_the_unigram_entropy_and_audit_step_tokens_match_the_fed_hash(corpus, tmp_path,
                                                                                        monkeypatch):
    """The run learns context, not just token frequencies: its held-out loss ends below the unigram entropy of
    the very tokens it is scored on. Its throughput is the timed steps' tokens over their time, the first step
    (compilation, warm-up) and the evaluations left out: both timed on a clock the test moves. DVCLive's figure
    for each logging interval is that interval's steps' tokens over their time, also when an evaluation falls
    inside the interval (an H200 run logged twice its throughput, 119% MFU: the clock was reset after the
    evaluation but the steps before it kept their tokens), and metrics.json holds the whole run's."""
    import tokenmill.train.duties as duties
    import tokenmill.train.loop as loop

    steps, sequences = 128, 32
    # Step 0 "takes" 5 s, step s 0.125 x (1 + s % 4) s, each held-out evaluation 7 s: exact binary fractions.
    step_seconds = [5.0] + [0.125 * (1 + s % 4) for s in range(1, steps)]
    clock, real_step, real_heldout = _Clock(), loop.train_step, loop.Trainer.heldout_loss

    def timed_step(trainer, step, *args):
        record = real_step(trainer, step, *args)
        clock.now += step_seconds[step]
        return record

    def timed_heldout(trainer, sequences_):
        clock.now += 7.0
        return real_heldout(trainer, sequences_)

    monkeypatch.setattr(duties, "time", clock)  # the steps' clock (Throughput) and the intervals' (LiveLogging)
    monkeypatch.setattr(loop, "train_step", timed_step)
    monkeypatch.setattr(loop.Trainer, "heldout_loss", timed_heldout)
    summary = _run(corpus, tmp_path / "run", monkeypatch, max_steps=steps, checkpoint={"interval": 32},
                   logging={"eval_interval": 16, "eval_sequences": sequences, "log_interval": 10})
    timing = summary["timing"]
    assert timing["steps_timed"] == steps - 1 and timing["first_step_seconds"] == 5.0
    assert timing["tokens_per_second"] == pytest.approx((steps - 1) * 256 / sum(step_seconds[1:]), rel=1e-12)
    assert timing["loop_seconds"] > sum(step_seconds)  # the loop's wall time holds the evaluations too

    for bucket, start in summary["initial_heldout_loss"].items():
        assert start == pytest.approx(math.log(512), abs=0.3)  # a fresh model is near uniform
        assert summary["heldout_loss"][bucket] < start - 1.0, bucket
    held = pq.read_table(tmp_path / "run" / "heldout.parquet").to_pylist()
    assert {h["sequences"] for h in held} == {sequences}
    # A model that ignores context gives every position the same distribution q, and its mean loss over the
    # held-out targets of both buckets (equal counts, so the mean of the two bucket losses) is at least the
    # unigram entropy of those targets, q being their own frequencies at best: a model of token frequencies
    # cannot go below it, whatever it learnt. Measured (CPU, this corpus, 32 windows per bucket): after 48
    # steps, the earlier length of this test, the buckets' losses were 4.61 (books) and 5.09 (reference), mean
    # 4.85, against an entropy of 4.85: no margin (the plan's windows come in long runs of one bucket, and each
    # bucket's loss follows them); after 128 steps 4.27 and 4.60, mean 4.43 against 4.85. The 8 windows per
    # bucket of the other runs would compare with 4.64, the entropy of 512 tokens, too few for a 512-token
    # vocabulary (the plug-in entropy falls short of the distribution's).
    targets = np.concatenate([heldout_targets(corpus, b, sequences, 32) for b in sorted(summary["heldout_loss"])])
    unigram = unigram_entropy(targets)
    final = float(np.mean(list(summary["heldout_loss"].values())))
    losses = ", ".join(f"{b} {v:.3f}" for b, v in sorted(summary["heldout_loss"].items()))
    print(f"\nheld-out loss {final:.3f} ({losses}) against the unigram entropy of its targets {unigram:.3f}")
    assert sorted(summary["heldout_loss"]) == ["books", "reference"]
    assert final < unigram - 0.25, (final, unigram, summary["heldout_loss"])
    # step 0, every eval_interval, and the noise window (the last step and 2 more, noise_stride 5 apart)
    assert sorted({h["step"] for h in held}) == [0, 16, 32, 48, 64, 80, 96, 112, 118, 123, 128]
    assert summary["noise_steps"] == [118, 123, 128] and summary["noise"]["heldout_mean"] > 0
    out = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert "timing" not in out and out["steps"] == steps and out["tokens"] == steps * 256
    metrics = json.loads((tmp_path / "run" / "live" / "metrics.json").read_text())
    assert {"loss", "grad_norm", "lr"} <= set(metrics["train"]) and "books" in metrics["heldout"]
    assert metrics["perf"]["tokens_per_second"] == timing["tokens_per_second"]
    logged = [line.split("\t") for line in (tmp_path / "run" / "live" / "plots" / "metrics" / "perf" /
                                             "tokens_per_second.tsv").read_text().splitlines()[1:]]
    ends = [s for s in range(steps) if (s + 1) % 10 == 0 or s == steps - 1]
    starts = [0] + [e + 1 for e in ends[:-1]]
    assert [int(step) for step, *_ in logged] == [e + 1 for e in ends]  # intervals 1-10, 11-20 (eval at 16) ...
    for (_, value), a, e in zip(logged, starts, ends):
        assert float(value) == pytest.approx((e - a + 1) * 256 / sum(step_seconds[a:e + 1]), rel=1e-9), (a, e)

    # `tokenmill audit step N` over the same plan: rebuild each step's tokens from its spans, hash, compare.
    from tokenmill.lineage import step_spans

    manifest = json.loads((corpus / "tokenize" / "manifest.json").read_text())
    con = duckdb.connect()
    con.execute(f"CREATE TABLE plan AS SELECT * FROM read_parquet('{corpus / 'mixture' / 'plan.parquet'}')")
    con.execute("CREATE TABLE stages (manifest VARCHAR)")
    con.execute("INSERT INTO stages VALUES (?)", [json.dumps({"tokens_per_step": 256})])
    records = pq.read_table(tmp_path / "run" / "steps.parquet").to_pylist()
    lengths = dict(con.execute("SELECT position, length FROM plan").fetchall())
    assert sorted(r["stream_window"] for r in records) == list(range(steps))  # every window once, shuffled
    assert [r["stream_window"] for r in records] != list(range(steps))
    for step in (0, 7, steps - 1):
        _, rows = step_spans(con, records[step]["stream_window"])
        parts = []
        for position, _phase, _bucket, _doc, _epoch, shard, offset, first, end in rows:
            doc = np.fromfile(corpus / "tokenize" / shard, dtype=manifest["dtype"])
            n = lengths[position]
            parts.append(doc[offset + first:offset + min(end, n)].astype("<u4"))
            if end == n + 1:  # the span includes the document's end-of-text
                parts.append(np.array([manifest["eos_id"]], dtype="<u4"))
        tokens = np.concatenate(parts)
        assert len(tokens) == 256
        assert hashlib.blake2b(tokens.tobytes(), digest_size=16).hexdigest() == records[step]["tokens_hash"]


# ---------------------------------------------------------------------------------------------------------
# The training stage: same inputs, same bytes


def _dvc_hash(path: Path, scratch: Path) -> str:
    """The hash `dvc` records for a directory output (md5 of its .dir listing), computed by DVC's own code."""
    from dvc_data.hashfile.build import build
    from dvc_data.hashfile.db import HashFileDB
    from dvc_objects.fs.local import LocalFileSystem

    fs = LocalFileSystem()
    _, _, obj = build(HashFileDB(fs, str(scratch)), str(path), fs, "md5", dry_run=True)
    return obj.hash_info.value


def _other_hostname_prefix() -> list[str]:
    """A command prefix that runs the command under another host name (a new UTS namespace, root only), or []
    where that is not possible. `localhost`: torchrun's rendezvous must resolve the name."""
    import shutil
    import socket
    import subprocess

    if socket.gethostname() == "localhost" or not shutil.which("unshare"):
        return []
    prefix = ["unshare", "-u", "sh", "-c", 'hostname localhost && exec "$@"', "sh"]
    probe = subprocess.run(prefix + ["hostname"], capture_output=True, text=True)
    return prefix if probe.returncode == 0 and probe.stdout.strip() == "localhost" else []


def test_a_scout_built_twice_elsewhere_has_the_same_dvc_hash(corpus, tmp_path):
    """Issue 24, item 5: the scout stage (stages/train.py, as dvc runs it) on the same inputs in two project
    directories at different absolute paths, with different TMPDIRs, at different times and (where this
    machine allows) under different host names, writes outputs with the same DVC hash: 2 ranks, so that
    the checkpoints hold several ranks' shards and DCP's .metadata (which recorded the directory it was written
    to and a random save id until tokenmill.train.checkpoint wrote its own), and 2 seeds, so that a seed
    replica's directory is in the output too. Every file is compared byte for byte, not only the hash. What is about the run (times, argv, the command, the host) is in the run
    record, runs/<stage>.json, outside the output."""
    import shutil
    import subprocess
    import sys

    import yaml

    cfg = tiny_run(max_steps=8, launch={"nproc_per_node": 2})
    params = {"train": full_train(cfg), "scouts": {"s1": {"model": cfg["model"], "token_budget": 400_000, "seeds": 2}}}
    script_path = str(Path(__file__).resolve().parents[1] / "stages" / "train.py")
    outputs = []
    for project, prefix in ((tmp_path / "one" / "proj", []),
                            (tmp_path / "two" / "a" / "longer" / "path" / "proj", _other_hostname_prefix())):
        for stage in ("mixture", "tokenize"):
            shutil.copytree(corpus / stage, project / "data" / stage)
        (project / "params.yaml").write_text(yaml.safe_dump(params))
        (project / "tmp").mkdir()
        env = {**os.environ, "TMPDIR": str(project / "tmp"), "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo"}
        proc = subprocess.run(prefix + [sys.executable, script_path, "scout/s1", "mixture", "tokenize"],
                              cwd=project, env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        out = project / "data" / "train" / "scout" / "s1"
        files = {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}
        assert any(name.endswith(".metadata") for name in files) and "replicas/seed1/final/model.safetensors" in files
        for name, content in files.items():  # nothing of where it was built
            assert str(project).encode() not in content and str(tmp_path).encode() not in content, name
        outputs.append((_dvc_hash(out, tmp_path / "odb"), {k: hashlib.md5(v).hexdigest() for k, v in files.items()}))
    (first, first_files), (second, second_files) = outputs
    assert second_files == first_files
    assert second == first
    # Run again where it finished (as `dvc repro` does when a stage reruns on the same plan, e.g. only `seeds`
    # or a tag the plan ignores changed): nothing is launched, every file stays as it was, the run record says so.
    project = tmp_path / "one" / "proj"
    proc = subprocess.run([sys.executable, script_path, "scout/s1", "mixture", "tokenize"], cwd=project,
                          env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for stage in ("scout@s1", "scout@s1#seed1"):
        assert f"{stage}: already trained on these inputs with this configuration; not relaunched" in proc.stderr
        assert json.loads((project / "runs" / f"{stage}.json").read_text())["command"] is None
    out = project / "data" / "train" / "scout" / "s1"
    assert {str(p.relative_to(out)): hashlib.md5(p.read_bytes()).hexdigest()
            for p in sorted(out.rglob("*")) if p.is_file()} == first_files


def test_a_scout_sweeps_the_learning_rate_and_names_the_best_for_the_full_run(corpus, tmp_path):
    """scouts.<rung>.lrs: the scout stage (stages/train.py, as dvc runs it) trains its rung once more per learning
    rate, each a run of its own (run record, outside the seed replicas the forecast reads), and its metrics list
    every point of the sweep and the best: a learning rate 300x too small loses to the recipe's."""
    import shutil
    import subprocess
    import sys

    import yaml

    from tokenmill.forecast import read_summaries

    cfg = tiny_run(max_steps=24)
    params = {"train": full_train(cfg), "scouts": {"s1": {"model": cfg["model"], "token_budget": 400_000,
                                                          "lrs": [1.0e-5]}}}
    project = tmp_path / "proj"
    for stage in ("mixture", "tokenize"):
        shutil.copytree(corpus / stage, project / "data" / stage)
    (project / "params.yaml").write_text(yaml.safe_dump(params))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo"}
    proc = subprocess.run([sys.executable, str(Path(__file__).resolve().parents[1] / "stages" / "train.py"),
                           "scout/s1", "mixture", "tokenize"], cwd=project, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    metrics = json.loads((project / "metrics" / "train" / "scout" / "s1.json").read_text())["scout"]
    out = project / "data" / "train" / "scout" / "s1"
    runs = {3.0e-3: out, 1.0e-5: out / "lr_sweep" / "lr1"}
    assert [p["lr"] for p in metrics["lr_sweep"]] == sorted(runs)
    for point in metrics["lr_sweep"]:
        held = json.loads((runs[point["lr"]] / "summary.json").read_text())["heldout_loss"]
        assert point["heldout_mean"] == pytest.approx(sum(held.values()) / len(held), abs=1e-4)
    assert json.loads((out / "lr_sweep" / "lr1" / "run_config.json").read_text())["train"]["optimizer"]["lr"] == 1.0e-5
    tiny, recipe = (p["heldout_mean"] for p in metrics["lr_sweep"])
    assert metrics["best_lr"] == 3.0e-3 and tiny > recipe + 0.3
    assert "train.optimizer.lr=0.003" in proc.stdout
    assert [p.name for p in (project / "runs").glob("scout@s1#lr*.json")] == ["scout@s1#lr1.json"]
    assert read_summaries({"s1": out})[0]["replicas"] == []  # the forecast sees the rung's own run only
