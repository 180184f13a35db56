"""The global steps of dedup: DuckDB SQL over the per-shard Parquet that the sketch pass wrote.

Nothing here holds a table of all documents in Python. DuckDB groups exact-duplicate keys, self-joins band
hashes into candidate pairs and counts repeated lines, spilling to disk past its memory limit. Python only
sees what is small: candidate pairs (streamed in batches to compare their signatures) and the verified edges
(connected components with scipy).

Working tables (Parquet globs under the work directory; `doc` is an int64 surrogate key, shard << 32 | row):
  docs   (doc, doc_id, chars, exact_hash)
  sigs   (doc, sig)                 sig: num_perm uint32 values as one binary value; documents with shingles
  bands  (doc, band, band_hash)     int64 band hashes of the same documents
  lines  (doc, line_hash)           distinct per document; documents of skipped buckets write none
"""

from __future__ import annotations

import time
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from tokenmill.execution import log_phase

# The deterministic choice of the document to keep. Exact duplicates hold the same text (up to case and
# spacing): the smallest doc_id. A near-duplicate cluster: the longest text (most characters), which keeps the
# most content, ties broken by the smallest doc_id. (doc only breaks ties between repeated doc_ids.)
EXACT_KEEP_ORDER = "doc_id, doc"
NEAR_KEEP_ORDER = "chars DESC, doc_id, doc"


def connect(work: Path, memory_limit: str = "2GB", threads: int | None = None) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    spill = Path(work) / "duckdb_tmp"
    spill.mkdir(parents=True, exist_ok=True)
    con.execute(f"SET temp_directory = '{spill}'")
    con.execute(f"SET memory_limit = '{memory_limit}'")
    con.execute("SET preserve_insertion_order = false")  # every result whose order matters is sorted
    if threads:
        con.execute(f"SET threads = {int(threads)}")
    return con


def _glob(work: Path, name: str) -> str:
    return str(Path(work) / name / "*.parquet")


def register_inputs(con: duckdb.DuckDBPyConnection, work: Path) -> None:
    """Views over the sketch pass's tables (those that exist: a step that is switched off reads none)."""
    for name in ("docs", "sigs", "bands", "lines"):
        if not any((Path(work) / name).glob("*.parquet")):
            continue
        con.execute(f"CREATE OR REPLACE VIEW {name} AS SELECT * FROM read_parquet('{_glob(work, name)}')")


def exact_duplicates(con: duckdb.DuckDBPyConnection) -> int:
    """Table `exact` (doc, keeper_id, copies, rank): every document whose normalised text occurs more than
    once; rank 1 is kept, the others are dropped in favour of keeper_id. Returns the number dropped."""
    con.execute(f"""
        CREATE OR REPLACE TABLE exact AS
        SELECT doc, first_value(doc_id) OVER w AS keeper_id, count(*) OVER (PARTITION BY exact_hash) AS copies,
               row_number() OVER w AS rank
        FROM docs
        WHERE exact_hash IN (SELECT exact_hash FROM docs GROUP BY exact_hash HAVING count(*) > 1)
        WINDOW w AS (PARTITION BY exact_hash ORDER BY {EXACT_KEEP_ORDER})
    """)
    return con.execute("SELECT count(*) FROM exact WHERE rank > 1").fetchall()[0][0]


def candidate_pairs(con: duckdb.DuckDBPyConnection, window: int, exclude: str | None = None) -> int:
    """Table `pairs` (a, b), a < b: documents that share at least one LSH bucket (band, band_hash).

    A self-join of the band table on (band, band_hash). Singleton buckets, nearly all of them, are dropped
    first. Within a bucket of n, members are numbered 1..n by doc and member i is paired with members
    i+1 .. min(i+window, n): every pair of a bucket of up to window + 1 documents, and a chain of overlapping
    windows through larger ones, so a bucket costs at most n * window pairs instead of n^2 / 2 (a template
    repeated on a million pages must not become 5e11 pairs). The partner numbers are listed per member first
    and then equi-joined on (band, band_hash, rn): written as one join with `y.rn = x.rn + k`, DuckDB joins
    on the bucket alone and filters afterwards, which is quadratic in the bucket size again.
    `exclude`: a query of docs to leave out (exact duplicates already dropped).
    """
    live = "bands" if exclude is None else f"(SELECT * FROM bands ANTI JOIN ({exclude}) x USING (doc))"
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE members AS
        WITH live AS (SELECT doc, band, band_hash FROM {live}),
             shared AS (SELECT band, band_hash, count(*) AS n FROM live GROUP BY band, band_hash HAVING n > 1)
        SELECT l.doc, l.band, l.band_hash, s.n,
               row_number() OVER (PARTITION BY l.band, l.band_hash ORDER BY l.doc) AS rn
        FROM live l JOIN shared s USING (band, band_hash)
    """)
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE probe AS
        SELECT doc AS a, band, band_hash, unnest(range(rn + 1, least(rn + {int(window)}, n) + 1)) AS rn
        FROM members
    """)
    con.execute("""
        CREATE OR REPLACE TABLE pairs AS
        SELECT DISTINCT p.a, y.doc AS b
        FROM probe p JOIN members y ON y.band = p.band AND y.band_hash = p.band_hash AND y.rn = p.rn
    """)
    con.execute("DROP TABLE probe")
    con.execute("DROP TABLE members")
    return con.execute("SELECT count(*) FROM pairs").fetchall()[0][0]


def _sig_matrix(col: pa.Array, num_perm: int) -> np.ndarray:
    """A binary Arrow column of equal-length signatures as an (n, num_perm) uint32 view (no per-row copy)."""
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    if len(col) == 0:
        return np.empty((0, num_perm), dtype=np.uint32)
    width = 4 * num_perm
    if pa.types.is_fixed_size_binary(col.type):
        data = col.buffers()[1]
        start = col.offset * width
    else:
        offsets = np.frombuffer(col.buffers()[1], dtype=np.int32 if pa.types.is_binary(col.type) else np.int64)
        offsets = offsets[col.offset:col.offset + len(col) + 1]
        if not np.all(np.diff(offsets) == width):
            raise ValueError("signatures of unequal length")
        data, start = col.buffers()[2], int(offsets[0])
    return np.frombuffer(data, dtype=np.uint8, count=len(col) * width, offset=start).view(np.uint32).reshape(
        len(col), num_perm)


def score_pairs(con: duckdb.DuckDBPyConnection, pairs_sql: str, num_perm: int,
                batch: int = 16384) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(a, b, jaccard estimate) for the pairs a query returns (columns a, b): signatures are joined in by
    DuckDB and compared in numpy one batch at a time, so memory is bounded by the batch, not the pairs."""
    reader = con.sql(f"""
        SELECT p.a, p.b, sa.sig AS sa, sb.sig AS sb
        FROM ({pairs_sql}) p JOIN sigs sa ON sa.doc = p.a JOIN sigs sb ON sb.doc = p.b
    """).to_arrow_reader(batch)
    out_a, out_b, out_j = [], [], []
    for rb in reader:
        if rb.num_rows == 0:
            continue
        sa = _sig_matrix(rb.column("sa"), num_perm)
        sb = _sig_matrix(rb.column("sb"), num_perm)
        # Copies: a zero-copy view would keep the whole imported batch, signatures included, alive.
        out_a.append(rb.column("a").to_numpy().copy())
        out_b.append(rb.column("b").to_numpy().copy())
        out_j.append(np.count_nonzero(sa == sb, axis=1) / num_perm)
    if not out_a:
        return np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, np.float64)
    return np.concatenate(out_a), np.concatenate(out_b), np.concatenate(out_j)


def components(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Connected components of the undirected graph with edges (a[i], b[i]): (nodes, component label)."""
    nodes = np.unique(np.concatenate([a, b]))
    if len(nodes) == 0:
        return nodes, np.empty(0, dtype=np.int64)
    ia, ib = np.searchsorted(nodes, a), np.searchsorted(nodes, b)
    graph = coo_matrix((np.ones(len(ia), dtype=np.int8), (ia, ib)), shape=(len(nodes), len(nodes)))
    _, labels = connected_components(graph.tocsr(), directed=False)
    return nodes, labels.astype(np.int64)


def near_duplicates(con: duckdb.DuckDBPyConnection, num_perm: int, threshold: float, verify: bool,
                    window: int, exclude: str | None = None, timings: dict | None = None) -> dict:
    """Candidate pairs -> verified edges -> clusters. Creates tables
      maxj     (doc, max_j)                         max estimated Jaccard to any candidate
      clusters (doc, rep_doc, rep_id, size)         every document in a cluster of two or more
      rep_j    (doc, j)                             estimated Jaccard of a dropped member to its representative
    and returns counts for the manifest; `timings`, if given, receives seconds per step (kept out of the
    counts: metrics hold only deterministic numbers)."""
    clock = [time.perf_counter()]

    def lap(name: str) -> None:
        now = time.perf_counter()
        if timings is not None:
            timings[name] = round(now - clock[0], 3)
        log_phase("dedup", f"near duplicates: {name} done in {now - clock[0]:.1f} s")
        clock[0] = now

    n_pairs = candidate_pairs(con, window, exclude)
    lap("candidate_pairs")
    a, b, j = score_pairs(con, "SELECT a, b FROM pairs", num_perm)
    lap("verify")
    con.register("_edges", pa.table({"a": a, "b": b, "j": j}))
    con.execute("""
        CREATE OR REPLACE TABLE maxj AS
        SELECT doc, max(j) AS max_j FROM (SELECT a AS doc, j FROM _edges UNION ALL SELECT b, j FROM _edges)
        GROUP BY doc
    """)
    con.unregister("_edges")
    keep = j >= threshold - 1e-12 if verify else np.ones(len(j), dtype=bool)
    nodes, labels = components(a[keep], b[keep])
    lap("components")
    con.register("_comp", pa.table({"doc": nodes, "comp": labels}))
    con.execute(f"""
        CREATE OR REPLACE TABLE clusters AS
        SELECT c.doc, first_value(c.doc) OVER w AS rep_doc, first_value(d.doc_id) OVER w AS rep_id,
               count(*) OVER (PARTITION BY c.comp) AS size
        FROM _comp c JOIN docs d ON d.doc = c.doc
        WINDOW w AS (PARTITION BY c.comp ORDER BY d.{NEAR_KEEP_ORDER.replace(', ', ', d.')})
    """)
    con.unregister("_comp")
    ra, _, rj = score_pairs(con, "SELECT doc AS a, rep_doc AS b FROM clusters WHERE doc <> rep_doc", num_perm)
    con.register("_rep_j", pa.table({"doc": ra, "j": rj}))
    con.execute("CREATE OR REPLACE TABLE rep_j AS SELECT * FROM _rep_j")
    con.unregister("_rep_j")
    lap("representatives")
    n_clusters = con.execute("SELECT count(DISTINCT rep_doc) FROM clusters").fetchall()[0][0]
    return {"candidate_pairs": int(n_pairs), "verified_pairs": int(keep.sum()), "clusters": int(n_clusters),
            "near_duplicates": len(ra)}


def write_verdicts(con: duckdb.DuckDBPyConnection, path: Path, exact: bool, near: bool) -> None:
    """One row per document that exact or near dedup has something to say about, sorted by doc, so that
    each shard's worker reads its own range through Parquet row-group statistics:
    kind ('exact' | 'near' | null), duplicate_of, cluster_id, cluster_size, jaccard (to the kept
    representative), max_jaccard, exact_duplicates (copies dropped in favour of this one)."""
    joins, conds = [], []
    if exact:
        joins.append("LEFT JOIN exact e ON e.doc = d.doc")
        conds.append("e.doc IS NOT NULL")
    if near:
        joins += ["LEFT JOIN clusters c ON c.doc = d.doc", "LEFT JOIN rep_j r ON r.doc = d.doc",
                  "LEFT JOIN maxj m ON m.doc = d.doc"]
        conds += ["c.doc IS NOT NULL", "m.doc IS NOT NULL"]
    if not conds:
        conds = ["false"]
    kind, dup_of = [], []
    if exact:
        kind.append("WHEN e.rank > 1 THEN 'exact'")
        dup_of.append("WHEN e.rank > 1 THEN e.keeper_id")
    if near:
        kind.append("WHEN c.doc <> c.rep_doc THEN 'near'")
        dup_of.append("WHEN c.doc <> c.rep_doc THEN c.rep_id")

    def case(whens: list[str]) -> str:
        return f"CASE {' '.join(whens)} END" if whens else "NULL::VARCHAR"

    con.execute(f"""
        COPY (
          SELECT d.doc,
                 {case(kind)} AS kind,
                 {case(dup_of)} AS duplicate_of,
                 {"c.rep_id" if near else "NULL::VARCHAR"} AS cluster_id,
                 {"c.size" if near else "NULL::BIGINT"} AS cluster_size,
                 {"r.j" if near else "NULL::DOUBLE"} AS jaccard,
                 {"m.max_j" if near else "NULL::DOUBLE"} AS max_jaccard,
                 {"CASE WHEN e.rank = 1 THEN e.copies - 1 END" if exact else "NULL::BIGINT"} AS exact_duplicates
          FROM docs d {" ".join(joins)}
          WHERE {" OR ".join(conds)}
          ORDER BY d.doc
        ) TO '{path}' (FORMAT parquet, ROW_GROUP_SIZE 65536)
    """)


def repeated_lines(con: duckdb.DuckDBPyConnection, verdicts: Path, max_docs: int) -> np.ndarray:
    """Sorted int64 hashes of lines found in more than max_docs of the documents exact and near dedup keep."""
    rows = con.sql(f"""
        SELECT line_hash FROM lines
        ANTI JOIN (SELECT doc FROM read_parquet('{verdicts}') WHERE kind IS NOT NULL) x USING (doc)
        GROUP BY line_hash HAVING count(*) > {int(max_docs)}
        ORDER BY line_hash
    """).fetchnumpy()["line_hash"]
    return np.asarray(rows, dtype=np.int64)
