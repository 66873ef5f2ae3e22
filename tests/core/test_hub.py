"""The hub: opens the store, serves Prometheus metrics, stops cleanly."""

from __future__ import annotations

import asyncio
import socket
import urllib.request
from pathlib import Path

from logport.config import Config
from logport.hub import Hub, ListenerError
from logport.store import frames
from logport.store.groups import CHUNK_HEADER_SIZE, COMMIT_SIZE
from tests.conftest import free_port


def config_without_listeners(tmp_path: Path) -> Config:
    c = Config()
    c.store.data_dir = str(tmp_path / "data")
    for section in c.listener_sections():
        section.enabled = False
    c.metrics.port = free_port()
    return c


async def test_metrics_endpoint_shows_store_activity(tmp_path: Path) -> None:
    config = config_without_listeners(tmp_path)
    hub = Hub(config)
    runtime = await hub.start()
    try:
        await runtime.store.append("seg-a", [b"x" * 100])
        last = await runtime.store.append("seg-a", [b"y" * 100])
        url = f"http://127.0.0.1:{config.metrics.port}/metrics"
        text = await asyncio.get_running_loop().run_in_executor(None, lambda: urllib.request.urlopen(url).read().decode())
    finally:
        await hub.stop()
    assert 'logport_store_appends_total{segment="seg-a"} 2.0' in text
    assert 'logport_store_append_bytes_total{segment="seg-a"} 216.0' in text  # the two event frames
    assert "logport_store_fsyncs_total" in text
    assert "logport_store_fsync_seconds_bucket" in text
    # end - start offset: the event frames and, format v2, the chunk header and each append's COMMIT frame
    held = CHUNK_HEADER_SIZE + 2 * (COMMIT_SIZE + frames.HEADER_SIZE + 100)
    assert last.end_offset == held
    assert f'logport_segment_bytes{{segment="seg-a"}} {float(held)}' in text
    assert 'logport_store_pending_bytes{segment="seg-a"} 0.0' in text


async def test_hub_restart_keeps_the_data(tmp_path: Path) -> None:
    config = config_without_listeners(tmp_path)
    hub = Hub(config, serve_metrics=False)
    runtime = await hub.start()
    kept = await runtime.store.append("s", [b"kept"])
    await hub.stop()
    assert kept.end_offset == CHUNK_HEADER_SIZE + COMMIT_SIZE + frames.HEADER_SIZE + len(b"kept")
    hub = Hub(config, serve_metrics=False)
    runtime = await hub.start()
    assert runtime.store.info("s").end_offset == kept.end_offset
    await hub.stop()


async def start_refused(hub: Hub) -> ListenerError:
    """The ListenerError the hub's start raises (a hub that starts is stopped and fails the test)."""
    try:
        await hub.start()
    except ListenerError as e:
        return e
    await hub.stop()
    raise AssertionError("the hub started on a taken port")


async def test_a_taken_port_is_a_clear_error(tmp_path: Path) -> None:
    config = config_without_listeners(tmp_path)
    config.forward.enabled = True
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        config.forward.port = taken.getsockname()[1]
        hub = Hub(config, serve_metrics=False)
        e = await start_refused(hub)
        assert f"forward listener could not start on 127.0.0.1:{config.forward.port}" in str(e)
        assert "in use" in str(e)
    assert hub.runtime is None  # the store was closed again


async def test_a_taken_metrics_port_is_a_clear_error_and_stops_what_started(tmp_path: Path) -> None:
    """Raised like a listener's taken port (the CLI prints it, no traceback), after closing the listeners
    and the store that had started before it."""
    config = config_without_listeners(tmp_path)
    config.forward.enabled = True
    config.forward.port = free_port()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        config.metrics.port = taken.getsockname()[1]
        hub = Hub(config)
        e = await start_refused(hub)
        assert f"metrics endpoint could not start on 127.0.0.1:{config.metrics.port}" in str(e)
        assert "in use" in str(e)
    assert hub.runtime is None and not hub.services  # the store and the Forward listener were closed
    with socket.socket() as again:  # the Forward listener's port is free again
        again.bind(("127.0.0.1", config.forward.port))


async def test_the_hub_enforces_retention_on_its_own(tmp_path: Path) -> None:
    """Nobody calls enforce_retention: the hub's loop, every store.retention_check_interval, cuts whole
    chunks past store.retention_bytes and deletes their files."""
    config = config_without_listeners(tmp_path)
    config.store.fsync = "never"
    config.store.chunk_size = 1024
    config.store.max_frame_size = 512
    config.store.retention_bytes = 1024
    config.store.retention_check_interval = 0.05
    hub = Hub(config, serve_metrics=False)
    runtime = await hub.start()
    try:
        for _ in range(12):  # 12 frames of 408 bytes: a chunk rolls every 3
            await runtime.store.append("s", [b"x" * 400])
        seg_dir = tmp_path / "data" / "segments" / "s"
        first_chunk = seg_dir / f"{0:020d}.log"  # on a slow machine a pass may have cut it already
        for _ in range(100):  # the start offset moves first (reads below it are refused), then files go
            # a pass may have run while the appends did (a slow machine): wait for one after the last
            now = runtime.store.info("s")
            start = now.start_offset
            if (start > 0 and now.end_offset - start <= 1024
                    and all(int(c.stem) >= start for c in seg_dir.glob("*.log"))):
                break
            await asyncio.sleep(0.02)
        info = runtime.store.info("s")
        assert info.start_offset > 0 and info.end_offset - info.start_offset <= 1024
        chunks_after = sorted(seg_dir.glob("*.log"))
        assert not first_chunk.exists() and chunks_after  # whole chunks cut, their files deleted
        assert int(chunks_after[0].stem) == info.start_offset  # the first kept chunk starts where reads do
        assert all(int(c.stem) < info.end_offset for c in chunks_after)
    finally:
        await hub.stop()
