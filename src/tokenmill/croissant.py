"""A release of the curated corpus: a Croissant 1.0 file with the Responsible-AI fields, and a Hugging Face
dataset card, both filled from the lineage database.

What a release holds (out_dir, default `release/`; `tokenmill release`):

  documents/     the last curation stage's document shards (decontaminate in the default DAG), as written
  token_index/   the token index shards of those documents (doc_id, source, bucket, shard, offset, length)
  tokens/        the token files they point to (`shard` is relative to the release, as to the token stage)
  tokenizer/     the tokenizer whose ids the token files hold (SentencePiece model, Hugging Face tokenizer.json)
  croissant.json Croissant 1.0 JSON-LD, built with mlcroissant's classes: every file with its sha256, record
                 sets for the documents and the token index, and the RAI extension (rai:dataCollection ...)
  README.md      the dataset card: YAML metadata (licences, languages, size, configs) and the same numbers

Every number (documents per source and licence, tokens, each stage's documents in and out and reasons,
languages, personal information replaced, benchmark overlaps found and removed, crawl dates) is one SQL query
over lineage.duckdb, which is what the stage outputs say (docs/lineage.md); nothing is counted again from the
files. Stage parameters are the run records' (stage_runs), else params.yaml's. Files are hard links to the
stage outputs where the file system allows (a copy elsewhere): the same bytes, whose sha256 the Croissant file
states. The same build gives the same release, byte for byte: no clock is read.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import yaml

from tokenmill.lineage.connect import DB_NAME, connect
from tokenmill.runtime import read_manifest, remove_stale, swap_into_place, temporary

CROISSANT, CARD = "croissant.json", "README.md"
PARQUET, BINARY = "application/x-parquet", "application/octet-stream"
NAME = "tokenmill-curated-corpus"
CONFORMS_TO = ["http://mlcommons.org/croissant/1.0", "http://mlcommons.org/croissant/RAI/1.0"]
SPEC_NAMES = {"rai:dataCollectionTimeFrame": "rai:dataCollectionTimeframe",
              "rai:dataDataManipulationProtocol": "rai:dataManipulationProtocol"}
# crawl_date as a UTC instant. It is kept as found; one without an offset is read as UTC (WARC-Date always is
# UTC), since DuckDB would read it in the machine's time zone and the release must not depend on the machine.
CRAWLED = ("TRY_CAST(CASE WHEN regexp_matches(crawl_date, '[0-9]{2}:[0-9]{2}(:[0-9]{2}([.][0-9]+)?)?"
           "(Z|[+-][0-9]{2}(:?[0-9]{2})?)$') THEN crawl_date "
           "WHEN regexp_matches(crawl_date, '^[0-9]{4}-[0-9]{2}-[0-9]{2}$') THEN crawl_date || ' 00:00:00Z' "
           "ELSE crawl_date || 'Z' END AS TIMESTAMPTZ)")
# The Hugging Face Hub's size classes (dataset cards' `size_categories`), by number of documents.
SIZES = [(1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M"),
         (10_000_000, "1M<n<10M"), (100_000_000, "10M<n<100M"), (1_000_000_000, "100M<n<1B")]
# What each column means (docs/lineage.md, src/tokenmill/schema.py): the record sets' field descriptions.
COLUMNS = {
    "doc_id": "The document's identity, assigned once at ingest: blake2b-96(source, file, locator, sha1(payload)).",
    "text": "The document's text after every curation stage (personal information replaced, repeated lines removed).",
    "source": "The configured source the document was read from.",
    "bucket": "The source's bucket (web, code, reference, legal ...); in the token index the mixture bucket "
              "(web/high ...).",
    "licence": "The source's licence, as configured.",
    "snapshot": "The crawl snapshot or dataset version of the source.",
    "url": "WARC-Target-URI, or the source's url field.",
    "record_id": "WARC-Record-ID, or the source's id field.",
    "crawl_date": "WARC-Date, or the source's date field, as found (ISO 8601).",
    "content_type": "HTTP Content-Type of the response.",
    "charset": "The charset the payload was decoded with.",
    "file": "The input file, relative to the source's root.",
    "locator": "Where in the file the record starts: byte offset, line:N, row:N or file.",
    "shard": "The token file, relative to the release (flat uint16/uint32 token ids).",
    "offset": "Position of the document's first token in the token file.",
    "length": "The document's tokens (an end-of-text token follows each document and is not counted).",
}


def write_release(project: str | Path, out_dir: str | Path) -> dict:
    """Write the release of the built project's curated corpus into out_dir (replaced whole, atomically: it
    must be absent, empty or an earlier release). Returns the numbers both files state."""
    project = Path(project).resolve()
    out_dir = Path(out_dir).resolve()
    db = project / "lineage" / DB_NAME
    if not db.is_file():
        raise FileNotFoundError(f"no lineage database at {db}: run `dvc repro lineage` first")
    if out_dir.exists() and any(out_dir.iterdir()) and not (out_dir / CROISSANT).is_file():
        raise ValueError(f"{out_dir} exists and is not a release (no {CROISSANT}): choose a folder of its own")
    con = connect(db)
    try:
        facts = _facts(con, project)
        kept = con.sql("SELECT doc_id FROM documents WHERE fate = 'kept'").to_arrow_table()["doc_id"]
    finally:
        con.close()
    files = _files(project, facts, kept)

    remove_stale(out_dir)  # what a killed `tokenmill release` left beside it
    tmp = temporary(out_dir)
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        entries = []
        for kind, src, rel in files:
            dst = tmp / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            try:
                # The same bytes at no cost (shards run to gigabytes). Stages replace their outputs by rename,
                # never in place, so a later run leaves the release's files as they were.
                os.link(src, dst)
            except OSError:
                shutil.copyfile(src, dst)  # another file system
            with open(src, "rb") as f:
                entries.append({"kind": kind, "path": rel, "bytes": src.stat().st_size,
                                "sha256": hashlib.file_digest(f, "sha256").hexdigest()})
        facts["files"] = entries
        (tmp / CROISSANT).write_text(json.dumps(croissant(facts, tmp), indent=2, ensure_ascii=False) + "\n",
                                     encoding="utf-8")
        (tmp / CARD).write_text(card(facts), encoding="utf-8")
        swap_into_place(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return facts


# ---------------------------------------------------------------------------------------------------------
# The numbers: one query each over the lineage database


def _rows(con, sql: str, params: list | None = None) -> list[dict]:
    rel = con.execute(sql, params or [])
    names = [d[0] for d in rel.description]
    return [dict(zip(names, row)) for row in rel.fetchall()]


def _share(part: int, whole: int) -> float:
    return part / whole if whole else 0.0


def _utc(value: datetime.datetime | None) -> str | None:
    if value is None:
        return None
    if value.tzinfo is not None:  # DuckDB gives TIMESTAMPTZ in the session's zone: state it in UTC
        value = value.astimezone(datetime.timezone.utc).replace(tzinfo=None)
    return value.isoformat() + "Z"


def _facts(con, project: Path) -> dict[str, Any]:
    stages = _rows(con, "SELECT stage, stage_order, input_stage, manifest FROM stages "
                        "WHERE stage_order IS NOT NULL ORDER BY stage_order")
    if not stages:
        raise ValueError(f"{project / 'lineage' / DB_NAME} records no curation stage: run `dvc repro lineage`")
    last = stages[-1]["stage"]
    token = _rows(con, "SELECT stage, manifest FROM stages WHERE stage_order IS NULL AND input_stage = ?", [last])
    if not token:
        raise ValueError(f"{project / 'lineage' / DB_NAME} has no token stage reading {last}: "
                         f"run `dvc repro lineage` after the token stage")
    tables = {r["name"] for r in _rows(con, "SHOW TABLES")}

    total = con.execute("SELECT count(*), coalesce(sum(final_text_chars), 0) FROM documents "
                        "WHERE fate = 'kept'").fetchone()
    documents, chars = int(total[0]), int(total[1])
    # Tokens of the curated documents only: the token index also holds what the token stage planted itself
    # (tokenize.canaries), which is no document of the corpus and stays out of the release.
    curated_tokens = "(SELECT t.* FROM token_index t JOIN documents d USING (doc_id) WHERE d.fate = 'kept')"
    tokens = int(con.execute(f"SELECT coalesce(sum(length), 0) FROM {curated_tokens}").fetchone()[0])

    crawled = CRAWLED.replace("crawl_date", "d.crawl_date")
    sources = _rows(con, f"""
        SELECT s.source, s.format, s.bucket, s.licence, s.snapshot, s.files, s.records, s.read_errors,
               count(d.doc_id) AS documents, coalesce(sum(d.final_text_chars), 0) AS chars,
               coalesce(any_value(t.tokens), 0) AS tokens,
               min({crawled}) AS first_crawled,
               max({crawled}) AS last_crawled,
               count(d.doc_id) FILTER ({crawled} IS NULL) AS undated
        FROM sources s
        LEFT JOIN documents d ON d.source = s.source AND d.fate = 'kept'
        LEFT JOIN (SELECT source, sum(length) AS tokens FROM {curated_tokens} GROUP BY source) t ON t.source = s.source
        GROUP BY ALL ORDER BY s.source""")
    for s in sources:
        s["first_crawled"], s["last_crawled"] = _utc(s["first_crawled"]), _utc(s["last_crawled"])
        s["document_share"], s["token_share"] = _share(s["documents"], documents), _share(s["tokens"], tokens)
    licences = _rows(con, f"""
        SELECT s.licence, count(d.doc_id) AS documents, coalesce(sum(t.length), 0) AS tokens,
               string_agg(DISTINCT s.source, ', ' ORDER BY s.source) AS sources
        FROM documents d JOIN sources s USING (source) LEFT JOIN {curated_tokens} t USING (doc_id)
        WHERE d.fate = 'kept' GROUP BY ALL ORDER BY documents DESC, s.licence""")
    for lic in licences:
        lic["document_share"], lic["token_share"] = _share(lic["documents"], documents), _share(lic["tokens"], tokens)
    buckets = _rows(con, f"SELECT bucket, count(*) AS documents, sum(length) AS tokens FROM {curated_tokens} "
                         "GROUP BY ALL ORDER BY bucket")
    dated = con.execute(f"SELECT min({CRAWLED}), max({CRAWLED}), count(*) FILTER ({CRAWLED} IS NOT NULL) "
                        "FROM documents WHERE fate = 'kept'").fetchone()

    curation = []
    for st in stages:
        counts = _rows(con, "SELECT action, reason, count(*) AS n FROM decisions WHERE stage = ? "
                            "GROUP BY ALL ORDER BY action, n DESC, reason", [st["stage"]])
        by_action = {a: sum(c["n"] for c in counts if c["action"] == a) for a in ("keep", "modify", "drop")}
        run, params = _stage_params(con, project, st["stage"])
        curation.append({"stage": st["stage"], "documents_in": sum(by_action.values()),
                         "kept": by_action["keep"], "modified": by_action["modify"], "dropped": by_action["drop"],
                         "documents_out": by_action["keep"] + by_action["modify"],
                         "reasons": [{"action": c["action"], "reason": c["reason"], "documents": c["n"]}
                                     for c in counts],
                         "run_id": run, "params": params})

    # The language the first measuring stage identified (filter: details.language); buckets the language
    # filter skips (code) have none.
    languages = _rows(con, """
        WITH lang AS (
            SELECT doc_id, arg_min(json_extract_string(details, '$.language'), stage_order) AS language
            FROM decisions WHERE details LIKE '%"language"%' GROUP BY doc_id)
        SELECT coalesce(l.language, 'und') AS language, count(*) AS documents,
               string_agg(DISTINCT d.bucket, ', ' ORDER BY d.bucket) AS buckets
        FROM documents d LEFT JOIN lang l USING (doc_id) WHERE d.fate = 'kept'
        GROUP BY ALL ORDER BY documents DESC, language""")
    for lang in languages:
        lang["share"] = _share(lang["documents"], documents)

    return {"name": NAME, "last_stage": last, "token_stage": token[0]["stage"],
            "digests": {last: json.loads(stages[-1]["manifest"]).get("digest"),
                        token[0]["stage"]: json.loads(token[0]["manifest"]).get("digest")},
            "token_manifest": json.loads(token[0]["manifest"]),
            "documents": documents, "text_chars": chars, "tokens": tokens,
            "sources": sources, "licences": licences, "buckets": buckets, "curation": curation,
            "records_read": sum(s["records"] or 0 for s in sources),
            "read_errors": sum(s["read_errors"] or 0 for s in sources),
            "collection": {"first": _utc(dated[0]), "last": _utc(dated[1]), "dated": int(dated[2]),
                           "undated": documents - int(dated[2])},
            "languages": languages, "pii": _pii(con, curation),
            "contamination": _contamination(con, tables, curation),
            "left_out": _rows(con, "SELECT t.source, t.bucket, count(*) AS documents, sum(t.length) AS tokens, "
                                   "string_agg(DISTINCT t.shard, ', ' ORDER BY t.shard) AS shards FROM token_index t "
                                   "LEFT JOIN documents d ON d.doc_id = t.doc_id AND d.fate = 'kept' "
                                   "WHERE d.doc_id IS NULL GROUP BY ALL ORDER BY ALL")}


def _stage_params(con, project: Path, stage: str) -> tuple[str | None, dict | None]:
    """The stage's parameters as its run record has them (stage_runs: what the run that wrote the output read),
    else params.yaml's section of that name (an output pulled from a remote has no run record here)."""
    run = _rows(con, "SELECT run_id, params FROM stage_runs WHERE stage = ?", [stage])
    if run:
        return run[0]["run_id"], json.loads(run[0]["params"] or "{}")
    params = project / "params.yaml"
    section = (yaml.safe_load(params.read_text()) or {}).get(stage) if params.is_file() else None
    return None, section


def _pii(con, curation: list[dict]) -> dict:
    """Personal information replaced: the stage whose scores count replacements (pii_<type>)."""
    stage = next((c for c in curation if any(r["reason"] == "redacted" for r in c["reasons"])), None) or \
        next((c for c in curation if c["stage"] == "pii"), None)
    if stage is None:
        return {}
    per_type = _rows(con, """
        WITH e AS (SELECT doc_id, unnest(map_entries(scores), recursive := true) FROM decisions WHERE stage = ?)
        SELECT replace(e.key, 'pii_', '') AS type, sum(e.value)::BIGINT AS replaced,
               count(*) FILTER (e.value > 0) AS documents,
               coalesce(sum(e.value) FILTER (d.fate = 'kept'), 0)::BIGINT AS replaced_in_corpus
        FROM e JOIN documents d USING (doc_id) WHERE e.key LIKE 'pii_%' GROUP BY ALL ORDER BY type""",
                     [stage["stage"]])
    redacted = con.execute("SELECT count(*), count(*) FILTER (d.fate = 'kept') FROM decisions x "
                           "JOIN documents d USING (doc_id) WHERE x.stage = ? AND x.action = 'modify'",
                           [stage["stage"]]).fetchone()
    enabled = (stage["params"] or {}).get("enabled")
    return {"stage": stage["stage"], "types": per_type, "documents_redacted": int(redacted[0]),
            "redacted_in_corpus": int(redacted[1]),
            "enabled": sorted(k for k, v in enabled.items() if v) if isinstance(enabled, dict) else None,
            "placeholders": (stage["params"] or {}).get("tokens")}


def _contamination(con, tables: set[str], curation: list[dict]) -> dict:
    """Benchmark overlaps found and what became of the documents (the contamination table, per benchmark)."""
    if "contamination" not in tables:
        return {}
    licence = "b.licence" if "benchmarks" in tables else "NULL"
    join = "LEFT JOIN benchmarks b USING (benchmark)" if "benchmarks" in tables else ""
    per_benchmark = _rows(con, f"""
        SELECT c.benchmark, any_value({licence}) AS licence,
               count(*) AS overlaps, count(*) FILTER (c.contaminated) AS contaminating,
               count(DISTINCT c.item_id) FILTER (c.contaminated) AS items,
               count(DISTINCT c.doc_id) FILTER (c.contaminated AND d.fate = 'dropped') AS removed,
               count(DISTINCT c.doc_id) FILTER (c.contaminated AND d.fate = 'kept') AS kept_flagged
        FROM contamination c JOIN documents d USING (doc_id) {join}
        GROUP BY ALL ORDER BY c.benchmark""")
    total = con.execute("""
        SELECT count(*), count(*) FILTER (c.contaminated),
               count(DISTINCT c.doc_id) FILTER (c.contaminated),
               count(DISTINCT c.doc_id) FILTER (c.contaminated AND d.fate = 'dropped'),
               count(DISTINCT c.doc_id) FILTER (c.contaminated AND d.fate = 'kept'),
               count(DISTINCT c.doc_id) FILTER (NOT c.contaminated AND d.fate = 'kept')
        FROM contamination c JOIN documents d USING (doc_id)""").fetchone()
    # The benchmarks the decontaminating stage read (its parameters): also those it found nothing in.
    listed = next((c["params"]["benchmarks"] for c in reversed(curation)
                   if isinstance((c["params"] or {}).get("benchmarks"), list)), [])
    checked = sorted({b["name"] for b in listed if isinstance(b, dict) and "name" in b}
                     | {b["benchmark"] for b in per_benchmark})
    return {"overlaps": total[0], "contaminating": total[1], "documents": total[2], "removed": total[3],
            "kept_flagged": total[4], "kept_weak_overlap": total[5], "benchmarks": per_benchmark,
            "benchmarks_checked": checked}


# ---------------------------------------------------------------------------------------------------------
# The files


def _files(project: Path, facts: dict, kept: pa.ChunkedArray) -> list[tuple[str, Path, str]]:
    """(kind, stage output file, path in the release) of every file released, in a fixed order."""
    data = project / "data"
    out: list[tuple[str, Path, str]] = []
    for stage in (facts["last_stage"], facts["token_stage"]):
        folder = data / stage
        digest = read_manifest(folder).get("digest")  # FileNotFoundError names the folder
        if digest != facts["digests"][stage]:
            raise ValueError(f"{folder} is not what {project / 'lineage' / DB_NAME} describes (digest {digest} "
                             f"there, {facts['digests'][stage]} in the lineage): run `dvc repro lineage`")
    documents = sorted((data / facts["last_stage"] / "documents").glob("*.parquet"))
    if not documents:
        raise FileNotFoundError(f"no document shards in {data / facts['last_stage'] / 'documents'}")
    out += [("documents", p, f"documents/{p.name}") for p in documents]

    token_dir = data / facts["token_stage"]
    shards = set()
    for p in sorted((token_dir / "index").glob("*.parquet")):
        ids = pq.read_table(p, columns=["doc_id", "shard"])
        curated = pc.is_in(ids["doc_id"], value_set=kept)
        n = pc.sum(curated).as_py() or 0
        if n == 0:
            continue  # the token stage's own plantings (canaries): not documents of the corpus
        if n != len(ids):
            raise ValueError(f"{p} mixes curated documents with other token rows: cannot release it alone")
        out.append(("token_index", p, f"token_index/{p.name}"))
        shards.update(ids["shard"].to_pylist())
    for shard in sorted(shards):
        if Path(shard).is_absolute() or ".." in Path(shard).parts:
            raise ValueError(f"token index shard {shard!r} is not a path inside {token_dir}")
        if not (token_dir / shard).is_file():
            raise FileNotFoundError(f"token file {token_dir / shard} (named in the token index) is missing")
        out.append(("tokens", token_dir / shard, shard))
    # The tokenizer the ids belong to: without it the token files cannot be read back into text.
    tokenizer = data / "tokenizer"
    for p in [tokenizer / "tokenizer.model", *sorted((tokenizer / "hf").glob("*"))]:
        if p.is_file():
            out.append(("tokenizer", p, f"tokenizer/{p.relative_to(tokenizer)}"))
    return out


# ---------------------------------------------------------------------------------------------------------
# Croissant


def _pct(share: float) -> str:
    return f"{100 * share:.1f}%"


def _json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _data_type(t: pa.DataType):
    import mlcroissant as mlc  # 2.1 s to import (python -X importtime): only when a release is written or read

    if pa.types.is_integer(t):
        return mlc.DataType.INTEGER
    if pa.types.is_floating(t):
        return mlc.DataType.FLOAT
    if pa.types.is_boolean(t):
        return mlc.DataType.BOOL
    return mlc.DataType.TEXT


def _record_set(name: str, description: str, file_set: str, schema: pa.Schema):
    import mlcroissant as mlc  # 2.1 s to import (python -X importtime): only when a release is written or read

    fields = [mlc.Field(id=f"{name}/{f.name}", name=f.name, description=COLUMNS.get(f.name),
                        data_types=[_data_type(f.type)],
                        source=mlc.Source(file_set=file_set, extract=mlc.Extract(column=f.name)))
              for f in schema]
    return mlc.RecordSet(id=name, name=name, description=description, fields=fields, key=[f"{name}/doc_id"])


def rai(facts: dict) -> dict[str, Any]:
    """The Responsible-AI fields (Croissant RAI 1.0 vocabulary), as text and dates from the lineage numbers."""
    pii, cont, col = facts["pii"], facts["contamination"], facts["collection"]
    collection = "; ".join(
        f"{s['source']}: {s['records']} records read from {s['files']} {s['format']} files "
        f"(bucket {s['bucket']}, snapshot {s['snapshot']}, licence {s['licence']}), {s['read_errors']} read errors, "
        f"{s['documents']} documents in the release" for s in facts["sources"])
    # Crawl archives are collected from the web; the other formats are existing collections used again.
    kinds = sorted({"Web Scraping" if s["format"] in ("warc", "wet", "arc") else "Secondary Data analysis"
                    for s in facts["sources"]})
    steps = []
    for st in facts["curation"]:
        reasons = ", ".join(f"{r['action']}:{r['reason']} {r['documents']}" for r in st["reasons"])
        steps.append(f"{st['stage']}: {st['documents_in']} documents in, {st['documents_out']} out "
                     f"({st['kept']} kept, {st['modified']} modified, {st['dropped']} dropped; {reasons}); "
                     f"run {st['run_id'] or 'without a run record'}; parameters {_json(st['params'])}")
    if cont:
        steps.append(f"benchmark contamination: {cont['overlaps']} overlaps found with "
                     f"{len(cont['benchmarks_checked'])} benchmarks, {cont['contaminating']} reached the limits in "
                     f"{cont['documents']} documents; {cont['removed']} documents removed, {cont['kept_flagged']} "
                     f"kept flagged")
    ingest = facts["curation"][0]
    missing = (f"{facts['records_read']} records read, {facts['read_errors']} read errors (a file that could not be "
               f"read past some point: the lineage table read_errors). Records the first stage ({ingest['stage']}) "
               f"did not turn into documents: " + ", ".join(f"{r['reason']} {r['documents']}"
                                                           for r in ingest["reasons"] if r["action"] == "drop"))
    changed = [f"{st['stage']}: {r['reason']} {r['documents']}" for st in facts["curation"] for r in st["reasons"]
               if r["action"] == "modify"]
    out: dict[str, Any] = {
        "data_collection": collection, "data_collection_type": kinds, "data_collection_missing_data": missing,
        "data_collection_raw_data": f"{len(facts['sources'])} sources: the lineage tables sources and "
                                    "source_files list every input file with its sha1.",
        "data_preprocessing_protocol": steps,
        "data_manipulation_protocol": "Texts changed by a curation stage (documents): " + (
            "; ".join(changed) if changed else "none") + ". doc_id is never recomputed: it names the record read.",
        "data_use_cases": ["Pretraining language models (the token files and the token index are the training "
                           "input the pipeline planned its mixture from)."],
        "data_biases": [
            "Documents per source: " + ", ".join(f"{s['source']} {s['documents']} ({_pct(s['document_share'])})"
                                                 for s in facts["sources"]) + ".",
            "Languages (first stage that identified one): " + ", ".join(
                f"{lang['language']} {lang['documents']} ({_pct(lang['share'])})" for lang in facts["languages"])
            + "; und = not identified (buckets the language filter does not judge).",
        ],
        "data_limitations": _limitations(facts),
    }
    if col["first"]:
        out["data_collection_timeframe"] = [col["first"], col["last"]]
    if pii:
        out["personal_sensitive_information"] = [
            f"{pii['stage']}: {pii['documents_redacted']} documents redacted, {pii['redacted_in_corpus']} of them in "
            f"the release; replaced: " + ", ".join(f"{t['type']} {t['replaced']} ({t['replaced_in_corpus']} in the "
                                                   f"release)" for t in pii["types"]) + ".",
            "Detected types: " + ", ".join(pii["enabled"] or []) + "; each occurrence is replaced by a placeholder "
            "token. Other personal information (names, postal addresses) is not detected and stays in the text."]
    return out


def _limitations(facts: dict) -> list[str]:
    cont, out = facts["contamination"], []
    if cont:
        out.append(f"Decontamination covers only the benchmarks checked ({', '.join(cont['benchmarks_checked'])}) "
                   f"and n-gram overlap; {cont['kept_weak_overlap']} documents of the release have weaker overlaps "
                   f"below the limits (the lineage table contamination lists them).")
    if facts["collection"]["undated"]:
        out.append(f"{facts['collection']['undated']} documents carry no crawl date (their sources record none).")
    for lo in facts["left_out"]:
        out.append(f"Left out: {lo['documents']} token-index rows of source {lo['source']} ({lo['tokens']} tokens in "
                   f"{lo['shards']}) that are no document of the corpus (planted by the token stage).")
    out.append("Licences are the sources' as configured; the release does not check them per document.")
    return out


def croissant(facts: dict, release: Path) -> dict:
    """The Croissant 1.0 JSON-LD of a release folder, built and validated by mlcroissant's classes.

    Left to the publisher: datePublished and version (mlcroissant recommends both and warns). A build has no
    publication date, and its identity is the stage outputs' digests, which the description and citeAs state.
    """
    import mlcroissant as mlc  # 2.1 s to import (python -X importtime): only when a release is written or read

    distribution: list = []
    for f in facts["files"]:
        fmt = PARQUET if f["path"].endswith(".parquet") else "application/json" if f["path"].endswith(".json") \
            else BINARY
        distribution.append(mlc.FileObject(id=f["path"], name=f["path"], content_url=f["path"],
                                           content_size=f"{f['bytes']} B", encoding_formats=[fmt], sha256=f["sha256"],
                                           description=f"{f['kind']} file"))
    distribution += [
        mlc.FileSet(id="documents-files", name="documents-files", encoding_formats=[PARQUET],
                    includes=["documents/*.parquet"], description=f"The {facts['last_stage']} stage's documents."),
        mlc.FileSet(id="token-index-files", name="token-index-files", encoding_formats=[PARQUET],
                    includes=["token_index/*.parquet"], description="Where each document's tokens are."),
    ]
    first = {kind: next(f["path"] for f in facts["files"] if f["kind"] == kind)
             for kind in ("documents", "token_index")}
    tm = facts["token_manifest"]
    record_sets = [
        _record_set("documents", f"One record per document of the curated corpus ({facts['documents']}).",
                    "documents-files", pq.read_schema(release / first["documents"])),
        _record_set("token_index", f"One record per document's tokens ({facts['tokens']} tokens, "
                                   f"{tm.get('dtype')}, end-of-text id {tm.get('eos_id')}, vocabulary "
                                   f"{tm.get('vocab_size')}).",
                    "token-index-files", pq.read_schema(release / first["token_index"])),
    ]
    r = rai(facts)
    metadata = mlc.Metadata(
        name=facts["name"], description=_summary(facts), conforms_to=CONFORMS_TO,
        license=[lic["licence"] for lic in facts["licences"]],
        in_language=[lang["language"] for lang in facts["languages"] if lang["language"] != "und"],
        cite_as=f"@misc{{{facts['name']}, title={{{facts['name']}}}, note={{{facts['last_stage']} output "
                f"sha1:{facts['digests'][facts['last_stage']]}}}}}",
        keywords=["pretraining", "language modeling", "data lineage"],
        distribution=distribution, record_sets=record_sets, **r)
    # mlcroissant 1.1.1 writes two RAI properties under names the RAI vocabulary (croissant_rai.ttl) does not
    # define: the file states them as the specification names them.
    return {SPEC_NAMES.get(k, k): v for k, v in metadata.to_json().items()}


def _summary(facts: dict) -> str:
    d = facts["digests"]
    return (f"The curated corpus of a tokenmill pipeline: {facts['documents']} documents "
            f"({facts['text_chars']} characters) from {len(facts['sources'])} sources after "
            f"{len(facts['curation'])} curation stages ({', '.join(c['stage'] for c in facts['curation'])}), and "
            f"their {facts['tokens']} tokens. Identity: {facts['last_stage']} sha1:{d[facts['last_stage']]}, "
            f"{facts['token_stage']} sha1:{d[facts['token_stage']]}.")


# ---------------------------------------------------------------------------------------------------------
# The dataset card


def _size(n: int) -> str:
    return next((label for bound, label in SIZES if n < bound), "n>1B")


def _table(header: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def card(facts: dict) -> str:
    """README.md of the release: Hugging Face YAML metadata, then the lineage's numbers in prose and tables."""
    cont, pii, col, last = facts["contamination"], facts["pii"], facts["collection"], facts["last_stage"]
    n_index = sum(b["documents"] for b in facts["buckets"])
    meta = {
        "pretty_name": f"tokenmill curated corpus ({last} sha1:{facts['digests'][last][:12]})",
        # The sources' licences as configured: the Hub recognises SPDX-style ids (apache-2.0, cc-by-4.0 ...).
        "license": [lic["licence"].lower() for lic in facts["licences"]],
        "language": [lang["language"] for lang in facts["languages"] if lang["language"] != "und"],
        "size_categories": [_size(facts["documents"])],
        "task_categories": ["text-generation"],
        "task_ids": ["language-modeling"],
        "tags": ["croissant", "data-lineage", "pretraining"],
        "configs": [
            {"config_name": "documents", "data_files": [{"split": "train", "path": "documents/*.parquet"}],
             "default": True},
            {"config_name": "token_index", "data_files": [{"split": "train", "path": "token_index/*.parquet"}]},
        ],
        "dataset_info": [
            {"config_name": "documents", "splits": [{"name": "train", "num_examples": facts["documents"]}]},
            {"config_name": "token_index", "splits": [{"name": "train", "num_examples": n_index}]},
        ],
    }
    parts = ["---\n" + yaml.safe_dump(meta, sort_keys=False, allow_unicode=True, width=120) + "---\n",
             f"# {meta['pretty_name']}\n", _summary(facts) + "\n",
             "Every number here is a query over the pipeline's lineage database (lineage/lineage.duckdb; "
             "docs/lineage.md), and `croissant.json` states the same in Croissant 1.0 with its Responsible-AI "
             "fields.\n"]

    kinds = {}
    for f in facts["files"]:
        k = kinds.setdefault(f["kind"], [0, 0])
        k[0], k[1] = k[0] + 1, k[1] + f["bytes"]
    parts.append("## Files\n\n" + _table(["folder", "files", "bytes"], [[k, v[0], v[1]] for k, v in kinds.items()]))

    parts.append("## Sources and licences\n\n" + _table(
        ["source", "format", "bucket", "licence", "snapshot", "records read", "documents", "document share",
         "tokens", "token share"],
        [[s["source"], s["format"], s["bucket"], s["licence"], s["snapshot"], s["records"], s["documents"],
          _pct(s["document_share"]), s["tokens"], _pct(s["token_share"])] for s in facts["sources"]]))
    parts.append("\n### By licence\n\n" + _table(
        ["licence", "documents", "document share", "tokens", "token share", "sources"],
        [[lic["licence"], lic["documents"], _pct(lic["document_share"]), lic["tokens"], _pct(lic["token_share"]),
          lic["sources"]] for lic in facts["licences"]]))

    parts.append("## Collection\n\n" + (
        f"Crawl dates of the documents: {col['first']} to {col['last']} ({col['dated']} dated, {col['undated']} "
        f"without a date).\n\n" if col["first"] else "No document carries a crawl date.\n\n") + _table(
        ["source", "first crawled", "last crawled", "undated documents", "read errors"],
        [[s["source"], s["first_crawled"] or "", s["last_crawled"] or "", s["undated"], s["read_errors"]]
         for s in facts["sources"]]))

    parts.append("## Curation\n\nEach stage writes one decision per input document (keep, modify or drop, with a "
                 "reason); a stage's documents out are its kept and modified ones.\n\n" + _table(
                     ["stage", "documents in", "kept", "modified", "dropped", "documents out", "drop reasons"],
                     [[c["stage"], c["documents_in"], c["kept"], c["modified"], c["dropped"], c["documents_out"],
                       ", ".join(f"{r['reason']} {r['documents']}" for r in c["reasons"] if r["action"] == "drop")]
                      for c in facts["curation"]]))
    for c in facts["curation"]:
        run = f"run {c['run_id']}" if c["run_id"] else "no run record: params.yaml"
        parts.append(f"\n<details><summary>{c['stage']} parameters ({run})</summary>\n\n```json\n"
                     f"{json.dumps(c['params'], indent=1, sort_keys=True)}\n```\n</details>\n")

    if pii:
        parts.append(f"\n## Personal information\n\nThe {pii['stage']} stage replaced each occurrence of "
                     f"{', '.join(pii['enabled'] or [])} with a placeholder; {pii['documents_redacted']} "
                     f"documents were redacted, {pii['redacted_in_corpus']} of them are in the release. Names, "
                     "postal addresses and other personal information are not detected.\n\n" + _table(
                         ["type", "replaced", "documents", "replaced in the release"],
                         [[t["type"], t["replaced"], t["documents"], t["replaced_in_corpus"]] for t in pii["types"]]))

    parts.append("\n## Languages\n\n" + _table(
        ["language", "documents", "share", "buckets"],
        [[lang["language"], lang["documents"], _pct(lang["share"]), lang["buckets"]] for lang in facts["languages"]])
        + "\n`und`: no language identified (the language filter does not judge these buckets).\n")

    if cont:
        parts.append(f"\n## Benchmark contamination\n\n{cont['overlaps']} overlaps with benchmark items were found; "
                     f"{cont['contaminating']} reached the limits, in {cont['documents']} documents: "
                     f"{cont['removed']} removed, {cont['kept_flagged']} kept flagged. {cont['kept_weak_overlap']} "
                     f"documents of the release keep weaker overlaps. Benchmarks checked: "
                     f"{', '.join(cont['benchmarks_checked'])}.\n\n" + _table(
                         ["benchmark", "licence", "overlaps", "contaminating", "items", "documents removed",
                          "kept flagged"],
                         [[b["benchmark"], b["licence"] or "", b["overlaps"], b["contaminating"], b["items"],
                           b["removed"], b["kept_flagged"]] for b in cont["benchmarks"]]))

    tm = facts["token_manifest"]
    parts.append(f"\n## Tokens\n\n{facts['tokens']} tokens of {n_index} documents, {tm.get('dtype')} ids of a "
                 f"{tm.get('vocab_size')}-piece vocabulary (tokenizer/), end-of-text id {tm.get('eos_id')} after each "
                 "document. `token_index` gives each document's token file (`shard`), `offset` and `length`.\n\n"
                 + _table(["bucket", "documents", "tokens"],
                          [[b["bucket"], b["documents"], b["tokens"]] for b in facts["buckets"]]))

    parts.append("\n## Limitations\n\n" + "".join(f"- {line}\n" for line in _limitations(facts)))
    parts.append("\n## Checking it\n\n`mlcroissant` reads the records: `mlcroissant.Dataset(jsonld=\"croissant.json\")"
                 ".records(\"documents\")`. In the pipeline, `tokenmill audit sql \"SELECT fate, count(*) FROM "
                 "documents GROUP BY ALL\"` gives the same counts.\n")
    return "\n\n".join(part.strip("\n") for part in parts) + "\n"
