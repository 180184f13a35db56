"""The one executor interface for per-shard work (contract 7).

`executor.map(fn, tasks)` runs a top-level function over picklable tasks and returns the results in task
order, whatever order they finished in. Workers write their own output shards and return small summaries,
so nothing large travels back through the executor. Outputs must not depend on the backend or the number
of workers: a test runs the same stage on both and compares bytes.

Failures stop the stage at once: the first task that raises cancels every task not yet finished (running
workers are terminated, not waited for) and surfaces as one TaskError line naming the stage, the task's file
and the error. Pool workers die with their parent (execution.lifetime), and a stage run by DVC dies with dvc.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import platform
import sys
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Any, Callable, Mapping, Sequence

from tqdm.auto import tqdm

from tokenmill.execution.lifetime import die_with_parent, end_with_launcher
from tokenmill.execution.params import Execution


class TaskError(RuntimeError):
    """A task failed; the message is one line: stage, the task's file, the error. The cause is chained."""


def task_label(task: Any) -> str:
    """The file a task works on, for error messages: its `path` / `input_path`, or its first string."""
    for name in ("path", "input_path", "file"):
        value = task.get(name) if isinstance(task, Mapping) else getattr(task, name, None)
        if isinstance(value, (str, os.PathLike)):
            return str(value)
    if isinstance(task, (tuple, list)):
        for value in task:
            if isinstance(value, (str, os.PathLike)):
                return str(value)
    return repr(task)[:200]


def task_error(desc: str, task: Any, exc: BaseException) -> TaskError:
    detail = " ".join(f"{type(exc).__name__}: {exc}".split())  # one line, whatever the exception printed
    return TaskError(f"{desc or 'task'}: {task_label(task)}: {detail}")


class Executor:
    """placement: how many tasks each node ran (its host name here, its Ray node id on a cluster), summed over
    the executor's maps. Given a stage's `timing` (make_executor), it is written there when the executor
    closes, so every per-shard stage's run record shows where its tasks went."""

    name = "base"
    placement: dict[str, int]
    timing: dict | None = None

    def map(self, fn: Callable[[Any], Any], tasks: Sequence[Any], desc: str = "") -> list[Any]:
        raise NotImplementedError

    def close(self) -> None:
        pass

    def __enter__(self) -> "Executor":
        return self

    def __exit__(self, *exc) -> None:
        if self.timing is not None:
            self.timing["placement"] = dict(self.placement)
        self.close()


def log_phase(stage: str, message: str) -> None:
    """A progress line for a long step that is not a map over tasks (clustering, training, building).

    To stderr, like the progress bars, and silenced by TOKENMILL_PROGRESS=0 as they are.
    """
    if os.environ.get("TOKENMILL_PROGRESS") != "0":
        print(f"{stage}: {message}", file=sys.stderr, flush=True)


def _progress(total: int, desc: str) -> tqdm:
    # Progress goes to stderr; DVC shows it live and it never pollutes stage outputs.
    return tqdm(total=total, desc=desc, unit="shard", disable=os.environ.get("TOKENMILL_PROGRESS") == "0")


class LocalExecutor(Executor):
    """A process pool on this machine; workers=1 runs inline (easy to debug, no pickling)."""

    name = "local"

    def __init__(self, workers: int | None = None):
        self.workers = max(1, workers or os.cpu_count() or 1)
        self.placement = {}

    def map(self, fn, tasks, desc=""):
        end_with_launcher(desc)
        host = platform.node()
        self.placement[host] = self.placement.get(host, 0) + len(tasks)
        results: list[Any] = [None] * len(tasks)
        with _progress(len(tasks), desc) as bar:
            if self.workers == 1 or len(tasks) <= 1:
                for i, task in enumerate(tasks):
                    try:
                        results[i] = fn(task)
                    except Exception as exc:
                        raise task_error(desc, task, exc) from exc
                    bar.update()
                return results
            # fork is cheap but unsafe once threads exist (ray, torch); spawn is always correct.
            ctx = mp.get_context("spawn")
            pool = ProcessPoolExecutor(max_workers=min(self.workers, len(tasks)), mp_context=ctx,
                                       initializer=die_with_parent, initargs=(os.getpid(),))
            try:
                futures = {pool.submit(fn, task): i for i, task in enumerate(tasks)}
                pending = set(futures)
                while pending:
                    done, pending = wait(pending, return_when=FIRST_COMPLETED)
                    for fut in sorted(done, key=futures.get):  # task order: the first failing task is named
                        i = futures[fut]
                        exc = fut.exception()
                        if isinstance(exc, BrokenProcessPool):
                            raise TaskError(f"{desc or 'task'}: a worker process died (killed, or out of memory) "
                                            f"while the pool ran {task_label(tasks[i])} or a task beside it") from exc
                        if exc is not None:
                            raise task_error(desc, tasks[i], exc) from exc
                        results[i] = fut.result()
                        bar.update()
            except BaseException:
                _stop_now(pool)
                raise
            pool.shutdown(wait=True)
        return results


def _stop_now(pool: ProcessPoolExecutor) -> None:
    """Cancel queued tasks and end running ones now: waiting for them could take hours on a real crawl.

    Measured (tests/test_reliability.py): 40 tasks of 0.5 s on 2 workers, task 0 failing: the stage ends
    within a second instead of after every other task has run.
    """
    pool.shutdown(wait=False, cancel_futures=True)
    # Python 3.14 has pool.terminate_workers(); before it, the running workers are only reachable as
    # the private `_processes` map (stable since 3.8).
    terminate = getattr(pool, "terminate_workers", None)
    if terminate is not None:
        terminate()
        return
    procs = list((getattr(pool, "_processes", None) or {}).values())
    for p in procs:
        if p.is_alive():
            p.terminate()
    for p in procs:
        p.join(timeout=5)
        if p.is_alive():
            p.kill()


def _on_node(fn: Callable[[Any], Any], task: Any, cwd: str) -> tuple[str, Any]:
    """A Ray task: fn(task) in the driver's working directory, and the id of the node that ran it.

    A worker of a Ray cluster starts wherever its node's `ray start` ran, so the stages' relative paths
    (data/ingest/..., the output's temporary folder) would land elsewhere - and on another node, nowhere the
    stage looks (seen with two nodes: the stage's shards were written into the workers' directory and lost).
    The cluster shares one filesystem (docs/scaling.md), so the driver's directory is there on every node."""
    import ray  # the optional backend (execution.backend: ray), 1.1 s to import

    os.chdir(cwd)
    return ray.get_runtime_context().get_node_id(), fn(task)


class RayExecutor(Executor):
    """Ray tasks: the same function and tasks, scheduled on a Ray cluster (or a local one)."""

    name = "ray"

    def __init__(self, address: str | None = None, workers: int | None = None):
        import ray  # the optional backend (execution.backend: ray), 1.1 s to import

        self._ray = ray
        self.placement = {}
        self._owns = not ray.is_initialized()
        if self._owns:
            kwargs: dict[str, Any] = {"ignore_reinit_error": True, "log_to_driver": False,
                                      "include_dashboard": False}
            if address:
                kwargs["address"] = address
            else:
                kwargs["num_cpus"] = workers or os.cpu_count()
            ray.init(**kwargs)

    def map(self, fn, tasks, desc=""):
        end_with_launcher(desc)
        ray = self._ray
        remote = ray.remote(_on_node)
        cwd = os.getcwd()
        refs = [remote.remote(fn, task, cwd) for task in tasks]
        index = {ref: i for i, ref in enumerate(refs)}
        results: list[Any] = [None] * len(tasks)
        pending = list(refs)
        with _progress(len(tasks), desc) as bar:
            while pending:
                done, pending = ray.wait(pending, num_returns=1)
                for ref in done:
                    try:
                        node, results[index[ref]] = ray.get(ref)
                        self.placement[node] = self.placement.get(node, 0) + 1
                    except Exception as exc:
                        for other in pending:  # fail fast here too: nothing else is worth finishing
                            ray.cancel(other, force=True)
                        cause = getattr(exc, "cause", None) or exc  # RayTaskError wraps the task's exception
                        raise task_error(desc, tasks[index[ref]], cause) from exc
                    bar.update()
        return results

    def close(self):
        if self._owns:
            self._ray.shutdown()


def make_executor(cfg: Mapping[str, Any] | None, timing: dict | None = None) -> Executor:
    """cfg is params.yaml's `execution` section: backend (local | ray), workers, ray_address. timing: the
    stage's run-record timing (StageResult.timing), which gets the executor's placement when it closes."""
    cfg = Execution.resolve(cfg).model_dump()
    ex = RayExecutor(cfg["ray_address"], cfg["workers"]) if cfg["backend"] == "ray" else LocalExecutor(cfg["workers"])
    ex.timing = timing
    return ex
