"""The durable Forward output against what its design did not foresee: a second hub with the same
output name, and errors it has no handler of its own for."""

from __future__ import annotations

import asyncio
import inspect
import logging
from pathlib import Path
from typing import Any

import pytest

from logport.clients import forward as fc
from logport.config import ForwardOutputConfig
from logport.hub import Hub
from logport.outputs.follower import SegmentFollower
from logport.outputs.forward import ForwardOutput
from tests.forward.helpers import forward_config, running_hub, stored_events, wait_for_events


def events(count: int, hub: str) -> list[tuple[int, int, dict[str, Any]]]:
    # the same sizes from every hub, so that the stored batches have the same offsets
    return [(1700000000 + i, i, {"i": i, "hub": hub}) for i in range(count)]


async def send(port: int, evs: list[tuple[int, int, dict[str, Any]]]) -> None:
    cfg = fc.SenderConfig(servers=[fc.ServerAddress("127.0.0.1", port)], hostname="test-client")
    async with fc.ForwardSender(cfg) as sender:
        for n in range(0, len(evs), 10):
            await sender.send("app.out", evs[n:n + 10])


def sample(hub: Hub, name: str, labels: dict[str, str] | None = None) -> float | None:
    assert hub.runtime is not None
    return hub.runtime.metrics.registry.get_sample_value(name, labels)


async def wait_until_acknowledged(hub: Hub, output: str, count: int, timeout: float = 15.0) -> None:
    """Until `count` events of `output` are acknowledged downstream and committed."""
    for _ in range(int(timeout / 0.05)):
        if sample(hub, "logport_forward_output_events_total", {"output": output}) == count:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"output {output!r} did not get {count} events acknowledged in {timeout} s")


async def test_two_hubs_with_one_output_name_are_no_duplicates_of_each_other(tmp_path: Path) -> None:
    """Same output name, same segment, same offsets: the downstream's chunk dedup must keep both hubs' events."""
    downstream = forward_config(tmp_path / "b")
    async with running_hub(downstream) as b:
        for hub in ("a1", "a2"):  # a2 could as well be a1 after its data directory was recreated
            upstream = forward_config(tmp_path / hub)
            upstream.outputs.forward = [ForwardOutputConfig(name="to-b", port=downstream.forward.port,
                                                            retry_wait=0.05)]
            async with running_hub(upstream) as a:
                await send(upstream.forward.port, events(30, hub))
                await wait_until_acknowledged(a, "to-b", 30)
        got = await stored_events(b)
        duplicates = sample(b, "logport_forward_duplicate_chunks_total")
    assert sorted((e[3]["hub"], e[3]["i"]) for e in got) == [(hub, i) for hub in ("a1", "a2") for i in range(30)]
    assert duplicates == 0


def fail_once(monkeypatch: pytest.MonkeyPatch, owner: type, method: str) -> list[str]:
    """Make `owner.method` raise a RuntimeError on its first call; the list says whether it did."""
    original = getattr(owner, method)
    failed: list[str] = []

    def maybe_fail() -> None:
        if not failed:
            failed.append(method)
            raise RuntimeError(f"injected failure in {method}")

    if inspect.iscoroutinefunction(original):
        async def patched_async(self: Any, *args: Any, **kwargs: Any) -> Any:
            maybe_fail()
            return await original(self, *args, **kwargs)

        monkeypatch.setattr(owner, method, patched_async)
    else:
        def patched(self: Any, *args: Any, **kwargs: Any) -> Any:
            maybe_fail()
            return original(self, *args, **kwargs)

        monkeypatch.setattr(owner, method, patched)
    return failed


@pytest.mark.parametrize(("owner", "method"), [
    (SegmentFollower, "next_batch"),  # reading the store
    (ForwardOutput, "messages"),  # building the wire messages
    (SegmentFollower, "commit"),  # writing the checkpoint, after the downstream's ack: the batch is resent
])
async def test_output_recovers_from_an_unexpected_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
        owner: type, method: str) -> None:
    failed = fail_once(monkeypatch, owner, method)
    downstream = forward_config(tmp_path / "b")
    upstream = forward_config(tmp_path / "a")
    upstream.outputs.forward = [ForwardOutputConfig(name="to-b", port=downstream.forward.port, retry_wait=0.05)]
    with caplog.at_level(logging.ERROR, logger="logport.forward.output"):
        async with running_hub(downstream) as b, running_hub(upstream) as a:
            await send(upstream.forward.port, events(40, "a"))
            await wait_for_events(b, 40)
            await wait_until_acknowledged(a, "to-b", 40)
            got = await stored_events(b)
            failures = sample(a, "logport_forward_output_failures_total", {"output": "to-b"})
    assert failed == [method]
    assert sorted(e[3]["i"] for e in got) == list(range(40))  # every event, once
    assert failures == 1
    (record,) = [r for r in caplog.records if r.exc_info]
    assert "injected failure" in str(record.exc_info[1]) and record.__dict__["output"] == "to-b"
