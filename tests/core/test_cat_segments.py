"""`logport segments` and `logport cat` on awkward data directories and offsets."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import msgpack
import pytest

from logport.batch import encode_batch
from logport.cli import main
from logport.config import StoreConfig
from logport.store import AppendResult, SegmentStore, frames
from logport.store.files import chunk_path, list_chunk_bases
from logport.store.groups import CHUNK_HEADER_SIZE, COMMIT_SIZE, walk_chunk
from tests.support import as_after_a_crash

# a body that decodes as a [tag, entries] batch whose entries are not msgpack: an opaque event
ODD_BATCH = msgpack.packb(["t", b"\xc1"])


async def append(data_dir: Path, segment: str, bodies: list[bytes]) -> list[AppendResult]:
    store = await SegmentStore.open(StoreConfig(data_dir=str(data_dir)))
    try:
        return [await store.append(segment, [body]) for body in bodies]
    finally:
        await store.close()


def test_segments_counts_an_odd_opaque_event_as_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    batch = encode_batch("app", [(1, 0, {"a": 1}), (2, 0, {"a": 2})], {})  # no size option: entries counted
    asyncio.run(append(tmp_path, "odd", [batch, ODD_BATCH, b"\x00raw"]))
    assert main(["segments", "--data-dir", str(tmp_path), "--json"]) == 0
    (row,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert (row["segment"], row["events"]) == ("odd", 4)
    assert main(["segments", "--data-dir", str(tmp_path)]) == 0
    assert capsys.readouterr().out.splitlines()[1].split()[:5:4] == ["odd", "4"]
    assert main(["cat", "odd", "--data-dir", str(tmp_path)]) == 0  # cat prints it as one raw event
    assert len(capsys.readouterr().out.splitlines()) == 4



async def fill_chunks(data_dir: Path) -> list[int]:
    """Segment `s` over several small chunks, with single and multi-frame appends; its event offsets."""
    store = await SegmentStore.open(StoreConfig(data_dir=str(data_dir), chunk_size=200, max_frame_size=100))
    offsets = []
    try:
        for i in range(8):
            bodies = [b"%d" % i * 30] if i % 2 else [b"%da" % i * 10, b"%db" % i * 10]
            result = await store.append("s", bodies)
            offsets += [result.offset + sum(frames.HEADER_SIZE + len(b) for b in bodies[:k]) for k in range(len(bodies))]
    finally:
        await store.close()
    return offsets


def frame_starts(data_dir: Path) -> list[int]:
    """Where each frame of `s` starts (events and the store's records), and where the last one ends.

    Format v2: a chunk file may be longer than its data (a spare written ahead with zeros, or recycled):
    its data ends where its last valid commit group ends (walk_chunk), never at the file's size."""
    seg_dir = data_dir / "segments" / "s"
    starts = []
    for base in list_chunk_bases(seg_dir):
        data = chunk_path(seg_dir, base).read_bytes()
        end = walk_chunk(data, base).end
        starts += [offset for offset, _, _ in frames.iter_frames(data[: end - base], base)]
    return starts + [end]


@pytest.fixture
def chunked(tmp_path: Path) -> tuple[Path, list[int]]:
    offsets = asyncio.run(fill_chunks(tmp_path))
    assert len(list_chunk_bases(tmp_path / "segments" / "s")) > 2
    return tmp_path, offsets


def cat(data_dir: Path, *args: str) -> int:
    return main(["cat", "s", "--data-dir", str(data_dir), *args])


def test_cat_from_every_frame_start(chunked: tuple[Path, list[int]], capsys: pytest.CaptureFixture[str]) -> None:
    data_dir, offsets = chunked
    starts = frame_starts(data_dir)
    assert set(offsets) < set(starts)  # group records start frames too
    for start in starts:
        assert cat(data_dir, "--from", str(start)) == 0
        printed = [json.loads(line)["offset"] for line in capsys.readouterr().out.splitlines()]
        assert printed == [o for o in offsets if o >= start]


def test_cat_refuses_an_offset_inside_a_frame(chunked: tuple[Path, list[int]], capsys: pytest.CaptureFixture[str]) -> None:
    data_dir, _ = chunked
    starts = frame_starts(data_dir)
    inside = [o for o in range(starts[-1]) if o not in starts]
    assert len(inside) > 300
    open_files = len(os.listdir("/proc/self/fd"))
    for offset in inside:
        assert cat(data_dir, "--from", str(offset)) == 2
        out, err = capsys.readouterr()
        assert out == ""
        assert err == f"logport: offset {offset} of segment 's' is not where a frame starts " \
                      f"(use an offset that logport cat printed)\n"
    # a refused cat closes the chunk files it opened (it left two open each time: 600 in this test, and
    # the rest of the suite ran past select()'s FD_SETSIZE)
    assert len(os.listdir("/proc/self/fd")) <= open_files


@pytest.mark.parametrize("follow", [[], ["--follow"]])
def test_cat_refuses_an_offset_past_the_end(chunked: tuple[Path, list[int]], follow: list[str]) -> None:
    data_dir, _ = chunked
    end = frame_starts(data_dir)[-1]
    for offset in (end + 1, end + 8, 10**12):
        # a subprocess: with --follow the unchecked offset waited for ever
        proc = subprocess.run([sys.executable, "-m", "logport.cli", "cat", "s", "--from", str(offset), *follow,
                               "--data-dir", str(data_dir)], capture_output=True, text=True, timeout=30)
        assert (proc.returncode, proc.stdout) == (2, "")
        assert proc.stderr == f"logport: offset {offset} of segment 's' is beyond its end {end}\n"


def test_cat_says_an_offset_below_the_start_was_truncated(
        chunked: tuple[Path, list[int]], capsys: pytest.CaptureFixture[str]) -> None:
    data_dir, offsets = chunked

    async def truncate() -> int:
        store = await SegmentStore.open(StoreConfig(data_dir=str(data_dir), chunk_size=200, max_frame_size=100))
        try:
            return (await store.truncate("s", offsets[4])).start_offset
        finally:
            await store.close()

    start = asyncio.run(truncate())
    for offset in (0, offsets[1], offsets[2] + 1, start - 1):
        assert cat(data_dir, "--from", str(offset)) == 2
        assert capsys.readouterr().err == (f"logport: offset {offset} of segment 's' is truncated; "
                                           f"the segment starts at {start}\n")
    assert cat(data_dir, "--from", str(start)) == 0
    assert [json.loads(line)["offset"] for line in capsys.readouterr().out.splitlines()] == offsets[4:]


@pytest.mark.parametrize("tear", ["cut", "zeroed"])
def test_segments_and_cat_before_recovery_show_only_what_it_keeps(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], tear: str) -> None:
    """A crash tore the last commit group, a multi-frame append: its COMMIT frame and first frames are whole,
    its last bytes are not (cut off, or zeros: a write into a spare chunk that did not all reach the disk);
    no restart yet. Format v2: the group fails its checksum, so nothing of it is shown."""
    (a,) = asyncio.run(append(tmp_path, "s", [b"a"]))
    assert a.offset == CHUNK_HEADER_SIZE + COMMIT_SIZE

    async def group() -> AppendResult:
        store = await SegmentStore.open(StoreConfig(data_dir=str(tmp_path)))
        try:
            return await store.append("s", [b"b" * 10, b"c" * 10, b"d" * 10])
        finally:
            await store.close()

    torn = asyncio.run(group())
    assert a.end_offset < torn.offset  # the torn append's first event: after its COMMIT frame and writer record
    path = chunk_path(tmp_path / "segments" / "s", 0)
    data = path.read_bytes()
    assert walk_chunk(data, 0).end == torn.end_offset
    if tear == "cut":
        path.write_bytes(data[: torn.end_offset - 5])
    else:
        path.write_bytes(data[: torn.end_offset - 5] + bytes(5) + data[torn.end_offset :])
    as_after_a_crash(tmp_path / "segments" / "s")  # torn by the crash: above its recovery point
    assert main(["segments", "--json", "--data-dir", str(tmp_path)]) == 0
    row = json.loads(capsys.readouterr().out)
    assert (row["end_offset"], row["bytes"], row["events"]) == (a.end_offset, a.end_offset, 1)
    assert main(["cat", "s", "--data-dir", str(tmp_path)]) == 0
    assert [json.loads(line)["raw"] for line in capsys.readouterr().out.splitlines()] == ["YQ=="]
    assert cat(tmp_path, "--from", str(a.end_offset)) == 0 and capsys.readouterr().out == ""
    assert cat(tmp_path, "--from", str(torn.offset)) == 2  # the torn append's first event: not there for readers
    assert f"offset {torn.offset} of segment 's' is beyond its end {a.end_offset}" in capsys.readouterr().err
    # the restart drops the torn group (v2 cuts nothing: its bytes are written over), the next one takes its place
    (e,) = asyncio.run(append(tmp_path, "s", [b"e"]))
    assert e.offset == a.end_offset + COMMIT_SIZE
    assert main(["cat", "s", "--data-dir", str(tmp_path)]) == 0
    assert [json.loads(line)["offset"] for line in capsys.readouterr().out.splitlines()] == [a.offset, e.offset]
