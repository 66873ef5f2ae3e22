"""Reload without a restart, under live load with real clients: routes, limits, the log level and TLS
certificates change with established connections left open and nothing in flight lost; a listener whose
port changed starts anew and the old one is drained; a config that does not validate is refused (key and
value in the log, a failed-reloads metric), a setting that cannot change live says so."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import msgpack
import pytest

from logport.batch import pack_entry
from logport.clients.forward import ForwardSender, SenderConfig, ServerAddress
from logport.config import load_config
from logport.hub import Hub
from tests.chaos.harness import render_toml, stored_events
from tests.conftest import REPO, free_port
from tests.support import self_signed_cert


def write_config(path: Path, sections: dict[str, dict[str, Any]], routes: list[dict[str, str]] = ()) -> None:
    text = render_toml(sections)
    for route in routes:
        text += "[[routes]]\n" + "".join(f'{k} = "{v}"\n' for k, v in route.items()) + "\n"
    path.write_text(text)


def base(tmp_path: Path, forward: dict[str, Any] | None = None) -> dict[str, dict[str, Any]]:
    return {
        "hub": {"log_level": "info", "shutdown_grace": 5.0},
        "store": {"data_dir": str(tmp_path / "data")},
        "metrics": {"enabled": False},
        "forward": {"port": free_port(), **(forward or {})},
        "lumberjack": {"enabled": False}, "segment": {"enabled": False}, "logjam": {"enabled": False},
    }


class Sender:
    """logport's ForwardSender in a loop; counts acked events per tag."""

    def __init__(self, port: int, context: ssl.SSLContext | None = None) -> None:
        self.sender = ForwardSender(SenderConfig(servers=[ServerAddress("127.0.0.1", port)], tls=context,
                                                 ack_timeout=5.0, retries=20, retry_wait=0.05))
        self.acked = 0
        self.tag = "live.before"

    async def run(self) -> None:
        await self.sender.start()
        while True:
            await self.sender.send(self.tag, [(int(time.time()), 0, {"n": self.acked + i}) for i in range(10)])
            self.acked += 10
            await asyncio.sleep(0.002)

    async def wait_more(self, n: int = 50) -> None:
        target = self.acked + n
        deadline = time.monotonic() + 20
        while self.acked < target:
            assert time.monotonic() < deadline, "no acks"
            await asyncio.sleep(0.01)


def counter(hub: Hub, result: str) -> float:
    value = hub.metrics.registry.get_sample_value("logport_config_reloads_total", {"result": result})
    return value or 0.0


async def test_routes_limits_log_level_change_live_under_load(tmp_path: Path) -> None:
    path = tmp_path / "logport.toml"
    sections = base(tmp_path)
    write_config(path, sections)
    hub = Hub(load_config(path), serve_metrics=False, config_path=str(path))
    await hub.start()
    sender = Sender(sections["forward"]["port"])
    task = asyncio.create_task(sender.run())
    try:
        await sender.wait_more()
        forward = hub.services["forward"]
        before = set(forward.connections)  # type: ignore[attr-defined]
        assert len(before) == 1
        sections["forward"]["max_connections"] = 77
        sections["hub"]["log_level"] = "debug"
        write_config(path, sections, routes=[{"match": "live.after", "segment": "rerouted"}])
        assert await hub.reload()
        sender.tag = "live.after"
        await sender.wait_more()
        assert hub.services["forward"] is forward  # the same listener
        assert set(forward.connections) == before  # type: ignore[attr-defined]  # the same connection
        assert forward.guard.max_connections == 77  # type: ignore[attr-defined]
        assert logging.getLogger().level == logging.DEBUG
        assert counter(hub, "ok") == 1 and counter(hub, "failed") == 0
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await sender.sender.close()
        await hub.stop()
        logging.getLogger().setLevel(logging.WARNING)
    data = Path(sections["store"]["data_dir"])
    after = [b for b in stored_events(data, "rerouted")]
    assert after, "nothing reached the new route"
    stored = sum(msgpack.unpackb(b)[2]["size"] for seg in ("forward", "rerouted") for b in stored_events(data, seg))
    assert stored >= sender.acked  # nothing acknowledged lost across the reload


async def test_invalid_config_is_refused_naming_key_and_value(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "logport.toml"
    sections = base(tmp_path)
    write_config(path, sections)
    hub = Hub(load_config(path), serve_metrics=False, config_path=str(path))
    await hub.start()
    try:
        running = hub.config
        sections["forward"]["max_connections"] = -5
        write_config(path, sections)
        with caplog.at_level(logging.ERROR, "logport.hub"):
            assert not await hub.reload()
        assert "'forward.max_connections' has value -5" in caplog.text
        assert "running config stays" in caplog.text
        assert hub.config is running and counter(hub, "failed") == 1
        path.write_text("this is [not toml")
        assert not await hub.reload()
        assert counter(hub, "failed") == 2
        # a certificate that does not load is refused too, before anything changes
        sections["forward"]["max_connections"] = 10
        path.write_text(render_toml(sections) + f'[forward.tls]\ncert = "{tmp_path}/missing.crt"\nkey = "{tmp_path}/k"\n')
        caplog.clear()
        with caplog.at_level(logging.ERROR, "logport.hub"):
            assert not await hub.reload()
        assert "forward.tls.cert" in caplog.text and "missing.crt" in caplog.text
        assert counter(hub, "failed") == 3 and hub.config is running
    finally:
        await hub.stop()


async def test_a_setting_that_cannot_change_live_says_so(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "logport.toml"
    sections = base(tmp_path)
    write_config(path, sections)
    hub = Hub(load_config(path), serve_metrics=False, config_path=str(path))
    await hub.start()
    try:
        sections["store"]["fsync"] = "never"
        write_config(path, sections)
        with caplog.at_level(logging.WARNING, "logport.hub"):
            assert await hub.reload()
        warned = [r for r in caplog.records if "cannot change without a restart" in r.getMessage()]
        assert [r.key for r in warned] == ["store.fsync"]  # type: ignore[attr-defined]
        assert hub.config.store.fsync == "always"
    finally:
        await hub.stop()


async def test_a_changed_port_starts_a_new_listener_and_drains_the_old(tmp_path: Path) -> None:
    path = tmp_path / "logport.toml"
    sections = base(tmp_path)
    old_port = sections["forward"]["port"]
    write_config(path, sections)
    hub = Hub(load_config(path), serve_metrics=False, config_path=str(path))
    await hub.start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", old_port)
        writer.write(msgpack.packb(["t", pack_entry(1700000000, 0, {"a": 1}), {"chunk": "c1"}]))
        assert msgpack.unpackb(await asyncio.wait_for(reader.read(100), 10)) == {"ack": "c1"}
        new_port = free_port()
        sections["forward"]["port"] = new_port
        write_config(path, sections)
        assert await hub.reload()
        assert await asyncio.wait_for(reader.read(100), 10) == b""  # drained: closed after its answers
        writer.close()
        with pytest.raises(OSError):
            await asyncio.open_connection("127.0.0.1", old_port)
        reader, writer = await asyncio.open_connection("127.0.0.1", new_port)
        writer.write(msgpack.packb(["t", pack_entry(1700000000, 0, {"a": 2}), {"chunk": "c2"}]))
        assert msgpack.unpackb(await asyncio.wait_for(reader.read(100), 10)) == {"ack": "c2"}
        writer.close()
        assert hub.services["forward"].serving()  # type: ignore[attr-defined]
    finally:
        await hub.stop()


def peer_certificate(port: int, context: ssl.SSLContext) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        with context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            cert = tls.getpeercert(binary_form=True)
            assert cert is not None
            return cert


async def test_tls_certificate_rotation_keeps_established_connections(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir()
    second.mkdir()
    cert_a, key_a = self_signed_cert(first, "rotation-a")
    cert_b, key_b = self_signed_cert(second, "rotation-b")  # another subject: both CAs in one store
    live_cert, live_key = tmp_path / "hub.crt", tmp_path / "hub.key"
    live_cert.write_bytes(cert_a.read_bytes())
    live_key.write_bytes(key_a.read_bytes())
    path = tmp_path / "logport.toml"
    sections = base(tmp_path)
    port = sections["forward"]["port"]
    path.write_text(render_toml(sections) + f'[forward.tls]\ncert = "{live_cert}"\nkey = "{live_key}"\n')
    hub = Hub(load_config(path), serve_metrics=False, config_path=str(path))
    await hub.start()
    both = ssl.create_default_context(cafile=str(cert_a))
    both.load_verify_locations(str(cert_b))
    sender = Sender(port, both)  # trusts either certificate: it reconnects across the rotation
    task = asyncio.create_task(sender.run())
    try:
        await sender.wait_more()
        forward = hub.services["forward"]
        established = set(forward.connections)  # type: ignore[attr-defined]
        assert await asyncio.to_thread(peer_certificate, port, both) == ssl.PEM_cert_to_DER_cert(cert_a.read_text())
        live_cert.write_bytes(cert_b.read_bytes())  # rotated in place, as certbot or cert-manager do
        live_key.write_bytes(key_b.read_bytes())
        assert await hub.reload()
        await sender.wait_more()
        assert set(forward.connections) == established  # type: ignore[attr-defined]  # never closed
        assert await asyncio.to_thread(peer_certificate, port, both) == ssl.PEM_cert_to_DER_cert(cert_b.read_text())
        only_a = ssl.create_default_context(cafile=str(cert_a))
        with pytest.raises(ssl.SSLCertVerificationError):
            await asyncio.to_thread(peer_certificate, port, only_a)
        # the client reconnects (its connection cut): the new handshake gets the new certificate
        for conn in list(forward.connections):  # type: ignore[attr-defined]
            conn.transport.abort()
        await sender.wait_more()
        assert not (set(forward.connections) & established)  # type: ignore[attr-defined]
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await sender.sender.close()
        await hub.stop()


def test_logport_reload_signals_the_hub_by_its_pid_file(tmp_path: Path) -> None:
    path = tmp_path / "logport.toml"
    sections = base(tmp_path)
    sections["hub"]["pid_file"] = str(tmp_path / "logport.pid")
    sections["hub"]["log_format"] = "json"
    write_config(path, sections)
    log = tmp_path / "hub.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "logport.cli", "serve", "--config", str(path)],
                                stdout=out, stderr=out, cwd=REPO)
    try:
        deadline = time.monotonic() + 30
        while not (tmp_path / "logport.pid").exists():
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        assert int((tmp_path / "logport.pid").read_text()) == proc.pid
        write_config(path, sections, routes=[{"match": "x.**", "segment": "x"}])
        done = subprocess.run([sys.executable, "-m", "logport.cli", "reload", "--pid-file",
                               str(tmp_path / "logport.pid")], capture_output=True, text=True, cwd=REPO)
        assert done.returncode == 0 and f"pid {proc.pid}" in done.stdout, done
        while '"config reloaded"' not in log.read_text():
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        assert '"routes"' in log.read_text()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
        assert not (tmp_path / "logport.pid").exists()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    missing = subprocess.run([sys.executable, "-m", "logport.cli", "reload", "--pid-file", str(tmp_path / "nope")],
                             capture_output=True, text=True, cwd=REPO, env={**os.environ})
    assert missing.returncode == 1 and "cannot read a pid" in missing.stderr


async def test_lumberjack_limits_and_routes_reload_under_pylogbeat_load(tmp_path: Path) -> None:
    """pylogbeat (PyPI, Filebeat's protocol) keeps one connection across the reload and every window of it
    is acknowledged; the new limit applies to the listener, the new route to the next windows."""
    import threading

    import pylogbeat

    path = tmp_path / "logport.toml"
    sections = base(tmp_path)
    sections["forward"]["enabled"] = False
    sections["lumberjack"] = {"port": free_port(), "tag": "beats"}
    write_config(path, sections)
    hub = Hub(load_config(path), serve_metrics=False, config_path=str(path))
    await hub.start()
    acked = [0]
    failed: list[str] = []
    stop = threading.Event()

    def beat() -> None:
        client = pylogbeat.PyLogBeatClient("127.0.0.1", sections["lumberjack"]["port"], timeout=10.0,
                                           use_logging=True)
        client.connect()
        try:
            while not stop.is_set():
                client.send([{"n": acked[0] + i, "message": "x" * 40} for i in range(50)])  # returns once acked
                acked[0] += 50
        except Exception as e:
            failed.append(repr(e))
        finally:
            client.close()

    thread = threading.Thread(target=beat, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 20
        while acked[0] < 500:
            assert time.monotonic() < deadline and not failed, failed
            await asyncio.sleep(0.02)
        listener = hub.services["lumberjack"]
        (conn,) = listener.connections  # type: ignore[attr-defined]
        sections["lumberjack"]["max_window_size"] = 5000
        write_config(path, sections, routes=[{"match": "beats", "segment": "beats-rerouted"}])
        assert await hub.reload()
        at_reload = acked[0]
        while acked[0] < at_reload + 500:
            assert time.monotonic() < deadline + 20 and not failed, failed
            await asyncio.sleep(0.02)
        assert hub.services["lumberjack"] is listener
        assert listener.connections == {conn}  # type: ignore[attr-defined]  # the same connection throughout
        assert listener.limits.max_window_size == 5000  # type: ignore[attr-defined]
    finally:
        stop.set()
        await asyncio.to_thread(thread.join, 10)
        await hub.stop()
    assert not failed, failed
    data = Path(sections["store"]["data_dir"])
    assert stored_events(data, "beats-rerouted"), "nothing reached the new route"
    stored = sum(msgpack.unpackb(b)[2]["size"] for seg in ("lumberjack", "beats-rerouted")
                 for b in stored_events(data, seg))
    assert stored >= acked[0]
