"""The `check` stage: a broken configuration stops in one line per problem, naming the parameter, before ingest.

Each case is a configuration a new user really writes (the shipped crawl preset with no files yet, a missing
reference corpus, a mixture weighting only buckets the crawl lacks, a benchmark file that is not there, a
file outside the stage's dependencies), composed from conf/ as `dvc exp run -S` would.
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tokenmill.check import check_config
from tokenmill.config import compose

ROOT = Path(__file__).resolve().parents[1]
DVC = yaml.safe_load((ROOT / "dvc.yaml").read_text())
from tokenmill.benchmarks import KNOWN  # noqa: E402


def _params(tmp_path: Path, *overrides: str) -> dict:
    compose(list(overrides), conf_dir=ROOT / "conf", output=tmp_path / "params.yaml")
    return yaml.safe_load((tmp_path / "params.yaml").read_text())


def _project(tmp_path: Path, warc_dir: Path | None = None, reference: bool = True) -> Path:
    """A project root as the check stage sees it: data/raw (crawl files), data/user, data/sample/reference."""
    root = tmp_path / "project"
    (root / "data" / "raw" / "warc").mkdir(parents=True)
    shutil.copytree(ROOT / "data" / "user", root / "data" / "user")
    if warc_dir is not None:
        shutil.copy(warc_dir / "resiliparse_warcfile.warc.gz", root / "data" / "raw" / "warc")
    (root / "data" / "sample" / "eval").mkdir(parents=True)
    (root / "data" / "sample" / "eval" / "heldout.jsonl").write_text("")
    (root / "data" / "benchmarks").mkdir()  # what the benchmarks stage writes before the check runs
    item = '{"id": "q1", "context": "Question: Which gas do plants take in?", "choices": ["CO2", "O2"], "gold": 0}\n'
    for name in KNOWN:
        (root / "data" / "benchmarks" / f"{name}.jsonl").write_text(item)
    if reference:
        (root / "data" / "sample" / "reference").mkdir()
        (root / "data" / "sample" / "reference" / "reference-00000.parquet").write_bytes(b"")
    return root


def test_the_crawl_preset_with_its_files_passes_and_warns_about_missing_buckets(tmp_path, warc_dir):
    root = _project(tmp_path, warc_dir)
    result = check_config(_params(tmp_path, "source=crawl"), DVC, root)
    assert result["problems"] == []
    # the optional WET, ARC and JSONL sources match nothing and that is fine
    assert result["files"] == {"crawl_warc": ["data/raw/warc/resiliparse_warcfile.warc.gz"], "crawl_wet": [],
                               "crawl_arc": [], "crawl_jsonl": []}
    assert result["warnings"] == ["mixture: no source fills code, legal, reference; the mixture spreads their "
                                  "weight over web"]


def test_the_crawl_preset_before_any_file_is_there(tmp_path):
    result = check_config(_params(tmp_path, "source=crawl"), DVC, _project(tmp_path))
    assert result["problems"][0] == ("sources.crawl_warc.paths: no files match 'data/raw/warc/**/*.warc*'; "
                                     "put warc files there, or mark the source `optional: true`")
    assert len(result["problems"]) == 2 and "no source has any file" in result["problems"][1]


def test_missing_reference_corpus(tmp_path, warc_dir):
    result = check_config(_params(tmp_path, "source=crawl"), DVC, _project(tmp_path, warc_dir, reference=False))
    assert result["problems"] == [
        "quality.positives.reference: no files match 'data/sample/reference/*.parquet'; the sample stage writes "
        "them (sample.n_docs > 0), or name your own in quality.positives.paths"]
    # the user's own reference texts replace it, and must exist
    params = _params(tmp_path, "source=crawl", "quality.positives.paths=[data/user/reference/*.txt]")
    assert check_config(params, DVC, _project(tmp_path / "b", warc_dir, reference=False))["problems"] == [
        "quality.positives.paths: no files match 'data/user/reference/*.txt'"]


def test_mixture_phase_with_no_bucket_the_sources_fill(tmp_path, warc_dir):
    params = _params(tmp_path, "source=crawl", "mixture=code_heavy")
    params["mixture"]["phases"]["anneal"]["weights"] = {"code": 0.6, "reference": 0.4}
    result = check_config(params, DVC, _project(tmp_path, warc_dir))
    assert result["problems"] == ["mixture.phases.anneal.weights: none of ['code', 'reference'] is a bucket of the "
                                  "sources (web); weight one of those"]


def test_missing_benchmark_file_and_a_file_outside_the_stage_dependencies(tmp_path, warc_dir):
    params = _params(tmp_path, "source=crawl")
    n = len(params["decontaminate"]["benchmarks"])  # the shipped ones (real benchmarks, the sample's own)
    params["decontaminate"]["benchmarks"] += [
        {"name": "gsm8k", "format": "gsm8k", "path": "data/user/benchmarks/gsm8k/test.jsonl"},
        {"name": "arc", "format": "llm_foundry", "path": str(warc_dir / "SOURCES.md")}]
    result = check_config(params, DVC, _project(tmp_path, warc_dir))
    assert result["problems"][0] == (f"decontaminate.benchmarks[{n}]: gsm8k: no file "
                                     "'data/user/benchmarks/gsm8k/test.jsonl'; put it there, or mark it "
                                     "`optional: true`")
    outside = [p for p in result["problems"] if p.startswith(f"decontaminate.benchmarks[{n + 1}]") and "dvc.yaml" in p]
    # ... and it is read by its reader: a Markdown file is no llm_foundry benchmark, named by file and item
    unreadable = [p for p in result["problems"] if p.startswith(f"decontaminate.benchmarks[{n + 1}]") and "dvc.yaml" not in p]
    assert len(unreadable) == 1 and "SOURCES.md (llm_foundry) cannot be read: " in unreadable[0], unreadable
    assert [p.split(" stage")[0].rsplit(" ", 1)[-1] for p in outside] == ["decontaminate", "evaluate"]
    assert all(p.endswith("so editing it would rerun nothing; move it under data/user/benchmarks/") for p in outside)


def test_dvc_stops_at_the_check_before_ingest(tmp_path):
    """Through DVC, as a user runs it: the shipped crawl preset with no files stops at `check`, in lines
    without a traceback, and ingest never starts."""
    sys.path.insert(0, str(ROOT / "tests"))
    from test_pipeline_e2e import _fresh_clone, _run

    repo = _fresh_clone(tmp_path)
    proc = _run(["dvc", "exp", "run", "-S", "source=crawl", "-S", "sample.n_docs=50", "-S", "sample.eval_items=5"],
                repo, check=False)
    assert proc.returncode != 0
    assert "Running stage 'check'" in proc.stdout and "Running stage 'ingest'" not in proc.stdout
    assert ("check: sources.crawl_warc.paths: no files match 'data/raw/warc/**/*.warc*'; put warc files "
            "there, or mark the source `optional: true`\n") in proc.stderr
    assert "Traceback" not in proc.stderr
