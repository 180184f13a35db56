"""Raw material for the sample corpus, read from the Python installation the build runs in.

Everything here returns sorted, deterministic results: the same installation gives the same material.
Source files are parsed with `ast` or scanned as text, never imported, so no package code runs during a build.
"""

from __future__ import annotations

import ast
import bisect
import csv
import email.utils
import html
import importlib.metadata
import inspect
import os
import re
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

# The distributions the corpus is written from: a fixed list, not whatever is installed (the list's header
# says why). The project itself, the test runner's worker plugin and its transport, and the linter are not on it
# (the project's README changes with every commit; installing pytest-xdist beside the rest once moved the
# quality classifier's held-out separation from above 0.2 to 0.19 on the e2e build).
CORPUS_DISTRIBUTIONS = Path(__file__).with_name("distributions.txt")

# Vendored copies of other packages would make accidental near-duplicate pages across sites.
_VENDOR_PARTS = {
    "_vendor", "vendor", "vendored", "_vendored", "thirdparty_files", "third_party", "_externals",
    "externals", "extern", "_extern",
}
_TEST_PARTS = {"test", "tests", "testing", "_tests", "idle_test", "test_data", "testdata"}
_MAX_SOURCE_BYTES = 300_000  # bigger files cost seconds to parse and are mostly generated tables


def normalise_name(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass
class Dist:
    name: str  # normalised distribution name: the site's host label
    display: str
    summary: str
    description: str
    markdown: bool
    emails: list[str]
    links: list[tuple[str, str]]  # (label, url) from Project-URL / Home-page
    root: Path  # RECORD paths are relative to this
    files: list[str] = field(default_factory=list)


def _description(meta) -> str:
    text = meta.get_payload() if hasattr(meta, "get_payload") else ""
    if not (text or "").strip():
        text = meta.get("Description") or ""
        # Metadata 1.x folds the header: continuation lines start with 8 spaces or "       |".
        lines = text.splitlines()
        text = "\n".join(lines[:1] + [re.sub(r"^(?: {8}|       \|)", "", ln) for ln in lines[1:]])
    return text if text.strip() and text.strip() != "UNKNOWN" else ""


def _is_markdown(meta, text: str) -> bool:
    ctype = (meta.get("Description-Content-Type") or "").lower()
    if "rst" in ctype:
        return False
    if "markdown" in ctype:
        return True
    return bool(re.search(r"^#{1,6} \S", text, re.M) or "```" in text)


def _record_paths(d) -> list[str]:
    """The installed files of a distribution, relative to its root, sorted. Reads RECORD directly:
    Distribution.files builds a pathlib object per file, which costs seconds over a large install."""
    record = d.read_text("RECORD")
    if record is None:
        return sorted(str(f) for f in (d.files or []))
    return sorted({row[0] for row in csv.reader(record.splitlines()) if row})


def corpus_names() -> list[str]:
    return [line.strip() for line in CORPUS_DISTRIBUTIONS.read_text().splitlines()
            if line.strip() and not line.startswith("#")]


def distributions() -> list[Dist]:
    """The installed distributions named in distributions.txt, one per normalised name, sorted by name."""
    wanted = set(corpus_names())
    found: dict[str, list] = {}
    for d in importlib.metadata.distributions():
        meta = d.metadata  # parsed on every access: keep it
        name = meta["Name"]
        if not name or normalise_name(name) not in wanted:
            continue
        found.setdefault(normalise_name(name), []).append((str(d.locate_file("")), d, meta))
    missing = sorted(wanted - set(found))
    if missing:
        raise FileNotFoundError(f"the sample corpus is written from the distributions listed in "
                                f"{CORPUS_DISTRIBUTIONS.name}; not installed: {', '.join(missing)} (`make install` "
                                f"installs them)")
    out = []
    for name in sorted(found):
        # Duplicates (the same package on two sys.path entries): take the first by location.
        root, d, meta = min(found[name], key=lambda x: x[0])
        desc = _description(meta)
        people = (meta.get_all("Author-email") or []) + (meta.get_all("Maintainer-email") or [])
        emails = sorted({a for _, a in email.utils.getaddresses(people) if re.fullmatch(r"[^@\s]+@[\w-]+(\.[\w-]+)+", a)})
        links = []
        for entry in meta.get_all("Project-URL") or []:
            label, _, url = entry.partition(",")
            if url.strip().startswith("http"):
                links.append((label.strip(), url.strip()))
        if meta.get("Home-page", "").startswith("http"):
            links.insert(0, ("Homepage", meta["Home-page"]))
        out.append(
            Dist(
                name=name,
                display=meta["Name"],
                summary=(meta.get("Summary") or "").strip(),
                description=desc,
                markdown=_is_markdown(meta, desc),
                emails=emails,
                links=links[:6],
                root=Path(root),
                files=_record_paths(d),
            )
        )
    return out


# --- docstrings ----------------------------------------------------------------------------------


def module_name(relpath: str) -> str | None:
    """Dotted module name of a source file path, or None if it is not importable by that name."""
    parts = relpath[:-3].split("/")
    if parts[-1] == "__init__":
        parts = parts[:-1]
    if not parts or not all(p.isidentifier() for p in parts):
        return None
    return ".".join(parts)


def is_test_or_vendor(relpath: str) -> bool:
    parts = relpath.split("/")
    return bool(set(parts[:-1]) & (_VENDOR_PARTS | _TEST_PARTS)) or parts[-1].startswith(("test_", "conftest"))


def _signature(node) -> str:
    try:
        args = ast.unparse(node.args)
    except Exception:  # pragma: no cover - ast.unparse handles all parsed trees
        args = "..."
    return f"{node.name}({args if len(args) <= 80 else args[:77] + '...'})"


def docstring_units(path: str, module: str) -> list[tuple[str, str, list[tuple[str, str]]]]:
    """Docstrings of one module as documentation units: (title, anchor, [(heading, docstring)]).

    One unit for the module docstring plus its public functions, one per public class (class docstring
    plus its public methods' docstrings).
    """
    try:
        src = Path(path).read_bytes()
        if len(src) > _MAX_SOURCE_BYTES or b'"""' not in src and b"'''" not in src:
            return []
        tree = ast.parse(src)
    except (OSError, SyntaxError, ValueError):
        return []
    funcs, classes = [], []
    doc = ast.get_docstring(tree)
    if doc:
        funcs.append(("", doc))
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not node.name.startswith("_"):
            doc = ast.get_docstring(node)
            if doc:
                funcs.append((_signature(node), doc))
        elif isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
            parts = []
            doc = ast.get_docstring(node)
            if doc:
                parts.append(("", doc))
            for sub in node.body:
                if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef)) and (
                    not sub.name.startswith("_") or sub.name == "__init__"
                ):
                    doc = ast.get_docstring(sub)
                    if doc:
                        parts.append((_signature(sub), doc))
            if parts:
                classes.append((f"{module}.{node.name}", node.name, parts))
    return ([(module, "", funcs)] if funcs else []) + classes


# A regular-expression reader for the same units, about five times faster than ast.parse: the crawl
# needs the docstrings of thousands of site-packages modules, where an occasional miss is harmless.
_HEADER = re.compile(r"^([ \t]*)(?:async[ \t]+)?(def|class)[ \t]+(\w+)", re.M)
_DOC_AFTER_HEADER = re.compile(r"[ \t]*(?:#[^\n]*)?\n(?:[ \t]*(?:#[^\n]*)?\n)*[ \t]*[rRuU]?(\"\"\"|\'\'\'|\"|\')")
_MODULE_DOC = re.compile(r"\A\ufeff?(?:[ \t]*(?:#[^\n]*)?\n)*[ \t]*[rRuU]?(\"\"\"|\'\'\'|\"|\')")
_TOP_STATEMENT = re.compile(r"^[^\s#)\]}\'\"]", re.M)


def _header_end(text: str, i: int) -> int:
    """Index of the colon ending a def/class header that continues at i, or -1."""
    eol = text.find("\n", i)
    line = text[i:eol] if eol >= 0 else text[i:]
    if line.endswith(":") and not any(q in line for q in "#'\"") and line.count("(") == line.count(")"):
        return i + len(line) - 1  # the common one-line header
    depth, n = 0, len(text)
    while i < n:
        c = text[i]
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == ":" and depth == 0:
            return i
        elif c in "\'\"":  # skip a one-line string literal (a default value)
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            i = j
        elif c == "#":
            i = text.find("\n", i)
            if i < 0:
                return -1
            continue
        elif c == "\n" and depth == 0 and text[i - 1] != "\\":
            return -1
        i += 1
    return -1


def _string_at(text: str, m) -> str | None:
    """The cleaned text of the string literal whose opening quote the match ends on."""
    q, start = m.group(1), m.end()
    end = text.find(q, start)
    while end > 0 and text[end - 1] == "\\":
        end = text.find(q, end + 1)
    if end < 0 or len(q) == 1 and "\n" in text[start:end]:
        return None
    return inspect.cleandoc(text[start:end]) or None


def fast_docstring_units(text: str, module: str) -> list[tuple[str, str, list[tuple[str, str]]]]:
    """docstring_units from source text without parsing it. Methods are the defs at the class body's
    indentation before the next top-level statement; escape sequences are left as written."""
    funcs, classes = [], []
    m = _MODULE_DOC.match(text)
    doc = _string_at(text, m) if m else None
    if doc:
        funcs.append(("", doc))
    tops: list[int] | None = None  # starts of top-level statements, found when first needed
    cls = None  # [parts, body indentation, end of the class header]
    for h in _HEADER.finditer(text):
        kind, name, indent = h.group(2), h.group(3), len(h.group(1).expandtabs(4))
        public = not name.startswith("_") or name == "__init__"
        # Decide whether the header matters before the (slower) search for its end and docstring.
        if indent == 0:
            cls = None
            if kind == "def" and not public:
                continue
        else:
            if cls is None:
                continue  # a nested function
            if tops is None:
                tops = [t.start() for t in _TOP_STATEMENT.finditer(text)]
            k = bisect.bisect_right(tops, cls[2])
            if k < len(tops) and tops[k] < h.start():  # a top-level statement ended the class
                cls = None
                continue
            if cls[1] is None:
                cls[1] = indent
            if indent != cls[1] or kind != "def" or not public:
                continue
        end = _header_end(text, h.end())
        if end < 0:
            continue
        m = _DOC_AFTER_HEADER.match(text, end + 1)
        doc = _string_at(text, m) if m else None
        sig = " ".join(text[h.start(3) : end].split())
        sig = sig if len(sig) <= 90 else sig[:87] + "..."
        if indent == 0 and kind == "class":
            cls = [[("", doc)] if doc else [], None, end]
            if not name.startswith("_"):
                classes.append((f"{module}.{name}", name, cls[0]))
        elif doc and indent == 0:
            funcs.append((sig, doc))
        elif doc:
            cls[0].append((sig, doc))
    return ([(module, "", funcs)] if funcs else []) + [c for c in classes if c[2]]


def iter_docstring_units(jobs: list[tuple[str, str]], fast: bool = False) -> Iterator[list]:
    """Units of each (path, module) job, in order; stop iterating to skip the remaining files."""
    for path, module in jobs:
        if not fast:
            yield docstring_units(path, module)
            continue
        try:
            raw = Path(path).read_bytes()
            yield fast_docstring_units(raw.decode("utf-8"), module) if len(raw) <= _MAX_SOURCE_BYTES else []
        except (OSError, UnicodeDecodeError):
            yield []


def api_source_files(dists: list[Dist]) -> list[tuple[str, str, str]]:
    """(dist name, absolute path, module) of every non-test, non-vendored module of every distribution."""
    out = []
    for d in dists:
        for rel in d.files:
            if not rel.endswith(".py") or rel.startswith("..") or is_test_or_vendor(rel):
                continue
            module = module_name(rel)
            if module:
                out.append((d.name, os.path.join(d.root, rel), module))
    return out


# --- standard library ----------------------------------------------------------------------------


def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def stdlib_sources() -> list[tuple[str, Path]]:
    """(relative path, path) of the standard library's .py files, sorted; site-packages excluded."""
    root = stdlib_root()
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in ("site-packages", "__pycache__") and not d.startswith("."))
        for f in sorted(filenames):
            if f.endswith(".py"):
                p = Path(dirpath) / f
                out.append((p.relative_to(root).as_posix(), p))
    return sorted(out)


def pydoc_topics() -> dict[str, str]:
    try:
        from pydoc_data.topics import topics  # a plain dict literal: importing it runs nothing else
    except ImportError:  # pragma: no cover - some distributions strip pydoc_data
        return {}
    return {k: topics[k] for k in sorted(topics)}


# --- licences ------------------------------------------------------------------------------------

_LICENCE_FILE = re.compile(r"^(licen[cs]e|copying|notice)", re.I)
_LICENCE_WORD = re.compile(r"licen[cs]e|copying|notice", re.I)


def licence_files(dists: list[Dist]) -> list[tuple[str, str]]:
    """(file name, text) of licence texts shipped in dist-info folders, sorted by name."""
    out: dict[str, str] = {}
    for d in dists:
        for rel in d.files:
            parts = rel.split("/")
            if len(parts) < 2 or not parts[0].endswith(".dist-info"):
                continue
            in_dir = parts[1].lower() in ("licenses", "licences", "license_files")
            # Licence folders also hold AUTHORS and the like: the file name must name a licence too.
            if not (_LICENCE_FILE.match(parts[-1]) or in_dir and _LICENCE_WORD.search(parts[-1])):
                continue
            try:
                raw = (d.root / rel).read_bytes()
                text = raw.decode("utf-8")
            except (OSError, UnicodeDecodeError):
                continue
            if len(text.strip()) < 200 or len(raw) > 200_000:
                continue
            stem = "_".join(parts[2:] if in_dir else parts[1:])
            stem = re.sub(r"\.(txt|md|rst)$", "", stem, flags=re.I)
            name = re.sub(r"[^A-Za-z0-9._-]+", "_", f"{d.name}--{stem}")
            out.setdefault(name, text)
    return sorted(out.items())


# --- non-English text ----------------------------------------------------------------------------


def _yaml_load(path: Path):
    import yaml  # installed with lm-eval; only needed for the multilingual task files

    class Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
        pass

    # Task files use tags such as "!function utils.process"; their values are irrelevant here.
    Loader.add_multi_constructor("", lambda loader, suffix, node: None)
    with open(path, encoding="utf-8") as fh:
        return yaml.load(fh, Loader=Loader)


def foreign_sources(dists: list[Dist]) -> list[tuple[str, str]]:
    """(ISO 639-1 language, file) of lm-eval task files holding real non-English prose, sorted:
    translated MMLU few-shot questions (llama3/instruct/mmlu_{de,es,fr,hi,it,pt,th}) and Korean KMMLU
    chain-of-thought explanations (kmmlu/cot_hard). Listing is cheap; parse only the ones you use."""
    lm_eval = next((d for d in dists if d.name == "lm-eval"), None)
    out = []
    for rel in lm_eval.files if lm_eval else []:
        m = re.fullmatch(r"lm_eval/tasks/llama3/instruct/mmlu_([a-z]{2})/[\w-]+\.yaml", rel)
        if m:
            out.append((m.group(1), rel))
        elif re.fullmatch(r"lm_eval/tasks/kmmlu/cot_hard/[\w-]+\.yaml", rel):
            out.append(("ko", rel))
    return sorted(out)


def foreign_document(dists: list[Dist], language: str, rel: str) -> dict | None:
    """{"language", "source", "title", "paragraphs": [(kind, text or [items])]} of one task file's
    few-shot examples, or None if the file holds too little text."""
    lm_eval = next(d for d in dists if d.name == "lm-eval")
    try:
        samples = _yaml_load(lm_eval.root / rel)["fewshot_config"]["samples"]
    except Exception:
        return None
    paras = []
    for s in samples or []:
        if "input_question" in s:  # llama3/instruct MMLU translations
            q, choices, extra = s.get("input_question"), s.get("input_choice_list") or {}, None
        else:  # KMMLU: question, A-D, and a written explanation
            q, choices, extra = s.get("question"), {c: s.get(c) for c in "ABCD"}, s.get("target")
        if not q:
            continue
        paras.append(("p", html.unescape(" ".join(str(q).split()))))
        items = [html.unescape(" ".join(str(choices[c]).split())) for c in sorted(choices) if choices[c]]
        if items:
            paras.append(("ol", items))
        if extra:
            paras.append(("p", html.unescape(" ".join(str(extra).split()))))
    text = " ".join(t if isinstance(t, str) else " ".join(t) for _, t in paras)
    if len(text) < 400:
        return None
    title = " ".join(paras[0][1].split()[:8]).rstrip(",.:;?")
    return {"language": language, "source": rel, "title": title, "paragraphs": paras}


# Used only when lm-eval's task files are missing: short real sentences, written for this purpose.
FALLBACK_FOREIGN = [
    {"language": "de", "source": "builtin", "title": "Über diese Seite", "paragraphs": [("p",
        "Diese Seite beschreibt, wie die Bibliothek installiert und verwendet wird. Bitte lesen Sie die "
        "Hinweise sorgfältig, bevor Sie Änderungen an der Konfiguration vornehmen. Bei Fragen wenden Sie "
        "sich an die Entwickler, die gerne weiterhelfen. Die Dokumentation wird regelmäßig aktualisiert "
        "und enthält viele Beispiele für den täglichen Gebrauch.")]},
    {"language": "fr", "source": "builtin", "title": "À propos de ce projet", "paragraphs": [("p",
        "Ce projet fournit des outils simples pour analyser des fichiers de texte. Avant de commencer, "
        "vérifiez que votre environnement contient toutes les dépendances nécessaires. La documentation "
        "explique chaque étape avec des exemples, et les contributeurs répondent volontiers aux questions "
        "posées sur le forum de la communauté.")]},
    {"language": "es", "source": "builtin", "title": "Acerca de esta biblioteca", "paragraphs": [("p",
        "Esta biblioteca permite leer y escribir archivos de datos de manera sencilla. Antes de instalarla, "
        "compruebe que tiene una versión reciente del intérprete. La guía de usuario contiene ejemplos "
        "prácticos y explica cómo resolver los problemas más comunes que aparecen durante la instalación.")]},
]


def japanese_text(dists: list[Dist]) -> tuple[str, str]:
    """(source, Japanese prose) from an lm-eval MMLU-ProX Japanese task description."""
    lm_eval = next((d for d in dists if d.name == "lm-eval"), None)
    sentences: list[str] = []
    if lm_eval is not None:
        for rel in lm_eval.files:
            if re.fullmatch(r"lm_eval/tasks/mmlu_prox/ja/mmlu_prox_ja_[\w]+\.yaml", rel):
                try:
                    desc = _yaml_load(lm_eval.root / rel).get("description") or ""
                except Exception:
                    continue
                desc = " ".join(desc.split())
                if desc and desc not in sentences:
                    sentences.append(desc)
            if sentences:
                break
    good = []
    for s in sentences:
        try:
            s.encode("shift_jis")
            good.append(s)
        except UnicodeEncodeError:
            continue
    if good:
        return "lm_eval/tasks/mmlu_prox/ja", good[0]
    return "builtin", "この文章は文字コードの確認のために書かれました。日本語の文字が正しく表示されることを確かめてください。"
