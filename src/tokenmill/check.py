"""The configuration checked against the files present, before any stage does real work (the `check` stage).

A real crawl used to fail one stage at a time: a template glob with no files at ingest, a missing reference
corpus after four stages, a mixture bucket with no documents at the tenth. `check` runs right after the
embedded corpus is written and before ingest, and reports every problem at once, one line each, naming the
parameter and the fix:

- every section against its schema (tokenmill.params): types, ranges, enumerations, unknown keys, all of them;
- every source's globs match files, unless the source is `optional: true`; a file the source's format could
  read under its folders that no glob takes is a warning (it would appear nowhere);
- names that refer to other sections: a bucket, tier or source that nothing declares but that is one letter
  or two away from one that is (a typo) is a problem, not a silent no-op;
- every benchmark file reads (its first bad line named);
- every file the configuration names exists: benchmarks (unless optional), block-lists, quality positives;
- every path a stage reads from the configuration lies inside a dependency of that stage in dvc.yaml, so
  editing the file reruns the stage (data/user/<kind>/ is there for files a user adds);
- every mixture phase weights at least one bucket some source fills; buckets no source fills are a warning
  (the mixture spreads their weight over the others).

Its output, data/check/files.json, lists the files each source matched: ingest depends on it, so DVC always
runs the check first, and a change that leaves the file list alone (a mixture weight) reruns nothing below.
"""

from __future__ import annotations

import difflib
import glob
import os
import re
from collections import Counter
from pathlib import Path
from typing import Any, Iterable, Mapping

from tokenmill.decontam.readers import read_items
from tokenmill.ingest import SourceError, load_sources, static_dir
from tokenmill.params import problems as schema_problems

# What reads the files each parameter names, and where a user puts them: the folder is a dependency of
# exactly those stages in dvc.yaml, so editing a file there reruns them.
READERS = {
    "sources": (("ingest",), "data/raw/"),
    "quality.positives": (("quality",), "data/user/reference/"),
    "decontaminate.benchmarks": (("decontaminate", "evaluate"), "data/user/benchmarks/"),
    "filter.blocklists": (("filter",), "data/user/blocklists/"),
}


def _covered(pattern: str, deps: list[str], root: Path) -> bool:
    target = static_dir(pattern, root)
    return any(target == (d := (root / dep).resolve()) or target.is_relative_to(d) for dep in deps)


def _deps(dvc: Mapping[str, Any], stage: str) -> list[str]:
    spec = dvc.get("stages", {}).get(stage) or {}
    return [next(iter(d)) if isinstance(d, Mapping) else str(d) for d in spec.get("deps", [])]


def _matches(pattern: str, root: Path) -> list[str]:
    full = os.path.join(root, os.path.expanduser(pattern))
    return sorted(os.path.relpath(p, root) for p in glob.glob(full, recursive=True) if os.path.isfile(p))


# File names each source format reads (compressed or not), for the files a source's globs leave out.
READABLE = {"warc": r"\.warc(\.gz)?", "wet": r"\.wet(\.gz)?", "arc": r"\.arc(\.gz)?",
            "jsonl": r"\.jsonl?(\.gz|\.zst|\.zstd)?", "parquet": r"\.parquet", "text": r"\.txt(\.gz|\.zst|\.zstd)?"}


def _typo(key: str, name: str, known: Iterable[str]) -> str | None:
    """A problem line when `name` is not among `known` but close to one of them (a misspelling)."""
    known = sorted(set(known))
    if name in known:
        return None
    near = difflib.get_close_matches(name, known, n=1, cutoff=0.75)
    return f"{key}: {name!r} is not declared (known: {', '.join(known)}); did you mean {near[0]!r}?" if near else None


def by_source(params: Mapping[str, Any]) -> bool:
    """Whether mixture buckets start with the source's bucket (tokenize.buckets), so their names can be checked
    against the sources before anything runs; buckets named by topic or format are the domains stage's."""
    parts = (params.get("tokenize") or {}).get("buckets") or ["source"]
    return isinstance(parts, list) and parts[:1] == ["source"]


def _names(params: Mapping[str, Any], sources: list, buckets: set[str]) -> list[str]:
    """Names in one section that refer to another: buckets, tiers, sources. Only near misses are problems: a
    preset may weight a bucket a crawl lacks (a warning below), but `refrence` is a typo of `reference`."""
    out: list[str] = []

    def bucket_list(key: str, values) -> None:
        for i, name in enumerate(values or []):
            if isinstance(name, str) and (line := _typo(f"{key}[{i}]", name, buckets)):
                out.append(line)

    quality = params.get("quality") or {}
    bucket_list("quality.cut_buckets", quality.get("cut_buckets"))
    bucket_list("quality.negatives.buckets", (quality.get("negatives") or {}).get("buckets"))
    for i, name in enumerate((quality.get("positives") or {}).get("sources") or []):
        if isinstance(name, str) and (line := _typo(f"quality.positives.sources[{i}]", name, [s.name for s in sources])):
            out.append(line)
    bucket_list("dedup.lines.skip_buckets", ((params.get("dedup") or {}).get("lines") or {}).get("skip_buckets"))
    for section, names in (("tokenizer.sample_weights", (params.get("tokenizer") or {}).get("sample_weights")),
                           ("filter.buckets", (params.get("filter") or {}).get("buckets")),
                           ("tokenize.quality_tiers", (params.get("tokenize") or {}).get("quality_tiers"))):
        for name in names or {}:
            if line := _typo(f"{section}.{name}", name, buckets):
                out.append(line)
    tiers = (params.get("tokenize") or {}).get("quality_tiers") or {}
    phases = {phase: spec.get("weights") or {} for phase, spec in ((params.get("mixture") or {}).get("phases") or {}).items()
              if isinstance(spec, Mapping) and isinstance(spec.get("weights"), Mapping)}
    # A preset may weight buckets the sources lack (a crawl has no code): those names are known too, so a
    # misspelling of one (`refrence` beside `reference`) is caught even where no source fills either.
    # Of two such names the one written less often is the typo.
    if not by_source(params):
        return out  # buckets named by the domains stage's labels (t03, article ...): known once it has run
    uses = Counter(w.partition("/")[0] for weights in phases.values() for w in weights)
    uses.update((params.get("tokenizer") or {}).get("sample_weights") or {})
    for phase, weights in phases.items():
        for name in weights:
            key = f"mixture.phases.{phase}.weights.{name}"
            bucket, _, tier = name.partition("/")
            commoner = {b for b, n in uses.items() if n > uses[bucket]} if bucket not in buckets else set()
            if line := _typo(key, bucket, buckets | commoner):
                out.append(line)
            elif tier and bucket in tiers and isinstance(tiers[bucket], Mapping) and tier not in tiers[bucket]:
                out.append(f"{key}: bucket {bucket!r} has the quality tiers {', '.join(sorted(tiers[bucket]))} "
                           f"(tokenize.quality_tiers.{bucket}), not {tier!r}")
    return out


def _unmatched(src, matched: set[str], root: Path) -> list[str]:
    """Files under the source's folders that its format reads but that no source's glob takes."""
    pattern = re.compile(rf".*{READABLE.get(src.format, '$^')}$", re.I)
    out = set()
    for glob_pattern in src.paths:
        folder = static_dir(glob_pattern, root)
        if not folder.is_dir() or folder == root.resolve():
            continue  # the project root itself is not a crawl folder
        for path in folder.rglob("*"):
            if path.is_file() and pattern.match(path.name):
                rel = os.path.relpath(path, root)
                if rel not in matched:
                    out.add(rel)
    return sorted(out)


def _benchmark_problem(key: str, spec: Mapping, root: Path) -> str | None:
    """One line when a benchmark file exists but cannot be read to the end by its reader."""
    try:
        n = sum(1 for _ in read_items({**spec, "path": str(root / spec["path"])}))
    except Exception as exc:  # any reader failure is the file's, and named as such
        return f"{key}: {spec['path']} ({spec['format']}) cannot be read: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
    if n == 0 and not spec.get("optional"):
        return f"{key}: {spec['path']} ({spec['format']}) holds no items"
    return None


def check_config(params: Mapping[str, Any], dvc: Mapping[str, Any], root: str | Path = ".") -> dict:
    """{"problems": [...], "warnings": [...], "files": {source: [paths]}}; each message is one line."""
    root = Path(root)
    problems: list[str] = schema_problems(params)
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
        if not any(p.startswith("sources") for p in problems):  # the schema named it already
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
    matched = {f for paths in files.values() for f in paths}
    for src in sources:
        left = _unmatched(src, matched, root)
        if left:
            more = f" and {len(left) - 3} more" if len(left) > 3 else ""
            warnings.append(f"sources.{src.name}.paths: {len(left)} {src.format} files under its folders match no "
                            f"glob and are not read: {', '.join(left[:3])}{more}; add a glob for them")

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
        if not (root / path).exists():
            if not bench.get("optional"):
                problems.append(f"{key}: {bench.get('name', path)}: no file {path!r}; put it there, or mark it "
                                f"`optional: true`")
        elif not any(p.startswith(key) for p in problems) and (line := _benchmark_problem(key, bench, root)):
            problems.append(line)
        declared(key, "decontaminate.benchmarks", path)

    blocklists = (params.get("filter") or {}).get("blocklists") or {}
    for kind in ("domain_files", "url_files"):
        for path in blocklists.get(kind) or []:
            if not (root / path).exists():
                problems.append(f"filter.blocklists.{kind}: no file {path!r}")
            declared(f"filter.blocklists.{kind}", "filter.blocklists", path)

    # Mixture buckets ("web/high" is a quality tier of the documents of bucket "web").
    buckets = {s.bucket for s in sources if files.get(s.name)}
    problems += _names(params, sources, {s.bucket for s in sources})
    missing: set[str] = set()
    for name, phase in ((params.get("mixture") or {}).get("phases") or {}).items() if by_source(params) else ():
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
