"""One cache for a team (README, "Sharing outputs and experiments"): the tiny run's outputs pushed through dvc-s3 to
an S3-compatible store (moto's server, a process on localhost), a second clone of the repository that pulls them
and has nothing to rebuild, and an experiment pushed from the first clone (through a bare git remote) pulled and
shown in the second. Credentials come from the environment only."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

import tiny_run

CREDENTIALS = {"AWS_ACCESS_KEY_ID": "team", "AWS_SECRET_ACCESS_KEY": "team-secret", "AWS_DEFAULT_REGION": "us-east-1"}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return tiny_run.build(tmp_path_factory.mktemp("tiny"))


@pytest.fixture
def store(tmp_path):
    """An S3-compatible server on localhost with the bucket `team`; its endpoint URL."""
    import boto3

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = open(tmp_path / "moto.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=log, stderr=subprocess.STDOUT)
    endpoint = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.time() > deadline or proc.poll() is not None:
                    raise AssertionError(f"moto server did not start: {(tmp_path / 'moto.log').read_text()[-2000:]}")
                time.sleep(0.2)
        boto3.client("s3", endpoint_url=endpoint, **{k.lower(): v for k, v in CREDENTIALS.items()
                                                      if k != "AWS_DEFAULT_REGION"},
                     region_name=CREDENTIALS["AWS_DEFAULT_REGION"]).create_bucket(Bucket="team")
        yield endpoint
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        log.close()


def _dvc(args: list[str], cwd: Path, check: bool = True) -> subprocess.CompletedProcess:
    return tiny_run.run(["dvc", *args], cwd, check=check, **CREDENTIALS)


@pytest.mark.slow  # copies the tiny run, pushes it, clones and pulls it, and runs one experiment
def test_a_second_clone_pulls_the_teams_outputs_and_experiments(tiny, store, tmp_path):
    first = tmp_path / "first"
    shutil.copytree(tiny, first, symlinks=True)  # committed as built (tiny_run.build)
    # The team's remote, as README says: the URL and endpoint in .dvc/config (committed), the keys in the
    # environment only.
    _dvc(["remote", "add", "-d", "team", "s3://team/cache"], first)
    _dvc(["remote", "modify", "team", "endpointurl", store], first)
    config = (first / ".dvc" / "config").read_text()
    assert "s3://team/cache" in config and "team-secret" not in config
    tiny_run.run(["git", "add", ".dvc/config"], first)
    tiny_run.run(["git", "commit", "-qm", "the team's remote"], first)
    pushed = _dvc(["push"], first)
    assert "pushed" in pushed.stdout + pushed.stderr
    # Without the keys in the environment the store is not reached: nothing in the repository holds them.
    without_keys = tiny_run.run(["dvc", "push"], first, check=False, AWS_ACCESS_KEY_ID="", AWS_SECRET_ACCESS_KEY="")
    assert without_keys.returncode != 0 and "credentials" in without_keys.stderr, without_keys.stderr[-500:]
    origin = tmp_path / "origin.git"
    tiny_run.run(["git", "init", "-q", "--bare", str(origin)], tmp_path)
    tiny_run.run(["git", "remote", "add", "origin", str(origin)], first)
    tiny_run.run(["git", "push", "-q", "origin", "HEAD:main"], first)

    # A colleague's clone: pull, and nothing is stale or rebuilt.
    tiny_run.run(["git", "clone", "-q", "-b", "main", str(origin), "second"], tmp_path)
    second = tmp_path / "second"
    _dvc(["pull"], second)
    status = _dvc(["status"], second).stdout
    assert "up to date" in status, status
    repro = _dvc(["repro"], second).stdout
    assert "Running stage" not in repro, repro
    assert (second / "data" / "forecast" / "prediction.json").read_bytes() == \
        (first / "data" / "forecast" / "prediction.json").read_bytes()

    # An experiment run in the first clone (the forecast with another interval), pushed: git refs to origin,
    # its outputs to the store; pulled and shown in the second.
    _dvc(["exp", "run", "--temp", "-n", "team-check", "-S", "forecast.interval=0.8", "forecast"], first)
    _dvc(["exp", "push", "origin", "team-check"], first)
    _dvc(["exp", "pull", "origin", "team-check"], second)
    shown = json.loads(_dvc(["exp", "show", "--json"], second).stdout)
    names = {exp.get("name") for commit in shown for exp in commit.get("experiments") or []}
    assert "team-check" in names, names
    _dvc(["exp", "apply", "team-check"], second)
    assert json.loads((second / "metrics" / "forecast.json").read_text()) != \
        json.loads((first / "metrics" / "forecast.json").read_text())  # its own forecast, from the store
