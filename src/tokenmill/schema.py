"""The one schema module: every table that travels between stages is defined here.

Stages exchange zstd Parquet shards. Keeping the Arrow schemas, the doc_id rule and the Parquet writer
in one place is what lets a later stage trust what an earlier one wrote (DESIGN.md, contracts 1-3).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Iterable, Mapping

import pyarrow as pa
import pyarrow.parquet as pq

from tokenmill.runtime import temporary

# Kept documents, with text. Later stages may change `text` (redaction, line removal) but never `doc_id`.
DOCUMENT = pa.schema(
    [
        ("doc_id", pa.string()),
        ("text", pa.large_string()),
        ("source", pa.string()),  # source name from the config
        ("bucket", pa.string()),  # web, code, reference, books, ...
        ("licence", pa.string()),
        ("snapshot", pa.string()),  # crawl snapshot or dataset version
        ("url", pa.string()),
        ("record_id", pa.string()),  # WARC-Record-ID, JSONL id, ... (null when the format has none)
        ("crawl_date", pa.string()),  # ISO 8601 as found in the source
        ("content_type", pa.string()),
        ("charset", pa.string()),  # the charset the payload was decoded with
        ("file", pa.string()),  # input file, relative to the source's root
        ("locator", pa.string()),  # where in the file: byte offset, line number or row index
    ]
)

# One row per record read at ingest, kept or not: the origin of every doc_id that exists.
RECORD = pa.schema(
    [
        ("doc_id", pa.string()),
        ("source", pa.string()),
        ("bucket", pa.string()),
        ("file", pa.string()),
        ("locator", pa.string()),
        ("record_type", pa.string()),  # response, request, resource, revisit, conversion, jsonl, text, ...
        ("url", pa.string()),
        ("record_id", pa.string()),
        ("crawl_date", pa.string()),
        ("content_type", pa.string()),
        ("payload_bytes", pa.int64()),
        ("payload_sha1", pa.string()),
    ]
)

# One row per input document per stage (contract 3). Scores are recorded for kept documents too.
DECISION = pa.schema(
    [
        ("doc_id", pa.string()),
        ("stage", pa.string()),
        ("action", pa.string()),  # keep / drop / modify
        ("reason", pa.string()),
        ("scores", pa.map_(pa.string(), pa.float64())),
        ("details", pa.string()),  # JSON object: duplicate_of, cluster_id, error text, ...
    ]
)

# Places where a file could not be read past some point: nothing after them was silently skipped.
READ_ERROR = pa.schema(
    [
        ("source", pa.string()),
        ("file", pa.string()),
        ("offset", pa.int64()),
        ("error", pa.string()),
    ]
)

ACTIONS = ("keep", "drop", "modify")


def make_doc_id(source: str, file: str, locator: str, payload_sha1: str) -> str:
    """doc_id = digest(source, locator in the file, payload digest), assigned once at ingest.

    The payload digest makes the id change when a record's content changes even if it sits at the same
    place; the locator keeps two identical payloads at different places distinct (exact duplicates are
    separate documents until dedup decides between them).
    """
    key = "\x00".join((source, file, locator, payload_sha1)).encode()
    return hashlib.blake2b(key, digest_size=12).hexdigest()


def decision(doc_id: str, stage: str, action: str, reason: str,
             scores: Mapping[str, float] | None = None, details: Mapping | None = None) -> dict:
    if action not in ACTIONS:
        raise ValueError(f"decision action must be one of {ACTIONS}, got {action!r}")
    return {
        "doc_id": doc_id,
        "stage": stage,
        "action": action,
        "reason": reason,
        "scores": sorted((scores or {}).items()),
        "details": json.dumps(details, sort_keys=True) if details else None,
    }


def write_parquet(rows: Iterable[dict] | pa.Table, schema: pa.Schema, path: Path | str) -> int:
    """Write rows atomically as one zstd Parquet file; returns the row count.

    Byte-identical for identical rows: no timestamps are written and row groups are fixed-size.
    """
    table = rows if isinstance(rows, pa.Table) else pa.Table.from_pylist(list(rows), schema=schema)
    if table.schema != schema:
        table = table.select(schema.names).cast(schema)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary(path)
    pq.write_table(table, tmp, compression="zstd", row_group_size=64 * 1024, write_statistics=True)
    os.replace(tmp, path)
    return table.num_rows


def read_parquet(paths: Iterable[Path | str], schema: pa.Schema, columns: list[str] | None = None) -> pa.Table:
    tables = [pq.read_table(p, columns=columns) for p in sorted(map(str, paths))]
    if not tables:
        s = schema if columns is None else pa.schema([schema.field(c) for c in columns])
        return s.empty_table()
    return pa.concat_tables(tables)
