"""Ingest on broken and awkward inputs built here (warcio's WARCWriter plus raw bytes).

What is checked each time: the stage finishes, good records are kept, every bad one has a drop decision
with the expected reason or a read_errors row saying where its file broke off, and conservation holds
(every record has exactly one decision; kept decisions are the documents; manifest in = kept + dropped).
"""

from __future__ import annotations

import gzip
import json
import random
import resource
import tracemalloc

import pytest

from tokenmill.ingest import SourceError

GOOD = b"<html><body><p>Hello world, this is a perfectly good page with plenty of ordinary text in it.</p></body></html>"
GOOD_TEXT = "Hello world, this is a perfectly good page with plenty of ordinary text in it."

CP1252_TEXT = "Caf\u00e9 cr\u00e8me br\u00fbl\u00e9e \u2014 \u201cquoted\u201d na\u00efve fa\u00e7ade, \u20ac5 d\u00e9j\u00e0 vu."
SJIS_TEXT = ("\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3067\u3059\u3002"
             "\u3053\u3093\u306b\u3061\u306f\u4e16\u754c\u3002")  # 日本語のテキストです。こんにちは世界。


def page(url, body=GOOD, content_type="text/html", status="200 OK", extra_headers=()):
    return {"url": url, "body": body, "content_type": content_type, "status": status,
            "extra_headers": list(extra_headers)}


def warc_source(path, name="bad", fmt="warc"):
    return {name: {"format": fmt, "paths": [str(path)], "bucket": "web", "licence": "test"}}


def by_url(out) -> dict[str, dict]:
    return {r["url"]: r for r in out.joined()}


def texts_by_url(out) -> dict[str, str]:
    return {d["url"]: d["text"] for d in out.documents}


# ---------------------------------------------------------------------------------------------------------
# Malformed archives: reading stops, the read_errors row says where, what came before is kept


@pytest.mark.parametrize("garbage", [
    bytes(range(1, 256)) * 4,
    b"NOT-A-WARC-RECORD\r\n\r\n" + bytes(range(1, 256)),
    pytest.param(b"this is not a WARC record\r\n\r\n" + bytes(range(1, 256)) * 4, id="arc-like-line"),
], ids=["binary", "text-line", "arc-like-line"])
def test_garbage_after_good_records(tmp_path, warc_builder, ingest, conservation, garbage):
    path = warc_builder(tmp_path / "in" / "garbage.warc.gz", [page("http://a/1"), page("http://a/2")])
    good_end = path.stat().st_size
    with open(path, "ab") as f:
        f.write(garbage)

    out = ingest(warc_source(path))
    conservation(out)
    rows = by_url(out)
    assert {u: (r["action"], r["reason"]) for u, r in rows.items()} == {
        "http://a/1": ("keep", "extracted"), "http://a/2": ("keep", "extracted")}
    assert texts_by_url(out)["http://a/1"] == GOOD_TEXT
    assert [(e["file"], e["offset"]) for e in out.read_errors] == [("garbage.warc.gz", good_end)]
    assert out.read_errors[0]["error"]


@pytest.mark.parametrize("compressed", [False, True], ids=["warc", "warc.gz"])
def test_broken_version_line(tmp_path, warc_builder, ingest, conservation, compressed):
    records = [warc_builder.record(page(f"http://a/{i}"), i, gzip=False) for i in range(3)]
    assert records[1].startswith(b"WARC/1.")
    records[1] = b"WRAC/1.1" + records[1][len(b"WARC/1.1"):]  # broken version line, same length
    if compressed:
        records = [gzip.compress(r, mtime=0) for r in records]
    path = tmp_path / "in" / ("broken.warc.gz" if compressed else "broken.warc")
    path.parent.mkdir()
    path.write_bytes(b"".join(records))

    out = ingest(warc_source(path))
    conservation(out)
    # "WRAC" starts no record: its bytes are a read error where they start, and reading resumes at the
    # next record, which is kept like the one before
    assert [(r["url"], r["locator"], r["action"]) for r in out.joined()] == [
        ("http://a/0", "0", "keep"), ("http://a/2", str(len(records[0]) + len(records[1])), "keep")]
    assert [(e["file"], e["offset"]) for e in out.read_errors] == [(path.name, len(records[0]))]


def test_file_cut_inside_a_gzip_member_is_reported(tmp_path, warc_builder, ingest, conservation):
    members = [warc_builder.record(page(f"http://a/{i}"), i, gzip=True) for i in range(3)]
    data = b"".join(members)
    cut = len(members[0]) + len(members[1]) // 2  # half-way through the second record's member
    path = tmp_path / "in" / "cut.warc.gz"
    path.parent.mkdir()
    path.write_bytes(data[:cut])

    out = ingest(warc_source(path))
    conservation(out)
    assert by_url(out)["http://a/0"]["action"] == "keep"
    # the second record was not read: the file must say where it broke off
    assert [(e["file"], e["offset"]) for e in out.read_errors] == [("cut.warc.gz", len(members[0]))]


def _content_length(record: bytes, value: bytes | None) -> bytes:
    """The record with its WARC Content-Length value replaced (or the header removed when value is None)."""
    head, sep, rest = record.partition(b"Content-Length: ")
    n, crlf, tail = rest.partition(b"\r\n")
    return head + tail if value is None else head + sep + value + crlf + tail


def _n(record: bytes) -> int:
    return int(record.partition(b"Content-Length: ")[2].partition(b"\r\n")[0])


HEADER_DAMAGE = {
    "30-bytes-short": lambda r: _content_length(r, str(_n(r) - 30).encode()),
    "30-bytes-long": lambda r: _content_length(r, str(_n(r) + 30).encode()),
    "not-a-number": lambda r: _content_length(r, b"abc"),
    "negative": lambda r: _content_length(r, b"-5"),
    "beyond-int64": lambda r: _content_length(r, b"99999999999999999999"),
    "missing": lambda r: _content_length(r, None),
    "no-warc-type": lambda r: r.replace(b"WARC-Type: response\r\n", b"", 1),
    "header-line-without-colon": lambda r: r.replace(b"WARC-Type: response", b"WARC-Type response", 1),
}


@pytest.mark.parametrize("compressed", [False, True], ids=["warc", "warc.gz"])
@pytest.mark.parametrize("damage", sorted(HEADER_DAMAGE))
def test_damaged_header_is_a_malformed_record_and_reading_resumes(tmp_path, warc_builder, ingest, conservation,
                                                                   damage, compressed):
    records = [warc_builder.record(page(f"http://a/{i}"), i, gzip=False) for i in range(3)]
    records[1] = HEADER_DAMAGE[damage](records[1])
    if compressed:
        records = [gzip.compress(r, mtime=0) for r in records]
    path = tmp_path / "in" / ("h.warc.gz" if compressed else "h.warc")
    path.parent.mkdir()
    path.write_bytes(b"".join(records))

    out = ingest(warc_source(path))
    conservation(out)
    starts = [0, len(records[0]), len(records[0]) + len(records[1])]
    got = [(r["locator"], r["action"], r["reason"]) for r in out.joined()]
    # the damaged record is a drop at its own offset, and the valid records on both sides are read whole
    assert got == [("0", "keep", "extracted"), (str(starts[1]), "drop", "malformed_record"),
                   (str(starts[2]), "keep", "extracted")]
    assert texts_by_url(out) == {"http://a/0": GOOD_TEXT, "http://a/2": GOOD_TEXT}
    assert json.loads(out.joined()[1]["details"])["error"]
    assert out.read_errors == []


# ---------------------------------------------------------------------------------------------------------
# Payloads that are not documents, and charsets: one WARC, one ingest, one check per case

CASES = {
    # url: (page, expected action, expected reason)
    "http://x/nul": (page("http://x/nul", b"<html><body>abc\x00\x01\x02def</body></html>"), "drop", "binary_payload"),
    "http://x/png": (page("http://x/png", b"\x89PNG\r\n\x1a\n" + bytes(64), "image/png"),
                     "drop", "unsupported_content_type"),
    # bytes that are undefined in windows-1252 and invalid as UTF-8, with no charset anywhere
    "http://x/undecodable": (page("http://x/undecodable", bytes([0x81, 0x8D, 0x8F, 0x90, 0x9D]) * 200, "text/html"),
                             "drop", "undecodable"),
    "http://x/empty": (page("http://x/empty", b""), "drop", "empty_text"),
    "http://x/script-only": (page("http://x/script-only", b"<html><body><script>var a = 1;</script></body></html>"),
                             "drop", "empty_text"),
    "http://x/404": (page("http://x/404", GOOD, status="404 Not Found"), "drop", "http_status"),
    "http://x/cp1252-header": (
        page("http://x/cp1252-header",
             f"<html><body><p>{CP1252_TEXT}</p></body></html>".encode("cp1252"), "text/html; charset=windows-1252"),
        "keep", "extracted"),
    "http://x/cp1252-undeclared": (
        page("http://x/cp1252-undeclared", f"<html><body><p>{CP1252_TEXT}</p></body></html>".encode("cp1252")),
        "keep", "extracted"),
    "http://x/sjis-meta": (
        page("http://x/sjis-meta", (f'<html><head><meta charset="shift_jis"><title>t</title></head>'
                                    f"<body><p>{SJIS_TEXT}</p></body></html>").encode("shift_jis")),
        "keep", "extracted"),
    "http://x/good": (page("http://x/good"), "keep", "extracted"),
}


@pytest.fixture(scope="module")
def payload_cases(tmp_path_factory, warc_builder, ingest_in):
    d = tmp_path_factory.mktemp("payloads")
    path = warc_builder(d / "in" / "payloads.warc.gz", [p for p, _, _ in CASES.values()])
    return ingest_in(d, warc_source(path))


def test_payload_cases_conserved(payload_cases, conservation):
    conservation(payload_cases)
    assert len(payload_cases.records) == len(CASES)
    assert payload_cases.read_errors == []


@pytest.mark.parametrize("url", sorted(CASES))
def test_payload_case(payload_cases, url, conservation):
    conservation(payload_cases)
    _, action, reason = CASES[url]
    row = by_url(payload_cases)[url]
    assert (row["action"], row["reason"]) == (action, reason)


def test_http_status_detail_names_the_status(payload_cases, conservation):
    conservation(payload_cases)
    assert json.loads(by_url(payload_cases)["http://x/404"]["details"]) == {"error": "404"}


@pytest.mark.parametrize("url, text, charset", [
    ("http://x/cp1252-header", CP1252_TEXT, "cp1252"),
    ("http://x/cp1252-undeclared", CP1252_TEXT, "cp1252"),
    ("http://x/sjis-meta", SJIS_TEXT, "shift_jis"),
])
def test_charset_decoded_and_recorded(payload_cases, url, text, charset, conservation):
    conservation(payload_cases)
    doc = next(d for d in payload_cases.documents if d["url"] == url)
    assert doc["text"] == text
    assert doc["charset"] == charset


# ---------------------------------------------------------------------------------------------------------
# A 50 MB page: dropped as oversized without being read into memory

def _raw_response(f, url: str, body_chunks, body_len: int) -> None:
    """Write one uncompressed WARC response record by hand, streaming its body."""
    http = f"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {body_len}\r\n\r\n".encode()
    f.write((f"WARC/1.1\r\nWARC-Type: response\r\nWARC-Target-URI: {url}\r\n"
             f"WARC-Date: 2024-01-01T00:00:00Z\r\nWARC-Record-ID: <urn:uuid:{abs(hash(url)) % 10**12:012d}>\r\n"
             f"Content-Type: application/http; msgtype=response\r\n"
             f"Content-Length: {len(http) + body_len}\r\n\r\n").encode())
    f.write(http)
    for chunk in body_chunks:
        f.write(chunk)
    f.write(b"\r\n\r\n")


def test_fifty_megabyte_page_dropped_oversized_without_reading_it(tmp_path, ingest, warc_builder, conservation):
    size = 50 * 1024 * 1024
    para = b"<p>" + b"lorem ipsum dolor sit amet " * 36 + b"</p>\n"
    chunk = para * ((1 << 20) // len(para))

    def body():
        left = size
        while left > 0:
            yield chunk[:left]
            left -= min(left, len(chunk))

    path = tmp_path / "in" / "big.warc"
    path.parent.mkdir()
    with open(path, "wb") as f:
        _raw_response(f, "http://big/before", [GOOD], len(GOOD))
        _raw_response(f, "http://big/huge", body(), size)
        _raw_response(f, "http://big/after", [GOOD], len(GOOD))
    assert path.stat().st_size > size

    # Warm up first, so that imports and caches do not count as the stage's memory.
    ingest(warc_source(warc_builder(tmp_path / "warm" / "w.warc.gz", [page("http://w/1")])), "warmup")
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    tracemalloc.start()
    try:
        out = ingest(warc_source(path))  # ingest_cfg {}: the default max_payload_bytes (10 MB) applies
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    rss_growth_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before) / 1024

    conservation(out)
    rows = by_url(out)
    assert (rows["http://big/huge"]["action"], rows["http://big/huge"]["reason"]) == ("drop", "oversized")
    assert rows["http://big/huge"]["payload_bytes"] > size
    assert "max_payload_bytes=10000000" in json.loads(rows["http://big/huge"]["details"])["error"]
    assert rows["http://big/before"]["action"] == rows["http://big/after"]["action"] == "keep"
    assert out.read_errors == []
    assert peak < 10 * 1024 * 1024, f"ingest allocated {peak / 2**20:.1f} MiB at peak for a 50 MiB page"
    assert rss_growth_mb < 25, f"peak RSS grew by {rss_growth_mb:.1f} MiB"


# ---------------------------------------------------------------------------------------------------------
# JSONL


def test_jsonl_bad_lines_dropped_rest_kept(tmp_path, ingest, conservation):
    lines = [json.dumps({"id": f"d{i}", "text": f"Document number {i} has some text.", "url": f"http://j/{i}"})
             for i in range(4)]
    lines.insert(1, '{"id": "broken", "text": "no closing quote}')
    lines.insert(3, json.dumps({"id": "no-text", "url": "http://j/no-text", "body": "elsewhere"}))
    lines.insert(4, "[1, 2, 3]")
    lines.insert(5, "")  # blank lines are not records
    path = tmp_path / "in" / "docs.jsonl"
    path.parent.mkdir()
    path.write_text("\n".join(lines) + "\n")

    out = ingest(warc_source(path, "j", "jsonl"))
    conservation(out)
    got = {r["locator"]: (r["record_id"], r["action"], r["reason"]) for r in out.joined()}
    assert got == {
        "line:1": ("d0", "keep", "extracted"),
        "line:2": (None, "drop", "malformed_record"),
        "line:3": ("d1", "keep", "extracted"),
        "line:4": ("no-text", "drop", "malformed_record"),
        "line:5": (None, "drop", "malformed_record"),
        "line:7": ("d2", "keep", "extracted"),
        "line:8": ("d3", "keep", "extracted"),
    }
    assert sorted(d["text"] for d in out.documents) == [f"Document number {i} has some text." for i in range(4)]
    assert out.read_errors == []


def test_truncated_jsonl_gz_reports_read_error(tmp_path, ingest, conservation):
    rng = random.Random(7)
    words = ["alpha", "beta", "gamma", "delta", "epsilon"]
    rows = [{"id": f"b{i}", "text": " ".join(f"{rng.choice(words)}{rng.randrange(10**6)}" for _ in range(200))}
            for i in range(200)]
    data = gzip.compress(("\n".join(json.dumps(r) for r in rows) + "\n").encode(), mtime=0)
    path = tmp_path / "in" / "cut.jsonl.gz"
    path.parent.mkdir()
    path.write_bytes(data[: len(data) // 2])

    out = ingest(warc_source(path, "j", "jsonl"))
    conservation(out)
    assert 0 < len(out.documents) < len(rows)
    # whatever was kept is whole: the complete lines before the cut, in order
    kept = sorted(out.documents, key=lambda d: int(d["locator"].split(":")[1]))
    assert [(d["record_id"], d["text"]) for d in kept] == [(r["id"], r["text"]) for r in rows[: len(kept)]]
    assert all(d["action"] == "keep" for d in out.decisions)
    assert len(out.read_errors) == 1
    err = out.read_errors[0]
    assert err["file"] == "cut.jsonl.gz" and err["source"] == "j"
    assert err["offset"] == len(kept)  # for JSONL the offset is the last line read whole
    assert "EOFError" in err["error"]


# ---------------------------------------------------------------------------------------------------------
# Declarations that cannot be ingested fail fast, with one line naming the source


def _nothing_written(tmp_path):
    assert not (tmp_path / "ingest").exists()
    assert not (tmp_path / "metrics").exists()


def test_glob_matching_nothing_is_a_source_error(tmp_path, ingest):
    pattern = str(tmp_path / "nowhere" / "*.warc.gz")
    with pytest.raises(SourceError) as exc:
        ingest({"ghost_crawl": {"format": "warc", "paths": [pattern], "bucket": "web", "licence": "x"}})
    msg = str(exc.value)
    assert "\n" not in msg and "ghost_crawl" in msg and pattern in msg
    _nothing_written(tmp_path)


def test_one_glob_of_several_matching_nothing_is_a_source_error(tmp_path, ingest, warc_builder):
    good = warc_builder(tmp_path / "in" / "a.warc.gz", [page("http://a/1")])
    typo = str(tmp_path / "in" / "*.wrac.gz")
    with pytest.raises(SourceError) as exc:
        ingest({"half": {"format": "warc", "paths": [str(good), typo], "bucket": "web", "licence": "x"}})
    assert "\n" not in str(exc.value) and "half" in str(exc.value) and typo in str(exc.value)


def test_unknown_format_is_a_source_error(tmp_path, ingest, warc_builder):
    good = warc_builder(tmp_path / "in" / "a.warc.gz", [page("http://a/1")])
    with pytest.raises(SourceError) as exc:
        ingest({"odd_source": {"format": "warcx", "paths": [str(good)], "bucket": "web", "licence": "x"}})
    msg = str(exc.value)
    assert "\n" not in msg and "odd_source" in msg and "warcx" in msg
    _nothing_written(tmp_path)


@pytest.mark.parametrize("payload, label", [
    (b"\xef\xbb\xbf<html><body><p>Caf\xc3\xa9 cr\xc3\xa8me, a complete sentence here.</p></body></html>", "text/html"),
    (b"\xef\xbb\xbf<html><body><p>Caf\xc3\xa9 cr\xc3\xa8me, a complete sentence here.</p></body></html>",
     "text/html; charset=iso-8859-1"),
    ("\ufeff<html><body><p>Café crème, a complete sentence here.</p></body></html>".encode("utf-16-le"), "text/html"),
])
def test_byte_order_mark_wins_and_is_not_kept(payload, label):
    # WHATWG: a BOM outranks the declared charset; the BOM itself must not reach the text (it changes
    # exact-duplicate hashes and tokens).
    from tokenmill.ingest.text import payload_to_text

    text, charset, _ = payload_to_text(payload, label, "resiliparse")
    assert text == "Café crème, a complete sentence here."
    assert charset.startswith("utf")


def test_garbage_between_records_is_a_read_error_and_reading_resumes(tmp_path, warc_builder, ingest, conservation):
    records = [warc_builder.record(page(f"http://a/{i}"), i, gzip=False) for i in range(2)]
    junk = b"\r\n".join([b"this line is not a record", bytes(range(1, 256)), b"nor is this one"]) + b"\r\n"
    path = tmp_path / "in" / "junk.warc"
    path.parent.mkdir()
    path.write_bytes(records[0] + junk + records[1])

    out = ingest(warc_source(path))
    conservation(out)
    assert [(r["url"], r["locator"], r["action"]) for r in out.joined()] == [
        ("http://a/0", "0", "keep"), ("http://a/1", str(len(records[0]) + len(junk)), "keep")]
    assert [(e["offset"]) for e in out.read_errors] == [len(records[0])]


# ---------------------------------------------------------------------------------------------------------
# Files with nothing in them, text Parquet cannot store, files that are not what their source says


@pytest.mark.parametrize("name, content", [
    ("empty.warc.gz", b""), ("empty.warc", b""), ("empty.jsonl", b""), ("blank.jsonl", b"\n\n  \n"),
    ("empty.jsonl.gz", gzip.compress(b"", mtime=0)), ("empty.txt", b""),
])
def test_empty_file_is_a_read_error(tmp_path, ingest, warc_builder, conservation, name, content):
    fmt = {"warc": "warc", "jsonl": "jsonl", "txt": "text"}[name.split(".")[1]]
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / name).write_bytes(content)
    good = warc_builder(tmp_path / "in2" / "good.warc.gz", [page("http://a/1")])
    sources = {**warc_source(tmp_path / "in" / name, "e", fmt), **warc_source(good, "g")}

    out = ingest(sources)
    conservation(out)
    if fmt == "text" and not content:
        # a text file is one record, empty or not: an empty one is a drop with a reason
        assert [(r["source"], r["reason"]) for r in out.joined() if r["source"] == "e"] == [("e", "empty_text")]
        return
    assert [(e["source"], e["file"], e["offset"]) for e in out.read_errors] == [("e", name, 0)]
    assert out.read_errors[0]["error"].startswith("empty_file")
    assert {r["source"] for r in out.records} == {"g"}
    # every matched file is listed for the lineage's sources, including the one that yielded nothing
    assert sorted(out.manifest["source_files"]) == ["e:" + name, "g:good.warc.gz"]


def test_lone_surrogates_are_repaired_not_fatal(tmp_path, ingest, conservation):
    # Valid JSON, valid Python strings, not encodable as UTF-8: one such line used to abort the stage.
    lines = ['{"id": "a", "text": "before \\ud800 after, a sentence", "url": "http://j/\\udc00x"}',
             '{"id": "b", "text": "a proper pair \\ud83d\\ude00 stays", "url": "http://j/b"}',
             '{"id": "c\\udfff", "text": "\\ud800", "url": "http://j/c"}',
             '{"id": "d", "text": "plain text", "url": "http://j/d"}']
    path = tmp_path / "in" / "s.jsonl"
    path.parent.mkdir()
    path.write_text("\n".join(lines) + "\n")

    out = ingest(warc_source(path, "j", "jsonl"))
    conservation(out)
    rows = {r["locator"]: r for r in out.joined()}
    assert {k: (r["action"], r["reason"]) for k, r in rows.items()} == {
        "line:1": ("keep", "extracted"), "line:2": ("keep", "extracted"),
        "line:3": ("keep", "extracted"), "line:4": ("keep", "extracted")}
    texts = {d["record_id"]: d["text"] for d in out.documents}
    assert texts["a"] == "before \ufffd after, a sentence"
    assert texts["b"] == "a proper pair \U0001F600 stays"
    assert texts["c\ufffd"] == "\ufffd"
    assert rows["line:1"]["url"] == "http://j/\ufffdx"
    assert json.loads(rows["line:1"]["details"]) == {"repaired": "1 lone surrogate(s) replaced by U+FFFD"}
    assert rows["line:4"]["details"] is None


def _parquet(path, table):
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)
    return path


def test_file_that_is_not_parquet_is_a_read_error(tmp_path, ingest, conservation):
    import pyarrow as pa

    bad = tmp_path / "in" / "not.parquet"
    bad.parent.mkdir()
    bad.write_bytes(b'{"text": "this is JSON, not Parquet"}\n')
    good = _parquet(tmp_path / "in" / "good.parquet", pa.table({"text": ["one document", "another document"]}))

    out = ingest(warc_source(tmp_path / "in" / "*.parquet", "p", "parquet"))
    conservation(out)
    assert sorted(d["text"] for d in out.documents) == ["another document", "one document"]
    assert [(e["file"], e["offset"]) for e in out.read_errors] == [("not.parquet", 0)]
    assert "Parquet" in out.read_errors[0]["error"]
    assert good.exists()


def test_parquet_without_the_text_column_is_a_read_error(tmp_path, ingest, conservation):
    import pyarrow as pa

    _parquet(tmp_path / "in" / "wrong.parquet", pa.table({"body": ["x", "y"], "url": ["u1", "u2"]}))
    _parquet(tmp_path / "in" / "good.parquet", pa.table({"text": ["One good document beside it."]}))
    out = ingest(warc_source(tmp_path / "in" / "*.parquet", "p", "parquet"))
    conservation(out)
    assert [r["file"] for r in out.records] == ["good.parquet"]
    assert [(e["file"], e["offset"]) for e in out.read_errors] == [("wrong.parquet", 0)]
    assert "'text'" in out.read_errors[0]["error"] and "body" in out.read_errors[0]["error"]


def test_parquet_text_column_of_the_wrong_type_drops_each_row(tmp_path, ingest, conservation):
    import pyarrow as pa

    _parquet(tmp_path / "in" / "ints.parquet", pa.table({"text": [1, 2, 3]}))
    _parquet(tmp_path / "in" / "good.parquet", pa.table({"text": ["One good document beside it."]}))
    out = ingest(warc_source(tmp_path / "in" / "*.parquet", "p", "parquet"))
    conservation(out)
    assert [(r["locator"], r["reason"]) for r in out.joined() if r["file"] == "ints.parquet"] == [
        ("row:0", "malformed_record"), ("row:1", "malformed_record"), ("row:2", "malformed_record")]


def test_a_crawl_of_only_unreadable_files_stops_ingest_naming_them(tmp_path, ingest):
    """0 documents is not a result to hand on: four stages later it used to end in a traceback in quality that
    did not point back to the input. Ingest stops with one line naming each file and its first read error."""
    import pyarrow as pa

    _parquet(tmp_path / "in" / "wrong.parquet", pa.table({"body": ["x"]}))
    (tmp_path / "in" / "noise.parquet").write_bytes(b"\x00\x01not parquet at all" * 10)
    with pytest.raises(SourceError) as exc:
        ingest(warc_source(tmp_path / "in" / "*.parquet", "p", "parquet"))
    msg = str(exc.value)
    assert "\n" not in msg and msg.startswith("0 documents from 2 source files")
    assert "p:wrong.parquet (1 read errors, first: no column 'text'" in msg and "p:noise.parquet (1 read errors" in msg
    _nothing_written(tmp_path)


def test_damaged_parquet_row_group_is_a_read_error_and_the_others_are_read(tmp_path, ingest, conservation):
    import pyarrow as pa
    import pyarrow.parquet as pq

    texts = [f"document {i}" + " word" * 50 for i in range(30)]
    path = tmp_path / "in" / "groups.parquet"
    path.parent.mkdir()
    pq.write_table(pa.table({"text": texts}), path, row_group_size=10, compression="none")
    meta = pq.ParquetFile(path).metadata
    middle = meta.row_group(1).column(0)
    data = bytearray(path.read_bytes())
    start = middle.dictionary_page_offset if middle.has_dictionary_page else middle.data_page_offset
    data[start:start + middle.total_compressed_size] = b"\xff" * middle.total_compressed_size  # row group 1's pages
    path.write_bytes(bytes(data))

    out = ingest(warc_source(path, "p", "parquet"))
    conservation(out)
    assert sorted(d["text"] for d in out.documents) == sorted(texts[:10] + texts[20:])
    assert [(e["file"], e["offset"]) for e in out.read_errors] == [("groups.parquet", 10)]
