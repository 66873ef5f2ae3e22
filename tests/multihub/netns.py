"""Hosts for the tests of several machines: network namespaces, the links between them, hubs started in
them, and the project's Forward client noting which hub acknowledged each batch.

Needs root and iproute2 (`ip netns`). Addresses are taken in a 10.X.0.0/16 that no interface or route
here uses; what a test makes (namespaces, links, routes) it removes, and only that.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import pytest

from logport.clients.forward import ForwardSender, SenderConfig, ServerAddress

FORWARD, LUMBERJACK, SEGMENT = 24224, 5044, 12345
NEEDS_NETNS = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("ip") is None,
                                 reason="network namespaces need root and iproute2's ip")


def ip(*args: str, namespace: str | None = None) -> str:
    command = ["ip", "netns", "exec", namespace, "ip", *args] if namespace else ["ip", *args]
    return subprocess.run(command, check=True, capture_output=True, text=True, timeout=30).stdout


def unused_prefix() -> str:
    """A 10.X. prefix no address or route of this host (or its namespaces we can see) is in."""
    taken = ip("-o", "addr") + ip("route") + ip("-o", "-6", "route")
    rng = random.Random(os.getpid() ^ time.monotonic_ns())
    for _ in range(200):
        prefix = f"10.{rng.randrange(100, 250)}."
        if prefix not in taken:
            return prefix
    raise RuntimeError("no free 10.X.0.0/16 for the test's links")


def wait_for_port(host: str, port: int, process: subprocess.Popen[bytes], seconds: float = 30) -> None:
    """Until `host:port` takes connections; fails if `process` exits first."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the process for {host}:{port} exited with {process.returncode}")
        try:
            socket.create_connection((host, port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise TimeoutError(f"nothing listening at {host}:{port} after {seconds} s")


@dataclass
class HubProcess:
    """A hub (`logport serve`) in a namespace, listening on `address` (Forward, Lumberjack, segment)."""

    namespace: str
    address: str
    data_dir: Path
    process: subprocess.Popen[bytes]
    log: IO[bytes]

    def server(self, port: int = SEGMENT) -> str:
        return f"{self.address}:{port}"


def start_hub(namespace: str, address: str, data_dir: Path) -> HubProcess:
    """A hub in `namespace` on `address`; its config and stderr log beside `data_dir`. Returns once it runs
    (wait_for_port to know it listens)."""
    config = data_dir.with_suffix(".toml")
    config.write_text(
        f'[store]\ndata_dir = "{data_dir}"\nfsync = "never"\n'
        f'[hub]\nlog_format = "text"\nlog_level = "warning"\n'
        '[metrics]\nenabled = false\n[logjam]\nenabled = false\n'
        f'[forward]\nbind = "{address}"\nport = {FORWARD}\n'
        f'[lumberjack]\nbind = "{address}"\nport = {LUMBERJACK}\n'
        f'[segment]\nbind = "{address}"\nport = {SEGMENT}\n')
    log = open(data_dir.with_suffix(".log"), "wb")  # noqa: SIM115 (closed by stop_hub)
    process = subprocess.Popen(["ip", "netns", "exec", namespace, sys.executable, "-m", "logport.cli", "serve",
                                "--config", str(config)], stdout=subprocess.DEVNULL, stderr=log)
    return HubProcess(namespace, address, data_dir, process, log)


def stop_process(process: subprocess.Popen[Any], seconds: float = 20) -> None:
    """SIGTERM, then SIGKILL if it lingers."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(seconds)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


def stop_hub(hub: HubProcess) -> None:
    stop_process(hub.process)
    hub.log.close()


def descendants(pid: int) -> list[int]:
    """pid and every live process under it, parents first (from /proc)."""
    found, pending = [], [pid]
    while pending:
        p = pending.pop(0)
        found.append(p)
        with suppress(OSError, ValueError):
            for task in Path(f"/proc/{p}/task").iterdir():
                pending.extend(int(c) for c in (task / "children").read_text().split())
    return found


def kill_tree(pid: int) -> list[int]:
    """SIGKILL a process and everything under it at once, as a machine that loses power: returns the pids."""
    pids = descendants(pid)
    for p in pids:
        with suppress(ProcessLookupError):
            os.kill(p, signal.SIGKILL)
    return pids


@dataclass
class Lan:
    """Network namespaces as hosts on one LAN: a bridge in a namespace of its own, a veth link from each
    host to it, and one from this namespace (at PREFIX.0.1, so this process reaches every host).

    A host whose link is down is cut off as a machine whose cable is pulled: nothing answers at its
    address any more (new connections fail once ARP gives up, open ones time out), and no route changes.
    """

    tag: str
    prefix: str  # "10.X."
    addresses: dict[str, str] = field(default_factory=dict)  # host name -> its address
    namespaces: list[str] = field(default_factory=list)  # made here, to remove

    @property
    def bridge(self) -> str:
        return f"{self.tag}lan"

    @property
    def gateway(self) -> str:  # this namespace's address on the LAN
        return f"{self.prefix}0.1"

    def namespace(self, host: str) -> str:
        return f"{self.tag}{host}"

    def port(self, host: str) -> str:  # the host's link on the bridge
        return f"{self.tag}{list(self.addresses).index(host)}b"

    def exec(self, host: str) -> list[str]:
        """The command prefix that runs a program on `host`."""
        return ["ip", "netns", "exec", self.namespace(host)]

    def set_link(self, host: str, up: bool) -> None:
        ip("link", "set", self.port(host), "up" if up else "down", namespace=self.bridge)

    def add_host(self, host: str) -> str:
        address = f"{self.prefix}0.{11 + len(self.addresses)}"
        self.addresses[host] = address
        namespace, inside, port = self.namespace(host), f"{self.tag}{len(self.addresses) - 1}h", self.port(host)
        ip("netns", "add", namespace)
        self.namespaces.append(namespace)
        ip("link", "add", inside, "type", "veth", "peer", "name", port)
        ip("link", "set", inside, "netns", namespace)
        ip("link", "set", port, "netns", self.bridge)
        ip("link", "set", port, "master", "br0", namespace=self.bridge)
        ip("link", "set", port, "up", namespace=self.bridge)
        ip("addr", "add", f"{address}/16", "dev", inside, namespace=namespace)
        ip("link", "set", inside, "up", namespace=namespace)
        ip("link", "set", "lo", "up", namespace=namespace)
        assert f"inet {address}/16" in ip("-o", "addr", "show", "dev", inside, namespace=namespace)
        return address

    @classmethod
    @contextmanager
    def create(cls, hosts: list[str]) -> Iterator[Lan]:
        lan = cls(tag=f"lp{os.getpid() % 100000}", prefix=unused_prefix())
        ours = f"{lan.tag}r"  # this namespace's end of its link
        try:
            ip("netns", "add", lan.bridge)
            lan.namespaces.append(lan.bridge)
            ip("link", "add", "br0", "type", "bridge", namespace=lan.bridge)
            ip("link", "set", "br0", "up", namespace=lan.bridge)
            ip("link", "add", ours, "type", "veth", "peer", "name", f"{lan.tag}rb")
            ip("link", "set", f"{lan.tag}rb", "netns", lan.bridge)
            ip("link", "set", f"{lan.tag}rb", "master", "br0", namespace=lan.bridge)
            ip("link", "set", f"{lan.tag}rb", "up", namespace=lan.bridge)
            ip("addr", "add", f"{lan.gateway}/16", "dev", ours)
            ip("link", "set", ours, "up")
            for host in hosts:
                lan.add_host(host)
            yield lan
        finally:
            # Removing a namespace removes the links in it, and their other ends (this namespace's too).
            for namespace in reversed(lan.namespaces):
                subprocess.run(["ip", "netns", "del", namespace], capture_output=True, timeout=30)
            subprocess.run(["ip", "link", "del", ours], capture_output=True, timeout=30)


class TrackingSender(ForwardSender):
    """The project's Forward client, noting which server acknowledged each batch (sends are sequential)."""

    last: ServerAddress | None = None

    async def _link(self, server: ServerAddress) -> Any:
        self.last = server
        return await super()._link(server)  # type: ignore[misc]


async def send_forward(addresses: list[str], first: int, count: int, per_batch: int, acked: Counter[str],
                       ids: set[str], before_each: Any = None, start_time: int = 1_795_000_000) -> None:
    """Batches of `per_batch` events over all hubs (equal weights), event i at start_time + i seconds;
    acked[hub address] += each acked batch."""
    config = SenderConfig(servers=[ServerAddress(a, FORWARD) for a in addresses], ack_timeout=3.0,
                          connect_timeout=2.0, retries=6, retry_wait=0.2, recover_wait=30.0)
    async with TrackingSender(config) as client:
        for start in range(first, first + count, per_batch):
            if before_each is not None and before_each(start) is False:
                return
            events = [(start_time + i, 0, {"shipper": "forward", "seq": i}) for i in range(start, start + per_batch)]
            await client.send("multi.forward", events)
            assert client.last is not None
            acked[client.last.host] += per_batch
            ids.update(f"forward-{i}" for i in range(start, start + per_batch))
