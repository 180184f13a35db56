"""Deduplication: exact duplicates, MinHash-LSH near duplicates, repeated boilerplate lines.

`run_dedup(params, execution_cfg, data_root, input_stage)` is the stage (see stage.py for the passes and
the decisions it writes); minhash.py holds the vectorised signatures and LSH parameters, cluster.py the
DuckDB steps over Parquet, text.py the exact key and line hashes.
"""

from tokenmill.dedup.stage import DEFAULTS, lsh_shape, resolve_params, run_dedup

__all__ = ["DEFAULTS", "lsh_shape", "resolve_params", "run_dedup"]
