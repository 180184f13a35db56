"""The anneal stage: every annealing test of `anneals` (tokenmill.anneal), branched from the full run.

Output, data/anneal/ (persistent, as the training stages' are: a finished arm whose inputs did not change is
resumed at its last step, so a changed share retrains only the `with` arms):
    <name>/plans/<arm>/     the arm's plan (plan.parquet) and the held-out documents (the mixture's)
    <name>/<arm>/           the arm's run, as a training stage writes it (tokenmill.train.stage); seed k > 0 in
                            <name>/<arm>/replicas/seed<k>
    <name>/result.json      the test: source, buckets, share, where it branched, its cost, each arm's figures and
                            the verdict per figure (tokenmill.anneal.verdicts)
and metrics/anneal.json: per anneal, its cost and the verdicts on the held-out loss and the benchmarks' means.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from pathlib import Path
from typing import Mapping

import pyarrow.parquet as pq

from tokenmill import schema
from tokenmill.anneal import (ARMS, BRANCH, RESULT, AnnealError, arm_phases, arm_steps, branch, series, source_buckets,
                              verdicts)
from tokenmill.anneal.params import Anneal
from tokenmill.mixture import PLAN, build_plan, parse_phases
from tokenmill.mixture.params import Mixture
from tokenmill.mixture.stage import plan_inputs
from tokenmill.runtime import input_id, read_manifest, run_record, sha1_file, write_json
from tokenmill.train.config import model_size, parse_run
from tokenmill.train.data import PlanStream
from tokenmill.train.loop import plan_steps, run_schedule
from tokenmill.train.stage import run_train_stage


def anneal_digest(out_root: Path) -> str:
    """The anneals' content digest for the run record: each test's result and arm plans by their files' hashes,
    each arm (and seed replica) by its manifest's content digest (tokenmill.train.stage.content_digest), so that
    no checkpoint is read: DCP's metadata is not byte-stable, and an 8B arm's checkpoints hold about 100 GB."""
    h = hashlib.sha1()
    for test in sorted(d for d in out_root.iterdir() if d.is_dir()):
        for p in sorted(test.rglob("*")):
            rel = p.relative_to(out_root)
            if rel.parts[1] in ARMS:  # a training run: its manifest stands for it
                if p.name == "manifest.json":
                    h.update(f"{rel}\x00{json.loads(p.read_text())['digest']}\n".encode())
            elif p.is_file():
                h.update(f"{rel}\x00{sha1_file(p)}\n".encode())
    return h.hexdigest()


def branch_point(run_cfg: Mapping, tokens_dir: Path, plan_dir: Path) -> dict:
    """Where the full run's learning rate starts to decay (the checkpoint an anneal starts from), the plan's decay
    phase and the full run's steps."""
    cfg = parse_run(run_cfg)
    stream = PlanStream(tokens_dir, plan_dir)
    steps = plan_steps(cfg, stream, model_size(cfg.model, stream.vocab_size, cfg.train.seq_len)["params"])
    schedule = run_schedule(cfg, stream, steps)
    phase = cfg.train.schedule.decay_phase
    if schedule.kind != "wsd" or not schedule.warmup_steps < schedule.decay_start < steps or not phase:
        raise AnnealError(f"anneal: the full run has no stable phase to branch from (train.schedule.kind "
                          f"{schedule.kind}, decay_phase {phase!r}): an anneal starts where WSD's decay begins")
    return {"phase": phase, "step": schedule.decay_start, "full_steps": steps,
            "tokens_per_step": cfg.train.tokens_per_step}


def run_anneals(anneals: Mapping[str, Mapping], p: Mapping, data_root: str | Path = "data",
                full_run: str = "train/pretrain", out_root: str | Path = "data/anneal",
                metrics_path: str | Path = "metrics/anneal.json", runs_dir: str | Path = "runs",
                evalset_stage: str | None = "evalset") -> dict:
    """Run every annealing test; returns {name: result}. p holds the sections the stage declares: mixture, model,
    train. Folders of anneals no longer configured are removed."""
    started = time.perf_counter()
    data_root, out_root = Path(data_root), Path(out_root)
    out_root.mkdir(parents=True, exist_ok=True)
    for old in sorted(out_root.iterdir()):
        if old.is_dir() and old.name not in anneals:
            shutil.rmtree(old)
    results = {name: run_anneal(name, Anneal.resolve(spec, f"anneals.{name}"), p, data_root, full_run, out_root / name,
                                runs_dir, evalset_stage)
               for name, spec in anneals.items()}
    headline = {}
    for name, r in results.items():
        rows = {row["metric"]: row for row in r["verdicts"]}
        headline[name] = {"source": r["source"], "share": r["share"], "cost": r["cost"]["fraction_of_full_run"],
                          **{f"{m}.{k}": round(rows[m][k], 6) if isinstance(rows[m][k], float) else rows[m][k]
                             for m in ("heldout_mean", "benchmarks_mean.bpb") if m in rows
                             for k in ("difference", "sigma", "paired_sigma", "verdict")}}
    write_json(Path(metrics_path), headline)
    # The stage's own run record beside its arms' (runs/anneal@<name>#<arm>.json): the audit's stage_runs.
    inputs = {name: input_id(data_root / full_run) for name in ("pretrain",)} | {"mixture": input_id(data_root / "mixture")}
    write_json(Path(runs_dir) / "anneal.json", run_record(
        "anneal", {"anneals": dict(anneals)}, inputs, ("torch", "numpy"), started, input_stage="pretrain",
        digest=anneal_digest(out_root), counts={"tests": len(results)}, timing={}))
    return results


def run_anneal(name: str, spec: Anneal, p: Mapping, data_root: Path, full_run: str, out_dir: Path,
               runs_dir: str | Path, evalset_stage: str | None) -> dict:
    tokens_dir, plan_dir, full_dir = data_root / "tokenize", data_root / "mixture", data_root / full_run
    run_cfg = {"model": dict(p["model"]), "train": dict(p["train"])}
    at = branch_point(run_cfg, tokens_dir, plan_dir)
    checkpoint = full_dir / "checkpoints" / f"step_{at['step']:08d}"
    if not (checkpoint / ".metadata").is_file():
        raise AnnealError(f"anneal {name}: the full run kept no checkpoint at step {at['step']}, where its decay "
                          f"begins ({checkpoint}): train it with train.checkpoint.keep_decay_start true")
    logging = parse_run(run_cfg).train.logging
    steps = arm_steps(at["full_steps"], spec.steps_fraction, logging.noise_points, logging.noise_stride)

    mixture = Mixture.resolve(p["mixture"])
    index, planted, tagged = plan_inputs(tokens_dir, mixture)
    buckets = source_buckets(index, spec.source, name)
    full_plan = pq.read_table(plan_dir / "plan.parquet")
    budget = int(read_manifest(plan_dir)["token_budget"])
    summaries: dict[str, list[dict]] = {}
    windows: dict[str, list[dict]] = {}  # each arm's seeds' figures over their noise window
    arms = arm_phases(parse_phases(mixture.phases), at["phase"], buckets, spec.share,
                      steps * at["tokens_per_step"] / budget, name)
    for arm, phases in arms.items():
        planned = build_plan(index, phases, budget, mixture.seed, mixture.max_epochs, mixture.heldout_fraction,
                             canaries={c["doc_id"]: c["planned_visits"] for c in planted},
                             excluded={ph: tagged for ph in mixture.exclude_tagged_from})
        plan = branch(full_plan, planned["plan"], at["phase"], at["step"] * at["tokens_per_step"],
                      [c["doc_id"] for c in planted])
        arm_plan = out_dir / "plans" / arm
        arm_plan.mkdir(parents=True, exist_ok=True)
        schema.write_parquet(plan, PLAN, arm_plan / "plan.parquet")
        shutil.copyfile(plan_dir / "heldout.parquet", arm_plan / "heldout.parquet")
        # Each phase's sequence length where a phase sets one, as training reads it (tokenmill.train.data.PlanStream).
        if lengths := read_manifest(plan_dir).get("phase_seq_len"):
            write_json(arm_plan / "manifest.json", {"phase_seq_len": lengths})
        # The lineage reads the arm's steps from this step on in this plan, its earlier ones (the full run's) in
        # the mixture's.
        write_json(arm_plan / BRANCH, {"step": at["step"], "mixture": input_id(plan_dir)})
        available = (int(plan.column("stream_start")[-1].as_py()) + int(plan.column("length")[-1].as_py())) \
            // at["tokens_per_step"]
        if at["step"] + steps > available:
            raise AnnealError(f"anneals.{name}.steps_fraction: {steps} steps from step {at['step']} need "
                              f"{at['step'] + steps} steps of plan, the {arm} arm's holds {available}")
        runs, window = [], []
        for k in range(spec.seeds):
            total = at["step"] + steps  # the branch's past and the arm's own steps (the budget: past the full run's)
            train = {**run_cfg["train"], "max_steps": total, "token_budget": total * at["tokens_per_step"]}
            if k:
                train["data_seed"] = (train.get("data_seed") or 0) + k
            where = out_dir / arm if k == 0 else out_dir / arm / "replicas" / f"seed{k}"
            runs.append(run_train_stage(
                f"anneal@{name}#{arm}" + (f"-seed{k}" if k else ""), {"model": run_cfg["model"], "train": train},
                data_root, _under(arm_plan, data_root), "tokenize", out_dir=where, live_dir=None,
                metrics_path=None, runs_dir=runs_dir, evalset_stage=evalset_stage, start_from=checkpoint))
            window.append(series(where, runs[-1]["noise_steps"]))
        summaries[arm], windows[arm] = runs, window
    result = {
        "source": spec.source, "buckets": buckets, "share": spec.share, "phase": at["phase"],
        "weights": {arm: {ph.name: ph.weights for ph in phases}[at["phase"]] for arm, phases in arms.items()},
        "branch_step": at["step"], "steps_per_arm": steps, "seeds": spec.seeds,
        # Every arm trains the full run's model for `steps` steps: their share of its steps is their share of its
        # compute (the branch's checkpoint is the full run's, not trained again).
        "cost": {"arm_steps": steps * spec.seeds * len(ARMS), "full_steps": at["full_steps"],
                 "fraction_of_full_run": round(steps * spec.seeds * len(ARMS) / at["full_steps"], 4)},
        "verdicts": verdicts(summaries, windows),
    }
    write_json(out_dir / RESULT, result)
    return result


def _under(path: Path, data_root: Path) -> str:
    """How a training stage names a plan folder: relative to the data root (the manifests' input_stage), or whole
    when it lies elsewhere (a test's scratch folder)."""
    return str(path.relative_to(data_root)) if path.is_relative_to(data_root) else str(path.resolve())
