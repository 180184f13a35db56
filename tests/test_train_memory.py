"""The step-memory count (tokenmill.memory) against the peaks measured on a GPU (torch.cuda.max_memory_allocated):
the stages' own runs on one H200 (benchmarks/gpu/h200-2026-11-27/records.json: the 0.86B full run and the 59M
scout) and scale=h100_64x_8b_32k's blocks at its 32K micro-batch on one H200 (benchmarks/gpu/h200-2026-11-29/:
6 and 8 of the 8B model's blocks, 4K -> 32K with selective and with full checkpointing, and the 4K bulk alone),
each with its recorded parameters. The count is made from the tensors the code holds, with nothing fitted to these
runs: it must not fall below a measured peak (a preset it calls safe would run out of memory) and must stay within
a quarter above it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tokenmill.train.config import TrainConfig, model_size, parse_model
from tokenmill.memory import GiB, step_memory

GPU = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu"
RECORDS = GPU / "h200-2026-11-27" / "records.json"
LONG = [GPU / "h200-2026-11-29" / name for name in ("long.json", "long8.json")]
VOCAB = 32768  # the h100 presets' tokenizer.vocab_size, which these runs used


def long_runs() -> list[tuple[int, str, dict, dict]]:
    """(blocks, label, the run's model section, its summary) of the 32K preset's runs on one H200."""
    out = []
    for path in LONG:
        record = json.loads(path.read_text())
        for label, summary in record["runs"].items():
            out.append((record["run"]["model"]["n_layers"], label, record["run"]["model"], summary))
    return out


def long_count(model: dict, summary: dict) -> dict:
    """The count for one of those runs at its longest length (32K where the run reached the long phase)."""
    longest = 32768 if "anneal" in summary["phases"] else 4096
    return step_memory(parse_model(model), TrainConfig.model_validate(summary["train"]), VOCAB, world=1,
                       seq_len=longest)


@pytest.mark.parametrize("run,params", [("pretrain_record", 855_705_600), ("scout@s1_record", 58_729_984)])
def test_the_count_bounds_the_measured_peak_from_above_within_a_quarter(run, params):
    record = json.loads(RECORDS.read_text())[run]
    model = parse_model(record["params"]["model"])
    train = TrainConfig.model_validate({k: v for k, v in record["params"]["train"].items()})
    assert model_size(model, VOCAB)["params"] == params  # the runs' reported sizes: the vocabulary is theirs
    measured = record["timing"]["memory_gib"] * GiB
    counted = step_memory(model, train, VOCAB, world=1)["total"]
    assert measured <= counted <= 1.25 * measured, (counted / GiB, measured / GiB)


@pytest.mark.parametrize("blocks,label", [(b, label) for b, label, _, _ in long_runs()])
def test_the_count_bounds_the_32k_presets_blocks_measured_on_one_gpu(blocks, label):
    """The preset's model at 6 and 8 blocks on one H200, its 32,768-token micro-batch, the switch to 32K
    sequences at RoPE base 1.5M without a restart: each peak under the count, within a quarter."""
    model, summary = next((m, s) for b, lab, m, s in long_runs() if (b, lab) == (blocks, label))
    assert "error" not in summary and summary["steps"] == 6
    measured = summary["timing"]["peak_memory_bytes"]
    counted = long_count(model, summary)["total"]
    assert measured <= counted <= 1.25 * measured, (counted / GiB, measured / GiB)


def test_a_block_costs_what_the_count_says_and_32k_costs_what_4k_costs_on_the_gpu():
    """What the preset's figure rests on, measured: the peak grows per block by what the count adds per block
    (the preset has 32 of them), and a 32K sequence costs what 8 sequences of 4K cost (the flash kernel keeps no
    seq x seq matrix): the run that switched to 32K peaked where the 4K bulk alone did."""
    runs = {(b, label): (m, s) for b, label, m, s in long_runs()}
    switch = next(label for _, label in runs if label.endswith("32K"))
    (m6, s6), (m8, s8) = runs[(6, switch)], runs[(8, switch)]
    measured = (s8["timing"]["peak_memory_bytes"] - s6["timing"]["peak_memory_bytes"]) / 2
    counted = (long_count(m8, s8)["total"] - long_count(m6, s6)["total"]) / 2
    assert measured <= counted <= 1.1 * measured, (counted / GiB, measured / GiB)
    assert s6["phases"].count("anneal") == 2  # two steps of the run were 32K sequences
    bulk = runs[(6, "4K bulk")][1]["timing"]["peak_memory_bytes"]
    assert abs(s6["timing"]["peak_memory_bytes"] - bulk) < 0.001 * bulk


def test_with_full_checkpointing_the_unsharded_reduction_sets_the_floor():
    """Full checkpointing leaves few activations: on one unsharded GPU the run peaked at the gradient reduction's
    24 bytes a parameter at both depths (the count's `reduction` term, from the tensor sizes), within 0.5%."""
    for blocks, label, model, summary in long_runs():
        if summary["train"]["parallel"]["activation_checkpoint"] != "full":
            continue
        measured = summary["timing"]["peak_memory_bytes"]
        assert abs(long_count(model, summary)["reduction"] - measured) < 0.005 * measured, blocks
        params = model_size(parse_model(model), VOCAB)["params"]
        assert 24 <= measured / params < 24.1


def test_a_long_phase_costs_what_its_micro_batch_tokens_cost():
    """Activations and logits follow the micro-batch's tokens (flash attention keeps no seq x seq matrix), so the
    same micro-batch tokens at 32K as at 4K cost the same; full checkpointing keeps one block input per block."""
    model = parse_model({"n_layers": 32, "d_model": 4096, "n_heads": 32, "n_kv_heads": 8, "ffn_dim": 14336})
    base = {"seq_len": 4096, "global_batch": 1024, "micro_batch": 8, "device": "cuda",
            "parallel": {"dp_replicate": 4, "dp_shard": 8, "tp": 2}}
    full = TrainConfig.model_validate({**base, "parallel": {**base["parallel"], "activation_checkpoint": "full"}})
    none = TrainConfig.model_validate(base)
    at_4k, at_32k = step_memory(model, full, VOCAB, 64), step_memory(model, full, VOCAB, 64, seq_len=32768)
    assert at_4k["total"] == at_32k["total"]
    # without checkpointing a block keeps 2 norm inputs, the q/k/v input, q, k, v, the attention output, the FFN
    # input and 4 FFN-wide tensors per token: (2 + 1 + 1 + 1/4 + 1/4 + 1 + 1) d + 4 x 3.5 d = 20.5 d
    assert step_memory(model, none, VOCAB, 64)["activations"] == at_4k["activations"] * 20.5
    # full checkpointing: one d-wide block input per block and token, in bf16, split over TP 2
    assert at_4k["activations"] == 32 * 4096 * 8 * 4096 * 2 // 2


def test_the_32k_preset_fits_an_h100_by_the_count():
    """scale=h100_64x_8b_32k as `dvc exp run -S scale=...` composes it: the long phase divides a step, a micro-batch
    holds one 32K sequence, and the count at 32K is under an H100's 79.6 GiB (it stayed 4-21% above every peak
    measured, so the peak it predicts is 57-66 GiB)."""
    from tokenmill.mixture import parse_phases, phase_seq_len
    from tokenmill.mixture.params import Mixture
    from tokenmill.search import compose_params
    from tokenmill.train.config import mesh_shape

    p = compose_params(Path(__file__).resolve().parents[1], ["scale=h100_64x_8b_32k"])
    train, model = TrainConfig.model_validate(p["train"]), parse_model(p["model"])
    phases = parse_phases(Mixture.resolve(p["mixture"]).phases)
    assert phase_seq_len(phases, train.seq_len, train.tokens_per_step)["anneal"] == 32768
    world = train.launch.nnodes * train.launch.nproc_per_node
    assert mesh_shape(train, world).micro_batch * train.seq_len == 32768  # one long sequence per micro-batch
    count = step_memory(model, train, p["tokenizer"]["vocab_size"], world, seq_len=32768)
    assert count["total"] < 79.6 * GiB
