"""The recovery point (store/marks.py), as a user meets it: acknowledged Forward chunks, a clean stop, one bit of
the last commit group flipped. Every reader reports the range (`cat` and `verify` exit 1, `segments` marks it);
the hub starts, keeps the range as it is (quarantined: never overwritten, appends go on in a new chunk after it),
logs it, counts it and says so on /ready; `verify --repair` gives it up, after which readers skip it with a
warning; the quarantined chunk's id is not remembered, so its resend is stored again, once. After a crash, a
failing group above the recovery point is a torn write: cut, and logged."""

from __future__ import annotations

import json
import logging
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from logport.batch import decode_batch
from logport.config import Config
from logport.store import marks
from logport.store.files import SEGMENTS_DIR, SegmentState, chunk_path, list_chunk_bases
from logport.store.groups import COMMIT_SIZE, walk_chunk
from logport.store.reader import DirectoryReader
from tests.conftest import REPO
from tests.forward.test_server import entries, send_chunk
from tests.support import hub_config, running_hub

CHUNKS = 20
PER_CHUNK = 100


def logport(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "logport.cli", *args], capture_output=True, text=True, timeout=120,
                          cwd=REPO)


def chunk_ids(data_dir: Path) -> list[str]:
    return [decode_batch(body).option["chunk"] for _, _, body in DirectoryReader(data_dir).follow("forward")]


async def store_chunks(config: Config, ids: list[str]) -> list[object]:
    async with running_hub(config):
        return [await send_chunk(config.forward.port, chunk, entries(PER_CHUNK, i * PER_CHUNK))
                for i, chunk in enumerate(ids)]


def flip_in_the_last_group(seg_dir: Path) -> tuple[Path, int, int]:
    """One bit of the last group's events flipped; (the file, the group's range)."""
    base = list_chunk_bases(seg_dir)[-1]
    path = chunk_path(seg_dir, base)
    layout = walk_chunk(path.read_bytes(), base)
    start, end = layout.groups[-1], layout.end
    data = bytearray(path.read_bytes())
    data[start - base + COMMIT_SIZE + 40] ^= 0x08
    path.write_bytes(bytes(data))
    return path, start, end


async def test_a_damaged_last_group_is_corruption_kept_reported_and_given_up_on_purpose(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    data_dir = tmp_path / "data"
    config = hub_config(data_dir, ["forward"])
    ids = [f"chunk-{i:02d}" for i in range(CHUNKS)]
    assert await store_chunks(config, ids) == [{"ack": chunk} for chunk in ids]
    seg_dir = data_dir / SEGMENTS_DIR / "forward"
    path, start, end = flip_in_the_last_group(seg_dir)
    damaged = path.read_bytes()

    # the hub stopped: every reader says so
    cat = logport("cat", "--data-dir", str(data_dir), "forward")
    assert cat.returncode == 1 and len(cat.stdout.splitlines()) == (CHUNKS - 1) * PER_CHUNK
    assert f"bytes {start}..{end} of {path} are corrupt (checksum mismatch, below the recovery point" in cat.stderr
    verify = logport("verify", "--data-dir", str(data_dir), "--json")
    assert verify.returncode == 1
    (bad,) = json.loads(verify.stdout)["bad"]
    assert (bad["start"], bad["end"], bad["file"]) == (start, end, str(path))
    (row,) = map(json.loads, logport("segments", "--data-dir", str(data_dir), "--json").stdout.splitlines())
    assert [(c["start"], c["end"]) for c in row["corrupt"]] == [(start, end)]
    assert row["events"] == (CHUNKS - 1) * PER_CHUNK and row["end_offset"] == end

    # the hub starts, keeps the range, goes on after it
    caplog.set_level(logging.INFO, logger="logport.store")
    async with running_hub(config) as hub:
        assert hub.runtime is not None
        store = hub.runtime.store
        (kept,) = [r for r in caplog.records if r.getMessage().startswith("corrupt data below the recovery point")]
        assert (kept.start, kept.end, kept.file, kept.groups, kept.bytes) == (  # type: ignore[attr-defined]
            start, end, str(path), 1, end - start)
        assert store.info("forward").end_offset > end  # a new chunk, after the range
        assert list_chunk_bases(seg_dir)[-1] == end
        assert hub.metrics.registry.get_sample_value("logport_store_corrupt_groups", {"segment": "forward"}) == 1
        assert hub.monitor is not None
        hub.monitor.tick()
        status, body = hub.monitor.ready()
        assert status == 200 and body["warnings"][0]["segment"] == "forward"
        assert f"bytes {start}..{end}" in body["warnings"][0]["reason"]
        assert await send_chunk(config.forward.port, "after", entries(3)) == {"ack": "after"}
    assert path.read_bytes() == damaged  # never overwritten
    assert [(r.start, r.end, r.given_up) for r in SegmentState.load(seg_dir).corrupt] == [(start, end, None)]
    cat = logport("cat", "--data-dir", str(data_dir), "forward")
    assert cat.returncode == 1 and f"bytes {start}..{end} of {path} are corrupt" in cat.stderr
    assert logport("verify", "--data-dir", str(data_dir)).returncode == 1

    # given up on purpose: recorded; readers skip it with a warning
    async with running_hub(config):
        refused = logport("verify", "--data-dir", str(data_dir), "--repair", "forward")
        assert refused.returncode == 1 and "in use by logport (pid" in refused.stderr
    repair = logport("verify", "--data-dir", str(data_dir), "--repair", "forward")
    assert repair.returncode == 0 and f"gave up bytes {start}..{end} of {path}" in repair.stdout, repair
    (given_up,) = SegmentState.load(seg_dir).corrupt
    assert given_up.given_up
    cat = logport("cat", "--data-dir", str(data_dir), "forward")
    assert cat.returncode == 0 and f"bytes {start}..{end} of {path} were given up at" in cat.stderr
    assert len(cat.stdout.splitlines()) == (CHUNKS - 1) * PER_CHUNK + 3
    verify = logport("verify", "--data-dir", str(data_dir))
    assert verify.returncode == 0 and "1 given up" in verify.stdout and "given up (checksum mismatch" in verify.stdout

    # the quarantined chunk's id was never remembered: its resend is stored again, once
    async with running_hub(config) as hub:
        assert hub.metrics.registry.get_sample_value("logport_store_corrupt_groups", {"segment": "forward"}) == 0
        for _ in range(2):
            assert await send_chunk(config.forward.port, ids[-1], entries(PER_CHUNK, (CHUNKS - 1) * PER_CHUNK)) == {
                "ack": ids[-1]}
        assert await send_chunk(config.forward.port, ids[0], entries(PER_CHUNK)) == {"ack": ids[0]}  # remembered
    assert chunk_ids(data_dir) == [*ids[:-1], "after", ids[-1]]
    assert path.read_bytes() == damaged


async def test_a_crash_tears_only_above_the_recovery_point(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A SIGKILLed store whose last groups lie above its recovery point: a failing one there is a torn write
    (never acknowledged, as far as anything on disk can tell): cut, and logged with its range."""
    data_dir = tmp_path / "data"
    child = subprocess.Popen([sys.executable, "-m", "tests.store.filled_store", str(data_dir)], cwd=REPO,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert child.stdout is not None and child.stdout.readline() == b"FILLED\n"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    seg_dir = data_dir / SEGMENTS_DIR / "seg"
    point = marks.load(seg_dir).recovery_point(list_chunk_bases(seg_dir)[0])
    assert point is not None
    path, start, end = flip_in_the_last_group(seg_dir)
    assert start >= point.end  # written after the last recovery point
    assert logport("verify", "--data-dir", str(data_dir), "seg").returncode == 0
    caplog.set_level(logging.WARNING, logger="logport.store")
    from logport.store import SegmentStore
    from tests.store.filled_store import config as filled_config

    store = await SegmentStore.open(filled_config(str(data_dir)))
    try:
        assert store.info("seg").end_offset == start
        (torn,) = [r for r in caplog.records if r.getMessage().startswith("recovery cut a write")]
        assert (torn.segment, torn.start, torn.end, torn.file) == ("seg", start, end, str(path))  # type: ignore[attr-defined]
        assert not SegmentState.load(seg_dir).corrupt
    finally:
        await store.close()
