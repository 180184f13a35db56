"""Crude Markdown / reStructuredText to HTML blocks, and the plain text the blocks carry.

Only good enough to make web-like pages out of package READMEs and docstrings: headings, paragraphs,
lists, literal blocks and links. A page's "main text" (what the near-duplicate Jaccard in the ground
truth is measured on) is the plain text of its blocks, so parsing and rendering share one structure.
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass, field
from html import escape


@dataclass
class Block:
    kind: str  # "h1".."h6", "p", "ul", "ol", "pre", "lines" (a paragraph with hard line breaks)
    plain: list[str]  # plain text: one entry, or one per list item / line
    html: list[str] = field(default_factory=list)  # inline HTML per entry (escaped, with links)

    def __post_init__(self):
        if not self.html:
            self.html = [escape(t, quote=False) for t in self.plain]


def block(kind: str, text: str) -> Block:
    """A block from plain text that has no inline markup (generated text, edited copies)."""
    return Block(kind, [text])


def render(blocks: list[Block]) -> str:
    out = []
    for b in blocks:
        if b.kind.startswith("h"):
            out.append(f"<{b.kind}>{b.html[0]}</{b.kind}>")
        elif b.kind == "p":
            out.append(f"<p>{b.html[0]}</p>")
        elif b.kind in ("ul", "ol"):
            items = "".join(f"<li>{h}</li>\n" for h in b.html)
            out.append(f"<{b.kind}>\n{items}</{b.kind}>")
        elif b.kind == "pre":
            out.append(f"<pre><code>{b.html[0]}</code></pre>")
        elif b.kind == "lines":
            out.append("<p>" + "<br>\n".join(b.html) + "</p>")
        else:
            raise ValueError(b.kind)
    return "\n".join(out)


def main_text(blocks: list[Block]) -> str:
    return "\n".join("\n".join(b.plain) for b in blocks)


def prose_words(blocks: list[Block]) -> int:
    return sum(len(t.split()) for b in blocks if b.kind in ("p", "ul", "ol", "lines") for t in b.plain)


_STOP = frozenset("the of and to a in is it that for on with as be are this by or an not from can at".split())


def _dup_5gram_char_frac(words: list[str]) -> float:
    """Characters covered by word 5-grams that occur more than once (Gopher's repetition measure)."""
    seen: dict[tuple[str, ...], int] = {}
    for i in range(len(words) - 4):
        g = tuple(words[i:i + 5])
        seen[g] = seen.get(g, 0) + 1
    dup = [False] * len(words)
    for i in range(len(words) - 4):
        if seen[tuple(words[i:i + 5])] > 1:
            dup[i:i + 5] = [True] * 5
    total = sum(len(w) for w in words) or 1
    return sum(len(w) for w, d in zip(words, dup) if d) / total


def prose_score(blocks: list[Block]) -> float:
    """Share of a page's words in paragraphs that read as sentences; 0 for pages that are not clean English
    prose (code, braces, repeated phrasing, few stop words), which curation filters drop before the stage a
    planted case is meant for."""
    if any(b.kind == "pre" or "{" in t or "}" in t for b in blocks for t in b.plain):
        return 0.0  # code blocks and braces: C4's rules drop such pages before later stages see them
    words = [w.lower() for b in blocks for t in b.plain for w in t.split()]
    if _dup_5gram_char_frac(words) > 0.05 or sum(w in _STOP for w in words) < 0.25 * max(1, len(words)):
        return 0.0
    total = sum(len(t.split()) for b in blocks for t in b.plain) or 1
    sentences = sum(len(t.split()) for b in blocks if b.kind == "p" for t in b.plain
                    if t.rstrip().endswith((".", "!", "?")) and "`" not in t and "()" not in t)
    return sentences / total


# --- inline markup -------------------------------------------------------------------------------

_IMAGE = re.compile(r"!\[[^\]]*\]\([^)]*\)|\[!\[[^\]]*\]\([^)]*\)\]\([^)]*\)")
_LINK = re.compile(r"\[([^\]\n]+)\]\((https?://[^)\s]+)[^)]*\)|`([^`<\n]+?)\s*<(https?://[^>\s]+)>`__?")
_TAG = re.compile(r"</?[a-zA-Z][^<>]*>")
_ROLE = re.compile(r":[\w.+-]+(?::[\w.+-]+)?:`([^`]+)`")
_SUBST = re.compile(r"\|[\w .:-]+\|_{0,2}")
_MARKS = [
    (re.compile(r"``([^`]+)``"), r"\1"),
    (re.compile(r"`([^`]+)`_{0,2}"), r"\1"),
    (re.compile(r"\*\*([^*]+)\*\*"), r"\1"),
    (re.compile(r"__([^_]+)__"), r"\1"),
    (re.compile(r"(?<![\w*])\*([^*\s][^*]*)\*(?![\w*])"), r"\1"),
    (re.compile(r"\[([^\]]+)\]\[[^\]]*\]"), r"\1"),
    (re.compile(r"\[([^\]]+)\]\([^)\s]*\)"), r"\1"),  # relative Markdown links
]


_MARKUP_CHARS = re.compile(r"[`*_<|\[]")


def _clean(s: str) -> str:
    if not _MARKUP_CHARS.search(s):
        return s  # plain prose: most paragraphs
    s = re.sub(r"<(https?://[^>\s]+)>", r"\1", s)  # Markdown autolinks: keep the address
    s = _TAG.sub("", s)
    # A role's target may read "Title <target>": keep the title.
    s = _ROLE.sub(lambda m: re.sub(r"\s*<[^>]*>$", "", m.group(1)).lstrip("~!"), s)
    s = _SUBST.sub("", s)
    for pat, rep in _MARKS:
        s = pat.sub(rep, s)
    return s


def inline(text: str) -> tuple[str, str]:
    """(plain text, HTML) of one paragraph or list item."""
    text = _IMAGE.sub("", text)
    plain, html, pos = [], [], 0
    for m in _LINK.finditer(text):
        before = _clean(text[pos : m.start()])
        label = _clean(m.group(1) or m.group(3)).strip()
        url = m.group(2) or m.group(4)
        plain += [before, label]
        html += [escape(before, quote=False), f'<a href="{escape(url)}">{escape(label, quote=False)}</a>']
        pos = m.end()
    rest = _clean(text[pos:])
    plain.append(rest)
    html.append(escape(rest, quote=False))
    p, h = "".join(plain), "".join(html)
    # Collapse whitespace in both the same way so the plain text matches what a browser would show.
    return " ".join(p.split()), " ".join(h.split())


# --- blocks --------------------------------------------------------------------------------------

_UNDERLINE = re.compile(r"^\s*([=\-~^*+#`'\"_:.])\1{2,}\s*$")
_MD_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")
_LIST_ITEM = re.compile(r"^(\s{0,3})([-*+\u2022]|\d{1,3}[.)]|#\.)\s+(\S.*)$")
_FENCE = re.compile(r"^\s*(```|~~~)")
_DIRECTIVE = re.compile(r"^\.\.\s+([\w:-]+)::\s*(.*)$")
_CODE_DIRECTIVES = {"code", "code-block", "sourcecode", "doctest", "testcode", "ipython", "parsed-literal"}
_PROSE_DIRECTIVES = {
    "note", "warning", "tip", "important", "attention", "caution", "hint", "danger", "seealso",
    "admonition", "versionadded", "versionchanged", "deprecated", "topic", "sidebar", "rubric",
}


def _take_indented(lines: list[str], i: int) -> tuple[str, int]:
    """The block of blank or indented lines starting at i, dedented; and the index after it."""
    body = []
    while i < len(lines) and (not lines[i].strip() or lines[i][:1] in (" ", "\t")):
        body.append(lines[i])
        i += 1
    while body and not body[-1].strip():
        body.pop()
    return textwrap.dedent("\n".join(body)), i


def parse_markup(text: str, markdown: bool = True, top_level: int = 1) -> list[Block]:
    """Blocks of a Markdown (markdown=True) or reStructuredText document.

    top_level: the HTML level given to the document's first heading style, so docstrings rendered
    inside a page can sit below the page's own headings.
    """
    text = re.sub(r"<!--.*?-->", "", text, flags=re.S)  # HTML comments (licence headers in READMEs)
    lines = text.replace("\r\n", "\n").expandtabs(4).split("\n")
    blocks: list[Block] = []
    para: list[str] = []
    levels: dict[str, int] = {}  # heading style -> level, in order of first use (the RST rule)
    literal_next = False  # an RST paragraph ending in "::" announces a literal block

    def heading(style: str, title: str):
        if markdown and style[0] == "#":
            lvl = len(style)
        elif markdown and style in ("=", "-"):
            lvl = 1 if style == "=" else 2  # setext headings
        else:
            lvl = levels.setdefault(style, len(levels) + 1)
        plain, html = inline(title)
        if plain:
            k = min(6, lvl + top_level - 1)
            blocks.append(Block(f"h{k}", [plain], [html]))

    def flush():
        nonlocal literal_next
        if para:
            s = " ".join(para)
            literal_next = s.endswith("::")
            if literal_next:
                s = s[:-2].rstrip() + (":" if not s[:-2].endswith(" ") else "")
            plain, html = inline(s)
            if plain:
                blocks.append(Block("p", [plain], [html]))
            para.clear()

    def pre(code: str):
        code = textwrap.dedent(code).strip("\n")
        if code.strip():
            blocks.append(Block("pre", [code]))

    i, n = 0, len(lines)
    while i < n:
        line = lines[i]
        s = line.strip()
        nxt = lines[i + 1] if i + 1 < n else ""
        if not s:
            flush()
            i += 1
            continue
        if _FENCE.match(line):
            flush()
            fence = _FENCE.match(line).group(1)
            code, i = [], i + 1
            while i < n and not lines[i].strip().startswith(fence):
                code.append(lines[i])
                i += 1
            pre("\n".join(code))
            i += 1
            continue
        m = _MD_HEADING.match(line)
        if markdown and m:
            flush()
            heading("#" * len(m.group(1)), m.group(2))
            i += 1
            continue
        if _UNDERLINE.match(line):
            # An RST overline title, or a transition / horizontal rule (dropped).
            flush()
            if i + 2 < n and lines[i + 1].strip() and _UNDERLINE.match(lines[i + 2]):
                heading("over" + s[0], lines[i + 1].strip())
                i += 3
            else:
                i += 1
            continue
        if not para and _UNDERLINE.match(nxt) and len(nxt.strip()) >= min(len(s), 3) and line[:1] != " ":
            heading(nxt.strip()[0], s)
            i += 2
            continue
        m = _DIRECTIVE.match(s)
        if m:
            flush()
            name = m.group(1).lower()
            body, i = _take_indented(lines, i + 1)
            body_lines = [ln for ln in body.split("\n") if not re.match(r"^:[\w-]+:", ln)]
            if name in _CODE_DIRECTIVES:
                pre("\n".join(body_lines))
            elif name in _PROSE_DIRECTIVES:
                inner = " ".join([m.group(2)] if m.group(2) else []) + "\n" + "\n".join(body_lines)
                blocks.extend(parse_markup(inner, markdown=False, top_level=6))
            continue  # images, toctrees, raw HTML, ... carry no prose
        if s.startswith(".. ") or s == "..":
            # RST comments, link targets and substitution definitions.
            flush()
            _, i = _take_indented(lines, i + 1)
            continue
        if s.startswith(">>>") and not para:
            code = []
            while i < n and lines[i].strip():
                code.append(lines[i])
                i += 1
            pre("\n".join(code))
            continue
        if line[:1] in (" ", "\t") and not para and not _LIST_ITEM.match(line):
            body, i = _take_indented(lines, i)
            if markdown or literal_next:
                pre(body)
            else:  # RST block quote or definition body: still prose
                blocks.extend(parse_markup(body, markdown=False, top_level=6))
            literal_next = False
            continue
        m = _LIST_ITEM.match(line)
        if m:
            flush()
            ordered = m.group(2)[0].isdigit() or m.group(2) == "#."
            items: list[str] = []
            while i < n:
                m = _LIST_ITEM.match(lines[i])
                if m:
                    items.append(m.group(3).strip())
                elif lines[i].strip() and (lines[i][:1] in (" ", "\t") or lines[i - 1].strip()):
                    items[-1] += " " + lines[i].strip()  # continuation line
                elif not lines[i].strip() and i + 1 < n and (_LIST_ITEM.match(lines[i + 1]) or lines[i + 1][:2] == "  "):
                    pass  # blank line inside a loose list
                else:
                    break
                i += 1
            rendered = [inline(t) for t in items]
            rendered = [r for r in rendered if r[0]]
            if rendered:
                blocks.append(Block("ol" if ordered else "ul", [p for p, _ in rendered], [h for _, h in rendered]))
            continue
        if s.startswith("|") and s.endswith("|") and markdown:
            # Markdown table: keep the rows as a literal block, minus the separator row.
            rows = []
            while i < n and lines[i].strip().startswith("|"):
                if not re.fullmatch(r"[\s|:\-]+", lines[i].strip()):
                    rows.append(lines[i].strip())
                i += 1
            flush()
            pre("\n".join(rows))
            continue
        para.append(s)
        i += 1
    flush()
    return blocks


def slug(text: str, limit: int = 60) -> str:
    s = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    return s[:limit].strip("-") or "section"
