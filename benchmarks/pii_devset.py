"""A labelled development set for PII detection, and per-type precision and recall of tokenmill.pii on it.

../shared/data/pii holds a few dozen labelled values. This builds thousands, seeded, at run time (nothing is
committed but this script):

- synthetic documents: real prose from ../shared/data/text (news and Wikipedia sentences) with sentences
  from many templates (English, German, French, Spanish, Dutch, Italian, Portuguese) that carry values
  drawn with Faker across 40+ locales — e-mail addresses, phone numbers in each locale's own formats,
  card numbers of every issuer Faker knows, IBANs of every country Faker has, US SSNs, IPv4 and IPv6
  addresses — and look-alikes that are not PII (dates, times, ISBNs, EANs, prices, versions, ranges,
  postcodes, EINs, ITINs, routing numbers, Luhn-invalid card numbers, IBANs with a wrong check, ...);
- real crawl and prose text (WARC pages from real crawls extracted as ingest does, Common Crawl JSONL,
  WikiText, news, a web forum, Gutenberg books) in which every value anyone would call PII was labelled
  by hand (REVIEWED): what the detector finds elsewhere in it is a false positive.

What a label means, where Faker and the definition part ways:
- phone: Faker draws digits at random in each locale's layouts, so many of its numbers lie in no allocated
  range (area code 591, ...). Those are neither positives nor negatives (`ignore` spans): a detector may
  redact them or not. A number in an allocated range (libphonenumber's is_valid_number for the locale's
  region: the numbering plans, not our detector, define the type) is a positive when it can be recognised
  as a phone number at all: written internationally, or nationally in one of the configured regions.
  National numbers of other regions are `ignore` spans too.
- credit_card: every number Faker generates is a positive, also the ones outside the issuer ranges
  (Faker's JCB 16 uses 3500-3599, the registry 3528-3589; its Maestro "0604"): those count as misses.
  Card generators are drawn by CARD_WEIGHTS, roughly the networks' shares of cards in circulation.
- ssn: Faker's en_US ssn() (never area 000, 666 or 9xx); ITINs (9xx) are look-alikes.

Usage: python benchmarks/pii_devset.py [--docs N] [--seed S] [--write]   (--write: the "## PII" section of
benchmarks/RESULTS.md)
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import re
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / ".." / "shared" / "data"

# Locales whose Faker phone provider writes numbers, and the region their numbers belong to.
PHONE_LOCALES = {
    "en_US": "US", "en_CA": "CA", "fr_CA": "CA", "en_GB": "GB", "en_IE": "IE", "en_AU": "AU", "en_NZ": "NZ",
    "en_IN": "IN", "hi_IN": "IN", "zu_ZA": "ZA", "de_DE": "DE", "de_AT": "AT", "de_CH": "CH", "fr_FR": "FR",
    "fr_CH": "CH", "nl_NL": "NL", "nl_BE": "BE", "es_ES": "ES", "es_MX": "MX", "es_CO": "CO", "es_CL": "CL",
    "it_IT": "IT", "pt_PT": "PT", "pt_BR": "BR", "pl_PL": "PL", "cs_CZ": "CZ", "sk_SK": "SK", "hu_HU": "HU",
    "ro_RO": "RO", "hr_HR": "HR", "sl_SI": "SI", "da_DK": "DK", "sv_SE": "SE", "no_NO": "NO", "fi_FI": "FI",
    "el_GR": "GR", "tr_TR": "TR", "ru_RU": "RU", "uk_UA": "UA", "he_IL": "IL", "fa_IR": "IR", "ja_JP": "JP",
    "ko_KR": "KR", "zh_CN": "CN", "zh_TW": "TW", "th_TH": "TH", "id_ID": "ID", "vi_VN": "VN", "tw_GH": "GH",
}
IBAN_LOCALES = ["de_DE", "fr_FR", "en_GB", "nl_NL", "es_ES", "it_IT", "pl_PL", "pt_PT", "pt_BR", "cs_CZ",
                "sk_SK", "da_DK", "fi_FI", "no_NO", "sv_SE", "de_AT", "de_CH", "nl_BE", "en_IE", "ro_RO",
                "hr_HR", "sl_SI", "el_GR", "tr_TR", "uk_UA", "az_AZ", "fa_IR", "he_IL", "lt_LT", "lv_LV",
                "et_EE", "bg_BG", "ar_AE"]
EMAIL_LOCALES = ["en_US", "en_GB", "de_DE", "fr_FR", "es_ES", "it_IT", "nl_NL", "pt_BR", "pl_PL", "sv_SE",
                 "ru_RU", "ja_JP", "zh_CN", "tr_TR", "cs_CZ"]
CARD_WEIGHTS = {"visa16": 30, "mastercard": 28, "amex": 8, "discover": 5, "visa13": 3, "visa19": 3,
                "maestro": 8, "diners": 5, "jcb16": 5, "jcb15": 5}

TEMPLATES = {
    "email": ["For questions, write to {v}.", "Contact: {v}", "Send your application to {v} before Friday.",
              "Reply to <{v}> with the signed form.", "E-Mail: {v}", "Courriel : {v}", "Correo electrónico: {v}.",
              "Questions? Mail {v} (we answer within two days).", "mailto:{v}"],
    "phone": ["Call us on {v}.", "Phone: {v}", "Tel. {v}", "For bookings ring {v} between 9 and 5.",
              "You can reach her at {v} or by mail.", "Telefon: {v}", "Téléphone : {v}", "Teléfono: {v}.",
              "Telefoon {v}", "Fax {v}", "(mobile: {v})", "Emergency line — {v} — open all night."],
    "credit_card": ["Card number: {v}", "Paid with card {v}, expiry 09/27.", "The charge on {v} was refunded.",
                    "Kartennummer: {v}", "Numéro de carte : {v}.", "Please bill {v} for the renewal."],
    "iban": ["IBAN: {v}", "Please transfer the amount to {v}.", "Bankverbindung: IBAN {v}, BIC DEUTDEFF",
             "Compte : {v}", "Pay into account {v} by the 15th.", "iban {v}"],
    "ssn": ["SSN: {v}", "Social security number {v} is on file.", "The form lists SSN {v} for the employee.",
            "Employee {v} (social security number) was added to payroll."],
    "ip_address": ["Login from {v} was blocked.", "The server listens on {v}.", "Client IP: {v}",
                   "Traffic from {v} doubled overnight.", "Set the gateway to {v} and restart."],
}
NEGATIVE_TEMPLATES = ["Reference {v}.", "See item {v} in the list.", "Recorded as {v} in the ledger.",
                      "Figure: {v}", "The value {v} was reported.", "Code {v} applies here."]


@dataclass
class Unit:
    name: str
    text: str
    gold: list[tuple[str, int, int]] = field(default_factory=list)  # (type, start, end)
    ignore: list[tuple[int, int]] = field(default_factory=list)     # spans where any verdict is fine


# ------------------------------------------------------------------------------------------------ real text


def real_prose_sentences(limit: int = 20000) -> list[str]:
    """Sentences of real news and Wikipedia text, the filler around templated values."""
    text = DATA / "text"
    raw = gzip.open(text / "news" / "nltk_abc" / "rural.txt.gz", "rt", encoding="utf-8").read()
    raw += "\n" + (text / "wikitext-2" / "wiki.test.raw.blanklines_stripped_crlf").read_text("utf-8")
    out = []
    for s in re.split(r"(?<=[.!?])\s+", raw):
        s = " ".join(s.split())
        if 40 <= len(s) <= 300 and not s.startswith("="):
            out.append(s)
    return out[:limit]


def real_texts():
    """(name, text) of real crawl and prose text: the false-positive pool. Read in place from ../shared/data."""
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


WARC_PAGES = ("aut_warc_example.warc.gz", "dolma_sample-0000.warc.gz", "dolma_sample-0001.warc.gz",
              "pywb_iana.warc.gz", "ukwa_govuk_BL-20140325121225068.warc.gz",
              "ukwa_govuk_BL-20140325122341434.warc.gz", "resiliparse_warcfile.warc.gz")

# Every value in real_texts() that is personal data of one of our types, labelled by reading the text
# around each candidate any version of the detectors (or a loose pattern) found: type, or None for a
# value that is not PII although it looks like it. Values not listed are not PII.
REVIEWED: dict[str, str | None] = {
    # phones
    "781-442-0750": "phone",          # AG News: "contact Miriam Kandansky at 781-442-0750"
    "(801) 596-1887": "phone",        # the Project Gutenberg Literary Archive Foundation, in every book
    "020 7393 1500": "phone", "+32 (0)2 790 75 75": "phone", "+32 (0)2 790 75 85": "phone",  # CC contact pages
    "415-561-6767": "phone", "(866) 329-7480": "phone", "206-543-9196": "phone",  # archive.org, docucomp, UW
    "0512-55111066": "phone", "0512-55111088": "phone", "021-56692669": "phone", "021-36070335": "phone",
    "021-54098575": "phone", "021-54098577": "phone", "00852-27100021": "phone", "00852-26875563": "phone",
    "0900 4683643": "phone",          # Dutch service number
    "1300 224 636": "phone",          # ABC rural news: "The hotline number ... is 1300 224 636" (Australia)
    "03549-02811": None,              # ABC news: star catalogue number "GSC 03549-02811"
    "2603 9859": None,                # ABC news: star "UCAC 2603 9859"
    # e-mail addresses (the @name@host ones are fediverse handles, which are written as e-mail addresses)
    **dict.fromkeys(
        "business@pglaf.org gbnewby@pglaf.org ask@bufvc.ac.uk info@claihr.ca info@eun.org info@archive.org "
        "moviearchive-subscribe@yahoogroups.com tz@iana.org team@data.gov.uk shrinkthinks@spore.social "
        "scanner-rachel-berhane@archive.org scanner-adrian-wiemhoff@archive.org mhoye@mastodon.social "
        "info@docucomp.com info@creativecommons.org contact@stanley-ks.cn b2c@wien.rocks axz@cs.uw.edu "
        "anaik@cs.cmu.edu Xanatos@social.dev-wiki.de 550502573@qq.com".split(), "email"),
    # public IP addresses: IANA's root-server table, a CC page on crawler addresses
    **dict.fromkeys(
        "38.107.191.66 38.107.191.119 202.12.27.33 199.7.91.13 199.7.83.42 198.41.0.4 193.0.14.129 "
        "192.58.128.30 192.5.5.241 192.36.148.17 192.33.4.12 192.228.79.201 192.203.230.10 192.112.36.4 "
        "128.63.2.53 2001:dc3::35 2001:7fe::53 2001:7fd::1 2001:503:c27::2:30 2001:503:ba3e::2:30 2001:500:3::42 "
        "2001:500:2f::f 2001:500:2d::d 2001:500:1::803f:235".split(), "ip_address"),
    # private, documentation and multicast addresses, written as addresses: IANA's multicast registry and
    # address-format pages, a web forum's "127.0.0.1" (redacted by default: keep_private_ip is false)
    **dict.fromkeys(
        "192.0.2.53 2001:0db8:582:ae33::29 224.0.2.0 224.0.255.255 224.3.0.0 224.4.255.255 233.252.0.0 "
        "233.255.255.255 224.252.0.0 224.255.255.255 224.0.1.0 224.0.1.255 224.0.0.0 224.0.0.255 224.1.0.0 "
        "224.1.255.255 224.5.0.0 224.251.255.255 225.0.0.0 231.255.255.255 224.2.0.0 224.2.255.255 232.0.0.0 "
        "232.255.255.255 127.0.0.1".split(), "ip_address"),
    "10.0.0.210": None,               # firefox forum: "If Shockwave player 10.0.0.210 is installed" (a version)
}


def real_units() -> list[Unit]:
    """The real texts with every REVIEWED value of a PII type labelled at each of its occurrences."""
    units = []
    for name, text in real_texts():
        gold = []
        for value, kind in REVIEWED.items():
            if kind is None:
                continue
            for m in re.finditer(re.escape(value), text):
                before, after = text[m.start() - 1: m.start()], text[m.end(): m.end() + 1]
                if not (before.isalnum() or after.isalnum()):  # the value itself, not part of a longer one
                    gold.append((kind, m.start(), m.end()))
        units.append(Unit(f"real:{name}", text, gold))
    return units


# ---------------------------------------------------------------------------------------------- synthetic


def _luhn_ok(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = int(ch) * (2 if i % 2 else 1)
        total += d - 9 if d > 9 else d
    return total % 10 == 0


def _group_card(number: str, rng: random.Random) -> str:
    """How people print card numbers: bare, or in fours (Amex 4-6-5, Diners 4-6-4) with spaces or dashes."""
    style = rng.choice(["bare", "space", "dash"])
    if style == "bare":
        return number
    sep = " " if style == "space" else "-"
    if len(number) in (14, 15):
        return sep.join([number[:4], number[4:10], number[10:]])
    return sep.join(number[i:i + 4] for i in range(0, len(number), 4))


def _print_iban(iban: str, rng: random.Random) -> str:
    grouped = rng.random() < 0.5
    text = " ".join(iban[i:i + 4] for i in range(0, len(iban), 4)) if grouped else iban
    return text.lower() if rng.random() < 0.25 else text


class Generator:
    """Values and look-alikes, each from a seeded Faker of some locale."""

    def __init__(self, seed: int, regions: tuple[str, ...]):
        from faker import Faker

        self.rng = random.Random(seed)
        self.regions = set(regions)
        locales = sorted(set(PHONE_LOCALES) | set(IBAN_LOCALES) | set(EMAIL_LOCALES))
        self.fakers = {}
        for i, loc in enumerate(locales):
            self.fakers[loc] = Faker(loc)
            self.fakers[loc].seed_instance(seed * 1000 + i)
        self.stats: Counter[str] = Counter()

    def positive(self, kind: str) -> tuple[str, str]:
        """(value as written, label): label is the type, or "ignore" (see the module docstring)."""
        rng = self.rng
        if kind == "email":
            f = self.fakers[rng.choice(EMAIL_LOCALES)]
            return rng.choice([f.email, f.free_email, f.company_email, f.ascii_safe_email])(), kind
        if kind == "phone":
            return self._phone()
        if kind == "credit_card":
            f = self.fakers["en_US"]
            card_type = rng.choices(list(CARD_WEIGHTS), weights=list(CARD_WEIGHTS.values()))[0]
            self.stats[f"card:{card_type}"] += 1
            return _group_card(f.credit_card_number(card_type), rng), kind
        if kind == "iban":
            return _print_iban(self.fakers[rng.choice(IBAN_LOCALES)].iban(), rng), kind
        if kind == "ssn":
            value = self.fakers["en_US"].ssn()
            return (value.replace("-", " ") if rng.random() < 0.2 else value), kind
        if kind == "ip_address":
            f = self.fakers["en_US"]
            return rng.choice([f.ipv4_public, f.ipv4_private, f.ipv4, f.ipv6])(), kind
        raise ValueError(kind)

    def _phone(self) -> tuple[str, str]:
        import phonenumbers

        loc = self.rng.choice(sorted(PHONE_LOCALES))
        region = PHONE_LOCALES[loc]
        value = self.fakers[loc].phone_number()
        digits = value.split("x")[0].split("ext")[0]
        try:
            valid = phonenumbers.is_valid_number(phonenumbers.parse(digits, region))
        except phonenumbers.NumberParseException:
            valid = False
        if not value.isascii():
            valid = False  # digits in other scripts (Faker's bn_BD, fa_IR sometimes): not what we scan for
        international = value.lstrip("(").startswith("+") or value.startswith("00")
        self.stats[f"phone:{'valid' if valid else 'unallocated'}"] += 1
        if valid and (international or region in self.regions):
            return value, "phone"
        return value, "ignore"

    def negative(self) -> str:
        """A value that looks like PII and is not."""
        rng = self.rng
        f = self.fakers[rng.choice(sorted(PHONE_LOCALES))]
        en = self.fakers["en_US"]
        kind = rng.randrange(16)
        if kind == 0:
            return f.date(pattern=rng.choice(["%Y-%m-%d", "%d/%m/%Y", "%d.%m.%Y", "%m-%d-%Y", "%d %m %Y"]))
        if kind == 1:
            return f"{f.date(pattern='%d.%m.%Y')} {f.time(pattern='%H:%M')}"
        if kind == 2:
            return rng.choice([en.isbn13(separator="-"), en.isbn10(separator="-")])
        if kind == 3:
            return en.ean13()
        if kind == 4:  # a version or build number
            return rng.choice([f"{rng.randint(1, 9)}.{rng.randint(0, 20)}.{rng.randint(0, 99)}",
                               f"{rng.randint(1, 20)}.{rng.randint(0, 9)}.{rng.randint(1000, 30000)}.{rng.randint(0, 999)}"])
        if kind == 5:
            a = rng.randint(1024, 60000)
            return f"{a}-{rng.randint(a + 1, 65535)}"  # a range
        if kind == 6:
            y = rng.randint(1850, 2020)
            return " ".join(str(y + i) for i in range(rng.randint(2, 4)))  # years in a table
        if kind == 7:
            return f"{en.ein()}"  # US employer id: 12-3456789
        if kind == 8:
            return en.itin()  # 9xx-xx-xxxx: not an SSN
        if kind == 9:
            return en.aba()  # routing number, 9 bare digits
        if kind == 10:  # a card number with one digit changed: fails Luhn
            number = en.credit_card_number(rng.choice(list(CARD_WEIGHTS)))
            bad = next(number[:-1] + d for d in "0123456789" if not _luhn_ok(number[:-1] + d))
            return _group_card(bad, rng)
        if kind == 11:  # an IBAN with wrong check digits (exactly one pair of check digits is right)
            iban = self.fakers[rng.choice(IBAN_LOCALES)].iban()
            check = rng.choice([c for c in range(2, 99) if c != int(iban[2:4])])
            return _print_iban(f"{iban[:2]}{check:02d}{iban[4:]}", rng)
        if kind == 12:
            return rng.choice([f.postcode, f.building_number])()
        if kind == 13:
            return f"{rng.randint(1, 999):,}{rng.choice(['', ',' + str(rng.randint(100, 999))])}"  # a count
        if kind == 14:
            return en.pricetag()
        return f"{rng.randint(100, 999)}-{rng.randint(10, 99)}-{rng.randint(1000, 9999)}x"  # part number


KINDS = ("email", "phone", "credit_card", "iban", "ssn", "ip_address")


def synthetic_units(n_docs: int, seed: int, regions: tuple[str, ...]) -> tuple[list[Unit], Generator]:
    """Documents of real prose sentences with 1-4 templated values and 1-3 look-alikes each."""
    gen = Generator(seed, regions)
    rng = gen.rng
    prose = real_prose_sentences()
    units = []
    for d in range(n_docs):
        pieces: list[tuple[str, str | None, str | None]] = []  # (sentence, value, label)
        for _ in range(rng.randint(2, 5)):
            pieces.append((rng.choice(prose), None, None))
        for _ in range(rng.randint(1, 4)):
            kind = rng.choice(KINDS)
            value, label = gen.positive(kind)
            pieces.append((rng.choice(TEMPLATES[kind]), value, label))
        for _ in range(rng.randint(1, 3)):
            pieces.append((rng.choice(NEGATIVE_TEMPLATES), gen.negative(), None))
        rng.shuffle(pieces)
        text, gold, ignore = "", [], []
        for sentence, value, label in pieces:
            text += " " if text else ""
            if value is None:
                text += sentence
                continue
            before, after = sentence.split("{v}")
            start = len(text) + len(before)
            text += before + value + after
            if label == "ignore":
                ignore.append((start, start + len(value)))
            elif label is not None:
                gold.append((label, start, start + len(value)))
        units.append(Unit(f"synthetic:{d}", text, gold, ignore))
    return units, gen


# -------------------------------------------------------------------------------------------- measuring


def detectors_at(commit: str):
    """tokenmill/pii/detectors.py as it was at `commit` (git show), loaded as a module of its own."""
    import importlib.util
    import subprocess
    import tempfile

    source = subprocess.run(["git", "show", f"{commit}:src/tokenmill/pii/detectors.py"], cwd=ROOT, check=True,
                            capture_output=True, text=True).stdout
    path = Path(tempfile.mkdtemp()) / "detectors_before.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("detectors_before", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def measure(units: list[Unit], params: dict | None = None, detect=None) -> dict:
    """Per-type precision and recall of PIIProcessor's detection (exact span and type) on labelled units.
    detect(text) -> matches replaces the current detectors (to measure an earlier version)."""
    from tokenmill.pii import PIIProcessor
    from tokenmill.pii.detectors import TYPES, find_all
    from tokenmill.pii.params import Pii

    proc = PIIProcessor(Pii.resolve(params))
    tp, n_pred, n_gold = Counter(), Counter(), Counter()
    misses, false = [], []
    for u in units:
        if detect is not None:
            found = detect(u.text)
        else:
            found = find_all(u.text, TYPES, proc.keep_private_ip, proc.phone_regions, proc.phone_validation)
        pred = {(m.type, m.start, m.end) for m in found if m.type in proc.types}
        gold = set(u.gold)
        for kind, s, e in pred:
            if (kind, s, e) in gold:
                tp[kind] += 1
                n_pred[kind] += 1
            elif not any(s < ie and is_ < e for is_, ie in u.ignore):
                n_pred[kind] += 1
                false.append((u.name, kind, u.text[s:e], u.text[max(0, s - 40):e + 40]))
        for kind, s, e in gold:
            n_gold[kind] += 1
            if (kind, s, e) not in pred:
                misses.append((u.name, kind, u.text[s:e], u.text[max(0, s - 40):e + 40]))
    out = {}
    for kind in TYPES:
        out[kind] = {"tp": tp[kind], "pred": n_pred[kind], "gold": n_gold[kind],
                     "precision": tp[kind] / n_pred[kind] if n_pred[kind] else 1.0,
                     "recall": tp[kind] / n_gold[kind] if n_gold[kind] else 1.0}
    out["_errors"] = {"false_positives": false, "misses": misses}
    return out


def table(res: dict) -> str:
    from tokenmill.pii.detectors import TYPES

    rows = ["| type | labelled | found | correct | precision | recall |", "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for kind in TYPES:
        r = res[kind]
        rows.append(f"| {kind} | {r['gold']:,} | {r['pred']:,} | {r['tp']:,} | {r['precision']:.3f} | {r['recall']:.3f} |")
    return "\n".join(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=int, default=5000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--write", action="store_true", help="write the PII section of benchmarks/RESULTS.md")
    ap.add_argument("--before", metavar="COMMIT", help="also measure tokenmill/pii/detectors.py as of COMMIT")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from benchlib import machine, write_section

    from tokenmill.pii.detectors import DEFAULT_REGIONS

    t0 = time.perf_counter()
    synth, gen = synthetic_units(args.docs, args.seed, DEFAULT_REGIONS)
    real = real_units()
    built = time.perf_counter() - t0
    results = {}
    for name, units in (("synthetic", synth), ("real", real), ("all", synth + real)):
        t = time.process_time()
        results[name] = measure(units)
        results[name]["_seconds"] = time.process_time() - t
        results[name]["_chars"] = sum(len(u.text) for u in units)
    possible = measure(synth, {"phone_validation": "possible"})
    before = None
    if args.before:
        old = detectors_at(args.before)
        before = measure(synth + real, detect=old.find_all)
        t = time.process_time()
        for u in synth + real:
            old.find_all(u.text)
        before["_seconds"] = time.process_time() - t
        print(f"\ndetectors at {args.before}:\n" + table(before))
    for name, res in results.items():
        print(f"\n{name}: {len(synth) if name == 'synthetic' else ''} {res['_chars'] / 1e6:.1f} MB, "
              f"{res['_seconds']:.1f} CPU s to detect")
        print(table(res))
        for what, rows in res["_errors"].items():
            for row in rows[:30]:
                print(f"  {what}: {row}")
    print(f"\nphone_validation possible (synthetic): {possible['phone']}")
    print("generator:", dict(sorted(gen.stats.items())), f"built in {built:.1f} s")
    if not args.write:
        return
    m = machine(["phonenumbers", "Faker"])
    cards = ", ".join(f"{k} {v}" for k, v in sorted(gen.stats.items()) if k.startswith("card:"))
    phones = gen.stats
    ignored = sum(1 for u in synth for _ in u.ignore)
    errors = results["all"]["_errors"]
    fp_types = Counter(k for _, k, _, _ in errors["false_positives"])
    miss_types = Counter(k for _, k, _, _ in errors["misses"])
    text = f"""## PII

`python benchmarks/pii_devset.py --docs {args.docs} --seed {args.seed} --write` on {m['nproc']} cores
({m['cpu']}), Python {m['python']}, phonenumbers {m['versions']['phonenumbers']}, Faker {m['versions']['Faker']};
default parameters (conf/pii/default.yaml). Exact span and type: a detection counts only with the labelled
span. The development set and what its labels mean are described in benchmarks/pii_devset.py.

Synthetic: {args.docs:,} documents ({results['synthetic']['_chars'] / 1e6:.1f} MB) of real news and Wikipedia sentences
with templated values from Faker in {len(PHONE_LOCALES)} phone locales, {len(IBAN_LOCALES)} IBAN locales and {len(EMAIL_LOCALES)}
e-mail locales, and look-alikes that are not PII. Phone numbers Faker wrote outside any allocated range
({phones['phone:unallocated']:,} of {phones['phone:unallocated'] + phones['phone:valid']:,}) and valid national numbers of regions not in
`phone_regions` are `ignore` spans ({ignored:,} in all). Cards by generator: {cards}.

{table(results['synthetic'])}

Real text ({results['real']['_chars'] / 1e6:.1f} MB: pages from seven real crawls, Common Crawl JSONL, WikiText,
news, a web forum, two Gutenberg books), every PII value in it labelled by hand:

{table(results['real'])}

Both together:

{table(results['all'])}

- Errors, both sets: false positives by type {dict(fp_types) or 'none'}; misses by type {dict(miss_types) or 'none'}.
  Examples: {'; '.join(repr(e[2]) for e in (errors['false_positives'][:3] + errors['misses'][:5])) or 'none'}.
- `phone_validation: possible` (length only) on the synthetic set: phone precision
  {possible['phone']['precision']:.3f}, recall {possible['phone']['recall']:.3f}; it also redacts Faker's numbers in unallocated ranges.
- Detection time: {results['all']['_seconds']:.1f} CPU s for {results['all']['_chars'] / 1e6:.1f} MB
  ({results['all']['_chars'] / 1e6 / results['all']['_seconds']:.1f} MB per CPU-second, all six types).
"""
    if before:
        text += f"""
The detectors before this work (`--before {args.before}`: regex phone shapes, cards 13-19 digits by first digit,
upper-case IBANs), same sets, both together, {before['_seconds']:.1f} CPU s:

{table(before)}
"""
    write_section(ROOT / "benchmarks" / "RESULTS.md", "## PII", text)
    print("wrote the PII section of benchmarks/RESULTS.md")


if __name__ == "__main__":
    main()
