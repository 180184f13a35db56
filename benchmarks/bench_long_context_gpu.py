"""Issue 46's GPU check: the memory per GPU of scale=h100_64x_8b_32k's long phase, measured on one GPU
(timing.peak_memory_bytes, torch.cuda.max_memory_allocated) beside tokenmill.memory.step_memory's count.

One GPU cannot hold the preset's 8B model at its 64-GPU layout, so the run is what one GPU can hold of it: the
preset's model (the 8B block: d 4096, 32 heads, 8 KV heads, FFN 14336; its 32,768-token vocabulary) with
--layers of its 32 blocks, at the preset's micro-batch of 32,768 tokens (8 x 4096 in the bulk, one 32K sequence
in the long phase), its selective activation checkpointing, compile, bf16, and RoPE base 1.5M in the long phase,
on one GPU (TP 1, no sharding, so every tensor is whole). The count is made for that same run (world 1). Each term
of the count is either per block (the state, the activations) or the same at any depth (the logits, one block's
recompute, two gathered blocks), so the check tests the count's per-token and per-block accounting at 32K, with
the attention kernel the preset runs (SDPA's flash kernel, GQA without copying k and v), which is what the preset's
figure rests on; TP's split of it (a division by 2) needs two GPUs.

Three runs, each a torchrun of tokenmill.train on a synthetic corpus (bench_train_gpu.synthetic_corpus: documents
of 512 to 8,192 tokens in one bucket):
  4K bulk           the plan's bulk phase only, micro-batches of 8 x 4096 tokens;
  4K -> 32K         the bulk for the first half of the steps, then the long phase (32,768-token sequences of
                    documents of 4,096 tokens or more, RoPE base 1.5M) without a restart: the preset's switch;
  4K -> 32K, full   the same with full activation checkpointing (the preset's alternative).
The long phase takes half of the steps here (the preset: the last tenth) so that a few steps reach it.

    python benchmarks/bench_long_context_gpu.py prepare gpu-run/long.json       # here: compose the run
    python benchmarks/bench_long_context_gpu.py node gpu-run/long.json OUT/long.json   # on the GPU node
    python benchmarks/bench_long_context_gpu.py render OUT/long.json [--write]  # here: the RESULTS section
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_train_gpu import gpu_versions, leg, synthetic_corpus  # noqa: E402
from benchlib import timed_run, write_section  # noqa: E402

SCALE = "h100_64x_8b_32k"
TITLE = "## Long context on GPU: the 32K phase's memory, measured against the count"


def variants(long_name: str, long_seq: int, min_doc: int) -> list[dict]:
    """(label, phases, train changes) of the three runs; the long phase keeps the preset's name, where WSD's
    decay runs (train.schedule.decay_phase)."""
    bulk = {"bulk": {"fraction": 1.0, "weights": {"web": 1.0}}}
    switch = {"bulk": {"fraction": 0.5, "weights": {"web": 1.0}},
              long_name: {"fraction": 0.5, "weights": {"web": 1.0}, "seq_len": long_seq,
                          "min_doc_tokens": {"web": min_doc}}}
    return [{"label": f"4K -> {long_seq // 1024}K", "phases": switch, "checkpoint": None},
            {"label": "4K bulk", "phases": bulk, "checkpoint": None},
            {"label": f"4K -> {long_seq // 1024}K, full checkpointing", "phases": switch, "checkpoint": "full"}]


def prepare(args) -> None:
    """The preset as `-S scale=h100_64x_8b_32k` composes it, cut to what one GPU holds."""
    from tokenmill.search import compose_params

    p = compose_params(ROOT, [f"scale={args.scale}"])
    long_name, long_phase = max(p["mixture"]["phases"].items(), key=lambda kv: kv[1].get("seq_len") or 0)
    long_seq, min_doc = long_phase["seq_len"], max(long_phase["min_doc_tokens"].values())
    with tempfile.TemporaryDirectory() as tmp:
        run, vocab = timed_run(args.scale, args.steps, Path(tmp), checkpoint_interval=10**6)
    t = run["train"]
    per_micro = t["micro_batch"] * t["seq_len"]  # the preset's micro-batch tokens, kept
    run["model"]["n_layers"] = args.layers
    t["global_batch"] = args.micro_batches * t["micro_batch"]  # one GPU: micro_batches micro-batches a step
    t["parallel"] = {**t["parallel"], "dp_replicate": 1, "dp_shard": 1, "tp": 1}
    t["launch"] = {**t["launch"], "nnodes": 1, "nproc_per_node": 1, "max_restarts": 0}
    # The run's last checkpoint is the whole state (16 bytes a parameter): the one the decay start adds is not
    # what is measured, and would double the disk and time a few steps cost.
    t["checkpoint"] = {**t["checkpoint"], "keep_decay_start": False}
    Path(args.out).write_text(json.dumps({
        "scale": args.scale, "steps": args.steps, "vocab_size": vocab, "run": run, "long_seq": long_seq,
        "min_doc_tokens": min_doc, "micro_batch_tokens": per_micro,
        "preset": {"model": p["model"], "train": p["train"], "vocab_size": p["tokenizer"]["vocab_size"]},
        "variants": variants(long_name, long_seq, min_doc)}, indent=1))
    print(f"wrote {args.out}: {args.layers} of {p['model']['n_layers']} blocks, {args.steps} steps of "
          f"{t['global_batch'] * t['seq_len']:,} tokens, micro-batch {per_micro:,} tokens, long phase {long_seq:,}")


def node(args) -> None:
    """On the GPU node: each variant's torchrun, its summary and the phase of each step."""
    import pyarrow.parquet as pq

    saved = json.loads(Path(args.config).read_text())
    record = {**saved, "versions": gpu_versions(), "date": time.strftime("%Y-%m-%d"), "runs": {}}
    for v in saved["variants"]:
        cfg = copy.deepcopy(saved["run"])
        if v["checkpoint"]:
            cfg["train"]["parallel"]["activation_checkpoint"] = v["checkpoint"]
        t = cfg["train"]
        tokens = saved["steps"] * t["seq_len"] * t["global_batch"] + 1
        with tempfile.TemporaryDirectory(prefix="bench-long-gpu-") as tmp:
            tmp = Path(tmp)
            (tmp / "run.json").write_text(json.dumps(cfg))
            # twice the plan's tokens: the long phase places only documents of min_doc_tokens or more
            corpus = synthetic_corpus(tmp / "corpus", saved["vocab_size"], 2 * tokens, phases=v["phases"],
                                      plan_tokens=tokens, train=t)
            summary = leg(1, tmp / "run.json", corpus, tmp / "out", stop_after=None)
            if (tmp / "out" / "steps.parquet").exists():
                summary["phases"] = pq.read_table(tmp / "out" / "steps.parquet", columns=["phase"]).column(
                    "phase").to_pylist()
        summary["train"] = t
        record["runs"][v["label"]] = summary
        print(v["label"], json.dumps(summary.get("timing") or summary.get("error")), flush=True)
        Path(args.out).write_text(json.dumps(record, indent=1))  # what ran so far, if a later run fails


def render(records: list[dict], same_code_record: dict | None = None) -> str:
    """The RESULTS section from the node's records (one per depth); same_code_record: the rerun with the health
    probe's update ratio computed in place, whose peak the section quotes."""
    from tokenmill.memory import GiB, step_memory
    from tokenmill.train.config import TrainConfig, model_size, parse_model

    first = records[0]
    v, preset, long_seq = first["versions"], first["preset"], first["long_seq"]
    lines = [TITLE, "",
             f"Machine: one {v.get('gpu')} (driver {v.get('driver')}), torch {v['torch']} (CUDA {v.get('cuda')}), "
             f"{first.get('date', '')}. Commands: `python benchmarks/bench_long_context_gpu.py prepare gpu-run/long.json "
             "--layers N` here, `python3 benchmarks/bench_long_context_gpu.py node gpu-run/long.json $OUT/long.json` on "
             "the node, `render ... --same-code-record ...` here; the records: benchmarks/gpu/h200-2026-11-29/.", "",
             f"The run: scale={first['scale']}'s model (the 8B block, vocabulary {first['vocab_size']:,}) with N of its "
             f"{preset['model']['n_layers']} blocks on one GPU (TP 1, unsharded), at the preset's micro-batch of "
             f"{first['micro_batch_tokens']:,} tokens, {first['steps']} steps of "
             f"{first['run']['train']['global_batch'] * first['run']['train']['seq_len']:,} tokens (two micro-batches), "
             "selective activation checkpointing unless named, compile, bf16, SDPA's flash kernel; synthetic tokens. "
             "Measured: `timing.peak_memory_bytes` (torch.cuda.max_memory_allocated over the run). tokens/s: the steps "
             "after the first, the recompilation at the switch to 32K included. Counted: "
             "`tokenmill.memory.step_memory` for the same run (world 1) at its longest length.", "",
             "| blocks | run | phases (steps) | parameters | peak measured GiB | counted GiB | counted / measured | "
             "state | gathered | activations | recompute | logits | tokens/s | first step s |",
             "| ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    seen: dict[str, dict[int, tuple[int, int]]] = {}  # run -> {blocks: (measured, counted)}
    ratios = []  # counted / measured
    for record in records:
        model, vocab = parse_model(record["run"]["model"]), record["vocab_size"]
        params = model_size(model, vocab)["params"]
        for label, s in record["runs"].items():
            if "error" in s:
                lines.append(f"| {model.n_layers} | {label} | failed: {s['error'][-200:]} |" + " |" * 11)
                continue
            train = TrainConfig.model_validate(s["train"])
            longest = long_seq if len(set(s.get("phases", []))) > 1 else train.seq_len
            count = step_memory(model, train, vocab, world=1, seq_len=longest)
            tm = s["timing"]
            peak = tm["peak_memory_bytes"]
            step_terms = sum(count[k] for k in ("state", "gathered", "activations", "recompute", "logits"))
            seen.setdefault(label, {})[model.n_layers] = (peak, step_terms, count["reduction"])
            ratios.append(count["total"] / peak)
            steps = {p: s["phases"].count(p) for p in dict.fromkeys(s.get("phases", []))}
            lines.append(
                f"| {model.n_layers} | {label} | {', '.join(f'{p} ({n})' for p, n in steps.items())} | {params:,} | "
                f"{peak / GiB:.2f} | {count['total'] / GiB:.2f} | {count['total'] / peak:.2f} | "
                + " | ".join(f"{count[k] / GiB:.2f}" for k in ("state", "gathered", "activations", "recompute", "logits"))
                + f" | {tm['tokens_per_second']:,.0f} | {tm['first_step_seconds']:.1f} |")
    growth = [(label, sorted(d)) for label, d in seen.items() if len(d) > 1]
    if growth:
        lines += ["", "Per block (the growth from the shallower to the deeper run, divided by the blocks added), against "
                  "the count's step terms and its `reduction` term:", "",
                  "| run | measured GiB a block | counted, step | counted, reduction |", "| --- | ---: | ---: | ---: |"]
        for label, depths in growth:
            (m0, c0, r0), (m1, c1, r1) = seen[label][depths[0]], seen[label][depths[-1]]
            k = depths[-1] - depths[0]
            lines.append(f"| {label} | {(m1 - m0) / k / GiB:.2f} | {(c1 - c0) / k / GiB:.2f} | {(r1 - r0) / k / GiB:.2f} |")
    ptrain = TrainConfig.model_validate(preset["train"])
    world = ptrain.launch.nnodes * ptrain.launch.nproc_per_node
    full = step_memory(parse_model(preset["model"]), ptrain, preset["vocab_size"], world, seq_len=long_seq)
    spread = f"{min(ratios):.2f}-{max(ratios):.2f} times it" if ratios else "no run finished"
    lines += ["", f"The count stayed above every peak measured here ({spread}). The preset itself "
              f"({preset['model']['n_layers']} blocks, TP {ptrain.parallel.tp}, sharded over {ptrain.parallel.dp_shard} x "
              f"{ptrain.parallel.tp} of its {world} GPUs) counts {full['total'] / GiB:.1f} GiB a GPU at "
              f"{long_seq // 1024}K with selective checkpointing, {79.6 - full['total'] / GiB:.1f} GiB under an H100's "
              "79.6 GiB. The count applies its reduction term to unsharded layouts only: sharded, FSDP reduce-scatters "
              "each block's gradients every micro-batch and frees them. Not "
              "measured here, since one GPU cannot: TP 2's sequence-parallel buffers and collectives, and FSDP's "
              "all-gathers across 8 shards."]
    full_runs = [(r["run"]["model"]["n_layers"], s["timing"]["peak_memory_bytes"],
                  model_size(parse_model(r["run"]["model"]), r["vocab_size"])["params"])
                 for r in records for s in r["runs"].values()
                 if "error" not in s and s["train"]["parallel"]["activation_checkpoint"] == "full"]
    if full_runs:
        lines += ["", "With full checkpointing the peak is not the activations': it was "
                  + " and ".join(f"{peak / n:.2f} bytes a parameter at {b} blocks" for b, peak, n in full_runs)
                  + ", in runs that trained at 4K and then 32K: the state (16), every parameter gathered in bf16 (2: unsharded, FSDP keeps "
                  "them) and each gradient twice more (2 in bf16, 4 in float32 for the reduction): the count's "
                  "`reduction` term (tokenmill.memory)."]
    if same_code_record is not None:
        peak = next(iter(same_code_record["runs"].values()))["timing"]["peak_memory_bytes"]
        lines += ["", "A third call ran the 8-block full-checkpointing run again with the health probe's update ratio "
                  "computed in place (no list of deltas beside the parameters' snapshot; the change was not kept): its "
                  f"peak was {peak:,} bytes, the same to the byte, so the probe is not what sets it (record: "
                  "full8-update-ratio-in-place.json)."]
    recompiles = sorted({line.split(" - ", 1)[1].strip() for r in records for s in r["runs"].values()
                         for line in s.get("compile_log", []) if " - " in line})
    breaks = sum("graph break" in line.lower() for r in records for s in r["runs"].values()
                 for line in s.get("compile_log", []))
    lines += ["", f"torch.compile (TORCH_LOGS=graph_breaks,recompiles): {breaks} graph breaks; recompiled at the switch "
              "to the long phase only, for: " + "; ".join(f"`{x}`" for x in recompiles) + "." if recompiles else
              "no recompilation logged."]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("out")
    p.add_argument("--scale", default=SCALE)
    p.add_argument("--layers", type=int, default=6, help="blocks of the preset's model (what one GPU holds)")
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--micro-batches", type=int, default=2, help="micro-batches a step")
    n = sub.add_parser("node")
    n.add_argument("config")
    n.add_argument("out")
    r = sub.add_parser("render")
    r.add_argument("records", nargs="+")
    r.add_argument("--same-code-record", type=Path, help="the rerun with the update ratio computed in place")
    r.add_argument("--write", action="store_true")
    args = ap.parse_args()
    if args.cmd == "prepare":
        prepare(args)
    elif args.cmd == "node":
        node(args)
    else:
        extra = json.loads(args.same_code_record.read_text()) if args.same_code_record else None
        text = render([json.loads(Path(f).read_text()) for f in args.records], extra)
        print(text)
        if args.write:
            write_section(ROOT / "benchmarks" / "RESULTS.md", TITLE, text)


if __name__ == "__main__":
    main()
