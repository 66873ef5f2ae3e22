"""`logport bench segment` runs end to end (its figures are for docs/benchmarks.md, not for tests)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from logport.cli import main

REPO = Path(__file__).resolve().parents[2]


def test_bench_segment_runs_each_configuration_and_prints_both_tables(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "segment", "--dir", str(tmp_path), "--sizes", "65536", "--appenders", "1",
                 "--mib-large", "1", "--warmup-mib", "1", "--repeat", "1"]) == 0
    out = capsys.readouterr().out
    (append_row,) = [line for line in out.splitlines() if line.startswith("| 64 KiB |         1 |")]
    assert append_row.count("%") == 2  # the ratio of the medians and the one run's
    (read_row,) = [line for line in out.splitlines() if line.startswith("| 64 KiB |") and line != append_row]
    assert read_row.count("%") == 2
    assert list(tmp_path.iterdir()) == []  # the data of every case is gone


def test_bench_segment_runs_a_baseline_revision_beside_this_code(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "segment", "--dir", str(tmp_path), "--sizes", "65536", "--appenders", "1",
                 "--mib-large", "1", "--warmup-mib", "0", "--repeat", "2", "--baseline", "HEAD"]) == 0
    rows = [[cell.strip() for cell in line.split("|")[1:-1]] for line in capsys.readouterr().out.splitlines()
            if line.startswith("| 64 KiB |")]
    appends = [row for row in rows if row[1] == "1"]  # event, appenders, code, ...
    reads = [row for row in rows if row[1] != "1"]  # event, code, ...
    assert [row[2] for row in appends] == ["this", "HEAD"]
    assert [row[1] for row in reads] == ["this", "HEAD"]
    assert all(len(row[9].split()) == 2 for row in appends)  # the ratio of each of the two runs
    assert list(tmp_path.iterdir()) == []
    worktrees = subprocess.run(["git", "-C", str(REPO), "worktree", "list"], capture_output=True, text=True).stdout
    assert str(tmp_path) not in worktrees  # the baseline's worktree is removed
