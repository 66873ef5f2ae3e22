"""The command line against a real data directory: segments, cat, bench listing, errors."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

from logport.batch import encode_batch
from logport.cli import main
from logport.config import StoreConfig
from logport.store import SegmentStore
from logport.store.groups import CHUNK_HEADER_SIZE, COMMIT_SIZE

# format v2: a new segment's first event follows its chunk header and its commit group's COMMIT frame
FIRST = CHUNK_HEADER_SIZE + COMMIT_SIZE


async def fill(data_dir: Path) -> None:
    store = await SegmentStore.open(StoreConfig(data_dir=str(data_dir)))
    await store.append("forward", [encode_batch("app.web", [(1700000000, 5, {"msg": "a"}), (1700000001, 999999999, {"msg": "b"})],
                                                {"size": 2, "source": "forward", "peer": "127.0.0.1:5000"})])
    await store.append("opaque", [b"\x00raw bytes"])
    await store.seal("opaque")
    await store.close()


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    asyncio.run(fill(tmp_path))
    return tmp_path


def test_segments(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["segments", "--data-dir", str(data_dir), "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["segment"], r["events"], r["sealed"], r["start_offset"]) for r in rows] == [
        ("forward", 2, False, 0), ("opaque", 1, True, 0)]
    assert main(["segments", "--data-dir", str(data_dir)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["SEGMENT", "START", "END", "BYTES", "EVENTS", "SEALED", "CORRUPT"]
    assert out[2].split()[0] == "opaque" and out[2].split()[-2:] == ["yes", "-"]


def test_cat(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cat", "forward", "--data-dir", str(data_dir)]) == 0
    events = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    option = {"size": 2, "source": "forward", "peer": "127.0.0.1:5000"}  # the batch's option map (README)
    assert events == [
        {"segment": "forward", "offset": FIRST, "index": 0, "tag": "app.web", "time": "2023-11-14T22:13:20.000000005Z",
         "time_ns": 1700000000000000005, "record": {"msg": "a"}, "source": "forward",
         "option": option},
        {"segment": "forward", "offset": FIRST, "index": 1, "tag": "app.web", "time": "2023-11-14T22:13:21.999999999Z",
         "time_ns": 1700000001999999999, "record": {"msg": "b"}, "source": "forward",
         "option": option},
    ]
    assert main(["cat", "opaque", "--data-dir", str(data_dir)]) == 0
    (raw,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert raw == {"segment": "opaque", "offset": FIRST, "index": 0, "raw": "AHJhdyBieXRlcw=="}


def test_cat_from_an_offset_past_everything(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    end = json.loads(subprocess.run([sys.executable, "-m", "logport.cli", "segments", "--json", "--data-dir",
                                     str(data_dir)], capture_output=True, text=True, check=True).stdout.splitlines()[0])["end_offset"]
    assert main(["cat", "forward", "--from", str(end), "--data-dir", str(data_dir)]) == 0
    assert capsys.readouterr().out == ""


def test_cat_follow_prints_new_events(data_dir: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "logport.cli", "cat", "forward", "--follow", "--data-dir", str(data_dir)],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        assert json.loads(proc.stdout.readline())["record"] == {"msg": "a"}
        assert json.loads(proc.stdout.readline())["record"] == {"msg": "b"}

        async def more() -> None:
            store = await SegmentStore.open(StoreConfig(data_dir=str(data_dir)))
            await store.append("forward", [encode_batch("late", [(2, 0, {"msg": "c"})], {"size": 1})])
            await store.close()

        asyncio.run(more())
        assert json.loads(proc.stdout.readline())["tag"] == "late"
    finally:
        proc.kill()
        proc.wait()


def test_errors_name_the_problem(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "segments").mkdir()  # a hub's data directory, without that segment
    assert main(["cat", "nosuch", "--data-dir", str(tmp_path)]) == 2
    assert "no such segment 'nosuch'" in capsys.readouterr().err
    cfg = tmp_path / "bad.toml"
    cfg.write_text("[store]\nfsync = 'maybe'\n")
    assert main(["segments", "--config", str(cfg)]) == 2
    assert "'store.fsync' has value 'maybe'" in capsys.readouterr().err


def test_bench_lists_its_scenarios(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench"]) == 0
    assert "store" in capsys.readouterr().out


def test_pipeline_takes_its_options_first_and_names_a_missing_data_dir(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nowhere"
    assert main(["pipeline", "--data-dir", str(missing), "--out", str(tmp_path / "out")]) == 2
    assert f"--data-dir '{missing}' is not a directory" in capsys.readouterr().err
