"""Normal web pages: package READMEs split by section, and API pages from package docstrings."""

from __future__ import annotations

import hashlib
import random
import re
from typing import Iterator

from . import sources
from .markup import Block, block, main_text, parse_markup, prose_words, slug
from .site import Page, Site

MIN_PROSE_WORDS = 60  # a page with less running text is not a normal page
MAX_PAGE_WORDS = 800  # longer API pages are split at docstring boundaries, as documentation generators do


def _as_page_blocks(title: str, blocks: list[Block]) -> list[Block]:
    """Blocks under one h1 title: other h1s are demoted, so the page has a single top heading."""
    out = [block("h1", title)]
    for b in blocks:
        out.append(Block("h2", b.plain, b.html) if b.kind == "h1" else b)
    return out


def split_sections(blocks: list[Block], min_words: int = 80) -> list[list[Block]]:
    """Blocks grouped into sections at the top heading level used more than once; sections with
    little prose stay with the one before."""
    levels = [int(b.kind[1]) for b in blocks if b.kind[0] == "h"]
    repeated = sorted(lvl for lvl in set(levels) if levels.count(lvl) > 1)
    if not repeated:
        return [blocks]
    top = repeated[0]
    sections: list[list[Block]] = [[]]
    for b in blocks:
        if b.kind[0] == "h" and int(b.kind[1]) <= top and sections[-1]:
            sections.append([])
        sections[-1].append(b)
    merged: list[list[Block]] = []
    for sec in sections:
        if merged and prose_words(sec) < min_words:
            merged[-1].extend(sec)
        else:
            merged.append(sec)
    if len(merged) > 1 and prose_words(merged[0]) < min_words:
        merged[1] = merged[0] + merged[1]
        merged.pop(0)
    return merged


def readme_pages(dist: sources.Dist, site: Site) -> list[Page]:
    if not dist.description:
        return []
    blocks = parse_markup(dist.description, markdown=dist.markdown, top_level=1)
    pages, used = [], set()
    for k, sec in enumerate(split_sections(blocks)):
        if k == 0:
            title = f"{dist.display}: {dist.summary}" if dist.summary else dist.display
            body = sec[1:] if sec and sec[0].kind == "h1" else sec
            path = "/"
        else:
            title = sec[0].plain[0] if sec[0].kind[0] == "h" else f"{dist.display} ({k + 1})"
            body = sec[1:] if sec[0].kind[0] == "h" else sec
            path = f"/{slug(title)}/"
            while path in used:
                path = path[:-1] + "-2/"
        used.add(path)
        pages.append(Page(site, path, _as_page_blocks(title, body), kind="readme"))
    return pages


def api_unit_pages(site: Site, title: str, parts: list[tuple[str, str]]) -> list[Page]:
    """Pages of one documentation unit: a module (docstring + functions) or a class (+ methods)."""
    chunks: list[list[Block]] = [[]]
    size = 0
    for heading, doc in parts:
        blocks = ([block("h2", heading)] if heading else []) + parse_markup(doc, markdown=False, top_level=3)
        n = sum(len(t.split()) for b in blocks for t in b.plain)
        if size and size + n > MAX_PAGE_WORDS:
            chunks.append([])
            size = 0
        chunks[-1].extend(blocks)
        size += n
    pages = []
    for k, chunk in enumerate(chunks):
        page_title = title if k == 0 else f"{title} (part {k + 1})"
        path = f"/api/{title}/" + ("" if k == 0 else f"{k + 1}/")
        pages.append(Page(site, path, _as_page_blocks(page_title, chunk), kind="api"))
    return pages


def api_pages(dists: list[sources.Dist], sites: dict[str, Site], rng: random.Random) -> Iterator[Page]:
    """API pages from the docstrings of randomly ordered modules of all distributions, lazily:
    parsing is the slow part, so the caller stops when it has enough."""
    files = sources.api_source_files(dists)
    rng.shuffle(files)
    jobs = [(path, module) for _, path, module in files]
    for (dist, _, _), units in zip(files, sources.iter_docstring_units(jobs, fast=True)):
        for title, _, parts in units:
            if sum(len(d.split()) for _, d in parts) >= MIN_PROSE_WORDS:  # skip the rendering of what is_normal rejects
                yield from api_unit_pages(sites[dist], title, parts)


def is_normal(page: Page) -> bool:
    """Enough running English-looking prose to be an ordinary page of a crawl."""
    if prose_words(page.blocks) < MIN_PROSE_WORDS:
        return False
    text = page.text
    # Almost all characters ASCII: English-looking, and quick to test (a language model comes later).
    return text.isascii() or len(re.findall(r"[^\x00-\x7f]", text)) <= 0.02 * len(text)


def fingerprints(page: Page) -> tuple[str, str]:
    """Digests of the whole main text and of its first 40 words: pages repeating either (packages
    sharing a README template, re-exported docstrings) would be accidental duplicates."""
    ws = re.findall(r"\w+", main_text(page.blocks[1:]).lower())  # without the title: it differs between copies
    return hashlib.sha1(" ".join(ws).encode()).hexdigest(), hashlib.sha1(" ".join(ws[:40]).encode()).hexdigest()
