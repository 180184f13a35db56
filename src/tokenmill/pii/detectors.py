"""Detectors for personal data in text. Each finds the spans of one entity type; `find_all` merges them.

Every detector is a candidate regex followed by a validity check in Python, because a regex alone cannot
tell a card number from a long id (Luhn), an IBAN from a product code (mod-97), or a phone number from a
date or a list of numbers. The checks are deliberately strict: a missed number costs less than a page of
technical text (version strings, addresses in tutorials, tables of figures) redacted by mistake.

What each type means here (tests/test_pii.py measures it on labelled real data):

- email: local@domain.tld, ASCII; a final label that is a file extension ("logo@2x.png", "a@mm.html" in a
  URL path) is not a domain.
- phone: a candidate cut from a run of digit groups, then validated by libphonenumber (the `phonenumbers`
  package): international "+CC ..." / "00CC ..." / "(+CC) ..." against that country's numbering plan
  (a "(0)" trunk allowed), national formats ("(425) 882-9090", "425.882.9090", "020 7393 1500",
  "0512-55111066") against the plan of each configured default region (phone_regions). With
  phone_validation "valid" (default) the number must lie in an allocated range; "possible" checks only its
  length. An extension written after it ("x123", "ext. 12") is part of the span.
  Not phones, whatever the plans say: bare digit strings such as "4258829090" (ids, timestamps), dates,
  times, ranges ("32768-65535", "1940-1945"), the 3-2-4 SSN shape, ISBN/ISSN, runs of small numbers
  ("08 09 10 11 12"), round figures ("250 500 1000").
- ip_address: IPv4 with octets 0-255 (no leading zeros; not a version: four single digits "2.9.0.5", or
  right after "version"/"v"/"build"/...), IPv6 in any RFC 4291/5952 form (checked with the ipaddress
  module; at least two non-empty groups and one digit, so "::" and "a::b" in code are not addresses).
  Every valid address is redacted by default: the labelled sets count 192.168.0.1 as personal data, and
  the sample corpus plants documentation and private ranges as its IP ground truth. keep_private_ip (as
  datatrove's PII formatter does) redacts only globally routable unicast addresses, leaving private,
  loopback, link-local, documentation, multicast and reserved ranges, which identify no one and fill
  networking tutorials.
- credit_card: 12-19 digits, bare or in 4-4-4[-4[-x]] / 4-6-5 / 4-6-4 groups (space or dash, consistent),
  starting with an issuer range that issues that length (IIN_RANGES: Visa, Mastercard, Amex, Diners,
  Discover, JCB, UnionPay, Maestro, Mir, RuPay, ...), Luhn-valid, not a YYYYMMDDhhmm[ss...] timestamp (one
  in ten passes Luhn) and not in a URL path.
- iban: country code + 2 check digits + BBAN, compact or in groups of 4 separated by single spaces,
  in any case ("gb82 west 1234 ..."), the length of the ISO 13616 registry for that country, mod-97 == 1.
- ssn: AAA-GG-SSSS with "-" or " " (the same both times); area not 000, 666 or 9xx, group not 00,
  serial not 0000. Undelimited nine-digit numbers are not matched: without context they are any id.
"""

from __future__ import annotations

import functools
import ipaddress
import re
from typing import Callable, NamedTuple

import phonenumbers

# Types in tie-break order: when two matches of equal length overlap, the earlier type wins.
TYPES = ("iban", "credit_card", "ssn", "email", "ip_address", "phone")


class Match(NamedTuple):
    start: int
    end: int
    type: str


# --------------------------------------------------------------------------------------------- email

# Regexes here begin with a literal character or character class, never with a lookbehind: Python's re
# then skips quickly to candidate positions, which makes the stage several times faster.
_EMAIL_DOMAIN = re.compile(
    r"@((?:[A-Za-z0-9](?:[A-Za-z0-9\-]{0,61}[A-Za-z0-9])?\.)+[A-Za-z]{2,24})(?![A-Za-z0-9\-])"
)
_EMAIL_LOCAL = re.compile(r"[A-Za-z0-9._%+\-]{1,64}$")  # searched backwards from the "@"
_LOCAL_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._%+-")
# Final labels that are file extensions, not top-level domains: "icon@2x.png", ".../w32.vote.a@mm.html".
_FILE_EXTENSIONS = frozenset(
    "html htm xhtml shtml php asp aspx jsp cgi png jpg jpeg gif svg webp bmp ico tif tiff css js mjs json "
    "xml txt pdf doc docx xls xlsx ppt pptx csv zip gz tgz rar mp3 mp4 wav avi mov webm".split()
)


def find_emails(text: str) -> list[tuple[int, int]]:
    if "@" not in text:
        return []
    out = []
    for m in _EMAIL_DOMAIN.finditer(text):
        at = m.start()
        local = _EMAIL_LOCAL.search(text, max(0, at - 64), at)
        if local is None:
            continue
        start = local.start()
        if start > 0 and text[start - 1] in _LOCAL_CHARS:
            continue  # a local part longer than 64 characters: some other token
        while text[start] == ".":
            start += 1
        if start == at or text[at - 1] == ".":
            continue
        if m.group(1).rsplit(".", 1)[1].lower() not in _FILE_EXTENSIONS:
            out.append((start, m.end()))
    return out


# --------------------------------------------------------------------------------------------- phone

# Phone numbers are found in two steps. First our own scan cuts runs of digit groups into candidates with
# the shapes people write numbers in, and throws out what only looks like one (dates, ranges, counting
# sequences, round figures, ids without separators). Then libphonenumber (Google's numbering-plan data,
# through the `phonenumbers` package) decides whether the candidate is a phone number: international
# numbers ("+44 20 7946 0958", "0044 20 ...", "(+57) 301 ...") against their country's plan, national
# numbers ("020 7946 0958", "(425) 882-9090", "0512-55111066") against the plan of each default region.
#
# phonenumbers' own PhoneNumberMatcher was measured on the 11.9 MB of real text in tests/test_pii.py:
# 3.0 s per region (ours: 0.10 s for all regions), and with DE and FR among its regions it matched years
# ("1694"), US-style dates ("08-29-1968") and port ranges ("32768-65535"). So it validates, it does not scan.

# The regions whose national formats (without "+") are recognised, and how strict validation is, are
# parameters (conf/pii/default.yaml: phone_regions, phone_validation); these are the code defaults.
# English-speaking countries and large crawls (French, Dutch, Chinese) with fixed-length plans. Measured
# share of random digit strings "0" + 7-11 digits that libphonenumber calls valid: GB 0.06, AU 0.08,
# CN 0.10, NL 0.11, IN 0.13, IE 0.16, ZA 0.16, FR 0.17, NZ 0.18 -- but DE 0.70 and IT 0.54 (variable-length plans), and regions
# without a trunk prefix (ES, IT, NO, DK, PL, ...) do not even need the leading 0. With DE among the
# defaults, 6 of 29 false positives on the development set were DE "numbers" (benchmarks/pii_devset.py).
# Add such regions when the crawl is from there: their numbers written internationally are found anyway.
DEFAULT_REGIONS = ("US", "CA", "GB", "IE", "AU", "NZ", "ZA", "IN", "FR", "NL", "CN")

# A run: groups of digits (a group may be parenthesised, the first may start with "+") joined by single
# separators. Runs are found first and then cut into phone numbers, so that "052 5552606 074-7111234"
# gives two numbers and "09 10 11 12 13 14" none.
_GROUP = r"(?:\([+]?[0-9]{1,5}\)|[0-9]+)"
_SEP = r"[ .\-\u00a0]"
_PHONE_RUN = re.compile(
    # The first character, "+", "(" or a digit, not in the middle of a word, number, path or amount ...
    r"[0-9(+](?<![\w/@$#%&=+][0-9(+])(?<![0-9][.,\-][0-9(+])"
    r"(?=[0-9()+ .\-\u00a0]{6})"  # (a run shorter than 7 characters is no phone number: skip it early)
    # ... completed to the first group: "(425)", "(+32)", "+32", "+(32)" or digits ...
    r"(?:(?<=\()[+]?[0-9]{1,5}\)|(?<=\+)" + _GROUP + r"|(?<=[0-9])[0-9]*)"
    # ... then more groups, each after one separator (none is needed next to a parenthesis).
    rf"(?:(?:{_SEP}|(?<=\))|(?=\())[+]?{_GROUP})*"
)
_RUN_GROUP = re.compile(rf"[+]?{_GROUP}")
_DATE = re.compile(r"[0-9]{1,2}([./\- ])[0-9]{1,2}\1(?:19|20)[0-9][0-9](?![0-9])"
                   r"|(?:19|20)[0-9][0-9]([./\- ])[0-9]{1,2}\2[0-9]{1,2}(?![0-9])")
_IDD = re.compile(r"00[1-9][0-9]{0,2}$")  # the international call prefix 00 and a country code
_ISBN_CONTEXT = re.compile(r"(?:ISBN|ISSN)(?:-1[03])?:?\s*$", re.IGNORECASE)
# Words that introduce a phone number (English, German, French, Spanish, Dutch, Italian, Portuguese):
# after one of them an undelimited digit string ("Tel. 0254419193") is read as a number; elsewhere a
# bare digit string is an id, a timestamp or a count.
_PHONE_WORD = re.compile(
    r"\b(?:phone|tel|telephone|call|ring|mobile|cell|fax|hotline|whatsapp|sms|telefon|handy|t[ée]l[ée]phone|"
    r"portable|tel[ée]fono|m[óo]vil|celular|telefoon|mobiel|telefone|cellulare)\b[^0-9\n]{0,16}$", re.IGNORECASE)
# An extension written after the number belongs to it: "202-555-0143x123", "(202) 555-0143 ext. 12".
_EXTENSION = re.compile(r" ?(?:x|ext\.?|extension) ?[0-9]{1,6}(?![0-9])", re.IGNORECASE)


class _Group(NamedTuple):
    start: int
    end: int
    digits: str
    paren: bool
    plus: bool
    sep: str  # the separator before this group in its run ("" for the first)


def _phone_shape(groups: list[_Group], bare_ok: bool = False) -> bool:
    """Could this sequence of groups, read as one number, be written as a phone number? (No validation.)
    bare_ok: a phone word precedes it, so an undelimited digit string may be a number too."""
    first = groups[0]
    if any(g.plus for g in groups[1:]):
        return False
    # An area code in parentheses comes first, or after the country code or NANP's "1" / Russia's "8";
    # "(0)" is the optional trunk prefix of international numbers.
    after_prefix = first.plus or bool(_IDD.match(first.digits)) or first.digits in ("1", "8")
    if any(g.paren and g.digits != "0" and (k > 1 or (k == 1 and not after_prefix)) for k, g in enumerate(groups)):
        return False
    seps = {g.sep for g in groups[1:]} - {""}
    if "." in seps and not first.plus and (
            len(seps) > 1 or len(groups) < 3 or any(len(g.digits) < 2 for g in groups)
            or (len(groups) == 4 and all(len(g.digits) <= 3 for g in groups))):
        return False  # decimals "3.14159265", versions "4920.82.0", IPv4 "192.168.10.12", "224.3.0.0-224.4"
    digits = sum(len(g.digits) for g in groups if not (g.paren and g.digits == "0"))
    if first.plus:
        return 8 <= digits <= 15 and (len(groups) > 1 or digits >= 10)
    if _IDD.match(first.digits) and not first.paren and len(groups) > 1:
        return 8 <= digits - 2 <= 15
    if len(groups) < 2:
        return bare_ok and 7 <= digits <= 13  # a bare digit string: only right after a phone word
    if any(len(g.digits) < 2 for g in groups[1:]) or (len(first.digits) == 1 and first.digits not in "18"):
        return False  # "4 0 1 0 0 0 1": scores and tables (national groups have two digits or more)
    sizes = [len(g.digits) for g in groups]
    if sizes == [3, 2, 4] and groups[1].sep == groups[2].sep:
        return False  # the shape of a US social security number
    if sizes == [2, 7] and groups[1].sep == "-":
        return False  # the shape of a US employer identification number ("03-5587399")
    if len(groups) == 2 and groups[1].sep == "-" and not first.paren and first.digits[0] != "0":
        return False  # "32768-65535", "1940-1945", "256-8388607": a range (national numbers start with 0)
    if sum(len(g.digits) == 4 and "1800" <= g.digits <= "2099" for g in groups) >= 2:
        return False  # years: "1896 1897", "2013 2014 2015", "1898-2001-02"
    return 7 <= digits <= 13


# North American numbers as they are written nationally: (AAA) EEE-LLLL, AAA-EEE-LLLL, AAA.EEE.LLLL,
# AAA EEELLLL, optionally "1" first.
_NANP = re.compile(r"(?:1[ .\-]?)?(?:(?:\([0-9]{3}\) ?|[0-9]{3}[ .\-])(?:[0-9]{3}[ .\-][0-9]{4}|[0-9]{7})|[0-9]{10})")


@functools.lru_cache(maxsize=1 << 16)
def is_phone_number(candidate: str, regions: tuple[str, ...] = DEFAULT_REGIONS, validation: str = "valid",
                    phone_word: bool = False) -> bool:
    """libphonenumber's verdict on a candidate as written: international numbers against their country's
    plan, national ones against each region's (cached: the same number recurs in footers and signatures).

    A national number must be written the way that region writes it: with its trunk prefix ("0" in most
    of the world) where the region has one, in the NANP layout for country code 1. Without this, a region
    with variable-length numbers accepts most groups of digits (measured with IT and ES among the regions:
    star catalogue numbers "2603 9859", runs of years). After a phone word ("Tel. 13905833157") the trunk
    prefix may be missing: Chinese and Indian mobile numbers are written without it.
    """
    check = phonenumbers.is_valid_number if validation == "valid" else phonenumbers.is_possible_number
    international = candidate.lstrip("(").startswith("+")
    digits = "".join(c for c in candidate if c.isdigit())
    for region in (None,) if international else regions:
        if region is not None:
            meta = phonenumbers.PhoneMetadata.metadata_for_region(region)
            idd = digits.startswith("00") or (meta.country_code == 1 and digits.startswith("011"))
            if not idd:
                if meta.country_code == 1:
                    if not _NANP.fullmatch(candidate):
                        continue
                elif meta.national_prefix and not digits.startswith(meta.national_prefix) and not phone_word:
                    continue
        try:
            number = phonenumbers.parse(candidate, region)
        except phonenumbers.NumberParseException:
            continue
        if check(number):
            return True
    return False


def _looks_like_figures(text: str, groups: list[_Group]) -> bool:
    """Dates, counting sequences and round figures that happen to have a phone number's shape."""
    if _DATE.match(text[groups[0].start:groups[-1].end]):
        return True
    if len(groups) >= 4 and all(len(g.digits) <= 2 for g in groups):
        values = [int(g.digits) for g in groups]
        if all(b - a == 1 for a, b in zip(values, values[1:])):
            return True
    spaced = all(g.sep in (" ", "\u00a0") for g in groups[1:])
    return (len(groups) > 1 and spaced and not groups[0].plus
            and all(len(g.digits) >= 2 and g.digits.endswith("0") for g in groups))


def find_phones(text: str, regions: tuple[str, ...] = DEFAULT_REGIONS, validation: str = "valid") -> list[tuple[int, int]]:
    out = []
    regions = tuple(regions)
    for run in _PHONE_RUN.finditer(text):
        if run.end() - run.start() < 7:
            continue
        if _ISBN_CONTEXT.search(text, max(0, run.start() - 12), run.start()):
            continue
        bare_ok = _PHONE_WORD.search(text, max(0, run.start() - 30), run.start()) is not None
        groups, prev = [], run.start()
        for m in _RUN_GROUP.finditer(text, run.start(), run.end()):
            g = m.group()
            groups.append(_Group(m.start(), m.end(), g.strip("+()"), g.lstrip("+").startswith("("), "+" in g,
                                 text[prev:m.start()]))
            prev = m.end()
        found: list[tuple[int, int]] = []  # group index ranges [i, j)
        i = 0
        while i < len(groups):
            for j in range(min(len(groups), i + 8), i, -1):  # the longest number starting at group i
                part = groups[i:j]
                if (_phone_shape(part, bare_ok and i == 0) and not _looks_like_figures(text, part)
                        and is_phone_number(text[part[0].start:part[-1].end], regions, validation, bare_ok and i == 0)):
                    found.append((i, j))
                    i = j
                    break
            else:
                i += 1
        for i, j in found:
            # A number glued to a neighbour in the same run that is not itself a phone number is part of
            # something else when the neighbour is short ("page 2 020 7393 1500", "09 10 ... 14") or joined
            # by the number's own separator ("4532 0151 1283 0367", a card number that failed Luhn).
            seps = {g.sep for g in groups[i + 1:j]}
            if i > 0 and not any(b == i for _, b in found) and (
                    len(groups[i - 1].digits) <= 2 or {groups[i].sep} == seps):
                continue
            if j < len(groups) and not any(a == j for a, _ in found) and (
                    len(groups[j].digits) <= 2 or {groups[j].sep} == seps):
                continue
            start, end = groups[i].start, groups[j - 1].end
            if text.startswith(":", end) and end + 1 < len(text) and text[end + 1].isdigit():
                continue  # a time follows: "02-10-2018 10:30"
            ext = _EXTENSION.match(text, end)
            if ext and j == len(groups):
                end = ext.end()
            out.append((start, end))
    return out


# ---------------------------------------------------------------------------------------- ip address

# Loose shape first (four dotted groups of 1-3 digits, not inside a longer dotted number), octets checked
# in Python.
_IPV4 = re.compile(r"[0-9](?<![\w.][0-9])[0-9]{0,2}\.[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}(?![\w]|\.[0-9])")
_IPV6_HINT = re.compile(r":[0-9A-Fa-f]{0,4}:")  # every IPv6 address has two colons at most 5 apart
_IPV6_CHARS = frozenset("0123456789abcdefABCDEF:.")
_VERSION_CONTEXT = re.compile(r"(?:\bv|\bver|version|release|build|firmware|update|patch)\.?:?\s*$", re.IGNORECASE)


def _routable(addr: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    return addr.is_global and not addr.is_multicast


def find_ips(text: str, keep_private: bool = False) -> list[tuple[int, int]]:
    out = []
    if "." in text:
        for m in _IPV4.finditer(text):
            if any(len(o) > 1 and (o[0] == "0" or int(o) > 255) for o in m.group().split(".")):
                continue
            if _VERSION_CONTEXT.search(text, max(0, m.start() - 12), m.start()) or len(m.group()) == 7:
                continue  # "version 10.0.0.210", "Desktop 2.9.0.5": four single-digit parts are a version
            if not keep_private or _routable(ipaddress.IPv4Address(m.group())):
                out.append((m.start(), m.end()))
    if ":" in text:
        done = 0
        for hint in _IPV6_HINT.finditer(text):
            if hint.start() < done:
                continue
            # The address is the whole run of hex digits, colons and dots around the hint.
            start, end = hint.start(), hint.end()
            while start > 0 and text[start - 1] in _IPV6_CHARS:
                start -= 1
            while end < len(text) and text[end] in _IPV6_CHARS:
                end += 1
            done = end
            while end > start and text[end - 1] == ".":
                end -= 1  # the full stop of a sentence
            if (start > 0 and (text[start - 1].isalnum() or text[start - 1] == "_")) or (
                    end < len(text) and (text[end].isalnum() or text[end] == "_")):
                continue
            candidate = text[start:end]
            if sum(1 for g in candidate.split(":") if g) < 2 or not any(c.isdigit() for c in candidate):
                continue  # "::", "a::b" (C++, Perl): no address anyone writes like that
            try:
                addr = ipaddress.IPv6Address(candidate)
            except ValueError:
                continue
            if not keep_private or _routable(addr):
                out.append((start, end))
    return out


# --------------------------------------------------------------------------------------- credit card

# 12-19 digits, bare or grouped in fours (4-4-4, 4-4-4-4, 4-4-4-4-3, ...) or as 4-6-5 / 4-6-4, with one
# separator used throughout.
_CARD = re.compile(
    r"[0-9](?<![\w\-./][0-9])"  # the first digit, not continuing a word, number or URL path
    r"(?:[0-9]{3}([ \-])[0-9]{4}\1[0-9]{4}(?:\1[0-9]{1,4}){0,2}|[0-9]{3}([ \-])[0-9]{6}\2[0-9]{4,5}|[0-9]{11,18})"
    r"(?![\w]|[.\-][0-9])"
)

# Issuer identification number ranges and the lengths their cards have: ISO/IEC 7812 and the networks'
# published tables, as collected in Wikipedia's "Payment card number" (2026), plus the older ranges still
# printed on cards in circulation (JCB 1800/2131 at 15 digits, Maestro 56-58). Prefixes are compared on
# their first len(low) digits. Left out: UATP (1..., airline accounts: a 15-digit id starting with 1 is
# far more often something else) and Faker's Maestro "0604" (no registry lists a 0 issuer range).
_ANY = tuple(range(12, 20))
IIN_RANGES: list[tuple[str, str, tuple[int, ...]]] = [
    ("4", "4", (13, 16, 19)),                                   # Visa, Visa Electron
    ("51", "55", (16,)), ("2221", "2720", (16,)),               # Mastercard
    ("34", "34", (15,)), ("37", "37", (15,)),                   # American Express
    ("300", "305", (14, 15, 16, 17, 18, 19)), ("3095", "3095", (14, 15, 16, 17, 18, 19)),
    ("36", "36", (14, 15, 16, 17, 18, 19)), ("38", "39", (14, 15, 16, 17, 18, 19)),  # Diners Club
    ("6011", "6011", (16, 17, 18, 19)), ("644", "649", (16, 17, 18, 19)), ("65", "65", (16, 17, 18, 19)),  # Discover
    ("3528", "3589", (16, 17, 18, 19)), ("1800", "1800", (15,)), ("2131", "2131", (15,)),  # JCB
    ("62", "62", (16, 17, 18, 19)), ("81", "81", (16, 17, 18, 19)),  # UnionPay
    ("5018", "5018", _ANY), ("5020", "5020", _ANY), ("5038", "5038", _ANY), ("5893", "5893", _ANY),
    ("56", "58", _ANY), ("6304", "6304", _ANY), ("6390", "6390", _ANY), ("6759", "6759", _ANY),
    ("6761", "6763", _ANY),                                      # Maestro
    ("2200", "2204", (16, 17, 18, 19)),                          # Mir
    ("60", "60", (16,)), ("508", "508", (16,)), ("82", "82", (16,)),  # RuPay
    ("636", "636", (16, 17, 18, 19)), ("637", "639", (16,)),     # InterPayment, InstaPayment
    ("9792", "9792", (16,)),                                     # Troy
]


def card_issuer_length_ok(digits: str) -> bool:
    """Does some issuer range start these digits and use cards of this length?"""
    return any(low <= digits[:len(low)] <= high and len(digits) in lengths for low, high, lengths in IIN_RANGES)


# YYYYMMDDhhmm at the start of a longer digit string: crawl, log and file-name timestamps.
_TIMESTAMP = re.compile(r"(?:19|20)[0-9]{2}(?:0[1-9]|1[0-2])(?:0[1-9]|[12][0-9]|3[01])(?:[01][0-9]|2[0-3])[0-5][0-9]")


def luhn_valid(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = int(ch)
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def find_cards(text: str) -> list[tuple[int, int]]:
    out = []
    for m in _CARD.finditer(text):
        digits = m.group().replace(" ", "").replace("-", "")
        if not 12 <= len(digits) <= 19 or not card_issuer_length_ok(digits) or not luhn_valid(digits):
            continue
        if _TIMESTAMP.match(digits):
            continue  # 20080430204832: a crawl or log timestamp that happens to pass Luhn
        if _ISBN_CONTEXT.search(text, max(0, m.start() - 12), m.start()):
            continue
        out.append((m.start(), m.end()))
    return out


# ---------------------------------------------------------------------------------------------- iban

# Total IBAN length per country, from the SWIFT IBAN registry (ISO 13616).
IBAN_LENGTHS = {
    "AD": 24, "AE": 23, "AL": 28, "AT": 20, "AZ": 28, "BA": 20, "BE": 16, "BG": 22, "BH": 22, "BI": 27,
    "BR": 29, "BY": 28, "CH": 21, "CR": 22, "CY": 28, "CZ": 24, "DE": 22, "DJ": 27, "DK": 18, "DO": 28,
    "EE": 20, "EG": 29, "ES": 24, "FI": 18, "FK": 18, "FO": 18, "FR": 27, "GB": 22, "GE": 22, "GI": 23,
    "GL": 18, "GR": 27, "GT": 28, "HN": 28, "HR": 21, "HU": 28, "IE": 22, "IL": 23, "IQ": 23, "IS": 26,
    "IT": 27, "JO": 30, "KW": 30, "KZ": 20, "LB": 28, "LC": 32, "LI": 21, "LT": 20, "LU": 20, "LV": 21,
    "LY": 25, "MC": 27, "MD": 24, "ME": 22, "MK": 19, "MN": 20, "MR": 27, "MT": 31, "MU": 30, "NI": 28,
    "NL": 18, "NO": 15, "OM": 23, "PK": 24, "PL": 28, "PS": 29, "PT": 25, "QA": 29, "RO": 24, "RS": 22,
    "RU": 33, "SA": 24, "SC": 31, "SD": 18, "SE": 24, "SI": 19, "SK": 24, "SM": 27, "SO": 23, "ST": 25,
    "SV": 28, "TL": 23, "TN": 24, "TR": 26, "UA": 29, "VA": 22, "VG": 24, "XK": 20, "YE": 30,
    "IR": 26,  # not in SWIFT's registry, but Iran's banks issue ISO 13616 IBANs (Central Bank of Iran, 2013)
}
# Case-insensitive: IBANs are printed in capitals, but typed in lower case in mails and forms as often.
# The match is the two check digits; the country code is the two letters before them, which the lookbehinds
# require (and no letter or digit before those). Anchoring on digits rather than letters lets the regex engine
# skip prose to the next digit: 4.5x less time on 5.3 MB of news and Wikipedia, the same starts.
_IBAN_CHECK_DIGITS = re.compile(r"[0-9](?<=[A-Za-z]{2}[0-9])(?<![A-Za-z0-9][A-Za-z]{2}[0-9])[0-9](?=[ ]?[A-Za-z0-9])")


def iban_valid(iban: str) -> bool:
    """ISO 13616: the registry length for the country, and mod-97 of the rearranged number equal to 1."""
    iban = iban.upper()
    if IBAN_LENGTHS.get(iban[:2]) != len(iban):
        return False
    rearranged = iban[4:] + iban[:4]
    return int("".join(str(int(c, 36)) for c in rearranged)) % 97 == 1


def find_ibans(text: str) -> list[tuple[int, int]]:
    out = []
    for m in _IBAN_CHECK_DIGITS.finditer(text):
        start = m.start() - 2
        length = IBAN_LENGTHS.get(text[start:start + 2].upper())
        if length is None:
            continue
        # Read exactly `length` characters, allowing single spaces between them (the printed form).
        chars, pos = [], start
        while len(chars) < length and pos < len(text):
            c = text[pos]
            if c.isascii() and c.isalnum():
                chars.append(c)
                pos += 1
            elif c == " " and chars and pos + 1 < len(text) and text[pos + 1] != " ":
                pos += 1
            else:
                break
        if len(chars) == length and not (pos < len(text) and text[pos].isalnum()) and iban_valid("".join(chars)):
            out.append((start, pos))
    return out


# ----------------------------------------------------------------------------------------------- ssn

_SSN = re.compile(r"[0-9](?<![\w\-.][0-9])[0-9]{2}([\- ])[0-9]{2}\1[0-9]{4}(?![\w]|[.\-][0-9])")


def find_ssns(text: str) -> list[tuple[int, int]]:
    out = []
    for m in _SSN.finditer(text):
        area, group, serial = m.group()[:3], m.group()[4:6], m.group()[7:]
        if area in ("000", "666") or area[0] == "9" or group == "00" or serial == "0000":
            continue
        out.append((m.start(), m.end()))
    return out


# --------------------------------------------------------------------------------------------- merge

DETECTORS: dict[str, Callable[..., list[tuple[int, int]]]] = {
    "email": find_emails,
    "phone": find_phones,
    "ip_address": find_ips,
    "credit_card": find_cards,
    "iban": find_ibans,
    "ssn": find_ssns,
}


def find_all(text: str, types: tuple[str, ...] = TYPES, keep_private_ip: bool = False,
             phone_regions: tuple[str, ...] = DEFAULT_REGIONS, phone_validation: str = "valid") -> list[Match]:
    """Non-overlapping matches of the given types, in text order.

    Overlaps are resolved the same way every time: the longest span wins, then the type earlier in TYPES,
    then the earlier start. So an IBAN's digits are not also a phone number, and an e-mail address with
    digits in it is one e-mail address.
    """
    candidates = []
    for t in types:
        if t == "ip_address":
            spans = find_ips(text, keep_private_ip)
        elif t == "phone":
            spans = find_phones(text, phone_regions, phone_validation)
        else:
            spans = DETECTORS[t](text)
        candidates.extend(Match(s, e, t) for s, e in spans)
    if len(candidates) < 2:
        return candidates
    rank = {t: i for i, t in enumerate(TYPES)}
    candidates.sort(key=lambda m: (m.start - m.end, rank[m.type], m.start))
    chosen: list[Match] = []
    for m in candidates:
        if all(m.end <= c.start or c.end <= m.start for c in chosen):
            chosen.append(m)
    return sorted(chosen)
