"""The configuration checked against the files present, before any stage does real work (the `check` stage).

A real crawl used to fail one stage at a time: a template glob with no files at ingest, a missing reference
corpus after four stages, a mixture bucket with no documents at the tenth. `check` runs right after the
embedded corpus is written and before ingest, and reports every problem at once, one line each, naming the
parameter and the fix:

- every source's globs match files, unless the source is `optional: true`;
- every file the configuration names exists: benchmarks (unless optional), block-lists, quality positives;
- every path a stage reads from the configuration lies inside a dependency of that stage in dvc.yaml, so
  editing the file reruns the stage (data/user/<kind>/ is there for files a user adds);
- every mixture phase weights at least one bucket some source fills; buckets no source fills are a warning
  (the mixture spreads their weight over the others).

Its output, data/check/files.json, lists the files each source matched: ingest depends on it, so DVC always
runs the check first, and a change that leaves the file list alone (a mixture weight) reruns nothing below.
"""

from __future__ import annotations

import glob
import os
from pathlib import Path
from typing import Any, Mapping

# What reads the files each parameter names, and where a user puts them: the folder is a dependency of
# exactly those stages in dvc.yaml, so editing a file there reruns them.
READERS = {
    "sources": (("ingest",), "data/raw/"),
    "quality.positives": (("quality",), "data/user/reference/"),
    "decontaminate.benchmarks": (("decontaminate", "evaluate"), "data/user/benchmarks/"),
    "filter.blocklists": (("filter",), "data/user/blocklists/"),
}


def _covered(pattern: str, deps: list[str], root: Path) -> bool:
    from tokenmill.ingest import static_dir

    target = static_dir(pattern, root)
    return any(target == (d := (root / dep).resolve()) or target.is_relative_to(d) for dep in deps)


def _deps(dvc: Mapping[str, Any], stage: str) -> list[str]:
    spec = dvc.get("stages", {}).get(stage) or {}
    return [next(iter(d)) if isinstance(d, Mapping) else str(d) for d in spec.get("deps", [])]


def _matches(pattern: str, root: Path) -> list[str]:
    full = os.path.join(root, os.path.expanduser(pattern))
    return sorted(os.path.relpath(p, root) for p in glob.glob(full, recursive=True) if os.path.isfile(p))


def check_config(params: Mapping[str, Any], dvc: Mapping[str, Any], root: str | Path = ".") -> dict:
    """{"problems": [...], "warnings": [...], "files": {source: [paths]}}; each message is one line."""
    from tokenmill.ingest import SourceError, load_sources

    root = Path(root)
    problems: list[str] = []
    warnings: list[str] = []
    files: dict[str, list[str]] = {}

    def declared(key: str, section: str, pattern: str) -> None:
        stages, home = READERS[section]
        for stage in stages:
            if stage in dvc.get("stages", {}) and not _covered(pattern, _deps(dvc, stage), root):
                problems.append(f"{key}: {pattern!r} is not a dependency of the {stage} stage in dvc.yaml, so "
                                f"editing it would rerun nothing; move it under {home}")

    # Sources: declarations valid, globs matching (or the source optional), files inside ingest's deps.
    try:
        sources = load_sources(params.get("sources") or {})
    except SourceError as exc:
        problems.append(f"sources: {exc}")
        sources = []
    for src in sources:
        found: set[str] = set()
        for pattern in src.paths:
            hits = _matches(pattern, root)
            if not hits and not src.optional:
                problems.append(f"sources.{src.name}.paths: no files match {pattern!r}; put {src.format} files "
                                f"there, or mark the source `optional: true`")
            found.update(hits)
            declared(f"sources.{src.name}.paths", "sources", pattern)
        files[src.name] = sorted(found)
    if sources and not any(files.values()):
        problems.append("sources: no source has any file; put crawl files under data/raw/ (see data/raw/README.md)")

    # Files the stages read: quality positives, benchmarks, block-lists.
    quality = (params.get("quality") or {}).get("positives") or {}
    names = {s.name for s in sources}
    from_sources = [s for s in quality.get("sources") or [] if s in names and files.get(s)]
    positives = []
    for pattern in quality.get("paths") or []:
        declared("quality.positives.paths", "quality.positives", pattern)
        if not _matches(pattern, root):
            problems.append(f"quality.positives.paths: no files match {pattern!r}")
        positives.append(pattern)
    if not from_sources and not positives:
        reference = quality.get("reference")
        if not reference:
            problems.append("quality.positives: no positives: none of positives.sources "
                            f"{list(quality.get('sources') or [])} is declared and positives.paths and "
                            "positives.reference are empty; name reference texts in positives.paths")
        else:
            declared("quality.positives.reference", "quality.positives", reference)
            if not _matches(reference, root):
                problems.append(f"quality.positives.reference: no files match {reference!r}; the sample stage "
                                f"writes them (sample.n_docs > 0), or name your own in quality.positives.paths")

    for i, bench in enumerate((params.get("decontaminate") or {}).get("benchmarks") or []):
        key = f"decontaminate.benchmarks[{i}]"
        path = bench.get("path") if isinstance(bench, Mapping) else None
        if not path:
            problems.append(f"{key}: needs name, format and path")
            continue
        if not (root / path).exists() and not bench.get("optional"):
            problems.append(f"{key}: {bench.get('name', path)}: no file {path!r}; put it there, or mark it "
                            f"`optional: true`")
        declared(key, "decontaminate.benchmarks", path)

    blocklists = (params.get("filter") or {}).get("blocklists") or {}
    for kind in ("domain_files", "url_files"):
        for path in blocklists.get(kind) or []:
            if not (root / path).exists():
                problems.append(f"filter.blocklists.{kind}: no file {path!r}")
            declared(f"filter.blocklists.{kind}", "filter.blocklists", path)

    # Mixture buckets ("web/high" is a quality tier of the documents of bucket "web").
    buckets = {s.bucket for s in sources if files.get(s.name)}
    missing: set[str] = set()
    for name, phase in ((params.get("mixture") or {}).get("phases") or {}).items():
        weights = (phase or {}).get("weights") or {}
        filled = [b for b, w in weights.items() if w and b.split("/")[0] in buckets]
        missing.update(b for b, w in weights.items() if w and b.split("/")[0] not in buckets)
        if buckets and not filled:
            problems.append(f"mixture.phases.{name}.weights: none of {sorted(weights)} is a bucket of the "
                            f"sources ({', '.join(sorted(buckets))}); weight one of those")
    if missing and not problems:
        warnings.append(f"mixture: no source fills {', '.join(sorted(missing))}; the mixture spreads their "
                        f"weight over {', '.join(sorted(buckets))}")
    return {"problems": problems, "warnings": warnings, "files": files}
