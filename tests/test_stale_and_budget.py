"""A killed run's leftovers and a crawl too small for its budget (issue 22, item 6).

- A stage killed (SIGKILL) while its previous output was intact leaves its temporary directory; `dvc repro` then
  has nothing to do, so the next run of *any* stage removes it (runtime.sweep_stale) — never a live run's,
  another host's or a file of the user's.
- A token budget derived from the model (train.token_budget null: tokens_per_param x parameters) that the
  corpus cannot fill within the epoch caps shrinks to what they allow: one warning line and metrics saying so.
  A budget the user set still stops the plan with the message naming the bucket.
- The crawl preset on the WARC files of ../shared/data alone, through DVC to the plan, then the kill above
  inside that project.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from conftest import missing_shared_data
from tiny_run import copy_project, small_benchmarks
from tiny_run import run as run_in  # dvc from this venv, a git identity, no progress bars
from tokenmill.config import compose
from tokenmill.mixture import MixtureError
from stages import mixture as mixture_stage
from tokenmill.runtime import HOST, StageRun, sweep_stale, temporary
from tokenmill.train.config import model_size, parse_run
from tokenmill.train.loop import plan_steps

PYTHON = sys.executable

# A stage as small as it gets: StageRun around a file and, when asked, a long sleep (the run to kill).
STAGE = """
import sys, time
from tokenmill.runtime import StageRun

name, seconds = sys.argv[1], float(sys.argv[2])
with StageRun(name, f"data/{name}", {}) as run:
    (run.tmp / "part.txt").write_text(name)
    print("started", flush=True)
    time.sleep(seconds)
"""


def _stage(ws: Path, name: str, seconds: float = 0.0) -> subprocess.Popen:
    return subprocess.Popen([PYTHON, str(ws / "stage.py"), name, str(seconds)], cwd=ws, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _dead_pid() -> int:
    proc = subprocess.Popen([PYTHON, "-c", "pass"])
    proc.wait()
    return proc.pid


def _killed_mid_run(ws: Path, name: str) -> Path:
    """Start the stage, SIGKILL it once its temporary output is being written; returns that temporary."""
    proc = _stage(ws, name, seconds=60)
    try:
        assert proc.stdout.readline().strip() == "started", proc.stderr.read()
        tmp = ws / "data" / f".{name}.tmp-{proc.pid}@{HOST}"
        assert (tmp / "part.txt").is_file()
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    return tmp


def test_a_killed_stage_leftovers_go_at_the_next_run_of_any_stage(tmp_path):
    ws = tmp_path / "project"
    (ws / "data").mkdir(parents=True)
    (ws / "dvc.yaml").write_text("stages: {}\n")  # what makes it a workspace
    (ws / "stage.py").write_text(textwrap.dedent(STAGE))
    first = _stage(ws, "dedup")
    assert first.wait(timeout=60) == 0, first.stderr.read()
    intact = (ws / "data" / "dedup" / "manifest.json").read_bytes()

    tmp = _killed_mid_run(ws, "dedup")
    assert tmp.is_dir() and (ws / "data" / "dedup" / "manifest.json").read_bytes() == intact

    # Other leftovers of dead runs, where stages write them: a swapped-out output, a metrics file's temporary,
    # a report swapped at the workspace's top level, one deep in a training run, one of an older version (no
    # host in its name).
    dead = _dead_pid()
    stale = [ws / "data" / f".tokenize.old-{dead}@{HOST}", ws / "metrics" / f".dedup.json.tmp-{dead}@{HOST}",
             ws / f".reports.tmp-{dead}@{HOST}", ws / "data" / "train" / "pretrain" / f".manifest.json.tmp-{dead}",
             ws / "runs" / f".dedup.json.tmp-{dead}"]
    # And what must stay: a live process's, another host's, the user's files (data/raw, data/user), a plain
    # dot-file, a temporary without a pid.
    sleeper = subprocess.Popen([PYTHON, "-c", "import time; time.sleep(120)"])
    try:
        kept = [ws / "data" / f".quality.tmp-{sleeper.pid}@{HOST}", ws / "data" / f".filter.tmp-{dead}@other-host",
                ws / "data" / "raw" / f".crawl.warc.gz.tmp-{dead}", ws / "data" / "user" / f".notes.old-{dead}",
                ws / "data" / ".gitignore", ws / "data" / "train" / "pretrain" / "checkpoints" / ".tmp-step_00000004"]
        for p in stale + kept:
            p.parent.mkdir(parents=True, exist_ok=True)
            if p.name.startswith((".tokenize.", ".reports.", ".quality.", ".filter.", ".tmp-step")):
                p.mkdir()
                (p / "part.txt").write_text("x")
            else:
                p.write_text("x")

        # Any other stage, here the smallest: it starts by sweeping the workspace, and says so in one line.
        other = _stage(ws, "filter")
        assert other.wait(timeout=60) == 0, other.stderr.read()
        err = other.stderr.read()
        assert sleeper.poll() is None  # still alive: its temporary must be kept
    finally:
        sleeper.kill()
        sleeper.wait()
    assert not tmp.exists(), "the killed stage's temporary directory outlived the next stage run"
    assert [p for p in stale if p.exists()] == []
    assert [p for p in kept if not p.exists()] == []
    assert err.count("\n") == 1 and err.startswith("filter: removed what killed runs left: ") and "and 3 more" in err
    assert (ws / "data" / "dedup" / "manifest.json").read_bytes() == intact  # the intact output untouched
    assert (ws / "data" / "filter" / "part.txt").read_text() == "filter"
    assert sorted(p.name for p in (ws / "data").iterdir()) == sorted(
        [".gitignore", "dedup", "filter", "raw", "train", "user", f".quality.tmp-{sleeper.pid}@{HOST}",
         f".filter.tmp-{dead}@other-host"])
    # The sleeper is gone now: its temporary is the one left to find.
    assert sweep_stale(ws) == [ws / "data" / f".quality.tmp-{sleeper.pid}@{HOST}"]


def test_a_stage_outside_any_workspace_cleans_only_beside_its_output(tmp_path, monkeypatch):
    """No dvc.yaml above the output (a test, a tool): only the output's own leftovers, as before."""
    monkeypatch.chdir(tmp_path)
    dead = _dead_pid()
    own, other = tmp_path / "out" / f".x.tmp-{dead}", tmp_path / "out" / f".y.tmp-{dead}"
    for p in (own, other):
        p.mkdir(parents=True)
    with StageRun("x", tmp_path / "out" / "x", {}) as run:
        assert run.tmp == temporary(tmp_path / "out" / "x") and run.tmp.name.endswith(f"@{HOST}")
    assert not own.exists() and other.exists()


# ---------------------------------------------------------------------------------------------------------
# A corpus too small for the budget


MODEL = {"n_layers": 1, "d_model": 32, "n_heads": 1, "n_kv_heads": 1, "ffn_dim": 96}
VOCAB = 500
MIXTURE = {"name": "small", "seed": 7, "heldout_fraction": 0.0, "max_epochs": {"default": 4, "web/low": 2},
           "phases": {"bulk": {"fraction": 0.9, "weights": {"web/high": 0.5, "web/low": 0.5}},
                      "anneal": {"fraction": 0.1, "weights": {"web/high": 1.0}}}}
SIZES = {"web/high": 30, "web/low": 60}  # documents of 100 tokens (+ end-of-text): 3,030 and 6,060 tokens


def _token_dir(root: Path) -> Path:
    tok = root / "tokenize"
    (tok / "index").mkdir(parents=True)
    rows = [{"doc_id": f"{b}-{i:03d}", "bucket": b, "shard": f"tokens/{b}/00000.bin", "offset": i * 101, "length": 100}
            for b, n in SIZES.items() for i in range(n)]
    pq.write_table(pa.Table.from_pylist(rows), tok / "index" / "00000.parquet")
    (tok / "manifest.json").write_text(json.dumps({"stage": "tokenize", "vocab_size": VOCAB, "digest": "t"}))
    return tok


def _budget(token_budget, tokens_per_param=1.0):
    return {"seq_len": 64, "global_batch": 2, "token_budget": token_budget, "tokens_per_param": tokens_per_param}


def run_mixture(mixture: dict, budget: dict, model: dict) -> dict:
    """The mixture stage (stages/mixture.py) over data/tokenize of the working directory."""
    return mixture_stage.stage({"mixture": mixture, "train": budget, "model": model}, "tokenize")


def test_a_derived_budget_the_corpus_cannot_fill_is_capped_with_one_warning(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # metrics/, runs/ and plots/ of the stage go here
    _token_dir(tmp_path / "data")
    params = model_size(MODEL, VOCAB)["params"]
    requested = int(1.0 * params)
    # web/high's share: 0.9 x 0.5 + 0.1 = 0.55 of the budget, at most 4 x 3,030 tokens; web/low's 0.45, at
    # most 2 x 6,060: web/high runs out first, at 12,120 / 0.55 = 22,036 tokens.
    assert requested > 30_000
    m = run_mixture(MIXTURE, _budget(None), MODEL)
    err = capsys.readouterr().err
    warnings = [line for line in err.splitlines() if "warning" in line]
    assert len(warnings) == 1 and err.count("\n") == 1, err
    assert warnings[0].startswith(f"mixture: warning: the corpus is too small for the token budget of {requested:,} ")
    assert "bucket 'web/high' would be repeated" in warnings[0] and "max_epochs is 4" in warnings[0]
    assert "planning 22,036 tokens instead" in warnings[0] and "train.token_budget" in warnings[0]

    metrics = json.loads((tmp_path / "metrics" / "mixture.json").read_text())
    assert metrics["budget_capped"] is True and metrics["requested_tokens"] == requested
    assert metrics["token_budget"] == m["token_budget"] == 22_036
    assert 22_036 <= metrics["plan_tokens"] <= 22_036 + 3 * 101  # a bucket overshoots by one document a phase
    # ... but never past its cap: web/high's quotas (9,916 + 2,204) end inside documents, and the overshoots of
    # the two phases would have read some of its documents a fifth time (12,221 tokens for 12,120).
    assert metrics["epochs"]["web/high"] == 4.0 and metrics["epochs"]["web/low"] <= 2
    assert metrics["steps"] == m["steps"] == metrics["plan_tokens"] // 128
    # The headline's documents per bucket: the distinct documents the plan reads from each (a repeat counts once).
    plan = pq.read_table(tmp_path / "data" / "mixture" / "plan.parquet", columns=["doc_id", "bucket"]).to_pylist()
    assert metrics["documents"] == {b: len({r["doc_id"] for r in plan if r["bucket"] == b}) for b in metrics["planned"]}
    assert sum(metrics["documents"].values()) == metrics["unique_documents"] < len(plan)  # web/high repeats
    # Training takes the plan's steps, not the budget's: fewer steps, no error.
    cfg = parse_run({"model": MODEL, "train": {**_budget(None), "launch": {"nproc_per_node": 1}}})
    stream = SimpleNamespace(total_tokens=metrics["plan_tokens"])
    assert plan_steps(cfg, stream, params) == (metrics["plan_tokens"] - 1) // 128

    # A budget the user set is what they asked for: the plan stops, naming the bucket, as before.
    with pytest.raises(MixtureError, match=r"bucket 'web/high' would be repeated 8\.24 times .* max_epochs is 4\.0; "
                                           r"lower its weight, lower the budget or raise max_epochs"):
        run_mixture(MIXTURE, _budget(requested), MODEL)
    # One it can fill is planned in full, and says it was not capped.
    m = run_mixture(MIXTURE, _budget(20_000), MODEL)
    metrics = json.loads((tmp_path / "metrics" / "mixture.json").read_text())
    assert metrics["budget_capped"] is False and metrics["requested_tokens"] == metrics["token_budget"] == 20_000
    assert "warning" not in capsys.readouterr().err
    # A derived budget that fits is not touched either.
    m = run_mixture(MIXTURE, _budget(None, tokens_per_param=20_000 / params), MODEL)
    assert m["token_budget"] == int(20_000 / params * params)
    assert json.loads((tmp_path / "metrics" / "mixture.json").read_text())["budget_capped"] is False


# ---------------------------------------------------------------------------------------------------------
# The crawl preset on WARC files alone, through DVC


SMALL = "\nsample: {n_docs: 200, eval_items: 10}\n"  # a small reference corpus and eval set
WORKERS = ("\n  workers: 2 ", "\n  workers: 1 ")


def _run(args, repo: Path, check: bool = True):
    return run_in(args, repo, check, PYTHONPATH=str(repo / "src"))


@pytest.mark.slow
def test_the_crawl_preset_plans_on_warc_files_alone_and_a_killed_stage_is_swept(tmp_path, shared_data):
    """README's "Pointing it at real data" with WARC files only (every *.warc* of ../shared/data/warc): the
    shipped scale's derived budget is far more than 44 documents allow; the plan is capped and says so.
    Then a stage of that project killed while its output was intact: `dvc repro` has nothing to do and
    leaves its temporary; the next stage DVC runs removes it."""
    warc = shared_data / "warc"
    files = sorted(p for p in warc.rglob("*.warc*") if p.is_file()) if warc.is_dir() else []
    if len(files) < 10:
        missing_shared_data(f"{warc}/**/*.warc*")
    repo = tmp_path / "repo"
    copy_project(repo)
    conf = repo / "conf" / "config.yaml"
    small_benchmarks(conf, items=20)
    text = conf.read_text()
    assert "\n  - source: sample\n" in text and WORKERS[0] in text
    conf.write_text(text.replace("\n  - source: sample\n", "\n  - source: crawl\n", 1).replace(*WORKERS, 1) + SMALL)
    for path in files:  # copies in the temporary tree only; git ignores data/raw/*
        target = repo / "data" / "raw" / "warc" / path.relative_to(warc)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, target)
    _run(["git", "init", "-q"], repo)
    _run(["dvc", "init", "-q"], repo)
    compose([], conf_dir=repo / "conf", output=repo / "params.yaml")
    _run(["git", "add", "-A"], repo)
    _run(["git", "commit", "-qm", "crawl"], repo)

    started = time.monotonic()
    proc = _run(["dvc", "repro", "mixture"], repo)
    print(f"dvc repro mixture: {time.monotonic() - started:.1f} s")
    assert "Running stage 'mixture'" in proc.stdout and "Traceback" not in proc.stderr
    warnings = [line for line in proc.stderr.splitlines()
                if line.startswith("mixture: warning: the corpus is too small")]
    assert len(warnings) == 1, proc.stderr
    assert "(train.tokens_per_param x the model's parameters)" in warnings[0] and "max_epochs is 4" in warnings[0]
    metrics = json.loads((repo / "metrics" / "mixture.json").read_text())
    print(warnings[0], json.dumps(metrics, sort_keys=True), sep="\n")
    assert metrics["budget_capped"] is True and metrics["plan_tokens"] < metrics["requested_tokens"]
    assert metrics["steps"] > 0 and max(metrics["epochs"].values()) <= 4.2, metrics
    sources = {r["source"] for r in pq.read_table(repo / "data" / "ingest" / "documents").to_pylist()}
    assert sources == {"crawl_warc"}
    params = yaml.safe_load((repo / "params.yaml").read_text())
    assert params["train"]["token_budget"] is None  # the shipped scale derives it
    # No reference named for this crawl: the classifier's positives are the project's own corpus, and the
    # crawl is cut only where those scores rank it (else kept with one warning line: tests/test_quality.py).
    quality = json.loads((repo / "metrics" / "quality.json").read_text())
    print(json.dumps({k: quality[k] for k in ("reference_fallback", "cut_skipped", "crawl_score_spread")}))
    assert quality["reference_fallback"] is True
    assert quality["cut_skipped"] == any(line.startswith("quality: warning:") for line in proc.stderr.splitlines())

    # A stage killed mid-run with its previous output intact: nothing for dvc to do, the temporary stays ...
    dedup = pq.read_table(repo / "data" / "dedup" / "documents")
    stage = subprocess.Popen([PYTHON, "stages/dedup.py", "pii"], cwd=repo, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, env={**os.environ, "PYTHONPATH": str(repo / "src")})
    tmp = repo / "data" / f".dedup.tmp-{stage.pid}@{HOST}"
    deadline = time.monotonic() + 60
    while not tmp.is_dir() and stage.poll() is None and time.monotonic() < deadline:
        time.sleep(0.002)
    stage.send_signal(signal.SIGKILL)
    stage.wait()
    if stage.returncode != -signal.SIGKILL:  # finished first (it cannot have: it runs for seconds)
        pytest.fail(f"dedup ended before it could be killed (exit {stage.returncode})")
    assert tmp.is_dir()
    assert pq.read_table(repo / "data" / "dedup" / "documents").equals(dedup)
    status = _run(["dvc", "status", "mixture"], repo)
    assert "changed" not in status.stdout, status.stdout
    assert "Data and pipelines are up to date" in _run(["dvc", "repro", "mixture"], repo).stdout
    assert tmp.is_dir()
    # ... until DVC runs any stage: here the check (seconds; its output unchanged, so nothing below reruns).
    proc = _run(["dvc", "repro", "-f", "-s", "check"], repo)
    assert not tmp.exists(), proc.stderr
    assert f"check: removed what killed runs left: data/{tmp.name}" in proc.stderr
    assert "changed" not in _run(["dvc", "status", "mixture"], repo).stdout
