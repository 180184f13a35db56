"""Errors name their cause (issue 24, item 3): a user's error is one line `<stage>: <message>` and exit code 2,
never a traceback (TOKENMILL_DEBUG=1 shows it); a bug keeps its traceback; a failed training launch prints the
failing rank's reason, not torchrun's banner of '='."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tokenmill.runtime import script
from train_helpers import PROJECT_ROOT, build_corpus, full_train, tiny_run

# --- script(): one line for a user's error, a traceback for a bug ------------------------------------------


def _user_errors():
    from tokenmill.evaluate.compare import CompareError
    from tokenmill.execution import TaskError
    from tokenmill.forecast import ForecastError
    from tokenmill.ingest import SourceError
    from tokenmill.mixture import MixtureError
    from tokenmill.section import ParamError
    from tokenmill.train.config import TrainConfigError
    from tokenmill.train.stage import LaunchError

    return [ParamError("mixture.seed: expected an integer, got 'x'"), TaskError("ingest: a.jsonl: line 3: bad JSON"),
            TrainConfigError("train.lr: expected a number"), ForecastError("need 2 scouts, got 1"),
            CompareError("no common items"), SourceError("data/user/a.jsonl: line 7: not JSON"),
            MixtureError("weights sum to 0"), LaunchError("scout@s1: training failed: why (full log: x)"),
            FileNotFoundError("data/mixture has no manifest.json: run that stage first"),
            KeyError("params.yaml has no parameter 'forecast'")]


def _raise_from_tokenmill():
    from tokenmill.schema import decision

    decision("d", "filter", "maybe", "why")  # a plain ValueError raised by tokenmill's own code


def _run_script(monkeypatch, capsys, main, stage="mystage"):
    monkeypatch.setattr(sys, "argv", [f"stages/{stage}.py"])
    monkeypatch.delenv("DVC_STAGE", raising=False)
    rc = script(main)
    return rc, capsys.readouterr().err


@pytest.mark.parametrize("exc", _user_errors(), ids=lambda e: type(e).__name__)
def test_a_users_error_is_one_line_naming_the_stage(exc, monkeypatch, capsys):
    def main():
        raise exc

    monkeypatch.delenv("TOKENMILL_DEBUG", raising=False)
    rc, err = _run_script(monkeypatch, capsys, main)
    message = exc.args[0]
    assert rc == 2
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err == f"mystage: {message}\n" or err == f"{message}\n" and message.startswith("mystage: "), err


def test_a_plain_value_error_raised_by_tokenmill_is_a_users_error(monkeypatch, capsys):
    monkeypatch.delenv("TOKENMILL_DEBUG", raising=False)
    rc, err = _run_script(monkeypatch, capsys, _raise_from_tokenmill)
    assert rc == 2 and err == "mystage: decision action must be one of ('keep', 'drop', 'modify'), got 'maybe'\n", err


def test_a_message_naming_its_stage_is_not_prefixed_twice(monkeypatch, capsys):
    from tokenmill.mixture import MixtureError

    def main():
        raise MixtureError("mixture: the weights of phase bulk sum to 0,\n give one bucket a positive weight")

    monkeypatch.setenv("DVC_STAGE", "mixture")
    monkeypatch.setattr(sys, "argv", ["stages/mixture.py"])
    assert script(main) == 2
    assert capsys.readouterr().err == "mixture: the weights of phase bulk sum to 0, give one bucket a positive weight\n"


@pytest.mark.parametrize("bug", [
    lambda: None + 1,                          # TypeError
    lambda: "text".no_such_method(),           # AttributeError
    lambda: json.loads("{"),                   # a ValueError raised inside a library (json.JSONDecodeError)
    lambda: int("twelve"),                     # a ValueError from a builtin, in the stage's own frame
], ids=["TypeError", "AttributeError", "library-ValueError", "builtin-ValueError"])
def test_a_bug_keeps_its_traceback(bug, monkeypatch, capsys):
    """Not caught: Python prints the traceback and exits 1."""
    with pytest.raises(Exception) as raised:
        _run_script(monkeypatch, capsys, bug)
    assert type(raised.value).__name__ in ("TypeError", "AttributeError", "JSONDecodeError", "ValueError")
    assert capsys.readouterr().err == ""


def test_a_stage_script_says_one_line_and_the_debug_variable_shows_the_traceback(tmp_path):
    """A real stage script (forecast) in a directory whose params.yaml lacks its section."""
    (tmp_path / "params.yaml").write_text("{}\n")
    cmd = [sys.executable, str(PROJECT_ROOT / "stages" / "forecast.py")]
    env = {k: v for k, v in os.environ.items() if k not in ("DVC_STAGE", "TOKENMILL_DEBUG")}
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("forecast: ") and proc.stderr.count("\n") == 1, proc.stderr
    assert "'forecast'" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr

    debug = subprocess.run(cmd, cwd=tmp_path, env={**env, "TOKENMILL_DEBUG": "1"}, capture_output=True, text=True,
                           timeout=120)
    assert debug.returncode == 2
    assert debug.stderr.startswith("Traceback (most recent call last):"), debug.stderr
    assert debug.stderr.splitlines()[-1] == proc.stderr.strip()


# --- a failed training launch: the reason, not torchrun's banner -------------------------------------------


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    return build_corpus(tmp_path_factory.mktemp("errors_corpus"))


def _project(root: Path, corpus: Path, params: dict) -> Path:
    """A directory laid out as the pipeline's: params.yaml, data/mixture, data/tokenize."""
    import yaml

    root.mkdir(parents=True)
    for stage in ("mixture", "tokenize"):
        shutil.copytree(corpus / stage, root / "data" / stage)
    (root / "params.yaml").write_text(yaml.safe_dump(params))
    return root


def test_a_failed_scout_prints_the_reason_from_its_log_in_one_line(corpus, tmp_path):
    """A budget too small for one step: every rank says so and exits 2, then torchrun prints its own
    traceback and a banner ending in '====', which is what the stage used to repeat."""
    cfg = tiny_run(max_steps=4, launch={"nproc_per_node": 2})
    params = {"train": full_train(cfg), "scouts": {"s1": {"model": cfg["model"], "token_budget": 100}}}
    project = _project(tmp_path / "proj", corpus, params)
    script_path = str(PROJECT_ROOT / "stages" / "train.py")
    proc = subprocess.run([sys.executable, script_path, "scout/s1", "mixture", "tokenize"], cwd=project,
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo"})
    assert proc.returncode == 2, proc.stderr
    err = proc.stderr
    assert err.count("\n") == 1 and "Traceback" not in err and "====" not in err, err
    assert err.startswith("scout@s1: training failed: rank "), err
    assert "no full step fits" in err and "full log: runs/scout@s1.log" in err, err
    log = (project / "runs" / "scout@s1.log").read_text()
    assert "ChildFailedError" in log and log.rstrip().endswith("=")  # what the old message quoted


def test_a_bug_in_a_rank_is_named_by_the_last_line_of_its_traceback(corpus, tmp_path):
    """A rank that hits a bug (here: a token manifest whose vocab_size is a list reaches int()) keeps its
    traceback in the log; the stage's message is the traceback's last line."""
    from tokenmill.train.stage import LaunchError, run_train_stage

    data = tmp_path / "data"
    for stage in ("mixture", "tokenize"):
        shutil.copytree(corpus / stage, data / stage)
    manifest = data / "tokenize" / "manifest.json"
    manifest.write_text(json.dumps({**json.loads(manifest.read_text()), "vocab_size": [512]}))
    cfg = tiny_run(max_steps=4)
    with pytest.raises(LaunchError) as err:
        run_train_stage("scout@bug", cfg, data, "mixture", "tokenize", tmp_path / "out", None, None,
                        runs_dir=tmp_path / "runs")
    message = str(err.value)
    assert message.startswith("scout@bug: training failed: TypeError: int() argument must be"), message
    assert "\n" not in message and "(exit 1; full log: " in message, message
    assert "Traceback (most recent call last):" in (tmp_path / "runs" / "scout@bug.log").read_text()


def test_the_entry_point_records_a_bugs_reason_and_keeps_raising(tmp_path, monkeypatch, capsys):
    import tokenmill.train.loop as loop
    from tokenmill.train.__main__ import main
    from tokenmill.train.faults import REASONS_ENV

    def bug(*args, **kwargs):
        raise AttributeError("'NoneType' object has no attribute 'shape'\n(more detail)")

    monkeypatch.setattr(loop, "train", bug)
    monkeypatch.setenv(REASONS_ENV, str(tmp_path))
    monkeypatch.setenv("RANK", "3")
    (tmp_path / "run.json").write_text("{}")
    with pytest.raises(AttributeError):
        main(["--config", str(tmp_path / "run.json"), "--out", str(tmp_path / "out")])
    assert (tmp_path / "attempt0" / "rank3.txt").read_text() == \
        "AttributeError: 'NoneType' object has no attribute 'shape' (more detail)\n"


# torchrun's report of a rank killed by SIGKILL (2 ranks, torch 2.13), as it ends runs/<stage>.log.
KILLED_LOG = """\
E1125 22:42:41.491000 29808 .venv/lib/python3.11/site-packages/torch/distributed/elastic/multiprocessing/api.py:1002] \
failed (exitcode: -9) local_rank: 0 (pid: 29813) of binary: /work/main/.venv/bin/python
Traceback (most recent call last):
  File "<frozen runpy>", line 198, in _run_module_as_main
    raise ChildFailedError(
torch.distributed.elastic.multiprocessing.errors.ChildFailedError: 
======================================================
tokenmill.train FAILED
------------------------------------------------------
Failures:
[1]:
  time      : 2026-11-25_22:42:41
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : -9 (pid: 29814)  (SIGKILL)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 29814
------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-25_22:42:41
  host      : localhost
  rank      : 0 (local_rank: 0)
  exitcode  : -9 (pid: 29813)  (SIGKILL)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 29813
======================================================
"""


def test_failure_reason_reads_the_log_where_no_rank_wrote_one(tmp_path):
    from tokenmill.train.stage import failure_reason

    assert failure_reason(tmp_path, KILLED_LOG, 2) == \
        "rank 0 was killed by signal 9 (SIGKILL) (from outside: often the out-of-memory killer)"
    died_early = "[rank1]: Traceback (most recent call last):\n[rank1]:   File \"x.py\", line 1, in <module>\n" \
                 "[rank1]: ModuleNotFoundError: No module named 'tokenmill'\n" + KILLED_LOG
    assert failure_reason(None, died_early, 2) == "ModuleNotFoundError: No module named 'tokenmill'"
    spiky = "train: step 5 skipped (spike: loss 9.1, grad norm 3.0)\ntrain: loss is NaN at step 7\n" + KILLED_LOG
    assert failure_reason(None, spiky.replace("Signal 9", "Sig"), 1) == "loss is NaN at step 7"
    assert failure_reason(None, "starting\nsomething odd happened\n" + KILLED_LOG.replace("Signal 9", "Sig"), 1) \
        == "something odd happened"
    assert failure_reason(None, "", 1) == "no output"
    # Of several ranks' lines, the first written: the others mostly failed because that one left. Of several
    # attempts (torchrun's restarts), the last.
    (tmp_path / "attempt0").mkdir()
    (tmp_path / "attempt0" / "rank0.txt").write_text("train: an earlier attempt's reason\n")
    (tmp_path / "attempt1").mkdir()
    (tmp_path / "attempt1" / "rank1.txt").write_text("RuntimeError: Connection closed by peer\n")
    (tmp_path / "attempt1" / "rank0.txt").write_text("train: the loss diverged at step 12\n")
    os.utime(tmp_path / "attempt1" / "rank0.txt", ns=(1, 1))
    assert failure_reason(tmp_path, KILLED_LOG, 2) == "rank 0: the loss diverged at step 12"
    assert failure_reason(tmp_path, KILLED_LOG, 1) == "the loss diverged at step 12"
