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
- PHONE_NUMBER "555-780-8673" (Synthea): area code 555 is in no numbering plan, so not a phone number for
  us (numbers are validated against the plans); dropped. ("4258829090", bare, is found: a phone word
  precedes it in its sentence.)
- IP_ADDRESS 192.168.0.1 is private; the default (keep_private_ip: false) redacts it as the labels do.
  keep_private_ip: true (datatrove's choice) would leave it: test_ip_addresses_and_keep_private_ip.
Matching is exact: a detection counts only with the labelled span and type.

The larger development set (Faker values in many locales and templates, look-alikes, and real crawl text
labelled by hand) is built by benchmarks/pii_devset.py; test_development_set measures on it.
"""

from __future__ import annotations

import csv
import gzip
import json
import re
import sys
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from stages import pii as pii_stage
from tokenmill import schema
from tokenmill.pii import DEFAULT_TOKENS, PIIProcessor, redact
from tokenmill.pii.detectors import TYPES, find_all, iban_valid, luhn_valid
from tokenmill.pii.params import Pii
from tokenmill.sample import plant

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import pii_devset  # noqa: E402  (benchmarks/ is not a package: the development set lives beside its benchmark)
import pii_phone_plans  # noqa: E402


@pytest.fixture(scope="module")
def PII(shared_data) -> Path:  # noqa: N802  (reads like the constant it replaces)
    return shared_data / "pii"

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
        return not value.startswith("555-")  # NANP area code 555 is not in service
    return True


def occurrences(text: str, kind: str, value: str, ignore_case: bool = False) -> list[tuple[str, int, int]]:
    flags = re.IGNORECASE if ignore_case else 0
    found = [(kind, m.start(), m.end()) for m in re.finditer(re.escape(value), text, flags)]
    assert found, f"label {value!r} not in its text"
    return found


def labelled_units(PII: Path) -> list[tuple[str, str, list[tuple[str, int, int]]]]:  # noqa: N803
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
    """Per-type precision and recall (exact span and type) of (name, text, gold) units: the development
    set's scorer (benchmarks/pii_devset.py), so the labelled sets are scored alike."""
    return pii_devset.measure([pii_devset.Unit(name, text, list(gold)) for name, text, gold in units], params)


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
# Against the labels' own definitions (unmapped): phone recall 15/16 (Synthea's 555-780-8673),
# ssn recall 5/10 (three undelimited/half-delimited numbers, Synthea's 999-90-5728 twice).
# The floors sit just below the measured values; on sets this small they allow at most one more error.
FLOORS = {
    "email": (0.95, 0.95), "phone": (0.90, 0.95), "ip_address": (0.95, 0.95),
    "credit_card": (0.95, 0.95), "iban": (0.95, 0.95), "ssn": (0.95, 0.95),
}


def test_precision_and_recall_per_type_on_labelled_real_data(PII):  # noqa: N803
    units = labelled_units(PII)
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


# ------------------------------------------------------------------------------------- development set

# Measured (2026-11, seed 0, 1,500 synthetic documents + 11.9 MB of hand-labelled real text): every type
# >= 0.99 precision; recall 1.000 except credit_card 0.98 (Faker's JCB 16 numbers in 3500-3527 / 3590-3599,
# outside the registry's 3528-3589, and its Maestro "0604") and phone 0.98 (mobile numbers written without
# a trunk prefix or phone word). benchmarks/RESULTS.md (section PII) has the full table.
DEV_FLOOR = 0.95
# The only detections in the real text that are not PII (reviewed): a version number that is a valid IPv4
# address, and a star catalogue number that is a valid national phone number.
KNOWN_REAL_FALSE = {("ip_address", "10.0.0.210"), ("phone", "03549-02811")}


@pytest.fixture(scope="module")
def devset(shared_data):
    from tokenmill.pii.detectors import DEFAULT_REGIONS

    synth, gen = pii_devset.synthetic_units(1500, seed=0, regions=DEFAULT_REGIONS)
    return synth, pii_devset.real_units(), gen


def test_precision_and_recall_per_type_on_the_development_set(devset):
    synth, real, gen = devset
    res = pii_devset.measure(synth + real)
    print("\n" + pii_devset.table(res))
    for what, rows in res["_errors"].items():
        for row in rows:
            print(f"  {what}: {row[:3]}")
    for kind in TYPES:
        assert res[kind]["gold"] >= 40, (kind, res[kind])  # enough labels to measure
        assert res[kind]["precision"] >= DEV_FLOOR, (kind, res[kind])
        assert res[kind]["recall"] >= DEV_FLOOR, (kind, res[kind])
    # The set covers what the issue found missed: numbers without "+", dotted and dashed national layouts,
    # cards of 12 and 15 digits, lower-case IBANs; each kind among the labels.
    values = {(k, u.text[s:e]) for u in synth for k, s, e in u.gold}
    assert any(k == "phone" and not v.startswith(("+", "(+")) for k, v in values)
    assert any(k == "phone" and re.fullmatch(r"\d{3}\.\d{3}\.\d{4}", v) for k, v in values)
    assert any(k == "credit_card" and len(re.sub(r"\D", "", v)) == 12 for k, v in values)
    assert any(k == "credit_card" and len(re.sub(r"\D", "", v)) == 15 for k, v in values)
    assert any(k == "iban" and v == v.lower() for k, v in values)
    # In the real text, nothing beyond the two reviewed look-alikes is taken for PII.
    real_res = pii_devset.measure(real)
    false = {(k, v) for _, k, v, _ in real_res["_errors"]["false_positives"]}
    assert false <= KNOWN_REAL_FALSE, false - KNOWN_REAL_FALSE
    assert sum(real_res[k]["gold"] for k in TYPES) >= 100


def test_phone_validation_modes_on_numbers_built_to_the_numbering_plans(shared_data):
    """Labels the detector's library did not make (benchmarks/pii_phone_plans.py: numbers built from the
    regulators' plans). The default `valid` redacts no structurally invalid number written internationally,
    finds nearly every valid national number of a configured region; `possible` buys a little recall with
    most of the invalid ones (RESULTS, PII: 300 per form)."""
    res = pii_phone_plans.run(per_form=100, seed=1)
    valid, possible = res["valid"], res["possible"]
    assert PIIProcessor(Pii()).phone_validation == "valid"  # the default the measurement chose
    # One miss of precision per few hundred: an invalid "+1 (783) 086-8354" has its tail "086-8354" read as
    # a national number (seeds 0 and 2 of 100 per form: 0.996).
    assert valid["all"]["gold"] == 400 and valid["all"]["precision"] >= 0.99
    assert valid["forms"]["international (invalid)"]["redacted"] <= 0.03
    assert valid["forms"]["national, configured region"]["recall"] >= 0.95
    assert valid["forms"]["international"]["recall"] >= 0.7
    assert possible["forms"]["international (invalid)"]["redacted"] >= 0.5
    assert possible["all"]["recall"] > valid["all"]["recall"] and possible["all"]["precision"] < 0.9
    f1 = {m: 2 * r["all"]["precision"] * r["all"]["recall"] / (r["all"]["precision"] + r["all"]["recall"])
          for m, r in res.items()}
    assert f1["valid"] > f1["possible"], f1
    # Local 7-digit numbers are phone numbers neither mode reads (no area code, no plan's length).
    assert valid["forms"]["local, 7 digits (US)"]["recall"] == 0.0


def test_the_processor_redacts_the_labelled_values(devset):
    """Through PIIProcessor (the stage's processor), not the detectors: labelled values are gone from its
    output text, and its per-type counts match the labels."""
    synth, _, _ = devset
    proc = PIIProcessor(Pii())
    left, labelled, counted = Counter(), Counter(), Counter()
    for u in synth:
        out = proc({"doc_id": u.name, "text": u.text})
        assert out.action == "modify" or not u.gold
        text = out.text if out.text is not None else u.text
        for kind, s, e in u.gold:
            labelled[kind] += 1
            left[kind] += u.text[s:e] in text
        for kind in TYPES:
            counted[kind] += out.scores[f"pii_{kind}"]
    ignored = sum(len(u.ignore) for u in synth)  # phone numbers either verdict is right for
    for kind in TYPES:
        assert left[kind] / labelled[kind] <= 1 - DEV_FLOOR, (kind, left[kind], labelled[kind])
        most = labelled[kind] * (2 - DEV_FLOOR) + (ignored if kind == "phone" else 0)
        assert labelled[kind] * DEV_FLOOR <= counted[kind] <= most, (kind, counted[kind], labelled[kind])


# -------------------------------------------------------------------------------------- validity rules


def _with_luhn_digit(partial: str) -> str:
    return next(partial + str(d) for d in range(10) if luhn_valid(partial + str(d)))


def _kinds(text: str, **params) -> list[tuple[str, str]]:
    proc = PIIProcessor(Pii.resolve(params))
    found = find_all(text, proc.types, proc.keep_private_ip, proc.phone_regions, proc.phone_validation)
    return [(m.type, text[m.start:m.end]) for m in found]


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


def test_phone_formats_the_issue_found_missed_and_the_regions_parameter():
    # Without "+", dotted and dashed national layouts, international with dots, a trunk "(0)", extensions.
    for phone in ("425.882.9090", "425-882-9090", "(425)882-9090", "1 425 882 9090", "+61.7.4220.5879",
                  "+44(0)115 912 3456", "(+57) 301 706 6907", "0033 1 83 41 77 76", "+1-202-555-0143x123",
                  "01 83 41 77 76", "06 12 34 56 78", "+49 (0) 30 1234567"):
        assert _kinds(f"Numbers: {phone}; done") == [("phone", phone)], phone
    # A bare digit string is a number only right after a phone word.
    assert _kinds("Tel. 0254419193 or 13905833157 after hours") == [("phone", "0254419193")]
    assert _kinds("Telefon: 13905833157") == [("phone", "13905833157")]   # a Chinese mobile, no trunk 0
    assert _kinds("order 0254419193 shipped") == []
    # National numbers are read against the configured regions only; international ones always.
    hamburg = "040 12345678"
    assert _kinds(f"Ruf an: {hamburg}.") == []                              # DE is not a default region
    assert _kinds(f"Ruf an: {hamburg}.", phone_regions=["DE"]) == [("phone", hamburg)]
    assert _kinds("Ruf an: +49 30 1234 5678.") == [("phone", "+49 30 1234 5678")]
    # Numbering plans decide: area code 591 is not in service; "possible" checks only the length.
    assert _kinds("see (591) 341-7776") == []
    assert _kinds("see (591) 341-7776", phone_validation="possible") == [("phone", "(591) 341-7776")]
    # Look-alikes with a phone number's shape: EIN, SSN, ranges, years, decimals, versions, IPs.
    for text in ("EIN 03-5587399", "SSN 078-05-1120", "ports 32768-65535", "1896 1897 1898", "pi 3.14159265",
                 "build 4920.82.0", "host 192.168.10.12", "scores 4 0 1 0 0 0 1", "14 03 2019"):
        assert [k for k, _ in _kinds(text)] in ([], ["ssn"], ["ip_address"]), text
    with pytest.raises(ValueError, match="phone_regions"):
        Pii.resolve({"phone_regions": ["XX"]})
    with pytest.raises(ValueError, match="phone_validation"):
        Pii.resolve({"phone_validation": "loose"})


def test_cards_by_issuer_range_and_length():
    # Valid lengths of their issuers: Maestro 12, Amex 15 (4-6-5), JCB 15 (old 1800 range), Diners 14,
    # Visa 13 and 19, UnionPay 17.
    cases = {"501800000009": "5018 0000 0009", "378282246310005": "3782 822463 10005",
             "180000000000002": None, "30569309025904": "3056 930902 5904", "4222222222222": None,
             "4111111111111111113": None, "62000000000000004": None}
    for digits, grouped in cases.items():
        number = _with_luhn_digit(digits[:-1])
        assert _kinds(f"card {number} ok") == [("credit_card", number)], number
        if grouped:
            printed = grouped[:-1] + number[-1]
            assert _kinds(f"card {printed} ok") == [("credit_card", printed)], printed
    # Luhn-valid but no issuer uses that prefix at that length: Visa at 15, Amex at 16, Mastercard at 13,
    # industry 7 and 8 prefixes (petroleum, telecom), a 12-digit number outside Maestro.
    for partial in ("41111111111111", "378282246310005", "555555555555", "700000000000000", "80000000000000",
                    "41111111111"):
        number = _with_luhn_digit(partial)
        assert _kinds(f"id {number} ok") == [], number


def test_ibans_in_any_case():
    for printed in ("gb82 west 1234 5698 7654 32", "de89370400440532013000", "Fr14 2004 1010 0505 0001 3M02 606"):
        assert _kinds(f"IBAN {printed}.") == [("iban", printed)], printed
    assert _kinds("iban gb83 west 1234 5698 7654 32") == []  # wrong check digits, whatever the case


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
    out = PIIProcessor(Pii())({"doc_id": "d", "text": text})
    assert (out.action, out.reason) == ("modify", "redacted")
    assert out.scores == {"pii_email": 2.0, "pii_phone": 1.0, "pii_ip_address": 1.0, "pii_credit_card": 1.0,
                          "pii_iban": 1.0, "pii_ssn": 1.0}
    assert out.text == ("Mail <EMAIL> or <EMAIL>, call <PHONE>, card <CREDIT_CARD>, IBAN <IBAN>, SSN <SSN>, "
                        "from <IP_ADDRESS>.")
    clean = PIIProcessor(Pii())({"doc_id": "c", "text": "Nothing here but 2019-03-14 and version 3.11.4."})
    assert (clean.action, clean.reason, clean.text) == ("keep", "no_pii", None)
    assert clean.scores == {f"pii_{t}": 0.0 for t in DEFAULT_TOKENS}

    custom = PIIProcessor(Pii(tokens={"email": "[email]", "ssn": ""}, enabled={"phone": False}))
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
            Pii.resolve(bad)


def test_conf_defaults_are_the_processor_defaults():
    import yaml

    conf = Path(__file__).resolve().parents[1] / "conf" / "pii" / "default.yaml"
    assert conf.read_text().startswith("# @package pii")
    params = yaml.safe_load(conf.read_text())
    proc = PIIProcessor(Pii.resolve(params))
    assert proc.tokens == DEFAULT_TOKENS and proc.types == tuple(DEFAULT_TOKENS) and not proc.keep_private_ip


def test_stage_keeps_doc_ids_and_writes_a_decision_per_document(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    texts = ["Call (212) 555-1234 or mail a.b@example.com.", "Plain text, 2019-03-14, v3.11.4.",
             "SSN 078-05-1120 and 4111-1111-1111-1111", ""]
    rows = [{"doc_id": f"id{i}", "text": t, "source": "s", "bucket": "web", "file": "f", "locator": str(i)}
            for i, t in enumerate(texts)]
    schema.write_parquet(rows, schema.DOCUMENT, tmp_path / "data/filter/documents/x.parquet")
    params = {"tokens": {"phone": "<TEL>"}}
    manifest = pii_stage.stage({"pii": params, "execution": {"backend": "local", "workers": 1}}, "filter",
                               tmp_path / "data")
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
