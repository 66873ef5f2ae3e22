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
    cells = [cell.strip() for cell in append_row.split("|")[1:-1]]
    loop_ms, threads_ms = (float(x) for x in cells[7].split(" / "))  # the hub's CPU per MB, split by thread
    assert loop_ms > 0 and threads_ms > 0
    assert loop_ms + threads_ms == pytest.approx(1000 / float(cells[6].replace(",", "")), rel=0.05)
    (read_row,) = [line for line in out.splitlines() if line.startswith("| 64 KiB |") and line != append_row]
    assert read_row.count("%") == 2
    assert list(tmp_path.iterdir()) == []  # the data of every case is gone


def test_bench_segment_appends_only_runs_no_reads(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "segment", "--dir", str(tmp_path), "--sizes", "65536", "--appenders", "1",
                 "--mib-large", "1", "--warmup-mib", "1", "--repeat", "1", "--appends-only"]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("| 64 KiB |")]
    assert len(rows) == 1 and rows[0].startswith("| 64 KiB |         1 |")  # the appends' row, no read row
    assert "catch-up" not in out
    assert list(tmp_path.iterdir()) == []


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
    assert all(len(row[10].split()) == 2 for row in appends)  # the ratio of each of the two runs
    assert list(tmp_path.iterdir()) == []
    worktrees = subprocess.run(["git", "-C", str(REPO), "worktree", "list"], capture_output=True, text=True).stdout
    assert str(tmp_path) not in worktrees  # the baseline's worktree is removed


def test_a_baseline_whose_c_source_differs_gets_its_own_build(tmp_path: Path) -> None:
    """--baseline compiles a revision's C extension when its source is not this tree's (it ran without it, in
    Python, and so looked slower than it was)."""
    import importlib.util
    import sys

    sys.path.insert(0, str(REPO / "bench"))
    try:
        from _common import build_extension
    finally:
        sys.path.remove(str(REPO / "bench"))
    source = tmp_path / "_segment_scan.c"
    source.write_text((REPO / "src/logport/protocols/_segment_scan.c").read_text()
                      .replace('"walk_events(data, start, avail', '"walk_events (built for a baseline)(data, start, avail'))
    target = tmp_path / "_segment_scan.so"
    assert build_extension(source, target)
    spec = importlib.util.spec_from_file_location("logport.protocols._segment_scan", target)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert "built for a baseline" in (module.walk_events.__doc__ or "")
    assert not build_extension(tmp_path / "absent.c", tmp_path / "absent.so")
