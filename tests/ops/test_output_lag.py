"""Output lag: bytes and events between an output's checkpoint and its segment's end, and its last success,
as metrics of the running hub and in `logport segments --config`."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from logport.clients.forward import ForwardSender, SenderConfig, ServerAddress
from logport.config import ForwardOutputConfig
from logport.hub import Hub
from logport.outputs import lag
from tests.chaos.harness import render_toml
from tests.conftest import REPO, free_port
from tests.support import hub_config


def sample(hub: Hub, name: str) -> float:
    value = hub.metrics.registry.get_sample_value(name, {"output": "downstream", "segment": "forward"})
    assert value is not None, name
    return value


def segments_rows(config: Path) -> list[dict[str, Any]]:
    out = subprocess.run([sys.executable, "-m", "logport.cli", "segments", "--json", "--config", str(config)],
                         capture_output=True, text=True, check=True, cwd=REPO).stdout
    return [json.loads(line) for line in out.splitlines()]


async def test_lag_grows_while_the_receiver_is_down_and_clears_once_it_acks(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lag, "COUNT_INTERVAL", 0.1)
    target = free_port()
    config = hub_config(tmp_path / "data", ["forward"])
    config.outputs.forward = [ForwardOutputConfig(name="downstream", segment="forward", port=target,
                                                  retry_wait=0.05, ack_timeout=2.0)]
    toml = tmp_path / "logport.toml"
    toml.write_text(render_toml({"store": {"data_dir": str(tmp_path / "data")}})
                    + f'[[outputs.forward]]\nname = "downstream"\nsegment = "forward"\nport = {target}\n')
    hub = Hub(config, serve_metrics=False)
    await hub.start()
    sender = ForwardSender(SenderConfig(servers=[ServerAddress("127.0.0.1", config.forward.port)]))
    await sender.start()
    try:
        for i in range(5):
            await sender.send("lag.test", [(int(time.time()), 0, {"i": i * 10 + j}) for j in range(10)])
        assert hub.runtime is not None
        end = hub.runtime.store.info("forward").end_offset
        await asyncio.sleep(0.5)
        # the output commits what holds no events (the store's own records) without a send: its checkpoint
        checkpoint = hub.services["output.downstream"].follower.checkpoint  # type: ignore[attr-defined]
        assert checkpoint < end
        assert sample(hub, "logport_output_lag_bytes") == end - checkpoint
        assert sample(hub, "logport_output_lag_events") == 50
        (row,) = [r for r in await asyncio.to_thread(segments_rows, toml) if "output" in r]
        assert (row["output"], row["segment"], row["checkpoint"]) == ("downstream", "forward", checkpoint)
        assert (row["lag_bytes"], row["lag_events"]) == (end - checkpoint, 50)

        receiver_config = hub_config(tmp_path / "downstream", ["forward"])
        receiver_config.forward.port = target
        receiver = Hub(receiver_config, serve_metrics=False)
        await receiver.start()
        try:
            began = time.time()
            deadline = time.monotonic() + 20
            while sample(hub, "logport_output_lag_bytes") or sample(hub, "logport_output_lag_events"):
                assert time.monotonic() < deadline, "the output never caught up"
                await asyncio.sleep(0.05)
            assert sample(hub, "logport_output_last_success_timestamp_seconds") >= began - 1
        finally:
            await receiver.stop()
        (row,) = [r for r in await asyncio.to_thread(segments_rows, toml) if "output" in r]
        assert row["checkpoint"] == end and row["lag_bytes"] == 0 and row["lag_events"] == 0
        assert row["last_success"] is not None
        human = subprocess.run([sys.executable, "-m", "logport.cli", "segments", "--config", str(toml)],
                               capture_output=True, text=True, check=True, cwd=REPO).stdout
        assert "LAG BYTES" in human and "downstream" in human
    finally:
        await sender.close()
        await hub.stop()
