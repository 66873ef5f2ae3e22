"""`logport send segment` across a SIGKILL of its hub: one line says which hub went away and that it is
resending, nothing is written to the dead connection (asyncio's `socket.send() raised exception.` once
came 48,528 times in a run), and every line is stored exactly once."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

import pytest

from logport.store.reader import DirectoryReader
from tests.chaos.harness import HubProcess

LINES = [b"line %06d %s" % (i, b"x" * 40) for i in range(300_000)]


def stored_bytes(data_dir: Path) -> int:
    """How far the hub has written, cheaply: its chunk files' sizes (no chunk is written ahead, so they grow
    with the data; a DirectoryReader would check every group's checksum and make the kill come late)."""
    seg_dir = data_dir / "segments" / "lines"
    return sum(p.stat().st_size for p in seg_dir.glob("*.log")) if seg_dir.is_dir() else 0


@pytest.mark.slow
@pytest.mark.timeout(180)
async def test_send_segment_says_once_that_the_hub_went_away_and_resends(tmp_path: Path) -> None:
    hub = HubProcess(tmp_path / "hub", ("segment",))
    await hub.start()
    server = f"127.0.0.1:{hub.ports['segment']}"
    source = tmp_path / "input"
    source.write_bytes(b"".join(line + b"\n" for line in LINES))
    total = source.stat().st_size
    try:
        with source.open("rb") as stdin:
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "logport.cli", "send", "segment", "lines", "--server", server,
                "--block-size", "4096", "--timeout", "60", stdin=stdin, stderr=asyncio.subprocess.PIPE)
        deadline = time.monotonic() + 60
        while stored_bytes(hub.data_dir) < total // 4 and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        assert proc.returncode is None, "the send ended before the hub could be killed mid-send"
        hub.kill()
        await asyncio.sleep(0.3)
        await hub.start()
        _, err = await asyncio.wait_for(proc.communicate(), 150)
    finally:
        hub.stop()
    text = err.decode()
    assert proc.returncode == 0, text[-3000:]
    assert "socket.send() raised exception" not in text, f"{text.count(chr(10))} lines: {text[:500]}"
    assert "Traceback" not in text, text[-3000:]
    went_away = [line for line in text.splitlines() if "went away" in line]
    assert len(went_away) == 1, text[-3000:]
    assert server in went_away[0] and "resending" in went_away[0], went_away
    reader = DirectoryReader(hub.data_dir)
    assert [bytes(body) for _, body in reader.iter_events("lines")] == LINES  # each once, in order
    reader.close()
