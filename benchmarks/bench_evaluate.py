"""Export and evaluation throughput on CPU: the demo model exported, then lm-eval items per second by task kind.

The demo model's shape (conf/model/tiny.yaml: QK-norm, tied embeddings, so a Qwen3ForCausalLM export;
sequence 256) with a 16k BPE vocabulary trained on real text (train_helpers), randomly initialised from a
seed: throughput does not depend on what the weights learnt. Then tokenmill.evaluate.run_evaluation on the
first --limit items of real benchmark files (../shared/data/eval), one benchmark per run, and held-out
perplexity on WikiText-2 test paragraphs. Model loading is timed apart from scoring.

    .venv/bin/python benchmarks/bench_evaluate.py [--limit 50] [--write]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from benchlib import machine, write_section  # noqa: E402
from train_helpers import build_corpus  # noqa: E402

EVAL = ROOT / ".." / "shared" / "data" / "eval"
BENCHMARKS = [
    {"name": "arc_easy", "format": "llm_foundry", "path": str(EVAL / "llm_foundry" / "arc_easy.jsonl")},
    {"name": "hellaswag", "format": "hellaswag", "path": str(EVAL / "hellaswag" / "hellaswag_val_subset.jsonl")},
    {"name": "mmlu (anatomy)", "format": "mmlu_csv", "path": str(EVAL / "mmlu" / "test" / "anatomy_test.csv")},
    {"name": "winogrande", "format": "llm_foundry", "path": str(EVAL / "llm_foundry" / "winogrande.jsonl")},
    {"name": "lambada_openai", "format": "llm_foundry", "path": str(EVAL / "llm_foundry" / "lambada_openai.jsonl")},
]


def random_demo_run(run_dir: Path, corpus: Path, seq_len: int) -> dict:
    import torch
    from safetensors.torch import save_file

    from tokenmill.train.config import parse_model
    from tokenmill.train.model import Transformer

    meta = json.loads((corpus / "tokenize" / "manifest.json").read_text())
    model_cfg = yaml.safe_load((ROOT / "conf" / "model" / "tiny.yaml").read_text())
    cfg = parse_model(model_cfg)
    net = Transformer(cfg, meta["vocab_size"], seq_len, meta["eos_id"])
    net.init_weights(0)
    (run_dir / "final").mkdir(parents=True)
    sd = {k: v.contiguous() for k, v in net.state_dict().items() if not (cfg.tie_embeddings and k == "output.weight")}
    save_file(sd, str(run_dir / "final" / "model.safetensors"))
    (run_dir / "final" / "config.json").write_text(json.dumps({"model": cfg.model_dump(), "seq_len": seq_len,
                                                               "vocab_size": meta["vocab_size"], "eos_id": meta["eos_id"]}))
    return {"params": sum(p.numel() for p in net.parameters()), "vocab_size": meta["vocab_size"]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--limit", type=int, default=50, help="items per benchmark")
    ap.add_argument("--write", action="store_true", help="replace the Evaluation section of RESULTS.md")
    args = ap.parse_args()
    from tokenmill.evaluate.run import run_evaluation
    from tokenmill.export import export_run

    with tempfile.TemporaryDirectory(prefix="bench-eval-") as tmp:
        tmp = Path(tmp)
        corpus = build_corpus(tmp / "corpus", token_budget=200_000, vocab_size=16384)
        info = random_demo_run(tmp / "run", corpus, 256)
        t0 = time.perf_counter()
        export = export_run(tmp / "run", corpus / "tokenizer" / "hf", tmp / "hf")
        export_s = time.perf_counter() - t0
        rows = []
        for spec in BENCHMARKS:
            out = run_evaluation(tmp / "hf", [spec], None, None, tmp / "eval", limit=args.limit, batch_size=16)
            b = out["results"]["benchmarks"][spec["name"]]
            t = out["timing"]
            rows.append((spec["name"], b["kind"], b["items"], t["model_load_seconds"], t["evaluate_seconds"],
                         t["items_per_second"]))
        text = (ROOT / ".." / "shared" / "data" / "text" / "wikitext-2" / "test.txt").read_text(encoding="utf-8")
        paras = [p.strip() for p in text.split("\n") if len(p.strip()) > 400][:args.limit]
        held = [{"doc_id": f"w{i}", "bucket": "reference", "text": p} for i, p in enumerate(paras)]
        out = run_evaluation(tmp / "hf", [], held, None, tmp / "eval", batch_size=16)
        t = out["timing"]
        h = out["results"]["heldout"]["buckets"]["reference"]
        rows.append((f"held-out perplexity ({h['bytes']:,} bytes)", "loglikelihood_rolling", h["documents"],
                     t["model_load_seconds"], t["evaluate_seconds"], t["items_per_second"]))

    m = machine(("torch", "transformers", "lm_eval"))
    lines = [
        "## Evaluation",
        "",
        f"Machine: {m['nproc']} cores ({m['cpu']}), Python {m['python']}, torch {m['versions']['torch']}, "
        f"transformers {m['versions']['transformers']}, lm-eval {m['versions']['lm_eval']}.",
        f"Command: `.venv/bin/python benchmarks/bench_evaluate.py --limit {args.limit} --write`",
        "",
        f"The demo model's shape (conf/model/tiny.yaml, {info['params']:,} parameters with a "
        f"{info['vocab_size']:,}-token vocabulary, sequence 256) exported as {export['architecture']} in "
        f"{export_s:.2f} s, then scored by `tokenmill.evaluate.run_evaluation` (lm-eval {m['versions']['lm_eval']}, "
        "HFLM on CPU, float32, batch 16), one benchmark per run, the first items of each real file. An item is "
        "one document: all its choices (multiple choice) or all its rolling windows (held-out text).",
        "",
        "| task | kind | items | model load (s) | scoring (s) | items/s |",
        "| --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for name, kind, items, load_s, eval_s, ips in rows:
        lines.append(f"| {name} | {kind} | {items} | {load_s:.2f} | {eval_s:.2f} | {ips:.1f} |")
    section = "\n".join(lines) + "\n"
    print(section)
    if args.write:
        write_section(ROOT / "benchmarks" / "RESULTS.md", "## Evaluation", section)


if __name__ == "__main__":
    main()
