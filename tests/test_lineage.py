"""lineage.duckdb and `tokenmill audit` on real crawl files: fates, conservation, and tamper detection."""

import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from stages import ingest as ingest_stage, lineage as lineage_stage
from tokenmill import cli, lineage

SHARED = Path(__file__).resolve().parents[1] / ".." / "shared" / "data"
pytestmark = pytest.mark.usefixtures("shared_data")  # skips without ../shared/data; fails under CI=true

SOURCES = {
    "cc": {"format": "warc", "bucket": "web", "licence": "cc-terms-of-use", "snapshot": "CC-MAIN-2020-34",
           "paths": [str(SHARED / "warc" / "resiliparse_warcfile.warc.gz"),
                     str(SHARED / "warc" / "resiliparse_clipped.warc.gz")]},
    "dolma": {"format": "jsonl", "bucket": "web", "licence": "odc-by", "url_field": "metadata.url",
              "date_field": "created", "paths": [str(SHARED / "cc_jsonl" / "dolma_cc_en_head-0091.jsonl.gz")]},
}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("lineage")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(root)  # stages write metrics/ relative to the working directory
        ingest_stage.stage({"sources": SOURCES, "ingest": {}, "execution": {"backend": "local", "workers": 1}},
                           out_dir=root / "data" / "ingest")
        result = lineage_stage.stage({"sources": SOURCES, "lineage": {}}, "ingest", data_root=root / "data",
                                     out_dir=root / "lineage")
    return root, result


def test_tables_and_fates(built):
    root, result = built
    assert result["conservation_violations"] == []
    con = lineage.connect(root / "lineage" / lineage.DB_NAME)
    tables = {r[0] for r in con.execute("SHOW TABLES").fetchall()}
    assert {"documents", "decisions", "stages", "sources", "records", "read_errors", "source_files"} <= tables
    # resiliparse_warcfile: 1 warcinfo + 17 request + 16 response + 16 metadata; clipped: 1 response; dolma: 10
    assert con.execute("SELECT count(*) FROM documents").fetchone()[0] == 50 + 1 + 10
    fates = dict(con.execute("SELECT drop_reason, count(*) FROM documents WHERE fate = 'dropped' GROUP BY 1").fetchall())
    assert fates["not_content"] == 34 and fates["truncated_record"] == 1
    src = con.execute("SELECT files, records, read_errors FROM sources WHERE source = 'cc'").fetchone()
    assert src == (2, 51, 1)
    files = con.execute("SELECT file, sha1 FROM source_files WHERE source = 'cc' ORDER BY file").fetchall()
    assert [f for f, _ in files] == ["resiliparse_clipped.warc.gz", "resiliparse_warcfile.warc.gz"]


def test_audit_doc_explains_truncated_and_normal(built, capsys):
    root, _ = built
    db = str(root / "lineage" / lineage.DB_NAME)
    con = lineage.connect(db)
    truncated = con.execute("SELECT doc_id FROM documents WHERE drop_reason = 'truncated_record'").fetchone()[0]
    assert cli.main(["audit", "--db", db, "doc", truncated]) == 0
    out = capsys.readouterr().out
    assert "truncated_record" in out and "resiliparse_clipped.warc.gz" in out and "read error" in out
    assert "dropped at ingest" in out

    url = con.execute("SELECT url FROM documents WHERE source = 'dolma' AND fate = 'kept' LIMIT 1").fetchone()[0]
    assert cli.main(["audit", "--db", db, "doc", url]) == 0
    out = capsys.readouterr().out
    assert "kept by every stage" in out and "extracted" in out and "text_chars=" in out

    assert cli.main(["audit", "--db", db, "doc", "no-such-document"]) == 1


def test_audit_stage_sql_and_read_only(built, capsys):
    root, _ = built
    db = str(root / "lineage" / lineage.DB_NAME)
    assert cli.main(["audit", "--db", db, "stage", "ingest"]) == 0
    out = capsys.readouterr().out
    assert "not_content" in out and "61 documents in" in out
    assert cli.main(["audit", "--db", db, "sql", "SELECT count(*) AS n FROM decisions"]) == 0
    assert "61" in capsys.readouterr().out
    # An auditor's connection cannot change the lineage.
    assert cli.main(["audit", "--db", db, "sql", "DELETE FROM decisions"]) == 2
    assert "read-only" in capsys.readouterr().err.lower()
    assert cli.main(["audit", "--db", db, "verify"]) == 0


def test_verify_names_a_document_that_went_missing(built, tmp_path, capsys, monkeypatch):
    root, _ = built
    monkeypatch.chdir(tmp_path)
    data = tmp_path / "data"
    shutil.copytree(root / "data", data)
    # Tamper: remove one kept document's decision row from a shard, as a buggy stage would.
    shard = sorted((data / "ingest" / "decisions").glob("dolma-*.parquet"))[0]
    table = pq.read_table(shard)
    victim = table.column("doc_id")[0].as_py()
    pq.write_table(table.slice(1), shard)
    result = lineage_stage.stage({"sources": SOURCES, "lineage": {}}, "ingest", data_root=data,
                                 out_dir=tmp_path / "lineage")
    assert any(victim in p and "went missing" in p for p in result["conservation_violations"])
    db = str(tmp_path / "lineage" / lineage.DB_NAME)
    assert cli.main(["audit", "--db", db, "verify"]) == 1
    assert victim in capsys.readouterr().out



def test_verify_names_a_dropped_document_still_in_the_stage_output(built, tmp_path, capsys, monkeypatch):
    """A stage that drops a document (its decision says drop) but still writes it to its documents: conservation
    in name only (input = kept + dropped holds on the decisions), and the document travels on. verify must
    name the document and the stage that let it through."""
    import pyarrow as pa

    root, _ = built
    monkeypatch.chdir(tmp_path)
    data = tmp_path / "data"
    shutil.copytree(root / "data", data)
    decisions = pa.concat_tables([pq.read_table(p) for p in sorted((data / "ingest" / "decisions").glob("*.parquet"))])
    dropped = sorted(r["doc_id"] for r in decisions.select(["doc_id", "action"]).to_pylist() if r["action"] == "drop")
    victim = dropped[0]
    # Tamper: a copy of a kept document's row under the dropped document's id, appended to a documents shard.
    shard = next(p for p in sorted((data / "ingest" / "documents").glob("*.parquet")) if pq.read_metadata(p).num_rows)
    table = pq.read_table(shard)
    assert victim not in table.column("doc_id").to_pylist()
    leak = table.slice(0, 1).set_column(table.schema.get_field_index("doc_id"), "doc_id",
                                        pa.array([victim], table.schema.field("doc_id").type))
    pq.write_table(pa.concat_tables([table, leak]), shard)
    result = lineage_stage.stage({"sources": SOURCES, "lineage": {}}, "ingest", data_root=data,
                                 out_dir=tmp_path / "lineage")
    named = [p for p in result["conservation_violations"] if victim in p]
    assert len(named) == 1 and named[0].startswith("ingest: ") and "not kept" in named[0], result["conservation_violations"]
    db = str(tmp_path / "lineage" / lineage.DB_NAME)
    assert cli.main(["audit", "--db", db, "verify"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert any(line.startswith("ingest: ") and victim in line for line in out), out


def test_missing_database_is_one_clear_line(tmp_path, capsys):
    assert cli.main(["audit", "--db", str(tmp_path / "none.duckdb"), "verify"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "dvc repro lineage" in err
