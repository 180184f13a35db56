"""Benchmark readers: each yields (item id, text) where the text is what a contaminating document would hold.

That is the question with its gold answer, the context with its continuation, the code prompt with its
solution: a page that copies a benchmark copies both halves, and indexing both makes a copy of the whole
item overlap more n-grams than a page that merely shares the question's topic. Template words a page would
not copy ("Question:", "Choices:", lettered option lists, HellaSwag's "[header]") are removed.

Config entries are {name, format, path[, optional]}; paths are relative to the project root (the working
directory stages run in) or absolute.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import re
from pathlib import Path
from typing import Callable, Iterator

Item = tuple[str, str]  # (item id, text to index)


def _open_text(path: Path) -> io.TextIOBase:
    if path.suffix == ".gz":
        return io.TextIOWrapper(gzip.open(path), encoding="utf-8")
    return open(path, encoding="utf-8", newline="")


def _jsonl(path: Path) -> Iterator[tuple[int, dict]]:
    """(row index among non-empty lines, record); the row index is the item id where a set has none."""
    with _open_text(path) as f:
        row = 0
        for line_no, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                yield row, json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{line_no}: not JSON ({e.msg})") from None
            row += 1


def _files(path: Path, pattern: str) -> list[Path]:
    return sorted(path.rglob(pattern)) if path.is_dir() else [path]


# --- original formats -----------------------------------------------------------------------------------

def read_gsm8k(path: Path) -> Iterator[Item]:
    """openai/grade-school-math JSONL {question, answer}; the answer keeps its <<calculator>> annotations
    and "#### n" line, as dataset dumps copy them verbatim (the question alone still overlaps most n-grams)."""
    for row, r in _jsonl(path):
        yield str(row), f"{r['question']}\n{r['answer']}"


def read_humaneval(path: Path) -> Iterator[Item]:
    """openai/human-eval JSONL(.gz) {task_id, prompt, canonical_solution}: the function as it would be
    published, signature and docstring followed by the body."""
    for _, r in _jsonl(path):
        yield r["task_id"], r["prompt"] + r["canonical_solution"]


def read_mmlu_csv(path: Path) -> Iterator[Item]:
    """MMLU CSVs, a file or a folder of them (one per subject). Two layouts: with a header row
    "question,choice0..choice3,answer" and a 0-based integer answer, or the original hendrycks files
    (no header, answer letter A-D). Item id: "<file stem>/<row>", e.g. "anatomy_test/12"."""
    for file in _files(path, "*.csv"):
        with _open_text(file) as f:
            rows = list(csv.reader(f))
        if rows and [c.strip().lower() for c in rows[0][:2]] == ["question", "choice0"]:
            rows = rows[1:]
        for i, r in enumerate(rows):
            if not r:
                continue
            if len(r) < 3:
                raise ValueError(f"{file}: row {i}: expected question, choices, answer")
            question, choices, answer = r[0], r[1:-1], r[-1].strip()
            gold = "ABCDEFGH".index(answer.upper()) if answer.isalpha() else int(answer)
            yield f"{file.stem}/{i}", f"{question}\n{choices[gold]}"


_HS_MARKUP = re.compile(r"\[[a-z]+\]")  # WikiHow contexts carry "[header]", "[title]", "[step]" markers


def read_hellaswag(path: Path) -> Iterator[Item]:
    """rowanz/hellaswag JSONL {ind, ctx, endings, label}: the context and its gold ending."""
    for _, r in _jsonl(path):
        text = f"{r['ctx']} {r['endings'][int(r['label'])]}"
        yield str(r["ind"]), _HS_MARKUP.sub(" ", text)


# --- MosaicML llm-foundry gauntlet (ARC, PIQA, OpenBookQA, SIQA, COPA, CSQA, WinoGrande, WSC, LAMBADA,
#     BoolQ, Jeopardy, TriviaQA, BIG-bench ...): several record shapes, told apart by their keys ----------

_LABEL = re.compile(r"^[ \t]*(?:Question|Context|Passage|Sentence|Choices|Answer)[ \t]*:[ \t]*", re.M)
_OPTION = re.compile(r"^[ \t]*([A-Z])\.[ \t]+(.*?)[ \t]*$", re.M)
_CATEGORY = re.compile(r"^[^:\n]{1,80}:\s")  # Jeopardy: "WORLD HISTORY: This Navy commander ..."


def foundry_text(r: dict) -> str:
    if "context_options" in r:  # WinoGrande, WSC: the gold option completed by the continuation
        return f"{r['context_options'][int(r['gold'])]} {r['continuation']}"
    if "continuation" in r:  # LAMBADA, Jeopardy
        ctx = r["context"]
        if "category" in r:
            m = _CATEGORY.match(ctx)
            if m and m.group(0).upper() == m.group(0):
                ctx = ctx[m.end():]
        return f"{ctx} {r['continuation']}"
    if "answer" in r and "context" in r:  # TriviaQA: "Question: ...?\nAnswer:" + answer
        return f"{_LABEL.sub('', r['context'])} {r['answer']}"
    if "query" in r and "choices" in r:  # multiple choice
        query, answer = r["query"], r["choices"][int(r["gold"])]
        options = dict(_OPTION.findall(query))
        if options and all(len(c) == 1 for c in r["choices"]) and answer in options:
            # CSQA, SIQA, BIG-bench: the choices are letters; the gold text is in the query's option list
            answer = options[answer]
            query = _OPTION.sub("", query)
        return f"{_LABEL.sub('', query)}\n{answer}"
    raise ValueError(f"unrecognised llm-foundry record with keys {sorted(r)}")


def read_llm_foundry(path: Path) -> Iterator[Item]:
    """One llm-foundry local_data JSONL file; item id = row index (the files carry no ids).

    A first line shared by every item is an instruction, not content (BIG-bench: "Given a sentence, select
    the correct language among the choices"): it is dropped so a page holding only the sentence and its
    answer overlaps the whole item.
    """
    items = [(str(row), foundry_text(r)) for row, r in _jsonl(path)]
    firsts = {text.split("\n", 1)[0] for _, text in items}
    if len(items) > 1 and len(firsts) == 1 and all("\n" in text for _, text in items):
        items = [(i, text.split("\n", 1)[1]) for i, text in items]
    yield from items


def read_tokenmill(path: Path) -> Iterator[Item]:
    """tokenmill's own eval items {id, context, choices, gold, source_url}: context and gold choice."""
    for _, r in _jsonl(path):
        yield r["id"], f"{r['context']} {r['choices'][int(r['gold'])]}"


READERS: dict[str, Callable[[Path], Iterator[Item]]] = {
    "gsm8k": read_gsm8k,
    "humaneval": read_humaneval,
    "mmlu_csv": read_mmlu_csv,
    "hellaswag": read_hellaswag,
    "llm_foundry": read_llm_foundry,
    "tokenmill": read_tokenmill,
}


def benchmark_path(spec: dict) -> Path | None:
    """The benchmark's path, or None for a missing optional one; a missing required one fails in one line."""
    name, fmt = spec.get("name"), spec.get("format")
    if not name or fmt not in READERS or not spec.get("path"):
        raise ValueError(f"decontaminate: benchmark entry {spec!r} needs name, path and a format "
                         f"among {sorted(READERS)}")
    path = Path(spec["path"])
    if not path.exists():
        if spec.get("optional"):
            return None
        raise FileNotFoundError(f"decontaminate: benchmark {name!r} ({fmt}): {path} not found "
                                f"(relative paths are read from {Path.cwd()})")
    return path


def read_benchmark(spec: dict) -> Iterator[tuple[str, str, str]]:
    """(benchmark name, item id, text) for one config entry."""
    path = benchmark_path(spec)
    if path is None:
        return
    for item_id, text in READERS[spec["format"]](path):
        yield spec["name"], item_id, text
