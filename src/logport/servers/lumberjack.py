"""The Lumberjack (Beats) listener: v1 and v2 on one port, each window acknowledged once durable.

The protocol core (`protocols.lumberjack.Connection`, windows=True) says what a
window is; here each is stored as PackedForward batches and acknowledged with
its last sequence after `store.append` returns, in order; while one is being
stored (or decoded in a worker) the writer gets a keep-alive `A 0` every few
seconds, as Logstash sends. A sender that pauses mid-window has what it sent so
far stored and acknowledged after `partial_window_delay` (streaming v1 clients
announce windows they never fill): the core keeps that timer's state, this
module runs the clock.
"""

from __future__ import annotations

import asyncio
import logging
import time
import typing
from collections import deque
from typing import Any

from prometheus_client import Counter, Gauge

from logport.config import LumberjackConfig
from logport.errors import LimitExceeded, LogportError, RemoteProtocolError
from logport.protocols._receivebuffer import NEED_DATA
from logport.protocols.lumberjack import (  # noqa: F401 - the stored form's names: tests and the bench find them here
    MAX_EVENT_DEPTH,
    AnnouncedWindow,
    Connection,
    Decoded,
    Limits,
    Role,
    Window,
    _scan_events,
    _scan_window,
    build_batches,
    build_batches_in_python,
    decode_window,
    decode_window_in_python,
    encode_ack,
)
from logport.runtime import Runtime
from logport.servers._guard import ConnectionGuard
from logport.servers._lifecycle import (
    BUDGET,
    IdleTimeout,
    ReadGate,
    ReceiveBudget,
    TcpListener,
    peer_name,
    wait_until,
)
from logport.workers import WorkerPool

log = logging.getLogger("logport.lumberjack")

# windows decoded but not yet stored, per connection, before reading pauses (back-pressure)
PAUSE_AT_WINDOWS = 4
RESUME_AT_WINDOWS = 1
# share of the store's max_frame_size a batch's entries may fill: the rest is for the option and headers
BATCH_FILL = 7 / 8
# a window of at least this many events is split between the decode workers: with two windows in flight (Filebeat)
# the next window's parts are queued while one is stored and acknowledged, so no worker waits for its sender
SPLIT_AT_EVENTS = 512


def _retrieve(task: asyncio.Task[None]) -> None:
    """An append whose connection is gone still finishes; its error (reported via the ack loop) is retrieved."""
    if not task.cancelled():
        task.exception()


class LumberjackMetrics:
    """Counters of the Lumberjack listener (`logport_lumberjack_*`)."""

    def __init__(self, runtime: Runtime) -> None:
        r = runtime.metrics.registry
        self.events = Counter("logport_lumberjack_events", "Events stored and acknowledged", ["segment"], registry=r)
        self.windows = Counter("logport_lumberjack_windows", "Windows (or parts) acknowledged", registry=r)
        self.worker_windows = Counter("logport_lumberjack_worker_windows",
                                      "Windows decoded by a decode worker process", registry=r)
        self.keepalives = Counter("logport_lumberjack_keepalives", "Keep-alive acks (A 0) sent", registry=r)
        self.errors = Counter(
            "logport_lumberjack_connection_errors", "Connections closed on an error", ["reason"], registry=r
        )
        self.connections = Gauge("logport_lumberjack_connections", "Open connections", registry=r)


class LumberjackServer(TcpListener):
    """The listening socket and its connections (the hub's Service)."""

    name = "lumberjack"

    def __init__(self, runtime: Runtime) -> None:
        super().__init__()
        self.runtime = runtime
        self.config: LumberjackConfig = runtime.config.lumberjack
        cfg = self.config
        self.limits = Limits(cfg.max_payload_size, cfg.max_decompressed_size, cfg.max_window_size, cfg.max_window_bytes)
        self.metrics: LumberjackMetrics = runtime.metrics.once(LumberjackMetrics, lambda: LumberjackMetrics(runtime))
        self.connections: set[LumberjackConnection] = set()
        self.guard = ConnectionGuard(log, max_connections=cfg.max_connections,
                                     max_per_peer=cfg.max_connections_per_peer)
        # windows being decoded or stored, per connection: reading pauses at PAUSE_AT_WINDOWS
        self.budget = ReceiveBudget(PAUSE_AT_WINDOWS - 1, resume=RESUME_AT_WINDOWS)
        self.server: asyncio.Server | None = None
        self.max_body = int(runtime.store.config.max_frame_size * BATCH_FILL)
        self.decoders = WorkerPool("lumberjack", cfg.decode_workers) if cfg.decode_workers else None

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self.server = await loop.create_server(
            lambda: LumberjackConnection(self), self.config.bind, self.config.port,
            reuse_address=True, **self.tls_options(self.config.tls),
        )
        self._listening = self.server

    def config_changed(self) -> None:
        super().config_changed()
        cfg = self.config  # new connections take the new limits; established ones keep theirs
        self.limits = Limits(cfg.max_payload_size, cfg.max_decompressed_size, cfg.max_window_size, cfg.max_window_bytes)

    @property
    def port(self) -> int:
        assert self.server is not None
        return int(self.server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
        for conn in list(self.connections):
            conn.abort()
        if self.decoders is not None:
            self.decoders.close()
        if self.server is not None:
            await self.server.wait_closed()


async def start(runtime: Runtime) -> LumberjackServer:
    server = LumberjackServer(runtime)
    await server.start()
    log.info("lumberjack listening", extra={"bind": server.config.bind, "port": server.port,
                                             "tls": server.config.tls.enabled})
    return server


class LumberjackConnection(asyncio.Protocol):
    """One client: windows from the protocol core, stored in order and acknowledged in order by one task."""

    def __init__(self, server: LumberjackServer) -> None:
        self.server = server
        self.config = server.config
        self.peer = "?"
        self.transport: asyncio.Transport | None = None
        self.proto: Connection | None = None
        self.loop = asyncio.get_running_loop()
        # windows being stored, in the order they are acknowledged: (window, its append; None for a W 0's)
        self.jobs: deque[tuple[Window, asyncio.Task[None] | None]] = deque()
        self.jobs_ready = asyncio.Event()
        self.decodes: set[asyncio.Task[Decoded | None]] = set()  # parts of windows in decode workers
        self.task: asyncio.Task[None] | None = None
        self.partial_timer: asyncio.TimerHandle | None = None
        self.partial_timer_for: int | None = None  # the core's partial_timer that partial_timer runs
        self.keepalive_timer: asyncio.TimerHandle | None = None
        # an ack sent counts as activity too: a window being stored is not a silent connection
        self.idle = IdleTimeout(self.config, busy=self._holds_events, expire=self._close_idle)
        self.storing = False
        self.gate = ReadGate(None)
        self.closed = False

    # --- asyncio.Protocol ---

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = typing.cast(asyncio.Transport, transport)  # uvloop's are not asyncio.Transport subclasses
        self.transport = transport
        self.gate = ReadGate(transport)
        self.peer = peer_name(transport)
        srv = self.server
        if not srv.admit(self, transport):
            self.closed = True
            return
        self.proto = Connection(Role.SERVER, srv.limits, peer=self.peer, windows=True)
        self.task = self.loop.create_task(self._store_windows(), name=f"lumberjack:{self.peer}")
        self.idle.start(self.peer)

    def data_received(self, data: bytes) -> None:
        if self.closed or self.proto is None:
            return
        self.idle.touch()
        self.proto.receive_data(data)
        self._take_windows()

    def connection_lost(self, exc: Exception | None) -> None:
        self._shutdown()

    # --- windows ---

    def _take_windows(self) -> None:
        """Store every window the core hands out; decode the C frames it asks about."""
        proto = self.proto
        if proto is None or self.closed:
            return
        try:
            while (event := proto.next_event()) is not NEED_DATA:
                if type(event) is Window:
                    self._queue(event)
                else:
                    assert type(event) is AnnouncedWindow
                    self._decode(event)
        except LogportError as e:
            self._fail(e)
            return
        self._follow_partial_timer()
        self._check_pressure()

    def _decode(self, announced: AnnouncedWindow) -> None:
        """A C frame that may hold the window its W frame announced: the C pass (or the Python reference)
        decodes it here, or decode workers do when it is big and there are some."""
        assert self.proto is not None
        srv = self.server
        cfg = self.config
        compressed = announced.compressed
        if srv.decoders is None or len(compressed.payload) < cfg.decode_offload_bytes:
            self.proto.window_decoded(announced, decode_window(
                compressed, srv.limits, announced.size, 0, 1, cfg.tag, cfg.tag_from_beat, self.peer, srv.max_body,
                time.time_ns()))
            return
        parts = srv.decoders.workers if announced.size >= SPLIT_AT_EVENTS else 1
        received_ns = time.time_ns()
        tasks = [self.loop.create_task(srv.decoders.run(decode_window, compressed, srv.limits, announced.size, part,
                                                        parts, cfg.tag, cfg.tag_from_beat, self.peer, srv.max_body,
                                                        received_ns))
                 for part in range(parts)]
        self.decodes.update(tasks)
        for task in tasks:
            task.add_done_callback(lambda done: self._decoded(announced, tasks, done))
        self._arm_keepalive(compressed.version)

    def _decoded(self, announced: AnnouncedWindow, parts: list[asyncio.Task[Decoded | None]],
                 done: asyncio.Task[Decoded | None]) -> None:
        """A part of a window back from a decode worker: once all are, the answer goes to the core."""
        self.decodes.discard(done)
        if self.closed:
            if not done.cancelled():
                done.exception()  # retrieved: the connection that wanted it is gone
            return
        if not all(part.done() for part in parts):
            return
        for part in parts:  # every part's error retrieved; the first one's is reported
            if not part.cancelled():
                part.exception()
        try:
            results = [part.result() for part in parts]  # the first part's RemoteProtocolError, or WorkerLost
        except LogportError as e:  # the peer's bad frame, or a worker lost
            self._fail(e)
            return
        except Exception as e:  # a bug: this connection is closed, the others go on
            log.exception("decoding a window failed", extra={"peer": self.peer})
            self._fail(e)
            return
        decoded = [result for result in results if result is not None]
        if len(decoded) < len(results):  # then none is: each part parsed the whole frame
            answer = None
        else:
            batches = [batch for part_batches, _, _ in decoded for batch in part_batches]
            _, last_seq, size = decoded[-1]
            answer = batches, last_seq, size
            self.server.metrics.worker_windows.inc()
        assert self.proto is not None
        self.proto.window_decoded(announced, answer)
        self._take_windows()

    def _follow_partial_timer(self) -> None:
        """Run the partial-window timer the core wants (partial_window_delay), and only that one."""
        assert self.proto is not None
        wanted = self.proto.partial_timer
        if wanted == self.partial_timer_for:
            return
        if self.partial_timer is not None:
            self.partial_timer.cancel()
            self.partial_timer = None
        self.partial_timer_for = wanted
        if wanted is not None and not self.closed:
            self.partial_timer = self.loop.call_later(self.config.partial_window_delay, self._partial_window_due,
                                                      wanted)

    def _partial_window_due(self, timer: int | None) -> None:
        self.partial_timer = None
        if self.proto is not None and not self.closed:
            self.proto.partial_window_due(timer)
            self._take_windows()

    def _queue(self, window: Window) -> None:
        """Start storing the window now (its append overlaps the next window's decoding); ack in order."""
        stored = None
        if window.frames or window.batches is not None:
            stored = self.loop.create_task(self._append(window))
            stored.add_done_callback(_retrieve)
        self.jobs.append((window, stored))
        self.jobs_ready.set()
        self._check_pressure()

    def _check_pressure(self) -> None:
        """Pause reading while PAUSE_AT_WINDOWS windows are being decoded or stored; resume at RESUME_AT_WINDOWS."""
        if self.transport is None or self.closed or self.proto is None:
            return
        budget = self.server.budget
        budget.check(self)
        budget.relieve(self)

    def held(self) -> int:
        """Windows being decoded or stored."""
        return len(self.jobs) + (self.proto.decodes_pending if self.proto is not None else 0)

    @property
    def paused(self) -> bool:
        """Paused by the windows being stored (PAUSE_AT_WINDOWS)."""
        return self.gate.holds(BUDGET)

    async def _append(self, window: Window) -> None:
        """Store a window (its tasks start in the order windows are queued, so they reach the store in it)."""
        srv = self.server
        cfg = self.config
        batches = window.batches
        if batches is None:
            batches = build_batches(window.frames, tag=cfg.tag, tag_from_beat=cfg.tag_from_beat, peer=self.peer,
                                    max_body=srv.max_body, received_ns=time.time_ns())
        counts = await srv.runtime.append_routed(cfg.segment, batches)
        for segment, count in counts.items():
            srv.metrics.events.labels(segment).inc(count)

    async def _store_windows(self) -> None:
        """Acknowledge each window, in order, once its append has returned (durable)."""
        srv = self.server
        try:
            while not self.closed:
                if not self.jobs:
                    self.jobs_ready.clear()
                    await self.jobs_ready.wait()
                    continue
                window, stored = self.jobs[0]
                if stored is not None:
                    self.storing = True
                    self._arm_keepalive(window.version)
                    try:
                        await asyncio.shield(stored)
                    finally:
                        self.storing = False
                        if self.keepalive_timer is not None and not self.decodes:
                            self.keepalive_timer.cancel()
                            self.keepalive_timer = None
                self.jobs.popleft()
                if self.closed or self.transport is None:
                    return
                self.transport.write(encode_ack(window.version, window.last_seq))
                srv.metrics.windows.inc()
                self.idle.touch()
                self._check_pressure()
        except asyncio.CancelledError:
            raise
        except LogportError as e:
            self._fail(e)
        except Exception as e:
            log.exception("storing a window failed", extra={"peer": self.peer})
            self._fail(e)

    def _arm_keepalive(self, version: int) -> None:
        """`A 0` every keepalive_interval while a window is decoded in a worker or stored (Logstash's keep-alive)."""
        if self.keepalive_timer is not None:
            return

        def keepalive() -> None:
            self.keepalive_timer = None
            if (self.storing or self.decodes) and not self.closed and self.transport is not None:
                self.transport.write(encode_ack(version, 0))
                self.server.metrics.keepalives.inc()
                self._arm_keepalive(version)

        self.keepalive_timer = self.loop.call_later(self.config.keepalive_interval, keepalive)

    # --- idle timeout, errors, shutdown ---

    def _holds_events(self) -> bool:
        return bool(self.storing or self.jobs or self.decodes or (self.proto is not None and self.proto.holds_events))

    def settled(self) -> bool:
        return self.closed or not self._holds_events()

    async def settle(self) -> None:
        """Every window received is stored and acknowledged: what a paused sender left unfinished is stored
        and acknowledged as a partial window (as after partial_window_delay) rather than waited for."""
        if self.proto is not None and not self.closed:
            self.proto.partial_window_due()
            self._take_windows()
        await wait_until(self.settled)

    def close(self) -> None:
        """Close after the acks already written are sent (abort() drops them)."""
        if self.transport is not None:
            self.transport.close()
        else:
            self._shutdown()

    def _close_idle(self) -> None:
        self.server.metrics.errors.labels("idle_timeout").inc()
        self.abort()

    def _fail(self, error: BaseException) -> None:
        if self.closed:
            return
        extra: dict[str, Any] = {"peer": self.peer}
        if isinstance(error, LimitExceeded):
            extra.update(limit=error.limit_name, value=error.value)
            reason = error.limit_name
        else:
            reason = type(error).__name__
        if isinstance(error, RemoteProtocolError):
            error.peer = self.peer
        log.warning(f"closing connection: {error}", extra=extra)
        self.server.metrics.errors.labels(reason).inc()
        self.abort()

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()
        self._shutdown()

    def _shutdown(self) -> None:
        if self.closed and self not in self.server.connections:
            return
        self.closed = True
        for timer in (self.partial_timer, self.keepalive_timer):
            if timer is not None:
                timer.cancel()
        self.partial_timer = self.keepalive_timer = None
        self.idle.cancel()
        if self.task is not None and not self.task.done():
            self.task.cancel()
        for part in list(self.decodes):
            part.cancel()
        self.server.forget(self)
