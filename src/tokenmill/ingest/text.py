"""Bytes to clean text: charset detection, HTML extraction, Unicode normalisation.

Each function either returns text or raises Drop with a reason from a fixed vocabulary, so that every
record that does not become a document says why (DESIGN.md, contract 3).
"""

from __future__ import annotations

import codecs
import re
import unicodedata

from resiliparse.extract.html2text import extract_plain_text
from resiliparse.parse.encoding import detect_encoding
from resiliparse.parse.html import ELEMENT, HTMLTree

HTML_TYPES = ("text/html", "application/xhtml+xml")
TEXT_TYPES = ("text/plain",)
EXTRACTORS = ("cascade", "resiliparse", "trafilatura")
_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9_:.\-]+)""", re.I)
_HEADER_CHARSET = re.compile(r"charset\s*=\s*[\"']?([A-Za-z0-9_:.\-]+)", re.I)
# Text whose decoding needed more replacement characters than this is noise, not language.
MAX_REPLACEMENT_FRACTION = 0.01


class Drop(Exception):
    """A record that will not become a document; `reason` goes into its decision row."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


def mime_type(content_type: str | None) -> str:
    return (content_type or "").split(";", 1)[0].strip().lower()


def _codec(name: str | bytes | None) -> str | None:
    if not name:
        return None
    if isinstance(name, bytes):
        name = name.decode("ascii", "ignore")
    try:
        codec = codecs.lookup(name.strip()).name
    except LookupError:
        return None
    # WHATWG: pages labelled latin-1 are decoded as windows-1252 by every browser.
    return "cp1252" if codec in ("latin-1", "iso8859-1", "ascii") else codec


def decode(payload: bytes, content_type: str | None = None) -> tuple[str, str]:
    """Decode a payload: declared HTTP charset, then <meta charset>, then UTF-8, then detection.

    Returns (text, charset). A declared charset is trusted only if the bytes decode under it cleanly.
    """
    # A byte-order mark outranks every label (WHATWG): UTF-16 text is full of NUL bytes, and a page labelled
    # latin-1 that starts with a UTF-8 BOM is UTF-8.
    for bom, codec in ((codecs.BOM_UTF8, "utf-8"), (codecs.BOM_UTF16_LE, "utf-16-le"), (codecs.BOM_UTF16_BE, "utf-16-be")):
        if payload.startswith(bom):
            try:
                return payload[len(bom):].decode(codec), codec
            except UnicodeDecodeError:
                break
    if b"\x00" in payload[:4096]:
        raise Drop("binary_payload", "NUL bytes in a payload declared as text")
    header = _HEADER_CHARSET.search(content_type or "")
    meta = _META_CHARSET.search(payload[:4096])
    candidates = [_codec(header.group(1) if header else None), _codec(meta.group(1) if meta else None), "utf-8"]
    for codec in candidates:
        if codec is None:
            continue
        try:
            return payload.decode(codec), codec
        except (UnicodeDecodeError, LookupError):
            continue
    guessed = _codec(detect_encoding(payload)) or "utf-8"
    text = payload.decode(guessed, errors="replace")
    bad = text.count("\ufffd")
    if bad > MAX_REPLACEMENT_FRACTION * max(1, len(text)):
        raise Drop("undecodable", f"{bad} undecodable characters under {guessed}")
    return text, guessed


# --- the "cascade" extractor ------------------------------------------------------------------------------
# resiliparse's main-content mode alone (measured on trafilatura's 990 evaluation pages, token-weighted snippet
# F1, see benchmarks/RESULTS.md): keeps comment threads unless told otherwise, keeps sidebars, footers and teaser
# boxes whenever no single article container is recognised, and drops a <ul> shallower than four levels below
# <body> or with more than 20% link text. The cascade: (1) resiliparse with comments off and the boilerplate
# below removed; (2) when the page has a recognisable article container holding at least half of the page's
# <p> text (less: a teaser card mistaken for the article), everything outside it and the page title is cut
# before resiliparse runs, and lists and quotes inside it are protected from resiliparse's rules; (3) a page
# left with under 200 characters goes to trafilatura (21 of the 990 pages); (4) lines after the last sentence
# are cut (_trim_tail).
# Measured on the 990 pages (token F1, trafilatura 0.918): resiliparse alone 0.868; (1) 0.881; (1)+(2) 0.891;
# with (3) 0.899; article lists and quotes kept, footers and widgets dropped 0.901. Deciding (2) by <p> text
# instead of a first whole-page extraction costs 0.0007 F1 and saves about 0.7 ms per page. Rejected after
# measuring: dropping teasers, sidebars or post meta by class (each cost more recall than it gained precision),
# a threshold of 0.3 or 0.7 instead of half (both lower F1). Then (token F1 0.9006 -> 0.9112, odd pages 0.9065
# -> 0.9163, even 0.8946 -> 0.9061): trafilatura's block names and forms dropped 0.9049, sibling <article>s
# taken together 0.9055, (4) 0.9099, (3) in trafilatura's fast mode 0.9096 (0.37 CPU-ms per page less), (4)
# stopping at any line of 20 words 0.9112. Also measured and rejected: elements hidden by style or aria-hidden
# (+0.0001), <aside> (0), "teaser" and "bottom" class substrings (-0.0006 each).

# Boilerplate inside or beside the article that resiliparse's own rules miss. Class tokens are matched whole
# ([class~=x]) where a substring would hit article wrappers ("comments-open", "share-zone"); substrings only
# where the vocabulary is open-ended ("related-posts", "author-box-wrap", "wp-caption-text").
BOILERPLATE = (
    # comment threads and reply forms
    "#comments", "#respond", "#disqus_thread", ".comment-respond", ".comments-area", ".comment-list",
    ".commentlist", "[class~=comments]", "[id^=comment-]", ".akismet_comment_form_privacy_notice",
    "[class*=comment-form]",
    # author boxes
    "[class*=author-bio]", "[class*=author-box]", "[class*=author-info]", "[id*=author-info]",
    "[class*=about-author]", "[id*=author-bio]", "[class~=mini-bio]",
    # related and recommended articles
    "[class*=related]", "[id*=related]",
    # share bars, newsletter and subscription boxes, cookie banners
    "[class*=sharedaddy]", "[class*=share-buttons]", "[class*=newsletter]", "[class*=subscribe]",
    "[class*=cookie]", "[id*=cookie]",
    # image and gallery captions (<figcaption> is already skipped by resiliparse without alt texts)
    "[class*=caption]",
    # footers of the page or of the article (tags, share bars, legal lines), sidebar widgets
    "footer", "[class*=footer]", "[class~=widget]", "[class*=widget-area]",
    # forms: comment and rating forms, search boxes, newsletter sign-ups ("Qui êtes-vous ?", "Wie bewerten Sie
    # diesen Artikel?"); resiliparse skips the fields but keeps their labels and legends (+0.0008 F1)
    "form",
)
# Block-level names from trafilatura's own discard vocabulary (trafilatura.xpaths.OVERALL_DISCARD_XPATH), kept
# only where removing them lost no content on either half of the evaluation pages (odd and even): bylines and
# author lines, post meta and ratings, embeds and overlays, share and navigation bars, buttons, related-story
# blocks, ad slots. Its other names cost content: "widget" and "sidebar" (page builders name the article
# "elementor-widget"), "slide", "menu", "bar", "tags" as class substrings, "social", "expand", "options".
# Matched on the block tags trafilatura matches them on, plus <aside> (+0.0035 F1; chosen on the odd pages
# alone the names gain +0.0033 on the even ones).
DISCARD_CLASS = ("author", "meta", "rating", "embed", "overlay", "byline", "ooter", "button", "elated", "-ad-",
                 "-stories", "sociable", "viewport", "avigation", "navbar", "subnav", "attachment")
DISCARD_CLASS_PREFIX = ("shar", "nav", "post-nav")
DISCARD_ID = ("tags", "nav", "Nav", "author", "newsletter", "ooter")
_DISCARD_TAGS = frozenset(("div", "section", "span", "p", "ul", "li", "aside"))
_BOILERPLATE_SELECTOR = ", ".join(BOILERPLATE)
# A second query with the tag checked in Python: the same names prefixed with each tag make one selector of
# 190 parts that costs about 1 ms per page more (measured 4.4 vs 3.3 CPU-ms per page).
_DISCARD_SELECTOR = ", ".join([f"[class*={name}]" for name in DISCARD_CLASS]
                              + [f"[class^={name}]" for name in DISCARD_CLASS_PREFIX]
                              + [f"[id*={name}]" for name in DISCARD_ID])
# Article containers, most specific first; within a group the one with the most text wins.
ARTICLE_ROOTS = (
    ", ".join((
        "[itemprop=articleBody]", "[itemprop=articlebody]", "[class~=article-body]", "[class~=articleBody]",
        "[class~=article__body]", "[class~=article-content]", "[class~=article__content]", "[class~=entry-content]",
        "[class~=post-content]", "[class~=post-body]", "[class~=post-entry]", "[class~=story-body]",
        "[class~=story-content]", "[class~=content-body]", "[class~=article-text]", "[class~=articletext]",
        "[class~=single-content]", "[class~=news-content]", "[class~=text-content]", "[class~=field-name-body]",
        "[class~=node-content]", "#article-body", "#articleBody", "#article-content", "#story-body",
        "#post-content", "#content-body", "#articletext")),
    "article",
    ", ".join(("main", "[role=main]", "#content", "#main", "#main-content", "[class~=main-content]",
               "[class~=content]")),
)
MIN_ROOT_CHARS = 200        # a container with less text is a teaser or an empty shell, not the article
MIN_KEPT_FRACTION = 0.5     # share of the page's <p> text the container must hold to be the article
MIN_CASCADE_CHARS = 200     # below this the page goes to trafilatura (2% of the evaluation pages)
_RESILIPARSE_OPTIONS = dict(main_content=True, alt_texts=False, links=False, noscript=False, form_fields=False)


def _article_root(body):
    for group in ARTICLE_ROOTS:
        # .values() materialises the matches in one call: iterating a resiliparse node list directly re-walks
        # it per item (measured: 40-160 µs per element on real pages instead of about 1 µs).
        best, best_len = None, 0
        for element in body.query_selector_all(group).values():
            n = len(element.text or "")
            if n > best_len:
                best, best_len = element, n
        if best is not None and best_len >= MIN_ROOT_CHARS:
            # Sibling <article>s are the posts of a forum thread (XenForo's "message" articles), not one
            # article beside teasers: their common parent is the content (2 forum pages of the 990 recover
            # 27 tokens of posts, one FAQ page loses 16; +0.0006 F1).
            parent = best.parent
            if best.tag == "article" and parent is not None and sum(
                    1 for child in parent.child_nodes.values() if child.tag == "article") >= 2:
                return parent
            return best
    return None


def _paragraph_chars(node) -> int:
    return sum(len(p.text or "") for p in node.query_selector_all("p").values())


def _isolate(tree, body, root) -> None:
    """Cut everything outside `root` except the page's first <h1>, which moves in front of `root`; then nest
    `root` three <div>s deeper, because resiliparse drops every <ul> fewer than four levels below <body> as
    global navigation -- inside the article that would be silent content loss."""
    title = body.query_selector("h1")
    if title is not None and not root.contains(title) and not title.contains(root):
        root.before(title)
    node = root
    while node is not body and node.parent is not None:
        parent = node.parent
        for sibling in parent.child_nodes.values():
            if sibling is not node and sibling is not title and sibling.type == ELEMENT:
                sibling.remove()
        node = parent
    # The container and its ancestors are the article by now; their class names must not let resiliparse's
    # rules drop it ("entry themeform share" is a social bar to them: 4 articles of the 990 lost whole), nor
    # may a block quote's ("twitter-tweet": embedded tweets quoted by the article).
    node = root
    while node is not None and node is not body:
        node.remove_attribute("class")
        node.remove_attribute("id")
        node = node.parent
    for quote in root.query_selector_all("blockquote").values():
        quote.remove_attribute("class")
    for _ in range(3):
        wrapper = tree.create_element("div")
        root.before(wrapper)
        wrapper.append_child(root)
    # resiliparse also drops a <ul> with more than 20% link text ("the <a>Elbkantinchen</a> in Geesthacht");
    # inside the article such a list is content, and an <ol> is exempt from that rule. The price: its items
    # come out numbered instead of bulleted. A list of nothing but links ("Read also: <a>...</a>") is left to
    # resiliparse's rule: keeping those too cost 0.0005 F1.
    for bullets in root.query_selector_all("ul").values():
        chars = len((bullets.text or "").strip())
        if chars and sum(len(a.text or "") for a in bullets.query_selector_all("a").values()) > 0.8 * chars:
            continue
        numbered = tree.create_element("ol")
        bullets.before(numbered)
        for item in bullets.child_nodes.values():
            numbered.append_child(item)
        bullets.remove()


# The end of an article: a line of at least MIN_LAST_WORDS words ending like a sentence, a list item or a
# table row. What follows it at the end of the text is what resiliparse leaves after the article: "Related
# Topics", "Share |", "Tags: , ,", "Zurück nach oben", "Das könnte Sie auch interessieren", teaser titles,
# copyright lines. Cut unless that would cut half the text or more (a page of short lines: a table, a
# recipe, a poem). +0.0044 F1 on the 990 pages (precision +0.015, recall -0.007), on both halves (odd
# +0.0032, even +0.0056); without the list exemption +0.0004 more, but an article ending in a list must keep
# it. A line of MIN_PARAGRAPH_WORDS words or more is a paragraph whatever its last character: articles that end
# in an ornament ("❖") or the author's initials ("... Cheval Blanc). aw") keep their last paragraph (+0.0016 F1;
# even pages +0.0019, odd +0.0013; 12 words: +0.0007, 30: +0.0018 but the odd pages 0.0004 lower than at 20).
MIN_LAST_WORDS = 3
MIN_PARAGRAPH_WORDS = 20
_SENTENCE_END = re.compile(r"""[.!?…:;"'»”“)\]]$""")
_LIST_ITEM = re.compile(r"^\s+(?:•|\d+\.)\s")


def _trim_tail(text: str) -> str:
    lines = text.rstrip().split("\n")
    end = len(lines)
    while end > 0:
        line = lines[end - 1]
        words = line.split()
        if "\t" in line or _LIST_ITEM.match(line) or len(words) >= MIN_PARAGRAPH_WORDS or (
                len(words) >= MIN_LAST_WORDS and _SENTENCE_END.search(words[-1])):
            break
        end -= 1
    kept = "\n".join(lines[:end])
    return kept if len(kept) >= 0.5 * len(text) else text


def extract_cascade(html: str) -> str:
    tree = HTMLTree.parse(html)
    body = tree.body
    text = ""
    if body is not None:
        root = _article_root(body)
        # Removed from the tree, not passed as skip_elements: the <p> count below must not see it either.
        for element in body.query_selector_all(_BOILERPLATE_SELECTOR).values():
            if root is None or not element.contains(root):  # never a wrapper of the article itself
                element.remove()
        for element in body.query_selector_all(_DISCARD_SELECTOR).values():
            if element.tag in _DISCARD_TAGS and (root is None or not element.contains(root)):
                element.remove()
        if root is not None and _paragraph_chars(root) >= MIN_KEPT_FRACTION * _paragraph_chars(body):
            _isolate(tree, body, root)
        text = _trim_tail(extract_plain_text(tree, comments=False, **_RESILIPARSE_OPTIONS))
    if len(text.strip()) < MIN_CASCADE_CHARS:
        import trafilatura  # 0.25 s to import: only for the pages the cascade hands it

        # fast=True: without its readability and jusText fallbacks, which on these 21 hard pages cost more than
        # the cascade on all the others (0.46 of 3.2 CPU-ms per page over the 990; fast: 0.09, -0.0003 F1).
        slow = trafilatura.extract(html, include_comments=False, include_tables=True, favor_precision=False,
                                   deduplicate=False, fast=True) or ""
        if len(slow.strip()) > len(text.strip()):
            text = slow
    return text


def extract_html(html: str, extractor: str) -> str:
    """Main-content text of an HTML page (navigation, footers and scripts removed)."""
    if extractor == "cascade":
        return extract_cascade(html)
    if extractor == "resiliparse":
        return extract_plain_text(html, main_content=True, alt_texts=False, links=False,
                                  noscript=False, form_fields=False)
    if extractor == "trafilatura":
        import trafilatura  # 0.25 s to import: only for the pages the cascade hands it

        return trafilatura.extract(html, include_comments=False, include_tables=True,
                                   favor_precision=False, deduplicate=False) or ""
    raise ValueError(f"ingest.extractor must be one of {EXTRACTORS}, got {extractor!r}")


_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def normalise(text: str) -> str:
    """NFC, Unix line ends, no BOMs or control characters, no trailing spaces on lines."""
    text = unicodedata.normalize("NFC", text).replace("\ufeff", "")  # stray BOMs: invisible, but change hashes
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    text = _CONTROL.sub("", text)
    return "\n".join(line.rstrip() for line in text.split("\n")).strip("\n")


def payload_to_text(payload: bytes, content_type: str | None, extractor: str) -> tuple[str, str, str | None]:
    """(text, charset, extractor used) of an HTTP-like payload, or Drop."""
    mime = mime_type(content_type)
    if mime and mime not in HTML_TYPES + TEXT_TYPES:
        raise Drop("unsupported_content_type", mime)
    html, charset = decode(payload, content_type)
    looks_html = mime in HTML_TYPES or (not mime and "<html" in html[:2048].lower())
    if not looks_html:
        text, used = normalise(html), None
    else:
        text, used = normalise(extract_html(html, extractor)), extractor
        if not text.strip() and extractor == "resiliparse":
            # resiliparse finds no main content on about 1% of real pages (12 of trafilatura's 990 evaluation
            # pages: 2 where an unclosed tag in <noscript> swallows the body, 10 where its main-content
            # detection finds nothing); trafilatura recovers 31 of their 33 expected snippets.
            text, used = normalise(extract_html(html, "trafilatura")), "trafilatura"
    if not text.strip():
        raise Drop("empty_text", "no text left after extraction" if looks_html else "empty payload")
    return text, charset, used
