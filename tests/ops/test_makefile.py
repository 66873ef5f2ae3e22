"""`make run` sets up only what the hub needs (the package with its C extensions and runtime dependencies: no
test tools, no FUSE); `make test` sets up the rest. Read from what make would run on a clean clone (`make -n`
with a venv that does not exist yet)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO

TEST_ONLY = ("'.[dev]'", "fuse3", "libfuse3-dev", "npm ci", "default-jdk-headless", "tmux", "prometheus")


def planned(target: str, venv: Path) -> str:
    """The commands `make TARGET` would run from nothing (a venv that does not exist; `make -n` runs none)."""
    done = subprocess.run(["make", "-n", "--no-print-directory", f"VENV={venv}", target], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_make_run_installs_only_what_the_hub_needs(tmp_path: Path) -> None:
    run = planned("run", tmp_path / "venv")
    assert f"{tmp_path}/venv/bin/python -m pip install -q -e .\n" in run
    assert "python3-dev" in run and "zlib1g-dev" in run and "gcc" in run  # the C extensions build
    assert [tool for tool in TEST_ONLY if tool in run] == []
    assert run.rstrip().endswith("logport serve --data-dir ./data")


@pytest.mark.parametrize("tool", TEST_ONLY)
def test_make_test_installs_the_rest(tmp_path: Path, tool: str) -> None:
    test = planned("test", tmp_path / "venv")
    assert "-m pip install -q -e .\n" in test  # what make run installs, first
    assert tool in test
