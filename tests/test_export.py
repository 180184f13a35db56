"""Hugging Face export: the exported checkpoint computes the same logits as tokenmill's own model on real text
(Llama without QK-norm, Qwen3 with it, tied and untied embeddings), final weights and DCP checkpoints
(sharded by a 2-rank FSDP run) export alike, lm-eval's `hf` model loads the export and scores as the model
does, and bad runs fail in one line.

Real data: the tokenizer and training corpus of train_helpers (WikiText-2 valid + Tiny Shakespeare); the
text the logits are compared on is WikiText-2 *test*, which neither saw.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from tokenmill.export import ExportError, export_run
from tokenmill.train.config import parse_model
from tokenmill.train.model import Transformer
from train_helpers import build_corpus, shared_text, tiny_run, torchrun

SEQ = 64


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    return build_corpus(tmp_path_factory.mktemp("export_corpus"))


@pytest.fixture(scope="module")
def tokens(corpus) -> torch.Tensor:
    """(4, SEQ) token ids of four WikiText-2 test paragraphs, none holding an end-of-text token."""
    from tokenmill.tokenizer.hf import hf_tokenizer

    tok = hf_tokenizer(corpus / "tokenizer" / "hf")
    eos = tok.token_to_id("</s>")
    text = (shared_text() / "wikitext-2" / "test.txt").read_text(encoding="utf-8")
    paragraphs = [p.strip() for p in text.split("\n") if len(p.strip()) > 600][:4]
    rows = [tok.encode(p).ids[:SEQ] for p in paragraphs]
    assert len(rows) == 4 and all(len(r) == SEQ and eos not in r for r in rows)
    return torch.tensor(rows)


def _meta(corpus: Path) -> dict:
    return json.loads((corpus / "tokenize" / "manifest.json").read_text())


def random_run(run_dir: Path, corpus: Path, seed: int, width_mult: float | None = None, **model) -> Transformer:
    """A run directory as tokenmill.train.loop leaves it (final/model.safetensors + final/config.json) for a
    randomly initialised model. init_std 0.3 makes attention far from uniform, and the norm weights are
    randomised too (init sets them to 1), so a wrong RoPE or q/k-norm layout changes the logits."""
    meta = _meta(corpus)
    cfg = parse_model({"n_layers": 2, "d_model": 64, "n_heads": 4, "n_kv_heads": 2, "ffn_dim": 96,
                       "init_std": 0.3, "rope_theta": 500.0, "norm_eps": 1e-6, **model})
    net = Transformer(cfg, meta["vocab_size"], SEQ, meta["eos_id"], width_mult)
    net.init_weights(seed)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in net.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1 + 0.5 * torch.randn(p.shape, generator=g))
    final = run_dir / "final"
    final.mkdir(parents=True)
    sd = {k: v.contiguous() for k, v in net.state_dict().items() if not (cfg.tie_embeddings and k == "output.weight")}
    save_file(sd, str(final / "model.safetensors"))
    (final / "config.json").write_text(json.dumps({"model": cfg.model_dump(), "vocab_size": meta["vocab_size"],
                                                   "eos_id": meta["eos_id"], "seq_len": SEQ,
                                                   "width_mult": width_mult}))
    return net.eval()


def hf_logits(export_dir: Path, tokens: torch.Tensor) -> torch.Tensor:
    from transformers import AutoModelForCausalLM

    model, info = AutoModelForCausalLM.from_pretrained(str(export_dir), output_loading_info=True)
    assert not any(info.values()), info  # no missing, unexpected or mismatched weights
    model.eval()
    with torch.no_grad():
        return model(tokens).logits


@pytest.mark.parametrize("qk_norm,tie,width_mult", [(False, False, None), (False, True, None), (True, False, None),
                                                    (True, True, None), (False, False, 2.0), (True, True, 4.0)])
def test_exported_logits_equal_tokenmills(corpus, tokens, tmp_path, qk_norm, tie, width_mult):
    """Every layout, and μP's (width_mult: logits / width_mult, which transformers' Llama and Qwen3 do not
    have, folded into the weights; a tied table is untied for it)."""
    net = random_run(tmp_path / "run", corpus, seed=11, width_mult=width_mult, qk_norm=qk_norm, tie_embeddings=tie)
    summary = export_run(tmp_path / "run", corpus / "tokenizer" / "hf", tmp_path / "hf")
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert config["architectures"] == (["Qwen3ForCausalLM"] if qk_norm else ["LlamaForCausalLM"])
    assert summary["architecture"] == config["architectures"][0]
    tied = tie and width_mult is None
    assert config["tie_word_embeddings"] is tied and config["rope_parameters"]["rope_theta"] == 500.0
    assert config["rms_norm_eps"] == 1e-6 and config["max_position_embeddings"] == SEQ
    assert ("lm_head.weight" in load_file(str(tmp_path / "hf" / "model.safetensors"))) is not tied
    with torch.no_grad():
        ours = net(tokens)
    theirs = hf_logits(tmp_path / "hf", tokens)
    assert ours.std() > 1.0 / (width_mult or 1.0)  # logits far from flat: a layout error would show
    torch.testing.assert_close(theirs, ours, rtol=1e-5, atol=1e-4)
    assert not (tmp_path / ".tmp-hf").exists()


def test_tokenizer_loads_from_the_export_with_the_tokenizer_stages_ids(corpus, tmp_path):
    from transformers import AutoTokenizer

    from tokenmill.tokenizer import Tokenizer

    random_run(tmp_path / "run", corpus, seed=1)
    export_run(tmp_path / "run", corpus / "tokenizer" / "hf", tmp_path / "hf")
    hf = AutoTokenizer.from_pretrained(str(tmp_path / "hf"))
    sp = Tokenizer(corpus / "tokenizer")
    text = (shared_text() / "wikitext-2" / "test.txt").read_text(encoding="utf-8")[:3000]
    assert hf(text)["input_ids"] == list(sp.encode(text))
    assert hf.eos_token_id == _meta(corpus)["eos_id"]


def test_lm_eval_hf_model_scores_like_the_model(corpus, tmp_path):
    """lm-eval's HFLM loads the export; its loglikelihood of a real continuation is the sum of tokenmill's
    own log-probabilities of the continuation tokens."""
    from lm_eval.api.instance import Instance
    from lm_eval.models.huggingface import HFLM

    from tokenmill.tokenizer.hf import hf_tokenizer

    net = random_run(tmp_path / "run", corpus, seed=5, qk_norm=True)
    export_run(tmp_path / "run", corpus / "tokenizer" / "hf", tmp_path / "hf")
    lm = HFLM(pretrained=str(tmp_path / "hf"), device="cpu", batch_size=2, dtype="float32")
    context = "The Royal Court Theatre staged the play in"
    continuation = " London , where it ran for a month ."
    req = Instance(request_type="loglikelihood", doc={}, arguments=(context, continuation), idx=0)
    (logprob, _greedy), = lm.loglikelihood([req])

    tok = hf_tokenizer(corpus / "tokenizer" / "hf")
    whole, ctx = tok.encode(context + continuation).ids, tok.encode(context).ids
    assert whole[:len(ctx)] == ctx
    with torch.no_grad():
        logp = torch.log_softmax(net(torch.tensor([whole])).float(), -1)[0]
    expected = sum(float(logp[i - 1, whole[i]]) for i in range(len(ctx), len(whole)))
    assert logprob == pytest.approx(expected, abs=1e-3)
    assert lm.max_length == SEQ


@pytest.fixture(scope="module")
def fsdp_run(corpus, tmp_path_factory) -> Path:
    """8 steps of the tiny recipe on 2 FSDP ranks (tied embeddings, no QK-norm): checkpoints at steps 4
    and 8, each written as one shard per rank, and the final weights gathered by the loop."""
    tmp = tmp_path_factory.mktemp("export_fsdp")
    run_cfg = tiny_run(max_steps=8)
    run_cfg["model"] = {**run_cfg["model"], "qk_norm": False, "tie_embeddings": True}
    cfg = tmp / "run.json"
    cfg.write_text(json.dumps(run_cfg))
    run = tmp / "run"
    torchrun(2, ["-m", "tokenmill.train", "--config", str(cfg), "--data-root", str(corpus), "--out", str(run)])
    # The training stage writes run_config.json beside the run (tokenmill.train.stage); this launch did not.
    (run / "run_config.json").write_text(json.dumps(run_cfg))
    return run


def test_sharded_checkpoint_gathers_to_the_final_weights(fsdp_run, corpus, tokens, tmp_path):
    step8 = fsdp_run / "checkpoints" / "step_00000008"
    assert len(list(step8.glob("*.distcp"))) == 2  # one shard file per rank
    tok_dir = corpus / "tokenizer" / "hf"
    export_run(fsdp_run, tok_dir, tmp_path / "final")
    summary = export_run(fsdp_run, tok_dir, tmp_path / "step8", step=8)
    assert summary["source"] == "checkpoints/step_00000008" and summary["architecture"] == "LlamaForCausalLM"
    final, step = load_file(str(tmp_path / "final" / "model.safetensors")), load_file(str(tmp_path / "step8" / "model.safetensors"))
    assert sorted(final) == sorted(step) and "lm_head.weight" not in final
    for name in final:
        assert torch.equal(final[name], step[name]), name
    # An earlier step is another model; a run whose final/ is gone still exports from run_config.json.
    shutil.rmtree(fsdp_run / "final")
    export_run(fsdp_run, tok_dir, tmp_path / "step4", step=4)
    step4 = load_file(str(tmp_path / "step4" / "model.safetensors"))
    assert not torch.equal(step4["model.embed_tokens.weight"], step["model.embed_tokens.weight"])
    # The trained model itself: logits of the export equal tokenmill's on held-out text.
    cfg = json.loads((fsdp_run / "run_config.json").read_text())
    net = Transformer(parse_model(cfg["model"]), _meta(corpus)["vocab_size"], 32, _meta(corpus)["eos_id"])
    sd = load_file(str(tmp_path / "step8" / "model.safetensors"))
    assert net.tok_embeddings.weight.shape == sd["model.embed_tokens.weight"].shape
    from tokenmill.export.hf import load_step

    net.load_state_dict(load_step(fsdp_run, 8), strict=False)  # output.weight is the tied embedding
    with torch.no_grad():
        ours = net.eval()(tokens[:, :32])
    torch.testing.assert_close(hf_logits(tmp_path / "step8", tokens[:, :32]), ours, rtol=1e-5, atol=1e-4)


def test_bad_runs_fail_in_one_line(corpus, tmp_path):
    tok_dir = corpus / "tokenizer" / "hf"
    with pytest.raises(ExportError, match="final/model.safetensors not found"):
        export_run(tmp_path / "nothing", tok_dir, tmp_path / "out")
    random_run(tmp_path / "run", corpus, seed=2)
    with pytest.raises(ExportError, match=r"no complete checkpoint of step 3 .*complete: none"):
        export_run(tmp_path / "run", tok_dir, tmp_path / "out", step=3)
    config = json.loads((tmp_path / "run" / "final" / "config.json").read_text())
    (tmp_path / "run" / "final" / "config.json").write_text(json.dumps({**config, "eos_id": 5}))
    with pytest.raises(ExportError, match="eos_id 5 is not the tokenizer's eos id"):
        export_run(tmp_path / "run", tok_dir, tmp_path / "out")
    with pytest.raises(ExportError, match="tokenizer.json not found"):
        export_run(tmp_path / "run", tmp_path, tmp_path / "out")
    assert not (tmp_path / "out").exists()
