"""Two Ray nodes on this machine (docs/scaling.md): a head and a second node started with `ray start`, each
with its own CPU, custom resource and temporary directory, as two machines of a cluster would be. The data
stages run through them (execution.backend ray, execution.ray_address the head) and write the local
executor's bytes; their run records show tasks on both nodes. Killing the second node in the middle of a
stage: the stage completes (Ray runs the lost tasks again on the head) or stops with one line, and a rerun
writes the same bytes. The test starts and stops both nodes itself and leaves no Ray process behind."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil
import pytest

from test_ingest_real import REAL_FILES, SMALL_FILES, archive_sources
from train_helpers import free_port

RAY = str(Path(sys.executable).with_name("ray"))


class Node:
    """One `ray start --block` in its own process group, with its own short temporary directory (Ray's
    socket paths must stay under 107 characters, which a pytest tmp_path can exceed)."""

    def __init__(self, name: str, *args: str):
        self.temp = tempfile.mkdtemp(prefix=f"ray-{name}-", dir="/tmp")
        self.log = open(Path(self.temp) / "start.log", "w")
        self.proc = subprocess.Popen([RAY, "start", "--block", "--node-ip-address", "127.0.0.1", "--num-cpus", "1",
                                      "--resources", json.dumps({f"{name}_node": 1}), "--temp-dir", self.temp,
                                      "--disable-usage-stats", *args],
                                     stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)

    def processes(self) -> list[psutil.Process]:
        """This node's processes, found by the temporary directory on their command lines."""
        found = []
        for p in psutil.process_iter(["cmdline"]):
            try:
                if any(self.temp in arg for arg in p.info["cmdline"] or ()):
                    found.append(p)
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                pass
        return found

    def kill(self) -> None:
        """SIGKILL to the node's whole process group and every process it started: a machine lost."""
        for p in self.processes():
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=30)

    def stop(self) -> None:
        # SIGKILL rather than `ray stop` (which stops every Ray on the machine, another test's too) or SIGTERM to
        # `ray start --block` (measured: 30 s before its processes were gone).
        self.kill()
        deadline = time.time() + 30
        while self.processes() and time.time() < deadline:
            time.sleep(0.5)
        self.log.close()
        shutil.rmtree(self.temp, ignore_errors=True)


def _alive_nodes(address: str) -> int:
    code = (f"import ray; ray.init(address={address!r}, log_to_driver=False); "
            "print(sum(n['Alive'] for n in ray.nodes()))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    return int(proc.stdout.strip().splitlines()[-1]) if proc.returncode == 0 and proc.stdout.strip() else 0


def _warm(address: str) -> None:
    """Connect this process (the stages' driver) and run one task on each node, pinned to it.

    Ray hands a driver's queued tasks to whichever worker it has already leased: a node whose first worker is
    still starting when the other node has run all six of a stage's tasks gets none (measured: 3 runs in 5
    with another process busy on both cores; `SPREAD` scheduling did the same). A worker started on each node
    for this driver beforehand, as on a cluster that has been up a while, makes both nodes' leases ready; the
    stage then finds Ray already connected and uses this connection."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    ray.init(address=address, log_to_driver=False)
    nodes = [n["NodeID"] for n in ray.nodes() if n["Alive"]]
    here = ray.remote(lambda: ray.get_runtime_context().get_node_id())
    ran = ray.get([here.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n, soft=False)).remote()
                   for n in nodes], timeout=120)
    assert sorted(ran) == sorted(nodes) and len(nodes) == 2, (ran, nodes)


@pytest.fixture
def cluster(monkeypatch):
    # Ray's token authentication (docs/scaling.md): every process - both nodes, the stage's driver - reads the
    # token from ~/.ray/auth_token and sends it when RAY_AUTH_MODE=token. `ray start --head` does not create one
    # (on a fresh machine it stops: "no authentication token was found"): the operator's step, as documented,
    # creates it when missing. Not a token file of the test's own: the driver runs in this process, and Ray keeps
    # the token it read for the process's life, so a later local ray.init here (test_ingest_real) would send the
    # test's token to a cluster that expects ~/.ray's (measured: "InvalidAuthToken", a fresh-clone run).
    subprocess.run([str(Path(sys.executable).with_name("ray")), "get-auth-token", "--generate"], check=True,
                   capture_output=True, timeout=60)
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    port = free_port()
    address = f"127.0.0.1:{port}"
    head = Node("head", "--head", "--port", str(port), "--include-dashboard", "false")
    nodes = [head]
    try:
        deadline = time.time() + 120
        while _alive_nodes(address) < 1:
            assert time.time() < deadline and head.proc.poll() is None, Path(head.log.name).read_text()[-3000:]
            time.sleep(1)
        second = Node("second", "--address", address)
        nodes.append(second)
        while _alive_nodes(address) < 2:
            assert time.time() < deadline and second.proc.poll() is None, Path(second.log.name).read_text()[-3000:]
            time.sleep(1)
        _warm(address)
        yield address, head, second
    finally:
        import ray
        ray.shutdown()
        for node in reversed(nodes):
            node.stop()
        left = [p for node in nodes for p in node.processes()]
        assert not left, [" ".join(p.cmdline())[:200] for p in left]
        assert not any(Path(node.temp).exists() for node in nodes)


def _files(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*.parquet"))}


@pytest.mark.slow  # two Ray nodes started and stopped, the data stages three times
def test_two_ray_nodes_run_the_data_stages_and_survive_losing_one(cluster, warc_dir, tmp_path, ingest_in):
    from stages import filter as filter_stage

    address, head, second = cluster
    sources = archive_sources(warc_dir, SMALL_FILES)
    local = ingest_in(tmp_path / "local", sources, "ingest", execution={"backend": "local", "workers": 2})
    ray_exec = {"backend": "ray", "ray_address": address}
    on_ray = ingest_in(tmp_path / "ray", sources, "ingest", execution=ray_exec)
    assert _files(tmp_path / "ray" / "ingest") == _files(tmp_path / "local" / "ingest")
    assert on_ray.manifest["counts"] == local.manifest["counts"]
    placement = json.loads((tmp_path / "ray" / "runs" / "ingest.json").read_text())["timing"]["placement"]
    assert len(placement) == 2 and sum(placement.values()) == len(SMALL_FILES), placement  # both nodes ran tasks

    # The next data stage over the same cluster: the filter's shards equal the local executor's.
    from tokenmill.filters.params import Filter
    for where, execution in (("local", {"backend": "local", "workers": 2}), ("ray", ray_exec)):
        cwd = os.getcwd()
        os.chdir(tmp_path / where)
        try:
            filter_stage.stage({"filter": Filter.defaults(), "execution": execution}, "ingest", ".")
        finally:
            os.chdir(cwd)
    assert _files(tmp_path / "ray" / "filter") == _files(tmp_path / "local" / "filter")

    # The second node lost while a stage runs (every real archive, a few seconds of work on two CPUs).
    everything = archive_sources(warc_dir, list(REAL_FILES))
    reference = ingest_in(tmp_path / "all_local", everything, "ingest", execution={"backend": "local", "workers": 2})
    outcome: dict = {}

    def run_stage():
        try:
            outcome["out"] = ingest_in(tmp_path / "lost", everything, "ingest", execution=ray_exec)
        except Exception as exc:  # the stage's own error, as a user would see it
            outcome["error"] = exc

    runner = threading.Thread(target=run_stage)
    runner.start()
    deadline = time.time() + 60
    while not list((tmp_path / "lost").rglob("*.parquet")) and runner.is_alive() and time.time() < deadline:
        time.sleep(0.05)  # the first shards are written: the stage is under way on the cluster
    assert runner.is_alive(), "the stage ended before the node could be lost"
    second.kill()
    runner.join(timeout=300)
    assert not runner.is_alive()
    if "error" in outcome:
        message = str(outcome["error"])
        assert "\n" not in message and message.startswith("ingest: "), message
    else:
        assert _files(tmp_path / "lost" / "ingest") == _files(tmp_path / "all_local" / "ingest")
    assert not [p for p in (tmp_path / "lost").rglob("*") if p.name.startswith(".tmp")]
    # A rerun on what is left of the cluster writes the same bytes.
    shutil.rmtree(tmp_path / "lost")
    again = ingest_in(tmp_path / "lost", everything, "ingest", execution=ray_exec)
    assert _files(tmp_path / "lost" / "ingest") == _files(tmp_path / "all_local" / "ingest")
    assert again.manifest["counts"] == reference.manifest["counts"]
    print(f"\nlosing the second node mid-stage: {'error: ' + str(outcome['error']) if 'error' in outcome else 'completed'}")
