"""The auditors' connection to lineage.duckdb: it can read the lineage and nothing else.

Opening the file read-only stops DROP and INSERT, but not SQL that reaches outside the database: `COPY ... TO`
overwrote the lineage file itself, `ATTACH ... (READ_WRITE)` wrote another database, `read_csv('/etc/passwd')`
and `glob('/etc/*')` read the machine, `INSTALL` fetched code. So the connection also turns external access
off (files, extensions, Python objects) and locks its configuration, so no query can turn it back on:
tests/test_reliability.py tries each of those and checks the database file is byte-identical afterwards.
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

import duckdb
import pyarrow as pa

from tokenmill.lineage.tables import audit_tables

DB_NAME = "lineage.duckdb"  # under the lineage stage's output folder

# Set when the connection opens: no extension is installed or loaded behind a query's back.
_OPEN_CONFIG = {
    "autoinstall_known_extensions": False,
    "autoload_known_extensions": False,
    "allow_community_extensions": False,
    "allow_unsigned_extensions": False,
}


def connect(db: str | Path = Path("lineage") / DB_NAME,
            extra: Mapping[str, pa.Table] | None = None) -> duckdb.DuckDBPyConnection:
    """Open `db` read-only, sealed from the file system, for audit queries.

    Every table in `extra` is copied in as a TEMP table first: once external access is off, not even a Python
    object can be scanned. By default that is lineage.audit_tables() of the database's project: the stage run
    records (stage_runs) and the training runs' step, spike and held-out tables. Writes can only
    reach TEMP tables and the connection's own in-memory scratch database, never a file.
    """
    if not Path(db).is_file():
        raise FileNotFoundError(f"no lineage database at {db}: run `dvc repro lineage` first")
    if extra is None:  # the project's run records and training tables (lineage/<db> -> the project root)
        extra = audit_tables(Path(db).resolve().parent.parent)
    # A fresh in-memory instance with the file attached read-only, rather than duckdb.connect(db): DuckDB
    # shares one instance per file within a process, so a second connect() would find the first one's
    # locked configuration and could not add its own TEMP tables.
    con = duckdb.connect(":memory:", config=dict(_OPEN_CONFIG))
    try:
        con.execute("ATTACH ? AS lineage (READ_ONLY)", [str(Path(db).resolve())])
        con.execute("USE lineage")
        for name, table in (extra or {}).items():
            view = f"__extra_{name}"
            con.register(view, table)
            con.execute(f'CREATE TEMP TABLE "{name}" AS SELECT * FROM "{view}"')
            con.unregister(view)
        con.execute("SET enable_external_access = false")
        con.execute("SET lock_configuration = true")  # last: from here on no SET or PRAGMA changes anything
    except BaseException:
        con.close()
        raise
    return con
