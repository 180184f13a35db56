"""Benchmark decontamination: index benchmark items' normalised word n-grams, find them in documents.

readers.py reads benchmark files, ngrams.py normalises and hashes, stage.py holds the per-document
processor, the contamination table and the stage entry point.
"""

from tokenmill.decontam.ngrams import NgramIndex, normalize
from tokenmill.decontam.readers import READERS, read_benchmark
from tokenmill.decontam.stage import (CONTAMINATION, DecontamProcessor, benchmark_digests, build_index,
                                      contamination_rows, run_decontaminate, write_contamination)

__all__ = ["CONTAMINATION", "DecontamProcessor", "NgramIndex", "READERS", "benchmark_digests", "build_index",
           "contamination_rows", "normalize", "read_benchmark", "run_decontaminate", "write_contamination"]
