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


def test_bench_store_runs_each_chunk_mode_with_and_without_direct_io_and_reads_back(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "store", "--dir", str(tmp_path), "--sizes", "1024", "--writers", "2", "--mib-small", "1",
                 "--chunk-mib", "1", "--modes", "recycled,recycled+direct,none", "--repeat", "1"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ")]
    header = [cell.strip() for cell in lines[0].split("|")[1:-1]]
    rows = {cells[2]: dict(zip(header, cells, strict=True))
            for cells in ([cell.strip() for cell in line.split("|")[1:-1]] for line in lines[1:])}
    assert list(rows) == ["recycled", "recycled+direct", "none"]
    for row in rows.values():
        assert float(row["store MB/s"].replace(",", "")) > 0 and int(row["read back MB/s"].replace(",", "")) > 0
    with pytest.raises(SystemExit, match="unknown mode 'fresh\\+odirect'"):
        main(["bench", "store", "--dir", str(tmp_path), "--modes", "fresh+odirect"])
