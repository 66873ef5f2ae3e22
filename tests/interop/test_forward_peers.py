"""Real Forward peers -> the logport server: @fluent-org/logger, npm fluent-logger, PyPI fluent-logger.

Every event must arrive with its tag, its time to the nanosecond and its record intact.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import NODE_MODULES
from tests.forward.helpers import forward_config, make_certificate, running_hub, stored_events

NODE_DIR = Path(__file__).parent / "node"


def forward_event(i: int) -> tuple[int, int, dict[str, Any]]:
    """The same events as node/forward_events.js."""
    return 1700000000 + i, (i * 7919 + 123) % 1_000_000_000, {
        "i": i, "msg": f"héllo wörld {i}", "nested": {"list": [i, "x"], "flag": i % 2 == 0}}


def expected(tag: str, count: int) -> list[tuple[str, int, int, dict[str, Any]]]:
    return [(tag, *forward_event(i)) for i in range(count)]


def received(events: list[tuple[str, int, int, Any, dict[str, Any]]]) -> list[tuple[str, int, int, Any]]:
    return sorted(((tag, s, ns, rec) for tag, s, ns, rec, _ in events), key=lambda e: e[3]["i"])


async def run_node(script: str, settings: dict[str, Any], timeout: float = 60) -> str:
    assert NODE_MODULES.is_dir(), "node_modules missing: run npm ci"
    proc = await asyncio.create_subprocess_exec(
        "node", str(NODE_DIR / script), json.dumps(settings),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), timeout)
    assert proc.returncode == 0, f"{script} failed: {err.decode()[-2000:]}"
    return out.decode()


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    return make_certificate(tmp_path_factory.mktemp("tls"))


COUNT = 300


@pytest.mark.parametrize("mode", ["Message", "Forward", "PackedForward", "CompressedPackedForward"])
async def test_fluent_org_client_modes_with_ack(tmp_path: Path, mode: str) -> None:
    config = forward_config(tmp_path)
    async with running_hub(config) as hub:
        tag = f"interop.fluent_org.{mode.lower()}"
        out = await run_node("forward_fluent_org_client.js",
                             {"port": config.forward.port, "mode": mode, "ack": True, "count": COUNT, "tag": tag})
        assert out.strip() == f"sent {COUNT}"  # every emit resolved: each was acked
        assert received(await stored_events(hub)) == expected(tag, COUNT)


async def test_fluent_org_client_shared_key_user_auth_and_tls(tmp_path: Path, certificate: tuple[str, str]) -> None:
    cert, key = certificate
    config = forward_config(tmp_path, shared_key="k3y", users={"alice": "s3cret"})
    config.forward.tls.cert, config.forward.tls.key = cert, key
    async with running_hub(config) as hub:
        tag = "interop.fluent_org.secure"
        out = await run_node("forward_fluent_org_client.js", {
            "port": config.forward.port, "mode": "PackedForward", "ack": True, "count": COUNT, "tag": tag,
            "sharedKey": "k3y", "username": "alice", "password": "s3cret", "ca": cert})
        assert out.strip() == f"sent {COUNT}"
        assert received(await stored_events(hub)) == expected(tag, COUNT)


async def test_fluent_org_client_wrong_password_stores_nothing(tmp_path: Path) -> None:
    config = forward_config(tmp_path, shared_key="k3y", users={"alice": "s3cret"})
    async with running_hub(config) as hub:
        proc = await asyncio.create_subprocess_exec(
            "node", str(NODE_DIR / "forward_fluent_org_client.js"),
            json.dumps({"port": config.forward.port, "mode": "Message", "ack": True, "count": 3, "tag": "x",
                        "sharedKey": "k3y", "username": "alice", "password": "wrong"}),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:  # FluentClient gives up with an authentication error (or would keep retrying): never "sent"
            out, err = await asyncio.wait_for(proc.communicate(), 5)
            assert b"sent" not in out, err
        except TimeoutError:
            proc.kill()
            await proc.wait()
        assert await stored_events(hub) == []
        assert hub.runtime is not None
        refused = hub.runtime.metrics.registry.get_sample_value(
            "logport_forward_errors_total", {"reason": "authentication"})
        assert refused and refused >= 1


@pytest.mark.parametrize("mode,secure", [("PackedForward", False), ("CompressedPackedForward", True)])
async def test_npm_fluent_logger(tmp_path: Path, mode: str, secure: bool) -> None:
    config = forward_config(tmp_path, shared_key="k3y" if secure else "")
    async with running_hub(config) as hub:
        tag = f"interop.fluent_logger.{mode.lower()}"
        settings: dict[str, Any] = {"port": config.forward.port, "mode": mode, "ack": True, "count": COUNT, "tag": tag}
        if secure:
            settings["sharedKey"] = "k3y"
        out = await run_node("forward_fluent_logger_client.js", settings)
        assert out.strip() == f"sent {COUNT}"
        assert received(await stored_events(hub)) == expected(tag, COUNT)


async def test_pypi_fluent_logger_message_mode_event_time(tmp_path: Path) -> None:
    from fluent import sender

    config = forward_config(tmp_path)
    async with running_hub(config) as hub:
        tag = "interop.pypi"

        def send() -> None:
            s = sender.FluentSender("interop", port=config.forward.port, nanosecond_precision=True, timeout=10)
            for i in range(COUNT):
                seconds, nanos, record = forward_event(i)
                assert s.emit_with_time("pypi", sender.EventTime(seconds, nanos), record), s.last_error
            s.close()

        await asyncio.to_thread(send)
        deadline = asyncio.get_running_loop().time() + 10
        while len(await stored_events(hub)) < COUNT and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.05)
        events = await stored_events(hub)
        assert received(events) == expected(tag, COUNT)
        assert all(option["source"] == "forward" for *_, option in events)
