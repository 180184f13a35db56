"""Fuzzing ingest with real files: WARC, WET, ARC, JSONL and Parquet from ../shared/data, damaged at random.

Every case is one real file with one kind of damage, made by a seeded random generator: truncation, byte flips,
edited or removed headers, wrong Content-Lengths, garbage between records, invalid bytes in payloads, lone
surrogates, wrong field types and wrong Parquet schemas. All cases go through one ingest run (two workers) and
then through filter, pii and dedup and the lineage. What must hold:
- nothing crashes: every stage finishes;
- conservation: every record has exactly one decision (conftest's helper), and the lineage verifies;
- fault isolation: every record the damage did not touch is read exactly as in the undamaged file (same
  payload digest, same decision), whatever happened before or after it;
- damaged headers are `malformed_record` drops and every read error has a non-negative offset.
"""

from __future__ import annotations

import gzip
import json
import random
import zlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

SEEDS = range(6)
ARCHIVES = {  # name: (path under ../shared/data/warc, format)
    "warcio": ("warcio_example.warc.gz", "warc"),
    "chunked": ("warcio_example-iana.org-chunked.warc", "warc"),
    "wget": ("webarchive-commons_IAH-urls-wget.warc.gz", "warc"),
    "cc": ("resiliparse_warcfile.warc.gz", "warc"),
    "whirlwind": ("cc_whirlwind/whirlwind.warc.gz", "warc"),
    "wet": ("cc_whirlwind/whirlwind.warc.wet.gz", "wet"),
    "arc": ("warcio_example.arc.gz", "arc"),
    "arc_excerpt": ("aut_arc_example.arc.gz", "arc"),  # its first 25 records
}
JSONL = ["dolma_cc_en_head-0091.jsonl.gz", "dolma_provided_documents_000.jsonl.gz"]
FIELDS = {"text_field": "text", "id_field": "id", "url_field": "metadata.url"}


@dataclass
class Case:
    name: str  # file name in the fuzz directory
    fmt: str
    kind: str  # the damage
    original: str  # file name of the undamaged twin (in the baseline directory)
    touched: list[tuple[int, int]] = field(default_factory=list)  # damaged byte ranges of the original
    header_damage: bool = False  # the damage is in one record's WARC header: expect malformed_record


# ---------------------------------------------------------------------------------------------------------
# Real inputs, split into records


def gzip_members(data: bytes) -> list[bytes]:
    """The gzip members of a file (each a record in a per-record gzipped archive), compressed."""
    out, pos = [], 0
    while pos < len(data):
        d = zlib.decompressobj(31)
        d.decompress(data[pos:])
        used = len(data) - pos - len(d.unused_data)
        out.append(data[pos:pos + used])
        pos += used
    return out


def plain_records(data: bytes) -> list[bytes]:
    """An uncompressed WARC split at its records (by re-reading with warcio, offsets from the iterator)."""
    import io

    from warcio.archiveiterator import ArchiveIterator

    it = ArchiveIterator(io.BytesIO(data))
    starts = []
    for _ in it:
        starts.append(it.offset)
    bounds = starts + [len(data)]
    return [data[a:b] for a, b in zip(bounds, bounds[1:])]


def real_inputs(shared: Path, base: Path) -> dict[str, tuple[str, list[bytes], bool]]:
    """name -> (format, records as byte strings, gzipped per record), written to `base` as undamaged files."""
    out = {}
    for key, (rel, fmt) in ARCHIVES.items():
        data = (shared / "warc" / rel).read_bytes()
        if rel.endswith(".gz"):
            members = gzip_members(data)
            if key == "arc_excerpt":
                members = members[:25]
            out[f"{key}.{fmt}.gz"] = (fmt, members, True)
            if fmt != "arc":  # the same records uncompressed: a second framing to damage
                out[f"{key}.{fmt}"] = (fmt, [gzip.decompress(m) for m in members], False)
        else:
            out[f"{key}.{fmt}"] = (fmt, plain_records(data), False)
    for name, (fmt, records, _) in out.items():
        (base / name).write_bytes(b"".join(records))
    return out


# ---------------------------------------------------------------------------------------------------------
# Damage


def _ranges(records: list[bytes]) -> list[tuple[int, int]]:
    starts = [0]
    for r in records:
        starts.append(starts[-1] + len(r))
    return list(zip(starts, starts[1:]))


def _edit_record(records: list[bytes], gz: bool, k: int, edit) -> list[bytes]:
    """records with record k's uncompressed bytes passed through `edit` (recompressed when gz)."""
    out = list(records)
    raw = gzip.decompress(records[k]) if gz else records[k]
    new = edit(raw)
    out[k] = gzip.compress(new, mtime=0) if gz else new
    return out


def _set_length(raw: bytes, rng: random.Random) -> bytes:
    head, sep, rest = raw.partition(b"Content-Length: ")
    n, crlf, tail = rest.partition(b"\r\n")
    choice = rng.choice(["delta", "junk", "negative", "huge", "empty"])
    value = {"delta": str(max(0, int(n) + rng.choice([-1, 1]) * rng.randint(1, 300))).encode(),
             "junk": b"12ab", "negative": b"-1", "huge": b"18446744073709551617", "empty": b""}[choice]
    return head + sep + value + crlf + tail


def _drop_header(raw: bytes, rng: random.Random) -> bytes:
    head, sep, body = raw.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    must = [i for i, line in enumerate(lines[1:], 1) if line.split(b":")[0] in (b"Content-Length", b"WARC-Type")]
    del lines[rng.choice(must)]
    return b"\r\n".join(lines) + sep + body


def _bad_bytes(raw: bytes, rng: random.Random) -> bytes:
    """Invalid UTF-8 and NULs over part of the payload, the length unchanged."""
    cut = len(raw) - 4
    start = rng.randint(len(raw) // 2, max(len(raw) // 2, cut - 16))
    junk = bytes(rng.choice([0x80, 0xC3, 0xFF, 0xFE, 0x00, 0xED, 0xA0]) for _ in range(16))
    return raw[:start] + junk[:max(0, cut - start)] + raw[start + len(junk[:max(0, cut - start)]):]


def archive_cases(inputs, rng_for) -> list[tuple[Case, bytes]]:
    cases = []
    for name, (fmt, records, gz) in inputs.items():
        data = b"".join(records)
        ranges = _ranges(records)
        content = [i for i, r in enumerate(records) if b"WARC-Type: response" in (gzip.decompress(r) if gz else r)
                   or fmt == "arc" and i > 0]
        for seed in SEEDS:
            rng = rng_for(name, seed)
            stem = f"{name.split('.')[0]}-s{seed}"
            ext = name[len(name.split('.')[0]):]
            cut = rng.randint(1, len(data) - 1)
            cases.append((Case(f"{stem}-truncated{ext}", fmt, "truncation", name, [(cut, len(data))]), data[:cut]))

            flipped = bytearray(data)
            spots = sorted(rng.sample(range(len(data)), rng.randint(1, 4)))
            for p in spots:
                flipped[p] ^= rng.randint(1, 255)
            cases.append((Case(f"{stem}-flipped{ext}", fmt, "byte flips", name, [(p, p + 1) for p in spots]),
                          bytes(flipped)))

            k = rng.randrange(len(records))
            junk = bytes(rng.randint(0, 255) for _ in range(rng.randint(1, 300)))
            at = ranges[k][0]
            cases.append((Case(f"{stem}-garbage{ext}", fmt, "garbage between records", name, []),
                          data[:at] + junk + data[at:]))

            k = rng.choice(content or range(len(records)))
            cases.append((Case(f"{stem}-badbytes{ext}", fmt, "invalid bytes in a payload", name, [ranges[k]]),
                          b"".join(_edit_record(records, gz, k, lambda r: _bad_bytes(r, rng)))))

            if fmt != "arc":  # WARC headers: a wrong or unreadable length, a missing header
                k = rng.randrange(1, len(records)) if len(records) > 1 else 0
                cases.append((Case(f"{stem}-length{ext}", fmt, "bad Content-Length", name, [ranges[k]], True),
                              b"".join(_edit_record(records, gz, k, lambda r: _set_length(r, rng)))))
                k = rng.randrange(len(records))
                cases.append((Case(f"{stem}-header{ext}", fmt, "header removed", name, [ranges[k]], True),
                              b"".join(_edit_record(records, gz, k, lambda r: _drop_header(r, rng)))))
    return cases


def jsonl_cases(lines_by_name: dict[str, list[bytes]], rng_for) -> list[tuple[Case, bytes]]:
    """JSONL damaged line by line, written plain or gzipped (compression after the damage)."""
    cases = []
    for name, lines in lines_by_name.items():
        ranges = _ranges(lines)
        for seed in SEEDS:
            rng = rng_for(name, seed)
            gz = seed % 2 == 1
            stem = f"{name.split('.')[0]}-s{seed}"

            def emit(kind, new_lines, touched):
                data = b"".join(new_lines)
                cases.append((Case(f"{stem}-{kind.replace(' ', '_')}.jsonl" + (".gz" if gz else ""), "jsonl", kind,
                                   name, touched), gzip.compress(data, mtime=0) if gz else data))

            data = b"".join(lines)
            cut = rng.randint(1, len(data) - 1)
            emit("truncation", [data[:cut]], [(cut, len(data))])
            flipped = bytearray(data)
            spots = sorted(rng.sample(range(len(data)), rng.randint(1, 4)))
            for p in spots:
                flipped[p] ^= rng.randint(1, 255)
            # (p, p + 2): a flipped newline also joins the next line to this one
            emit("byte flips", [bytes(flipped)], [(p, p + 2) for p in spots])

            k = rng.randrange(len(lines))
            row = json.loads(lines[k])
            variant = rng.choice(["surrogate-text", "surrogate-url", "surrogate-id"])
            if variant == "surrogate-text":
                row["text"] = row["text"][:50] + "\ud800" + row["text"][50:]
            elif variant == "surrogate-url":
                row.setdefault("metadata", {})["url"] = "http://x/\udc80"
            else:
                row["id"] = "\udfff" + str(row["id"])
            emit("lone surrogates", lines[:k] + [json.dumps(row).encode() + b"\n"] + lines[k + 1:], [ranges[k]])

            k = rng.randrange(len(lines))
            bad = lines[k][:40] + bytes([0xFF, 0xFE, 0x80]) + lines[k][43:]
            emit("invalid UTF-8", lines[:k] + [bad] + lines[k + 1:], [ranges[k]])

            k = rng.randrange(len(lines))
            row = json.loads(lines[k])
            row["text"] = rng.choice([None, 42, ["a", "list"], {"an": "object"}, True])
            emit("wrong field type", lines[:k] + [json.dumps(row).encode() + b"\n"] + lines[k + 1:], [ranges[k]])

            k = rng.randrange(len(lines) + 1)
            junk = rng.choice([b"[" * 200_000 + b"\n", b"\x00\x01\x02 not json\n", b'{"text": "unterminated\n',
                               b"[1, 2, 3]\n", b"\xef\xbb\xbf\xef\xbb\xbf{}\n"])
            emit("garbage line", lines[:k] + [junk] + lines[k:], [])
    return cases


def parquet_cases(rows: list[dict], rng_for) -> list[tuple[Case, bytes, str]]:
    """(case, bytes, expected outcome) for Parquet files with wrong schemas or damaged bytes."""
    import io

    def to_bytes(table, **kw) -> bytes:
        buf = io.BytesIO()
        pq.write_table(table, buf, **kw)
        return buf.getvalue()

    good = pa.Table.from_pylist([{"text": r["text"], "id": r["id"], "url": (r.get("metadata") or {}).get("url")}
                                 for r in rows])
    n = good.num_rows
    cases = [
        (Case("schema-no-text.parquet", "parquet", "wrong schema", "good.parquet"),
         to_bytes(good.drop_columns(["text"])), "read_error"),
        (Case("schema-text-int.parquet", "parquet", "wrong schema", "good.parquet"),
         to_bytes(good.set_column(0, "text", pa.array(range(n)))), "all_malformed"),
        (Case("schema-text-binary.parquet", "parquet", "wrong schema", "good.parquet"),
         to_bytes(good.set_column(0, "text", pa.array([b"\xff\xfe" + t.encode() for t in good["text"].to_pylist()],
                                                      pa.binary()))), "all_malformed"),
        (Case("schema-text-list.parquet", "parquet", "wrong schema", "good.parquet"),
         to_bytes(good.set_column(0, "text", pa.array([[t] for t in good["text"].to_pylist()]))), "all_malformed"),
        (Case("schema-empty.parquet", "parquet", "wrong schema", "good.parquet"),
         to_bytes(good.slice(0, 0)), "read_error"),
        (Case("not-parquet.parquet", "parquet", "not Parquet", "good.parquet"),
         b"".join(json.dumps(r).encode() + b"\n" for r in rows), "read_error"),
    ]
    data = to_bytes(good, row_group_size=4, compression="zstd")
    for seed in SEEDS:
        rng = rng_for("parquet", seed)
        cut = rng.randint(1, len(data) - 1)
        cases.append((Case(f"s{seed}-truncated.parquet", "parquet", "truncation", "good.parquet"), data[:cut],
                      "read_error"))
        flipped = bytearray(data)
        for p in rng.sample(range(len(data)), rng.randint(1, 4)):
            flipped[p] ^= rng.randint(1, 255)
        cases.append((Case(f"s{seed}-flipped.parquet", "parquet", "byte flips", "good.parquet"), bytes(flipped),
                      "any"))
    return cases + [(Case("good.parquet", "parquet", "none", "good.parquet"), data, "all_read")]


# ---------------------------------------------------------------------------------------------------------
# One ingest of every case, then the per-document stages and the lineage


@pytest.fixture(scope="module")
def fuzz(tmp_path_factory, shared_data, ingest_in):
    root = tmp_path_factory.mktemp("fuzz")
    base, damaged = root / "base", root / "damaged"
    for d in (base, damaged):
        for sub in ("archive", "arc", "jsonl", "parquet"):
            (d / sub).mkdir(parents=True)

    def rng_for(name: str, seed: int) -> random.Random:
        return random.Random(f"{name}:{seed}")

    inputs = real_inputs(shared_data, base / "archive")
    for name in [n for n, (fmt, _, _) in inputs.items() if fmt == "arc"]:
        (base / "archive" / name).rename(base / "arc" / name)
    lines = {}
    for name in JSONL:
        lines[name] = gzip.decompress((shared_data / "cc_jsonl" / name).read_bytes()).splitlines(keepends=True)
        (base / "jsonl" / name.removesuffix(".gz")).write_bytes(b"".join(lines[name]))
    rows = [json.loads(line) for line in lines[JSONL[0]]] + [json.loads(line) for line in lines[JSONL[1]]]

    cases: list[Case] = []
    for case, data in archive_cases(inputs, rng_for) + jsonl_cases(lines, rng_for):
        (damaged / ("arc" if case.fmt == "arc" else "jsonl" if case.fmt == "jsonl" else "archive") / case.name
         ).write_bytes(data)
        if case.fmt == "jsonl":
            case.original = case.original.removesuffix(".gz")
        cases.append(case)
    expected = {}
    for case, data, outcome in parquet_cases(rows, rng_for):
        (damaged / "parquet" / case.name).write_bytes(data)
        cases.append(case)
        expected[case.name] = outcome
    (base / "parquet" / "good.parquet").write_bytes((damaged / "parquet" / "good.parquet").read_bytes())

    def sources(d: Path) -> dict:
        return {"archive": {"format": "warc", "paths": [str(d / "archive" / "*")], "bucket": "web", "licence": "x"},
                "arc": {"format": "arc", "paths": [str(d / "arc" / "*")], "bucket": "web", "licence": "x"},
                "jsonl": {"format": "jsonl", "paths": [str(d / "jsonl" / "*")], "bucket": "web", "licence": "x",
                          **FIELDS},
                "parquet": {"format": "parquet", "paths": [str(d / "parquet" / "*")], "bucket": "web",
                            "licence": "x", "url_field": "url"}}

    baseline = ingest_in(root / "run-base", sources(base), "data/ingest")
    out = ingest_in(root / "run", sources(damaged), "data/ingest", execution={"workers": 2})
    return {"root": root, "cases": cases, "baseline": baseline, "out": out, "expected": expected,
            "sources": sources(damaged), "rows": rows}


def _by_file(out) -> dict[str, list[dict]]:
    rows: dict[str, list[dict]] = {}
    for r in out.joined():
        rows.setdefault(r["file"].split("/")[-1], []).append(r)
    return rows


def _key(r: dict) -> tuple:
    return r["record_id"], r["url"], r["record_type"], r["payload_sha1"], r["action"], r["reason"]


def test_fuzz_ingest_conserves_every_record(fuzz, conservation):
    out = fuzz["out"]
    conservation(out)
    files = {f.split(":", 1)[1] for f in out.manifest["source_files"]}
    assert files == {c.name for c in fuzz["cases"]}, "every damaged file is a matched source file"
    # The damaged parquet files planned to be unreadable are read errors (test_parquet_damage_...): without
    # them the two checks below would hold of an empty list.
    read_errors = out.read_errors
    assert sum(outcome == "read_error" for outcome in fuzz["expected"].values()) <= len(read_errors)
    print(f"\nfuzz: {len(read_errors)} read errors")
    assert read_errors and all(e["offset"] >= 0 for e in read_errors)
    assert all("\n" not in e["error"] for e in read_errors)


def test_undamaged_records_are_read_as_in_the_undamaged_file(fuzz):
    """Fault isolation: what the damage did not touch reads exactly as before, before and after the damage."""
    base, out = _by_file(fuzz["baseline"]), _by_file(fuzz["out"])
    checked, recovered, missing = 0, 0, []
    for case in fuzz["cases"]:
        if case.fmt == "parquet":
            continue
        originals = sorted(base[case.original], key=lambda r: int(r["locator"].split(":")[-1]))
        if case.fmt == "jsonl":  # locators are lines: turn them into byte ranges of the undamaged file
            lines = (fuzz["root"] / "base" / "jsonl" / case.original).read_bytes().splitlines(keepends=True)
            starts = [0]
            for line in lines:
                starts.append(starts[-1] + len(line))
            span = {f"line:{i + 1}": (starts[i], starts[i + 1]) for i in range(len(lines))}
        else:
            offsets = sorted(int(r["locator"]) for r in originals)
            size = (fuzz["root"] / "base" / ("arc" if case.fmt == "arc" else "archive") / case.original).stat().st_size
            span = {str(a): (a, b) for a, b in zip(offsets, offsets[1:] + [size])}
        intact = [r for r in originals
                  if not any(lo < span[r["locator"]][1] and span[r["locator"]][0] < hi for lo, hi in case.touched)]
        got = Counter(_key(r) for r in out.get(case.name, []))
        want = Counter(_key(r) for r in intact)
        lost = want - got
        checked += sum(want.values())
        recovered += sum(want.values()) - sum(lost.values())
        if lost:
            missing.append(f"{case.name} ({case.kind}): {sorted(lost)[:2]}")
    print(f"\nfuzz: {len(fuzz['cases'])} cases, {checked} undamaged records expected, {recovered} recovered")
    assert not missing, "\n".join(missing)
    assert checked > 1000


def test_damaged_headers_are_malformed_records_at_their_offset(fuzz):
    out = _by_file(fuzz["out"])
    damaged = [case for case in fuzz["cases"] if case.header_damage]
    assert damaged, "no case damages a WARC header"
    malformed = 0
    for case in damaged:
        rows = out[case.name]
        assert rows and all(int(r["locator"]) >= 0 for r in rows), case.name
        bad = [r for r in rows if r["reason"] == "malformed_record"]
        damaged_start = case.touched[0][0]
        # the damaged record itself is the malformed one (a length that happens to frame it right is fine)
        assert all(int(r["locator"]) == damaged_start for r in bad), (case.name, [r["locator"] for r in bad])
        malformed += bool(bad)
    # ... but rarely: most damaged headers must come out as malformed records, or the check above would
    # hold of empty lists.
    print(f"\nheader damage: {malformed} of {len(damaged)} cases give a malformed record at the damaged offset")
    assert malformed >= 3 * len(damaged) // 4, (malformed, len(damaged))


def test_parquet_damage_is_a_read_error_or_a_drop(fuzz):
    out = fuzz["out"]
    rows, errors = _by_file(out), Counter(Path(e["file"]).name for e in out.read_errors)
    for name, outcome in fuzz["expected"].items():
        got = rows.get(name, [])
        if outcome == "read_error":
            assert errors[name] == 1 and not got, name
        elif outcome == "all_malformed":
            assert got and all(r["reason"] == "malformed_record" for r in got), name
        elif outcome == "all_read":
            assert len(got) == len(fuzz["rows"]) and not errors[name], name


def test_per_document_stages_and_lineage_survive_the_fuzzed_corpus(fuzz):
    """filter, pii and dedup run over what ingest kept; the lineage then verifies conservation end to end."""
    from stages import dedup, filter as filter_stage, lineage as lineage_stage, pii
    from tokenmill import lineage

    root = fuzz["root"] / "run"
    data = root / "data"
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(root)
        filter_stage.stage({"filter": {}, "execution": {"workers": 2}}, "ingest", data)
        pii.stage({"pii": {}, "execution": {"workers": 2}}, "filter", data)
        dedup.stage({"dedup": {}, "execution": {"workers": 2}}, "pii", data)
        m = lineage_stage.stage({"sources": fuzz["sources"], "lineage": {}}, "dedup", data_root=data,
                                out_dir=root / "lineage")
    assert m["conservation_violations"] == []
    con = lineage.connect(root / "lineage" / lineage.DB_NAME)
    try:
        assert lineage.verify(con) == []
        assert con.execute("SELECT count(*) FROM records").fetchone()[0] == len(fuzz["out"].records)
    finally:
        con.close()
