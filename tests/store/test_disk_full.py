"""A really full filesystem (a 2 MiB tmpfs): no acknowledgement for what was not written,
a clear error, service resumes when space returns, and no corrupt segment."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from logport.config import StoreConfig
from logport.errors import StoreWriteFailed
from logport.store import SegmentStore, WriterCondition, frames
from logport.store.files import chunk_path
from logport.store.groups import walk_chunk
from logport.store.reader import DirectoryReader


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root (CI runs as root)")
    mount = tmp_path / "fs"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


async def test_disk_full_then_space_returns(small_fs: Path) -> None:
    cfg = StoreConfig(data_dir=str(small_fs / "data"), chunk_size=256 * 1024, max_frame_size=64 * 1024)
    store = await SegmentStore.open(cfg)
    acked: list[bytes] = []
    failures = 0
    body = 0
    while failures < 3:
        payload = f"{body:08d}".encode() * 512  # 4 KiB
        try:
            await store.append("s", [payload], writer=WriterCondition(b"w", end=body + 1))
            acked.append(payload)
        except StoreWriteFailed as e:
            assert "No space left on device" in str(e) and "nothing was acknowledged" in str(e)
            failures += 1
        body += 1
    assert len(acked) > 100
    assert store.writer_offset("s", b"w") == len(acked)  # the failed appends left no writer state
    # space returns: retention deletes old chunks
    await store.truncate("s", store.segment("s").reader.bases[-1])  # a chunk base is a frame boundary
    resumed = await store.append("s", [b"after"], writer=WriterCondition(b"w", end=10**6))
    assert not resumed.duplicate
    await store.close()
    # nothing torn: the files hold whole frames only, the acknowledged tail intact, in order
    reader = DirectoryReader(cfg.data_dir)
    events = [bytes(b) for _, b in reader.iter_events("s")]
    assert events[-1] == b"after"
    assert events[:-1] == acked[-len(events) + 1 :]
    start, end, _ = reader.bounds("s")
    assert sum(1 for _ in reader.iter_frames("s", start, end)) > 0
    # every chunk's groups are valid (the failed writes left none half there), each chunk's data ends where the
    # next starts, and the last one's where bounds ends (a failed write's leftovers after it are not data)
    chunks = reader.chunk_reader("s")
    for base, nxt in zip(chunks.bases, [*chunks.bases[1:], end], strict=True):
        layout = walk_chunk(chunk_path(chunks.seg_dir, base).read_bytes(), base)
        assert (layout.end, layout.corrupt) == (nxt, [])
    store = await SegmentStore.open(cfg)
    assert store.info("s").end_offset == end
    r = await store.read_frames("s", store.info("s").start_offset, 1 << 30)
    assert frames.complete_prefix(r.data) == len(r.data)
    await store.close()


FILL = """
import asyncio, os, signal, sys
from logport.config import StoreConfig
from logport.errors import StoreWriteFailed
from logport.store import SegmentStore

async def fill():
    store = await SegmentStore.open(StoreConfig(data_dir=sys.argv[1], chunk_size=512 * 1024))
    n = 0
    try:
        while True:
            await store.append("s", [os.urandom(8000)])
            n += 1
    except StoreWriteFailed:
        print(n, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)  # a crash: nothing is closed

asyncio.run(fill())
"""


def test_disk_full_crash_recovery(small_fs: Path) -> None:
    """Fill the disk, then reopen without closing (after a crash: a hub killed, whose data-directory lock
    the kernel released): the store opens and appends."""
    child = subprocess.run([sys.executable, "-c", FILL, str(small_fs / "data")], capture_output=True, text=True,
                           timeout=120)
    assert child.returncode == -signal.SIGKILL, child.stderr
    n = int(child.stdout)
    (small_fs / "data" / "filler").write_bytes(b"")

    async def reopen() -> int:
        store = await SegmentStore.open(StoreConfig(data_dir=str(small_fs / "data"), chunk_size=512 * 1024))
        count = sum(1 for _ in DirectoryReader(small_fs / "data").iter_events("s"))
        await store.close()
        return count

    assert asyncio.run(reopen()) == n
