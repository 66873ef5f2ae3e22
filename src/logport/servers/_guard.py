"""Guards any listener can put in front of its connections: a per-address limit on failed
handshakes (token bucket) and a limit on open connections (in total and per address).

Both log what they refuse without letting a flood of refusals flood the log:
the first refusal of a burst is logged at once, the rest are counted and summed
up in the next line (`suppressed`).
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from logport.logs import ThrottledLog
from logport.names import peer_host

DEFAULT_FAILURE_BURST = 10  # failed handshakes a peer address may make in a row
DEFAULT_FAILURE_RATE = 1.0  # failed handshakes per second a peer address earns back
DEFAULT_MAX_PEERS = 10000  # addresses a FailureLimiter remembers; the least recently failed are forgotten


@dataclass
class _Bucket:
    tokens: float
    stamp: float


class FailureLimiter:
    """Token bucket per peer address for failed handshakes or authentications.

    A peer address starts with `burst` tokens and earns `rate` per second back,
    up to `burst`. Every failure takes one. While a peer has less than one token,
    `allow` is False: the listener refuses its connection before any handshake,
    so a brute-force guesser gets `burst` tries and then `rate` per second.
    Memory is bounded: at most `max_peers` addresses are remembered (a
    forgotten address starts afresh with a full bucket).
    """

    def __init__(self, log: logging.Logger, *, what: str = "handshake", burst: int = DEFAULT_FAILURE_BURST,
                 rate: float = DEFAULT_FAILURE_RATE, max_peers: int = DEFAULT_MAX_PEERS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if burst < 1 or rate <= 0 or max_peers < 1:
            raise ValueError(f"FailureLimiter needs burst >= 1, rate > 0, max_peers >= 1 "
                             f"(got {burst}, {rate}, {max_peers})")
        self.what = what
        self.burst = burst
        self.rate = rate
        self.max_peers = max_peers
        self.clock = clock
        self.failures = 0  # failures recorded
        self.refused = 0  # connections refused by allow()
        self._buckets: OrderedDict[str, _Bucket] = OrderedDict()
        self._refusal_log = ThrottledLog(log, clock=clock)

    def _tokens(self, host: str, now: float) -> float:
        bucket = self._buckets.get(host)
        if bucket is None:
            return float(self.burst)
        bucket.tokens = min(float(self.burst), bucket.tokens + (now - bucket.stamp) * self.rate)
        bucket.stamp = now
        if bucket.tokens >= self.burst:
            del self._buckets[host]  # a full bucket is the same as none: forget it
            return float(self.burst)
        return bucket.tokens

    def allow(self, peer: str) -> bool:
        """May this peer try (another) handshake now? Logs and counts the refusal when not."""
        host = peer_host(peer)
        now = self.clock()
        if self._tokens(host, now) >= 1.0:
            return True
        self.refused += 1
        self._refusal_log.warning(
            f"{self.what} refused: too many failures from this address",
            peer=peer, limit="failure_burst", value=self.burst, retry_after=round(self.retry_after(peer), 3),
        )
        return False

    def record_failure(self, peer: str) -> None:
        """One failed handshake from `peer`: it costs one token."""
        host = peer_host(peer)
        now = self.clock()
        tokens = self._tokens(host, now)
        self.failures += 1
        bucket = self._buckets.get(host)
        if bucket is None:
            bucket = self._buckets[host] = _Bucket(tokens, now)
        bucket.tokens = max(0.0, tokens - 1.0)
        self._buckets.move_to_end(host)
        while len(self._buckets) > self.max_peers:
            self._buckets.popitem(last=False)

    def retry_after(self, peer: str) -> float:
        """Seconds until `peer` may try again (0 if it may now)."""
        tokens = self._tokens(peer_host(peer), self.clock())
        return 0.0 if tokens >= 1.0 else (1.0 - tokens) / self.rate

    def __len__(self) -> int:
        return len(self._buckets)


class ConnectionGuard:
    """Counts a listener's open connections, in total and per peer address, and refuses beyond the limits.

    `admit(peer)` as a connection is made (False: refuse it), `release(peer)` once an admitted one is lost: the
    listeners call them through TcpListener.admit and forget (servers/_lifecycle.py).
    `max_per_peer = 0` means no per-address limit.
    """

    def __init__(self, log: logging.Logger, *, max_connections: int, max_per_peer: int = 0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if max_connections < 1 or max_per_peer < 0:
            raise ValueError(f"ConnectionGuard needs max_connections >= 1 and max_per_peer >= 0 "
                             f"(got {max_connections}, {max_per_peer})")
        self.max_connections = max_connections
        self.max_per_peer = max_per_peer
        self.open = 0
        self.refused = 0
        self._per_peer: dict[str, int] = {}
        self._total_log = ThrottledLog(log, clock=clock)
        self._peer_log = ThrottledLog(log, clock=clock)

    def admit(self, peer: str) -> bool:
        if self.open >= self.max_connections:
            self.refused += 1
            self._total_log.warning("connection refused: max_connections reached", peer=peer,
                                    limit="max_connections", value=self.max_connections)
            return False
        host = peer_host(peer)
        count = self._per_peer.get(host, 0)
        if self.max_per_peer and count >= self.max_per_peer:
            self.refused += 1
            self._peer_log.warning("connection refused: max_connections_per_peer reached", peer=peer,
                                   limit="max_connections_per_peer", value=self.max_per_peer)
            return False
        self._per_peer[host] = count + 1
        self.open += 1
        return True

    def release(self, peer: str) -> None:
        host = peer_host(peer)
        count = self._per_peer.get(host, 0)
        if count <= 0:
            raise ValueError(f"ConnectionGuard.release({peer!r}) without a matching admit")
        if count == 1:
            del self._per_peer[host]
        else:
            self._per_peer[host] = count - 1
        self.open -= 1

    def count(self, peer: str) -> int:
        return self._per_peer.get(peer_host(peer), 0)
