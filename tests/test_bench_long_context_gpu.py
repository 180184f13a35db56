"""The long-context GPU check (benchmarks/bench_long_context_gpu.py) without a GPU: what `prepare` composes from
the preset, the synthetic plan it trains on (a long phase at its own length, short documents kept out of it), and
that the committed RESULTS section is what the committed records render to."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_long_context_gpu as bench  # noqa: E402
from bench_train_gpu import synthetic_corpus  # noqa: E402


def test_prepare_keeps_the_presets_micro_batch_and_long_phase_on_one_gpu(tmp_path):
    out = tmp_path / "long.json"
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_long_context_gpu.py"), "prepare", str(out),
                    "--layers", "3"], check=True, capture_output=True, text=True, timeout=120, cwd=ROOT)
    saved = json.loads(out.read_text())
    model, train = saved["run"]["model"], saved["run"]["train"]
    assert model["n_layers"] == 3 and model["d_model"] == 4096 and model["ffn_dim"] == 14336  # the 8B block
    assert saved["micro_batch_tokens"] == train["micro_batch"] * train["seq_len"] == 32768
    assert saved["long_seq"] == 32768 and saved["min_doc_tokens"] == 4096
    assert train["rope_scaling"] == {"kind": "base", "theta": 1500000.0}
    assert train["parallel"]["tp"] == 1 and train["launch"]["nproc_per_node"] == 1
    assert train["parallel"]["activation_checkpoint"] == "selective" and train["parallel"]["compile"] is True
    # the long phase keeps the preset's name: WSD's decay runs in it
    assert "anneal" in saved["variants"][0]["phases"] and train["schedule"]["decay_phase"] == "anneal"


def test_the_synthetic_plan_reads_its_long_phase_at_its_length(tmp_path):
    from tokenmill.train.data import PlanStream

    train = {"seq_len": 256, "global_batch": 8}
    phases = bench.variants("anneal", 1024, 4096)[0]["phases"]
    tokens = 8 * 256 * 8 + 1
    root = synthetic_corpus(tmp_path, 1000, 2 * tokens, phases=phases, plan_tokens=tokens, train=train)
    assert json.loads((root / "mixture" / "manifest.json").read_text()) == {
        "phase_seq_len": {"bulk": 256, "anneal": 1024}}
    plan = pq.read_table(root / "mixture" / "plan.parquet").to_pylist()
    long_docs = [r["length"] for r in plan if r["phase"] == "anneal"]
    assert long_docs and min(long_docs) >= 4096  # min_doc_tokens: no shorter document in the long phase
    assert min(r["length"] for r in plan if r["phase"] == "bulk") < 4096
    stream = PlanStream(root / "tokenize", root / "mixture")
    assert stream.phase_seq_len == {"bulk": 256, "anneal": 1024}


def test_the_results_section_is_what_the_committed_records_render_to():
    folder = ROOT / "benchmarks" / "gpu" / "h200-2026-11-29"
    records = [json.loads((folder / name).read_text()) for name in ("long.json", "long8.json")]
    text = bench.render(records, json.loads((folder / "full8-update-ratio-in-place.json").read_text()))
    assert text.strip() in (ROOT / "benchmarks" / "RESULTS.md").read_text()
    assert "| 8 | 4K -> 32K | bulk (4), anneal (2) |" in text
