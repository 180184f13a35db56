"""The pii stage: detection quality measured on real labelled data, the validity rules, the stage contract.

Ground truth, built from the labels in ../shared/data/pii (see its SOURCES.md), read in place:

- presidio/context_sentences_tests.txt: (entity type, sentence) pairs. For IP_ADDRESS, US_SSN and
  PHONE_NUMBER sentences the labelled value is located with a loose per-type pattern (any dotted quad; any
  3-2-4 digits with or without dashes; any 3-3-4 / 3-7 / 10 digits); every other label (ITIN, driver
  licence, passport, bank account, routing number, SG FIN, IN PAN, PH TIN, ...) is a negative: nothing of
  ours may be found in those sentences.
- presidio/old_demo.txt: the "    Label: value" lines; labels outside our types are negatives.
- presidio/old_synthetic.json (a Synthea FHIR patient): telecom entries with system "phone"; identifiers
  and extensions whose system is the US SSN.
- scrubadub/known_pii.csv over scrubadub/document.txt: phone and email rows, every occurrence of the
  match string (case-insensitive, as scrubadub's own benchmark compares).
- dolma/expected_email-spans.jsonl.gz: dolma's expected e-mail tagger output, [B-EMAIL]...[E-EMAIL]
  markup over the real CC documents in ../cc_jsonl/dolma_provided_documents_000.jsonl.gz (it agrees with
  the >= 0.5 score spans of attributes_pii_000; the 0.1 span there is a Twitter handle, not an e-mail).
- Files or types without labels, labelled by hand here (HAND_LABELS): presidio/old_enron.txt (real Enron
  mail), presidio/demo.txt, the phone numbers in the dolma documents and the e-mail in the demo footers.

Where a labelled set's type definition differs from ours, the mapping (our definition is in
tokenmill/pii/detectors.py) is:
- US_SSN "078051120", "078051121", "078-051121": undelimited or half-delimited nine digits are not SSNs
  for us (without context they are any id); dropped from the mapped ground truth.
- US_SSN "999-90-5728" (Synthea): area 9xx is never issued; we leave it alone by rule; dropped.
- PHONE_NUMBER "4258829090": a bare ten-digit string is not a phone for us (ids, Unix timestamps); dropped.
- IP_ADDRESS 192.168.0.1 is private; the default (keep_private_ip: false) redacts it as the labels do.
  keep_private_ip: true (datatrove's choice) would leave it: test_ip_addresses_and_keep_private_ip.
Matching is exact: a detection counts only with the labelled span and type.
"""

from __future__ import annotations

import csv
import gzip
import json
import re
import time
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tokenmill import schema
from tokenmill.docstage import run_document_stage
from tokenmill.pii import DEFAULT_TOKENS, PIIProcessor, redact
from tokenmill.pii.detectors import TYPES, find_all, iban_valid, luhn_valid

DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data"
PII = DATA / "pii"
real_data = pytest.mark.skipif(not PII.is_dir(), reason="../shared/data/pii not present")

# --------------------------------------------------------------------------------------- ground truth

PRESIDIO_TYPES = {"IP_ADDRESS": "ip_address", "US_SSN": "ssn", "PHONE_NUMBER": "phone"}
LOOSE = {  # where the labelled value sits in a labelled sentence
    "ip_address": re.compile(r"\d{1,3}(?:\.\d{1,3}){3}"),
    "ssn": re.compile(r"\d{3}-?\d{2}-?\d{4}"),
    "phone": re.compile(r"\(?\d{3}\)?[ -]?\d{3}-?\d{4}"),
}
DEMO_LABELS = {"Credit card": "credit_card", "Email address": "email", "IBAN": "iban", "IP": "ip_address",
               "Phone number": "phone", "Social security number": "ssn"}
HAND_LABELS = {  # file -> [(type, exact text)], every occurrence
    "presidio/old_enron.txt": [("phone", "713-463-8626"), ("phone", "423.855.1540"),
                               ("phone", "423.855.1161"), ("email", "Investinme@enron.com")],
    "presidio/demo.txt": [("credit_card", "4095-2609-9393-4932"), ("email", "test@presidio.site"),
                          ("ip_address", "192.168.0.1"), ("phone", "(212) 555-1234"),
                          ("iban", "IL150120690000003111111"), ("ssn", "078-05-1126"),
                          ("email", "opencode@microsoft.com")],
    "presidio/old_demo.txt": [("email", "opencode@microsoft.com")],  # in the footer, not in the listing
    "dolma:http://bufvc.ac.uk/allbufvc/search.php?q=Discussion&sort=relevance": [("phone", "020 7393 1500")],
    "dolma:http://cpdlab.eun.org/related-projects;jsessionid=2015C1DD1629DCBB65DCCDC2176D6850":
        [("phone", "+32 (0)2 790 75 75"), ("phone", "+32 (0)2 790 75 85")],
}


def in_our_definition(kind: str, value: str) -> bool:
    """The mapping above: labelled values whose type definition differs from ours."""
    if kind == "ssn":
        return re.fullmatch(r"\d{3}([- ])\d{2}\1\d{4}", value) is not None and not value.startswith("9")
    if kind == "phone":
        return not value.isdigit()
    return True


def occurrences(text: str, kind: str, value: str, ignore_case: bool = False) -> list[tuple[str, int, int]]:
    flags = re.IGNORECASE if ignore_case else 0
    found = [(kind, m.start(), m.end()) for m in re.finditer(re.escape(value), text, flags)]
    assert found, f"label {value!r} not in its text"
    return found


def labelled_units() -> list[tuple[str, str, list[tuple[str, int, int]]]]:
    """[(unit name, text, gold spans (type, start, end))], gold in the labels' own definition."""
    units = []
    # presidio context sentences: "TYPE\nsentence" blocks
    lines = [ln for ln in (PII / "presidio/context_sentences_tests.txt").read_text().splitlines()
             if ln.strip() and not ln.startswith("#")]
    for n, (label, sentence) in enumerate(zip(lines[0::2], lines[1::2])):
        kind = PRESIDIO_TYPES.get(label.strip())
        gold = [(kind, m.start(), m.end()) for m in LOOSE[kind].finditer(sentence)] if kind else []
        assert not kind or gold, sentence
        units.append((f"presidio-context:{n}:{label.strip()}", sentence, gold))
    # presidio old_demo listing
    text = (PII / "presidio/old_demo.txt").read_text()
    gold = []
    for m in re.finditer(r"^ {4}([A-Za-z ]+): (.+?)\.? *$", text, re.MULTILINE):
        if m.group(1) in DEMO_LABELS:
            gold += [(DEMO_LABELS[m.group(1)], m.start(2), m.end(2))]
    units.append(("presidio/old_demo.txt", text, gold))
    # Synthea FHIR patient
    text = (PII / "presidio/old_synthetic.json").read_text()
    patient = json.loads(text)
    values = [("phone", t["value"]) for t in patient["telecom"] if t["system"] == "phone"]
    values += [("ssn", i["value"]) for i in patient["identifier"] if i.get("system", "").endswith("us-ssn")]
    values += [("ssn", e["valueString"]) for e in patient["extension"] if "SocialSecurityNumber" in e["url"]]
    gold = sorted({span for kind, v in values for span in occurrences(text, kind, v)})
    units.append(("presidio/old_synthetic.json", text, gold))
    # scrubadub
    text = (PII / "scrubadub/document.txt").read_text()
    with open(PII / "scrubadub/known_pii.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["filth_type"] in ("phone", "email")]
    gold = [span for r in rows for span in occurrences(text, r["filth_type"], r["match"], ignore_case=True)]
    units.append(("scrubadub/document.txt", text, gold))
    # dolma: expected e-mail tagger output over the real CC documents
    with gzip.open(PII / "dolma/expected_email-spans.jsonl.gz", "rt") as f:
        for row in map(json.loads, f):
            marked, gold, text, pos = row["text"], [], [], 0
            for m in re.finditer(r"\[B-EMAIL\](.*?)\[E-EMAIL\]", marked, re.DOTALL):
                text.append(marked[pos:m.start()])
                start = sum(map(len, text))
                text.append(m.group(1))
                gold.append(("email", start, start + len(m.group(1))))
                pos = m.end()
            text.append(marked[pos:])
            units.append((f"dolma:{row['id']}", "".join(text), gold))
    for name, text in [(n, (PII / n).read_text()) for n in ("presidio/old_enron.txt", "presidio/demo.txt")]:
        units.append((name, text, []))
    # hand labels
    by_name = {name: i for i, (name, _, _) in enumerate(units)}
    for name, labels in HAND_LABELS.items():
        unit, text, gold = units[by_name[name]]
        extra = {span for kind, value in labels for span in occurrences(text, kind, value)}
        units[by_name[name]] = (unit, text, sorted(set(gold) | extra))
    return units


def measure(units, params) -> dict[str, dict]:
    """Per-type precision and recall of PIIProcessor's detection against gold spans (exact span and type)."""
    proc = PIIProcessor(params)
    tp, n_pred, n_gold, misses, false = Counter(), Counter(), Counter(), [], []
    for name, text, gold in units:
        pred = {(m.type, m.start, m.end) for m in find_all(text, TYPES, proc.keep_private_ip) if m.type in proc.types}
        gold = set(gold)
        for kind, s, e in pred:
            n_pred[kind] += 1
            if (kind, s, e) in gold:
                tp[kind] += 1
            else:
                false.append((name, kind, text[s:e]))
        for kind, s, e in gold:
            n_gold[kind] += 1
            if (kind, s, e) not in pred:
                misses.append((name, kind, text[s:e]))
    out = {}
    for kind in TYPES:
        out[kind] = {"tp": tp[kind], "pred": n_pred[kind], "gold": n_gold[kind],
                     "precision": tp[kind] / n_pred[kind] if n_pred[kind] else 1.0,
                     "recall": tp[kind] / n_gold[kind] if n_gold[kind] else 1.0}
    out["_errors"] = {"false_positives": false, "misses": misses}
    return out


def report(title, res):
    print(f"\n{title}")
    for kind in TYPES:
        r = res[kind]
        print(f"  {kind:12s} precision {r['precision']:.3f} ({r['tp']}/{r['pred']})  "
              f"recall {r['recall']:.3f} ({r['tp']}/{r['gold']})")
    for what, rows in res["_errors"].items():
        for row in rows:
            print(f"  {what}: {row}")


# Measured (2026-11, this code) with the default params, on the mapped ground truth:
#   email        precision 1.000 (10/10)  recall 1.000 (10/10)
#   phone        precision 0.938 (15/16)  recall 1.000 (15/15)   FP: "078-051121" in an SSN sentence,
#                                                                  a valid national-number shape
#   ip_address   precision 1.000 (3/3)    recall 1.000 (3/3)
#   credit_card  precision 1.000 (2/2)    recall 1.000 (2/2)
#   iban         precision 1.000 (2/2)    recall 1.000 (2/2)
#   ssn          precision 1.000 (5/5)    recall 1.000 (5/5)
# Against the labels' own definitions (unmapped): phone recall 15/16 (the bare "4258829090"),
# ssn recall 5/10 (three undelimited/half-delimited numbers, Synthea's 999-90-5728 twice).
# The floors sit just below the measured values; on sets this small they allow at most one more error.
FLOORS = {
    "email": (0.95, 0.95), "phone": (0.90, 0.92), "ip_address": (0.95, 0.95),
    "credit_card": (0.95, 0.95), "iban": (0.95, 0.95), "ssn": (0.95, 0.95),
}


@real_data
def test_precision_and_recall_per_type_on_labelled_real_data():
    units = labelled_units()
    raw = measure(units, {})
    mapped_units = [(n, t, [g for g in gold if in_our_definition(g[0], t[g[1]:g[2]])]) for n, t, gold in units]
    res = measure(mapped_units, {})
    report("labels' own definitions", raw)
    report("mapped to our definitions", res)
    for kind, (p_floor, r_floor) in FLOORS.items():
        assert res[kind]["gold"] > 0, f"no ground truth for {kind}"
        assert res[kind]["precision"] >= p_floor, (kind, res[kind], res["_errors"])
        assert res[kind]["recall"] >= r_floor, (kind, res[kind], res["_errors"])
    # What the mapping removed is exactly what our definition excludes, and none of it is redacted.
    assert raw["phone"]["gold"] - res["phone"]["gold"] == 1
    assert raw["ssn"]["gold"] - res["ssn"]["gold"] == 5


# Unlabelled real text (CC documents, web pages from real crawls, Wikipedia, news, a web forum, Gutenberg
# books): every detection was reviewed by hand. Reviewed true positives (value -> True) and false positives
# (-> False); a detection not listed counts as a false positive, so a change that adds noise lowers the
# measured precision and fails here.
REVIEWED = {
    # phones
    "781-442-0750": True,          # AG News: "contact Miriam Kandansky at 781-442-0750"
    "(801) 596-1887": True,        # the Project Gutenberg Literary Archive Foundation, in every book
    "020 7393 1500": True, "+32 (0)2 790 75 75": True, "+32 (0)2 790 75 85": True,  # CC contact pages
    "415-561-6767": True, "(866) 329-7480": True, "206-543-9196": True,  # archive.org, docucomp, UW
    "0512-55111066": True, "0512-55111088": True, "021-56692669": True, "021-36070335": True,  # Chinese
    "021-54098575": True, "021-54098577": True, "00852-27100021": True, "00852-26875563": True,  # pages
    "0900 4683643": True,          # Dutch service number
    "03549-02811": False,          # ABC news: star catalogue number "GSC 03549-02811" (a national-number shape)
    # e-mail addresses (the @name@host ones are fediverse handles, which are written as e-mail addresses)
    **dict.fromkeys(
        "business@pglaf.org gbnewby@pglaf.org ask@bufvc.ac.uk info@claihr.ca info@eun.org info@archive.org "
        "moviearchive-subscribe@yahoogroups.com tz@iana.org team@data.gov.uk shrinkthinks@spore.social "
        "scanner-rachel-berhane@archive.org scanner-adrian-wiemhoff@archive.org mhoye@mastodon.social "
        "info@docucomp.com info@creativecommons.org contact@stanley-ks.cn b2c@wien.rocks axz@cs.uw.edu "
        "anaik@cs.cmu.edu Xanatos@social.dev-wiki.de 550502573@qq.com".split(), True),
    # public IP addresses: IANA's root-server table, a CC page on crawler addresses
    **dict.fromkeys(
        "38.107.191.66 38.107.191.119 202.12.27.33 199.7.91.13 199.7.83.42 198.41.0.4 193.0.14.129 "
        "192.58.128.30 192.5.5.241 192.36.148.17 192.33.4.12 192.228.79.201 192.203.230.10 192.112.36.4 "
        "128.63.2.53 2001:dc3::35 2001:7fe::53 2001:7fd::1 2001:503:c27::2:30 2001:503:ba3e::2:30 2001:500:3::42 "
        "2001:500:2f::f 2001:500:2d::d 2001:500:1::803f:235".split(), True),
    # private, documentation and multicast addresses, written as addresses: IANA's multicast registry and
    # address-format pages, a web forum's "127.0.0.1"
    **dict.fromkeys(
        "192.0.2.53 2001:0db8:582:ae33::29 224.0.2.0 224.0.255.255 224.3.0.0 224.4.255.255 233.252.0.0 "
        "233.255.255.255 224.252.0.0 224.255.255.255 224.0.1.0 224.0.1.255 224.0.0.0 224.0.0.255 224.1.0.0 "
        "224.1.255.255 224.5.0.0 224.251.255.255 225.0.0.0 231.255.255.255 224.2.0.0 224.2.255.255 232.0.0.0 "
        "232.255.255.255 127.0.0.1".split(), True),
    "10.0.0.210": False,           # firefox forum: "If Shockwave player 10.0.0.210 is installed" (a version)
}
WARC_PAGES = ("aut_warc_example.warc.gz", "dolma_sample-0000.warc.gz", "dolma_sample-0001.warc.gz",
              "pywb_iana.warc.gz", "ukwa_govuk_BL-20140325121225068.warc.gz",
              "ukwa_govuk_BL-20140325122341434.warc.gz", "resiliparse_warcfile.warc.gz")


def reviewed_true(value: str) -> bool:
    return REVIEWED.get(value, False)


def unlabelled_corpus():
    from warcio.archiveiterator import ArchiveIterator

    from tokenmill.ingest.text import Drop, payload_to_text

    for name in WARC_PAGES:  # HTML responses, extracted to text the way ingest does
        with open(DATA / "warc" / name, "rb") as fh:
            for rec in ArchiveIterator(fh):
                if rec.rec_type == "response" and rec.http_headers is not None:
                    try:
                        text, _, _ = payload_to_text(rec.content_stream().read(),
                                                  rec.http_headers.get_header("Content-Type"), "resiliparse")
                    except Drop:
                        continue
                    yield name, text
    for f in sorted((DATA / "cc_jsonl").glob("*.jsonl.gz")):
        with gzip.open(f, "rt") as fh:
            for line in fh:
                yield f.name, json.loads(line)["text"]
    text = DATA / "text"
    yield "wikitext-2", (text / "wikitext-2/wiki.test.raw.blanklines_stripped_crlf").read_text("utf-8")
    for f in sorted((text / "english/nltk_webtext").glob("*.txt")):
        yield f.name, f.read_text("utf-8", errors="replace")
    for f in sorted((text / "news/nltk_abc").glob("*.gz")):
        yield f.name, gzip.open(f, "rt", encoding="utf-8", errors="replace").read()
    yield "ag_news", (text / "news/ag_news/test.csv").read_text("utf-8")
    for f in sorted((text / "gutenberg/en").glob("*.txt.gz"))[:2]:
        yield f.name, gzip.open(f, "rt", encoding="utf-8", errors="replace").read()


@real_data
def test_precision_on_unlabelled_real_text():
    # Measured (default params): 11.9 MB, 110 detections, 108 reviewed true (0.982).
    #   email 32/32; phone 27/28 (the false one: a star catalogue number); ip_address 49/50 (the false one:
    #   "Shockwave player 10.0.0.210", a version; "TouchWare Desktop 2.9.0.5" is rejected as one);
    #   credit_card, iban, ssn 0/0: none in this text, and no false ones (before the timestamp rule,
    #   14-digit crawl timestamps such as 20080430204832 passed as cards: one in ten passes Luhn).
    #   With keep_private_ip: true, 25 private/multicast addresses and the version are left: 84 detections.
    proc = PIIProcessor({})
    hits, chars = [], 0
    for name, text in unlabelled_corpus():
        chars += len(text)
        out = proc({"doc_id": name, "text": text})
        found = [(name, m.type, text[m.start:m.end]) for m in find_all(text)]
        assert sum(out.scores.values()) == len(found)
        hits += found
    by_type = {t: [h for h in hits if h[1] == t] for t in TYPES}
    good = [h for h in hits if reviewed_true(h[2])]
    print(f"\nunlabelled real text: {chars / 1e6:.1f} MB, {len(hits)} detections, {len(good)} reviewed true")
    for t, hs in by_type.items():
        print(f"  {t:12s} {sum(reviewed_true(h[2]) for h in hs)}/{len(hs)} reviewed true")
    for h in hits:
        if not reviewed_true(h[2]):
            print("  not a true positive:", h)
    assert len(hits) >= 100 and len(good) / len(hits) >= 0.97
    assert sum(reviewed_true(h[2]) for h in by_type["phone"]) / len(by_type["phone"]) >= 0.9
    assert sum(reviewed_true(h[2]) for h in by_type["ip_address"]) / len(by_type["ip_address"]) >= 0.95
    for t in ("email", "credit_card", "iban", "ssn"):
        assert all(reviewed_true(h[2]) for h in by_type[t]), t


@real_data
def test_documents_per_second_on_real_web_documents():
    """Not asserted (the machine is shared): printed, per core, on the 30 real CC documents (7 KB mean)."""
    docs = []
    for f in sorted((DATA / "cc_jsonl").glob("*.jsonl.gz")):
        with gzip.open(f, "rt") as fh:
            docs += [{"doc_id": str(i), "text": json.loads(line)["text"]} for i, line in enumerate(fh)]
    proc = PIIProcessor({})
    best = min(_timed(proc, docs) for _ in range(3))
    print(f"\n{len(docs) / best:.0f} documents/s per core "
          f"({sum(len(d['text']) for d in docs) / len(docs):.0f} characters mean)")


def _timed(proc, docs) -> float:
    t = time.process_time()
    for d in docs:
        proc(d)
    return time.process_time() - t


# -------------------------------------------------------------------------------------- validity rules


def _with_luhn_digit(partial: str) -> str:
    return next(partial + str(d) for d in range(10) if luhn_valid(partial + str(d)))


def _kinds(text: str, **params) -> list[tuple[str, str]]:
    proc = PIIProcessor(params)
    return [(m.type, text[m.start:m.end]) for m in find_all(text, proc.types, proc.keep_private_ip)]


def test_luhn_invalid_card_numbers_are_left_alone():
    valid = _with_luhn_digit("453201511283036")  # 16 digits, Visa range
    invalid = valid[:-1] + str((int(valid[-1]) + 1) % 10)
    grouped = " ".join(valid[i:i + 4] for i in range(0, 16, 4))
    assert luhn_valid(valid) and not luhn_valid(invalid)
    assert _kinds(f"card {valid} ok") == [("credit_card", valid)]
    assert _kinds(f"card {grouped} ok") == [("credit_card", grouped)]
    assert _kinds(f"card {'-'.join(valid[i:i + 4] for i in range(0, 16, 4))}.")[0][0] == "credit_card"
    assert _kinds(f"card {invalid} and {' '.join(invalid[i:i + 4] for i in range(0, 16, 4))}") == []
    # Luhn-valid but not a payment card: industries 0, 1, 7, 8, 9 (ISBN-13s, timestamps, long ids).
    assert _kinds(f"id {_with_luhn_digit('978030640615')} ts {_with_luhn_digit('170000000012')}") == []
    amex = "3782 822463 10005"
    assert _kinds(f"amex {amex}") == [("credit_card", amex)]


def test_iban_checksum_and_length_are_checked():
    good = ["GB82WEST12345698765432", "DE89370400440532013000", "IL150120690000003111111",
            "NO9386011117947", "FR1420041010050500013M02606"]
    for iban in good:
        assert iban_valid(iban), iban
        assert _kinds(f"IBAN: {iban}.") == [("iban", iban)]
    printed = "GB82 WEST 1234 5698 7654 32"
    assert _kinds(f"pay to {printed} today") == [("iban", printed)]
    wrong_check = "GB83WEST12345698765432"
    assert not iban_valid(wrong_check) and _kinds(f"IBAN {wrong_check}") == []
    assert _kinds("IBAN GB82WEST1234569876543") == []      # one character short for GB
    assert _kinds("code XX82WEST12345698765432") == []     # no such country
    # The digits of an IBAN are not also a phone number or a card (the longest match wins).
    text = "IBAN IL15 0120 6900 0000 3111 111, call 020 7393 1500"
    assert _kinds(text) == [("iban", "IL15 0120 6900 0000 3111 111"), ("phone", "020 7393 1500")]


def test_ssn_area_group_and_serial_rules():
    assert _kinds("ssn 123-45-6789") == [("ssn", "123-45-6789")]
    assert _kinds("ssn 123 45 6789") == [("ssn", "123 45 6789")]
    for bad in ("000-12-3456", "666-12-3456", "900-12-3456", "999-90-5728", "123-00-4567", "123-45-0000"):
        assert _kinds(f"ssn {bad} here") == [], bad
    # Not SSNs for us: undelimited, mixed separators, part of a longer number.
    for other in ("123456789", "123-45 6789", "1123-45-6789", "123-45-67890"):
        assert [k for k, _ in _kinds(f"no {other} x")] != ["ssn"], other


def test_phone_numbers_and_realistic_negatives():
    for phone in ("(425) 882-9090", "425-882-9090", "423.855.1540", "1-800-555-1212", "+1 (415) 555-0199",
                  "+44 20 7946 0958", "+32 (0)2 790 75 75", "+33 1 23 45 67 89", "+14258829090",
                  "020 7393 1500", "0775 2212 211", "07700 900123", "0044 20 7946 0958"):
        assert _kinds(f"Call {phone} now") == [("phone", phone)], phone
    negatives = [
        "Released on 2019-03-14, updated 12/05/2023 and 14.03.2019 at 10:30; 02-10-2018 10:30",
        "Python 3.11.4, build 10.0.19041.1, v2.0.0-97-ge2f9927f, OID 2.16.840.1.113883.6.238",
        "ISBN 978-0-306-40615-7, ISBN 0-306-40615-2, ISBN-13: 9780306406157, ISSN 0317-8471",
        "order 4258829090, unix time 1700000000, id 1538484577457, seed -4725837394105254742",
        "scores 10 20 30 40, sizes 250 500 1000, years 1940-1945 and 2015-2018 (4)",
        "the days 05 06 07 08 09 10 11 12 13 14 of May; coordinates -73.26054, 42.452045",
        "population 1,234,567; $425 882 9090 is not a number anyone dials",
    ]
    for text in negatives:
        assert _kinds(text) == [], text


def test_emails_and_their_lookalikes():
    assert _kinds("write to John.Doe+news@mail.example.co.uk.") == [("email", "John.Doe+news@mail.example.co.uk")]
    assert _kinds("<a href='mailto:info@eun.org'>") == [("email", "info@eun.org")]
    for text in ("icon logo@2x.png", "see http://x.com/data/w32.vote.a@mm.html", "Twitter: @LearnonScreen",
                 "user@localhost", "a@b", "W32.Vote.A@mm virus"):
        assert _kinds(text) == [], text


def test_ip_addresses_and_keep_private_ip():
    text = ("router 192.168.1.1, loopback 127.0.0.1, doc 203.0.113.5, server 93.184.216.34, "
            "v6 2001:4860:4860::8888 and fe80::1%eth0")
    assert [v for _, v in _kinds(text)] == [
        "192.168.1.1", "127.0.0.1", "203.0.113.5", "93.184.216.34", "2001:4860:4860::8888", "fe80::1"]
    assert _kinds(text, keep_private_ip=True) == [("ip_address", "93.184.216.34"),
                                                  ("ip_address", "2001:4860:4860::8888")]
    for text in ("version 93.184.216.34", "999.1.1.1", "1.2.3.4.5", "01.02.03.04", "at 12:30:45", "std::vector",
                 "Desktop 2.9.0.5", "C++ a::b", "OID 2.16.840.1.113883.6.238", "see ::"):
        assert _kinds(text) == [], text


def test_entities_planted_in_the_sample_corpus_are_found_exactly():
    """The sample stage plants PII into pages (tokenmill.sample.plant): every entity, exactly, and nothing else.

    Measured: 1000 paragraphs, 5000 entities (including Luhn-invalid "not_credit_card" numbers that must be
    left alone), all exact.
    """
    import random

    plant = pytest.importorskip("tokenmill.sample.plant")
    ours = {"email": "email", "phone": "phone", "ipv4": "ip_address", "credit_card": "credit_card",
            "iban": "iban", "us_ssn": "ssn"}
    rng = random.Random(7)
    wrong = []
    for _ in range(1000):
        text, entities = plant.pii_paragraph(rng.sample(plant.PII_TYPES, 5), rng,
                                             ["alice@example.org", "j.smith-dev@lists.python.org"])
        found = sorted((m.type, text[m.start:m.end]) for m in find_all(text))
        want = sorted((ours[e["type"]], e["value"]) for e in entities if e["type"] in ours)
        if found != want:
            wrong.append((text, want, found))
    assert not wrong, wrong[:3]


# ------------------------------------------------------------------------------------ processor contract


def test_outcome_counts_and_tokens():
    text = ("Mail ann@example.org or bob@example.org, call (212) 555-1234, card 4111 1111 1111 1111, "
            "IBAN GB82WEST12345698765432, SSN 078-05-1120, from 93.184.216.34.")
    out = PIIProcessor({})({"doc_id": "d", "text": text})
    assert (out.action, out.reason) == ("modify", "redacted")
    assert out.scores == {"pii_email": 2.0, "pii_phone": 1.0, "pii_ip_address": 1.0, "pii_credit_card": 1.0,
                          "pii_iban": 1.0, "pii_ssn": 1.0}
    assert out.text == ("Mail <EMAIL> or <EMAIL>, call <PHONE>, card <CREDIT_CARD>, IBAN <IBAN>, SSN <SSN>, "
                        "from <IP_ADDRESS>.")
    clean = PIIProcessor({})({"doc_id": "c", "text": "Nothing here but 2019-03-14 and version 3.11.4."})
    assert (clean.action, clean.reason, clean.text) == ("keep", "no_pii", None)
    assert clean.scores == {f"pii_{t}": 0.0 for t in DEFAULT_TOKENS}

    custom = PIIProcessor({"tokens": {"email": "[email]", "ssn": ""}, "enabled": {"phone": False}})
    out = custom({"doc_id": "d", "text": text})
    assert "pii_phone" not in out.scores and out.scores["pii_email"] == 2.0
    assert out.text.startswith("Mail [email] or [email], call (212) 555-1234, card <CREDIT_CARD>")
    assert "SSN , from" in out.text
    assert redact("a@b.org", ("email",), {"email": "X"}) == ("X", {"email": 1})
    # A type switched off still owns its spans: no phone number is carved out of an unredacted IBAN.
    iban_text = "IBAN IL15 0120 6900 0000 3111 111 and 020 7393 1500"
    assert redact(iban_text, ("phone",), DEFAULT_TOKENS) == (
        "IBAN IL15 0120 6900 0000 3111 111 and <PHONE>", {"phone": 1})


def test_unknown_parameters_are_errors():
    for bad in ({"enabeld": {}}, {"enabled": {"phones": False}}, {"tokens": {"mail": "x"}}):
        with pytest.raises(ValueError):
            PIIProcessor(bad)


def test_conf_defaults_are_the_processor_defaults():
    import yaml

    conf = Path(__file__).resolve().parents[1] / "conf" / "pii" / "default.yaml"
    assert conf.read_text().startswith("# @package pii")
    params = yaml.safe_load(conf.read_text())
    proc = PIIProcessor(params)
    assert proc.tokens == DEFAULT_TOKENS and proc.types == tuple(DEFAULT_TOKENS) and not proc.keep_private_ip


def test_stage_keeps_doc_ids_and_writes_a_decision_per_document(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    texts = ["Call (212) 555-1234 or mail a.b@example.com.", "Plain text, 2019-03-14, v3.11.4.",
             "SSN 078-05-1120 and 4111-1111-1111-1111", ""]
    rows = [{"doc_id": f"id{i}", "text": t, "source": "s", "bucket": "web", "file": "f", "locator": str(i)}
            for i, t in enumerate(texts)]
    schema.write_parquet(rows, schema.DOCUMENT, tmp_path / "data/filter/documents/x.parquet")
    params = {"tokens": {"phone": "<TEL>"}}
    manifest = run_document_stage("pii", "filter", "tokenmill.pii:PIIProcessor", params,
                                  {"backend": "local", "workers": 1}, data_root=tmp_path / "data")
    docs = pq.read_table(tmp_path / "data/pii/documents/x.parquet").to_pylist()
    decisions = {d["doc_id"]: d for d in pq.read_table(tmp_path / "data/pii/decisions/x.parquet").to_pylist()}
    assert [d["doc_id"] for d in docs] == ["id0", "id1", "id2", "id3"]
    assert [d["text"] for d in docs] == ["Call <TEL> or mail <EMAIL>.", texts[1], "SSN <SSN> and <CREDIT_CARD>", ""]
    assert all(d["source"] == "s" and d["locator"] == str(i) for i, d in enumerate(docs))
    assert [(decisions[f"id{i}"]["action"], decisions[f"id{i}"]["reason"]) for i in range(4)] == [
        ("modify", "redacted"), ("keep", "no_pii"), ("modify", "redacted"), ("keep", "no_pii")]
    assert dict(decisions["id0"]["scores"])["pii_phone"] == 1.0 and dict(decisions["id1"]["scores"]) == {
        f"pii_{t}": 0.0 for t in DEFAULT_TOKENS}
    assert manifest["counts"]["in"] == 4 and manifest["counts"]["out"] == 4
    assert manifest["counts"]["by_reason"] == {"keep:no_pii": 2, "modify:redacted": 2}
