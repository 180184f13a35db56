"""Planted cases: pages built to be caught by one stage, with what that stage should do recorded.

Each function takes a random.Random and returns blocks (or text) plus the facts the ground truth needs.
"""

from __future__ import annotations

import random
import re
import string

from .markup import Block, block

# --- measuring -----------------------------------------------------------------------------------


def words(text: str) -> list[str]:
    """The tokenisation used for shingles and n-gram overlap: lowercase \\w+ runs."""
    return re.findall(r"\w+", text.lower())


def shingles(text: str, n: int = 5) -> set[tuple[str, ...]]:
    w = words(text)
    return set(zip(*(w[i:] for i in range(n))))


def jaccard(a: str, b: str, n: int = 5) -> float:
    sa, sb = shingles(a, n), shingles(b, n)
    return len(sa & sb) / len(sa | sb) if sa or sb else 1.0


# --- near duplicates -----------------------------------------------------------------------------

# Replacement words for substitutions: common English words, so an edited copy still reads as prose.
_VOCAB = (
    "the of and to in is that for it as with was on be by this are or from at an which have not but "
    "all can has more one will their also been other when there so some what would into only about "
    "new time used may these then them two first any very such most over like just where after even "
    "many those both each well should because through same while data value file system user code "
    "version support option default example function method class object number result list string"
).split()


def edit_words(blocks: list[Block], rate: float, rng: random.Random) -> tuple[list[Block], int]:
    """A copy of blocks with round(rate * words) prose words substituted or deleted (half each).

    Only paragraphs and list items are edited; headings and code stay as they are, as when a scraper
    rewrites an article. The rate is relative to all words of the main text.
    """
    slots = [(bi, ii, wi) for bi, b in enumerate(blocks) if b.kind in ("p", "ul", "ol") for ii, t in enumerate(b.plain) for wi in range(len(t.split()))]
    total = sum(len(t.split()) for b in blocks for t in b.plain)
    n_edits = min(len(slots), round(rate * total))
    edits = {s: rng.random() < 0.5 for s in rng.sample(slots, n_edits)}  # True: substitute
    out = []
    for bi, b in enumerate(blocks):
        if b.kind not in ("p", "ul", "ol"):
            out.append(Block(b.kind, list(b.plain)))
            continue
        items = []
        for ii, t in enumerate(b.plain):
            ws = []
            for wi, w in enumerate(t.split()):
                op = edits.get((bi, ii, wi))
                if op is None:
                    ws.append(w)
                elif op:
                    ws.append(rng.choice(_VOCAB))
            items.append(" ".join(ws))
        out.append(Block(b.kind, items))
    return out, n_edits


# --- spam and boilerplate ------------------------------------------------------------------------

_SPAM_PRODUCTS = [
    "replica watches", "viagra", "casino bonus", "payday loans", "weight loss pills", "cheap flights",
    "designer handbags", "crypto signals", "online pharmacy", "essay writing", "followers", "bitcoin doubler",
]
_SPAM_LINES = [
    "BUY CHEAP {P} ONLINE", "cheap {p} best price", "{p} {p} {p} discount", "BEST {P} DEALS CLICK HERE",
    "buy {p} now free shipping", "100% GUARANTEED {P}", "{p} cheap cheap cheap", "order {p} today save 90%",
]


def spam_blocks(rng: random.Random) -> tuple[str, list[Block], str]:
    """(host label, blocks, product) of a keyword-stuffed page: a few lines repeated many times."""
    product = rng.choice(_SPAM_PRODUCTS)
    fill = {"p": product, "P": product.upper()}
    lines = [t.format(**fill) for t in rng.sample(_SPAM_LINES, 4)]
    blocks = [block("h1", f"BUY CHEAP {product.upper()} ONLINE - BEST PRICE")]
    for _ in range(rng.randint(12, 24)):
        blocks.append(block("p", " ".join(rng.choice(lines) for _ in range(rng.randint(3, 6))) + "!!!"))
    blocks.append(Block("ul", [f"{product} {w}" for w in ("cheap", "online", "best price", "buy now", "discount", "sale")]))
    label = re.sub(r"[^a-z0-9]+", "-", f"buy cheap {product}") + f"-{rng.randrange(100, 1000)}"
    return label, blocks, product


_BOILER_PAGES = [
    ("Tags", "/tags/"), ("Archive", "/archive/"), ("Sitemap", "/sitemap/"), ("Search results", "/search/"),
    ("Sign in", "/login/"), ("Page not found", "/404/"), ("All pages", "/all/"), ("Categories", "/categories/"),
]


def boilerplate_blocks(rng: random.Random, site_pages: list[tuple[str, str]], used: set[str]) -> tuple[str, list[Block]] | None:
    """(path, blocks) of a page holding nothing but link lists and site chrome."""
    free = [p for p in _BOILER_PAGES if p[1] not in used]
    if not free:
        return None
    title, path = rng.choice(free)
    listed = site_pages or [("Home", "/")]
    links = rng.sample(listed, min(len(listed), rng.randint(6, 15)))
    blocks = [
        block("h1", title),
        Block("ul", [t for t, _ in links], [f'<a href="{h}">{t}</a>' for t, h in links]),
        Block("p", ["Share: Twitter \u00b7 Facebook \u00b7 LinkedIn \u00b7 Email"]),
        Block("p", ["\u00ab Previous \u00b7 1 \u00b7 2 \u00b7 3 \u00b7 Next \u00bb"]),
    ]
    return path, blocks


# --- personal data -------------------------------------------------------------------------------


def luhn_check_digit(digits: str) -> str:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = int(ch)
        if i % 2 == 0:  # these positions are doubled once the check digit is appended
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return str((10 - total % 10) % 10)


def luhn_valid(number: str) -> bool:
    digits = re.sub(r"\D", "", number)
    return luhn_check_digit(digits[:-1]) == digits[-1]


def card_number(rng: random.Random, valid: bool = True) -> str:
    prefix, length, groups = rng.choice([("4", 16, (4, 4, 4, 4)), ("5" + str(rng.randint(1, 5)), 16, (4, 4, 4, 4)), ("3" + rng.choice("47"), 15, (4, 6, 5))])
    body = prefix + "".join(str(rng.randrange(10)) for _ in range(length - len(prefix) - 1))
    check = luhn_check_digit(body)
    if not valid:
        check = str((int(check) + rng.randint(1, 9)) % 10)
    digits = body + check
    sep = rng.choice([" ", "-", ""])
    out, i = [], 0
    for g in groups:
        out.append(digits[i : i + g])
        i += g
    return sep.join(out)


_IBAN_FORMATS = {"DE": "8n10n", "GB": "4a6n8n", "FR": "5n5n11n2n", "NL": "4a10n", "ES": "4n4n1n1n10n"}


def iban(rng: random.Random) -> str:
    """An IBAN whose ISO 7064 mod-97 check digits are valid, printed in groups of four."""
    country = rng.choice(sorted(_IBAN_FORMATS))
    bban = ""
    for count, kind in re.findall(r"(\d+)([an])", _IBAN_FORMATS[country]):
        pool = string.ascii_uppercase if kind == "a" else string.digits
        bban += "".join(rng.choice(pool) for _ in range(int(count)))
    numeric = "".join(str(int(c, 36)) for c in bban + country + "00")
    check = 98 - int(numeric) % 97
    code = f"{country}{check:02d}{bban}"
    return " ".join(code[i : i + 4] for i in range(0, len(code), 4))


def iban_valid(value: str) -> bool:
    code = value.replace(" ", "")
    return int("".join(str(int(c, 36)) for c in code[4:] + code[:4])) % 97 == 1


def ssn(rng: random.Random) -> str:
    area = rng.choice([a for a in range(1, 900) if a != 666])
    return f"{area:03d}-{rng.randint(1, 99):02d}-{rng.randint(1, 9999):04d}"


# Area codes in service (the pii stage validates numbers against the numbering plans: an unassigned area
# code is no phone number).
_AREA_CODES = (201, 202, 206, 212, 213, 214, 215, 303, 305, 310, 312, 404, 415, 425, 503, 512, 602, 617, 702,
               713, 718, 801, 808, 919)


def phone(rng: random.Random, international: bool) -> str:
    if not international:
        area, line = rng.choice(_AREA_CODES), rng.randint(100, 199)  # 555-01xx: reserved for fiction
        return rng.choice([f"({area}) 555-{line:04d}", f"+1 {area}-555-{line:04d}", f"{area}.555.{line:04d}"])
    d = lambda n: "".join(str(rng.randrange(10)) for _ in range(n))  # noqa: E731
    return rng.choice([f"+44 20 7946 0{d(3)}", f"+49 30 {d(4)} {d(4)}", f"+33 1 {d(2)} {d(2)} {d(2)} {d(2)}",
                       f"+81 3-{rng.randint(1000, 9999)}-{d(4)}", f"+61 2 9{d(3)} {d(4)}"])


def ipv4(rng: random.Random) -> str:
    return rng.choice([
        f"192.0.2.{rng.randint(1, 254)}", f"198.51.100.{rng.randint(1, 254)}", f"203.0.113.{rng.randint(1, 254)}",
        f"10.{rng.randint(0, 255)}.{rng.randint(0, 255)}.{rng.randint(1, 254)}", f"192.168.{rng.randint(0, 255)}.{rng.randint(1, 254)}",
    ])


PII_TYPES = ["email", "phone", "ipv4", "credit_card", "iban", "us_ssn", "not_credit_card"]

_PII_SENTENCES = {
    "email": ["For questions about this release, write to {v}.", "Maintainer contact: {v} (replies within a week).", "Send your bug reports to {v} and include the full traceback."],
    "phone": ["You can also reach the support desk by phone at {v} during office hours.", "Call {v} if the hosted service is down.", "Our office phone number is {v}."],
    "ipv4": ["The mirror at {v} is updated nightly.", "Requests from {v} were blocked after repeated failures.", "Point the client at the server on {v} port 8080."],
    "credit_card": ["Test payment: the card {v} (expiry 04/27) was charged for the sponsorship.", "Billing record: paid with card number {v}.", "The donation was made with card {v}."],
    "iban": ["Donations can be sent by bank transfer to IBAN {v}.", "Sponsorship invoices are paid to the account {v}.", "Our bank account for grants is IBAN {v}."],
    "us_ssn": ["Contractor tax form on file, SSN {v}.", "Employee record: social security number {v}.", "The W-9 lists the SSN {v}."],
    "not_credit_card": ["Order reference {v} has been shipped.", "Your ticket number is {v}; quote it when you write to us.", "Invoice {v} is attached for your records."],
}


def pii_entity(kind: str, rng: random.Random, emails: list[str]) -> str:
    if kind == "email":
        return rng.choice(emails) if emails else f"{rng.choice(['dev', 'maintainer', 'alice', 'bob'])}@example.org"
    if kind == "phone":
        return phone(rng, international=rng.random() < 0.5)
    if kind == "ipv4":
        return ipv4(rng)
    if kind == "credit_card":
        return card_number(rng)
    if kind == "iban":
        return iban(rng)
    if kind == "us_ssn":
        return ssn(rng)
    if kind == "not_credit_card":
        # Card-shaped (16 digits, grouped) but failing the Luhn check: a redactor must leave it.
        return _invalid_card(rng)
    raise ValueError(kind)


def _invalid_card(rng: random.Random) -> str:
    body = "4" + "".join(str(rng.randrange(10)) for _ in range(14))
    bad = str((int(luhn_check_digit(body)) + rng.randint(1, 9)) % 10)
    digits = body + bad
    return " ".join(digits[i : i + 4] for i in range(0, 16, 4))


def pii_paragraph(kinds: list[str], rng: random.Random, emails: list[str]) -> tuple[str, list[dict]]:
    """A paragraph mentioning one entity of each kind, and the entities exactly as written."""
    sentences, entities = [], []
    for kind in kinds:
        value = pii_entity(kind, rng, emails)
        sentences.append(rng.choice(_PII_SENTENCES[kind]).format(v=value))
        entities.append({"type": kind, "value": value})
    return " ".join(sentences), entities


# --- contamination -------------------------------------------------------------------------------

CONTAMINATION_VARIANTS = ["verbatim", "rewrapped", "lowercased", "punctuation_stripped", "mid_document"]


def wrap(text: str, width: int = 40) -> list[str]:
    lines, cur = [], ""
    for w in text.split():
        if cur and len(cur) + 1 + len(w) > width:
            lines.append(cur)
            cur = w
        else:
            cur = f"{cur} {w}" if cur else w
    return lines + ([cur] if cur else [])


def contaminate(blocks: list[Block], passage: str, variant: str, rng: random.Random) -> list[Block]:
    """Blocks of a normal page with an eval passage (context + gold continuation) embedded."""
    out = [Block(b.kind, list(b.plain), list(b.html)) for b in blocks]
    paras = [i for i, b in enumerate(out) if b.kind == "p"]
    if variant == "mid_document" and paras:
        # Spliced into the middle of the middle paragraph, mid-sentence.
        i = paras[len(paras) // 2]
        ws = out[i].plain[0].split()
        cut = len(ws) // 2
        out[i] = block("p", " ".join(ws[:cut] + passage.split() + ws[cut:]))
        return out
    if variant == "rewrapped":
        new = Block("lines", wrap(passage))
    elif variant == "lowercased":
        new = block("p", passage.lower())
    elif variant == "punctuation_stripped":
        new = block("p", " ".join(re.sub(r"[^\w\s]", " ", passage).split()))
    else:  # verbatim, or mid_document on a page without paragraphs
        new = block("p", passage)
    at = paras[0] + 1 if paras else len(out)
    out.insert(at, new)
    return out
