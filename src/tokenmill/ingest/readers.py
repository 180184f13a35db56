"""Readers turn one source file into a stream of Records (and ReadErrors where a file breaks off).

A reader never drops anything silently: a record it cannot use is still yielded, with `drop` set, and a
file that cannot be read past some byte offset yields a ReadError naming the offset.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pyarrow.parquet as pq
import zstandard
from warcio.archiveiterator import ArchiveIterator

from tokenmill.ingest.text import Drop

CONTENT_RECORDS = ("response", "resource", "conversion")


@dataclass
class Record:
    locator: str  # byte offset (archives), line:N (JSONL), row:N (Parquet), file (text)
    record_type: str
    payload: bytes = b""  # what the payload digest is computed over
    payload_sha1: str = ""
    payload_bytes: int = 0
    url: str | None = None
    record_id: str | None = None
    crawl_date: str | None = None
    content_type: str | None = None
    text: str | None = None  # set by formats that already hold text
    drop: Drop | None = None  # set when the reader already knows this record is not a document

    def __post_init__(self):
        if not self.payload_sha1:
            self.payload_sha1 = hashlib.sha1(self.payload).hexdigest()
        if not self.payload_bytes:
            self.payload_bytes = len(self.payload)


@dataclass
class ReadError:
    offset: int
    error: str


def open_maybe_compressed(path: Path) -> io.BufferedIOBase:
    name = path.name.lower()
    if name.endswith(".gz"):
        return gzip.open(path, "rb")
    if name.endswith(".zst") or name.endswith(".zstd"):
        return io.BufferedReader(zstandard.ZstdDecompressor().stream_reader(open(path, "rb"), closefd=True))
    return open(path, "rb")


def read_archive(path: Path, max_payload_bytes: int, fmt: str = "warc") -> Iterator[Record | ReadError]:
    """WARC, WET and ARC files, gzipped per record or not (warcio converts ARC to WARC records)."""
    is_arc = fmt == "arc"
    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        # arc2warc also makes warcio try every record as WARC *and* ARC: only ARC sources need that.
        it = ArchiveIterator(fh, arc2warc=is_arc)
        offset, prev, errs = 0, None, 0
        try:
            for rec in it:
                if it.err_count != errs and prev is not None:
                    errs = it.err_count
                    yield ReadError(prev, "record not followed by a blank line: its Content-Length is wrong")
                # it.offset is where this record starts; get_record_offset() would consume the body.
                offset = it.offset
                record = _archive_record(rec, offset, max_payload_bytes, is_arc)
                yield record
                prev = offset
                if record.drop is not None and record.drop.reason == "truncated_record":
                    # Nothing after a truncated member can be located: say where the file broke off.
                    yield ReadError(offset, record.drop.detail)
                    return
        except Exception as exc:  # warcio raises several types for broken files; all mean "stop here"
            yield ReadError(int(it.offset), f"{type(exc).__name__}: {exc}")
            return
        if it.err_count != errs and prev is not None:
            yield ReadError(prev, "record not followed by a blank line: its Content-Length is wrong")
        if it.offset < size:
            yield ReadError(int(it.offset), f"unreadable after byte {it.offset} of {size}: the file ends inside a record")


def _archive_record(rec, offset: int, max_payload_bytes: int, is_arc: bool = False) -> Record:
    h = rec.rec_headers
    common = dict(locator=str(offset), record_type=rec.rec_type, url=h.get_header("WARC-Target-URI"),
                  record_id=None if is_arc else h.get_header("WARC-Record-ID"), crawl_date=h.get_header("WARC-Date"))
    if rec.rec_type not in CONTENT_RECORDS:
        block = rec.raw_stream.read()
        if rec.rec_type == "revisit":
            # A revisit has no body of its own: the content is the earlier capture it refers to.
            target = h.get_header("WARC-Refers-To-Target-URI") or h.get_header("WARC-Payload-Digest")
            return Record(payload=block, drop=Drop("revisit", f"refers to {target}"), **common)
        return Record(payload=block, drop=Drop("not_content", f"{rec.rec_type} record"), **common)

    if rec.http_headers is not None and rec.rec_type == "response":
        content_type = rec.http_headers.get_header("Content-Type")
        status = rec.http_headers.get_statuscode()
    else:
        content_type, status = h.get_header("Content-Type"), "200"
    common["content_type"] = content_type
    if rec.length and rec.length > max_payload_bytes:
        # Not read at all: the digest comes from the WARC header, which describes the same bytes.
        digest = h.get_header("WARC-Payload-Digest") or h.get_header("WARC-Block-Digest") or f"len:{rec.length}"
        return Record(payload_sha1=digest, payload_bytes=rec.length,
                      drop=Drop("oversized", f"{rec.length} bytes > max_payload_bytes={max_payload_bytes}"),
                      **common)
    payload = rec.content_stream().read()
    missing = getattr(rec.raw_stream, "limit", 0)
    if missing:
        # warcio stops quietly at the end of a truncated gzip member; the unread remainder gives it away.
        return Record(payload=payload, drop=Drop(
            "truncated_record", f"{missing} payload bytes missing from a {rec.length}-byte record (file ends inside it)"),
            **common)
    if status and status != "200":
        return Record(payload=payload, drop=Drop("http_status", str(status)), **common)
    return Record(payload=payload, **common)


def _field(obj: dict, dotted: str | None):
    if not dotted:
        return None
    for part in dotted.split("."):
        if not isinstance(obj, dict) or part not in obj:
            return None
        obj = obj[part]
    return obj


def _structured_record(row: dict, locator: str, payload: bytes, fields: dict, record_type: str,
                       max_payload_bytes: int) -> Record:
    text = _field(row, fields["text_field"])
    rec = Record(locator=locator, record_type=record_type, payload=payload,
                 url=_str(_field(row, fields["url_field"])), record_id=_str(_field(row, fields["id_field"])),
                 crawl_date=_str(_field(row, fields["date_field"])), content_type="text/plain")
    if not isinstance(text, str):
        rec.drop = Drop("malformed_record", f"field {fields['text_field']!r} missing or not a string")
    elif len(payload) > max_payload_bytes:
        rec.drop = Drop("oversized", f"{len(payload)} bytes > max_payload_bytes={max_payload_bytes}")
    else:
        rec.text = text
    return rec


def _str(value) -> str | None:
    return None if value is None else str(value)


def read_jsonl(path: Path, fields: dict, max_payload_bytes: int) -> Iterator[Record | ReadError]:
    line_no = 0
    try:
        with open_maybe_compressed(path) as f:
            for line_no, line in enumerate(f, start=1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except ValueError as exc:
                    yield Record(locator=f"line:{line_no}", record_type="jsonl", payload=line,
                                 drop=Drop("malformed_record", f"invalid JSON: {exc}"))
                    continue
                if not isinstance(row, dict):
                    yield Record(locator=f"line:{line_no}", record_type="jsonl", payload=line,
                                 drop=Drop("malformed_record", "JSON value is not an object"))
                    continue
                yield _structured_record(row, f"line:{line_no}", line, fields, "jsonl", max_payload_bytes)
    except (OSError, EOFError, zstandard.ZstdError) as exc:
        yield ReadError(line_no, f"{type(exc).__name__} after line {line_no}: {exc}")


def read_parquet_rows(path: Path, fields: dict, max_payload_bytes: int) -> Iterator[Record | ReadError]:
    pf = pq.ParquetFile(path)
    if fields["text_field"] not in pf.schema_arrow.names:
        raise ValueError(f"{path}: no column {fields['text_field']!r} (columns: {pf.schema_arrow.names})")
    row_no = 0
    for batch in pf.iter_batches(batch_size=4096):
        for row in batch.to_pylist():
            payload = json.dumps(row, sort_keys=True, default=str).encode()
            yield _structured_record(row, f"row:{row_no}", payload, fields, "parquet", max_payload_bytes)
            row_no += 1


def read_text_file(path: Path, max_payload_bytes: int) -> Iterator[Record | ReadError]:
    try:
        with open_maybe_compressed(path) as f:
            payload = f.read(max_payload_bytes + 1)
    except (OSError, EOFError, zstandard.ZstdError) as exc:
        yield ReadError(0, f"{type(exc).__name__}: {exc}")
        return
    rec = Record(locator="file", record_type="text", payload=payload, content_type="text/plain")
    if len(payload) > max_payload_bytes:
        rec.drop = Drop("oversized", f"more than max_payload_bytes={max_payload_bytes}")
    yield rec
