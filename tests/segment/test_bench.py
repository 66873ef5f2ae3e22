"""`logport bench segment` runs end to end (its figures are for docs/benchmarks.md, not for tests)."""

from __future__ import annotations

from pathlib import Path

import pytest

from logport.cli import main


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
