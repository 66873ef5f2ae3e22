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
import subprocess
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pylogbeat
import pytest
from fluent import sender as fluent_sender

from logport.store.identity import read_hub_identity
from tests.multihub.netns import (
    FORWARD,
    LUMBERJACK,
    NEEDS_NETNS,
    SEGMENT,
    HubProcess,
    ip,
    send_forward,
    start_hub,
    stop_hub,
    unused_prefix,
    wait_for_port,
)
from tests.spark.test_pipeline import run

pytestmark = [pytest.mark.slow, NEEDS_NETNS]

HUBS = 3


@dataclass
class Host:
    """One hub's host: a namespace, the veth link to it (our end, its end) and the /30 between them."""

    namespace: str
    link: str  # our end
    peer: str  # its end, inside the namespace
    address: str  # the hub's
    gateway: str  # ours on the link
    data_dir: Path
    hub: HubProcess | None = None
    created: list[str] = field(default_factory=list)  # what exists now, to remove: "netns", "link"

    def server(self, port: int) -> str:
        return f"{self.address}:{port}"


@pytest.fixture
def hosts(tmp_path: Path) -> Iterator[list[Host]]:
    tag = f"lp{os.getpid() % 100000}"
    prefix = unused_prefix()
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
            host.hub = start_hub(host.namespace, host.address, host.data_dir)
        for host in made:
            assert host.hub is not None
            wait_for_port(host.address, SEGMENT, host.hub.process)
        yield made
    finally:
        for host in made:
            if host.hub is not None:
                stop_hub(host.hub)
        if routed:
            subprocess.run(["ip", "route", "del", "unreachable", blackhole], capture_output=True, timeout=30)
        for host in made:  # only what this test made: its links (the peer goes with them), its namespaces
            if "link" in host.created:
                subprocess.run(["ip", "link", "del", host.link], capture_output=True, timeout=30)
            if "netns" in host.created:
                subprocess.run(["ip", "netns", "del", host.namespace], capture_output=True, timeout=30)


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
    asyncio.run(send_forward([h.address for h in hosts], 0, 300, 10, acked, ids))
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

    asyncio.run(send_forward([h.address for h in hosts], 300, 200, 10, acked, ids, before_each=link_down_at))
    assert "state DOWN" in ip("link", "show", hosts[0].link)
    # A streaming run meanwhile fails, naming the hub; its checkpoint stays where it was.
    with pytest.raises(Exception, match=f"hub {hosts[0].server(SEGMENT)} did not answer within timeout=2 s"):
        run(*stream)
    ip("link", "set", hosts[0].link, "up")
    wait_for_port(hosts[0].address, SEGMENT, hosts[0].hub.process)  # type: ignore[union-attr]
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
