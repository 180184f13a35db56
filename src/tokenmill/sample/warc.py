"""Deterministic WARC/1.1 writing with warcio.

warcio stamps records with a random WARC-Record-ID and the current time unless told otherwise, so
both are derived here from the seed and the URL: the same build writes the same bytes.
"""

from __future__ import annotations

import io
import uuid
from datetime import datetime, timedelta
from email.utils import format_datetime
from pathlib import Path
from urllib.parse import urlsplit

from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

USER_AGENT = "tokenmill-sample/1.0 (+https://tokenmill.sample.invalid/bot)"


def record_id(seed: int, kind: str, url: str) -> str:
    return f"<urn:uuid:{uuid.uuid5(uuid.NAMESPACE_URL, f'tokenmill-sample:{seed}:{kind}:{url}')}>"


def warc_date(dt: datetime) -> str:
    return dt.strftime("%Y-%m-%dT%H:%M:%SZ")


class CrawlWriter:
    """Writes one WARC file: a warcinfo record, then request + response records per page."""

    def __init__(self, fh, name: str, seed: int, start: datetime, description: str):
        self.writer = WARCWriter(fh, gzip=True, warc_version="1.1")
        self.seed, self.clock = seed, start
        info = self.writer.create_warcinfo_record(
            name,
            {
                "software": "tokenmill.sample",
                "format": "WARC File Format 1.1",
                "conformsTo": "https://iipc.github.io/warc-specifications/specifications/warc-format/warc-1.1/",
                "isPartOf": f"tokenmill-sample-{seed}",
                "description": description,
                "robots": "classic",
            },
        )
        info.rec_headers.replace_header("WARC-Record-ID", record_id(seed, "warcinfo", name))
        info.rec_headers.replace_header("WARC-Date", warc_date(start))
        self.writer.write_record(info)

    def response(self, url: str, body: bytes, content_type: str):
        """The response record (not yet written) for a page fetched 3 seconds after the previous one."""
        self.clock += timedelta(seconds=3)
        date = warc_date(self.clock)
        http = StatusAndHeaders(
            "200 OK",
            [
                ("Date", format_datetime(self.clock, usegmt=True)),
                ("Server", "nginx"),
                ("Content-Type", content_type),
                ("Content-Length", str(len(body))),
                ("Connection", "close"),
            ],
            protocol="HTTP/1.1",
        )
        return self.writer.create_warc_record(
            url, "response", payload=io.BytesIO(body), length=len(body), http_headers=http,
            warc_headers_dict={"WARC-Record-ID": record_id(self.seed, "response", url), "WARC-Date": date},
        )

    def request(self, url: str, response) -> None:
        parts = urlsplit(url)
        target = parts.path + (f"?{parts.query}" if parts.query else "")
        http = StatusAndHeaders(
            f"GET {target} HTTP/1.1",
            [("Host", parts.netloc), ("User-Agent", USER_AGENT), ("Accept", "text/html,application/xhtml+xml"), ("Accept-Encoding", "identity")],
            is_http_request=True,
        )
        req = self.writer.create_warc_record(
            url, "request", payload=io.BytesIO(b""), length=0, http_headers=http,
            warc_headers_dict={
                "WARC-Record-ID": record_id(self.seed, "request", url),
                "WARC-Date": response.rec_headers.get_header("WARC-Date"),
                "WARC-Concurrent-To": response.rec_headers.get_header("WARC-Record-ID"),
            },
        )
        self.writer.write_record(req)

    def page(self, url: str, body: bytes, content_type: str, with_request: bool = True) -> None:
        resp = self.response(url, body, content_type)
        if with_request:
            self.request(url, resp)
        self.writer.write_record(resp)


def write_crawl(path: Path, pages: list[tuple[str, bytes, str]], seed: int, start: datetime) -> None:
    """pages: (url, html bytes, Content-Type)."""
    with open(path, "wb") as fh:
        w = CrawlWriter(fh, path.name, seed, start, "Synthetic crawl of web-like pages built from the local Python installation")
        for url, body, ctype in pages:
            w.page(url, body, ctype)


def write_truncated(path: Path, pages: list[tuple[str, bytes, str]], seed: int, start: datetime) -> int:
    """Complete response records for all pages but the last, whose gzip member is cut to half its
    bytes, so the file ends in the middle of a member (as a crawl killed mid-write leaves it).
    Returns the byte offset where the truncated member starts."""
    buf = io.BytesIO()
    w = CrawlWriter(buf, path.name, seed, start, "Crawl file whose last record was cut short")
    for url, body, ctype in pages[:-1]:
        w.page(url, body, ctype, with_request=False)
    offset = buf.tell()
    w.page(*pages[-1], with_request=False)
    data = buf.getvalue()
    cut = offset + (len(data) - offset) // 2
    path.write_bytes(data[:cut])
    return offset
