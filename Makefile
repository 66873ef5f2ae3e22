# The two commands: `make run` (the hub with its embedded store in ./data) and `make test`.
# Both set up everything from nothing: the venv, the package with its dev extras,
# the Node test peers (from package-lock.json) and a Java runtime for Spark.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
NODE_STAMP := node_modules/.installed-stamp
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: run test lint bench setup java node clean

run: $(STAMP)
	$(BIN)/logport serve --data-dir ./data

test: setup
	$(BIN)/python -m pytest -q -p no:cacheprovider $(PYTEST_ARGS)

setup: $(STAMP) node java

lint: $(STAMP)
	$(BIN)/ruff check src tests bench
	$(BIN)/mypy src

bench: setup
	$(BIN)/logport bench

$(STAMP): pyproject.toml
	@[ -x $(BIN)/python ] || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $@

node: $(NODE_STAMP)

$(NODE_STAMP): package.json package-lock.json
	@command -v npm >/dev/null || { $(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q nodejs npm; }
	npm ci --no-audit --no-fund
	touch $@

# Spark needs a Java runtime; the segment protocol's Java test peer runs from source (java File.java), which
# needs the compiler: a JDK, not only a JRE
java:
	@command -v javac >/dev/null || { $(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q default-jdk-headless; }

clean:
	rm -rf $(VENV) node_modules .pytest_cache .hypothesis
