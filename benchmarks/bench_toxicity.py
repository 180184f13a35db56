"""The toxicity tag on real text: the share of each slice of clean text it flags (false positives), the share
of real profane text it flags (recall), at the shipped threshold and across thresholds, with a sample of the
flagged documents of each slice for review.

The scorer is tokenmill.domains.toxicity (alt-profanity-check's linear model, a document scored as the
highest of its paragraphs' scores). The slices are built from ../shared/data in place (its SOURCES.md files)
and from files of this virtualenv (licence texts, comments and docstrings of site-packages):

- news_agnews: AG News test rows, "title\\n\\ndescription" (7,600); news_abc: ABC rural and science stories;
- fiction: the 43 English Gutenberg books, body only, paragraphs unwrapped, cut into ~2,000-character documents;
- encyclopaedia: WikiText-2 articles, the raw test split and the valid split (de-tokenised, <unk> removed);
- speeches: US State of the Union and inaugural addresses, one document per speech;
- legal_licence: licence files of the venv's packages and of Python, trafilatura's LICENSE (deduplicated),
  and the Universal Declaration of Human Rights in English;
- code_comments: comments and docstrings of evenly spaced .py files of the venv's site-packages, the first
  ~2,000 characters of each file's;
- forum_firefox: the nltk webtext Firefox support-forum posts, ~2,000 characters of posts per document;
- forum_crawl: English crawl pages with forum or comment-thread cues (FORUM_CUES);
- web_crawl: every English crawl page (trafilatura's 990 evaluation pages, the Dolma CC JSONL documents, the
  HTML responses of the WARC files), extracted with the ingest stage's cascade, deduplicated;
- medicine, crime: news and crawl documents with at least two distinct words of MEDICINE or CRIME;
- informal: singles ads, wine reviews and two film scripts (nltk webtext), ~2,000-character documents;
- chat_unlisted: Overheard-in-New-York conversations with no word of PROFANITY (not all of them are clean);
- offensive: Overheard-in-New-York conversations with a word of PROFANITY (profane, not all abusive);
- offensive_in_long: each offensive conversation inserted as a paragraph into the middle of an encyclopaedia
  article (composed from real texts: what a reviewer wants found in a long page).
There is no human-labelled offensive text in the data: the positive set is keyword-selected (see PROFANITY),
so its recall is the recall on profane conversation, an upper bound for offensive text without profanity.

Every slice is also scored the other ways AGGREGATIONS names, from the same model: the shipped maximum over
at most 64 paragraphs; the maximum over every paragraph (no cap), over paragraphs of >= 40 characters, over
~300-character windows of consecutive paragraphs; the mean of the 3 highest paragraphs; the mean of all; the
whole document as one text. A naive keyword rule (any word of datatrove's banned_words.txt, and of banned +
soft_banned) is counted beside it. Timing: documents per CPU-second (time.process_time) of scores() over all
clean documents, the model's import on its own.

Usage: python benchmarks/bench_toxicity.py [--out benchmarks/toxicity/figures.json]
"""

from __future__ import annotations

import argparse
import ast
import csv
import gzip
import hashlib
import io
import json
import re
import sys
import sysconfig
import time
import tokenize
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tokenmill.domains.params import Toxicity

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / ".." / "shared" / "data"
THRESHOLDS = (0.5, 0.6, 0.7, 0.8, 0.9, 0.95)
SHIPPED = Toxicity().tag_above  # the shipped default (0.8 when this was measured)
DOC_CHARS = 2000
SAMPLE = 5

# The positive set: a conversation is "offensive" when it has one of these words (case-insensitive, whole
# words): the common English profanities and slurs.
PROFANITY = re.compile(
    r"\b(fuck\w*|motherf\w*|mofo|shit\w*|bullshit|bitch\w*|cunts?|assholes?|ass|asses|dick(head)?s?|pussy|pussies|"
    r"whores?|sluts?|fags?|faggots?|nigg\w*|bastards?|cocksuckers?|twats?|douche\w*|retards?)\b", re.IGNORECASE)
# A news or crawl document is about medicine (crime) when it has at least two distinct words of the list.
MEDICINE = ("cancer", "tumour", "tumor", "patient", "patients", "disease", "diseases", "drug", "drugs", "hospital",
            "doctor", "doctors", "medical", "medicine", "vaccine", "virus", "infection", "surgery", "symptoms",
            "treatment", "clinical", "hiv", "aids", "diagnosis", "therapy", "std", "sexual", "genital", "overdose",
            "pregnancy", "abortion", "mental", "depression", "suicide")
CRIME = ("murder", "murdered", "killed", "killing", "rape", "raped", "assault", "assaulted", "police", "arrested",
         "shooting", "shot", "stabbed", "convicted", "charged", "sentenced", "prison", "jail", "abuse", "abused",
         "trafficking", "terrorist", "terrorism", "bomb", "bombing", "crime", "criminal", "victim", "victims",
         "gang", "robbery", "homicide", "kidnapping", "smuggling")
# A crawl page is forum-like when its URL says so or its text has two distinct cues (whole words).
FORUM_URL = re.compile(r"forum|thread|viewtopic|showthread|/comments/|discussion", re.IGNORECASE)
FORUM_CUES = re.compile(r"\b(forum|reply|replies|posted by|wrote:|quote|joined:|posts:|permalink|report abuse|"
                        r"said\.\.\.|thread)", re.IGNORECASE)

WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")


@dataclass
class Slice:
    name: str
    docs: list[str]
    sources: list[str]
    positive: bool = False  # recall (True) or false-positive rate (False)
    note: str = ""


# ---------------------------------------------------------------------------------------------------------
# Building documents


def chunk(blocks: list[str], chars: int = DOC_CHARS, sep: str = "\n\n") -> list[str]:
    """Consecutive blocks joined by sep into documents of at least `chars` characters (the last, shorter one
    kept when it is at least half that)."""
    docs, cur, n = [], [], 0
    for block in blocks:
        cur.append(block)
        n += len(block) + len(sep)
        if n >= chars:
            docs.append(sep.join(cur))
            cur, n = [], 0
    if cur and n >= chars // 2:
        docs.append(sep.join(cur))
    return docs


def _read_gz_text(path: Path) -> str:
    data = gzip.open(path).read()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("cp1252")  # ABC science is Windows-1252


def agnews(data: Path = DATA) -> tuple[list[str], list[str]]:
    docs, src = [], []
    with open(data / "text" / "news" / "ag_news" / "test.csv", newline="", encoding="utf-8") as fh:
        for i, (_, title, desc) in enumerate(csv.reader(fh)):
            fix = lambda s: re.sub(r"#(\d+);", lambda m: chr(int(m.group(1))), s.replace("\\", " "))  # noqa: E731
            docs.append(f"{fix(title).strip()}\n\n{fix(desc).strip()}")
            src.append(f"ag_news/test.csv:{i + 1}")
    return docs, src


def abc_news(data: Path = DATA) -> tuple[list[str], list[str]]:
    docs, src = [], []
    for name in ("rural.txt.gz", "science.txt.gz"):
        raw = _read_gz_text(data / "text" / "news" / "nltk_abc" / name).replace("\r\n", "\n")
        for i, story in enumerate(s.strip("\n") for s in re.split(r"\n\s*\n", raw) if s.strip()):
            docs.append(story)
            src.append(f"nltk_abc/{name}#{i}")
    return docs, src


def gutenberg_body(path: Path) -> str:
    raw = gzip.open(path, "rt", encoding="utf-8", errors="replace").read().replace("\r\n", "\n")
    start, end = re.search(r"\*\*\* ?START OF", raw), re.search(r"\*\*\* ?END OF", raw)
    return raw[raw.index("\n", start.start()) + 1: end.start()] if start and end else raw


def fiction(data: Path = DATA, books: list[str] | None = None) -> tuple[list[str], list[str]]:
    docs, src = [], []
    for path in sorted((data / "text" / "gutenberg" / "en").glob("*.txt.gz")):
        if books is not None and path.name not in books:
            continue
        paras = [" ".join(line.strip() for line in p.splitlines()) for p in re.split(r"\n\s*\n", gutenberg_body(path))]
        for i, doc in enumerate(chunk([p for p in paras if p.strip()])):
            docs.append(doc)
            src.append(f"gutenberg/{path.name}#{i}")
    return docs, src


def _wiki_articles(lines: list[str]) -> list[list[str]]:
    articles: list[list[str]] = []
    for line in lines:
        if re.match(r"^ = [^=].* = $", line):
            articles.append([])
        if articles:
            articles[-1].append(line.strip())
    return articles


def wikipedia_raw(data: Path = DATA) -> tuple[list[str], list[str]]:
    """WikiText-2 raw test articles: one document per article, a line per paragraph or heading."""
    raw = (data / "text" / "wikitext-2" / "wiki.test.raw.blanklines_stripped_crlf").read_text(encoding="utf-8")
    arts = _wiki_articles(raw.replace("\r\n", "\n").split("\n"))
    return ["\n".join(a).strip("\n") for a in arts], [f"wikitext-2 raw test: {a[0]}" for a in arts]


def _detok(line: str) -> str:
    line = line.replace(" @-@ ", "-").replace(" @,@ ", ",").replace(" @.@ ", ".").replace("<unk>", "")
    line = re.sub(r" ([.,;:!?)\]'])", r"\1", line)
    return re.sub(r"([(\[]) ", r"\1", re.sub(r" +", " ", line)).replace(" n't", "n't")


def wikipedia(data: Path = DATA) -> tuple[list[str], list[str]]:
    docs, src = wikipedia_raw(data)
    lines = (data / "text" / "wikitext-2" / "valid.txt").read_text(encoding="utf-8").split("\n")
    arts = _wiki_articles(lines)
    docs += ["\n".join(_detok(x) for x in a if x).strip("\n") for a in arts]
    src += [f"wikitext-2 valid (de-tokenised): {a[0]}" for a in arts]
    return docs, src


def speeches(data: Path = DATA) -> tuple[list[str], list[str]]:
    paths = sorted((data / "text" / "english" / "nltk_state_union").glob("*.txt")) + sorted(
        (data / "text" / "english" / "nltk_inaugural").glob("*.txt"))
    return ([p.read_text(encoding="utf-8", errors="replace") for p in paths],
            [f"{p.parent.name}/{p.name}" for p in paths])


def site_packages() -> Path:
    return Path(sysconfig.get_paths()["purelib"])


def licences(data: Path = DATA) -> tuple[list[str], list[str]]:
    """Licence files (deduplicated on their words), and the UDHR in English."""
    paths = [Path(sys.base_prefix) / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "LICENSE.txt",
             data / "html" / "trafilatura" / "LICENSE"]
    sp = site_packages()
    for pattern in ("*/LICEN[CS]E*", "*/COPYING*", "*/licenses/*", "*/licenses/*/*", "*/*/LICEN[CS]E*"):
        paths += sorted(sp.glob(pattern))
    seen, docs, src = set(), [], []
    for p in paths:
        if not p.is_file() or p.suffix in (".py", ".pyc", ".json", ".html"):
            continue
        text = p.read_text(encoding="utf-8", errors="replace")
        key = hashlib.sha1(" ".join(WORD.findall(text.lower())).encode()).hexdigest()
        if len(text) < 200 or key in seen:
            continue
        seen.add(key)
        docs.append(text)
        src.append(f"site-packages/{p.relative_to(sp)}" if p.is_relative_to(sp) else f"{p.parent.name}/{p.name}")
    udhr = (data / "text" / "multilingual" / "udhr2" / "eng.txt").read_text(encoding="utf-8")
    return docs + [udhr], src + ["udhr2/eng.txt"]


def comments_of(source: str) -> list[str]:
    """The comment blocks (consecutive comment lines, '#' removed) and docstrings of a Python source."""
    blocks: list[str] = []
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return blocks
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node)
            if doc:
                blocks.append(doc)
    cur, last = [], -2
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type == tokenize.COMMENT:
                line = tok.string.lstrip("#").strip()
                if tok.start[0] != last + 1 and cur:
                    blocks.append("\n".join(cur))
                    cur = []
                if line:
                    cur.append(line)
                last = tok.start[0]
    except (tokenize.TokenError, IndentationError, SyntaxError):
        pass
    if cur:
        blocks.append("\n".join(cur))
    return [b for b in blocks if len(b) >= 20]


def code_comments(files: int = 400) -> tuple[list[str], list[str]]:
    sp = site_packages()
    paths = sorted(p for p in sp.rglob("*.py") if "__pycache__" not in p.parts)
    docs, src = [], []
    step = max(1, len(paths) // (files * 2))
    for p in paths[::step]:
        blocks = comments_of(p.read_text(encoding="utf-8", errors="replace"))
        text = "\n\n".join(blocks)
        if len(text) < 200:
            continue
        docs.append((chunk(blocks) or [text])[0])
        src.append(f"site-packages/{p.relative_to(sp)}")
        if len(docs) == files:
            break
    return docs, src


def webtext_lines(name: str, data: Path = DATA) -> list[str]:
    raw = (data / "text" / "english" / "nltk_webtext" / name).read_text(encoding="utf-8", errors="replace")
    return [line.strip() for line in raw.replace("\r\n", "\n").split("\n") if line.strip()]


def forum_firefox(data: Path = DATA) -> tuple[list[str], list[str]]:
    docs = chunk(webtext_lines("firefox.txt", data), sep="\n")
    return docs, [f"nltk_webtext/firefox.txt#{i}" for i in range(len(docs))]


def informal(data: Path = DATA) -> tuple[list[str], list[str]]:
    docs, src = [], []
    for name in ("singles.txt", "wine.txt", "grail.txt", "pirates.txt"):
        d = chunk(webtext_lines(name, data), sep="\n")
        docs += d
        src += [f"nltk_webtext/{name}#{i}" for i in range(len(d))]
    return docs, src


def overheard(data: Path = DATA) -> list[str]:
    """The Overheard-in-New-York conversations (blank-line separated)."""
    raw = (data / "text" / "english" / "nltk_webtext" / "overheard.txt").read_text(encoding="utf-8", errors="replace")
    return [c.strip() for c in re.split(r"\n\s*\n", raw.replace("\r\n", "\n")) if c.strip()]


def conversations(data: Path = DATA) -> tuple[tuple[list[str], list[str]], tuple[list[str], list[str]]]:
    """(offensive, unlisted): overheard conversations with and without a word of PROFANITY, with sources."""
    pos, neg = ([], []), ([], [])
    for i, conv in enumerate(overheard(data)):
        side = pos if PROFANITY.search(conv) else neg
        side[0].append(conv)
        side[1].append(f"nltk_webtext/overheard.txt#{i}")
    return pos, neg


def _english_stopwords(data: Path) -> tuple[set, list[set]]:
    d = data / "text" / "stopwords"
    # hinglish mixes English words in; it would claim English pages
    other = [set(p.read_text(encoding="utf-8").split()) for p in sorted(d.iterdir())
             if p.name not in ("README", "english", "hinglish")]
    return set((d / "english").read_text(encoding="utf-8").split()), other


def is_english(text: str, stop: tuple[set, list[set]]) -> bool:
    """More English stopwords than any other language's, and at least 15% of the words."""
    words = re.findall(r"\w+", text.lower())
    if len(words) < 50:
        return False
    en = sum(w in stop[0] for w in words)
    return en >= 0.15 * len(words) and all(en > sum(w in s for w in words) for s in stop[1])


def crawl_pages(data: Path = DATA) -> tuple[list[str], list[str]]:
    """English crawl pages: trafilatura's evaluation pages, Dolma CC JSONL documents and the WARC files' HTML
    responses, text from the ingest stage's extraction (cascade), deduplicated on the text."""
    from tokenmill.ingest.readers import ReadError, read_archive
    from tokenmill.ingest.text import Drop, normalise, payload_to_text

    stop = _english_stopwords(data)
    seen, docs, src = set(), [], []

    def add(text: str, where: str) -> None:
        key = hashlib.sha1(text.strip().encode()).hexdigest()
        if key not in seen and is_english(text, stop):
            seen.add(key)
            docs.append(text)
            src.append(where)

    for path in sorted((data / "cc_jsonl").glob("*.jsonl.gz")):
        for line in gzip.open(path, "rt", encoding="utf-8"):
            row = json.loads(line)
            add(normalise(row["text"]), row["id"])
    html = data / "html" / "trafilatura"
    for url, entry in sorted(json.loads((html / "evaldata.json").read_text(encoding="utf-8")).items()):
        page = next((p for p in (html / "eval" / f"{entry['file']}.gz", html / "cache" / f"{entry['file']}.gz")
                     if p.exists()), None)
        if page is None:
            continue
        try:
            add(payload_to_text(gzip.open(page).read(), "text/html", "cascade")[0], url)
        except Drop:
            pass
    for path in sorted((data / "warc").glob("*.warc.gz")):
        try:
            for rec in read_archive(path, 10_000_000):
                if isinstance(rec, ReadError) or rec.drop or rec.record_type not in ("response", "resource"):
                    continue
                try:
                    add(payload_to_text(rec.payload, rec.content_type, "cascade")[0], rec.url or path.name)
                except Drop:
                    pass
        except Exception:  # noqa: BLE001  a deliberately broken file among them: what was read is kept
            pass
    return docs, src


def has_words(text: str, words: tuple[str, ...], at_least: int = 2) -> bool:
    found = set(WORD.findall(text.lower()))
    return len(found.intersection(words)) >= at_least


def forum_like(text: str, url: str) -> bool:
    return bool(FORUM_URL.search(url)) or len({m.lower() for m in FORUM_CUES.findall(text)}) >= 2


def keyword_lists(data: Path = DATA) -> dict[str, set[str]]:
    """datatrove's banned words, and banned + soft banned (lines starting with '#' are disabled there)."""
    d = data / "blocklists" / "datatrove"

    def read(name):
        return {w.strip().lower() for w in (d / name).read_text(encoding="utf-8").splitlines()
                if w.strip() and not w.startswith("#")}
    banned = read("banned_words.txt")
    return {"banned": banned, "banned+soft": banned | read("soft_banned_words.txt")}


def keyword_flags(docs: list[str], words: set[str]) -> np.ndarray:
    """A document is flagged when one of `words` occurs in it as a whole word (or phrase)."""
    single = {w for w in words if " " not in w}
    phrases = [w for w in words if " " in w]
    out = np.zeros(len(docs), dtype=bool)
    for i, doc in enumerate(docs):
        toks = WORD.findall(doc.lower())
        if single.intersection(toks):
            out[i] = True
        elif phrases:
            flat = " " + " ".join(toks) + " "
            out[i] = any(f" {p} " in flat for p in phrases)
    return out


def insert_middle(article: str, passage: str) -> str:
    """The passage's lines inserted at the middle line of the article (both one paragraph a line)."""
    lines = article.split("\n")
    mid = len(lines) // 2
    return "\n".join(lines[:mid] + passage.split("\n") + lines[mid:])


def build_slices(data: Path = DATA) -> list[Slice]:
    ag, abc, crawl = agnews(data), abc_news(data), crawl_pages(data)
    wiki = wikipedia(data)
    (pos, pos_src), (neg, neg_src) = conversations(data)
    slices = [
        Slice("news_agnews", *ag), Slice("news_abc", *abc), Slice("fiction", *fiction(data)),
        Slice("encyclopaedia", *wiki), Slice("speeches", *speeches(data)),
        Slice("legal_licence", *licences(data)), Slice("code_comments", *code_comments()),
        Slice("forum_firefox", *forum_firefox(data)),
    ]
    fc = [(d, s) for d, s in zip(*crawl) if forum_like(d, s)]
    slices.append(Slice("forum_crawl", [d for d, _ in fc], [s for _, s in fc]))
    slices.append(Slice("web_crawl", *crawl))
    pool = list(zip(*ag)) + list(zip(*abc)) + list(zip(*crawl))
    for name, words in (("medicine", MEDICINE), ("crime", CRIME)):
        pick = [(d, s) for d, s in pool if has_words(d, words)]
        slices.append(Slice(name, [d for d, _ in pick], [s for _, s in pick]))
    slices.append(Slice("informal", *informal(data)))
    slices.append(Slice("chat_unlisted", neg, neg_src, note="unlabelled: some are rude without a listed word"))
    slices.append(Slice("offensive", pos, pos_src, positive=True))
    long = [insert_middle(wiki[0][i % len(wiki[0])], conv) for i, conv in enumerate(pos)]
    slices.append(Slice("offensive_in_long", long, [f"{s} in {wiki[1][i % len(wiki[1])]}" for i, s in
                                                    enumerate(pos_src)], positive=True))
    return slices


# ---------------------------------------------------------------------------------------------------------
# Scoring


def windows(text: str, chars: int = 300, max_windows: int = 64) -> list[str]:
    """Consecutive paragraphs (all of them, as the scorer splits them) merged into windows of at least
    `chars` characters, at most max_windows of them spread evenly."""
    from tokenmill.domains import toxicity

    parts = chunk(toxicity.paragraphs(text, 10**9), chars, sep="\n") or [text.strip()]
    if len(parts) > max_windows:
        parts = [parts[i] for i in np.linspace(0, len(parts) - 1, max_windows).round().astype(int)]
    return parts


# How a document's text is cut into the pieces the model scores, for each way of scoring it measured: the
# shipped split (at most 64 paragraphs of >= 20 characters), every paragraph, paragraphs of >= 40 characters,
# ~300-character windows, and the whole document as one text.
def pieces(doc: str, how: str) -> list[str]:
    from tokenmill.domains import toxicity

    if how == "shipped":
        return toxicity.paragraphs(doc or "", 64)
    if how == "uncapped":
        return toxicity.paragraphs(doc or "", 10**9)
    if how == "min40":
        return toxicity.paragraphs(doc or "", 64, min_chars=40)
    if how == "window300":
        return windows(doc or "")
    if how == "whole":
        return [(doc or "").strip()]
    raise ValueError(how)


# name -> (split, reduction over the pieces' probabilities)
AGGREGATIONS = {"max": ("shipped", "max"), "max_uncapped": ("uncapped", "max"), "max_min40": ("min40", "max"),
                "max_window300": ("window300", "max"), "top3_mean": ("shipped", "top3_mean"),
                "mean": ("shipped", "mean"), "whole": ("whole", "max")}


def piece_scores(docs: list[str], how: str) -> tuple[list[np.ndarray], list[list[str]]]:
    """Each document's pieces and their probabilities."""
    from tokenmill.domains import toxicity

    parts = [pieces(d, how) for d in docs]
    flat = [p for ps in parts for p in ps]
    probs = np.asarray(toxicity._model().predict_prob(flat), dtype=np.float64) if flat else np.zeros(0)
    out, i = [], 0
    for ps in parts:
        out.append(probs[i: i + len(ps)])
        i += len(ps)
    return out, parts


def reduce(per_doc: list[np.ndarray], how: str) -> np.ndarray:
    if how == "max":
        return np.array([p.max() for p in per_doc])
    if how == "top3_mean":
        return np.array([np.sort(p)[-3:].mean() for p in per_doc])
    if how == "mean":
        return np.array([p.mean() for p in per_doc])
    raise ValueError(how)


def family(source: str) -> str:
    """A document's source, coarsely: the crawl (any URL), else the first part of its path."""
    if re.match(r"(https?://|hard::)", source):
        return "crawl"
    return re.split(r"[/#:]", source, maxsplit=1)[0]


def measure(s: Slice, keywords: dict[str, set[str]], rng: np.random.Generator) -> dict:
    from tokenmill.domains import toxicity

    split = {how: piece_scores(s.docs, how) for how in {v[0] for v in AGGREGATIONS.values()}}
    scores = {name: reduce(split[how][0], red) for name, (how, red) in AGGREGATIONS.items()}
    shipped = toxicity.scores(s.docs)
    assert np.allclose(shipped, scores["max"]), f"{s.name}: max over paragraphs differs from scores()"
    per_doc, paras = split["shipped"]
    rate = {name: {f"{t:g}": float((v >= t).mean()) for t in THRESHOLDS} for name, v in scores.items()}
    flagged = np.flatnonzero(scores["max"] >= SHIPPED)
    pick = sorted(rng.choice(flagged, size=min(SAMPLE, len(flagged)), replace=False)) if len(flagged) else []
    sample = [{"source": s.sources[i], "score": round(float(scores["max"][i]), 4),
               "start": s.docs[i][:200], "top_paragraph": paras[i][int(per_doc[i].argmax())][:200]}
              for i in pick]
    return {
        "documents": len(s.docs), "positive": s.positive, "note": s.note,
        "mean_chars": float(np.mean([len(d) for d in s.docs])),
        "mean_paragraphs_scored": float(np.mean([len(p) for p in paras])),
        "share_over_64_paragraphs": float(np.mean([len(p) > 64 for p in split["uncapped"][1]])),
        "flagged_at_shipped": int(len(flagged)),
        "rate_by_threshold": rate,  # false-positive rate on clean slices, recall on positive ones
        "keyword_rate": {k: float(keyword_flags(s.docs, w).mean()) for k, w in keywords.items()},
        "flagged_sample": sample,
        "sources": dict(Counter(family(x) for x in s.sources).most_common()),
    }


def timing(docs: list[str], max_paragraphs: int = 64) -> dict:
    from tokenmill.domains import toxicity

    t0 = time.process_time()
    toxicity.scores(docs, max_paragraphs=max_paragraphs)
    cpu = time.process_time() - t0
    return {"documents": len(docs), "chars": sum(len(d) for d in docs), "cpu_s": cpu,
            "docs_per_cpu_s": len(docs) / cpu, "mb_per_cpu_s": sum(len(d) for d in docs) / cpu / 1e6}


def table(results: dict) -> str:
    head = ("| slice | docs | mean chars | " + " | ".join(f"@{t:g}" for t in THRESHOLDS)
            + " | keyword: banned | banned+soft |")
    rows = [head, "| --- |" + " ---: |" * (len(THRESHOLDS) + 4)]
    for name, r in results.items():
        rates = r["rate_by_threshold"]["max"]
        cells = [f"**{rates[f'{t:g}']:.1%}**" if t == SHIPPED else f"{rates[f'{t:g}']:.1%}" for t in THRESHOLDS]
        label = f"{name} (recall)" if r["positive"] else name
        rows.append(f"| {label} | {r['documents']:,} | {r['mean_chars']:,.0f} | " + " | ".join(cells)
                    + f" | {r['keyword_rate']['banned']:.1%} | {r['keyword_rate']['banned+soft']:.1%} |")
    return "\n".join(rows)


def aggregation_table(results: dict, thresholds=(SHIPPED,)) -> str:
    head = "| slice | " + " | ".join(f"{a} @{t:g}" for t in thresholds for a in AGGREGATIONS) + " |"
    rows = [head, "| --- |" + " ---: |" * (len(AGGREGATIONS) * len(thresholds))]
    for name, r in results.items():
        cells = [f"{r['rate_by_threshold'][a][f'{t:g}']:.1%}" for t in thresholds for a in AGGREGATIONS]
        rows.append(f"| {name}{' (recall)' if r['positive'] else ''} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "toxicity" / "figures.json")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from benchlib import machine

    from tokenmill.domains import toxicity

    t0 = time.process_time()
    toxicity._model()
    import_cpu = time.process_time() - t0
    w0 = time.perf_counter()
    slices = build_slices()
    build_s = time.perf_counter() - w0
    keywords = keyword_lists()
    rng = np.random.default_rng(0)
    results = {s.name: measure(s, keywords, rng) for s in slices}
    clean = [d for s in slices if not s.positive for d in s.docs]
    speed = timing(clean)
    speed_uncapped = timing(clean, 10**9)
    figures = {
        "machine": machine(["alt-profanity-check", "scikit-learn"]),
        "shipped_threshold": SHIPPED, "thresholds": list(THRESHOLDS), "aggregations": list(AGGREGATIONS),
        "model_import_cpu_s": import_cpu, "build_slices_wall_s": build_s,
        "timing": speed, "timing_uncapped": speed_uncapped,
        "selection": {"profanity": PROFANITY.pattern, "medicine": MEDICINE, "crime": CRIME,
                      "forum_url": FORUM_URL.pattern, "forum_cues": FORUM_CUES.pattern},
        "slices": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(figures, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print("Share of documents scored >= threshold (max over paragraphs): false positives on clean slices, "
          "recall on (recall) slices; bold: the shipped threshold.\n")
    print(table(results))
    print("\nBy aggregation of the paragraph scores:\n")
    print(aggregation_table(results))
    print(f"\nmodel import: {import_cpu:.2f} CPU-s")
    print(f"scoring: {speed['docs_per_cpu_s']:,.0f} documents per CPU-second ({speed['mb_per_cpu_s']:.1f} MB/CPU-s; "
          f"{speed['documents']:,} clean documents, {speed['chars'] / 1e6:.1f} MB, {speed['cpu_s']:.1f} CPU-s); "
          f"every paragraph (no 64 cap): {speed_uncapped['docs_per_cpu_s']:,.0f} documents per CPU-second")
    print("\nFlagged at the shipped threshold (sample):")
    for name, r in results.items():
        for ex in r["flagged_sample"]:
            print(f"- {name} {ex['score']:.3f} {ex['source']}: {ex['top_paragraph'][:160]!r}")
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
