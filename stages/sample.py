"""DVC stage `sample`: build the embedded default corpus from the Python installation it runs in."""

import sys
from pathlib import Path

from tokenmill.runtime import StageRun, input_id, load_params, script
from tokenmill.sample import build_reference, build_sample
from tokenmill.sample.params import Sample


def main(benchmarks_stage: str) -> None:
    p = Sample.resolve(load_params("sample")["sample"])
    # The corpus is built from the installed distributions, so it changes when they do: a new environment is
    # a new corpus (RESULTS.md: two clones compare equal in one environment).
    # Real benchmark items are planted in the crawl, and kept out of the rest of it.
    with StageRun("sample", "data/sample", p.model_dump()) as run:
        run.input_hashes[benchmarks_stage] = input_id(f"data/{benchmarks_stage}")
        if p.enabled:
            run.metrics["corpus"] = build_sample(run.tmp, n_docs=p.n_docs, seed=p.seed, eval_items=p.eval_items,
                                                 planted_eval_items=p.planted_eval_items,
                                                 benchmarks_dir=Path(f"data/{benchmarks_stage}"),
                                                 planted_benchmark_items=p.planted_benchmark_items)
        else:  # a real crawl still gets the project's reference prose (quality positives) and eval set
            run.metrics["corpus"] = build_reference(run.tmp, n_docs=p.n_docs, seed=p.seed, eval_items=p.eval_items)


if __name__ == "__main__":
    sys.exit(script(main))
