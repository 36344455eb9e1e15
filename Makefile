# The README's two commands: `make run` serves the API, `make test` passes the tests.
# Both create the virtual environment and install on first use.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: install run test lint schema bench

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[dev]'
	touch $@

install: $(VENV)/.installed

run: install
	$(BIN)/connector-store serve

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

test: lint
	$(BIN)/pytest

schema: install
	$(BIN)/connector-store schema > graphql/schema.graphql

# Every path beside its floor, in one run (BENCH_ARGS=--million adds the 1M-row sizes).
bench: install
	$(BIN)/python -m benchmarks.side_by_side $(BENCH_ARGS)
