"""The pipeline's own training stage on a lent GPU, from the plan built here: issue 47 in one device call.

    python benchmarks/gpu_stage_session.py prepare            # here: data stages of a GPU preset, wheels
    python benchmarks/gpu_stage_session.py node OUT_DIR       # on the GPU node, from the repository root
    python benchmarks/gpu_stage_session.py verify OUT_DIR     # here again: audit the GPU runs' steps

`prepare` composes params.yaml for `-S scale=h100_1x` (the 0.86B preset and its h100 scout ladder) with a short
run (train.max_steps, two warm-up steps so the loss moves), runs the data stages up to `mixture` and `evalset` with
`dvc repro` in a git worktree of HEAD, and copies what the training stages read into gpu-run/work/ (params.yaml,
data/{tokenize,mixture,evalset,tokenizer}, the first items of each benchmark file and the contamination table),
with the wheels the node lacks in gpu-run/wheels/ (the device tool carries gpu-run/, git-ignored).

`node` runs there, in gpu-run/work/, each step timed and its record written to OUT_DIR/records.json as soon as it
ends (a call cut by its time limit keeps what finished), in the order of the issue's priorities:
  1. the stages' own commands: `python stages/train.py scout/s1 mixture tokenize evalset`, then `pretrain`, then
     `python stages/export.py pretrain tokenizer`; the exported checkpoint's logits (transformers) against the
     trainer's model on a window of the plan, float32;
  2. lm-eval (tokenmill.evaluate.run.run_evaluation, the evaluate stage's function) on the export, on the GPU,
     on the in-loop items (evaluate.inloop_items of each benchmark), float32 and bfloat16: items per second, and
     every metric against the in-loop scores of the trained model;
  3.-4. the same run (the pretrain stage's run_config.json) through the training entry point with one change
     each: model.document_mask (FlexAttention), train.parallel.float8 tensorwise, rowwise: tokens/s, MFU, first
     step (compilation), peak memory and the loss per step beside the stage's bf16 run.
The runs' tables (steps, held-out, benchmarks, summary, run records; no weights) come back in OUT_DIR/runs.tar.gz.

`verify` unpacks them into the worktree's data/train and runs the lineage's own check of every training step
against the plan (tokenmill.lineage.verify_training, what `tokenmill audit verify` runs) on the GPU runs.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUN_DIR = ROOT / "gpu-run"
WORK = Path(os.environ.get("TOKENMILL_GPU_WORK", RUN_DIR / "work"))  # another: a CPU rehearsal of `node`
WORKTREE = Path("/tmp/tokenmill-gpu-worktree")
STEPS = 10  # a short full run: 10 steps of 64 x 4,096 tokens (the plan of the embedded corpus holds 16)
COMPOSE = ["scale=h100_1x", f"train.max_steps={STEPS}", "train.schedule.warmup_steps=2"]
BENCH_ITEMS = 100  # lines kept of each benchmark file: the in-loop items are the first evaluate.inloop_items
# What the stages import beyond the node's image (torch 2.11, numpy, pyarrow, PyYAML, transformers, ...):
# pydantic and zstandard (training), DVC with DVCLive (the stage logs through it), lm-eval with datasets
# (evaluation), torchao (float8). Resolved for Python 3.12 against constraints.txt, then the packages the
# image already has are left out (its list: the device tool's KINDS.md).
WANTED = ["dvclive==3.49.1", "lm_eval==0.4.13", "pydantic==2.14.3", "zstandard==0.25.0", "torchao==0.17.0"]
SDIST_ONLY = ["rouge_score==0.1.2", "sqlitedict==2.1.0", "word2number==1.1", "antlr4-python3-runtime==4.9.3"]
NOT_NEEDED = {"cryptography", "asyncssh", "cffi", "pycparser"}  # ssh remotes: never imported by these stages


def sh(cmd: list[str], cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    print("+", " ".join(map(str, cmd)), flush=True)
    return subprocess.run(list(map(str, cmd)), cwd=cwd, env=env, check=True)


# --- here -------------------------------------------------------------------------------------------------

def prepare() -> None:
    venv = ROOT / ".venv" / "bin"
    if not WORKTREE.exists():
        sh(["git", "worktree", "add", "--detach", WORKTREE, "HEAD"], ROOT)
    env = {**os.environ, "PATH": f"{venv}:{os.environ['PATH']}"}
    sh([venv / "python", "-m", "tokenmill.config", *COMPOSE], WORKTREE, env)
    sh([venv / "dvc", "repro", "mixture", "evalset"], WORKTREE, env)
    shutil.rmtree(WORK, ignore_errors=True)
    (WORK / "data").mkdir(parents=True)
    shutil.copy(WORKTREE / "params.yaml", WORK / "params.yaml")
    for stage in ("tokenize", "mixture", "evalset", "tokenizer"):
        shutil.copytree(WORKTREE / "data" / stage, WORK / "data" / stage)
    shutil.copytree(WORKTREE / "data" / "decontaminate" / "contamination", WORK / "data" / "contamination")
    (WORK / "data" / "benchmarks").mkdir()
    for f in sorted((WORKTREE / "data" / "benchmarks").glob("*.jsonl")):
        lines = f.read_text().splitlines(keepends=True)[:BENCH_ITEMS]
        (WORK / "data" / "benchmarks" / f.name).write_text("".join(lines))
    wheels(RUN_DIR / "wheels")
    print(subprocess.run(["du", "-sh", RUN_DIR], capture_output=True, text=True).stdout)


def wheels(dest: Path) -> None:
    """The wheels the node lacks, for its Python 3.12 (pip resolves the dependencies for that platform)."""
    all_dir = Path("/tmp/tokenmill-wheels-all")  # everything resolved; only what the node lacks travels
    all_dir.mkdir(parents=True, exist_ok=True)
    pip = [sys.executable, "-m", "pip"]
    for pkg in SDIST_ONLY:  # pure-Python packages published only as source: built into wheels here
        sh(pip + ["wheel", "-q", "--no-deps", "-w", all_dir, pkg], ROOT)
    constraints = RUN_DIR / "constraints-node.txt"
    constraints.write_text("".join(line for line in (ROOT / "constraints.txt").read_text().splitlines(True)
                                   if not line.startswith(("torch==", "nvidia", "triton"))))
    platforms = [f"--platform={p}_x86_64" for p in ("manylinux_2_28", "manylinux_2_27", "manylinux_2_24",
                                                   "manylinux_2_17", "manylinux2014", "manylinux1", "manylinux_2_5")]
    sh(pip + ["download", "-q", "--only-binary=:all:", "--find-links", all_dir, "--python-version=3.12",
              "--implementation=cp", *platforms, "-d", all_dir, "-c", constraints, *WANTED], ROOT)
    have = set(NODE_PACKAGES.split()) | NOT_NEEDED
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir()
    for whl in sorted(all_dir.glob("*.whl")):
        name = whl.name.split("-")[0].lower().replace("_", "-").replace(".", "-")
        if name not in have:
            shutil.copy(whl, dest / whl.name)


# The node image's packages (the device tool's KINDS.md, read 2026-11-17).
NODE_PACKAGES = """absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs botorch build
certifi charset-normalizer chex click cloudpickle cmake colorama contourpy coverage cycler cython einops filelock
fonttools frozenlist fsspec h11 h5py hf-xet httpcore httpx huggingface-hub humanize hypothesis idna iniconfig jinja2
joblib kiwisolver lxml markdown markdown-it-py markupsafe matplotlib mdurl mpmath msgpack multidict mypy-extensions
narwhals networkx ninja numpy nvidia-ml-py packaging pandas pathspec peft pillow pip pluggy portalocker propcache
protobuf psutil pyarrow pybind11 pygments pyparsing python-dateutil pyyaml regex requests rich sacrebleu safetensors
scikit-learn scipy sentencepiece setuptools shellingham simplejson six sortedcontainers sympy tabulate threadpoolctl
tiktoken tokenizers toolz torch tqdm transformers triton typer typing-extensions typing-inspect urllib3 wheel wrapt
xxhash yarl zipp"""


def verify(out: Path) -> None:
    """The GPU runs' steps against the plan built here: their tables into the worktree's data/train, the
    lineage stage's own command, then `tokenmill audit verify` (which recomputes each run's first, middle and
    last step's token hash from the plan and the shards)."""
    venv = ROOT / ".venv" / "bin"
    env = {**os.environ, "PATH": f"{venv}:{os.environ['PATH']}"}
    shutil.rmtree(WORKTREE / "data" / "train", ignore_errors=True)
    with tarfile.open(out / "runs.tar.gz") as tar:
        tar.extractall(WORKTREE, members=[m for m in tar.getmembers() if m.name.startswith("data/train/")],
                       filter="data")
    sh([venv / "python", "stages/lineage.py", "tokenize", "mixture"], WORKTREE, env)
    sh([venv / "tokenmill", "audit", "verify"], WORKTREE, env)


# --- on the node ------------------------------------------------------------------------------------------

class Records:
    """OUT/records.json, rewritten after every step so a cut call keeps what finished."""

    def __init__(self, out: Path):
        self.path, self.data = out / "records.json", {"started": time.strftime("%Y-%m-%d %H:%M:%S")}

    def add(self, name: str, value) -> None:
        self.data[name] = value
        self.path.write_text(json.dumps(self.data, indent=1, default=str))


def timed(records: Records, name: str, cmd: list[str], env: dict, log: Path) -> bool:
    started = time.perf_counter()
    with open(log, "a") as f:
        f.write(f"\n=== {name}: {' '.join(map(str, cmd))}\n")
        f.flush()
        proc = subprocess.run(list(map(str, cmd)), cwd=WORK, env=env, stdout=f, stderr=subprocess.STDOUT)
    records.add(name, {"command": " ".join(map(str, cmd)), "exit": proc.returncode,
                       "wall_seconds": round(time.perf_counter() - started, 1)})
    print(name, "exit", proc.returncode, f"{time.perf_counter() - started:.0f} s", flush=True)
    return proc.returncode == 0


def logits_check(records: Records) -> None:
    """The export (transformers, float32) against the trainer's model (model.py, float32, the run's final
    weights) on the plan's first window: 2,048 tokens of real text."""
    import numpy as np
    import torch
    from transformers import AutoModelForCausalLM

    from tokenmill.export.hf import load_final
    from tokenmill.train.config import parse_model
    from tokenmill.train.data import PlanStream
    from tokenmill.train.model import Transformer

    started = time.perf_counter()
    weights, meta = load_final(WORK / "data/train/pretrain")
    cfg = json.loads((WORK / "data/train/pretrain/run_config.json").read_text())
    stream = PlanStream(WORK / "data/tokenize", WORK / "data/mixture")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    tokens = torch.from_numpy(np.asarray(stream.read(0, 2048), dtype=np.int64))[None].to(device)
    net = Transformer(parse_model(cfg["model"]), meta["vocab_size"], 2048, meta["eos_id"])
    net.load_state_dict(weights, strict=False)
    with torch.no_grad():
        ours = net.to(device).eval()(tokens).float()
    del net
    hf = AutoModelForCausalLM.from_pretrained(str(WORK / "data/export/hf"), dtype=torch.float32).to(device).eval()
    with torch.no_grad():
        theirs = hf(tokens).logits.float()
    diff = (ours - theirs).abs()
    records.add("logits", {"tokens": tokens.shape[1], "max_abs_diff": diff.max().item(),
                           "mean_abs_diff": diff.mean().item(), "logits_std": ours.std().item(),
                           "argmax_agree": (ours.argmax(-1) == theirs.argmax(-1)).float().mean().item(),
                           "seconds": round(time.perf_counter() - started, 1)})


def lm_eval_check(records: Records, out: Path) -> None:
    import torch
    import yaml

    from tokenmill.evaluate.run import run_evaluation

    params = yaml.safe_load((WORK / "params.yaml").read_text())
    items = params["evaluate"]["inloop_items"]
    specs = [{**b, "path": str(WORK / b["path"])} for b in params["decontaminate"]["benchmarks"]
             if Path(WORK / b["path"]).exists()]
    contamination = sorted((WORK / "data/contamination").glob("*.parquet"))
    inloop = json.loads((WORK / "data/train/pretrain/summary.json").read_text())["benchmarks"]
    device = "cuda" if torch.cuda.is_available() else "cpu"
    for dtype in ("float32", "bfloat16"):
        started = time.perf_counter()
        result = run_evaluation(WORK / "data/export/hf", specs, None, contamination[0] if contamination else None,
                                out / f"eval-{dtype}", limit=items, batch_size=64, device=device, dtype=dtype)
        lm = result["results"]["benchmarks"]
        gaps = {}
        for name, scores in inloop.items():
            for metric, cols in scores.items():
                for col in ("all", "clean"):
                    a, b = cols.get(col), lm.get(name, {}).get("metrics", {}).get(metric, {}).get(col)
                    if a is not None and b is not None:
                        gaps[f"{name}.{metric}.{col}"] = abs(a - b)
        by_metric = {}
        for key, gap in gaps.items():
            metric = key.split(".")[1]
            by_metric[metric] = max(by_metric.get(metric, 0.0), gap)
        records.add(f"lm_eval_{dtype}", {"timing": result["timing"], "items": {n: v["items"] for n, v in lm.items()},
                                         "max_abs_gap_by_metric": by_metric, "gaps": gaps, "lm_eval": lm,
                                         "wall_seconds": round(time.perf_counter() - started, 1)})
        shutil.rmtree(out / f"eval-{dtype}", ignore_errors=True)
    records.add("inloop", inloop)


def node(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    records, log = Records(out), out / "log.txt"
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "TOKENMILL_DEBUG": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")])),
           "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "DVC_NO_ANALYTICS": "1",
           "TORCH_LOGS": "recompiles"}  # a recompilation costs throughput silently: its lines go into the logs
    sys.path.insert(0, str(ROOT / "src"))
    os.environ.update(env)
    import torch

    records.add("versions", {"torch": torch.__version__, "cuda": torch.version.cuda,
                             "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
                             "nvidia_smi": shutil.which("nvidia-smi") and subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                                                           "--format=csv,noheader"], capture_output=True,
                                                          text=True).stdout.strip()})
    py = sys.executable
    for run in ("scout/s1", "pretrain"):  # each one's exit status is in its record; the export needs pretrain's final/
        timed(records, run.replace("scout/", "scout@"), [py, ROOT / "stages/train.py", run, "mixture", "tokenize",
                                                         "evalset"], env, log)
    for run in ("scout@s1", "pretrain"):
        record = WORK / "runs" / f"{run}.json"
        if record.exists():
            records.add(f"{run}_record", json.loads(record.read_text()))
    pack(out)
    if (WORK / "data/train/pretrain/final").exists():
        if timed(records, "export", [py, ROOT / "stages/export.py", "pretrain", "tokenizer"], env, log):
            for check in (lambda: logits_check(records), lambda: lm_eval_check(records, out)):
                try:
                    check()
                except Exception as exc:  # recorded, and the variants still run
                    records.add(f"error_{len(records.data)}", f"{type(exc).__name__}: {exc}")
        shutil.rmtree(WORK / "data/export", ignore_errors=True)
    base = WORK / "data/train/pretrain/run_config.json"
    if base.exists():
        for name, change in (("document_mask", ("model", "document_mask", True)),
                             ("float8_tensorwise", ("train", "parallel", "float8", "tensorwise")),
                             ("float8_rowwise", ("train", "parallel", "float8", "rowwise"))):
            cfg = json.loads(base.read_text())
            node_ = cfg
            for part in change[:-2]:
                node_ = node_[part]
            node_[change[-2]] = change[-1]
            (WORK / f"{name}.json").write_text(json.dumps(cfg))
            run_out = WORK / "variants" / name
            timed(records, name, [py, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=1",
                                  "-m", "tokenmill.train", "--config", WORK / f"{name}.json", "--data-root", "data",
                                  "--out", run_out], env, log)
            if (run_out / "summary.json").exists():
                records.add(f"{name}_summary", summary_of(run_out, log))
            shutil.rmtree(run_out / "final", ignore_errors=True)
            shutil.rmtree(run_out / "checkpoints", ignore_errors=True)
            pack(out)
    records.add("finished", time.strftime("%Y-%m-%d %H:%M:%S"))


def summary_of(run_out: Path, log: Path) -> dict:
    """A variant's timing (rank 0 printed it after its summary, in the log) and its loss per step."""
    import pyarrow.parquet as pq

    text = log.read_text(errors="replace")
    start = text.rfind('\n{\n')
    printed = json.loads(text[start:text.index("\n}\n", start) + 2]) if start >= 0 else {}
    return {"timing": printed.get("timing"), "losses": pq.read_table(run_out / "steps.parquet").column("loss").to_pylist(),
            "recompile_lines": sum("Recompiling" in line for line in text[text.rfind("=== "):].splitlines())}


def pack(out: Path) -> None:
    """The runs' tables and records, no weights or checkpoints: OUT/runs.tar.gz."""
    with tarfile.open(out / "runs.tar.gz", "w:gz") as tar:
        for base in (WORK / "data/train", WORK / "variants", WORK / "runs", WORK / "metrics", WORK / "dvclive"):
            if base.exists():
                tar.add(base, arcname=str(base.relative_to(WORK)),
                        filter=lambda ti: None if any(p in ti.name.split("/") for p in ("checkpoints", "final"))
                        else ti)


if __name__ == "__main__":
    verb = sys.argv[1] if len(sys.argv) > 1 else ""
    if verb == "prepare":
        prepare()
    elif verb in ("node", "verify") and len(sys.argv) == 3:
        (node if verb == "node" else verify)(Path(sys.argv[2]).resolve())
    else:
        sys.exit(__doc__)
