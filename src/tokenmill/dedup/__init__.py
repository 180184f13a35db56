"""Deduplication: exact duplicates, MinHash-LSH near duplicates, repeated boilerplate lines.

`deduplicate(input_dir, params, execution_cfg, out_dir)` is the stage's work, params the section as the stage
script resolved it (tokenmill.dedup.params.Dedup); see stage.py for the passes and the decisions it writes.
minhash.py holds the vectorised signatures and LSH parameters, cluster.py the DuckDB steps over Parquet,
text.py the exact key and line hashes.
"""

from tokenmill.dedup.stage import lsh_shape, deduplicate

__all__ = ["lsh_shape", "deduplicate"]
