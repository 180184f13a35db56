"""DVC stage `evalset`: the benchmark requests every training run scores in-loop, tokenized once.

Usage (dvc.yaml): python stages/evalset.py <tokenizer stage> <documents stage>
The first evaluate.inloop_items items of every benchmark of decontaminate.benchmarks (each file's first items
are a seeded random sample), tokenized as lm-eval tokenizes them, with the dirty flag of the documents
stage's contamination table (tokenmill.evaluate.evalset).
"""

import sys

from tokenmill.evaluate import dirty_items
from tokenmill.evaluate.params import Evaluate
from tokenmill.section import ParamError
from tokenmill.evaluate.evalset import build_evalset
from tokenmill.runtime import StageRun, input_id, load_params, script


def main(tokenizer_stage: str, documents_stage: str) -> None:
    p = load_params("evaluate.inloop_items", "decontaminate.benchmarks", "train.seq_len")
    items = Evaluate.resolve(p["evaluate"]).inloop_items
    seq_len = p["train"]["seq_len"]
    if not isinstance(seq_len, int) or isinstance(seq_len, bool) or seq_len < 1:
        raise ParamError(f"train.seq_len: expected a positive integer, got {seq_len!r}")
    benchmarks = p["decontaminate"]["benchmarks"]
    with StageRun("evalset", "data/evalset", {"inloop_items": items, "benchmarks": benchmarks,
                                              "seq_len": seq_len}) as run:
        for stage in (tokenizer_stage, documents_stage):
            run.input_hashes[stage] = input_id(f"data/{stage}")
        counts = build_evalset(benchmarks, f"data/{tokenizer_stage}",
                               dirty_items(f"data/{documents_stage}/contamination/contamination.parquet"),
                               items, seq_len, run.tmp / "requests.parquet")
        run.extra.update(counts)
        run.metrics["items"] = counts["benchmarks"]
    print(f"evalset: {sum(counts['benchmarks'].values())} items of {len(counts['benchmarks'])} benchmarks")


if __name__ == "__main__":
    sys.exit(script(main))
