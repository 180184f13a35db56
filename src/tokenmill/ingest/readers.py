"""Readers turn one source file into a stream of Records (and ReadErrors where a file breaks off).

A reader never drops anything silently: a record it cannot use is still yielded, with `drop` set, and a
file that cannot be read past some byte offset yields a ReadError naming the offset.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import mmap
import os
import re
import zlib
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


class _Iterator(ArchiveIterator):
    # warcio prints a warning to stderr for every record whose Content-Length is off; the reader records
    # those records as malformed itself, so the print is only noise (thousands of lines on a damaged crawl).
    INC_RECORD = ""


# Where a record can start, for resuming after a damaged one: a gzip member header (checked by decompressing
# it), a WARC version line (anywhere: garbage before a record need not end with a newline), or an ARC v1
# header line at the start of a line in an uncompressed file.
_GZIP_MAGIC = b"\x1f\x8b\x08"
_WARC_START = re.compile(rb"WARC/\d+\.\d+\r?\n")
_ARC_START = re.compile(rb"(?<=\n)\S+ \d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3} \d{14} ")
_ARC_HEAD = re.compile(rb"\S+ \d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3} \d{14} ")


class _Boundaries:
    """Finds record starts in an archive file (memory-mapped: only the pages searched are read)."""

    def __init__(self, fh, gz: bool, is_arc: bool):
        self.mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        self.gz, self.is_arc = gz, is_arc

    def close(self) -> None:
        self.mm.close()

    def head(self, offset: int, n: int = 1024) -> bytes:  # an ARC header line holds the whole URL
        """The first bytes of the record starting at `offset`, decompressed for gzip files."""
        if not self.gz:
            return self.mm[offset:offset + n]
        try:
            return zlib.decompressobj(31).decompress(self.mm[offset:offset + 8192], n)
        except zlib.error:
            return b""

    def is_record_start(self, offset: int) -> bool:
        head = self.head(offset)
        return head.startswith(b"WARC/") or (self.is_arc and _ARC_HEAD.match(head) is not None)

    def next_after(self, offset: int) -> int | None:
        """The first record start after `offset`, or None."""
        pos = offset + 1
        while pos < len(self.mm):
            if self.gz:
                i = self.mm.find(_GZIP_MAGIC, pos)
            else:
                found = [m.start() for r in ((_WARC_START, _ARC_START) if self.is_arc else (_WARC_START,))
                         if (m := r.search(self.mm, pos))]
                i = min(found) if found else -1
            if i < 0:
                return None
            if self.is_record_start(i):
                return i
            pos = i + 1
        return None

    def sha1(self, start: int, end: int | None, limit: int) -> tuple[str, int]:
        """Digest and size of the raw bytes of a damaged record (at most `limit` bytes are hashed)."""
        end = len(self.mm) if end is None else end
        return hashlib.sha1(self.mm[start:min(end, start + limit)]).hexdigest(), end - start


def _header_problem(rec, is_arc: bool) -> str | None:
    """Why a WARC record's header cannot be trusted to frame it, or None. ARC framing is checked by warcio."""
    if is_arc:
        return None
    h = rec.rec_headers
    if not h.get_header("WARC-Type"):
        return "no WARC-Type header"
    length = h.get_header("Content-Length")
    if length is None:
        return "no Content-Length header"
    if not length.strip().isdigit() or len(length.strip()) > 18:  # digits only, and it must fit an int64
        return f"Content-Length is not a byte count: {length.strip()[:40]!r}"
    return None


def _malformed(record: Record, detail: str) -> Record:
    record.drop = Drop("malformed_record", detail)
    return record


def read_archive(path: Path, max_payload_bytes: int, fmt: str = "warc") -> Iterator[Record | ReadError]:
    """WARC, WET and ARC files, gzipped per record or not (warcio converts ARC to WARC records).

    A record whose header is damaged (Content-Length missing, not a number, too long or too short; no
    WARC-Type; headers that do not parse) is a `malformed_record` drop at its offset, and reading resumes at
    the next record start; bytes that belong to no record are a ReadError at their offset.
    """
    is_arc = fmt == "arc"
    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        if size == 0:
            return  # ingest_file reports a file that yields nothing as empty_file
        gz = path.name.lower().endswith(".gz") or fh.read(2) == _GZIP_MAGIC[:2]
        bounds = _Boundaries(fh, gz, is_arc)
        try:
            start: int | None = 0
            while start is not None:
                start = yield from _read_from(fh, start, size, bounds, max_payload_bytes, is_arc)
        finally:
            bounds.close()


def _read_from(fh, start: int, size: int, bounds: _Boundaries, max_payload_bytes: int, is_arc: bool):
    """Read records from `start` until the end or the first damage; returns where to resume (or None).

    A record is yielded only once the next one has been located: warcio notices a wrong Content-Length
    (the record is not followed by a blank line) while moving to the next record.
    """
    fh.seek(start)
    # arc2warc also makes warcio try every record as WARC *and* ARC: only ARC sources need that.
    it = _Iterator(fh, arc2warc=is_arc)
    pending: Record | None = None
    errs = 0
    try:
        for rec in it:
            if pending is not None:
                if it.err_count != errs:
                    yield _malformed(pending, "wrong Content-Length: the record is not followed by a blank line")
                    return bounds.next_after(int(pending.locator))
                yield pending
                pending = None
            offset = int(it.offset)  # where this record starts; get_record_offset() would consume the body
            problem = _header_problem(rec, is_arc)
            if problem is None:
                try:
                    record = _archive_record(rec, offset, max_payload_bytes, is_arc)
                except Exception as exc:  # damaged chunked or gzip content-encoding, bad HTTP headers, ...
                    problem = " ".join(f"{type(exc).__name__}: {exc}".split())
            if problem is not None:
                # Its length cannot be trusted, so neither can its content: the digest covers its raw bytes
                # up to the next record start.
                resume = bounds.next_after(offset)
                digest, nbytes = bounds.sha1(offset, resume, max_payload_bytes)
                yield Record(locator=str(offset), record_type=rec.rec_type or "unknown",
                             url=rec.rec_headers.get_header("WARC-Target-URI"),
                             record_id=None if is_arc else rec.rec_headers.get_header("WARC-Record-ID"),
                             payload_sha1=digest, payload_bytes=nbytes, drop=Drop("malformed_record", problem))
                return resume
            if record.drop is not None and record.drop.reason == "truncated_record":
                resume = bounds.next_after(offset)
                if resume is not None:
                    # More records follow, so the file did not end inside this one: its length is wrong.
                    yield _malformed(record, f"Content-Length longer than the record ({record.drop.detail})")
                    return resume
                # Nothing after a truncated member can be located: say where the file broke off.
                yield record
                yield ReadError(offset, record.drop.detail)
                return None
            pending = record
    except Exception as exc:  # warcio raises several types for broken files; all mean "stop here"
        where = int(it.offset)
        if pending is not None:
            if it.err_count != errs:
                yield _malformed(pending, "wrong Content-Length: the record is not followed by a blank line")
                return bounds.next_after(int(pending.locator))
            yield pending
        error = " ".join(f"{type(exc).__name__}: {exc}".split())
        resume = bounds.next_after(where)
        if bounds.is_record_start(where):
            # A record starts here but its header does not parse: a malformed record, not lost bytes.
            digest, nbytes = bounds.sha1(where, resume, max_payload_bytes)
            yield Record(locator=str(where), record_type="unknown", payload_sha1=digest, payload_bytes=nbytes,
                         drop=Drop("malformed_record", error))
        else:
            yield ReadError(where, error if resume is None else f"{error} (bytes skipped up to {resume})")
        return resume
    if pending is not None:
        if it.err_count != errs:
            yield _malformed(pending, "wrong Content-Length: the record is not followed by a blank line")
            return bounds.next_after(int(pending.locator))
        yield pending
    if it.offset < size:
        yield ReadError(int(it.offset), f"unreadable after byte {it.offset} of {size}: the file ends inside a record")
    return None


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


# What a damaged compressed stream raises: gzip (OSError, EOFError, zlib.error) and zstandard.
STREAM_ERRORS = (OSError, EOFError, zlib.error, zstandard.ZstdError)


def read_jsonl(path: Path, fields: dict, max_payload_bytes: int) -> Iterator[Record | ReadError]:
    line_no = 0
    try:
        with open_maybe_compressed(path) as f:
            for line_no, line in enumerate(f, start=1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except (ValueError, RecursionError) as exc:  # bad JSON or bytes; nesting too deep to parse
                    yield Record(locator=f"line:{line_no}", record_type="jsonl", payload=line,
                                 drop=Drop("malformed_record", f"invalid JSON: {type(exc).__name__}: {exc}"[:500]))
                    continue
                if not isinstance(row, dict):
                    yield Record(locator=f"line:{line_no}", record_type="jsonl", payload=line,
                                 drop=Drop("malformed_record", "JSON value is not an object"))
                    continue
                yield _structured_record(row, f"line:{line_no}", line, fields, "jsonl", max_payload_bytes)
    except STREAM_ERRORS as exc:
        yield ReadError(line_no, f"{type(exc).__name__} after line {line_no}: {exc}")


def read_parquet_rows(path: Path, fields: dict, max_payload_bytes: int) -> Iterator[Record | ReadError]:
    """Rows of a Parquet file. Offsets in read errors are row numbers (as line numbers are for JSONL).

    A file that is not Parquet, or has no text column, is one read error; a row group that cannot be
    decoded is a read error at the first row not read, and reading goes on with the next row group.
    """
    try:
        pf = pq.ParquetFile(path)
        names = pf.schema_arrow.names
    except Exception as exc:  # pyarrow raises ArrowInvalid, OSError, ... for files that are not Parquet
        yield ReadError(0, f"not a readable Parquet file: {type(exc).__name__}: {exc}")
        return
    if fields["text_field"].split(".")[0] not in names:
        yield ReadError(0, f"no column {fields['text_field']!r} (columns: {', '.join(names)})")
        return
    row_no = 0
    for group in range(pf.metadata.num_row_groups):
        first, rows_in_group = row_no, pf.metadata.row_group(group).num_rows
        try:
            for batch in pf.iter_batches(batch_size=4096, row_groups=[group]):
                for row in batch.to_pylist():
                    payload = json.dumps(row, sort_keys=True, default=str).encode()
                    yield _structured_record(row, f"row:{row_no}", payload, fields, "parquet", max_payload_bytes)
                    row_no += 1
        except Exception as exc:  # a damaged page: the other row groups do not depend on it
            yield ReadError(row_no, f"row group {group} unreadable from row {row_no}: {type(exc).__name__}: {exc}")
            row_no = first + rows_in_group


def read_text_file(path: Path, max_payload_bytes: int) -> Iterator[Record | ReadError]:
    try:
        with open_maybe_compressed(path) as f:
            payload = f.read(max_payload_bytes + 1)
    except STREAM_ERRORS as exc:
        yield ReadError(0, f"{type(exc).__name__}: {exc}")
        return
    rec = Record(locator="file", record_type="text", payload=payload, content_type="text/plain")
    if len(payload) > max_payload_bytes:
        rec.drop = Drop("oversized", f"more than max_payload_bytes={max_payload_bytes}")
    yield rec
