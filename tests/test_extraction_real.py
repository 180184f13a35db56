"""HTML extraction quality on real pages, against trafilatura's own evaluation set.

Ground truth: ../shared/data/html/trafilatura/evaldata.json (see its SOURCES.md). Each entry names a page and
lists snippets of main content that must be extracted ("with") and boilerplate that must not ("without").
Pages go through the same functions ingest uses: decode(bytes) -> extract_html(html, extractor) -> normalise().

A snippet counts as found when it is a substring of the extracted text after NFC and after collapsing every
run of whitespace to one space on both sides (extractors differ in where they put line breaks).
"""

from __future__ import annotations

import gzip
import json
import re
import unicodedata
from functools import lru_cache
from pathlib import Path

import pytest

from conftest import missing_shared_data
from tokenmill.ingest.text import EXTRACTORS, Drop, decode, extract_html, normalise, payload_to_text

HTML_DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "html" / "trafilatura"
EVALDATA = HTML_DATA / "evaldata.json"

# Every 5th entry of the 990, by sorted url: 198 pages, 595 "with" and 594 "without" snippets. A stride
# rather than a prefix, because sorting puts the 35 "hard::" pages first. About 5 s on one core.
STRIDE = 5

# Measured on this subset (resiliparse 2.0.1, trafilatura 2.3.1, 2026-11):
#   resiliparse  recall 0.9361 (557/595)  rejection 0.7104 (422/594)  4 pages extracted empty
#   trafilatura  recall 0.9496 (565/595)  rejection 0.8990 (534/594)  0 pages extracted empty
#   ingest path, resiliparse with its trafilatura fallback for empty results (payload_to_text):
#                recall 0.9546 (568/595)  rejection 0.7088 (421/594)  fallback on 4 pages, none empty
# (On all 990 pages: resiliparse 0.9570 / 0.7067, trafilatura 0.9465 / 0.9029, ingest path 0.9675 / 0.7053.)
# The floors are the measured values minus 0.03, rounded down, so a library upgrade or a change to
# extract_html that costs a few snippets fails here instead of silently degrading every document.
FLOORS = {
    "resiliparse": {"recall": 0.90, "rejection": 0.68},
    "trafilatura": {"recall": 0.91, "rejection": 0.86},
    "ingest:resiliparse": {"recall": 0.92, "rejection": 0.67},
    # cascade measured 0.9630 (573/595) / 0.8838 (525/594), 0 pages empty (resiliparse 2.0.1, 2026-11; before
    # trafilatura's discard names, forms and the tail cut: 0.9630 / 0.8300).
    "cascade": {"recall": 0.93, "rejection": 0.85},
}
MODES = (*EXTRACTORS, "ingest:resiliparse")

_WS = re.compile(r"\s+")


def _flat(text: str) -> str:
    return _WS.sub(" ", unicodedata.normalize("NFC", text)).strip()


def _page_bytes(name: str) -> bytes:
    # evaldata names X.html; it is stored gzipped as eval/X.html.gz or cache/X.html.gz.
    for folder in ("eval", "cache"):
        path = HTML_DATA / folder / f"{name}.gz"
        if path.exists():
            return gzip.decompress(path.read_bytes())
    raise FileNotFoundError(f"{name}: in neither eval/ nor cache/ under {HTML_DATA}")


def _extract(raw: bytes, extractor: str) -> str:
    html, _charset = decode(raw)
    return normalise(extract_html(html, extractor))


@lru_cache(maxsize=1)
def _subset() -> list[tuple[str, dict, bytes]]:
    entries = json.loads(EVALDATA.read_text(encoding="utf-8"))
    return [(url, entries[url], _page_bytes(entries[url]["file"])) for url in sorted(entries)[::STRIDE]]


def _text(raw: bytes, mode: str) -> str:
    """An extractor alone, or ("ingest:<extractor>") the whole path ingest takes, fallback included."""
    if not mode.startswith("ingest:"):
        return _extract(raw, mode)
    try:
        return payload_to_text(raw, "text/html", mode.split(":", 1)[1])[0]
    except Drop:
        return ""


@lru_cache(maxsize=None)
def _scores(mode: str) -> dict:
    found = with_total = leaked = without_total = empty = 0
    for _url, entry, raw in _subset():
        text = _flat(_text(raw, mode))
        empty += not text
        for snippet in entry["with"]:
            with_total += 1
            found += _flat(snippet) in text
        for snippet in entry["without"]:
            without_total += 1
            leaked += _flat(snippet) in text
    return {"recall": found / with_total, "rejection": 1 - leaked / without_total, "empty": empty,
            "with": with_total, "without": without_total}


needs_data = pytest.mark.usefixtures("shared_data")  # skips without ../shared/data; fails under CI=true


@needs_data
def test_subset_is_fixed():
    subset = _subset()
    assert len(subset) == 198
    assert sum(len(e["with"]) for _, e, _ in subset) == 595
    assert sum(len(e["without"]) for _, e, _ in subset) == 594


@needs_data
@pytest.mark.parametrize("mode", MODES)
def test_recall_of_main_content(mode):
    s = _scores(mode)
    assert s["recall"] >= FLOORS[mode]["recall"], s


@needs_data
@pytest.mark.parametrize("mode", MODES)
def test_rejection_of_boilerplate(mode):
    s = _scores(mode)
    assert s["rejection"] >= FLOORS[mode]["rejection"], s


@needs_data
def test_ingest_path_leaves_no_article_empty():
    # Every evaluation page is an article: through ingest none may end up as drop:empty_text.
    assert _scores("ingest:resiliparse")["empty"] == 0


@needs_data
def test_every_subset_page_decodes():
    # All pages are UTF-8 or declare their charset; none may be dropped as binary or undecodable.
    for url, _entry, raw in _subset():
        text, charset = decode(raw)
        assert text and "\ufffd" not in text[:200], (url, charset)


@needs_data
def test_resiliparse_unclosed_noscript_page_falls_back_to_trafilatura():
    # With an unclosed tag inside <noscript> resiliparse's parser lets the tag swallow the body and returns
    # '' (this page and security.googleblog.com; the other 10 of the 12 of 990 evaldata pages that resiliparse
    # extracts empty are main-content misses with text in the body); ingest then uses trafilatura instead.
    entries = json.loads(EVALDATA.read_text(encoding="utf-8"))
    entry = entries["http://www.parcoabruzzo.it/dettaglio.php?id=58354"]
    assert not _extract(_page_bytes(entry["file"]), "resiliparse").strip()
    text, _, used = payload_to_text(_page_bytes(entry["file"]), "text/html", "resiliparse")
    text = _flat(text)
    assert used == "trafilatura"
    assert "Il risultato è molto positivo" in text


# --- token F1: snippets weighted by their length in words ------------------------------------------------
# The snippet counts above weigh a two-word "Kontakt" like a forty-word paragraph. Here every snippet counts
# with its number of word tokens (\w+, lower-cased); a snippet is found when its token sequence occurs in the
# extracted text's token sequence. precision = found "with" tokens / (found "with" + found "without" tokens),
# recall = found "with" tokens / all "with" tokens. Measured on the subset (2026-11):
#   resiliparse 0.8461   cascade 0.9120   trafilatura 0.9096
# (all 990 pages: 0.868, 0.911, 0.918; benchmarks/RESULTS.md). Floors: measured minus about 0.025. The cascade
# was 0.8991 here (0.900 on all pages) before trafilatura's discard names, forms, sibling articles and the tail
# cut.
F1_FLOOR = {"resiliparse": 0.82, "cascade": 0.88, "trafilatura": 0.88}
_TOKEN = re.compile(r"\w+")


def _tokens(text: str) -> str:
    return " " + " ".join(_TOKEN.findall(unicodedata.normalize("NFC", text).lower())) + " "


@lru_cache(maxsize=None)
def _token_f1(mode: str) -> float:
    found = total = leaked = 0
    for _url, entry, raw in _subset():
        text = _tokens(_text(raw, mode))
        for snippet in entry["with"]:
            n = len(_tokens(snippet).split())
            total += n
            found += n * (_tokens(snippet) in text)
        for snippet in entry["without"]:
            leaked += len(_tokens(snippet).split()) * (_tokens(snippet) in text)
    precision, recall = found / (found + leaked), found / total
    return 2 * precision * recall / (precision + recall)


@needs_data
@pytest.mark.parametrize("mode", EXTRACTORS)
def test_token_f1_floor(mode):
    assert _token_f1(mode) >= F1_FLOOR[mode]


@needs_data
def test_cascade_closes_most_of_the_gap_to_trafilatura():
    # resiliparse plain is 0.064 below trafilatura on the subset, the cascade 0.0024 above: at least half the gap
    # closed.
    plain, cascade, slow = _token_f1("resiliparse"), _token_f1("cascade"), _token_f1("trafilatura")
    assert cascade - plain >= 0.5 * (slow - plain), (plain, cascade, slow)


@needs_data
def test_cascade_within_a_hundredth_of_trafilatura():
    # Issue 12's target for the fast extractor: token F1 at most 0.01 below trafilatura's. Measured on the subset
    # 0.0024 above it (0.9120 vs 0.9096), on all 990 pages 0.006 below (benchmarks/RESULTS.md).
    assert _token_f1("cascade") >= _token_f1("trafilatura") - 0.01


# Structures on real evaluation pages: (url, snippet part, must be kept?, what it is). resiliparse plain gets
# every one of these wrong; the snippets are evaldata's own.
STRUCTURES = [
    ("http://iloveponysmag.com/2018/05/24/barbour-coastal/", "Der Hundestrand in Stein", True,
     "a <ul> of places between paragraphs, items with links (link-cluster rule)"),
    ("https://www.franceculture.fr/emissions/le-journal-des-idees/le-journal-des-idees-emission-du-mardi-14-janvier-2020",
     "Les individus productifs", True, "a <blockquote> in an article whose wrapper has class share-zone"),
    ("http://thenervousbreakdown.com/tanderson/2011/07/the-loneliest-woman-in-the-world-an-appreciation-of-hearts-alone/",
     "responses to", False, "the '… responses to' heading of a comment thread"),
    ("https://freshideen.com/rezepte/dresdner-stollenfest.html", "Verwandte Artikel", False,
     "a related-articles box"),
    ("https://oekolandbau.de/service/nachrichten/detailansicht/tag-des-zweinutzungshuhns-am-22-januar/",
     "Foto: ÖTZ", False, "an image caption"),
    ("http://www.regards.fr/politique/article/deux-ans-et-demi-en-macronie-9-mises-en-examen-10-enquetes-en-cours-et-2",
     "Qui êtes-vous", False, "the legend of a comment form's fieldset"),
    ("https://knowtechie.com/rocket-pass-4-in-rocket-league-brings-with-it-a-new-rally-inspired-car/",
     "Related Topics", False, "a 'Related Topics' line left after the article's last sentence"),
]


@needs_data
@pytest.mark.parametrize("url,part,kept,what", STRUCTURES, ids=[s[3].split(" ")[1] for s in STRUCTURES])
def test_structures_on_real_pages(url, part, kept, what):
    entry = json.loads(EVALDATA.read_text(encoding="utf-8"))[url]
    snippet = next(s for s in entry["with" if kept else "without"] if part in s)
    raw = _page_bytes(entry["file"])
    assert (_flat(snippet) in _flat(_extract(raw, "cascade"))) is kept, what
    assert (_flat(snippet) in _flat(_extract(raw, "resiliparse"))) is not kept, f"resiliparse now handles {what}"


# Forum threads: every post is an <article> (XenForo's "message" articles); the one with the most text is not
# the content, the thread is. The cascade took the longest post alone before (17 and 10 tokens of posts lost).
FORUM_POSTS = [
    ("https://villagersandheroes.com/forums/threads/patchnotes-4-47-4-tagundnachtgleiche-bugfix-build.3976/",
     "Die Farbe der Spawn-Ankündigungen"),
    ("https://www.katzen-forum.net/threads/jede-nacht-verliert-pepe-soviel-dreck-aus-dem-fell.230143/",
     "Bettelmänner"),
]


@needs_data
@pytest.mark.parametrize("url,part", FORUM_POSTS, ids=["patchnotes", "katzen-forum"])
def test_cascade_keeps_every_post_of_a_forum_thread(url, part):
    entry = json.loads(EVALDATA.read_text(encoding="utf-8"))[url]
    snippet = next(s for s in entry["with"] if part in s)
    assert _flat(snippet) in _flat(_extract(_page_bytes(entry["file"]), "cascade"))


# --- a tiny deterministic case that needs no data -------------------------------------------------------

ARTICLE = ("The village council met on Tuesday evening to discuss the repair of the old stone bridge over the "
           "river. Engineers reported that two of the arches had shifted during the winter floods, and that "
           "the cost of the work would be shared between the county and the national heritage fund. Residents "
           "asked whether the bridge would stay open to pedestrians while the scaffolding was in place.")
SECOND = ("The council agreed to publish a timetable for the works next month and to hold a public meeting "
          "before any road closures begin. The chair thanked the volunteers who had monitored the arches "
          "through the winter and recorded the water levels every morning.")
FOOTER = "Copyright 2026 Example Gazette Ltd. All rights reserved. Privacy policy | Cookie settings"
NAV = ["Home", "News", "Sport", "Weather", "Contact us"]

PAGE = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Bridge repairs agreed</title>
<script>var tracking = "do not extract me";</script><style>body {{ color: black }}</style></head>
<body>
<header><nav><ul>{''.join(f'<li><a href="/{n.lower()}">{n}</a></li>' for n in NAV)}</ul></nav></header>
<main><article>
<h1>Bridge repairs agreed</h1>
<p>{ARTICLE}</p>
<p>{SECOND}</p>
</article></main>
<footer><p>{FOOTER}</p><ul><li><a href="/privacy">Privacy</a></li><li><a href="/terms">Terms</a></li></ul></footer>
</body></html>"""


@pytest.mark.parametrize("extractor", EXTRACTORS)
def test_article_kept_boilerplate_dropped(extractor):
    text = normalise(extract_html(PAGE, extractor))
    assert ARTICLE in _flat(text)
    assert SECOND in _flat(text)
    assert "Copyright 2026" not in text
    assert "Contact us" not in text
    assert "do not extract me" not in text
    assert "color: black" not in text


@pytest.mark.parametrize("extractor", EXTRACTORS)
def test_article_through_payload_to_text(extractor):
    # The path ingest takes: bytes + HTTP Content-Type -> (text, charset); Latin-1 label means windows-1252.
    page = PAGE.replace('charset="utf-8"', 'charset="iso-8859-1"').replace("Tuesday", "Tuesday \u2013")
    payload = page.encode("cp1252")
    text, charset, _ = payload_to_text(payload, "text/html", extractor)
    assert charset == "cp1252"
    assert "Tuesday \u2013 evening" in _flat(text)
    assert "Copyright 2026" not in text
    assert text == normalise(text)


STRUCTURED = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Bridge repairs agreed</title></head>
<body>
<header><nav><ul>{''.join(f'<li><a href="/{n.lower()}">{n}</a></li>' for n in NAV)}</ul></nav></header>
<article><h1>Bridge repairs agreed</h1>
<div class="entry-content">
<p>{ARTICLE}</p>
<ul><li>The <a href="/arches">north arch</a> is repaired first</li><li>then the <a href="/deck">deck</a></li></ul>
<table><tr><td>Phase one costs</td><td>120,000 euros</td></tr></table>
<blockquote class="twitter-tweet"><p>The bridge stays open to walkers, the mayor said.</p></blockquote>
<p>{SECOND}</p>
<div class="gallery"><img src="a.jpg"><p class="wp-caption-text">Photo: the scaffolding in March</p></div>
<div class="related-posts"><h3>Related articles</h3><ul><li><a href="/x">Ferry timetable changes</a></li></ul></div>
</div></article>
<div id="comments"><h3>34 responses to “Bridge repairs agreed”</h3>
<ol class="commentlist"><li>Finally! I cross it every day.</li></ol></div>
<footer><p>{FOOTER}</p></footer>
</body></html>"""


def test_cascade_keeps_article_structures_and_drops_threads_related_and_captions():
    text = _flat(normalise(extract_html(STRUCTURED, "cascade")))
    for kept in ("Bridge repairs agreed", ARTICLE, SECOND, "north arch is repaired first", "then the deck",
                 "Phase one costs", "120,000 euros", "The bridge stays open to walkers"):
        assert kept in text, kept
    for dropped in ("34 responses", "I cross it every day", "Related articles", "Ferry timetable",
                    "Photo: the scaffolding", "Copyright 2026", "Contact us"):
        assert dropped not in text, dropped
    # What the cascade fixes: resiliparse alone drops the linked list and keeps the comment thread here.
    plain = _flat(normalise(extract_html(STRUCTURED, "resiliparse")))
    assert "north arch" not in plain and "34 responses" in plain


def _tail_page(ending: str) -> str:
    return (f"<!doctype html><html><body><article><h1>Bridge repairs agreed</h1><div class=\"entry-content\">"
            f"<p>{ARTICLE}</p><p>{SECOND}</p>{ending}</div></article></body></html>")


def test_cascade_cuts_lines_after_the_last_sentence_but_not_a_closing_list_or_table():
    # Lines left after the article's last sentence are what resiliparse keeps of the page around it.
    text = normalise(extract_html(_tail_page("<p>Tags: bridge, river</p><h4>Related Topics</h4>"), "cascade"))
    assert text.endswith("recorded the water levels every morning."), text[-200:]
    # An article may end in a list or a table without a full stop: they stay.
    listed = _flat(normalise(extract_html(_tail_page(
        "<ul><li>north arch first</li><li>deck in May</li></ul>"), "cascade")))
    assert "north arch first" in listed and "deck in May" in listed
    table = _flat(normalise(extract_html(_tail_page(
        "<table><tr><td>Phase one</td><td>120,000 euros</td></tr></table>"), "cascade")))
    assert "Phase one" in table and "120,000 euros" in table
    # Nor a last paragraph that ends in an ornament instead of a full stop.
    closing = ("The works are due to finish before the summer festival, when the bridge carries twice the usual "
               "traffic across the river ❖")
    ornament = _flat(normalise(extract_html(_tail_page(f"<p>{closing}</p><p>Share this</p>"), "cascade")))
    assert ornament.endswith(closing), ornament[-200:]
