"""The code and reference parts, and the held-out evaluation set, from the standard library.

Reference documents are pydoc topics and docstrings of stdlib modules; the evaluation items are cut
from reference documents that are then left out of the corpus, together with the source files they
came from, so that the only overlap between corpus and benchmark is the one that is planted.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from . import sources
from .markup import slug

CODE_URL = "https://stdlib.sample.invalid/"
DOCS_URL = "https://docs-python.sample.invalid/"
TOPICS_SOURCE = "pydoc_data/topics.py"
MAX_CODE_CHARS = 20_000


@dataclass
class CodeDoc:
    path: str  # relative to the stdlib root
    url: str
    text: str
    line: int = 1  # first line of the chunk in the file


@dataclass
class RefDoc:
    url: str
    title: str
    text: str
    source: str  # the stdlib file it came from


# --- code ----------------------------------------------------------------------------------------

_TOP_LEVEL = re.compile(r"(def |async def |class |@|if __name__)")


def split_source(text: str, limit: int = MAX_CODE_CHARS) -> list[tuple[int, int, str]]:
    """(first line, last line, text) chunks of a module, cut at top-level def/class boundaries so that
    chunks stay near `limit` characters; a single oversized definition is cut at blank lines."""
    lines = text.splitlines(keepends=True)
    if len(text) <= limit:
        return [(1, len(lines), text)]
    starts = [0] + [i for i in range(1, len(lines)) if _TOP_LEVEL.match(lines[i]) and not lines[i - 1].startswith("@")]
    pieces = []
    for a, b in zip(starts, starts[1:] + [len(lines)]):
        cur, acc = a, 0
        for i in range(a, b):
            acc += len(lines[i])
            if acc > limit and not lines[i].strip() or acc > 1.25 * limit:  # a blank line, else any line
                pieces.append((cur, i + 1))
                cur, acc = i + 1, 0
        if cur < b:
            pieces.append((cur, b))
    chunks, first, acc = [], 0, 0
    for a, b in pieces:
        size = sum(len(ln) for ln in lines[a:b])
        if acc and acc + size > limit:
            chunks.append((first, a))
            first, acc = a, 0
        acc += size
    chunks.append((first, len(lines)))
    return [(a + 1, b, "".join(lines[a:b])) for a, b in chunks]


def code_stream(stdlib: list[tuple[str, Path]], exclude: set[str], rng: random.Random) -> Iterator[CodeDoc]:
    """Chunks of stdlib modules, module by module in random order; files are read only when reached."""
    files = [(rel, path) for rel, path in stdlib if rel not in exclude]
    rng.shuffle(files)
    for rel, path in files:
        try:
            text = path.read_bytes().decode("utf-8")
        except (OSError, UnicodeDecodeError):
            continue  # a few test files are deliberately in other encodings
        if len(text.strip()) < 200:
            continue
        chunks = split_source(text)
        for a, b, chunk in chunks:
            url = CODE_URL + rel + (f"#L{a}-L{b}" if len(chunks) > 1 else "")
            yield CodeDoc(rel, url, chunk, a)


# --- reference -----------------------------------------------------------------------------------

_TOPIC_UNDERLINE = re.compile(r"^([*=\-~^])\1{2,}$")


def topic_docs(name: str, text: str, min_words: int = 80) -> list[RefDoc]:
    """A pydoc topic split at its section headings; short sections stay with the one before."""
    lines = text.strip("\n").split("\n")
    sections: list[tuple[str, list[str]]] = []
    i = 0
    while i < len(lines):
        if i + 1 < len(lines) and lines[i].strip() and _TOPIC_UNDERLINE.match(lines[i + 1].strip()) and not lines[i].startswith(" "):
            sections.append((lines[i].strip(), [lines[i], lines[i + 1]]))
            i += 2
            continue
        if not sections:
            sections.append((name, []))
        sections[-1][1].append(lines[i])
        i += 1
    merged: list[tuple[str, list[str]]] = []
    for title, body in sections:
        if merged and len(" ".join(body).split()) < min_words:
            merged[-1][1].extend([""] + body)
        else:
            merged.append((title, body))
    docs, seen = [], set()
    for k, (title, body) in enumerate(merged):
        path = f"reference/{name}/" + ("" if k == 0 else f"{slug(title)}/")
        if path in seen:
            path = path[:-1] + f"-{k}/"
        seen.add(path)
        docs.append(RefDoc(DOCS_URL + path, title, "\n".join(body).strip() + "\n", TOPICS_SOURCE))
    return docs


def _module_docs(rel: str, units) -> list[RefDoc]:
    """Reference documents of one module: its docstring, each long function or method docstring on
    its own, and each class with its shorter method docstrings, as an API reference splits them."""
    docs = []

    def add(title: str, parts: list[tuple[str, str]], min_words: int = 40):
        text = f"{title}\n\n" + "\n\n".join((f"{h}\n\n" if h else "") + d for h, d in parts) + "\n"
        if len(text.split()) >= min_words:
            docs.append(RefDoc(f"{DOCS_URL}library/{title}/", title, text, rel))

    for title, anchor, parts in units:
        long = [(h, d) for h, d in parts if h and len(d.split()) >= 50]
        rest = [(h, d) for h, d in parts if (h, d) not in long]
        if not anchor:  # the module unit: the module docstring; short functions are left out
            rest = [(h, d) for h, d in rest if not h]
        for h, d in long:
            add(f"{title}.{h.split('(')[0]}", [(h, d)])
        add(title, rest)
    return docs


def reference_stream(stdlib: list[tuple[str, Path]], rng: random.Random) -> Iterator[RefDoc]:
    """pydoc topics and docstring documents of non-test stdlib modules, topic by topic and module by
    module in random order. Modules are parsed only when reached: small builds parse few of them."""
    topics = sources.pydoc_topics()
    entries: list[tuple] = [("topic", name) for name in topics]
    for rel, path in stdlib:
        module = sources.module_name(rel)
        if module and rel != TOPICS_SOURCE and not sources.is_test_or_vendor(rel):
            entries.append(("module", rel, str(path), module))
    rng.shuffle(entries)
    units = sources.iter_docstring_units([(e[2], e[3]) for e in entries if e[0] == "module"])
    seen: set[str] = set()
    try:
        for e in entries:
            docs = topic_docs(e[1], topics[e[1]]) if e[0] == "topic" else _module_docs(e[1], next(units))
            for d in docs:
                if d.url not in seen:
                    seen.add(d.url)
                    yield d
    finally:
        units.close()


# --- evaluation items ----------------------------------------------------------------------------

_PROSE_WORD = re.compile(r"[(\"'\u201c]?[A-Za-z][A-Za-z'\u2019-]*[.,;:?!)\"'\u201d]*")
_SENTENCE_END = (".", "?", "!")


def prose_paragraphs(text: str, min_words: int = 45) -> list[list[str]]:
    """Word lists of paragraphs that read as running prose: not indented, no code, mostly words."""
    out = []
    for para in re.split(r"\n\s*\n", text):
        lines = para.strip("\n").split("\n")
        if any(ln[:1] in (" ", "\t") or ln.lstrip().startswith((">>>", "*", "-", "|", "+", "...")) for ln in lines):
            continue
        ws = para.split()
        if len(ws) >= min_words and sum(bool(_PROSE_WORD.fullmatch(w)) for w in ws) >= 0.85 * len(ws):
            out.append(ws)
    return out


def cut_item(ws: list[str], rng: random.Random) -> tuple[str, str] | None:
    """(context, continuation): a passage prefix of >= 20 words starting at a sentence, and the true
    next 15-30 words, ending at a sentence end where one falls in that range."""
    starts = [0] + [i for i in range(1, len(ws)) if ws[i - 1].endswith(_SENTENCE_END) and ws[i][:1].isupper()]
    rng.shuffle(starts)
    for s in starts:
        ends = [j + 1 for j in range(s + 19, min(len(ws), s + 50)) if ws[j].endswith(_SENTENCE_END)]
        c = ends[0] if ends else s + 24
        if len(ws) - c < 15:
            continue
        cont = [j + 1 for j in range(c + 14, min(len(ws), c + 30)) if ws[j].endswith(_SENTENCE_END)]
        e = cont[0] if cont else min(len(ws), c + rng.randint(15, 30))
        return " ".join(ws[s:c]), " ".join(ws[c:e])
    return None


def cut_document(doc: RefDoc, rng: random.Random) -> tuple[str, str] | None:
    """(context, continuation) from one of the document's prose paragraphs, or None."""
    paras = prose_paragraphs(doc.text)
    return cut_item(rng.choice(paras), rng) if paras else None


def make_items(cuts: list[tuple[RefDoc, tuple[str, str]]], rng: random.Random) -> list[dict]:
    """Multiple-choice items, numbered in URL order of their documents.

    Distractors are the true continuations of other items: fluent text from the same kind of source,
    so only a model that knows the passage can tell which one follows.
    """
    cuts = sorted(cuts, key=lambda c: c[0].url)
    items = []
    for k, (doc, (context, gold)) in enumerate(cuts):
        others = sorted({c[1][1] for j, c in enumerate(cuts) if j != k} - {gold})
        distractors = rng.sample(others, min(3, len(others)))
        answer = rng.randrange(len(distractors) + 1)
        choices = distractors[:answer] + [gold] + distractors[answer:]
        items.append({"id": f"tm-eval-{k + 1:04d}", "context": context, "choices": choices, "gold": answer, "source_url": doc.url})
    return items
