"""Bytes to clean text: charset detection, HTML extraction, Unicode normalisation.

Each function either returns text or raises Drop with a reason from a fixed vocabulary, so that every
record that does not become a document says why (DESIGN.md, contract 3).
"""

from __future__ import annotations

import codecs
import re
import unicodedata

from resiliparse.parse.encoding import detect_encoding

HTML_TYPES = ("text/html", "application/xhtml+xml")
TEXT_TYPES = ("text/plain",)
EXTRACTORS = ("resiliparse", "trafilatura")
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


def extract_html(html: str, extractor: str = "resiliparse") -> str:
    """Main-content text of an HTML page (navigation, footers and scripts removed)."""
    if extractor == "resiliparse":
        from resiliparse.extract.html2text import extract_plain_text

        return extract_plain_text(html, main_content=True, alt_texts=False, links=False,
                                  noscript=False, form_fields=False)
    if extractor == "trafilatura":
        import trafilatura

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
