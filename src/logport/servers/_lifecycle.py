"""One lifecycle for every listener (start, pause, resume, drain, close) and the plumbing its connections
share: the peer's name, reads paused for more than one reason at once, and waiting for what was received.

As Fluent Bit's input plugins declare one struct of callbacks (init, collect, pause, resume, exit), every
listener here is a `Listener`: the hub pauses, resumes, drains and closes them alike, and asks each whether
it is bound (readiness). A TCP listener's part is `TcpListener`; its connections are `DrainableConnection`s.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from prometheus_client import Counter, Gauge

from logport.config import TLSConfig
from logport.servers._guard import ConnectionGuard, FailureLimiter
from logport.tls import server_options

log = logging.getLogger("logport.lifecycle")

SETTLE_POLL = 0.01  # seconds between two looks at a connection that is still storing what it received


def peer_name(transport: asyncio.BaseTransport) -> str:
    """"ip:port" of a transport's peer (a Unix socket's path, or "?" when there is none)."""
    addr = transport.get_extra_info("peername")
    if isinstance(addr, tuple):
        return f"{addr[0]}:{addr[1]}"
    return str(addr) if addr else "?"


class ReadGate:
    """Reading of one transport, paused for as long as any reason holds it.

    A connection pauses for its own budget ("budget"), while it resolves its peer's name ("resolve"), and
    the hub pauses every connection of a listener ("lifecycle", to drain it): each reason is held and
    released on its own, and reading resumes only once none holds it, so that the budget falling back
    under its limit cannot resume a connection the hub is draining.
    """

    __slots__ = ("transport", "reasons")

    def __init__(self, transport: asyncio.BaseTransport | None) -> None:
        self.transport = transport
        self.reasons: set[str] = set()

    @property
    def paused(self) -> bool:
        return bool(self.reasons)

    def holds(self, reason: str) -> bool:
        return reason in self.reasons

    def hold(self, reason: str) -> bool:
        """Pause reading for `reason`; True if this paused a transport that was reading."""
        was_reading = not self.reasons
        self.reasons.add(reason)
        if was_reading and self.transport is not None and not self.transport.is_closing():
            self.transport.pause_reading()  # type: ignore[attr-defined]
            return True
        return False

    def release(self, reason: str) -> bool:
        """`reason` no longer holds; True if reading resumed."""
        if reason not in self.reasons:
            return False
        self.reasons.discard(reason)
        if not self.reasons and self.transport is not None and not self.transport.is_closing():
            self.transport.resume_reading()  # type: ignore[attr-defined]
            return True
        return False


class IdleSettings(Protocol):
    idle_timeout: float  # seconds; 0 = never (read at every look, so that a reload applies to open connections)


class IdleTimeout:
    """Closes a connection that has received nothing for `idle_timeout` seconds and holds nothing unanswered.

    Every listener's connections use this one: a timer armed when the connection starts that, when it fires,
    looks how long the connection has been quiet (`touch()` on every byte received, and where a listener counts
    it, on every answer sent) and fires again when the rest of the timeout has passed, rather than being
    rescheduled on every read. A connection still storing or answering what it received is not idle.
    """

    __slots__ = ("settings", "peer", "busy", "expire", "last_activity", "_timer")

    def __init__(self, settings: IdleSettings, busy: Callable[[], bool], expire: Callable[[], None]) -> None:
        self.settings = settings
        self.peer = "?"
        self.busy = busy
        self.expire = expire  # closes the connection (and counts it where the listener has a metric for it)
        self.last_activity = time.monotonic()
        self._timer: asyncio.TimerHandle | None = None

    def start(self, peer: str) -> None:
        self.peer = peer
        self.last_activity = time.monotonic()
        timeout = self.settings.idle_timeout
        if timeout > 0:
            self._timer = asyncio.get_running_loop().call_later(timeout, self._look)

    def touch(self) -> None:
        self.last_activity = time.monotonic()

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _look(self) -> None:
        self._timer = None
        timeout = self.settings.idle_timeout
        if timeout <= 0:  # turned off by a reload
            return
        quiet = time.monotonic() - self.last_activity
        if quiet >= timeout and not self.busy():
            log.info("closing idle connection", extra={"peer": self.peer, "limit": "idle_timeout",
                                                        "value": round(quiet, 1)})
            self.expire()
            return
        self._timer = asyncio.get_running_loop().call_later(max(timeout - quiet, 0.05), self._look)


class Listener(Protocol):
    """What the hub does with every listener, whatever its protocol."""

    def serving(self) -> bool:
        """Bound and accepting connections (or messages)."""
        ...

    def pause(self) -> None:
        """Stop reading from every connection (and from those accepted later), keeping them open."""
        ...

    def resume(self) -> None: ...

    async def drain(self, timeout: float) -> None:
        """Stop accepting, stop reading, answer everything already received once it is stored (at most
        `timeout` seconds), then close every connection: a client either got its answer or sees its
        connection closed before one."""
        ...

    async def close(self) -> None: ...


class DrainableConnection(Protocol):
    gate: ReadGate

    async def settle(self) -> None:
        """Return once everything received so far is stored and answered."""
        ...

    def close(self) -> None: ...


LIFECYCLE = "lifecycle"  # the ReadGate reason of the hub's pause
BUDGET = "budget"  # the ReadGate reason of a connection over its ReceiveBudget


class Budgeted(Protocol):
    """A connection under a `ReceiveBudget`."""

    gate: ReadGate

    def held(self) -> int:
        """What it holds received and not yet stored, in its budget's unit (bytes, or windows)."""
        ...


class ReceiveBudget:
    """What a listener's connections may hold received and not yet stored, in bytes or in windows.

    A connection stops reading once it holds more than `limit`, or once the listener's connections together
    hold more than `total_limit` (`held`: what the listener counts in); it reads again once it holds `resume`
    or less and the listener `total_resume` or less: half of each unless told, so that a pause is not undone by
    the next read. A paused connection waits in `paused`: when the listener's total falls, every one of them
    is looked at (its own appends may all be answered, and nothing of its own would look again). `pauses`
    counts the pauses (the listener's read-pause metric).
    """

    __slots__ = ("limit", "resume", "total_limit", "total_resume", "held", "paused", "pauses")

    def __init__(self, limit: int, total_limit: int | None = None, *, resume: int | None = None,
                 pauses: Counter | None = None) -> None:
        self.held = 0
        self.paused: set[Budgeted] = set()
        self.pauses = pauses
        self.limit = self.resume = 0
        self.total_limit: int | None = None
        self.total_resume = 0
        self.set_limits(limit, total_limit, resume=resume)

    def set_limits(self, limit: int, total_limit: int | None = None, *, resume: int | None = None) -> None:
        """New limits (a reload): they apply from the next byte received or stored."""
        self.limit = limit
        self.resume = limit // 2 if resume is None else resume
        self.total_limit = total_limit
        self.total_resume = total_limit // 2 if total_limit is not None else 0

    def over(self, held: int) -> bool:
        """A connection holding `held`, or the listener, is over its limit."""
        return held > self.limit or (self.total_limit is not None and self.held > self.total_limit)

    def check(self, conn: Budgeted) -> None:
        """`conn` received more: it stops reading if it, or the listener, is over."""
        if not conn.gate.holds(BUDGET) and self.over(conn.held()):
            self.paused.add(conn)
            conn.gate.hold(BUDGET)
            if self.pauses is not None:
                self.pauses.inc()

    def relieve(self, conn: Budgeted) -> None:
        """What `conn` held was (partly) stored: it reads again if it and the listener have room, and so does
        every connection that waited for the listener's total to fall."""
        self._resume_if_under(conn)
        if self.paused and self.total_limit is not None and self.held <= self.total_resume:
            for other in list(self.paused):
                self._resume_if_under(other)

    def forget(self, conn: Budgeted) -> None:
        self.paused.discard(conn)

    def _total_under(self) -> bool:
        return self.total_limit is None or self.held <= self.total_resume

    def _resume_if_under(self, conn: Budgeted) -> None:
        if conn.gate.holds(BUDGET) and conn.held() <= self.resume and self._total_under():
            self.paused.discard(conn)
            conn.gate.release(BUDGET)


class ListenerMetrics(Protocol):
    connections: Gauge  # open connections
    errors: Counter  # connections refused or closed on an error, by reason


class Admitted(Budgeted, Protocol):
    """A connection as its listener admits and forgets it."""

    peer: str


class TcpListener:
    """The lifecycle of a listener on an asyncio server whose connections are `DrainableConnection`s.

    A subclass sets `self._listening` when it has bound, and `guard`, `budget`, `metrics` and `connections`
    (its live connections); each connection calls `admit` as it is made and `forget` as it is lost.
    """

    name = "listener"
    _listening: asyncio.AbstractServer | None
    connections: set[Any]
    guard: ConnectionGuard
    budget: ReceiveBudget
    metrics: ListenerMetrics

    def __init__(self) -> None:
        self._listening = None
        self.reads_paused = False
        self.draining = False
        self.ssl_context: ssl.SSLContext | None = None

    def tls_options(self, config: TLSConfig) -> dict[str, Any]:
        """`loop.create_server`'s TLS arguments; the context is kept, so that a reload can rotate its
        certificate: new handshakes present the new one, established connections keep theirs."""
        options = server_options(config)
        self.ssl_context = options["ssl"]
        return options

    def config_changed(self) -> None:
        """The section object it holds was updated in place (a reload): refresh what was made from it."""
        guard = getattr(self, "guard", None)
        config = getattr(self, "config", None)
        if guard is not None and config is not None:
            guard.max_connections = config.max_connections
            guard.max_per_peer = config.max_connections_per_peer

    def reload_tls(self, config: TLSConfig) -> None:
        """Load the certificate and key (and client CA) again, from the same or new files."""
        if self.ssl_context is None or not config.enabled:
            raise ValueError(f"{self.name}: TLS cannot be turned on or off live")
        self.ssl_context.load_cert_chain(config.cert, config.key)
        if config.client_ca:
            self.ssl_context.load_verify_locations(config.client_ca)

    def serving(self) -> bool:
        return self._listening is not None and self._listening.is_serving() and not self.draining

    def admit(self, conn: Admitted, transport: asyncio.Transport,
              failures: FailureLimiter | None = None) -> bool:
        """A connection just made: counted among the listener's (paused if the listener is), or refused (False,
        its transport aborted, the refusal counted by reason): over max_connections (in all or from its
        address), or from an address with too many failed handshakes of late (`failures`)."""
        guard = self.guard
        if not guard.admit(conn.peer):  # logs the refusals, throttled
            self.metrics.errors.labels("max_connections").inc()
            transport.abort()
            return False
        if failures is not None and not failures.allow(conn.peer):
            guard.release(conn.peer)
            self.metrics.errors.labels("handshake_failures").inc()
            transport.abort()
            return False
        self.connections.add(conn)
        self.metrics.connections.inc()
        if self.reads_paused:  # accepted while the listener is paused: it starts paused
            conn.gate.hold(LIFECYCLE)
        return True

    def forget(self, conn: Admitted) -> None:
        """A connection is gone (idempotent: a refused one was never counted)."""
        self.budget.forget(conn)
        if conn in self.connections:
            self.connections.discard(conn)
            self.guard.release(conn.peer)
            self.metrics.connections.dec()

    def pause(self) -> None:
        self.reads_paused = True
        for conn in list(self.connections):
            conn.gate.hold(LIFECYCLE)

    def resume(self) -> None:
        self.reads_paused = False
        for conn in list(self.connections):
            conn.gate.release(LIFECYCLE)

    def stop_accepting(self) -> None:
        if self._listening is not None:
            self._listening.close()  # the listening socket only: accepted connections stay open

    async def drain(self, timeout: float) -> None:
        self.draining = True
        self.stop_accepting()
        self.pause()
        started = time.monotonic()
        conns = list(self.connections)
        unsettled = await settle_all(conns, timeout)
        log.info("listener drained", extra={"listener": self.name, "connections": len(conns),
                                            "unsettled": unsettled,
                                            "seconds": round(time.monotonic() - started, 3)})
        for conn in conns:
            conn.close()


async def settle_all(conns: Iterable[DrainableConnection], timeout: float) -> int:
    """Wait (at most `timeout` seconds) for every connection to settle; how many did not."""
    tasks = [asyncio.ensure_future(conn.settle()) for conn in conns]
    if not tasks:
        return 0
    done, pending = await asyncio.wait(tasks, timeout=max(timeout, 0.0))
    for task in pending:
        task.cancel()
    for task in done:
        if not task.cancelled() and task.exception() is not None:
            log.warning("a connection failed while draining", exc_info=task.exception())
    return len(pending)


async def wait_until(condition: Any) -> None:
    """Poll `condition()` until it is true (for state that changes in callbacks rather than in tasks)."""
    while not condition():
        await asyncio.sleep(SETTLE_POLL)
