# The two entry points a newcomer needs: `make run` and `make test`.
VENV ?= .venv
PYTHON ?= python3
BIN := $(VENV)/bin

.PHONY: run test lint typecheck unit

# Install the server alone and run it on its embedded default (data in ./data).
run: $(VENV)/.run-installed
	$(BIN)/wiremq serve

$(VENV)/.run-installed: pyproject.toml setup.py modules/stomp/_fast.c modules/journal/_encode.c
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e .
	touch $@

# Install everything (dev tools included) and run the linters and the whole test suite.
# The store tests start their own PostgreSQL cluster: Debian's server programs are installed
# when missing.
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
$(VENV)/.dev-installed: pyproject.toml setup.py modules/stomp/_fast.c modules/journal/_encode.c
	@if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 && ! command -v initdb >/dev/null; then \
		$(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq postgresql >/dev/null; \
	fi
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@ $(VENV)/.run-installed

lint: $(VENV)/.dev-installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(VENV)/.dev-installed
	$(BIN)/mypy server modules config stores admin analytics

test: lint typecheck
	$(BIN)/pytest -q
