"""A scale preset on its own hardware: tokens/s, MFU under both FLOP conventions, peak memory, and a resume
from a checkpoint; on synthetic tokens, since throughput does not depend on what the tokens say and a GPU node
has neither ../shared nor the pipeline's outputs.

    python benchmarks/bench_train_gpu.py --scale h100_1x --steps 100 [--write]
    python benchmarks/bench_train_gpu.py --scale cpu_demo --steps 6     # the same path on 2 CPU ranks

Composing needs DVC's Hydra integration, which a GPU node may lack: compose where the project is installed
(`--scale h100_1x --steps 100 --save-config h100_1x.json` writes the run and stops), then on the node
`--config h100_1x.json`. There the training code needs only pydantic besides torch, numpy, pyarrow and PyYAML.

The run is what `-S scale=<name>` composes (Hydra: model and train sections), capped at --steps, with no
held-out evaluation and a checkpoint half way. Leg 1 trains to half way and leaves with that checkpoint
(`--stop-after`, as a job at its time limit); leg 2 is a new torchrun that resumes from it and finishes. The
figures are each leg's own (tokens/s leaves out the leg's first step, where torch.compile works); leg 2 is the
warm one. The corpus: documents of 512 to 8,192 uniformly random token ids in the tokenize stage's layout,
planned by tokenmill.mixture.build_plan as one bucket.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from benchlib import machine, timed_run, write_section  # noqa: E402


def synthetic_corpus(root: Path, vocab: int, tokens: int, seed: int = 0, phases: dict | None = None,
                     plan_tokens: int | None = None, train: dict | None = None) -> Path:
    """root/tokenize and root/mixture as the tokenize and mixture stages lay them out, holding `tokens` tokens.
    phases: the mixture's phases over the one bucket "web" (default one bulk phase), planned for plan_tokens
    (default all of them); each phase's sequence length goes into the plan's manifest as the mixture stage
    writes it, from the run's train section (seq_len, global_batch).

    Documents of 512 to 8,192 tokens written from 4,096 "words" (1-4 random token ids each) drawn with Zipf
    frequencies, so the loss falls as on text (uniform random ids would sit at log(vocab) and a resumed run
    could not be told from a broken one); throughput does not depend on what the ids are."""
    from tokenmill import schema
    from tokenmill.mixture import build_plan, parse_phases, phase_seq_len
    from tokenmill.mixture.params import Mixture
    from tokenmill.tokenize import INDEX

    rng = np.random.default_rng(seed)
    lengths = []
    while sum(lengths) < tokens:
        lengths.append(int(rng.integers(512, 8193)))
    eos, dtype = 2, np.uint16 if vocab <= 2**16 else np.uint32
    words = [rng.integers(3, vocab, size=int(rng.integers(1, 5))) for _ in range(4096)]
    freq = 1.0 / np.arange(1, len(words) + 1)
    picks = rng.choice(len(words), size=sum(lengths) // 2 + 1024, p=freq / freq.sum())
    text = np.concatenate([words[i] for i in picks]).astype(dtype)
    while len(text) < sum(lengths):
        text = np.concatenate([text, text])
    pieces, at = [], 0
    for n in lengths:  # each document + its end-of-text, as the tokenize stage writes them
        pieces += [text[at:at + n], np.array([eos], dtype=dtype)]
        at += n
    flat = np.concatenate(pieces)
    ends = np.cumsum(np.array(lengths) + 1) - 1
    out = root / "tokenize"
    rel = "tokens/web/00000.bin"
    (out / rel).parent.mkdir(parents=True, exist_ok=True)
    flat.tofile(out / rel)
    offsets = np.concatenate([[0], ends[:-1] + 1])
    rows = [{"doc_id": f"synthetic-{i:07d}", "source": "synthetic", "bucket": "web", "shard": rel,
             "offset": int(o), "length": int(n)} for i, (o, n) in enumerate(zip(offsets, lengths))]
    schema.write_parquet(rows, INDEX, out / "index" / "00000.parquet")
    (out / "manifest.json").write_text(json.dumps({"stage": "tokenize", "vocab_size": vocab, "eos_id": eos,
                                                   "dtype": np.dtype(dtype).name}))
    mixture = Mixture.resolve({"name": "bench", "phases": phases or {"bulk": {"fraction": 1.0, "weights": {"web": 1.0}}}})
    phases = parse_phases(mixture.phases)
    plan = build_plan(pa.Table.from_pylist(rows, schema=INDEX), phases, plan_tokens or tokens, seed, max_epochs=1.0)
    schema.write_parquet(plan["plan"], plan["plan"].schema, root / "mixture" / "plan.parquet")
    if any(ph.seq_len for ph in phases):  # as the mixture stage records them
        lengths = phase_seq_len(phases, train["seq_len"], train["seq_len"] * train["global_batch"])
        (root / "mixture" / "manifest.json").write_text(json.dumps({"phase_seq_len": lengths}))
    held = pa.Table.from_pylist([], schema=pa.schema([(n, INDEX.field(n).type) for n in
                                                      ("doc_id", "bucket", "shard", "offset", "length")]))
    schema.write_parquet(held, held.schema, root / "mixture" / "heldout.parquet")
    return root


def leg(nproc: int, config: Path, corpus: Path, out: Path, stop_after: int | None, env: dict | None = None,
        src: Path = ROOT / "src") -> dict:
    """One torchrun of tokenmill.train; rank 0's printed summary, its wall time and its loss per step."""
    import pyarrow.parquet as pq

    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
           "-m", "tokenmill.train", "--config", str(config), "--data-root", str(corpus), "--out", str(out)]
    if stop_after:
        cmd += ["--stop-after", str(stop_after)]
    # PYTHONPATH is prepended to, not replaced: wheels installed beside the node's torch (pydantic) stay visible.
    # TORCH_LOGS: graph breaks and recompilations cost throughput silently; their lines go into the record.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(src), os.environ.get("PYTHONPATH")])),
           "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
           "TORCH_LOGS": os.environ.get("TORCH_LOGS", "graph_breaks,recompiles"), **(env or {})}
    started = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    if proc.returncode != 0:
        # torchrun's own report comes last; the worker's exception is the last line naming an Error.
        cause = [line for line in proc.stderr.splitlines() if "Error" in line and not line.startswith(" ")]
        return {"error": f"exit {proc.returncode}: {cause[-1] if cause else proc.stderr[-2000:]}",
                "stderr": proc.stderr[-6000:], "wall_seconds": time.perf_counter() - started}
    summary = json.loads(proc.stdout[proc.stdout.index("{"):])
    summary["wall_seconds"] = time.perf_counter() - started
    summary["compile_log"] = [line for line in proc.stderr.splitlines()
                              if "graph break" in line.lower() or "recompil" in line.lower()][:50]
    steps = out / "steps.parquet"
    if steps.exists():
        summary["losses"] = pq.read_table(steps, columns=["loss"]).column("loss").to_pylist()
    return summary


def reference(script: Path, name: str) -> dict:
    """The plain reference (../shared/gpu/mfu_reference.py) on one of its configurations, in its own process."""
    proc = subprocess.run([sys.executable, str(script), "one", name], capture_output=True, text=True,
                          env={**os.environ, "MASTER_PORT": "29611"}, timeout=400)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    return json.loads(lines[-1]) if lines else {"config": name, "error": (proc.stderr or proc.stdout)[-3000:]}


def gpu_versions() -> dict:
    import torch

    out = {"torch": torch.__version__, "cuda": torch.version.cuda}
    if torch.cuda.is_available():
        out["gpu"] = torch.cuda.get_device_name(0)
        smi = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True)
        out["driver"] = smi.stdout.strip() or None
    return out


def apply_sets(cfg: dict, sets: list[str]) -> None:
    """--set model.document_mask=true: a dotted key of the run (model or train section), a YAML value."""
    import yaml

    for item in sets:
        key, _, value = item.partition("=")
        *path, last = key.split(".")
        node = cfg
        for part in path:
            node = node[part]
        if last not in node:
            sys.exit(f"bench_train_gpu: --set {key}: no such key in the run")
        node[last] = yaml.safe_load(value)


def loss_gap(a: list[float], b: list[float]) -> dict:
    """How far two runs' losses are apart, step by step."""
    diffs = [abs(x - y) for x, y in zip(a, b)]
    return {"max_abs_loss_diff": max(diffs), "mean_abs_loss_diff": sum(diffs) / len(diffs)}


def run_bench(args, cfg: dict, vocab: int) -> dict:
    t = cfg["train"]
    nproc = t["launch"]["nproc_per_node"]
    result = {"label": args.label or args.scale + (f"/{args.scout}" if args.scout else ""), "scale": args.scale,
              "scout": args.scout, "steps": args.steps, "sets": args.set, "run": cfg, "vocab_size": vocab,
              "versions": gpu_versions(), "date": time.strftime("%Y-%m-%d"),
              "command": "python benchmarks/bench_train_gpu.py " + " ".join(sys.argv[1:])}
    if args.reference:
        result["reference"] = reference(args.reference, args.reference_config)
        print(json.dumps(result["reference"]), flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-train-gpu-") as tmp:
        tmp = Path(tmp)
        (tmp / "run.json").write_text(json.dumps(cfg))
        corpus = synthetic_corpus(tmp / "corpus", vocab, args.steps * t["seq_len"] * t["global_batch"] + 1)
        profile = {"TOKENMILL_PROFILE": f"{tmp / 'profile'}:2:{args.profile}"} if args.profile else {}
        legs = {}
        if args.resume:
            half = max(1, args.steps // 2)
            legs["leg1"] = leg(nproc, tmp / "run.json", corpus, tmp / "out", stop_after=half, src=args.src)
            legs["leg2"] = leg(nproc, tmp / "run.json", corpus, tmp / "out", stop_after=None, env=profile, src=args.src)
            legs["continuous"] = leg(nproc, tmp / "run.json", corpus, tmp / "straight", stop_after=None, src=args.src)
            if all("losses" in legs[k] for k in ("leg2", "continuous")):
                a, b = legs["leg2"]["losses"], legs["continuous"]["losses"]
                result["resume"] = {"half": half, **loss_gap(a[half:], b[half:]), "first_loss": b[0],
                                    "last_loss": b[-1]}
        else:
            legs["run"] = leg(nproc, tmp / "run.json", corpus, tmp / "out", stop_after=None, env=profile, src=args.src)
            if args.repeat:  # the same run again: how far two runs apart the GPU's non-determinism puts the loss
                legs["again"] = leg(nproc, tmp / "run.json", corpus, tmp / "again", stop_after=None, src=args.src)
                if all("losses" in legs[k] for k in ("run", "again")):
                    result["repeat"] = loss_gap(legs["run"]["losses"], legs["again"]["losses"])
        for name, summary in legs.items():
            print(name, json.dumps(summary.get("timing") or summary.get("error")), flush=True)
        result["legs"] = legs
        if args.profile and (tmp / "profile" / "summary.json").exists():
            result["profile"] = json.loads((tmp / "profile" / "summary.json").read_text())
            result["profile_table"] = (tmp / "profile" / "table.txt").read_text()
    return result


def _num(x: float | None) -> str:
    return f"{x:.1f}" if x is not None else "–"  # an earlier commit's sources (--src) may not report it


def _pct(x: float | None) -> str:
    return f"{100 * x:.1f}%" if x is not None else "–"


def render(results: list[dict]) -> str:
    """The RESULTS section from the runs' JSON records (written on the GPU node, rendered here)."""
    from tokenmill.train.config import model_size

    first = results[0]
    v = first["versions"]
    lines = [f"## Training throughput on GPU: scale={first['scale']}", "",
             f"Machine: one {v.get('gpu')} (driver {v.get('driver')}), torch {v['torch']} (CUDA {v.get('cuda')}), "
             f"{first['date']}. Synthetic Zipf-word tokens (bench_train_gpu.synthetic_corpus); tokens/s leave out each "
             "leg's first step (compile), which has its own column; MFU against 989 TFLOP/s (H100 SXM dense bf16), "
             "FLOPs per token 6 x matmul parameters + 12 x layers x d x seq (torchtitan's convention, "
             "the reference's `mfu`), and with the attention term halved (causal).", ""]
    lines += ["| run | params | seq x micro x global | tokens/s | MFU | MFU (causal) | vs reference | "
              "peak GiB | first step s | checkpoint save s |", "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    commands, notes = [], []
    for r in results:
        t, m = r["run"]["train"], r["run"]["model"]
        size = model_size(m, r["vocab_size"], t["seq_len"])
        ref = r.get("reference")
        ref_tps = ref.get("tokens_per_s") if ref else None
        if ref and "error" not in ref:
            commands.append(f"- reference: `python3 ../shared/gpu/mfu_reference.py one {ref['config']}` (run by the next)")
            lines.append(f"| reference `{ref['config']}` | {ref['params']:,} | {ref['seq']} x {ref['micro_batch']} x {ref['micro_batch']} | "
                         f"{ref['tokens_per_s']:,} | {100 * ref['mfu']:.1f}% | {100 * ref['mfu_causal_half']:.1f}% | 1.00 | "
                         f"{ref['peak_mem_gb']:.1f} | {ref['warmup_s'] / 3:.1f} (3 steps: {ref['warmup_s']}) | – |")
        elif ref:
            lines.append(f"| reference `{ref['config']}` | failed: {ref['error'][-200:]!r} | | | | | | | | |")
        commands.append(f"- {r['label']}: `{r['command'].split(' --json')[0]}`")
        for name, s in r["legs"].items():
            if "error" in s:
                lines.append(f"| {r['label']} {name} | failed: {s['error'][-200:]} | | | | | | | | |")
                continue
            tm = s["timing"]
            tps = tm["tokens_per_second"]
            ratio = f"{tps / ref_tps:.2f}" if ref_tps else "–"
            if s.get("compile_log"):
                notes.append(f"{r['label']} {name}: {len(s['compile_log'])} graph-break/recompile log lines, first: "
                             f"`{s['compile_log'][0][:160]}`")
            lines.append(
                f"| {r['label']} {name} | {size['params']:,} | {t['seq_len']} x {t.get('micro_batch')} x "
                f"{t['global_batch']} | {tps:,.0f} | {_pct(tm['mfu'])} | {_pct(tm['mfu_causal'])} | {ratio} | "
                f"{tm['peak_memory_bytes'] / 2**30:.1f} | {_num(tm.get('first_step_seconds'))} | "
                f"{', '.join(f'{x:.1f}' for x in tm.get('checkpoint_save_seconds', [])) or '–'} |")
    lines += ["", "Commands (on the GPU node, from a run composed here with `--save-config`):", ""] + commands
    lines += ["", "torch.compile (TORCH_LOGS=graph_breaks,recompiles): " + ("; ".join(notes) if notes else
              "no graph break or recompilation logged" if any("compile_log" in s for r in results
                                                              for s in r["legs"].values()) else "not captured")]
    for r in results:
        if r.get("resume"):
            rs, l2 = r["resume"], r["legs"]["leg2"]["timing"]
            lines += ["", f"Resume ({r['label']}): leg 1 stopped after step {rs['half']} with a checkpoint, leg 2 (a new "
                      f"torchrun) loaded it in {_num(l2.get('checkpoint_load_seconds'))} s and finished; against the same run "
                      f"without a stop, the loss per step after the resume differed by at most {rs['max_abs_loss_diff']:.2e} "
                      f"(mean {rs['mean_abs_loss_diff']:.2e}) while the loss fell from {rs['first_loss']:.3f} to "
                      f"{rs['last_loss']:.3f} (flash attention's backward is not deterministic: not bit-exact)."]
        if r.get("repeat"):
            rp = r["repeat"]
            lines += ["", f"Repeat ({r['label']}): the same run twice from the same seed and data, loss per step apart "
                      f"by at most {rp['max_abs_loss_diff']:.2e} (mean {rp['mean_abs_loss_diff']:.2e}): the GPU's "
                      "non-determinism alone."]
        if r.get("profile"):
            p = r["profile"]
            busy = (f"GPU busy {p['gpu_busy_seconds']:.2f} s, host gap {100 * p['host_gap_fraction']:.1f}% of the wall "
                    "time" if p.get("gpu_busy_seconds") is not None else
                    f"kernel time {p['kernel_seconds']:.2f} s (not merged for overlaps; {p['corrected']})")
            lines += ["", f"Profile ({r['label']}, {p['steps']} steps after the first of leg 2, torch.profiler via "
                      f"TOKENMILL_PROFILE): wall {p['wall_seconds']:.2f} s, {busy}. Top kernels by GPU time:", "",
                      "| kernel | calls | share |", "| --- | ---: | ---: |"]
            lines += [f"| `{k['name'][:90]}` | {k['calls']} | {100 * k['share']:.1f}% |" for k in p["top"][:12]]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scale", default="h100_1x")
    ap.add_argument("--scout", help="a rung of the scale's scout ladder (s1, s2, ...) instead of the full run")
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--config", type=Path, help="a run saved by --save-config, instead of composing --scale")
    ap.add_argument("--save-config", type=Path, help="compose --scale for --steps, write the run here and stop")
    ap.add_argument("--set", action="append", default=[], help="KEY=VALUE on the run, e.g. model.document_mask=true")
    ap.add_argument("--label")
    ap.add_argument("--src", type=Path, default=ROOT / "src", help="the tokenmill sources to run (an earlier commit's)")
    ap.add_argument("--repeat", action="store_true", help="run twice and compare the losses step by step")
    ap.add_argument("--resume", action="store_true", help="leg 1 to half way, leg 2 resumed, and the run without a stop")
    ap.add_argument("--profile", type=int, default=0, help="torch.profiler over this many steps of the (last) leg")
    ap.add_argument("--reference", type=Path, help="mfu_reference.py, run first on the same GPU")
    ap.add_argument("--reference-config", default="llama1b_compile_b8")
    ap.add_argument("--json", type=Path, help="write the record here")
    ap.add_argument("--from-json", type=Path, nargs="+", help="render records written on the GPU node")
    ap.add_argument("--write", action="store_true", help="replace this scale's GPU section in RESULTS.md")
    args = ap.parse_args()
    if args.from_json:
        results = [json.loads(p.read_text()) for p in args.from_json]
    else:
        if args.config:
            saved = json.loads(args.config.read_text())
            cfg, vocab, args.scale, args.scout = saved["run"], saved["vocab_size"], saved["scale"], saved.get("scout")
            args.steps = saved["steps"]
        else:
            with tempfile.TemporaryDirectory() as tmp:
                cfg, vocab = timed_run(args.scale, args.steps, Path(tmp), checkpoint_interval=10**6, scout=args.scout)
        if args.save_config:
            args.save_config.write_text(json.dumps({"scale": args.scale, "scout": args.scout, "steps": args.steps,
                                                    "vocab_size": vocab, "run": cfg}, indent=1))
            return
        apply_sets(cfg, args.set)
        results = [run_bench(args, cfg, vocab)]
        if args.json:
            args.json.write_text(json.dumps(results[0], indent=1))
    text = render(results)
    print(text)
    if args.write:
        write_section(ROOT / "benchmarks" / "RESULTS.md", f"## Training throughput on GPU: scale={results[0]['scale']}", text)


if __name__ == "__main__":
    main()
