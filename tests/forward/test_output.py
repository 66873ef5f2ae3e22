"""The durable Forward output: logport -> logport, surviving restarts of either side, exactly once."""

from __future__ import annotations

import asyncio
from pathlib import Path

from logport.clients import forward as fc
from logport.config import ForwardOutputConfig
from tests.forward.helpers import forward_config, running_hub, stored_events, wait_for_events


def events(start: int, count: int) -> list[tuple[int, int, dict[str, int]]]:
    return [(1700000000 + i, i, {"i": i}) for i in range(start, start + count)]


async def send(port: int, evs: list[tuple[int, int, dict[str, int]]]) -> None:
    cfg = fc.SenderConfig(servers=[fc.ServerAddress("127.0.0.1", port)], hostname="test-client")
    async with fc.ForwardSender(cfg) as sender:
        for n in range(0, len(evs), 10):
            await sender.send("app.out", evs[n:n + 10])


async def test_output_survives_restarts_of_either_side_exactly_once(tmp_path: Path) -> None:
    downstream = forward_config(tmp_path / "b", shared_key="k")
    upstream = forward_config(tmp_path / "a")
    upstream.outputs.forward = [ForwardOutputConfig(name="to-b", port=downstream.forward.port, shared_key="k",
                                                    self_hostname="hub-a", ack_timeout=5, retry_wait=0.05)]
    async with running_hub(downstream) as b:
        async with running_hub(upstream):
            await send(upstream.forward.port, events(0, 50))
            got = await wait_for_events(b, 50)
            assert [e[3]["i"] for e in got] == list(range(50))
    # both stopped. A crash between the downstream's ack and the checkpoint commit looks like this:
    (Path(upstream.store.data_dir) / "outputs" / "to-b.checkpoint").write_text("0")
    async with running_hub(upstream):
        await send(upstream.forward.port, events(50, 30))  # stored upstream; downstream is down
        await asyncio.sleep(0.3)
        async with running_hub(downstream) as b:
            got = await wait_for_events(b, 80)
            await asyncio.sleep(0.3)  # a resend after the restart would show up as a duplicate here
            got = await stored_events(b)
            assert b.runtime is not None
            duplicates = b.runtime.metrics.registry.get_sample_value("logport_forward_duplicate_chunks_total")
    assert sorted(e[3]["i"] for e in got) == list(range(80))  # every event, once
    assert duplicates == 5  # the 5 resent batches of the first 50 events were recognised, acked, not stored
    first = got[0]
    assert first[0] == "app.out" and first[1:3] == (1700000000, 0)


async def test_output_resends_unacknowledged_after_crash(tmp_path: Path) -> None:
    """Without a commit (as after a kill before the ack) the output starts again from its checkpoint."""
    downstream = forward_config(tmp_path / "b")
    upstream = forward_config(tmp_path / "a")
    upstream.outputs.forward = [ForwardOutputConfig(name="to-b", port=downstream.forward.port, retry_wait=0.05)]
    async with running_hub(upstream) as a:
        await send(upstream.forward.port, events(0, 20))
        assert a.runtime is not None
        checkpoint = Path(upstream.store.data_dir) / "outputs" / "to-b.checkpoint"
        await asyncio.sleep(0.3)
        assert not checkpoint.exists() or checkpoint.read_text() == "0"  # nothing acked: downstream is down
    async with running_hub(downstream) as b, running_hub(upstream):
        got = await wait_for_events(b, 20)
        assert sorted(e[3]["i"] for e in got) == list(range(20))
        for _ in range(50):
            if checkpoint.exists() and int(checkpoint.read_text()) > 0:
                break
            await asyncio.sleep(0.05)
        assert int(checkpoint.read_text()) > 0


async def test_output_over_tls_with_gzip_and_users(tmp_path: Path) -> None:
    from tests.forward.helpers import make_certificate

    cert, key = make_certificate(tmp_path)
    downstream = forward_config(tmp_path / "b", shared_key="k", users={"hub-a": "pw"})
    downstream.forward.tls.cert, downstream.forward.tls.key = cert, key
    upstream = forward_config(tmp_path / "a")
    upstream.outputs.forward = [ForwardOutputConfig(
        name="tls-out", port=downstream.forward.port, shared_key="k", username="hub-a", password="pw",
        self_hostname="hub-a", tls=True, tls_ca=cert, compress="gzip", retry_wait=0.05)]
    async with running_hub(downstream) as b, running_hub(upstream) as a:
        await send(upstream.forward.port, events(0, 40))
        got = await wait_for_events(b, 40)
        assert [(e[1], e[2], e[3]) for e in got] == events(0, 40)
        assert a.runtime is not None
        registry = a.runtime.metrics.registry
        for _ in range(100):  # counted after the checkpoint commit that follows the ack
            if registry.get_sample_value("logport_forward_output_events_total", {"output": "tls-out"}) == 40:
                break
            await asyncio.sleep(0.05)
        assert registry.get_sample_value("logport_forward_output_events_total", {"output": "tls-out"}) == 40
