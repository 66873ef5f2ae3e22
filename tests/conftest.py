"""Fixtures shared by every test layer: a store in a temporary directory, free ports."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from logport.config import StoreConfig
from logport.store import SegmentStore

# CI runs hypothesis's default budget (100 examples: the suite's ~100 properties must fit make test's 15 minutes
# beside Spark and the network tests); HYPOTHESIS_PROFILE=long for longer local runs.
settings.register_profile("ci", max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("long", max_examples=5000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

REPO = Path(__file__).resolve().parents[1]
VECTORS = REPO / "tests" / "vectors"  # copies of ../shared/vectors: a clone must test without its neighbours
NODE_MODULES = REPO / "node_modules"


def _local_port_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


_EPHEMERAL = _local_port_range()
_given: set[int] = set()
_next = [20000 + os.getpid() % 8000]


def free_port() -> int:
    """A port nobody listens on, below the kernel's ephemeral range, never handed out twice in this run.

    A port from bind(0) lies in the ephemeral range: between this call and the hub's bind, any outgoing
    connection (a client, libzmq's reconnects) may take it, which CI met as "Address already in use".
    """
    for _ in range(20000):
        port = _next[0]
        _next[0] = 20000 if port + 1 >= min(_EPHEMERAL[0], 32768) else port + 1
        if port in _given or _EPHEMERAL[0] <= port <= _EPHEMERAL[1]:
            continue
        try:
            with socket.socket() as s:
                s.bind(("0.0.0.0", port))
            with socket.socket() as s:
                s.bind(("127.0.0.1", port))
        except OSError:
            continue
        _given.add(port)
        return port
    raise RuntimeError("no free port below the ephemeral range")


@pytest.fixture
def store_config(tmp_path: Path) -> StoreConfig:
    return StoreConfig(data_dir=str(tmp_path / "data"))


@pytest.fixture
async def store(store_config: StoreConfig):  # type: ignore[no-untyped-def]
    s = await SegmentStore.open(store_config)
    yield s
    await s.close()
