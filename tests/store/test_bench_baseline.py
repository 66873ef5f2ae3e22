"""`logport bench forward --baseline REV` runs this code's hub and the revision's side by side (its figures
are for docs/benchmarks.md, not for tests): a row per code, and the revision's worktree removed after."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from logport.cli import main

REPO = Path(__file__).resolve().parents[2]


def test_bench_forward_runs_a_baseline_revision_beside_this_code(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "forward", "--skip-node", "--rounds", "2", "--seconds", "0.5", "--store-mib", "4",
                 "--dir", str(tmp_path), "--baseline", "HEAD"]) == 0
    rows = [[cell.strip() for cell in line.split("|")[1:-1]] for line in capsys.readouterr().out.splitlines()
            if line.startswith("| ")][1:]  # the header row is not a result
    assert [row[0] for row in rows] == ["this", "HEAD"]
    for row in rows:
        assert int(row[1].replace(",", "")) > 0 and int(row[2].replace(",", "")) > 0  # events/s, per CPU-s
        assert len(row[4].split()) == 2  # a figure per round
    assert list(tmp_path.iterdir()) == []
    worktrees = subprocess.run(["git", "-C", str(REPO), "worktree", "list"], capture_output=True, text=True).stdout
    assert str(tmp_path) not in worktrees
