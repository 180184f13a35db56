"""Benchmark decontamination: index benchmark items as normalised word sequences, align documents to them.

readers.py reads benchmark files and names items (`item_id`), ngrams.py normalises, hashes and aligns,
stage.py holds the per-document processor, the contamination table and the stage's work (decontaminate), params.py
the stage's parameters (Decontaminate).
"""

from tokenmill.decontam.ngrams import Matches, NgramIndex, normalize, text_hashes
from tokenmill.decontam.readers import READERS, item_id, read_benchmark, read_items
from tokenmill.decontam.stage import (CONTAMINATION, DecontamProcessor, benchmark_digests, build_index,
                                      decontaminate, write_contamination)

__all__ = ["CONTAMINATION", "DecontamProcessor", "Matches", "NgramIndex", "READERS", "benchmark_digests",
           "build_index", "item_id", "normalize", "read_benchmark", "read_items", "decontaminate",
           "text_hashes", "write_contamination"]
