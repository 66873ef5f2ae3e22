"""The logjam producer client and `logport send logjam` against logport's device."""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from logport.clients.logjam import LogjamProducer, LogjamRefused
from logport.errors import LogportError, RemoteProtocolError
from tests.support import fill_the_disk, hub_config, running_hub, stored_batches


@pytest.mark.parametrize("compression", ["none", "zlib", "snappy", "lz4"])
async def test_producer_sync_async_and_ping(tmp_path: Path, compression: str) -> None:
    cfg = hub_config(tmp_path, ["logjam"], hub={"hostname": "dev-host"})
    async with running_hub(cfg) as hub:
        assert hub.runtime is not None
        producer = LogjamProducer(f"tcp://127.0.0.1:{cfg.logjam.router_port}", "shop-staging", "logs.shop",
                                  compression=compression)
        assert await producer.ping() == "dev-host"
        await producer.send_sync({"action": "A#b", "n": 1})
        await producer.send({"action": "A#b", "n": 2})
        await producer.send_sync({"action": "A#b", "n": 3}, topic="events.deploy")
        stored = [b for _, b in await stored_batches(hub.runtime.store, "logjam")]
        assert [next(iter(b)).record["n"] for b in stored] == [1, 2, 3]
        assert [b.option["sequence"] for b in stored] == [1, 2, 3]
        assert stored[2].option["topic"] == "events.deploy"
        producer.close()


async def test_producer_refused(tmp_path: Path) -> None:
    cfg = hub_config(tmp_path, ["logjam"], logjam={"max_decompressed_size": 100})
    async with running_hub(cfg):
        producer = LogjamProducer(f"tcp://127.0.0.1:{cfg.logjam.router_port}", "shop-staging", "logs")
        with pytest.raises(LogjamRefused):
            await producer.send_sync({"x": "y" * 200})
        await producer.send_sync({"x": "small"})  # the connection is still in step
        producer.close()


def test_producer_refuses_bad_names() -> None:
    with pytest.raises(RemoteProtocolError):
        LogjamProducer("tcp://127.0.0.1:1", "noenv", "logs")


async def test_send_logjam_command(tmp_path: Path) -> None:
    cfg = hub_config(tmp_path, ["logjam"], hub={"hostname": "cli-host"})
    async with running_hub(cfg) as hub:
        assert hub.runtime is not None
        lines = b'{"action": "x", "n": 1}\nplain text\n\n{"action": "x", "n": 3}\n'
        for extra in ([], ["--sync", "--compression", "lz4", "--ping"]):
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "logport.cli", "send", "logjam",
                "--server", f"tcp://127.0.0.1:{cfg.logjam.router_port}", "--app-env", "cli-test", "--topic",
                "logs.cli", *extra, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")})
            out, err = await asyncio.wait_for(proc.communicate(lines), 30)
            assert proc.returncode == 0, err
            assert b"sent 3 messages, all stored" in err
        stored = [b for _, b in await stored_batches(hub.runtime.store, "logjam")]
        assert [next(iter(b)).record for b in stored][:3] == [
            {"action": "x", "n": 1}, {"message": "plain text"}, {"action": "x", "n": 3}]
        assert len(stored) == 6
        assert {b.option["app_env"] for b in stored} == {"cli-test"}


async def test_a_ping_after_messages_that_were_not_stored_gets_no_answer(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """`send logjam` says its messages are stored once a ping after them is answered: the device answers a ping
    only once the messages before it are stored (a full disk: no answer, the sender's timeout says so)."""
    cfg = hub_config(tmp_path, ["logjam"])
    async with running_hub(cfg) as hub:
        assert hub.runtime is not None
        producer = LogjamProducer(f"tcp://127.0.0.1:{cfg.logjam.router_port}", "shop-staging", "logs")
        await producer.send({"n": 1})
        assert await producer.ping()  # stored first
        assert [next(iter(b)).record for _, b in await stored_batches(hub.runtime.store, "logjam")] == [{"n": 1}]
        fill_the_disk(monkeypatch)
        await producer.send({"n": 2})
        with pytest.raises(LogportError, match="no reply from logjam device"):
            await producer.ping(timeout=2)
        producer.close()


async def test_the_listener_logs_that_it_drained(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="logport.logjam")
    cfg = hub_config(tmp_path, ["logjam"])
    async with running_hub(cfg) as hub:
        producer = LogjamProducer(f"tcp://127.0.0.1:{cfg.logjam.router_port}", "shop-staging", "logs")
        await producer.send_sync({"n": 1})
        producer.close()
        await hub.drain(2.0)
    (drained,) = [r for r in caplog.records if r.getMessage() == "listener drained"]
    assert (drained.listener, drained.unsettled) == ("logjam", 0)  # type: ignore[attr-defined]
