"""servers/_guard.py: the failed-handshake token bucket and the connection-count guard."""

from __future__ import annotations

import logging

import pytest

from logport.logs import ThrottledLog
from logport.names import peer_host
from logport.servers._guard import ConnectionGuard, FailureLimiter

log = logging.getLogger("logport.test_guard")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(("peer", "host"), [
    ("127.0.0.1:5123", "127.0.0.1"),
    ("[::1]:5123", "::1"),
    ("::1", "::1"),
    ("fe80::1:2", "fe80::1:2"),
    ("10.0.0.1", "10.0.0.1"),
    ("host.example:80", "host.example"),
])
def test_peer_host(peer: str, host: str) -> None:
    assert peer_host(peer) == host


def test_failures_use_up_the_burst_then_refill_at_the_rate() -> None:
    clock = Clock()
    limiter = FailureLimiter(log, burst=3, rate=0.5, clock=clock)
    for port in range(3):
        assert limiter.allow(f"10.0.0.1:{port}")
        limiter.record_failure(f"10.0.0.1:{port}")
    assert not limiter.allow("10.0.0.1:9")  # same address, other port: still blocked
    assert limiter.retry_after("10.0.0.1:9") == pytest.approx(2.0)
    assert limiter.allow("10.0.0.2:1")  # another address is not affected
    clock.now += 1.9
    assert not limiter.allow("10.0.0.1:9")
    clock.now += 0.2
    assert limiter.allow("10.0.0.1:9")  # one token back after 1 / rate seconds
    limiter.record_failure("10.0.0.1:9")
    assert not limiter.allow("10.0.0.1:9")  # and only one
    assert limiter.refused == 3
    assert limiter.failures == 4


def test_a_full_bucket_is_forgotten_and_memory_is_bounded() -> None:
    clock = Clock()
    limiter = FailureLimiter(log, burst=2, rate=1.0, max_peers=100, clock=clock)
    for i in range(1000):
        limiter.record_failure(f"10.1.{i // 256}.{i % 256}:1")
    assert len(limiter) == 100  # least recently failed addresses forgotten
    clock.now += 10
    limiter.allow("10.1.3.231:1")  # refilled to full: dropped
    assert len(limiter) == 99


def test_refusals_are_logged_but_not_one_line_each(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    limiter = FailureLimiter(log, burst=1, rate=0.01, clock=clock)
    limiter.record_failure("10.0.0.1:1")
    with caplog.at_level(logging.WARNING, logger="logport.test_guard"):
        for _ in range(1000):
            assert not limiter.allow("10.0.0.1:2")
        clock.now += 11
        assert not limiter.allow("10.0.0.1:3")
    lines = [r for r in caplog.records if "too many failures" in r.getMessage()]
    assert len(lines) == 2
    assert lines[0].peer == "10.0.0.1:2" and lines[0].value == 1 and lines[0].suppressed == 0  # type: ignore[attr-defined]
    assert lines[1].suppressed == 999  # type: ignore[attr-defined]


def test_limiter_refuses_bad_settings() -> None:
    for kwargs in ({"burst": 0}, {"rate": 0}, {"max_peers": 0}):
        with pytest.raises(ValueError):
            FailureLimiter(log, **kwargs)  # type: ignore[arg-type]


def test_connection_guard_total_and_per_peer(caplog: pytest.LogCaptureFixture) -> None:
    guard = ConnectionGuard(log, max_connections=5, max_per_peer=2)
    with caplog.at_level(logging.WARNING, logger="logport.test_guard"):
        assert guard.admit("10.0.0.1:1")
        assert guard.admit("10.0.0.1:2")
        assert not guard.admit("10.0.0.1:3")  # per address
        assert guard.admit("10.0.0.2:1")
        assert guard.admit("10.0.0.3:1")
        assert guard.admit("10.0.0.4:1")
        assert not guard.admit("10.0.0.5:1")  # total
    assert guard.open == 5 and guard.refused == 2
    assert {r.limit for r in caplog.records} == {"max_connections", "max_connections_per_peer"}  # type: ignore[attr-defined]
    guard.release("10.0.0.1:2")
    assert guard.count("10.0.0.1:9") == 1
    assert guard.admit("10.0.0.5:1")
    with pytest.raises(ValueError):
        guard.release("10.9.9.9:1")
    for peer in ("10.0.0.1:1", "10.0.0.2:1", "10.0.0.3:1", "10.0.0.4:1", "10.0.0.5:1"):
        guard.release(peer)
    assert guard.open == 0 and guard.count("10.0.0.1:1") == 0


def test_connection_guard_without_per_peer_limit() -> None:
    guard = ConnectionGuard(log, max_connections=3)
    assert all(guard.admit(f"127.0.0.1:{p}") for p in range(3))
    assert not guard.admit("127.0.0.1:9")


def test_throttled_log_counts_what_it_suppresses(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    throttled = ThrottledLog(log, interval=5, clock=clock)
    with caplog.at_level(logging.WARNING, logger="logport.test_guard"):
        assert throttled.warning("x", peer="a")
        assert not throttled.warning("x", peer="b")
        clock.now += 5
        assert throttled.warning("x", peer="c")
    assert [(r.peer, r.suppressed) for r in caplog.records] == [("a", 0), ("c", 1)]  # type: ignore[attr-defined]
