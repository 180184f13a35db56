"""What benchmark scripts share: describing the machine, (re)writing a section of RESULTS.md, and a scale
preset composed into a timed training run."""

from __future__ import annotations

import os
import platform
import re
import resource
from importlib import metadata
from pathlib import Path


def machine(libraries: tuple[str, ...] | list[str]) -> dict:
    """nproc, CPU model, RAM, Python, OS and the versions of `libraries`."""
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor() or "unknown")
    mem_kb = next(int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines()
                  if line.startswith("MemTotal"))
    versions = {}
    for lib in libraries:
        try:
            versions[lib] = metadata.version(lib)
        except metadata.PackageNotFoundError:
            versions[lib] = "not installed"
    return {"nproc": len(os.sched_getaffinity(0)), "cpu": cpu, "ram_gib": mem_kb / 2**20,
            "python": platform.python_version(), "versions": versions, "os": platform.platform()}


def peak_rss_mb() -> float:
    """This process's own peak resident set (VmHWM), in MiB. Not ru_maxrss: Linux carries the parent's
    high-water mark across fork and exec into it, so a child started by a parent holding 2 GB reports at least
    2 GB before it has done anything."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # not Linux


def write_section(out: Path, title: str, text: str) -> None:
    """Replace the section headed `title` in `out` (or append it), atomically; other sections stay."""
    old = out.read_text(encoding="utf-8") if out.exists() else "# Benchmarks\n"
    pattern = re.compile(rf"^{re.escape(title)}\n.*?(?=^## |\Z)", re.MULTILINE | re.DOTALL)
    new = pattern.sub(lambda _: text + "\n", old) if pattern.search(old) else old.rstrip("\n") + "\n\n" + text
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    tmp.write_text(new.rstrip("\n") + "\n", encoding="utf-8")
    os.replace(tmp, out)


def timed_run(scale: str, steps: int, tmp: Path, checkpoint_interval: int, scout: str | None = None) -> tuple[dict, int]:
    """The model and train sections `-S scale=<scale>` composes (Hydra, as `dvc exp run` does), capped at
    `steps` steps with no held-out evaluation (the steps decide, not a token budget), and the scale's
    vocabulary size; with `scout`, that rung of the scale's ladder as the scout stage runs it. Composing needs
    DVC; a machine without it runs a run saved from here."""
    import yaml

    from tokenmill.config import compose

    compose([f"scale={scale}"], conf_dir=Path(__file__).resolve().parents[1] / "conf", output=tmp / "params.yaml")
    params = yaml.safe_load((tmp / "params.yaml").read_text())
    train = params["train"]
    if scout:
        from tokenmill.train.config import scout_run_config

        run = scout_run_config(params["scouts"][scout], train)
        params["model"], train = run["model"], run["train"]
    train.update(max_steps=steps, token_budget=None, tokens_per_param=10**6)
    train["checkpoint"] = {**train["checkpoint"], "interval": checkpoint_interval}
    train["logging"] = {**train["logging"], "eval_sequences": 0, "eval_interval": 10**9}
    return {"model": params["model"], "train": train}, params["tokenizer"]["vocab_size"]
