# The README's commands: `make run` serves the API, `make test` passes the tests (`make
# test-fast` the quick ones). They create the virtual environment and install on first use.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: codegen codegen-env install runtime run test test-fast test-faults test-ui screenshots lint schema sql bench token sign-in-link node

# Two markers: `.runtime` (the server's dependencies only: what `make run` and `make token`
# need) and `.installed` (the dev toolchain too: tests, linters; it includes the runtime).
$(VENV)/.runtime: pyproject.toml client/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -e . -e ./client
	touch $@

$(VENV)/.installed: pyproject.toml client/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[dev]' -e ./client
	touch $@ $(VENV)/.runtime

install: $(VENV)/.installed

runtime: $(VENV)/.runtime

# The runtime, or the dev install when there already is one (it holds the runtime).
SERVER_DEPS := $(if $(wildcard $(VENV)/.installed),install,runtime)

# The Node harness of the tests (federation gateway, graphql-http audit): pinned by its
# lockfile, installed again only when the lockfile changes.
NODE_DIR := tests/node
$(NODE_DIR)/node_modules/.installed: $(NODE_DIR)/package.json $(NODE_DIR)/package-lock.json
	cd $(NODE_DIR) && npm ci --no-audit --no-fund --loglevel=error
	touch $@

node: $(NODE_DIR)/node_modules/.installed

# ariadne-codegen in a virtual environment of its own (it needs a graphql-core older than the
# server's): `make codegen` writes client/connector_store_client/models/ from the client SDL
# and the SDK's operations.graphql (tests/test_client_models.py fails when it is stale).
CODEGEN_VENV := .venv-codegen
$(CODEGEN_VENV)/.installed: client/pyproject.toml
	$(PYTHON) -m venv $(CODEGEN_VENV)
	$(CODEGEN_VENV)/bin/pip install --quiet --disable-pip-version-check './client[codegen]'
	touch $@

codegen-env: $(CODEGEN_VENV)/.installed

codegen: codegen-env
	cd client && ../$(CODEGEN_VENV)/bin/ariadne-codegen client

# Serves on :8000 and prints the GraphiQL and dashboard URLs and, in a terminal, a one-time
# sign-in link (an admin's, a subject of its own; it works once, for 10 minutes): no token.
run: $(SERVER_DEPS)
	$(BIN)/connector-store serve

# An admin (service) token for this server's settings, a worker's (sub service), alone on the
# last line; it is valid for one hour (`connector-store token --ttl SECONDS` for another).
token: $(SERVER_DEPS)
	@$(BIN)/connector-store token --sub service --scope service

# A fresh one-time sign-in link to the dashboard of `make run`'s server (an admin's), alone on
# the last line: for a link used already or lost.
sign-in-link: $(SERVER_DEPS)
	@$(BIN)/connector-store sign-in-link

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

# The tests that need no long wait (none marked slow, faults or ui) run in parallel processes
# (pytest-xdist, one a core by default), each with its own PostgreSQL database and SQLite
# files (tests/databases.py); `make test` then runs the slow ones (real processes) one by one.
TEST_WORKERS ?= auto
FAST := -m 'not slow and not faults and not ui'

test: lint node codegen-env
	$(BIN)/pytest -n $(TEST_WORKERS) --dist worksteal --timeout 300 $(FAST)
	$(BIN)/pytest --timeout 300 -m 'slow and not faults and not ui'

# Both backends, a few minutes: before each commit.
test-fast: install
	$(BIN)/pytest -n $(TEST_WORKERS) --dist worksteal --timeout 300 $(FAST)

# The long fault tests (real processes: SIGKILL, terminated backends, replicas, pgbouncer,
# SIGTERM); each prints its counts.
test-faults: install
	$(BIN)/pytest --timeout 1200 -m faults -s tests/faults

# The dashboard's browser tests (tests/ui): Debian's chromium (installed when missing) driven
# by Playwright from the `ui` extra; on SQLite, and on PostgreSQL when TEST_DATABASE_URL is set.
CHROMIUM := /usr/bin/chromium
$(VENV)/.ui: pyproject.toml $(VENV)/.installed
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[dev,ui]'
	touch $@

$(CHROMIUM):
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium

test-ui: $(VENV)/.ui $(CHROMIUM)
	$(BIN)/pytest --timeout 600 -m ui tests/ui

# A screenshot of each view of the dashboard, into docs/screenshots (SQLite only).
screenshots: $(VENV)/.ui $(CHROMIUM)
	env -u TEST_DATABASE_URL UI_SCREENSHOTS=docs/screenshots $(BIN)/pytest -m ui tests/ui -q

schema: install
	$(BIN)/connector-store schema > graphql/schema.graphql
	$(BIN)/connector-store schema --client > graphql/client-schema.graphql
	$(BIN)/connector-store documents
	$(MAKE) codegen

# Every named statement's SQL, per backend, as store/sql/<backend>/<name>.sql
# (tests/test_sql_snapshot.py fails when one is stale).
sql: install
	$(BIN)/connector-store sql

# Every path beside its floor, in one run (BENCH_ARGS=--million adds the 1M-row sizes);
# then the live updates' latency, memory and trigger cost (benchmarks/live.py); then
# leasing beside a capped account's backlog and the batch settles at 1k/100k live rows,
# right after a burst (benchmarks/capped.py); then a one-account burst of claims beside
# 1,000 accounts (benchmarks/claim_burst.py); a lease of 50 right after 50,000 claims
# (benchmarks/burst_lease.py); then each view of the dashboard at 100,000
# operations in Chromium (benchmarks/ui.py).
# The peers: procrastinate from the `bench` extra, pg-boss from benchmarks/peers/package-lock.json.
bench: install $(VENV)/.ui $(CHROMIUM)
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[dev,bench]'
	cd benchmarks/peers && npm ci --silent --no-audit --no-fund
	$(BIN)/python -m benchmarks.side_by_side $(BENCH_ARGS)
	$(BIN)/python -m benchmarks.live
	$(BIN)/python -m benchmarks.capped
	$(BIN)/python -m benchmarks.claim_burst
	$(BIN)/python -m benchmarks.burst_lease
	$(BIN)/python -m benchmarks.ui
