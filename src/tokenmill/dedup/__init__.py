"""Deduplication: exact duplicates, MinHash-LSH near duplicates, repeated boilerplate lines.

`deduplicate(input_dir, params, execution_cfg, out_dir)` is the stage's work (see stage.py for the passes and
the decisions it writes); minhash.py holds the vectorised signatures and LSH parameters, cluster.py the
DuckDB steps over Parquet, text.py the exact key and line hashes.
"""

from tokenmill.dedup.stage import DEFAULTS, lsh_shape, resolve_params, deduplicate

__all__ = ["DEFAULTS", "lsh_shape", "resolve_params", "deduplicate"]
