"""The one executor interface for per-shard work (contract 7).

`executor.map(fn, tasks)` runs a top-level function over picklable tasks and returns the results in task
order, whatever order they finished in. Workers write their own output shards and return small summaries,
so nothing large travels back through the executor. Outputs must not depend on the backend or the number
of workers: a test runs the same stage on both and compares bytes.
"""

from __future__ import annotations

import multiprocessing as mp
import os
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Any, Callable, Mapping, Sequence

from tqdm.auto import tqdm


class Executor:
    name = "base"

    def map(self, fn: Callable[[Any], Any], tasks: Sequence[Any], desc: str = "") -> list[Any]:
        raise NotImplementedError

    def close(self) -> None:
        pass

    def __enter__(self) -> "Executor":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _progress(total: int, desc: str) -> tqdm:
    # Progress goes to stderr; DVC shows it live and it never pollutes stage outputs.
    return tqdm(total=total, desc=desc, unit="shard", disable=os.environ.get("TOKENMILL_PROGRESS") == "0")


class LocalExecutor(Executor):
    """A process pool on this machine; workers=1 runs inline (easy to debug, no pickling)."""

    name = "local"

    def __init__(self, workers: int | None = None):
        self.workers = max(1, workers or os.cpu_count() or 1)

    def map(self, fn, tasks, desc=""):
        results: list[Any] = [None] * len(tasks)
        with _progress(len(tasks), desc) as bar:
            if self.workers == 1 or len(tasks) <= 1:
                for i, task in enumerate(tasks):
                    results[i] = fn(task)
                    bar.update()
                return results
            # fork is cheap but unsafe once threads exist (ray, torch); spawn is always correct.
            ctx = mp.get_context("spawn")
            with ProcessPoolExecutor(max_workers=min(self.workers, len(tasks)), mp_context=ctx) as pool:
                futures = {pool.submit(fn, task): i for i, task in enumerate(tasks)}
                for fut in as_completed(futures):
                    results[futures[fut]] = fut.result()
                    bar.update()
        return results


class RayExecutor(Executor):
    """Ray tasks: the same function and tasks, scheduled on a Ray cluster (or a local one)."""

    name = "ray"

    def __init__(self, address: str | None = None, workers: int | None = None):
        import ray

        self._ray = ray
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
        ray = self._ray
        remote = ray.remote(fn)
        refs = [remote.remote(task) for task in tasks]
        index = {ref: i for i, ref in enumerate(refs)}
        results: list[Any] = [None] * len(tasks)
        pending = list(refs)
        with _progress(len(tasks), desc) as bar:
            while pending:
                done, pending = ray.wait(pending, num_returns=1)
                for ref in done:
                    results[index[ref]] = ray.get(ref)
                    bar.update()
        return results

    def close(self):
        if self._owns:
            self._ray.shutdown()


def make_executor(cfg: Mapping[str, Any] | None) -> Executor:
    """cfg is params.yaml's `execution` section: backend (local | ray), workers, ray_address."""
    cfg = dict(cfg or {})
    backend = cfg.get("backend", "local")
    workers = cfg.get("workers")
    if backend == "local":
        return LocalExecutor(workers)
    if backend == "ray":
        return RayExecutor(cfg.get("ray_address"), workers)
    raise ValueError(f"execution.backend must be 'local' or 'ray', got {backend!r}")
