# The two commands: `make run` (the hub with its embedded store in ./data) and `make test`.
# Both set up what they need from nothing. `make run`: the venv with the package, its C extensions and its
# runtime dependencies only (no test tools, no FUSE). `make test`: that, the dev extras (pytest, mypy, the
# FUSE file system of the power-loss tests), the Node test peers (from package-lock.json) and a Java runtime
# for Spark.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
RUN_STAMP := $(VENV)/.run-stamp
STAMP := $(VENV)/.installed-stamp
NODE_STAMP := node_modules/.installed-stamp
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
PACKAGE := pyproject.toml setup.py $(wildcard src/logport/*/*.c src/logport/*/*.h)

.PHONY: run test lint bench setup java node clean ui-assets chromium screenshots

run: $(RUN_STAMP)
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
	@# iproute2's ip makes the network namespaces the tests of several hosts run in (tests/multihub)
	@command -v ip >/dev/null || { $(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q iproute2; }
	@command -v promtool >/dev/null && command -v prometheus >/dev/null || { $(SUDO) apt-get update -q \
		&& $(SUDO) apt-get install -y -q --no-install-recommends prometheus; }

setup: $(STAMP) node java ui-assets chromium

# `logport ui` ships Apache ECharts in the package: copied from node_modules (npm ci) at build time, not committed
ECHARTS := src/logport/ui/static/echarts.min.js
ui-assets: $(ECHARTS)

$(ECHARTS): $(NODE_STAMP)
	cp node_modules/echarts/dist/echarts.min.js $@

# the UI's browser tests (tests/ui) drive Debian's chromium with Playwright (Playwright's own browser download
# does not work here)
chromium:
	@command -v chromium >/dev/null || { $(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q chromium; }

# README's screenshots of the dashboard and of a request page, over generated traffic (docs/img/, committed)
screenshots: setup
	$(BIN)/python bench/_ui_screenshots.py --out docs/img

lint: $(STAMP)
	$(BIN)/ruff check src tests bench
	$(BIN)/mypy src

bench: setup
	$(BIN)/logport bench

# The hub: a fresh Debian/Ubuntu ships python3 without ensurepip (the python3-venv package), which venv needs,
# and perhaps without a C compiler and Python's headers, which the C extensions need (setup.py). Installed
# editable, as `make test` installs it: one venv serves both, and a `make run` after `make test` (or before)
# never leaves the tests an older copy of the sources.
$(RUN_STAMP): $(PACKAGE)
	@[ -x $(BIN)/python ] || { $(PYTHON) -c 'import ensurepip' 2>/dev/null \
		|| { $(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q python3-venv; }; $(PYTHON) -m venv $(VENV); }
	@command -v cc >/dev/null || { $(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q gcc; }
	@$(BIN)/python -c 'import os, sysconfig; assert os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h"))' \
		2>/dev/null || { $(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q python3-dev; }
	@# logjam's C pass inflates zlib bodies with zlib (setup.py links it to _logjam_scan)
	@[ -e /usr/include/zlib.h ] || { $(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q zlib1g-dev; }
	@# logjam's C pass drains the ZeroMQ sockets itself (libzmq's C API: its headers), and bench logjam's load
	@# generator (bench/_logjam_load.c) links libzmq
	@[ -e /usr/include/zmq.h ] || { $(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q libzmq3-dev; }
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e .
	touch $@

# What the tests need beside the hub: the dev extras, and for them the power-loss tests' FUSE file system
# (tests/powerloss): pyfuse3 builds against libfuse3
$(STAMP): $(RUN_STAMP) $(PACKAGE)
	@pkg-config --exists fuse3 2>/dev/null && command -v fusermount3 >/dev/null \
		|| { $(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q fuse3 libfuse3-dev pkg-config; }
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
