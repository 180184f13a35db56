"""DVC stage `filter`: licence gate, URL block-lists, language ID and Gopher / C4 / FineWeb heuristics."""

from tokenmill.docstage import run_document_stage
from tokenmill.runtime import load_params


def main() -> None:
    p = load_params()
    m = run_document_stage("filter", "ingest", "tokenmill.filters:FilterProcessor", p["filter"], p.get("execution"))
    print(f"filter: {m['counts']['in']} documents -> {m['counts']['out']} kept")


if __name__ == "__main__":
    main()
