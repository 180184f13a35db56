"""Benchmark files -> lm-eval task folders (a JSONL of normalised documents and a YAML beside it).

Each configured benchmark ({name, format, path[, optional]}, the decontaminate stage's entries) is read in the
format decontaminate reads, and every record becomes one document carrying `item_id` =
tokenmill.decontam.readers.item_id(name, record): the name the contamination table gives the same item.
Identical records are one item (item_id says so) and are scored once.

Kinds, with lm-eval's standard prompts where it has the benchmark:
  multiple_choice  query + " " + each choice (acc, acc_norm): tokenmill held-out set (context, choices);
                   HellaSwag (lm-eval's preprocessing: "label: ctx_a Ctx_b", [header] markup removed); MMLU
                   (question, lettered options, "Answer:", the letters as choices); llm-foundry ARC, PIQA,
                   OpenBookQA, SIQA, COPA, CommonsenseQA, BoolQ, BIG-bench ("Question: ...\\nAnswer:" when the
                   record has a Question label and no Answer label yet).
  multiple_input   each option completed by one shared continuation (acc): WinoGrande, WSC.
  loglikelihood    context + " " + continuation (acc = greedy match, perplexity): LAMBADA, Jeopardy.
Generation benchmarks (GSM8K, HumanEval, TriviaQA) are not scored here: they are reported as skipped with
the reason, never silently left out.

The YAMLs name fields of the JSONL (doc_to_text: query ...), so no template ever renders benchmark text, and
`dataset_kwargs.cache_dir` keeps the datasets cache inside the run's temporary folder (nothing outside it is
read or written; the stage runs with HF_DATASETS_OFFLINE=1).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from tokenmill.decontam.readers import _jsonl, benchmark_path, item_id, read_mmlu_csv

GENERATIVE = {"gsm8k": "generation benchmark (exact-match of a worked answer)",
              "humaneval": "generation benchmark (code execution)"}


class BenchmarkError(ValueError):
    """A benchmark file that cannot be evaluated; the message names the file and the record."""


@dataclass
class Benchmark:
    name: str
    format: str
    kind: str | None  # multiple_choice | multiple_input | loglikelihood; None when skipped
    docs: list[dict] = field(default_factory=list)
    duplicates: int = 0  # records repeating an earlier item_id (identical records: one item)
    skipped: str | None = None  # why it is not scored
    dropped: dict[str, list[str]] = field(default_factory=dict)  # reason -> item_ids not scored


def answers(kind: str, doc: dict) -> list[str]:
    """The continuations lm-eval scores for one document (each after the target delimiter)."""
    if kind == "multiple_choice":
        return list(doc["choices"])
    return [doc["continuation"]]


def drop_overlong(bench: Benchmark, count_tokens, max_length: int) -> None:
    """Set aside items with a continuation of max_length tokens or more: lm-eval left-truncates contexts but
    stops the whole run (an assertion) on a continuation that does not fit the model's context. They are
    listed under dropped["continuation_longer_than_context"], not scored."""
    keep, over = [], []
    for doc in bench.docs:
        longest = max(count_tokens(" " + a) for a in answers(bench.kind, doc))
        (over if longest >= max_length else keep).append(doc)
    if over:
        bench.docs = keep
        bench.dropped["continuation_longer_than_context"] = [d["item_id"] for d in over]


# --- one document per record, by format ----------------------------------------------------------------

_HS_BRACKETS = re.compile(r"\[.*?\]")


def _hellaswag_clean(text: str) -> str:
    """lm-eval's hellaswag preprocess: WikiHow markup out, double spaces collapsed."""
    text = text.strip().replace(" [title]", ". ")
    return _HS_BRACKETS.sub("", text).replace("  ", " ")


def _hellaswag(path: Path) -> Iterator[tuple[dict, dict]]:
    for _, r in _jsonl(path):
        ctx = r["ctx_a"] + " " + r["ctx_b"].capitalize()
        yield r, {"query": _hellaswag_clean(r["activity_label"] + ": " + ctx),
                  "choices": [_hellaswag_clean(e) for e in r["endings"]], "gold": int(r["label"])}


def _tokenmill(path: Path) -> Iterator[tuple[dict, dict]]:
    for _, r in _jsonl(path):
        yield r, {"query": r["context"], "choices": list(r["choices"]), "gold": int(r["gold"])}


def _olmes(path: Path) -> Iterator[tuple[dict, str, dict]]:
    """OLMES cloze items (tokenmill.benchmarks): the context exactly as OLMES renders it, each choice after a
    space; WinoGrande's options change the context and share the continuation."""
    for _, r in _jsonl(path):
        if "contexts" in r:
            yield r, "multiple_input", {"contexts": list(r["contexts"]), "continuation": r["continuation"],
                                        "gold": int(r["gold"])}
        else:
            yield r, "multiple_choice", {"query": r["context"], "choices": list(r["choices"]), "gold": int(r["gold"])}


def _mmlu(path: Path) -> Iterator[tuple[dict, dict]]:
    for r, _, _ in read_mmlu_csv(path):
        letters = "ABCDEFGH"[:len(r["choices"])]
        subject = r["subject"].replace("_", " ")
        options = "".join(f"\n{letter}. {c}" for letter, c in zip(letters, r["choices"]))
        query = (f"The following are multiple choice questions (with answers) about {subject}.\n\n"
                 f"{r['question'].strip()}{options}\nAnswer:")
        yield r, {"query": query, "choices": list(letters), "gold": int(r["answer"])}


_QUESTION = re.compile(r"^[ \t]*Question[ \t]*:", re.M)
_ANSWER = re.compile(r"Answer[ \t]*:[ \t]*$")


def foundry_doc(r: dict) -> tuple[str, dict] | tuple[None, str]:
    """(kind, document) of one llm-foundry record, or (None, reason) for a generation record."""
    if "context_options" in r:
        return "multiple_input", {"contexts": list(r["context_options"]), "continuation": r["continuation"],
                                  "gold": int(r["gold"])}
    if "continuation" in r:
        return "loglikelihood", {"context": r["context"], "continuation": r["continuation"]}
    if "query" in r and "choices" in r:
        query = r["query"].rstrip()
        if _QUESTION.search(query) and not _ANSWER.search(query):
            query += "\nAnswer:"
        return "multiple_choice", {"query": query, "choices": list(r["choices"]), "gold": int(r["gold"])}
    if "answer" in r and "context" in r:
        return None, "generation benchmark (open answer with aliases)"
    raise BenchmarkError(f"unrecognised llm-foundry record with keys {sorted(r)}")


def load_benchmark(spec: dict, limit: int | None = None) -> Benchmark | None:
    """The benchmark's documents (the first `limit` items of the file when given), or None for a missing
    optional file. Every document has item_id; its gold index is checked against its choices."""
    path = benchmark_path(spec)  # one line for a bad entry or a missing required file
    if path is None:
        return None
    name, fmt = spec["name"], spec["format"]
    if fmt in GENERATIVE:
        return Benchmark(name, fmt, None, skipped=GENERATIVE[fmt])
    if fmt == "tokenmill":
        pairs = ((r, "multiple_choice", d) for r, d in _tokenmill(path))
    elif fmt == "hellaswag":
        pairs = ((r, "multiple_choice", d) for r, d in _hellaswag(path))
    elif fmt == "mmlu_csv":
        pairs = ((r, "multiple_choice", d) for r, d in _mmlu(path))
    elif fmt == "olmes":
        pairs = _olmes(path)
    elif fmt == "llm_foundry":
        pairs = ((r, *foundry_doc(r)) for _, r in _jsonl(path))
    else:
        raise BenchmarkError(f"evaluate: benchmark {name!r}: no evaluation for format {fmt!r}")
    bench = Benchmark(name, fmt, None)
    seen: set[str] = set()
    for n, (record, kind, doc) in enumerate(pairs):
        if kind is None:
            return Benchmark(name, fmt, None, skipped=doc)
        if bench.kind not in (None, kind):
            raise BenchmarkError(f"evaluate: {path}: record {n} is {kind}, earlier ones {bench.kind}")
        bench.kind = kind
        iid = item_id(name, record)
        if iid in seen:
            bench.duplicates += 1
            continue
        options = doc.get("choices", doc.get("contexts"))
        if options is not None and not 0 <= doc["gold"] < len(options):
            raise BenchmarkError(f"evaluate: {path}: item {iid}: gold {doc['gold']} outside its "
                                 f"{len(options)} choices")
        if limit is not None and len(bench.docs) >= limit:
            break
        seen.add(iid)
        bench.docs.append({"item_id": iid, **doc})
    if not bench.docs:
        raise BenchmarkError(f"evaluate: benchmark {name!r}: {path} holds no items")
    return bench


# --- lm-eval task folders --------------------------------------------------------------------------------

FIELDS = {  # kind -> (doc_to_text, doc_to_target, doc_to_choice, metrics)
    "multiple_choice": ("query", "gold", "choices", ["acc", "acc_norm"]),
    # doc_to_text is the gold index: lm-eval then puts each choice in the context (WinoGrande's layout).
    "multiple_input": ("gold", "continuation", "contexts", ["acc"]),
    "loglikelihood": ("context", "continuation", None, ["acc", "perplexity"]),
    "loglikelihood_rolling": ("", "text", None, ["word_perplexity", "byte_perplexity", "bits_per_byte"]),
}
AGGREGATION = {"acc": "mean", "acc_norm": "mean", "perplexity": "perplexity",
               "word_perplexity": "weighted_perplexity", "byte_perplexity": "weighted_perplexity",
               "bits_per_byte": "bits_per_byte"}


def task_name(prefix: str, name: str, taken: set[str]) -> str:
    """An lm-eval task name (letters, digits, underscores) unique among `taken`."""
    base = prefix + re.sub(r"[^A-Za-z0-9_]", "_", name)
    out, k = base, 1
    while out in taken:
        k += 1
        out = f"{base}_{k}"
    taken.add(out)
    return out


def write_task(root: Path, task: str, kind: str, docs: list[dict]) -> None:
    """root/<task>/<task>.jsonl and <task>.yaml: the documents and an lm-eval task reading them offline."""
    folder = root / task
    folder.mkdir(parents=True)
    data = folder / f"{task}.jsonl"
    with open(data, "w", encoding="utf-8") as f:
        for doc in docs:
            f.write(json.dumps(doc, ensure_ascii=False) + "\n")
    text, target, choice, metrics = FIELDS[kind]
    config: dict[str, Any] = {
        "task": task,
        "dataset_path": "json",
        "dataset_kwargs": {"data_files": {"test": str(data)}, "cache_dir": str(root / ".datasets")},
        "test_split": "test",
        "output_type": "multiple_choice" if kind == "multiple_input" else kind,
        "doc_to_text": text,
        "doc_to_target": target,
        "target_delimiter": " ",
        "num_fewshot": 0,
        "metric_list": [{"metric": m, "aggregation": AGGREGATION[m],
                         "higher_is_better": m in ("acc", "acc_norm")} for m in metrics],
        "metadata": {"version": 1.0},
    }
    if choice is not None:
        config["doc_to_choice"] = choice
    # JSON is YAML: no YAML library needed, and no quoting surprises.
    (folder / f"{task}.yaml").write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n")
