"""CurveZMQ on the logjam sockets, with real libzmq clients: listed keys get in, encrypted; others do not."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import orjson
import pytest
import zmq
import zmq.asyncio

from logport.clients.logjam import LogjamProducer
from logport.config import load_config
from logport.errors import ConfigError
from logport.protocols import logjam as lj
from tests.logjam.helpers import APP_ENV, TOPIC, AgentProducer, RawSubscriber, meta, until_connected
from tests.support import hub_config, running_hub, stored_batches

pytestmark = pytest.mark.skipif(not zmq.has("curve"), reason="libzmq without CURVE")

SERVER_PUBLIC, SERVER_SECRET = zmq.curve_keypair()
CLIENT_PUBLIC, CLIENT_SECRET = zmq.curve_keypair()
STRANGER_PUBLIC, STRANGER_SECRET = zmq.curve_keypair()
ALLOWED = (SERVER_PUBLIC, CLIENT_PUBLIC, CLIENT_SECRET)


@pytest.fixture
async def zctx() -> AsyncIterator[zmq.asyncio.Context]:
    ctx = zmq.asyncio.Context()
    yield ctx
    ctx.destroy(linger=0)


def curve_settings(allowed: list[bytes]) -> dict[str, object]:
    return {"curve_secret_key": SERVER_SECRET.decode(), "curve_allowed_clients": [k.decode() for k in allowed],
            "heartbeat_interval": 60.0}


async def test_listed_client_sends_and_subscribes_others_are_refused(
        tmp_path: Path, zctx: zmq.asyncio.Context, caplog: pytest.LogCaptureFixture) -> None:
    cfg = hub_config(tmp_path, ["logjam"], logjam=curve_settings([CLIENT_PUBLIC]))
    async with running_hub(cfg) as hub:
        producer = AgentProducer(zctx, cfg.logjam.router_port, curve=ALLOWED)
        sub = RawSubscriber(zctx, cfg.logjam.pub_port, curve=ALLOWED)
        await until_connected(sub, producer)
        reply = await producer.send_sync([APP_ENV, TOPIC, b'{"secret": "payload"}', meta(1)])
        assert reply[-1] == lj.ACCEPTED
        published = await sub.recv_data()
        assert orjson.loads(published[2]) == {"secret": "payload"}

        stranger = AgentProducer(zctx, cfg.logjam.router_port, curve=(SERVER_PUBLIC, STRANGER_PUBLIC, STRANGER_SECRET))
        plain = AgentProducer(zctx, cfg.logjam.router_port)
        wrong_server = AgentProducer(zctx, cfg.logjam.router_port, curve=(STRANGER_PUBLIC, CLIENT_PUBLIC, CLIENT_SECRET))
        for refused in (stranger, plain, wrong_server):
            with pytest.raises(TimeoutError):
                await refused.send_sync([APP_ENV, TOPIC, b'{"let": "me in"}', meta(2)], timeout=1.0)
            refused.close()
        plain_sub = RawSubscriber(zctx, cfg.logjam.pub_port)
        await producer.send_sync([APP_ENV, TOPIC, b'{"second": 1}', meta(3)])
        with pytest.raises(TimeoutError):
            await plain_sub.recv_data(1.0)
        for sock in (plain_sub, sub, producer):
            sock.close()

        assert hub.runtime is not None
        records = [e.record for _, b in await stored_batches(hub.runtime.store, "logjam") for e in b]
        assert {"secret": "payload"} in records and {"second": 1} in records
        assert not any(r.get("let") for r in records)
        device = hub.services["logjam"]
        assert device.zap is not None and device.zap.refused >= 1
    assert any("CurveZMQ client refused" in r.getMessage() and STRANGER_PUBLIC.decode() in str(r.__dict__)
               for r in caplog.records)


async def test_any_client_with_the_server_key_when_none_are_listed(tmp_path: Path) -> None:
    cfg = hub_config(tmp_path, ["logjam"], logjam=curve_settings([]))
    async with running_hub(cfg) as hub:
        endpoint = f"tcp://127.0.0.1:{cfg.logjam.router_port}"
        producer = LogjamProducer(endpoint, "shop-production", "logs", curve_server_key=SERVER_PUBLIC.decode())
        try:
            await producer.send_sync({"n": 1}, timeout=5.0)  # a fresh keypair: encrypted, not authenticated
        finally:
            producer.close()
        assert hub.runtime is not None
        assert [e.record for _, b in await stored_batches(hub.runtime.store, "logjam") for e in b] == [{"n": 1}]


@pytest.mark.parametrize("settings, message", [
    ({"curve_secret_key": "short"}, "'logjam.curve_secret_key' must be a 40-character Z85"),
    ({"curve_secret_key": "~" * 40}, "'logjam.curve_secret_key' is not Z85"),
    ({"curve_allowed_clients": [CLIENT_PUBLIC.decode()]}, "needs logjam.curve_secret_key"),
    ({"curve_secret_key": SERVER_SECRET.decode(), "curve_allowed_clients": ["x"]}, r"curve_allowed_clients\[0\]"),
])
def test_bad_keys_are_refused_at_start(tmp_path: Path, settings: dict[str, object], message: str) -> None:
    lines = ["[logjam]"] + [f"{k} = {orjson.dumps(v).decode()}" for k, v in settings.items()]
    path = tmp_path / "logport.toml"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ConfigError, match=message):
        load_config(path)


def test_a_secret_key_is_never_echoed_in_the_error(tmp_path: Path) -> None:
    secret = SERVER_SECRET.decode()[:39] + "~"  # 40 characters, not Z85
    (tmp_path / "logport.toml").write_text(f'[logjam]\ncurve_secret_key = "{secret}"\n')
    with pytest.raises(ConfigError) as e:
        load_config(tmp_path / "logport.toml")
    assert secret not in str(e.value)
