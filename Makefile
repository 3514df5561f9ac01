# opslake — every target installs what it needs (`make demo` and `make test` work on a fresh clone).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
PYTEST := $(BIN)/python -m pytest
# On every core (pytest-xdist), each test file whole on one worker (--dist loadfile: a module's
# local stack starts once), files handed out in collection order, where tests/conftest.py puts
# the slow ones first (xdist would otherwise start with the files holding the most tests).
PYTEST_N := $(PYTEST) -n auto --dist loadfile --no-loadscope-reorder
SRC    := layers/common/opslake functions local bench tests sdk/python/src

.PHONY: setup demo test test-fast pytest lint types docs unit integration infra bench build clean record-frameworks

$(STAMP): pyproject.toml sdk/python/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	$(BIN)/python -m pip install --quiet -e 'sdk/python[otel]'  # the Python SDK, its own package
	touch $(STAMP)

setup: $(STAMP)  ## create .venv and install opslake with its dev and local extras

demo: setup  ## run the local stack, ingest sample ops, show what landed in the lake
	$(BIN)/opslake demo

# lint, types, docs and pytest run side by side (mypy without a cache takes ~15 s, the docs ~2 s);
# make waits for all four and fails if any fails.
test: setup  ## lint + types + docs + every test level (one pytest run over all cores)
	@$(MAKE) --no-print-directory -j4 --output-sync=line lint types docs pytest

pytest: setup  ## every test level, no lint or types
	$(PYTEST_N) tests

test-fast: setup  ## the quick loop: every test except the slow end-to-end scenarios (-m slow)
	$(PYTEST_N) -m "not slow" tests

lint: setup
	$(BIN)/ruff check $(SRC)
	$(BIN)/ruff format --check $(SRC)

types: setup
	$(BIN)/mypy layers/common/opslake local/opslake_local functions sdk/python/src/opslake_sdk

# The reference site (mkdocs.yml, docs/): --strict makes a broken link or anchor fail the build.
docs: setup  ## build the docs site into site/ (strict)
	$(BIN)/mkdocs build --strict --site-dir site

unit: setup
	$(PYTEST_N) tests/unit

integration: setup
	$(PYTEST_N) tests/integration

infra: setup
	$(PYTEST_N) tests/infrastructure

# Not part of any test run: installs each agent framework from PyPI into .venv-frameworks/ (one venv
# each), runs the same tiny agent on it and rewrites tests/data/frameworks/*.pb, which the tests replay.
record-frameworks: setup  ## re-record the agent frameworks' OTLP exports (FRAMEWORKS="langgraph strands" for some)
	$(BIN)/python tests/data/frameworks/record.py $(FRAMEWORKS)

bench: setup  ## benchmarks (not tests): figures go to bench/README.md
	$(BIN)/python bench/bench_writer.py
	$(BIN)/python bench/bench_import.py
	$(SAM_ENV) $(BIN)/python bench/bench_cold_start.py
	$(BIN)/python bench/bench_signatures.py
	$(BIN)/python bench/bench_analyzer.py
	$(BIN)/python bench/bench_compaction.py
	$(BIN)/python bench/bench_consolidator.py
	$(BIN)/python bench/bench_experiment.py
	$(BIN)/python bench/bench_search.py
	$(BIN)/python bench/bench_mcp.py
	$(BIN)/python bench/bench_ask.py
	$(BIN)/python bench/bench_cost.py

# sam build needs a python3.12 interpreter for the Lambda runtime. aws-sam-cli pins its own
# dependencies, so it gets a venv of its own. On pyenv machines, expose 3.12 next to the default.
SAM_VENV := .venv-sam
PYENV_312 := $(shell command -v pyenv >/dev/null 2>&1 && pyenv versions --bare 2>/dev/null | grep -E '^3\.12(\.|$$)' | tail -n 1)
SAM_ENV := $(if $(PYENV_312),PYENV_VERSION=$(shell pyenv version-name 2>/dev/null):$(PYENV_312),)

$(SAM_VENV)/bin/sam:
	$(PYTHON) -m venv $(SAM_VENV)
	$(SAM_VENV)/bin/python -m pip install --quiet --upgrade pip aws-sam-cli

build: $(SAM_VENV)/bin/sam  ## sam build (python3.12 Lambda artefacts in .aws-sam/)
	$(SAM_ENV) $(SAM_VENV)/bin/sam build

clean:
	rm -rf $(VENV) $(SAM_VENV) .aws-sam out site .pytest_cache .mypy_cache .ruff_cache .hypothesis
