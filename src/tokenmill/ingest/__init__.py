"""The ingest stage: declared sources -> document shards, a record row and a decision row per record.

Every record read gets a doc_id (contract 2). Records that become documents are `keep`; the rest are
`drop` with a reason (not_content, revisit, http_status, truncated_record, malformed_record, ...). One input
file is one unit of work and one output shard per table, so outputs do not depend on the executor.

Faults stay as small as they can: a damaged record is a drop, a damaged stretch of a file is a read error
at its offset, a file that yields nothing is an `empty_file` read error, and no input aborts the stage.
"""

from __future__ import annotations

import glob
import os
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping

from tokenmill import schema
from tokenmill.execution import make_executor
from tokenmill.ingest.readers import (ReadError, Record, read_archive, read_jsonl, read_parquet_rows,
                                      read_text_file)
from tokenmill.ingest.text import Drop, normalise, payload_to_text
from tokenmill.ingest.params import Ingest, Source as SourceSchema
from tokenmill.section import check_section
from tokenmill.runtime import StageResult, sha1_file

STAGE = "ingest"
TABLES = ("documents", "records", "decisions", "read_errors")


class SourceError(ValueError):
    """A source declaration that cannot be ingested; the message is one line naming the source."""


class Source(SourceSchema):
    """A declared source: its keys are the schema's (tokenmill.ingest.params.Source), plus its name."""

    name: str
    paths: list[str]

    @classmethod
    def from_config(cls, name: str, cfg: Mapping[str, Any]) -> "Source":
        problems = check_section(f"sources.{name}", cfg, SourceSchema)
        if problems:
            raise SourceError(f"source {name!r}: " + "; ".join(problems))
        cfg = SourceSchema.model_validate(dict(cfg)).model_dump()
        paths = cfg.pop("paths")
        return cls(name=name, paths=[paths] if isinstance(paths, str) else list(paths), **cfg)

    def files(self) -> list[tuple[Path, str]]:
        """(absolute path, name relative to root) for every matching file, sorted; fails fast if a glob matches
        nothing, unless the source is optional."""
        matched: set[Path] = set()
        for pattern in self.paths:
            hits = [Path(p) for p in glob.glob(os.path.expanduser(pattern), recursive=True)]
            hits = [p.resolve() for p in hits if p.is_file()]
            if not hits and not self.optional:
                raise SourceError(f"source {self.name!r}: no files match {pattern!r} (put files there, or mark "
                                  f"the source `optional: true`)")
            matched.update(hits)
        if not matched:
            return []
        files = sorted(matched)
        root = Path(self.root).resolve() if self.root else Path(os.path.commonpath([static_dir(p) for p in self.paths]))
        return [(p, os.path.relpath(p, root)) for p in files]


def static_dir(pattern: str, root: str | Path = ".") -> Path:
    """The directory part of a glob before its first wildcard, resolved against root: names stay put when new
    files match, and the check stage tests it against the reading stage's DVC deps."""
    parts = (Path(root) / os.path.expanduser(pattern)).parts
    static = []
    for part in parts:
        if glob.has_magic(part):
            break
        static.append(part)
    d = Path(*static) if static else Path(".")
    return (d.parent if len(static) == len(parts) else d).resolve()


def load_sources(cfg: Mapping[str, Mapping[str, Any]]) -> list[Source]:
    if not cfg:
        raise SourceError("no sources configured (params.yaml: sources)")
    return [Source.from_config(name, c) for name, c in cfg.items()]


@dataclass
class IngestTask:
    source: dict
    path: str
    file: str  # relative name recorded in the lineage
    shard: str  # output shard name
    out_dir: str
    extractor: str
    max_payload_bytes: int
    fields: dict = field(default_factory=dict)


def _records(task: IngestTask) -> Iterator[Record | ReadError]:
    path, fmt = Path(task.path), task.source["format"]
    if fmt in ("warc", "wet", "arc"):
        return read_archive(path, task.max_payload_bytes, fmt)
    if fmt == "jsonl":
        return read_jsonl(path, task.fields, task.max_payload_bytes)
    if fmt == "parquet":
        return read_parquet_rows(path, task.fields, task.max_payload_bytes)
    return read_text_file(path, task.max_payload_bytes)


# Lone UTF-16 surrogates: valid in JSON ("\ud800") and in Python strings, but not encodable as UTF-8, so
# Parquet cannot store them (one such JSONL line used to abort the whole stage at the shard write).
_SURROGATE = re.compile("[\ud800-\udfff]")


def _storable(value: str | None) -> tuple[str | None, int]:
    """(value with lone surrogates replaced by U+FFFD, how many were replaced)."""
    if value is None or not _SURROGATE.search(value):
        return value, 0
    return _SURROGATE.subn("\ufffd", value)


def ingest_file(task: IngestTask) -> dict:
    """Worker: read one file, write its four shards, return counts by action:reason."""
    src = task.source
    docs, records, decisions, errors = [], [], [], []
    counts: Counter[str] = Counter()
    items = 0
    for item in _records(task):
        items += 1
        if isinstance(item, ReadError):
            errors.append({"source": src["name"], "file": task.file, "offset": max(0, item.offset),
                           "error": " ".join(_storable(item.error)[0].split())})  # one line
            continue
        meta = {k: _storable(getattr(item, k))[0] for k in ("url", "record_id", "crawl_date", "content_type")}
        doc_id = schema.make_doc_id(src["name"], task.file, item.locator, item.payload_sha1)
        records.append({"doc_id": doc_id, "source": src["name"], "bucket": src["bucket"], "file": task.file,
                        "locator": item.locator, "record_type": _storable(item.record_type)[0],
                        **meta, "payload_bytes": item.payload_bytes, "payload_sha1": item.payload_sha1})
        repaired = 0
        try:
            if item.drop is not None:
                raise item.drop
            used = None
            if item.text is not None:
                text, repaired = _storable(item.text)
                text, charset = normalise(text), "utf-8"
                if not text.strip():
                    raise Drop("empty_text", "empty text field")
            else:
                text, charset, used = payload_to_text(item.payload, item.content_type, task.extractor)
        except Drop as drop:
            decisions.append(schema.decision(doc_id, STAGE, "drop", drop.reason,
                                             {"payload_bytes": item.payload_bytes},
                                             {"error": drop.detail} if drop.detail else None))
            counts[f"drop:{drop.reason}"] += 1
            continue
        except Exception as exc:  # an extractor crashing on one page costs that page, not the stage
            decisions.append(schema.decision(doc_id, STAGE, "drop", "extraction_failed",
                                             {"payload_bytes": item.payload_bytes},
                                             {"error": _storable(f"{type(exc).__name__}: {exc}"[:500])[0]}))
            counts["drop:extraction_failed"] += 1
            continue
        docs.append({"doc_id": doc_id, "text": text, "source": src["name"], "bucket": src["bucket"],
                     "licence": src["licence"], "snapshot": src.get("snapshot") or "", **meta,
                     "charset": charset, "file": task.file, "locator": item.locator})
        details = {}
        if used and used != task.extractor:
            details["extractor"] = f"{used} (fallback: {task.extractor} found no text)"
        if repaired:
            details["repaired"] = f"{repaired} lone surrogate(s) replaced by U+FFFD"
        decisions.append(schema.decision(doc_id, STAGE, "keep", "extracted",
                                         {"payload_bytes": item.payload_bytes, "text_chars": len(text)}, details))
        counts["keep:extracted"] += 1
    if items == 0:
        errors.append({"source": src["name"], "file": task.file, "offset": 0,
                       "error": "empty_file: the file holds no records"})

    out = Path(task.out_dir)
    for table, rows, sch in (("documents", docs, schema.DOCUMENT), ("records", records, schema.RECORD),
                             ("decisions", decisions, schema.DECISION), ("read_errors", errors, schema.READ_ERROR)):
        schema.write_parquet(rows, sch, out / table / f"{task.shard}.parquet")
    return {"counts": dict(counts), "sha1": sha1_file(task.path), "file": f"{src['name']}:{task.file}",
            "read_errors": len(errors), "first_error": errors[0]["error"] if errors else None}


def _nothing_read(results: list[dict]) -> str:
    """One line for a crawl that yielded no document: every file, its read errors or why its records went."""
    parts = []
    for r in results:
        first = r["first_error"] if r["first_error"] is None or len(r["first_error"]) <= 160 else \
            r["first_error"][:160] + "…"
        why = f"{r['read_errors']} read errors, first: {first}" if r["read_errors"] else \
            ", ".join(f"{n} {k}" for k, n in sorted(r["counts"].items())) or "no records"
        parts.append(f"{r['file']} ({why})")
    return f"0 documents from {len(results)} source files, so every later stage would be empty: " + "; ".join(parts)


def ingest_sources(sources: list[Source], params: Ingest, execution_cfg: Mapping | None,
                   out_dir: str | Path) -> StageResult:
    """Every file of every source (load_sources) into out_dir: document shards and one decision per record;
    each file's digest is an input of the run. params: the ingest section, resolved by the stage script."""
    extractor = params.extractor
    tasks_by_source = [(s, s.files()) for s in sources]  # resolve every glob before any work starts
    tasks = []
    for src, files in tasks_by_source:
        fields = {"text_field": src.text_field, "url_field": src.url_field,
                  "id_field": src.id_field, "date_field": src.date_field}
        for i, (path, rel) in enumerate(files):
            tasks.append(IngestTask(source=src.model_dump(), path=str(path), file=rel,
                                    shard=f"{src.name}-{i:05d}", out_dir=str(out_dir), extractor=extractor,
                                    max_payload_bytes=params.max_payload_bytes,
                                    fields=fields))
    result = StageResult()
    with make_executor(execution_cfg, result.timing) as ex:
        results = ex.map(ingest_file, tasks, desc="ingest")
    if tasks and not any(k.startswith("keep:") for r in results for k in r["counts"]):
        raise SourceError(_nothing_read(results))
    for r in results:
        result.add_counts(r["counts"])
        result.input_hashes[r["file"]] = r["sha1"]
    result.extra["read_errors"] = sum(r["read_errors"] for r in results)
    result.extra["files"] = len(tasks)
    result.extra["source_files"] = dict(sorted(result.input_hashes.items()))  # "source:file" -> sha1, for the lineage
    return result
