"""DVC stage `ingest`: every declared source file -> document shards + a decision row per record."""

import sys

from tokenmill.ingest import SourceError, run_ingest
from tokenmill.runtime import load_params, script


def main() -> int:
    p = load_params("sources", "ingest", "execution")
    try:
        manifest = run_ingest(p["sources"], p["ingest"], p["execution"], out_dir="data/ingest")
    except SourceError as exc:
        print(f"ingest: {exc}", file=sys.stderr)
        return 2
    c = manifest["counts"]
    print(f"ingest: {c['in']} records -> {c['out']} documents, {manifest['read_errors']} read errors")
    return 0


if __name__ == "__main__":
    sys.exit(script(main))
