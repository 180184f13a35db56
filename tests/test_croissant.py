"""The release of the tiny run's curated corpus (tests/tiny_run.py): a Croissant file that mlcroissant validates
and reads records through, and a Hugging Face dataset card, whose numbers equal the lineage database's.

The expected numbers are this file's own SQL over lineage.duckdb, not calls into tokenmill.croissant. mlcroissant
is imported at the top: without it the module fails to collect, so the suite fails rather than skips.
"""

from __future__ import annotations

import datetime
import hashlib
import re
import shutil
from pathlib import Path

import mlcroissant as mlc
import pytest
import yaml

import tiny_run
from tokenmill.croissant import write_release
from tokenmill.lineage import connect


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return tiny_run.build(tmp_path_factory.mktemp("tiny"))


@pytest.fixture(scope="module")
def release(tiny, tmp_path_factory):
    out = tmp_path_factory.mktemp("release") / "release"
    write_release(tiny, out)
    return out


@pytest.fixture(scope="module")
def db(tiny):
    con = connect(tiny / "lineage" / "lineage.duckdb")
    yield con
    con.close()


def rows(con, sql: str, params=None) -> list[tuple]:
    return con.execute(sql, params or []).fetchall()


def pct(part: int, whole: int) -> str:
    return f"{100 * (part / whole):.1f}%"


def card_parts(text: str) -> tuple[dict, dict[str, list[dict]], str]:
    """(YAML metadata, {heading: the rows of the first table under it}, the prose) of a dataset card."""
    assert text.startswith("---\n")
    front, body = text[4:].split("\n---\n", 1)
    tables: dict[str, list[dict]] = {}
    heading, header = None, None
    for line in body.splitlines():
        if line.startswith("#"):
            heading, header = line.lstrip("#").strip(), None
        elif line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if header is None:
                header = cells
            elif set(line) - set("|- "):  # not the |---| line
                tables.setdefault(heading, []).append(dict(zip(header, cells)))
        else:
            header = None
    return yaml.safe_load(front), tables, body


@pytest.mark.slow  # drives dvc through the tiny pipeline (tests/tiny_run.py)
def test_croissant_validates_and_its_records_are_the_lineage(release, db):
    ds = mlc.Dataset(jsonld=release / "croissant.json")  # raises ValidationError on any error
    issues = ds.metadata.ctx.issues
    assert not issues.errors
    # The recommended properties left to the publisher: a build has no publication date (no clock is read) and
    # its identity is the digests in the description, not a version number.
    assert all("datePublished" in w or "/version" in w for w in issues.warnings), issues.warnings

    docs = list(ds.records("documents"))
    kept = rows(db, "SELECT d.doc_id, d.source, d.bucket, s.licence, d.url, d.final_text_chars FROM documents d "
                    "JOIN sources s USING (source) WHERE d.fate = 'kept'")
    got = {(r["documents/doc_id"].decode(), r["documents/source"].decode(), r["documents/bucket"].decode(),
            r["documents/licence"].decode(), r["documents/url"].decode() if r["documents/url"] else None,
            len(r["documents/text"].decode())) for r in docs}
    assert len(docs) == len(kept) > 100 and got == set(kept)  # the text too: its length after the last stage

    index = {tuple(v.decode() if isinstance(v, bytes) else v for v in r.values()) for r in ds.records("token_index")}
    curated = rows(db, "SELECT t.doc_id, t.source, t.bucket, t.shard, t.\"offset\", t.length FROM token_index t "
                       "JOIN documents d USING (doc_id) WHERE d.fate = 'kept'")
    assert index == set(curated) and len(curated) == len(kept)
    # What the token stage planted itself (canaries) is in the lineage's token index but not in the release.
    planted = rows(db, "SELECT DISTINCT t.shard FROM token_index t LEFT JOIN documents d "
                       "ON d.doc_id = t.doc_id AND d.fate = 'kept' WHERE d.doc_id IS NULL")
    assert all(not (release / shard).exists() for (shard,) in planted)
    assert all((release / shard).is_file() for (shard,) in {row[3:4] for row in curated})

    meta = ds.metadata.to_json()
    objects = {d["contentUrl"]: d for d in meta["distribution"] if d["@type"] == "cr:FileObject"}
    on_disk = {str(p.relative_to(release)) for p in release.rglob("*") if p.is_file()} - {"croissant.json",
                                                                                          "README.md"}
    assert set(objects) == on_disk
    for path, obj in objects.items():
        assert hashlib.sha256((release / path).read_bytes()).hexdigest() == obj["sha256"]
        assert obj["encodingFormat"] == {".parquet": "application/x-parquet", ".json": "application/json"}.get(
            Path(path).suffix, "application/octet-stream")

    # The RAI fields, as the file states them (with the RAI vocabulary's own property names).
    raw = yaml.safe_load((release / "croissant.json").read_text())  # JSON is YAML
    assert "http://mlcommons.org/croissant/RAI/1.0" in raw["conformsTo"]
    first, last = rows(db, "SELECT min(TRY_CAST(crawl_date AS TIMESTAMPTZ)), max(TRY_CAST(crawl_date AS TIMESTAMPTZ)) "
                           "FROM documents WHERE fate = 'kept'")[0]
    utc = [t.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ") for t in (first, last)]
    assert raw["rai:dataCollectionTimeframe"] == utc
    protocol = raw["rai:dataPreprocessingProtocol"]
    for stage, n_in, n_out in rows(db, "SELECT stage, count(*), count(*) FILTER (action <> 'drop') FROM decisions "
                                       "GROUP BY ALL ORDER BY min(stage_order)"):
        assert any(p.startswith(f"{stage}: {n_in} documents in, {n_out} out") for p in protocol), stage
    redacted = rows(db, "SELECT count(*) FROM decisions WHERE stage = 'pii' AND action = 'modify'")[0][0]
    assert f"{redacted} documents redacted" in raw["rai:personalSensitiveInformation"][0]
    assert "rai:dataCollection" in raw and "rai:dataBiases" in raw and "rai:dataLimitations" in raw
    assert raw["rai:dataManipulationProtocol"].startswith("Texts changed")


@pytest.mark.slow  # drives dvc through the tiny pipeline (tests/tiny_run.py)
def test_the_dataset_card_states_the_lineage_numbers(release, db):
    meta, tables, prose = card_parts((release / "README.md").read_text())
    documents = rows(db, "SELECT count(*) FROM documents WHERE fate = 'kept'")[0][0]
    tokens = rows(db, "SELECT sum(t.length) FROM token_index t JOIN documents d USING (doc_id) "
                      "WHERE d.fate = 'kept'")[0][0]

    # YAML metadata the Hub reads.
    licences = rows(db, "SELECT DISTINCT lower(s.licence) FROM documents d JOIN sources s USING (source) "
                        "WHERE d.fate = 'kept'")
    assert set(meta["license"]) == {lic for (lic,) in licences}
    assert meta["language"] == ["en"] and meta["size_categories"] == ["n<1K"]
    assert meta["task_categories"] == ["text-generation"] and meta["pretty_name"]
    configs = {c["config_name"]: c["data_files"][0]["path"] for c in meta["configs"]}
    assert configs == {"documents": "documents/*.parquet", "token_index": "token_index/*.parquet"}
    assert {i["config_name"]: i["splits"][0]["num_examples"] for i in meta["dataset_info"]} == \
        {"documents": documents, "token_index": documents}
    assert f"{documents} documents" in prose and f"{tokens} tokens" in prose

    # Sources and licences, with their shares of documents and tokens.
    by_source = rows(db, """
        SELECT s.source, s.licence, count(d.doc_id), coalesce(sum(t.length), 0)
        FROM sources s LEFT JOIN documents d ON d.source = s.source AND d.fate = 'kept'
        LEFT JOIN token_index t ON t.doc_id = d.doc_id GROUP BY ALL""")
    assert {(r["source"], r["licence"], int(r["documents"]), r["document share"], int(r["tokens"]), r["token share"])
            for r in tables["Sources and licences"]} == \
        {(s, lic, n, pct(n, documents), t, pct(t, tokens)) for s, lic, n, t in by_source}
    by_licence = rows(db, "SELECT s.licence, count(*), sum(t.length) FROM documents d JOIN sources s USING (source) "
                          "JOIN token_index t USING (doc_id) WHERE d.fate = 'kept' GROUP BY ALL")
    assert {(r["licence"], int(r["documents"]), r["document share"], r["token share"])
            for r in tables["By licence"]} == {(lic, n, pct(n, documents), pct(t, tokens)) for lic, n, t in by_licence}

    # Every curation stage: documents in, kept, modified, dropped, and why.
    stages = rows(db, """
        SELECT stage, count(*), count(*) FILTER (action = 'keep'), count(*) FILTER (action = 'modify'),
               count(*) FILTER (action = 'drop') FROM decisions GROUP BY stage ORDER BY min(stage_order)""")
    assert [(r["stage"], int(r["documents in"]), int(r["kept"]), int(r["modified"]), int(r["dropped"]))
            for r in tables["Curation"]] == stages
    for r in tables["Curation"]:
        reasons = dict(rows(db, "SELECT reason, count(*) FROM decisions WHERE stage = ? AND action = 'drop' "
                                "GROUP BY ALL", [r["stage"]]))
        stated = dict(re.fullmatch(r"(\S+) (\d+)", part).groups() for part in r["drop reasons"].split(", ") if part)
        assert {k: int(v) for k, v in stated.items()} == reasons
        assert f"<summary>{r['stage']} parameters (run " in prose  # each stage's parameters, from its run record

    # Benchmark contamination found and removed.
    found, contaminating, removed = rows(db, """
        SELECT count(*), count(*) FILTER (c.contaminated),
               count(DISTINCT c.doc_id) FILTER (c.contaminated AND d.fate = 'dropped')
        FROM contamination c JOIN documents d USING (doc_id)""")[0]
    assert removed > 0
    assert f"{found} overlaps with benchmark items were found; {contaminating} reached the limits" in prose
    assert f"{removed} removed" in prose
    per_benchmark = rows(db, "SELECT benchmark, count(DISTINCT doc_id) FROM contamination WHERE contaminated "
                             "AND action = 'drop' GROUP BY ALL")
    assert {(r["benchmark"], int(r["documents removed"])) for r in tables["Benchmark contamination"]} == \
        set(per_benchmark)

    # Personal information replaced, per type, and languages.
    pii = rows(db, """
        SELECT replace(key, 'pii_', ''), sum(value)::BIGINT FROM
            (SELECT unnest(map_entries(scores), recursive := true) FROM decisions WHERE stage = 'pii')
        WHERE key LIKE 'pii_%' GROUP BY ALL""")
    assert {(r["type"], int(r["replaced"])) for r in tables["Personal information"]} == set(pii)
    languages = rows(db, """
        SELECT coalesce(json_extract_string(f.details, '$.language'), 'und'), count(*)
        FROM documents d LEFT JOIN decisions f ON f.doc_id = d.doc_id AND f.stage = 'filter'
        WHERE d.fate = 'kept' GROUP BY ALL""")
    assert {(r["language"], int(r["documents"]), r["share"]) for r in tables["Languages"]} == \
        {(lang, n, pct(n, documents)) for lang, n in languages}


@pytest.mark.slow  # drives dvc through the tiny pipeline (tests/tiny_run.py)
def test_same_build_same_release_and_bad_input_is_one_line(tiny, release, tmp_path):
    again = tmp_path / "again"
    write_release(tiny, again)
    for name in ("croissant.json", "README.md"):
        assert (again / name).read_bytes() == (release / name).read_bytes()
    write_release(tiny, again)  # an earlier release is replaced whole
    assert sorted(p.relative_to(again) for p in again.rglob("*")) == \
        sorted(p.relative_to(release) for p in release.rglob("*"))

    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="is not a release"):
        write_release(tiny, tmp_path / "mine")
    assert (tmp_path / "mine" / "notes.txt").read_text() == "mine"  # never replaced

    bare = tmp_path / "bare"
    with pytest.raises(FileNotFoundError, match=r"lineage\.duckdb.*dvc repro lineage"):
        write_release(bare, tmp_path / "out")
    (bare / "lineage").mkdir(parents=True)
    shutil.copy(tiny / "lineage" / "lineage.duckdb", bare / "lineage")
    with pytest.raises(FileNotFoundError, match=r"data/domains has no manifest\.json"):
        write_release(bare, tmp_path / "out")
    assert not (tmp_path / "out").exists()
