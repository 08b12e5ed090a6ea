# The two entry points a newcomer needs: `make run` and `make test`.
VENV ?= .venv
PYTHON ?= python3
BIN := $(VENV)/bin

.PHONY: run test lint typecheck unit dist

# Install the server alone and run it on its embedded default (data in ./data).
run: $(VENV)/.run-installed
	$(BIN)/wiremq serve

$(VENV)/.run-installed: pyproject.toml setup.py modules/stomp/_fast.c server/_syncthread.c modules/journal/_encode.c modules/selector/_number.c modules/_message.c
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e .
	touch $@

# Install everything (dev tools included) and run the linters and the whole test suite.
# The store tests start their own PostgreSQL cluster, the console's and stomp.js's tests drive
# a headless Chromium (so does the audit report's), stomp.js runs in Node too: Debian's packages
# are installed when missing. The Spark audits need Java 17 (PySpark runs Spark in a JVM):
# installed when missing, or a clear error.
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
APT := flock /tmp/wiremq-apt.lock sh -c
$(VENV)/.dev-installed: pyproject.toml setup.py modules/stomp/_fast.c server/_syncthread.c modules/journal/_encode.c modules/selector/_number.c modules/_message.c
	@if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 && ! command -v initdb >/dev/null; then \
		$(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq postgresql >/dev/null; \
	fi
	@if ! command -v java >/dev/null && [ -z "$$JAVA_HOME" ]; then \
		echo "Java not found: installing openjdk-17-jre-headless (PySpark needs a Java 17)"; \
		$(APT) '$(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
			$(SUDO) apt-get install -y -qq openjdk-17-jre-headless >/dev/null' || \
		{ echo "wiremq: Java 17 is missing and could not be installed: install a Java 17 \
runtime (openjdk-17-jre-headless) or set JAVA_HOME, then run make again" >&2; exit 1; }; \
	fi
	@java -version 2>&1 | head -1
	@if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then \
		$(APT) '$(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
			$(SUDO) apt-get install -y -qq chromium chromium-driver >/dev/null'; \
	fi
	@if ! command -v npm >/dev/null; then \
		$(APT) '$(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
			$(SUDO) apt-get install -y -qq nodejs npm >/dev/null'; \
	fi
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@ $(VENV)/.run-installed

# The browser tests run the real stomp.js (npm, pinned by the lockfile) in Node and Chromium.
BROWSER := tests/browser
$(BROWSER)/node_modules/.installed: $(VENV)/.dev-installed $(BROWSER)/package.json $(BROWSER)/package-lock.json
	cd $(BROWSER) && npm ci --no-audit --no-fund --loglevel=error
	touch $@

# The sdist and the wheel (which compiles the C parts), in dist/.
dist: $(VENV)/.dev-installed
	$(BIN)/python -m build --outdir dist

lint: $(VENV)/.dev-installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(VENV)/.dev-installed
	$(BIN)/mypy server modules config stores admin analytics

test: lint typecheck $(BROWSER)/node_modules/.installed
	$(BIN)/pytest -q
