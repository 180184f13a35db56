"""Curation stages on real documents: documents per second per core, and datatrove side by side.

    python benchmarks/bench_stages.py [--repeat N] [--wait-quiet S] [--datatrove-python PATH] [--no-dedup]
                                      [--dedup-workers N] [--out FILE] [--keep]
    python benchmarks/bench_stages.py --report-from /tmp/bench_stages_XXXX/results.json [--out FILE]

One run, one workload, in a temporary directory (stages write data/ and metrics/ relative to the working
directory, so every subprocess runs there):

1. Workload. The real crawl files ../shared/data/warc/*.warc.gz (one `warc` source) and
   ../shared/data/cc_jsonl/*.jsonl.gz (`jsonl`, url from metadata.url), plus WikiText-2 (raw test split,
   articles cut into ~3,000-character pieces at paragraph boundaries), Gutenberg (30 evenly spaced
   ~5,000-character pieces of each of the 43 English books, 10 of each of the 9 French ones) and ABC news
   (400 evenly spaced stories from each of rural and science), all read in place and written as JSONL into
   the temporary directory, then ingested with tokenmill's ingest stage into Parquet document shards.
2. tokenmill stages, each on the previous stage's output, with execution {backend: local, workers: 1}
   (inline: per-core figures): filter, pii, dedup, quality, decontaminate. Parameters: params.yaml's sections,
   with three changes that the workload needs: filter.licences.allow lists the workload's licences;
   quality.positives.sources = [wikitext, gutenberg] (negatives: the web bucket); decontaminate.benchmarks =
   GSM8K test, MMLU test and the HellaSwag validation subset. The filter stage runs in two configurations:
   - equal work (the rows compared with datatrove; 1 and 2 workers): filter.buckets = {} so every rule group
     runs on every document whatever its bucket (the shipped params switch C4 and FineWeb off for `books`,
     the Gutenberg pieces), and filter.language.max_chars = WHOLE_TEXT_CHARS so language ID reads the whole
     text, as datatrove's LanguageFilter does (the shipped params read the first 3,000 characters); output
     under data_equal/;
   - shipped defaults (params.yaml as it is; 1 worker): its output is what pii and the later stages read.
3. datatrove (a separate interpreter, --datatrove-python, that has datatrove installed; tokenmill's
   virtualenv never imports it; default /tmp/dtvenv: `python3 -m venv /tmp/dtvenv && /tmp/dtvenv/bin/pip install
   datatrove regex tokenizers "xxhash<4" pyarrow fasttext-numpy2-wheel tldextract pyahocorasick fasteners
   orjson`; xxhash 4 breaks datatrove's MinHash) on the same documents, exported to JSONL: URLFilter,
   LanguageFilter (lid.176, the fastText model file tokenmill itself loads), GopherRepetitionFilter,
   GopherQualityFilter, C4QualityFilter, FineWebQualityFilter in one LocalPipelineExecutor run (1 task,
   1 worker), with tokenmill's thresholds where a parameter maps; and PIIFormatter on the pii stage's input.
4. The same filters and PII code in memory, without reading or writing (documents already loaded), so the
   per-document cost can be compared apart from Parquet vs JSONL I/O: tokenmill's FilterProcessor in both
   configurations; datatrove's filters twice, stopping at the first failing filter (as its pipeline does) and
   calling every filter on every document (each datatrove filter still returns at its own first failing check).
5. dedup side by side (unless --no-dedup): bench_dedup.py's datatrove comparison (its section 4:
   bench_dedup.bench_datatrove, tokenmill's dedup stage vs datatrove's four MinHash steps on ~38k Gutenberg
   paragraphs with planted copies), run in a child of this invocation with --dedup-workers workers each.

Every configuration runs in a fresh subprocess (this script with --child NAME); wall and CPU seconds
(process and children, user + system) and peak RSS (ru_maxrss) are measured there. Prints the Markdown
section "## Curation stages: documents per second per core"; --out FILE also writes it into FILE,
replacing an older copy of that section (everything from its heading to the next "## " heading). The run's
numbers are saved as results.json in the temporary directory (--keep keeps it; --report-from rewrites the
section from it without measuring again).
"""

from __future__ import annotations

import argparse
from collections import Counter
import datetime as dt
import glob
import gzip
import importlib.util
import json
import os
import re
import resource
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchlib import machine, peak_rss_mb, write_section

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / ".." / "shared" / "data"
SECTION = "## Curation stages: documents per second per core"
DEFAULT_DT_PYTHON = "/tmp/dtvenv/bin/python"

# Source name -> (bucket, licence). params.yaml's filter.buckets switches C4 and FineWeb off for `books`; the
# equal-work filter configuration (equal_work_filter) empties filter.buckets so every group runs everywhere.
SOURCES = {
    "web_warc": ("web", "crawl-various"),
    "web_cc": ("web", "odc-by"),
    "wikitext": ("wiki", "cc-by-sa-3.0"),
    "gutenberg": ("books", "public-domain"),
    "gutenberg_fr": ("books", "public-domain"),
    "abc_news": ("news", "abc-news"),
}
POSITIVES = ["wikitext", "gutenberg"]
BENCHMARKS = [("gsm8k", "gsm8k", "eval/gsm8k/test.jsonl"), ("mmlu", "mmlu_csv", "eval/mmlu/test"),
              ("hellaswag", "hellaswag", "eval/hellaswag/hellaswag_val_subset.jsonl")]
DOCS_PER_FILE = 250  # chopped text sources are split into files of this many documents: one shard each
# filter.language.max_chars on the equal-work rows: longer than any document (checked), so language ID reads
# the whole text, as datatrove's LanguageFilter does.
WHOLE_TEXT_CHARS = 1_000_000_000


# --- measuring, in every child -----------------------------------------------------------------------------

def _usage() -> tuple[float, float]:
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime, kids.ru_utime + kids.ru_stime


def _timed(fn) -> dict:
    """Run fn once: its result, wall seconds, CPU seconds of this process and of its finished children."""
    rss_before = peak_rss_mb()
    (s0, c0), t0 = _usage(), time.perf_counter()
    out = fn()
    wall = time.perf_counter() - t0
    s1, c1 = _usage()
    # Children's ru_maxrss (pool workers, the fastText trainer) includes what they inherited at fork: an
    # upper bound on their own peak.
    return {"result": out, "seconds": wall, "cpu_seconds": (s1 - s0) + (c1 - c0), "cpu_children": c1 - c0,
            "rss_before_mb": rss_before, "peak_rss_mb": peak_rss_mb(),
            "peak_child_rss_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}


def _text_mb(texts) -> float:
    return sum(len(t.encode("utf-8")) for t in texts) / 1e6


# --- the workload ------------------------------------------------------------------------------------------

def _merge(paragraphs, target: int, min_chars: int):
    """Consecutive paragraphs joined by blank lines into pieces of at least `target` characters."""
    buf, n = [], 0
    for p in paragraphs:
        buf.append(p)
        n += len(p)
        if n >= target:
            yield "\n\n".join(buf)
            buf, n = [], 0
    if buf and n >= min_chars:
        yield "\n\n".join(buf)


def _spread(items: list, k: int) -> list:
    """k items evenly spaced over the list (all of them when there are at most k)."""
    if len(items) <= k:
        return items
    return [items[i * len(items) // k] for i in range(k)]


_PARA = re.compile(r"\n[ \t]*\n")
_ARTICLE = re.compile(r"^ = [^=].* = $")


def text_documents(data: Path) -> dict[str, list[tuple[str, str]]]:
    """Source name -> [(id, text)] cut from WikiText-2, Gutenberg and ABC news (read in place)."""
    out: dict[str, list[tuple[str, str]]] = {}
    raw = (data / "text/wikitext-2/wiki.test.raw.blanklines_stripped_crlf").read_text(encoding="utf-8")
    articles, cur = [], []
    for line in raw.replace("\r", "").split("\n"):
        if _ARTICLE.match(line) and cur:
            articles.append(cur)
            cur = []
        if line.strip():
            cur.append(line.strip())
    articles.append(cur)
    out["wikitext"] = [(f"wiki.test.raw/{a}/{i}", piece) for a, paras in enumerate(articles)
                       for i, piece in enumerate(_merge(paras, 3000, 500))]
    for name, lang, k in (("gutenberg", "en", 30), ("gutenberg_fr", "fr", 10)):
        docs = []
        for path in sorted((data / "text/gutenberg" / lang).glob("*.txt.gz")):
            text = gzip.decompress(path.read_bytes()).decode("utf-8", errors="replace").replace("\r", "")
            paras = [p.strip("\n") for p in _PARA.split(text) if p.strip()]
            pieces = list(_merge(paras, 5000, 1000))
            docs += [(f"{path.name}/{pieces.index(p)}", p) for p in _spread(pieces, k)]
        out[name] = docs
    docs = []
    for path in sorted((data / "text/news/nltk_abc").glob("*.txt.gz")):
        text = gzip.decompress(path.read_bytes()).decode("utf-8", errors="replace").replace("\r", "")
        stories = [s.strip("\n") for s in _PARA.split(text) if len(s.split()) >= 5]
        docs += [(f"{path.name}/{i}", s) for i, s in _spread(list(enumerate(stories)), 400)]
    out["abc_news"] = docs
    return out


def build_sources(work: Path, data: Path) -> dict:
    """Write the text pieces as JSONL under work/sources; return tokenmill's `sources` config for everything."""
    cfg = {
        "web_warc": {"format": "warc", "paths": [str(data / "warc" / "*.warc.gz")]},
        "web_cc": {"format": "jsonl", "paths": [str(data / "cc_jsonl" / "*.jsonl.gz")], "url_field": "metadata.url"},
    }
    for name, docs in text_documents(data).items():
        folder = work / "sources" / name
        folder.mkdir(parents=True, exist_ok=True)
        for j in range(0, len(docs), DOCS_PER_FILE):
            with open(folder / f"{name}-{j // DOCS_PER_FILE:03d}.jsonl", "w", encoding="utf-8") as f:
                f.writelines(json.dumps({"id": doc_id, "text": text}, ensure_ascii=False) + "\n" for doc_id, text in docs[j:j + DOCS_PER_FILE])
        cfg[name] = {"format": "jsonl", "paths": [str(folder / "*.jsonl")]}
    for name, c in cfg.items():
        c.update(bucket=SOURCES[name][0], licence=SOURCES[name][1], snapshot="bench")
    return cfg


def stage_params(data: Path) -> dict:
    """params.yaml's curation sections, with the workload's licences, positives and benchmarks."""
    import yaml

    p = yaml.safe_load((ROOT / "params.yaml").read_text(encoding="utf-8"))
    p["filter"]["licences"]["allow"] = sorted({lic for _, lic in SOURCES.values()})
    p["quality"]["positives"]["sources"] = POSITIVES
    p["quality"]["positives"]["paths"] = []
    p["decontaminate"]["benchmarks"] = [{"name": n, "format": f, "path": str((data / rel).resolve())}
                                        for n, f, rel in BENCHMARKS]
    return p


def equal_work_filter(f: dict) -> dict:
    """The filter section with no rule group switched off for any bucket (filter.buckets emptied: every group
    follows its `enabled`, true for all in params.yaml; the children check it per bucket) and language ID on
    the whole text (max_chars longer than any document): the work datatrove's filters do."""
    out = json.loads(json.dumps(f))
    out["buckets"] = {}
    out["language"]["max_chars"] = WHOLE_TEXT_CHARS
    return out


# --- tokenmill children (tokenmill's virtualenv) -----------------------------------------------------------

def _read_docs(folder: str) -> list[dict]:
    import pyarrow.parquet as pq

    rows = []
    for path in sorted(Path(folder).glob("*.parquet")):
        rows += pq.read_table(path).to_pylist()
    return rows


def tm_child(name: str, work: Path) -> dict:
    os.environ["TOKENMILL_PROGRESS"] = "0"
    bench = json.loads((work / "bench_args.json").read_text(encoding="utf-8"))
    if name == "prep":
        from tokenmill.filters.langid import bundled_lid176

        data = Path(bench["data"])
        sources = build_sources(work, data)
        params = stage_params(data)
        (work / "bench_config.json").write_text(json.dumps({"params": params, "sources": sources,
                                                            "filter_equal": equal_work_filter(params["filter"]),
                                                            "lid176": str(bundled_lid176())}), encoding="utf-8")
        return {"src_bytes": sum(Path(f).stat().st_size for c in sources.values() for pat in c["paths"]
                                 for f in glob.glob(pat))}
    if name in ("export-ingest", "export-filter"):
        stage = name.removeprefix("export-")
        if bench["datatrove"]:
            export_jsonl(work / "data" / stage / "documents", work / "dt" / ("filter_in" if stage == "ingest" else "pii_in"))
        return {"stats": {stage: doc_stats(work / "data" / stage / "documents")}}
    if name == "dedup-datatrove":
        import bench_dedup  # benchmarks/ is sys.path[0]: this script runs as a file

        r = bench_dedup.bench_datatrove(bench_dedup.paragraphs(50), work / "dedup_side_by_side",
                                        bench["datatrove_python"], bench["dedup_workers"])
        return {"result": {**r, "workers": bench["dedup_workers"]}}
    if name == "final":
        out = {"stats": {**{s: doc_stats(work / "data" / s / "documents") for s in ("pii", "dedup", "quality", "decontaminate")},
                         "filter_equal": doc_stats(work / "data_equal" / "filter" / "documents")},
               "metrics": {s: json.loads((work / "metrics" / f"{s}.json").read_text(encoding="utf-8"))
                           for s in ("filter", "pii", "dedup", "quality", "decontaminate")},
               "quality_model_mb": sum(f.stat().st_size for f in (work / "data/quality").glob("*.bin")) / 1e6}
        if bench["datatrove"]:
            out["cmp"] = {"equal": compare(work, work / "data_equal/filter/decisions", "tm_filter_core_equal.json"),
                          "shipped": compare(work, work / "data/filter/decisions", "tm_filter_core_shipped.json")}
        return out
    cfg = json.loads((work / "bench_config.json").read_text(encoding="utf-8"))
    params = cfg["params"]
    one = {"backend": "local", "workers": 1}
    sys.path.insert(0, str(ROOT))  # each stage as dvc runs it: the stage scripts' own `stage` functions
    if name == "ingest":
        from stages import ingest

        r = _timed(lambda: ingest.stage({"sources": cfg["sources"], "ingest": params["ingest"], "execution": one}))
    elif name.startswith(("filter-equal-w", "filter-shipped-w")):
        from stages import filter as filter_stage

        kind, workers = name.removeprefix("filter-").split("-w")
        exe = {"backend": "local", "workers": int(workers)}
        # The equal-work configuration writes under data_equal/ (its ingest a link to data/ingest), so that
        # data/filter, which pii reads, is the shipped configuration's output.
        root = Path("data_equal" if kind == "equal" else "data")
        if kind == "equal" and not (root / "ingest").exists():
            root.mkdir(exist_ok=True)
            (root / "ingest").symlink_to(Path("..") / "data" / "ingest")
        fparams = cfg["filter_equal"] if kind == "equal" else params["filter"]
        r = _timed(lambda: filter_stage.stage({"filter": fparams, "execution": exe}, "ingest", root))
    elif name == "pii":
        from stages import pii

        r = _timed(lambda: pii.stage({"pii": params["pii"], "execution": one}, "filter"))
    elif name == "dedup":
        from stages import dedup

        r = _timed(lambda: dedup.stage({"dedup": params["dedup"], "execution": one}, "pii"))
    elif name == "quality":
        from stages import quality

        r = _timed(lambda: quality.stage({"quality": params["quality"], "execution": one}, "dedup"))
    elif name == "decontaminate":
        from stages import decontaminate
        from tokenmill.decontam.params import Decontaminate
        from tokenmill.decontam.stage import build_index

        # The index alone first (the stage builds it again, once per worker), to tell building from matching.
        b = _timed(lambda: build_index(Decontaminate.resolve(params["decontaminate"])).stats)
        r = _timed(lambda: decontaminate.stage({"decontaminate": params["decontaminate"], "execution": one},
                                               "quality"))
        r["index_seconds"], r["index_cpu_seconds"], r["index_stats"] = b["seconds"], b["cpu_seconds"], b["result"]
    elif name in ("tm-filter-core-equal", "tm-filter-core-shipped"):
        from tokenmill.filters import GROUPS, FilterProcessor
        from tokenmill.filters.params import Filter

        kind = name.removeprefix("tm-filter-core-")
        docs = _read_docs("data/ingest/documents")
        proc = FilterProcessor(Filter.resolve(cfg["filter_equal"] if kind == "equal" else params["filter"]))
        # Which rule groups each of the workload's buckets skips, and how far language ID reads.
        off = {b: [g for g in GROUPS if not proc.enabled(g, b)] for b in sorted({d["bucket"] for d in docs})}
        off = {b: g for b, g in off.items() if g}
        longest = max(len(d["text"]) for d in docs)
        if kind == "equal" and (off or proc.lid.max_chars < longest):
            raise SystemExit(f"equal-work filter skips work: groups off {off}, language ID reads "
                             f"{proc.lid.max_chars} of up to {longest} characters")
        r = _timed(lambda: [proc(d) for d in docs])
        (work / "cmp").mkdir(exist_ok=True)
        decisions = {d["doc_id"]: [o.action, o.reason] for d, o in zip(docs, r["result"])}
        (work / "cmp" / f"tm_filter_core_{kind}.json").write_text(json.dumps(decisions), encoding="utf-8")
        r["result"] = {"docs": len(docs), "mb": _text_mb(d["text"] for d in docs),
                       "kept": sum(a == "keep" for a, _ in decisions.values()), "groups_off": off,
                       "docs_with_groups_off": sum(d["bucket"] in off for d in docs),
                       "bucket_docs": dict(Counter(d["bucket"] for d in docs)),
                       "lid_max_chars": proc.lid.max_chars, "longest_chars": longest,
                       "docs_longer_than_lid": sum(len(d["text"]) > proc.lid.max_chars for d in docs)}
    elif name == "nltk-words":
        from importlib import metadata

        from nltk.tokenize import NLTKWordTokenizer

        texts = [d["text"] for d in _read_docs("data/ingest/documents")]
        word = re.compile(r"\w+(?:['’.\-]\w+)*|[^\w\s]")
        rx = _timed(lambda: sum(len(word.findall(t)) for t in texts))
        tb = NLTKWordTokenizer()
        r = _timed(lambda: sum(len(tb.tokenize(t)) for t in texts))
        r["result"] = {"nltk": metadata.version("nltk"), "regex_cpu_seconds": rx["cpu_seconds"]}
    elif name == "tm-pii-core":
        from tokenmill.pii import PIIProcessor
        from tokenmill.pii.params import Pii

        docs = _read_docs("data/filter/documents")
        proc = PIIProcessor(Pii.resolve(params["pii"]))
        r = _timed(lambda: [proc(d) for d in docs])
        r["result"] = {"docs": len(docs), "mb": _text_mb(d["text"] for d in docs),
                       "modified": sum(o.action == "modify" for o in r["result"])}
    else:
        raise SystemExit(f"unknown child {name}")
    if isinstance(r["result"], dict) and "counts" in r["result"]:  # a stage manifest: keep the counts only
        m = r["result"]
        r["result"] = {"counts": m["counts"], **{k: m[k] for k in ("cutoff", "training", "contamination", "dedup")
                                                  if k in m}}
    return r


# --- datatrove children (the datatrove interpreter; tokenmill is never imported here) -----------------------

def _dt_filters(cfg: dict) -> list:
    """datatrove's filters, configured with tokenmill's thresholds where a parameter maps."""
    from datatrove.pipeline.filters import (
        C4QualityFilter,
        FineWebQualityFilter,
        GopherQualityFilter,
        GopherRepetitionFilter,
        LanguageFilter,
        URLFilter,
    )
    from datatrove.utils.lid import FT176LID
    from datatrove.utils.word_tokenizers import WordTokenizer

    f = cfg["params"]["filter"]
    lid_path = cfg["lid176"]

    class RegexTokenizer(WordTokenizer):
        """Offline stand-in for nltk's punkt (its data is a download): words are tokenmill's word runs plus
        single punctuation tokens (as word_tokenize emits them); sentences end at . ! ? before a space."""

        word = re.compile(r"\w+(?:['’.\-]\w+)*|[^\w\s]")
        end = re.compile(r"[.!?]+['\"”’)\]]*(?=\s|$)")

        def word_tokenize(self, text):
            return self.word.findall(text)

        def span_tokenize(self, text):
            spans, start = [], 0
            for m in self.end.finditer(text):
                if text[start:m.end()].strip():
                    spans.append((start, m.end()))
                start = m.end()
            if text[start:].strip():
                spans.append((start, len(text)))
            return spans

        def sent_tokenize(self, text):
            return [text[a:b].strip() for a, b in self.span_tokenize(text)]

    class LocalFT176(FT176LID):
        """lid.176 from a local file (datatrove would download lid.176.bin)."""

        @property
        def model(self):
            if self._model is None:
                from fasttext.FastText import _FastText

                self._model = _FastText(lid_path)
            return self._model

    class OfflineURLFilter(URLFilter):
        """URLFilter with tldextract's bundled suffix list (no fetch), passing documents without a URL (the
        text sources) as tokenmill does; datatrove's own filter asserts every document has one."""

        def __init__(self, **kw):
            super().__init__(**kw)
            from tldextract import TLDExtract

            self.tldextractor = TLDExtract(suffix_list_urls=())

        def filter(self, document):
            return True if not document.metadata.get("url") else super().filter(document)

    tok = RegexTokenizer("en")
    b = f["blocklists"]
    lang = LanguageFilter(languages=f["language"]["allowed"], language_threshold=f["language"]["min_score"])
    lang.model = LocalFT176(f["language"]["allowed"])
    return [
        OfflineURLFilter(use_integrated_lists=False, banned_words=b["banned_url_words"] or None,
                         soft_banned_words=b["soft_banned_url_words"] or None,
                         banned_subwords=b["banned_url_subwords"] or None,
                         soft_word_threshold=b["soft_banned_url_word_threshold"]),
        lang,
        GopherRepetitionFilter(language=tok),
        GopherQualityFilter(stop_words=f["gopher_quality"]["stop_words"], language=tok),
        C4QualityFilter(min_num_sentences=f["c4"]["min_sentences"], min_words_per_line=f["c4"]["min_words_per_line"],
                        max_word_length=f["c4"]["max_word_length"], language=tok),
        FineWebQualityFilter(stop_chars=tuple(f["fineweb"]["stop_chars"]), language=tok,
                             line_punct_thr=f["fineweb"]["min_line_punct_ratio"],
                             short_line_thr=f["fineweb"]["max_short_line_ratio"],
                             short_line_length=f["fineweb"]["short_line_length"],
                             char_duplicates_ratio=f["fineweb"]["max_char_dup_ratio"],
                             new_line_ratio=f["fineweb"]["max_newline_word_ratio"]),
    ]


def _dt_docs(folder: Path) -> list:
    from datatrove.data import Document

    docs = []
    for path in sorted(folder.glob("*.jsonl")):
        with open(path, encoding="utf-8") as f:
            for line in f:
                r = json.loads(line)
                docs.append(Document(text=r["text"], id=r["id"], metadata=r["metadata"]))
    return docs


def _dt_run(pipeline: list, logs: Path) -> None:
    from datatrove.executor import LocalPipelineExecutor

    LocalPipelineExecutor(pipeline, tasks=1, workers=1, logging_dir=str(logs), skip_completed=False).run()


def dt_child(name: str, work: Path) -> dict:
    from importlib import metadata

    cfg = json.loads((work / "bench_config.json").read_text(encoding="utf-8"))
    dtw = work / "dt"
    if name == "dt-filter":
        from datatrove.pipeline.readers import JsonlReader
        from datatrove.pipeline.writers import JsonlWriter

        shutil.rmtree(dtw / "filter_out", ignore_errors=True)
        pipeline = [JsonlReader(str(dtw / "filter_in"), glob_pattern="*.jsonl"), *_dt_filters(cfg),
                    JsonlWriter(str(dtw / "filter_out"))]
        r = _timed(lambda: _dt_run(pipeline, dtw / "logs_filter"))
        kept = []
        for path in sorted((dtw / "filter_out").glob("*.jsonl.gz")):
            with gzip.open(path, "rt", encoding="utf-8") as f:
                kept += [json.loads(line)["id"] for line in f]
        (work / "cmp").mkdir(exist_ok=True)
        (work / "cmp" / "dt_kept.json").write_text(json.dumps(kept), encoding="utf-8")
        r["result"] = {"kept": len(kept)}
        r["versions"] = {lib: metadata.version(lib) for lib in ("datatrove", "fasttext-numpy2-wheel", "tldextract",
                                                                 "xxhash")}
    elif name == "dt-pii":
        from datatrove.pipeline.formatters import PIIFormatter
        from datatrove.pipeline.readers import JsonlReader
        from datatrove.pipeline.writers import JsonlWriter

        shutil.rmtree(dtw / "pii_out", ignore_errors=True)
        pipeline = [JsonlReader(str(dtw / "pii_in"), glob_pattern="*.jsonl"), PIIFormatter(),
                    JsonlWriter(str(dtw / "pii_out"))]
        r = _timed(lambda: _dt_run(pipeline, dtw / "logs_pii"))
        r["result"] = None
    elif name == "dt-filter-core":
        docs = _dt_docs(dtw / "filter_in")
        filters = _dt_filters(cfg)
        warm = next(d for d in docs if d.metadata.get("url"))
        for flt in filters[:2]:  # load lid.176 and tldextract outside the timing, as the stage's __init__ does
            flt.filter(type(warm)(text=warm.text, id="warm", metadata=dict(warm.metadata)))
        runs = {}
        for mode in ("first_failure", "every_filter"):
            copies = [type(d)(text=d.text, id=d.id, metadata=dict(d.metadata)) for d in docs]
            stop = mode == "first_failure"
            runs[mode] = _timed(lambda copies=copies, stop=stop: [_dt_decide(filters, d, stop) for d in copies])
            decisions = {d.id: dec for d, dec in zip(copies, runs[mode]["result"])}
            runs[mode]["result"] = {"kept": sum(ok for ok, _ in decisions.values())}
            if mode == "first_failure":
                (work / "cmp").mkdir(exist_ok=True)
                (work / "cmp" / "dt_filter_core.json").write_text(json.dumps(decisions), encoding="utf-8")
        r = {"runs": runs, "docs": len(docs), "mb": _text_mb(d.text for d in docs), "peak_rss_mb": peak_rss_mb(),
             "seconds": runs["first_failure"]["seconds"], "cpu_seconds": runs["first_failure"]["cpu_seconds"]}
    elif name == "dt-pii-core":
        from datatrove.pipeline.formatters import PIIFormatter

        docs = _dt_docs(dtw / "pii_in")
        fmt = PIIFormatter()
        r = _timed(lambda: [fmt.format(d.text) for d in docs])
        r["result"] = {"docs": len(docs), "mb": _text_mb(d.text for d in docs),
                       "modified": sum(new != d.text for new, d in zip(r["result"], docs))}
    else:
        raise SystemExit(f"unknown child {name}")
    return r


def _dt_decide(filters: list, doc, stop: bool) -> tuple[bool, str]:
    """keep?, and the first failing filter's name and reason; stop=False runs every filter anyway."""
    first = None
    for flt in filters:
        out = flt.filter(doc)
        ok, why = out if isinstance(out, tuple) else (out, "")
        if not ok and first is None:
            first = f"{type(flt).__name__}:{why}".rstrip(":")
            if stop:
                break
    return first is None, first or "passed"


# --- the driver --------------------------------------------------------------------------------------------

def run_child(python: str, name: str, work: Path, repeat: int, log: Path) -> dict:
    """The fastest (by wall seconds) of `repeat` fresh subprocesses of configuration `name`."""
    best = None
    for _ in range(repeat):
        with open(log, "a", encoding="utf-8") as err:
            proc = subprocess.run([python, str(Path(__file__).resolve()), "--child", name, "--work", str(work)],
                                  cwd=work, stdout=subprocess.PIPE, stderr=err, text=True, check=False,
                                  env={**os.environ, "TOKENMILL_PROGRESS": "0"})
        if proc.returncode:
            sys.exit(f"child {name} failed (exit {proc.returncode}); see {log}")
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        if best is None or r.get("seconds", 0) < best.get("seconds", 0):
            best = r
    return best


def _load() -> float:
    return os.getloadavg()[0]


def export_jsonl(src: Path, dst: Path) -> None:
    """tokenmill document shards -> one JSONL file each, in the shape datatrove's JsonlReader reads."""
    import pyarrow.parquet as pq

    shutil.rmtree(dst, ignore_errors=True)
    dst.mkdir(parents=True)
    for path in sorted(src.glob("*.parquet")):
        with open(dst / f"{path.stem}.jsonl", "w", encoding="utf-8") as f:
            for r in pq.read_table(path, columns=["doc_id", "text", "url", "source", "bucket"]).to_pylist():
                meta = {"source": r["source"], "bucket": r["bucket"], **({"url": r["url"]} if r["url"] else {})}
                f.write(json.dumps({"id": r["doc_id"], "text": r["text"], "metadata": meta}, ensure_ascii=False)
                        + "\n")


def doc_stats(folder: Path) -> dict:
    import pyarrow.parquet as pq

    by_source: dict[str, list] = {}
    for path in sorted(folder.glob("*.parquet")):
        for r in pq.read_table(path, columns=["source", "text"]).to_pylist():
            s = by_source.setdefault(r["source"], [0, 0])
            s[0] += 1
            s[1] += len(r["text"].encode("utf-8"))
    return {"docs": sum(v[0] for v in by_source.values()), "mb": sum(v[1] for v in by_source.values()) / 1e6,
            "shards": len(list(folder.glob("*.parquet"))),
            "by_source": {k: {"docs": v[0], "mb": v[1] / 1e6} for k, v in sorted(by_source.items())}}


def decisions(folder: Path) -> dict[str, tuple[str, str]]:
    import pyarrow.parquet as pq

    out = {}
    for path in sorted(folder.glob("*.parquet")):
        t = pq.read_table(path, columns=["doc_id", "action", "reason"])
        out.update({d: (a, r) for d, a, r in zip(*(t.column(c).to_pylist() for c in ("doc_id", "action", "reason")))})
    return out


def machine_with_datatrove(dt_versions: dict | None) -> dict:
    return {**machine(("tokenmill", "pyarrow", "fasttext-numpy2", "duckdb", "numpy", "resiliparse", "warcio",
                       "datasketch")), "dt_versions": dt_versions or {}}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeat", type=int, default=2, help="fresh subprocesses per configuration; the fastest is reported")
    p.add_argument("--wait-quiet", type=float, default=0, metavar="SECONDS",
                   help="first wait up to SECONDS for the 1-minute load average to fall below 0.5")
    p.add_argument("--data", type=Path, default=DATA, help="the shared data folder (default ../shared/data)")
    p.add_argument("--datatrove-python", default=DEFAULT_DT_PYTHON,
                   help="an interpreter with datatrove (and fasttext, tldextract, pyahocorasick, fasteners, orjson) "
                        "installed; 'none' skips the comparison")
    p.add_argument("--no-dedup", action="store_true",
                   help="skip bench_dedup.py's datatrove dedup comparison (run by default with datatrove)")
    p.add_argument("--dedup-workers", type=int, default=1, help="workers of each side of the dedup comparison")
    p.add_argument("--out", type=Path, help="also write the section into this Markdown file (e.g. benchmarks/RESULTS.md)")
    p.add_argument("--keep", action="store_true", help="keep the temporary working directory")
    p.add_argument("--report-from", type=Path, metavar="RESULTS_JSON",
                   help="only write the section again from a kept run's results.json (no measuring)")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args(argv)

    if args.child:
        fn = dt_child if args.child.startswith("dt-") else tm_child
        print(json.dumps(fn(args.child, args.work), default=str))
        return
    if args.report_from:
        report(json.loads(args.report_from.read_text(encoding="utf-8")), args.out)
        return

    deadline = time.monotonic() + args.wait_quiet
    while _load() >= 0.5 and time.monotonic() < deadline:
        time.sleep(5)
    started = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    t_start = time.perf_counter()
    data = args.data.resolve()
    dt_python = None if args.datatrove_python == "none" else args.datatrove_python
    if dt_python and not Path(dt_python).exists():
        print(f"no datatrove interpreter at {dt_python}: skipping the comparison", file=sys.stderr)
        dt_python = None
    # The driver stays small (no pyarrow, no tokenmill, no documents): the children's measurements must not
    # inherit anything from it. Preparing, exporting and comparing run in children too.
    work = Path(tempfile.mkdtemp(prefix="bench_stages_"))
    log = work / "children.log"
    (work / "bench_args.json").write_text(json.dumps({"data": str(data), "datatrove": bool(dt_python),
                                                      "datatrove_python": dt_python,
                                                      "dedup_workers": args.dedup_workers}))
    res: dict[str, dict] = {}
    load: dict[str, float] = {}

    def run(name: str, python: str = sys.executable, repeat: int = args.repeat) -> dict:
        load[name] = _load()
        print(f"{name} (load {load[name]:.2f}) ...", file=sys.stderr, flush=True)
        r = res[name] = run_child(python, name, work, repeat, log)
        if "cpu_seconds" in r:
            print(f"  {r['seconds']:.2f} s wall, {r['cpu_seconds']:.2f} s CPU, peak RSS {r['peak_rss_mb']:.0f} MB",
                  file=sys.stderr, flush=True)
        return r

    try:
        run("prep", repeat=1)
        run("ingest", repeat=1)
        run("export-ingest", repeat=1)
        run("filter-equal-w1")
        if dt_python:
            run("dt-filter", dt_python)
        run("filter-shipped-w1")
        run("filter-equal-w2")
        run("tm-filter-core-equal")
        if dt_python:
            run("dt-filter-core", dt_python)
        run("tm-filter-core-shipped")
        if dt_python and importlib.util.find_spec("nltk"):
            run("nltk-words", repeat=1)
        run("export-filter", repeat=1)
        run("pii")
        if dt_python:
            run("dt-pii", dt_python)
        run("tm-pii-core")
        if dt_python:
            run("dt-pii-core", dt_python)
        for stage in ("dedup", "quality", "decontaminate"):
            run(stage)
        if dt_python and not args.no_dedup:
            run("dedup-datatrove", repeat=1)
        final = run("final", repeat=1)
        stats = {**res["export-ingest"]["stats"], **res["export-filter"]["stats"], **final["stats"]}
        info = machine_with_datatrove(res.get("dt-filter", {}).get("versions"))
        command = shlex.join(["python", "benchmarks/bench_stages.py", *(argv if argv is not None else sys.argv[1:])])
        saved = {"res": res, "stats": stats, "cmp": final.get("cmp"), "info": info, "load": load, "command": command,
                 "started": started, "elapsed": time.perf_counter() - t_start,
                 "src_bytes": res["prep"]["src_bytes"], "repeat": args.repeat}
        (work / "results.json").write_text(json.dumps(saved, default=str))
        report(saved, args.out)
    finally:
        if args.keep:
            print(f"kept {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)


def report(saved: dict, out: Path | None) -> None:
    """Print the section from a run's saved results; with `out`, write it into that file too."""
    text = section(saved["res"], saved["stats"], saved["cmp"], saved["info"], saved["load"], saved["command"],
                   saved["started"], saved["elapsed"], saved["src_bytes"], saved["repeat"])
    print(text)
    if out:
        write_section(out, SECTION, text)
        print(f"wrote {out}", file=sys.stderr)


# --- comparison and report ---------------------------------------------------------------------------------

def compare(work: Path, tm_decisions: Path, tm_core_file: str) -> dict:
    """Keep/drop agreement of one configuration of tokenmill's filter stage (its decisions folder; tm_core_file:
    the same configuration's in-memory decisions) and datatrove's pipeline, document by document."""
    tm = decisions(tm_decisions)
    dt_kept = set(json.loads((work / "cmp/dt_kept.json").read_text(encoding="utf-8")))
    dt_core = json.loads((work / "cmp/dt_filter_core.json").read_text(encoding="utf-8"))
    tm_core = json.loads((work / "cmp" / tm_core_file).read_text(encoding="utf-8"))
    import pyarrow.parquet as pq

    source = {}
    for path in sorted((work / "data/ingest/documents").glob("*.parquet")):
        t = pq.read_table(path, columns=["doc_id", "source"])
        source.update(zip(t.column("doc_id").to_pylist(), t.column("source").to_pylist()))
    cells = {"both_keep": 0, "both_drop": 0, "tm_keep_dt_drop": 0, "tm_drop_dt_keep": 0}
    per_source: dict[str, dict] = {}
    pairs: dict[tuple[str, str], int] = {}
    for doc_id, (action, reason) in tm.items():
        a, b = action != "drop", doc_id in dt_kept
        cell = ("both_keep" if b else "tm_keep_dt_drop") if a else ("tm_drop_dt_keep" if b else "both_drop")
        cells[cell] += 1
        s = per_source.setdefault(source[doc_id], {"docs": 0, "agree": 0, "tm_kept": 0, "dt_kept": 0})
        s["docs"] += 1
        s["agree"] += a == b
        s["tm_kept"] += a
        s["dt_kept"] += b
        if a != b:
            key = (reason, dt_core[doc_id][1] if doc_id in dt_core else "?")
            pairs[key] = pairs.get(key, 0) + 1
    return {"cells": cells, "docs": len(tm), "per_source": per_source,
            "pairs": [[a, b, k] for (a, b), k in sorted(pairs.items(), key=lambda kv: -kv[1])],
            "dt_core_matches_pipeline": {d for d, (ok, _) in dt_core.items() if ok} == dt_kept,
            "tm_core_matches_stage": all(tm_core[d][0] == tm[d][0] for d in tm)}


def _rate(n: float, s: float) -> str:
    return f"{n / s:,.0f}" if n / s >= 100 else f"{n / s:,.1f}"


def section(res: dict, stats: dict, cmp: dict | None, info: dict, load: dict, command: str, started: str,
            elapsed: float, src_bytes: int, repeat: int) -> str:
    ing = stats["ingest"]
    metrics = res["final"]["metrics"]
    rows = [("| stage | workers | docs in | docs out | input MB | wall s | CPU s | docs/s | docs per CPU-s | MB/s | "
             "peak RSS MB |"), "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    order = [("filter, equal work", "filter-equal-w1", "ingest", 1), ("filter, equal work", "filter-equal-w2", "ingest", 2),
             ("filter, shipped defaults", "filter-shipped-w1", "ingest", 1), ("pii", "pii", "filter", 1),
             ("dedup", "dedup", "pii", 1), ("quality", "quality", "dedup", 1),
             ("decontaminate", "decontaminate", "quality", 1)]
    for stage, key, prev, w in order:
        r = res[key]
        c = r["result"]["counts"]
        sec, cpu, mb = r["seconds"], r["cpu_seconds"], stats[prev]["mb"]
        rss = f"{r['peak_rss_mb']:.0f}"
        if w > 1:
            rss += f" + {w} workers ≤{r['peak_child_rss_mb']:.0f}"
        if stage == "quality":
            rss += f" + trainer ≤{r['peak_child_rss_mb']:.0f}"
        rows.append(f"| {stage} | {w} | {c['in']:,} | {c['out']:,} | {mb:.1f} | {sec:.2f} | {cpu:.2f} | "
                    f"{_rate(c['in'], sec)} | {_rate(c['in'], cpu)} | {mb / sec:.2f} | {rss} |")
    f1, f2, fs, dc = res["filter-equal-w1"], res["filter-equal-w2"], res["filter-shipped-w1"], res["decontaminate"]
    eq, sh = res["tm-filter-core-equal"]["result"], res["tm-filter-core-shipped"]["result"]
    match_s, match_cpu = dc["seconds"] - dc["index_seconds"], dc["cpu_seconds"] - dc["index_cpu_seconds"]
    # Stage minus a separate index build: meaningful only when the stage clearly took longer (both are noisy).
    matching = (f"; the rest of the stage's {dc['seconds']:.1f} s, matching and I/O, runs at "
                f"~{_rate(dc['result']['counts']['in'], match_s)} docs/s "
                f"(~{_rate(dc['result']['counts']['in'], match_cpu)} per CPU-s)"
                if match_s > 0.2 and match_cpu > 0.2 else f"; the whole stage took {dc['seconds']:.1f} s")
    qm, qr = metrics["quality"], res["quality"]["result"]
    contam = metrics["decontaminate"].get("contamination", {})

    def drops(r: dict) -> str:
        top = sorted(((k.split(":", 1)[1], n) for k, n in r["result"]["counts"]["by_reason"].items()
                      if k.startswith("drop:")), key=lambda kv: -kv[1])
        return ", ".join(f"{k} {n}" for k, n in top[:8]) + (", …" if len(top) > 8 else "")

    def survivors(out: dict) -> str:
        return ", ".join(f"{k} {out['by_source'].get(k, {}).get('docs', 0):,}/{v['docs']:,}"
                         for k, v in ing["by_source"].items())

    books_eq = stats["filter_equal"]["by_source"].get("gutenberg", {}).get("docs", 0)
    books_sh = stats["filter"]["by_source"].get("gutenberg", {}).get("docs", 0)
    books_in = ing["by_source"].get("gutenberg", {}).get("docs", 0)
    v, dv = info["versions"], info["dt_versions"]
    loads = list(load.values())
    dedup_cmd = (" It runs, in children of this one invocation and one after another: tokenmill's stages, "
                 "datatrove's filters and PIIFormatter on the same documents, and bench_dedup.py's datatrove dedup "
                 "comparison (its section 4, on its own Gutenberg paragraphs)."
                 if "dedup-datatrove" in res else "")
    text = f"""{SECTION}

- Machine: {info['nproc']} cores ({info['cpu']}), {info['ram_gib']:.1f} GiB RAM, {info['os']}.
- Software: Python {info['python']}, tokenmill {v['tokenmill']}, pyarrow {v['pyarrow']}, fasttext-numpy2 \
{v['fasttext-numpy2']}, duckdb {v['duckdb']}, numpy {v['numpy']}, resiliparse {v['resiliparse']}; datatrove \
{dv.get('datatrove', 'n/a')} in a separate virtualenv (same Python; fasttext-numpy2-wheel \
{dv.get('fasttext-numpy2-wheel', 'n/a')}, tldextract {dv.get('tldextract', 'n/a')}, xxhash \
{dv.get('xxhash', 'n/a')}).
- Command, from the project root with .venv active: `{command}`.{dedup_cmd}
- Date: {started}; {elapsed:.0f} s in all; 1-minute load average before each configuration: \
{min(loads):.2f}–{max(loads):.2f}.
- Workload: {ing['docs']:,} documents, {ing['mb']:.1f} MB of text, in {ing['shards']} Parquet shards, built by \
tokenmill's ingest stage (resiliparse, 1 worker, {res['ingest']['seconds']:.1f} s) from {src_bytes / 1e6:.1f} MB of \
source files: {_sources_line(ing['by_source'])}. web_warc is every `../shared/data/warc/*.warc.gz` as one warc \
source; web_cc every `../shared/data/cc_jsonl/*.jsonl.gz` (jsonl, url from metadata.url); wikitext the \
WikiText-2 raw test articles cut into ~3,000-character pieces at paragraph boundaries; gutenberg 30 evenly \
spaced ~5,000-character pieces of each of the 43 English books (hard-wrapped lines as published; licence \
header or footer where a piece falls there), gutenberg_fr 10 of each of the 9 French books; abc_news 400 evenly \
spaced blank-line-separated sections (stories or their sub-headed parts) of each of ABC rural and science. \
The text pieces are written as JSONL into the temporary directory and ingested like the rest. Buckets: \
{_buckets_line(sh)}.
- Stages: each on the previous stage's output with `execution: {{backend: local, workers: 1}}` (runs inline: \
per-core figures); the equal-work filter stage also with 2 workers (spawn pool over the {ing['shards']} shards). \
params.yaml's sections, except filter.licences.allow = the workload's licences, \
quality.positives.sources = [wikitext, gutenberg] (negatives: web bucket; cut: top 70% of web), \
decontaminate.benchmarks = GSM8K test (1,319 items), MMLU test (14,042), HellaSwag validation subset (1,000).
- The filter stage runs in two configurations. **Equal work**{' (the rows compared with datatrove below)' if cmp else ''}: \
filter.buckets = {{}}, so no rule group is off for any bucket (checked for each of the workload's buckets), and \
filter.language.max_chars = {eq['lid_max_chars']:,} (the longest document has {eq['longest_chars']:,} \
characters), so language ID reads the whole text, as datatrove's does. **Shipped defaults**: params.yaml's \
filter section as it is: {_off_line(sh)}; language ID reads the first {sh['lid_max_chars']:,} characters \
({sh['docs_longer_than_lid']:,} of the {ing['docs']:,} documents are longer). pii and the later stages read the \
shipped-defaults output, as a pipeline run does.
- Method: each configuration is a fresh subprocess ({_repeats(repeat)}; the run with the least wall time is \
reported). Wall and CPU seconds (user + system of the process and its finished children) and peak RSS (VmHWM; \
for pool workers and the fastText trainer ru_maxrss, an upper bound) are measured inside it. Stage times include \
reading and writing Parquet (documents and decisions), the manifest, and loading models or building indexes. \
docs/s = input documents per wall second; docs per CPU-s divides by CPU seconds, which other load on this \
shared machine inflates far less than wall time.

{chr(10).join(rows)}

- filter: drops by first failing rule, equal work: {drops(f1)}; shipped defaults: {drops(fs)}. Survivors per \
source, equal work: {survivors(stats['filter_equal'])}; shipped defaults: {survivors(stats['filter'])}. With every \
group on, {books_eq:,} of {books_in:,} English Gutenberg pieces survive ({books_sh:,} with the shipped defaults, \
which switch C4 and FineWeb off for books): tokenmill's document-level C4 punctuation rule \
(c4_terminal_punct_char_frac, lines weighed by characters) drops a page whose text is mostly in lines without \
terminal punctuation, as hard-wrapped lines are; C4 itself and datatrove delete such lines and keep the page when \
3+ sentences remain. The shipped defaults do {f1['cpu_seconds'] / fs['cpu_seconds']:.2f}× the equal-work \
configuration's documents per CPU-second. Two workers (equal work): \
{f1['seconds'] / f2['seconds']:.2f}× the 1-worker wall speed, {f2['cpu_seconds']:.1f} CPU-s vs \
{f1['cpu_seconds']:.1f} (each spawned worker imports tokenmill, pyarrow and fastText and loads lid.176 again; \
this workload is ~{f1['cpu_seconds']:.0f} CPU-s of work).
- dedup: {_dedup_line(res['dedup']['result'])}.
- quality: {qr.get('training', {}).get('positives', '?')} positives / {qr.get('training', {}).get('negatives', '?')} \
negatives, {qr.get('training', {}).get('folds', '?')} cross-fitted fastText models, held-out AUC \
{qm.get('heldout_auc', float('nan')):.3f}, separation {qm.get('heldout_separation', float('nan')):.3f}, \
cut-off {qm.get('cutoff', float('nan')):.3f}. The stage time is mostly fixed cost: training, writing and \
reloading the models, {res['final']['quality_model_mb']:.0f} MB of model files for {qr['counts']['in']:,} documents \
(quality.model.hash_buckets sizes them: fastText's default of 2M word-bigram buckets made each model 0.5 GB at \
dim {_dim()}, whatever the data size); holding them for scoring sets the peak RSS.
- decontaminate: the n-gram index of {dc['index_stats'].get('items', '?'):,} items \
({dc['index_stats'].get('keys', 0):,} seed keys) takes {dc['index_seconds']:.1f} s \
({dc['index_cpu_seconds']:.1f} CPU-s) built alone, once per worker{matching}. \
{contam.get('contaminated_documents', 0)} documents contaminated, {contam.get('overlaps', 0)} overlaps recorded; \
the stage's own benchmark (bench_decontam.py, all 18 benchmark files) is in the Decontamination section.
"""
    if cmp:
        text += "\n" + dt_section(res, stats, cmp)
    if "dedup-datatrove" in res:
        text += "\n" + dt_dedup_section(res["dedup-datatrove"]["result"])
    text += _caveats(load, info["nproc"], bool(cmp))
    return text


def _buckets_line(shipped: dict) -> str:
    """Which bucket each source is in, and which rule groups the shipped defaults switch off there (as the
    in-memory child found them through FilterProcessor.enabled)."""
    by_bucket: dict[str, list[str]] = {}
    for source, (bucket, _) in SOURCES.items():
        by_bucket.setdefault(bucket, []).append(source)
    parts = []
    for bucket, sources in by_bucket.items():
        off = shipped["groups_off"].get(bucket, [])
        parts.append(f"{bucket} ({', '.join(sources)})" + (f", where params.yaml's filter.buckets.{bucket} switches "
                                                           f"{' and '.join(off)} off" if off else ""))
    return "; ".join(parts)


def _off_line(r: dict) -> str:
    """The shipped configuration's groups switched off per bucket, as the in-memory child found them."""
    off = r["groups_off"]
    if not off:
        return "no rule group is off for any of the workload's buckets"
    return (", ".join(f"bucket {b} skips the {' and '.join(g)} groups" for b, g in off.items())
            + f", {r['docs_with_groups_off']:,} of {r['docs']:,} documents")


def _dim() -> int:
    import yaml

    return yaml.safe_load((ROOT / "params.yaml").read_text(encoding="utf-8"))["quality"]["model"]["dim"]


def _sources_line(by: dict) -> str:
    return ", ".join(f"{k} {v['docs']:,} ({v['mb']:.1f} MB)" for k, v in by.items())


def _repeats(repeat: int) -> str:
    return "one run each" if repeat == 1 else f"{repeat} runs each, ingest once"


def _dedup_line(r: dict) -> str:
    c = r["counts"]["by_reason"]
    return ", ".join(f"{k.split(':', 1)[1]} {n}" for k, n in sorted(c.items()))


# Known definitional disagreements between the two filters: (tokenmill reason, datatrove reason) -> why.
WHY = {
    ("c4_terminal_punct_char_frac", "passed"):
        "tokenmill's c4_terminal_punct_char_frac drops a page whose text is mostly in lines without terminal "
        "punctuation (hard-wrapped Gutenberg lines end mid-sentence), where C4 / datatrove delete those lines and "
        "keep the page when 3+ sentences remain",
    ("passed", "GopherQualityFilter:gopher_below_alpha_threshold"):
        "datatrove's Gopher alpha-word ratio counts punctuation tokens as words (WikiText's spaced-out \" , \" and "
        "\"@-@\" push it under 0.8; with nltk's tokenizer too), tokenmill's words exclude punctuation",
}


def dt_section(res: dict, stats: dict, cmp: dict) -> str:
    f1, fs, dtf = res["filter-equal-w1"], res["filter-shipped-w1"], res["dt-filter"]
    tme, tms, dtc = res["tm-filter-core-equal"], res["tm-filter-core-shipped"], res["dt-filter-core"]
    n, mb = stats["ingest"]["docs"], stats["ingest"]["mb"]
    early, every = dtc["runs"]["first_failure"], dtc["runs"]["every_filter"]
    sh = tms["result"]
    rows = ["| filters on the same documents | wall s | CPU s | docs/s | docs per CPU-s | MB/s | kept | peak RSS MB |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]

    def row(label, r, kept, rss):
        rows.append(f"| {label} | {r['seconds']:.2f} | {r['cpu_seconds']:.2f} | {_rate(n, r['seconds'])} | "
                    f"{_rate(n, r['cpu_seconds'])} | {mb / r['seconds']:.2f} | {kept:,} | {rss} |")

    row("tokenmill filter stage, **equal work**: every rule group on every document, language ID on the whole text "
        "(Parquet in, documents + decisions out)", f1, f1["result"]["counts"]["out"], f"{f1['peak_rss_mb']:.0f}")
    row("datatrove LocalPipelineExecutor, stops at the first failing filter (JSONL in, JSONL.gz out)", dtf, dtf["result"]["kept"], f"{dtf['peak_rss_mb']:.0f}")
    row("tokenmill FilterProcessor, in memory, **equal work** (every measure of every group on every document)",
        tme, tme["result"]["kept"], "–")
    row("datatrove filters, in memory, every filter called on every document (each returns at its own first "
        "failing check)", every, every["result"]["kept"], "–")
    row("datatrove filters, in memory, stop at the first failing filter (as its pipeline)", early,
        early["result"]["kept"], "–")
    row(f"tokenmill filter stage, shipped defaults ({_off_short(sh)}; language ID on the first "
        f"{sh['lid_max_chars']:,} characters)", fs, fs["result"]["counts"]["out"], f"{fs['peak_rss_mb']:.0f}")
    row("tokenmill FilterProcessor, in memory, shipped defaults", tms, sh["kept"], "–")
    ce, cs = cmp["equal"], cmp["shipped"]
    c = ce["cells"]
    agree = (c["both_keep"] + c["both_drop"]) / ce["docs"]
    agree_sh = (cs["cells"]["both_keep"] + cs["cells"]["both_drop"]) / cs["docs"]
    pii, dpii = res["pii"], res["dt-pii"]
    tpc, dpc = res["tm-pii-core"], res["dt-pii-core"]
    pn, pmb = stats["filter"]["docs"], stats["filter"]["mb"]
    prow = [f"| PII on the shipped-defaults filter stage's output ({pn:,} documents) | wall s | CPU s | docs/s | "
            "docs per CPU-s | MB/s | docs changed |", "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]

    def prow_(label, r, changed):
        prow.append(f"| {label} | {r['seconds']:.2f} | {r['cpu_seconds']:.2f} | {_rate(pn, r['seconds'])} | "
                    f"{_rate(pn, r['cpu_seconds'])} | {pmb / r['seconds']:.2f} | {changed} |")

    pc = pii["result"]["counts"]["by_reason"]
    prow_("tokenmill pii stage (6 types; Parquet in/out + decisions)", pii, f"{pc.get('modify:redacted', 0):,}")
    prow_("datatrove PIIFormatter pipeline (email + public IPv4; JSONL in, JSONL.gz out)", dpii, "–")
    prow_("tokenmill PIIProcessor, in memory", tpc, f"{tpc['result']['modified']:,}")
    prow_("datatrove PIIFormatter.format, in memory", dpc, f"{dpc['result']['modified']:,}")
    src_rows = ["| source | docs | agree, equal work | tokenmill kept, equal work | tokenmill kept, shipped defaults "
                "| datatrove kept |", "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for s, v in ce["per_source"].items():
        src_rows.append(f"| {s} | {v['docs']:,} | {v['agree'] / v['docs']:.1%} | {v['tm_kept']:,} | "
                        f"{cs['per_source'][s]['tm_kept']:,} | {v['dt_kept']:,} |")
    top = ce["pairs"][:6]
    pairs = "; ".join(f"tokenmill `{a}` / datatrove `{b}`: {k}" for a, b, k in top)
    why = [WHY[(a, b)] for a, b, _ in top if (a, b) in WHY]
    why_line = (f" {'The two big ones are' if len(why) > 1 else 'The biggest is'} definitions, not bugs in either: "
                + "; ".join(why) + "." if why else "")
    ratio = lambda a, b: a["cpu_seconds"] and b["cpu_seconds"] / a["cpu_seconds"]
    nltk = res.get("nltk-words")
    nltk_line = (f" For scale: nltk's Treebank word tokenizer alone (what word_tokenize runs after punkt's sentence "
                 f"split) takes {nltk['cpu_seconds']:.1f} CPU-s over these documents, the regex "
                 f"{nltk['result']['regex_cpu_seconds']:.1f} CPU-s (measured in tokenmill's virtualenv, nltk "
                 f"{nltk['result']['nltk']}); datatrove splits a text into words once for its filters in a row "
                 f"(split_into_words is an lru_cache of 5 texts) and into sentences again for C4's count."
                 if nltk else "")
    dropped_every = n - every["result"]["kept"]
    return f"""### tokenmill vs datatrove on the same {n:,} documents

datatrove {res['dt-filter'].get('versions', {}).get('datatrove', '')} runs URLFilter (tokenmill's {len(_banned())} \
banned URL words, no integrated lists; documents without a URL pass, as in tokenmill — datatrove's own filter \
asserts one), LanguageFilter (lid.176: the .ftz file tokenmill loads, given through a subclass where datatrove \
would download lid.176.bin; en, 0.65; it reads the whole text), GopherRepetitionFilter, GopherQualityFilter, \
C4QualityFilter (min_num_sentences 3, min_words_per_line 5, as in C4's paper and tokenmill's params; it removes \
failing lines and drops the page only on page-level rules), FineWebQualityFilter (stop_chars . ' " ! ?), in \
tokenmill's order, tokenmill's thresholds where a parameter maps and datatrove's defaults otherwise, one \
LocalPipelineExecutor run with 1 task and 1 worker, on every document whatever its source. tokenmill's rows \
marked **equal work** likewise run every rule group on every document (filter.buckets = {{}}) with language ID \
on the whole text (filter.language.max_chars = {tme['result']['lid_max_chars']:,}); the shipped-defaults rows \
are params.yaml's filter section as it is ({_off_line(sh)}; language ID on the first \
{sh['lid_max_chars']:,} characters). nltk's punkt data is a download, so datatrove's word and sentence splitter \
here is an offline regex (tokenmill's word runs plus one token per punctuation character, as word_tokenize emits \
them; sentences end at . ! ? before a space). That makes **datatrove's rows faster than its production \
configuration**.{nltk_line}

{chr(10).join(rows)}

- **Stage vs pipeline, equal work: tokenmill's filter stage does {ratio(f1, dtf):.2f}× datatrove's documents per \
CPU-second** ({_rate(n, f1['cpu_seconds'])} vs {_rate(n, dtf['cpu_seconds'])}; {dtf['seconds'] / f1['seconds']:.2f}× \
in wall time), although tokenmill computes every measure of every group on every document (its decision table \
keeps them all, for threshold studies) while datatrove's pipeline stops at the first failing filter, and each of \
its filters at its own first failing check. With the shipped defaults the stage does \
{ratio(fs, dtf):.2f}× datatrove's documents per CPU-second, but less work than datatrove: {_less_work(sh)}.
- **In memory (documents loaded, no I/O), equal work: tokenmill {ratio(tme, every):.2f}× datatrove's documents per \
CPU-second when datatrove calls every filter on every document**, {ratio(tme, early):.2f}× when datatrove stops at \
the first failing filter (tokenmill still computes everything); shipped defaults: {ratio(tms, every):.2f}× and \
{ratio(tms, early):.2f}×. What still differs in the work of the equal-work and every-filter rows: each datatrove \
filter returns at its own first failing check, so on the {dropped_every:,} documents that fail some filter, that \
filter's later checks are not computed (tokenmill measures every rule); on a page it keeps, datatrove's C4 filter \
rewrites the text (removes lines without terminal punctuation, with fewer than 5 words, with a word over 1,000 \
characters, or mentioning javascript or a policy phrase, and strips Wikipedia-style citation marks) and FineWeb's rules then read the shorter text, where tokenmill's C4 group \
measures without rewriting and FineWeb's reads the original; datatrove's language ID asks fastText for every \
label's probability (k=-1), tokenmill's for the top one.
- **Keep/drop agreement, equal work: {agree:.1%}** of {ce['docs']:,} documents (tokenmill's equal-work filter \
stage vs datatrove's pipeline: both keep {c['both_keep']:,}, both drop {c['both_drop']:,}; tokenmill keeps, \
datatrove drops {c['tm_keep_dt_drop']:,}; tokenmill drops, datatrove keeps {c['tm_drop_dt_keep']:,}). Commonest \
disagreements (first failing rule on each side): {pairs}.{why_line} With the shipped bucket defaults the \
agreement is {agree_sh:.1%} (both keep {cs['cells']['both_keep']:,}, both drop {cs['cells']['both_drop']:,}; \
tokenmill keeps, datatrove drops {cs['cells']['tm_keep_dt_drop']:,}; tokenmill drops, datatrove keeps \
{cs['cells']['tm_drop_dt_keep']:,}). In-memory decisions equal the pipelines' (datatrove: \
{ce['dt_core_matches_pipeline']}, tokenmill equal work: {ce['tm_core_matches_stage']}, shipped defaults: \
{cs['tm_core_matches_stage']}).

{chr(10).join(src_rows)}

{chr(10).join(prow)}

- **PII: tokenmill {ratio(pii, dpii):.2f}× datatrove's documents per CPU-second** at stage level (I/O and start-up \
dominate at this size), {ratio(tpc, dpc):.2f}× in memory, while detecting six types (email, phone, IPv4/IPv6, \
credit card with Luhn, IBAN with mod-97, SSN) with validity checks against PIIFormatter's two (email, public \
IPv4), one regex pass each. Both sides read the same {pn:,} documents (the shipped-defaults filter stage's output).
"""


def dt_dedup_section(d: dict) -> str:
    """bench_dedup.bench_datatrove's result, run by this invocation."""
    workers = f"{d['workers']} worker{'s' if d['workers'] > 1 else ''}"
    head = (f"### dedup: tokenmill vs datatrove on {d['docs']:,} Gutenberg paragraphs\n\n"
            f"bench_dedup.py's side by side (bench_dedup.bench_datatrove, run once, in a child of this invocation; "
            f"{workers} each; wall and CPU seconds of the whole stage or pipeline, reading and writing included) "
            f"on {d['docs']:,} Gutenberg paragraphs of ≥ 50 words ({d['words']:,} words), not the documents above, "
            f"with planted copies: 2,000 near (0–3% of words edited), 1,000 distant (8–15% edited) and 500 exact. "
            f"Both read them from Parquet (tokenmill's document shards; id and text columns for datatrove). "
            f"`python benchmarks/bench_dedup.py --workers 1` runs the same function after its signature, detection "
            f"curve and clustering benchmarks.\n")
    if "datatrove_s" not in d:
        return head + f"\ntokenmill: {d['tokenmill_s']} s, {d['tokenmill_removed']:,} removed. datatrove: {d['datatrove']}\n"
    dt, dcpu, tc, dc = d["datatrove_s"], d["datatrove_cpu_s"], d["tokenmill_caught"], d["datatrove_caught"]
    rows = ["| dedup on the same paragraphs | wall s | CPU s | documents removed |", "| --- | ---: | ---: | ---: |",
            f"| tokenmill dedup stage: exact + near (128 permutations, b=14 r=9, candidates verified at estimated "
            f"J ≥ 0.8), line dedup off; Parquet in, documents + decisions out | {d['tokenmill_s']:.2f} | "
            f"{d['tokenmill_cpu_s']:.2f} | {d['tokenmill_removed']:,} |",
            f"| datatrove {d['datatrove_version']} MinHash, 4 pipeline runs (wall: signatures {dt['signatures']:.2f}, "
            f"buckets {dt['buckets']:.2f}, cluster {dt['cluster']:.2f}, filter {dt['filter']:.2f}); 14 × 8 = 112 "
            f"hashes, no verification; Parquet in, JSONL.gz out | {dt['total']:.2f} | {dcpu['total']:.2f} | "
            f"{d['datatrove_removed']:,} |"]
    caught = ["| planted pair (true 5-gram Jaccard) | tokenmill | datatrove |", "| --- | ---: | ---: |",
              f"| exact copy | {tc['exact']} / 500 | {dc['exact']} / 500 |"]
    caught += [f"| edited copy, J in {k} | {tc[k][0]} / {tc[k][1]} | {dc[k][0]} / {dc[k][1]} |" for k in tc if k != "exact"]
    return head + f"""
{chr(10).join(rows)}

- **dedup: tokenmill {d['cpu_speedup']:.2f}× datatrove's speed in CPU seconds** ({d['speedup']:.2f}× in wall \
time). The work differs: tokenmill also groups exact duplicates by a hash of the text, and checks each LSH \
candidate pair by signature agreement before removing one of them (datatrove removes every candidate: its 14 × 8 \
S-curve has its midpoint at (1/14)^(1/8) = 0.72); tokenmill computes 128 permutations (its LSH uses 14 bands of \
9), datatrove 112 hashes (14 buckets of 8); \
datatrove's English word tokenizer is nltk's (punkt is a download), so here it splits on whitespace after its \
own text simplification (simplify_text: lower case, punctuation removed, numbers, weekdays and months \
normalised, diacritics removed). Each system keeps a different member of a cluster \
(tokenmill the longest, datatrove the first it read), so only {d['removed_by_both']:,} removed documents are the \
same ones. Planted pairs caught (one of the two removed):

{chr(10).join(caught)}
"""


def _less_work(r: dict) -> str:
    """What the shipped configuration skips that datatrove does, as the in-memory child found it."""
    parts = [f"no {' or '.join(g)} on the {r['bucket_docs'][b]:,} {b} documents" for b, g in r["groups_off"].items()]
    if r["docs_longer_than_lid"]:
        parts.append(f"language ID on the first {r['lid_max_chars']:,} characters of the {r['docs_longer_than_lid']:,} "
                     f"longer documents")
    return "; ".join(parts) or "none"


def _off_short(r: dict) -> str:
    off = r["groups_off"]
    return "; ".join(f"{b} skip {' and '.join(g)}" for b, g in off.items()) if off else "no group off"


def _banned() -> list:
    import yaml

    return yaml.safe_load((ROOT / "params.yaml").read_text(encoding="utf-8"))["filter"]["blocklists"]["banned_url_words"]


def _caveats(load: dict, nproc: int, datatrove: bool) -> str:
    hi = max(load.values())
    busy = (f"The machine was shared with other work during this run (1-minute load average up to {hi:.1f} on "
            f"{nproc} cores): wall-clock figures, and most of all the 2-worker speed-up, understate an idle "
            f"machine; the per-CPU-second columns are the steadier per-core figures. ") if hi >= 0.5 else ""
    dt_note = (" datatrove's nltk tokenizer was replaced by a regex (see above), which favours datatrove's speed; "
               "the agreement figures depend on that tokenizer too.") if datatrove else ""
    return f"""
Caveats: {busy}Figures carry run-to-run noise of several percent. The workload is small (a few thousand
documents, shards of at most ~1.5 MB of text): fixed costs (model loading, index building, spawn pools, DuckDB,
fastText training and writing its models) weigh far more than in a production run with shards of hundreds of
MB, and after the filter stage the later stages see only its survivors.{dt_note}
"""


if __name__ == "__main__":
    main()
