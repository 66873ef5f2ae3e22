"""logport's Forward client and durable output -> @fluent-org/logger's FluentServer (ack, shared key, users)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from logport.clients import forward as fc
from logport.config import ForwardOutputConfig
from logport.errors import PeerUnavailable
from logport.protocols import forward as fp
from tests.conftest import NODE_MODULES
from tests.forward.helpers import forward_config, running_hub
from tests.forward.test_output import feed_metadata_entries, metadata_expected
from tests.interop.test_forward_peers import forward_event

NODE_DIR = Path(__file__).parent / "node"


class NodeServer:
    def __init__(self, proc: asyncio.subprocess.Process, port: int) -> None:
        self.proc = proc
        self.port = port

    async def events(self, count: int, timeout: float = 20) -> list[tuple[str, int, int, Any]]:
        assert self.proc.stdout is not None
        out = []
        while len(out) < count:
            line = await asyncio.wait_for(self.proc.stdout.readline(), timeout)
            assert line, "FluentServer exited"
            e = json.loads(line)
            out.append((e["tag"], e["epoch"], e["nano"], e["record"]))
        return out


@contextlib.asynccontextmanager
async def fluent_server(**settings: Any) -> AsyncIterator[NodeServer]:
    assert NODE_MODULES.is_dir()
    proc = await asyncio.create_subprocess_exec(
        "node", str(NODE_DIR / "forward_fluent_org_server.js"), json.dumps(settings),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdin is not None
    line = (await asyncio.wait_for(proc.stdout.readline(), 20)).decode()
    assert line.startswith("listening "), line
    try:
        yield NodeServer(proc, int(line.split()[1]))
    finally:
        proc.stdin.close()
        try:
            await asyncio.wait_for(proc.wait(), 5)
        except TimeoutError:
            proc.kill()
            await proc.wait()


def expected(tag: str, count: int) -> list[tuple[str, int, int, Any]]:
    return [(tag, *forward_event(i)) for i in range(count)]


@pytest.mark.parametrize("mode,compress", [(fp.Mode.MESSAGE, ""), (fp.Mode.FORWARD, ""),
                                           (fp.Mode.PACKED_FORWARD, ""), (fp.Mode.PACKED_FORWARD, "gzip")])
async def test_client_to_fluent_server_ack_shared_key_users(mode: fp.Mode, compress: str) -> None:
    async with fluent_server(sharedKey="k3y", users={"alice": "s3cret"}) as server:
        cfg = fc.SenderConfig(servers=[fc.ServerAddress("127.0.0.1", server.port)], mode=mode, compress=compress,
                              shared_key="k3y", username="alice", password="s3cret", hostname="logport-test",
                              ack_timeout=10)
        tag = f"to.node.{mode.value.lower()}"
        events = [forward_event(i) for i in range(200)]
        async with fc.ForwardSender(cfg) as sender:
            for n in range(0, 200, 50):
                await sender.send(tag, events[n:n + 50])  # returns only once FluentServer acked
        got = await server.events(200)
        assert sorted(got, key=lambda e: e[3]["i"]) == expected(tag, 200)


async def test_client_wrong_key_refused_by_fluent_server() -> None:
    async with fluent_server(sharedKey="k3y") as server:
        cfg = fc.SenderConfig(servers=[fc.ServerAddress("127.0.0.1", server.port)], shared_key="nope",
                              hostname="logport-test", retries=1, connect_timeout=5)
        async with fc.ForwardSender(cfg) as sender:
            with pytest.raises(PeerUnavailable):
                await sender.send("t", [forward_event(0)])


async def test_output_to_fluent_server_survives_its_restart(tmp_path: Path) -> None:
    async with fluent_server(sharedKey="k3y") as server:
        port = server.port
        config = forward_config(tmp_path)
        config.outputs.forward = [ForwardOutputConfig(name="to-node", port=port, shared_key="k3y",
                                                      self_hostname="logport-hub", retry_wait=0.05, ack_timeout=5)]
        async with running_hub(config):
            sender_cfg = fc.SenderConfig(servers=[fc.ServerAddress("127.0.0.1", config.forward.port)],
                                         hostname="feeder")
            async with fc.ForwardSender(sender_cfg) as sender:
                for n in range(0, 100, 25):
                    await sender.send("via.output", [forward_event(i) for i in range(n, n + 25)])
                got = await server.events(100)
                assert sorted(got, key=lambda e: e[3]["i"]) == expected("via.output", 100)
                # the downstream server goes away; events keep arriving upstream
                assert server.proc.stdin is not None
                server.proc.stdin.close()
                await server.proc.wait()
                for n in range(100, 150, 25):
                    await sender.send("via.output", [forward_event(i) for i in range(n, n + 25)])
                await asyncio.sleep(0.3)
                async with fluent_server(sharedKey="k3y", port=port) as again:
                    got = await again.events(50)
                    assert sorted(got, key=lambda e: e[3]["i"]) == expected("via.output", 150)[100:]


async def test_output_strips_v1_5_metadata_entries_for_fluent_server(tmp_path: Path) -> None:
    """FluentServer refuses a chunk with `[[time, meta], record]` entries (no ack, connection closed):
    unstripped, the output would resend Fluent Bit's chunk for ever and nothing after it would arrive."""
    async with fluent_server() as server:
        config = forward_config(tmp_path)
        config.outputs.forward = [ForwardOutputConfig(name="to-node", port=server.port, retry_wait=0.05,
                                                      ack_timeout=5)]
        async with running_hub(config):
            await feed_metadata_entries(config.forward.port)
            got = await server.events(len(metadata_expected()), timeout=10)
    assert got == metadata_expected()  # every event, its time to the nanosecond (integer seconds: 0 ns)
