"""The step-memory count (tokenmill.memory) against the peaks measured on a GPU: the stages' own runs on one
H200 (benchmarks/gpu/h200-2026-11-27/records.json: the 0.86B full run and the 59M scout, each with its recorded
parameters and torch.cuda.max_memory_allocated). The count is made from the tensors the code holds, with nothing
fitted to these runs: it must not fall below a measured peak (a preset it calls safe would run out of memory) and
must stay within a fifth above it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tokenmill.train.config import TrainConfig, model_size, parse_model
from tokenmill.memory import GiB, step_memory

RECORDS = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu" / "h200-2026-11-27" / "records.json"
VOCAB = 32768  # the h100 presets' tokenizer.vocab_size, which these runs used


@pytest.mark.parametrize("run,params", [("pretrain_record", 855_705_600), ("scout@s1_record", 58_729_984)])
def test_the_count_bounds_the_measured_peak_from_above_within_a_fifth(run, params):
    record = json.loads(RECORDS.read_text())[run]
    model = parse_model(record["params"]["model"])
    train = TrainConfig.model_validate({k: v for k, v in record["params"]["train"].items()})
    assert model_size(model, VOCAB)["params"] == params  # the runs' reported sizes: the vocabulary is theirs
    measured = record["timing"]["memory_gib"] * GiB
    counted = step_memory(model, train, VOCAB, world=1)["total"]
    assert measured <= counted <= 1.2 * measured, (counted / GiB, measured / GiB)


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
    holds one 32K sequence, and the count at 32K is under an H100's 79.6 GiB (with its margin above measured peaks,
    at most a fifth, the peak it predicts is 57-69 GiB)."""
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
