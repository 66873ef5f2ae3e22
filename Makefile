# The two commands: `make run` (the hub with its embedded store in ./data) and `make test`.
# Both set up everything from nothing: the venv, the package with its dev extras (and its C extension),
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

# tools the operations tests (tests/ops) run: systemd-analyze (Debian's systemd package) checks the unit file,
# tmux is the real terminal `logport top` is tested in, Debian's prometheus package gives promtool and a real
# Prometheus that scrapes a hub (monitoring/)
test: ops-tools

.PHONY: ops-tools
ops-tools:
	@command -v systemd-analyze >/dev/null || { $(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q systemd; }
	@command -v tmux >/dev/null || { $(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q tmux; }
	@command -v promtool >/dev/null && command -v prometheus >/dev/null || { $(SUDO) apt-get update -q \
		&& $(SUDO) apt-get install -y -q --no-install-recommends prometheus; }

setup: $(STAMP) node java

lint: $(STAMP)
	$(BIN)/ruff check src tests bench
	$(BIN)/mypy src

bench: setup
	$(BIN)/logport bench

# a fresh Debian/Ubuntu ships python3 without ensurepip (the python3-venv package), which venv needs, and
# perhaps without a C compiler and Python's headers, which the C extensions need (setup.py)
$(STAMP): pyproject.toml setup.py $(wildcard src/logport/protocols/*.c src/logport/protocols/*.h src/logport/spark/*.c src/logport/store/*.c)
	@[ -x $(BIN)/python ] || { $(PYTHON) -c 'import ensurepip' 2>/dev/null \
		|| { $(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q python3-venv; }; $(PYTHON) -m venv $(VENV); }
	@command -v cc >/dev/null || { $(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q gcc; }
	@$(BIN)/python -c 'import os, sysconfig; assert os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h"))' \
		2>/dev/null || { $(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q python3-dev; }
	@# logjam's C pass inflates zlib bodies with zlib (setup.py links it to _logjam_scan)
	@[ -e /usr/include/zlib.h ] || { $(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q zlib1g-dev; }
	@# the power-loss tests' FUSE file system (tests/powerloss): pyfuse3 builds against libfuse3
	@pkg-config --exists fuse3 2>/dev/null && command -v fusermount3 >/dev/null \
		|| { $(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q fuse3 libfuse3-dev pkg-config; }
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $@

node: $(NODE_STAMP)

$(NODE_STAMP): package.json package-lock.json
	@command -v npm >/dev/null || { $(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q nodejs npm; }
	npm ci --no-audit --no-fund
	touch $@

# Spark needs a Java runtime; the segment protocol's Java test peer runs from source (java File.java), which
# needs the compiler: a JDK, not only a JRE. PySpark 4 needs Java 17 or later, which an older release's
# default JDK is not; `java -version` says "1.8.0_392" for 8, "17.0.9" or "21" later
java:
	@command -v javac >/dev/null || { $(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q default-jdk-headless; }
	@version=$$(java -version 2>&1 | sed -n 's/^[^"]*"\([^"]*\)".*/\1/p' | head -n 1); v=$${version#1.}; major=$${v%%[!0-9]*}; \
		[ "$${major:-0}" -ge 17 ] || { echo "Java $${version:-unknown} is older than 17 (PySpark 4 needs 17): installing openjdk-17"; \
		$(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q openjdk-17-jdk-headless; }

clean:
	rm -rf $(VENV) node_modules .pytest_cache .hypothesis
