"""Real Beats-protocol senders -> the logport lumberjack listener.

PyPI pylogbeat (v2, one compressed window per send, growing sequences; plain and
over TLS) and npm lumberjack-protocol (v1 `D` frames over TLS, streaming).
"""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path

import pylogbeat
import pytest

from logport.config import TLSConfig
from tests.conftest import NODE_MODULES
from tests.lumberjack.harness import (
    lumberjack_config,
    running_hub,
    self_signed_cert,
    stored_batches,
    wait_for_records,
)

pytestmark = pytest.mark.interop
NODE_SCRIPT = Path(__file__).parent / "node" / "lumberjack_send.js"


def pylogbeat_send(port: int, windows: list[list[dict]], **tls: object) -> None:
    with pylogbeat.PyLogBeatClient("127.0.0.1", port, timeout=10, **tls) as client:
        for events in windows:
            client.send(events)  # returns once the window's highest seq is acknowledged


def filebeat_like(i: int) -> dict:
    return {
        "@timestamp": f"2026-11-22T04:05:{i % 60:02d}.123456789Z",
        "@metadata": {"beat": "pylogbeat", "type": "_doc", "version": "2.1.0"},
        "message": f"line {i}",
        "log": {"offset": i * 100, "file": {"path": "/var/log/app.log"}},
        "host": {"name": "web-1"},
    }


@pytest.mark.parametrize("use_tls", [False, True], ids=["plain", "tls"])
async def test_pylogbeat_windows_are_stored_and_acknowledged(tmp_path: Path, use_tls: bool) -> None:
    tls_kwargs: dict[str, object] = {}
    config = lumberjack_config(tmp_path / "data", tag_from_beat=True)
    if use_tls:
        cert, key = self_signed_cert(tmp_path)
        config.lumberjack.tls = TLSConfig(cert=str(cert), key=str(key))
        tls_kwargs = {"ssl_enable": True, "ssl_verify": True, "ca_certs": str(cert)}
    windows = [[filebeat_like(w * 100 + i) for i in range(n)] for w, n in enumerate((1, 50, 300))]
    async with running_hub(config) as hub:
        await asyncio.to_thread(pylogbeat_send, config.lumberjack.port, windows, **tls_kwargs)
        records = await wait_for_records(hub.runtime.store, "lumberjack", 351)
        batches = await stored_batches(hub.runtime.store, "lumberjack")
    assert len(records) == 351
    sent = [e for w in windows for e in w]
    for entry, event in zip(records, sent, strict=True):
        expected = {k: v for k, v in event.items() if k != "@metadata"}
        assert entry.record == expected
        assert entry.nanos == 123456789
    # the metadata went to the option, and named the tag
    assert {b.tag for b in batches} == {"pylogbeat"}
    assert all(b.option["@metadata"]["beat"] == "pylogbeat" for b in batches)


async def test_npm_lumberjack_protocol_v1_over_tls(tmp_path: Path) -> None:
    node = shutil.which("node")
    assert node, "node is required for the npm lumberjack-protocol peer"
    cert, key = self_signed_cert(tmp_path)
    config = lumberjack_config(tmp_path / "data", partial_window_delay=0.05)
    config.lumberjack.tls = TLSConfig(cert=str(cert), key=str(key))
    count = 25
    async with running_hub(config) as hub:
        proc = await asyncio.create_subprocess_exec(
            node, str(NODE_SCRIPT), "127.0.0.1", str(config.lumberjack.port), str(cert), str(count), "10",
            env={**os.environ, "NODE_PATH": str(NODE_MODULES)},
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(proc.communicate(), 30)
        assert proc.returncode == 0, err.decode()
        assert b'"acked":25' in out
        records = await wait_for_records(hub.runtime.store, "lumberjack", count)
    assert [r.record["line"] for r in records] == [f"node line {i}" for i in range(1, count + 1)]
    assert records[0].record["seq_no"] == "1" and records[0].record["file"] == "/var/log/node.log"
