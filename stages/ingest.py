"""DVC stage `ingest`: every declared source file -> document shards + a decision row per record."""

import sys
from pathlib import Path

from tokenmill.ingest import SourceError, ingest_sources, load_sources
from tokenmill.ingest.params import Ingest
from tokenmill.runtime import StageRun, load_params, script


def stage(p: dict, out_dir: str | Path = "data/ingest") -> dict:
    sources, cfg = load_sources(p["sources"]), Ingest.resolve(p["ingest"])  # both checked before any work
    params = {"sources": {k: dict(v) for k, v in p["sources"].items()}, "ingest": cfg.model_dump()}
    with StageRun("ingest", out_dir, params, libraries=(  # what reads records and turns HTML into text
            "warcio", "fastwarc", "resiliparse", "trafilatura", "charset-normalizer", "zstandard")) as run:
        run.record(ingest_sources(sources, cfg, p["execution"], run.tmp))
    return run.manifest


def main() -> int:
    try:
        manifest = stage(load_params("sources", "ingest", "execution"))
    except SourceError as exc:
        print(f"ingest: {exc}", file=sys.stderr)
        return 2
    c = manifest["counts"]
    print(f"ingest: {c['in']} records -> {c['out']} documents, {manifest['read_errors']} read errors")
    return 0


if __name__ == "__main__":
    sys.exit(script(main))
