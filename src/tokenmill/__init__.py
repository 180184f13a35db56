"""tokenmill: a reproducible LLM-pretraining pipeline on DVC stages with per-document lineage in DuckDB."""

import os as _os

if _os.environ.get("TOKENMILL_TRACE_DIR"):
    # Only for the dependency test: record what each stage process imports and reads (tokenmill.trace).
    from tokenmill import trace as _trace

    _trace.start(_os.environ["TOKENMILL_TRACE_DIR"])
