"""Phone numbers built to the numbering plans, labelled without the detector's library: precision and recall of
tokenmill.pii's phone detection per validation mode.

benchmarks/pii_devset.py labels Faker's phone numbers with libphonenumber's is_valid_number, the library the
detector validates with, so it cannot show where the two part ways (issue 22). Here every number is built from
a numbering plan written down below from the regulators' published structure (NANPA, Ofcom, ARCEP, ACMA,
the Dutch ACM plan, the German BNetzA ranges), and its label is that structure's verdict:

- positive: a number the plan's structure allows (leading digits of a number type the plan defines, the
  right length), written in one of the layouts people use: internationally (+CC ...), nationally with the
  trunk prefix, or as a US local number (7 digits, no area code). Whether a regulator has assigned that
  exact block to an operator is not asked: a structurally valid number in a sentence about calling is a
  phone number, assigned or not, and assignment changes monthly.
- negative: the same layouts with what the plan rules out (a NANP area code or exchange beginning with 0
  or 1, a UK number beginning 04 or 06, an Australian one beginning 06, one digit too few or too many),
  written internationally: the country code names the plan, so they are phone numbers of none.
- ambiguous: those invalid numbers written nationally or as 7 local digits. Without a country code the
  digits may be another configured region's valid number (an Australian "06 8242 7333" could be a French mobile,
  an invalid NANP "856-188-0006" an Indian mobile), so they are `ignore` spans; the share redacted is shown.

Each number is placed in a sentence from pii_devset's phone templates between two sentences of real prose.
Usage: python benchmarks/pii_phone_plans.py [--per-form N] [--seed S] [--write]
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import machine, write_section  # noqa: E402
from pii_devset import TEMPLATES, Unit, measure, real_prose_sentences  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TITLE = "### PII: phone numbers built to the numbering plans (issue 22)"


def _d(rng: random.Random, n: int) -> str:
    return "".join(rng.choice("0123456789") for _ in range(n))


def _nanp_code(rng: random.Random, valid: bool) -> str:
    """A NANP area code (NPA) or exchange (NXX): [2-9] then two digits, not N11 (NPA: second digit not 9,
    reserved for expansion). Invalid: a first digit 0 or 1."""
    if not valid:
        return rng.choice("01") + _d(rng, 2)
    while True:
        code = rng.choice("23456789") + _d(rng, 2)
        if code[1:] != "11" and code[1] != "9":
            return code


def nanp(rng: random.Random, valid: bool) -> tuple[str, str]:
    npa, nxx, line = _nanp_code(rng, valid or rng.random() < 0.5), _nanp_code(rng, True), _d(rng, 4)
    if not valid and npa[0] not in "01":
        nxx = rng.choice("01") + _d(rng, 2)  # the exchange is the broken part
    national = rng.choice([f"({npa}) {nxx}-{line}", f"{npa}-{nxx}-{line}", f"{npa}.{nxx}.{line}",
                           f"{npa} {nxx} {line}"])
    international = rng.choice([f"+1 {npa}-{nxx}-{line}", f"+1 ({npa}) {nxx}-{line}", f"+1 {npa} {nxx} {line}"])
    return national, international


def gb(rng: random.Random, valid: bool) -> tuple[str, str]:
    """Ofcom: 10-digit national significant numbers; 01 and 02 geographic, 03 non-geographic, 07[1-57-9]
    mobile. Invalid: 04 and 06 (unallocated), or 9 digits."""
    kind = rng.choice(["london", "geo", "mobile", "nongeo"])
    if not valid and rng.random() < 0.6:
        nsn = rng.choice("46") + _d(rng, 9)
    elif kind == "london":
        nsn = "20" + rng.choice("378") + _d(rng, 7)
    elif kind == "geo":
        nsn = "1" + rng.choice("23456789") + _d(rng, 8)
    elif kind == "mobile":
        nsn = "7" + rng.choice("12345789") + _d(rng, 8)
    else:
        nsn = "3" + rng.choice("03") + _d(rng, 8)
    if not valid and nsn[0] not in "46":
        nsn = nsn[:-1]  # one digit short
    if nsn.startswith("2"):
        national, rest = f"0{nsn[:2]} {nsn[2:6]} {nsn[6:]}", f"{nsn[:2]} {nsn[2:6]} {nsn[6:]}"
    else:
        national, rest = f"0{nsn[:4]} {nsn[4:]}", f"{nsn[:4]} {nsn[4:]}"
    return national, "+44 " + rest


def fr(rng: random.Random, valid: bool) -> tuple[str, str]:
    """ARCEP: 9-digit national significant numbers, 1-5 geographic, 6-7 mobile, 9 VoIP. Invalid: 8 or 10
    digits."""
    nsn = rng.choice("1234567") + _d(rng, 8)
    if not valid:
        nsn = nsn[:-2] if rng.random() < 0.5 else nsn + _d(rng, 1)
    pairs = " ".join(nsn[i:i + 2] for i in range(1, len(nsn), 2))
    return f"0{nsn[0]} {pairs}", f"+33 {nsn[0]} {pairs}"


def au(rng: random.Random, valid: bool) -> tuple[str, str]:
    """ACMA: 9-digit national significant numbers; 2, 3, 7, 8 geographic, 4 mobile. Invalid: a leading 6
    (unused since 1996), or 8 digits (1 leads special services and pagers: 016, 1300, 1800; 5 location-
    independent numbers: not used as negatives)."""
    first = rng.choice("23784") if valid else rng.choice("2376")
    nsn = first + _d(rng, 8 if valid or first == "6" else 7)
    if first == "4":
        return f"0{nsn[:3]} {nsn[3:6]} {nsn[6:]}", f"+61 {nsn[:3]} {nsn[3:6]} {nsn[6:]}"
    return f"0{nsn[0]} {nsn[1:5]} {nsn[5:]}", f"+61 {nsn[0]} {nsn[1:5]} {nsn[5:]}"


def nl(rng: random.Random, valid: bool) -> tuple[str, str]:
    """ACM: 9-digit national significant numbers; 6 mobile (06 then 8 digits), 10-59 and 70-79 geographic.
    Invalid: 8 digits."""
    nsn = "6" + _d(rng, 8) if rng.random() < 0.5 else rng.choice(["10", "20", "30", "40", "50", "70"]) + _d(rng, 7)
    if not valid:
        nsn = nsn[:-1]
    if nsn[0] == "6":
        return f"06 {nsn[1:]}", f"+31 6 {nsn[1:]}"
    return f"0{nsn[:2]} {nsn[2:5]} {nsn[5:]}", f"+31 {nsn[:2]} {nsn[2:5]} {nsn[5:]}"


def de(rng: random.Random, valid: bool) -> tuple[str, str]:
    """BNetzA: mobile 015x, 016x, 017x with 7 or 8 more digits; Berlin 030 with 7 or 8. Not a configured
    region: national numbers of it are phone numbers the detector leaves by design. Invalid: 4 digits."""
    if rng.random() < 0.5:
        prefix = "1" + rng.choice(["51", "52", "57", "60", "62", "70", "72", "76"])
    else:
        prefix = "30"
    rest = _d(rng, rng.choice([7, 8]) if valid else 4)
    return f"0{prefix} {rest}", f"+49 {prefix} {rest}"


PLANS = {"US": nanp, "GB": gb, "FR": fr, "AU": au, "NL": nl, "DE": de}
CONFIGURED = {"US", "GB", "FR", "AU", "NL"}  # of PLANS, the ones in conf/pii/default.yaml's phone_regions


SPANS: dict[str, tuple[int, int]] = {}  # each unit's number, by unit name


def build(per_form: int, seed: int) -> dict[str, list[Unit]]:
    """Units by form: international, national (a configured region), national_other (DE), local (US 7-digit),
    and their invalid counterparts (no gold: any detection there is a false positive)."""
    rng = random.Random(seed)
    prose = real_prose_sentences()
    templates = TEMPLATES["phone"]
    forms: dict[str, list[Unit]] = {}

    def add(form: str, number: str, positive: bool) -> None:
        before, after = rng.choice(prose), rng.choice(prose)
        sentence = rng.choice(templates)
        text = f"{before} {sentence.replace('{v}', number)} {after}"
        start = len(before) + 1 + sentence.index("{v}")
        span = (start, start + len(number))
        ambiguous = not positive and not form.startswith("international")
        forms.setdefault(form, []).append(Unit(f"{form}:{len(forms.get(form, []))}", text,
                                               [("phone", *span)] if positive else [], [span] if ambiguous else []))
        SPANS[forms[form][-1].name] = span

    for valid in (True, False):
        suffix = "" if valid else " (invalid)"
        for i in range(per_form):
            region = rng.choice(sorted(CONFIGURED))
            national, international = PLANS[region](rng, valid)
            add("international" + suffix, international, valid)
            add("national, configured region" + suffix, national, valid)
            other_national, _ = PLANS["DE"](rng, valid)
            add("national, other region (DE)" + suffix, other_national, valid)
            nxx = _nanp_code(rng, valid)
            add("local, 7 digits (US)" + suffix, f"{nxx}-{_d(rng, 4)}", valid)
    return forms


def redacted(units: list[Unit], mode: str) -> float:
    """The share of the units whose number the detector redacts (any phone match overlapping it)."""
    from tokenmill.pii.detectors import find_all

    from tokenmill.pii import PIIProcessor
    from tokenmill.pii.params import Pii

    proc = PIIProcessor(Pii.resolve({"phone_validation": mode}))
    hits = 0
    for u in units:
        a, b = SPANS[u.name]
        found = find_all(u.text, ("phone",), proc.keep_private_ip, proc.phone_regions, proc.phone_validation)
        hits += any(m.start < b and a < m.end for m in found)
    return hits / len(units)


def run(per_form: int, seed: int) -> dict:
    forms = build(per_form, seed)
    out = {}
    for mode in ("valid", "possible"):
        params = {"phone_validation": mode}
        by_form = {form: {**measure(units, params)["phone"], "redacted": redacted(units, mode)}
                   for form, units in forms.items()}
        everything = measure([u for units in forms.values() for u in units], params)
        out[mode] = {"forms": by_form, "all": everything["phone"], "errors": everything["_errors"]}
    return out


def render(res: dict, per_form: int, seed: int) -> str:
    info = machine(["phonenumbers"])
    lines = [TITLE, "",
             f"`python benchmarks/pii_phone_plans.py --per-form {per_form} --seed {seed} --write` (Python "
             f"{info['python']}, phonenumbers {info['versions']['phonenumbers']}). Numbers built from the US, "
             "UK, French, Australian, Dutch and German numbering plans as the regulators publish them "
             "(benchmarks/pii_phone_plans.py), labelled by the plan's structure, not by libphonenumber: "
             f"{per_form} valid and {per_form} invalid numbers per form, each in a template sentence between "
             "real prose. Recall: of the valid numbers; redacted: the share of the invalid ones the detector "
             "redacts (false positives written internationally; written nationally or locally they may be "
             "another configured region's number, so they count for neither side).", "",
             "| form | valid: recall | possible: recall | valid: invalid redacted | possible: invalid redacted |",
             "| --- | ---: | ---: | ---: | ---: |"]
    forms = [f for f in res["valid"]["forms"] if not f.endswith("(invalid)")]
    for form in forms:
        v, p = res["valid"]["forms"][form], res["possible"]["forms"][form]
        vi, pi = res["valid"]["forms"][form + " (invalid)"], res["possible"]["forms"][form + " (invalid)"]
        lines.append(f"| {form} | {v['recall']:.3f} | {p['recall']:.3f} | {vi['redacted']:.3f} | "
                     f"{pi['redacted']:.3f} |")
    lines += ["", "| phone_validation | labelled | found | correct | precision | recall | F1 |",
              "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    f1 = {}
    for mode in ("valid", "possible"):
        a = res[mode]["all"]
        f1[mode] = 2 * a["precision"] * a["recall"] / (a["precision"] + a["recall"]) if a["tp"] else 0.0
        lines.append(f"| {mode} | {a['gold']:,} | {a['pred']:,} | {a['tp']:,} | {a['precision']:.3f} | "
                     f"{a['recall']:.3f} | {f1[mode]:.3f} |")
    best = max(f1, key=f1.get)
    for mode in ("valid", "possible"):
        misses = [m[2] for m in res[mode]["errors"]["misses"]][:6]
        false = [m[2] for m in res[mode]["errors"]["false_positives"]][:6]
        lines.append(f"\n- `{mode}`: missed e.g. {', '.join(misses) or 'none'}; redacted though invalid e.g. "
                     f"{', '.join(false) or 'none'}.")
    v, p = res["valid"], res["possible"]
    lines.append(
        f"\nHigher F1 on this set: `{best}`, the default (conf/pii/default.yaml), now chosen on labels the detector's "
        f"library did not make. `valid` redacts {v['forms']['international (invalid)']['redacted']:.0%} of the "
        f"structurally invalid international numbers, `possible` {p['forms']['international (invalid)']['redacted']:.0%}, "
        f"for {p['all']['recall'] - v['all']['recall']:.3f} of recall. What `valid` misses: numbers in blocks "
        "libphonenumber lists as unallocated though the plan's structure allows them (French 07 20, Dutch 06 0x and 06 7x, "
        f"Australian 08 2x and 08 5x: {1 - v['forms']['international']['recall']:.0%} of the international ones), and local "
        "7-digit numbers, which neither mode reads (a NANP number without its area code fits no plan's length). "
        "Invalid numbers written nationally are redacted "
        f"({v['forms']['national, configured region (invalid)']['redacted']:.0%}) because their digits are "
        "another configured region's valid number, which no detector can rule out without the country code.")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--per-form", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--write", action="store_true", help="write the section into benchmarks/RESULTS.md")
    args = ap.parse_args()
    text = render(run(args.per_form, args.seed), args.per_form, args.seed)
    print(text)
    if args.write:
        write_section(ROOT / "benchmarks" / "RESULTS.md", TITLE, text)


if __name__ == "__main__":
    main()
