"""Three hubs on three hosts: network namespaces joined to this one by veth links.

Load-balancing shippers (the project's Forward client over all three hubs, PyPI fluent-logger and
pylogbeat each at one) send known events; Spark reads the three hubs over the network and counts
exactly what was acknowledged, per hub and in total. Then hub 1's link goes down mid-stream: the
Forward client fails over, a streaming run over all three fails naming hub 1, and once the link is
back it resumes from its checkpoint; the Parquet `events` table then holds every event the hubs
stored exactly once, and every acknowledged one.

Needs root and iproute2 (`ip netns`). It creates its namespaces, links and addresses in a
10.X.0.0/16 that no interface or route here uses (and an `unreachable` route for that /16, so a link
that is down refuses at once instead of going to the default gateway), checks each exists before
anything is sent, and removes exactly those afterwards.
"""

from __future__ import annotations

import asyncio
import os
import random
import shutil
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pylogbeat
import pytest
from fluent import sender as fluent_sender

from logport.clients.forward import ForwardSender, SenderConfig, ServerAddress
from logport.store.identity import read_hub_identity
from tests.spark.test_pipeline import run

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0 or shutil.which("ip") is None,
                       reason="network namespaces need root and iproute2's ip"),
]

FORWARD, LUMBERJACK, SEGMENT = 24224, 5044, 12345
HUBS = 3


def ip(*args: str, namespace: str | None = None) -> str:
    command = ["ip", "netns", "exec", namespace, "ip", *args] if namespace else ["ip", *args]
    return subprocess.run(command, check=True, capture_output=True, text=True, timeout=30).stdout


@dataclass
class Host:
    """One hub's host: a namespace, the veth link to it (our end, its end) and the /30 between them."""

    namespace: str
    link: str  # our end
    peer: str  # its end, inside the namespace
    address: str  # the hub's
    gateway: str  # ours on the link
    data_dir: Path
    process: subprocess.Popen[bytes] | None = None
    log: Any = None  # the hub's stderr
    created: list[str] = field(default_factory=list)  # what exists now, to remove: "netns", "link"

    def server(self, port: int) -> str:
        return f"{self.address}:{port}"


def _unused_prefix() -> str:
    """A 10.X. prefix no address or route of this host (or its namespaces we can see) is in."""
    taken = ip("-o", "addr") + ip("route") + ip("-o", "-6", "route")
    rng = random.Random(os.getpid() ^ time.monotonic_ns())
    for _ in range(200):
        prefix = f"10.{rng.randrange(100, 250)}."
        if prefix not in taken:
            return prefix
    raise RuntimeError("no free 10.X.0.0/16 for the test's links")


def _wait_for_port(host: str, port: int, process: subprocess.Popen[bytes], seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the hub at {host} exited with {process.returncode}")
        try:
            socket.create_connection((host, port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise TimeoutError(f"no hub listening at {host}:{port} after {seconds} s")


@pytest.fixture
def hosts(tmp_path: Path) -> Iterator[list[Host]]:
    tag = f"lp{os.getpid() % 100000}"
    prefix = _unused_prefix()
    made: list[Host] = []
    # Where a link is down, its /30 route goes with it: this one makes the prefix unreachable then,
    # as for a host whose link is cut, instead of routing it to the default gateway (whatever answers there).
    blackhole = f"{prefix}0.0/16"
    routed = False
    try:
        ip("route", "add", "unreachable", blackhole)
        routed = True
        for k in range(1, HUBS + 1):
            host = Host(f"{tag}h{k}", f"{tag}c{k}", f"{tag}n{k}", f"{prefix}{k}.2", f"{prefix}{k}.1",
                        tmp_path / f"hub{k}")
            made.append(host)
            ip("netns", "add", host.namespace)
            host.created.append("netns")
            ip("link", "add", host.link, "type", "veth", "peer", "name", host.peer, "netns", host.namespace)
            host.created.append("link")
            ip("addr", "add", f"{host.gateway}/30", "dev", host.link)
            ip("link", "set", host.link, "up")
            ip("addr", "add", f"{host.address}/30", "dev", host.peer, namespace=host.namespace)
            ip("link", "set", host.peer, "up", namespace=host.namespace)
            ip("link", "set", "lo", "up", namespace=host.namespace)
        for host in made:  # each namespace and address exists before anything is sent
            assert f"unreachable {blackhole}" in ip("route", "show", blackhole)
            assert host.namespace in ip("netns", "list").split()
            assert f"inet {host.gateway}/30" in ip("-o", "addr", "show", "dev", host.link)
            assert f"inet {host.address}/30" in ip("-o", "addr", "show", "dev", host.peer, namespace=host.namespace)
            config = host.data_dir.with_suffix(".toml")
            config.write_text(
                f'[store]\ndata_dir = "{host.data_dir}"\nfsync = "never"\n'
                f'[hub]\nlog_format = "text"\nlog_level = "warning"\n'
                '[metrics]\nenabled = false\n[logjam]\nenabled = false\n'
                f'[forward]\nbind = "{host.address}"\nport = {FORWARD}\n'
                f'[lumberjack]\nbind = "{host.address}"\nport = {LUMBERJACK}\n'
                f'[segment]\nbind = "{host.address}"\nport = {SEGMENT}\n')
            host.log = open(host.data_dir.with_suffix(".log"), "wb")  # noqa: SIM115 (closed at teardown)
            host.process = subprocess.Popen(
                ["ip", "netns", "exec", host.namespace, sys.executable, "-m", "logport.cli", "serve", "--config",
                 str(config)], stdout=subprocess.DEVNULL, stderr=host.log)
        for host in made:
            assert host.process is not None
            _wait_for_port(host.address, SEGMENT, host.process)
        yield made
    finally:
        for host in made:
            if host.process is not None and host.process.poll() is None:
                host.process.terminate()
                try:
                    host.process.wait(20)
                except subprocess.TimeoutExpired:
                    host.process.kill()
                    host.process.wait(10)
            if host.log is not None:
                host.log.close()
        if routed:
            subprocess.run(["ip", "route", "del", "unreachable", blackhole], capture_output=True, timeout=30)
        for host in made:  # only what this test made: its links (the peer goes with them), its namespaces
            if "link" in host.created:
                subprocess.run(["ip", "link", "del", host.link], capture_output=True, timeout=30)
            if "netns" in host.created:
                subprocess.run(["ip", "netns", "del", host.namespace], capture_output=True, timeout=30)


class TrackingSender(ForwardSender):
    """The project's Forward client, noting which server acknowledged each batch (sends are sequential)."""

    last: ServerAddress | None = None

    async def _link(self, server: ServerAddress) -> Any:
        self.last = server
        return await super()._link(server)  # type: ignore[misc]


async def send_forward(hosts: list[Host], first: int, count: int, per_batch: int, acked: Counter[str],
                       ids: set[str], before_each: Any = None) -> None:
    """Batches of `per_batch` events over all hubs (equal weights); acked[hub address] += each acked batch."""
    config = SenderConfig(servers=[ServerAddress(h.address, FORWARD) for h in hosts], ack_timeout=3.0,
                          connect_timeout=2.0, retries=6, retry_wait=0.2, recover_wait=30.0)
    async with TrackingSender(config) as client:
        for start in range(first, first + count, per_batch):
            if before_each is not None:
                before_each(start)
            events = [(1_795_000_000 + i, 0, {"shipper": "forward", "seq": i}) for i in range(start, start + per_batch)]
            await client.send("multi.forward", events)
            assert client.last is not None
            acked[client.last.host] += per_batch
            ids.update(f"forward-{i}" for i in range(start, start + per_batch))


def send_fluent(host: Host, count: int, acked: Counter[str], ids: set[str]) -> None:
    s = fluent_sender.FluentSender("multi", host=host.address, port=FORWARD, nanosecond_precision=True, timeout=10)
    for i in range(count):
        assert s.emit_with_time("fluent", fluent_sender.EventTime(1_795_000_000 + i, 0),
                                {"shipper": "fluent", "seq": i}), s.last_error
        acked[host.address] += 1
        ids.add(f"fluent-{i}")
    s.close()


def send_beats(host: Host, count: int, per_send: int, acked: Counter[str], ids: set[str]) -> None:
    with pylogbeat.PyLogBeatClient(host.address, LUMBERJACK, timeout=10) as client:
        for start in range(0, count, per_send):
            client.send([{"@timestamp": "2026-11-18T08:00:00.000Z", "shipper": "beats", "seq": i}
                         for i in range(start, start + per_send)])  # returns once the window is acked
            acked[host.address] += per_send
            ids.update(f"beats-{i}" for i in range(start, start + per_send))


def test_three_hubs_over_the_network(spark, hosts: list[Host], tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    servers = ",".join(h.server(SEGMENT) for h in hosts)
    identity = {h.address: read_hub_identity(h.data_dir) for h in hosts}
    address_of = {v: k for k, v in identity.items()}
    acked: Counter[str] = Counter()
    ids: set[str] = set()
    asyncio.run(send_forward(hosts, 0, 300, 10, acked, ids))
    send_fluent(hosts[2], 50, acked, ids)
    send_beats(hosts[1], 60, 20, acked, ids)
    assert sum(acked.values()) == 410 and len(ids) == 410

    def per_hub() -> Counter[str]:
        rows = spark.read.format("logport").option("server", servers).load().groupBy("hub").count().collect()
        return Counter({address_of[r["hub"]]: r["count"] for r in rows})

    assert per_hub() == acked  # exactly what was acknowledged, per hub and in total

    out = tmp_path / "out"
    stream = ["stream", "--server", servers, "--out", str(out), "--outputs", "events", "--available-now",
              "--timeout", "2"]
    assert run(*stream) == 0

    # Hub 1's link goes down while the Forward client sends: it fails over to the other two.
    def link_down_at(start: int) -> None:
        if start == 400:
            ip("link", "set", hosts[0].link, "down")

    asyncio.run(send_forward(hosts, 300, 200, 10, acked, ids, before_each=link_down_at))
    assert "state DOWN" in ip("link", "show", hosts[0].link)
    # A streaming run meanwhile fails, naming the hub; its checkpoint stays where it was.
    with pytest.raises(Exception, match=f"hub {hosts[0].server(SEGMENT)} did not answer within timeout=2 s"):
        run(*stream)
    ip("link", "set", hosts[0].link, "up")
    _wait_for_port(hosts[0].address, SEGMENT, hosts[0].process)  # type: ignore[arg-type]
    assert run(*stream) == 0  # resumes from the checkpoint

    stored = per_hub()
    assert sum(acked.values()) == 610 and len(ids) == 610
    events = spark.read.parquet(str(out / "events")).selectExpr(
        "hub", "segment", "offset", "`index`", "record:shipper::string AS shipper", "record:seq::int AS seq").collect()
    keys = [(r.hub, r.segment, r.offset, r["index"]) for r in events]
    assert len(keys) == len(set(keys))  # nothing read twice
    assert Counter(address_of[r.hub] for r in events) == stored  # nothing skipped
    assert {f"{r.shipper}-{r.seq}" for r in events} >= ids  # every acknowledged event
    # A batch is stored twice only when hub 1 stored it and its ack was lost with the link, and the
    # client sent it again to another hub (a chunk id is exactly-once on one hub, not across hubs).
    assert sum(stored.values()) - sum(acked.values()) <= 10
