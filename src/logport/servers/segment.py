"""The segment-protocol listener: exactly-once appends into the store, tail reads, management.

One `SegmentServerProtocol` per TCP connection drives a sans-IO
`protocols.segment.Connection`. Each appending connection id gets one pipeline
task that stores its blocks in order (coalescing what queued up meanwhile) with
a `WriterCondition`, so deduplication and gap refusal happen atomically with
the data in the store's log.
"""

from __future__ import annotations

import asyncio
import ctypes
import hmac
import logging
import os
import typing
import uuid
from dataclasses import dataclass, field

from prometheus_client import Counter, Gauge

from logport import errors
from logport.config import SegmentServerConfig
from logport.names import check_segment_name
from logport.protocols import segment as sp
from logport.runtime import Runtime
from logport.servers._guard import ConnectionGuard, FailureLimiter
from logport.servers._lifecycle import (
    BUDGET,
    SETTLE_POLL,
    IdleTimeout,
    ReadGate,
    ReceiveBudget,
    TcpListener,
    peer_name,
)
from logport.servers._receivepool import ReceivePool
from logport.store import AppendResult, CheckedRead, ReadResult, SegmentStore, WriterCondition
from logport.store.verified import PIECE

log = logging.getLogger("logport.segment")

POOL_TRIM_INTERVAL = 30.0  # seconds: receive buffers not taken again in one such interval are freed at the next
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters
READ_MALLOC = ((_M_MMAP_THRESHOLD, 4 * 1024 * 1024), (_M_TRIM_THRESHOLD, 64 * 1024 * 1024))


def keep_freed_memory() -> bool:
    """Have malloc (glibc's) reuse the memory of freed reads rather than give it back to the kernel at once:
    blocks to 4 MiB come from the heap, and up to 64 MiB free at its top stay there. A read's checked bytes
    are 2 MiB pieces (store/verified.py), and glibc maps each such block afresh and unmaps it when freed
    (its threshold moves up only for a while), so the hub faulted in, zeroed and unmapped every page it
    served: a fifth of its CPU in a perf profile of catch-up (page faults, clear_page, unmap_page_range),
    none with these settings (hub CPU 2.01 -> 1.41 s for 2 GiB of 64 KiB events, load average 10). The
    append side reuses its buffers itself (_receivepool.py); a read's bytes are `bytes`, which it cannot.
    Since read replies on plain TCP go from the chunk files' mappings (no `bytes`: _send_direct), the listener
    sets this only when it speaks TLS, whose replies still are `bytes`: beside 344aad5 (this code without the
    mallopt), bench segment's catch-up took 3,567 MB per hub CPU-second with it and 3,617 without, and the
    appends 1,203-1,519 against 1,119-1,546 (load 4-5, 2026-11-26). Whether it took (False off glibc, where
    it does nothing)."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    return all(mallopt(parameter, value) == 1 for parameter, value in READ_MALLOC)


class SegmentMetrics:
    """Counters of the segment listener (`logport_segment_*`)."""

    def __init__(self, runtime: Runtime) -> None:
        r = runtime.metrics.registry
        self.connections = Gauge("logport_segment_connections", "Open segment-protocol connections", registry=r)
        self.append_blocks = Counter("logport_segment_append_blocks", "Append blocks received", registry=r)
        self.append_bytes = Counter("logport_segment_append_bytes", "Event bytes stored from append blocks",
                                    registry=r)
        self.duplicate_blocks = Counter("logport_segment_duplicate_blocks",
                                        "Retransmitted blocks acknowledged without storing", registry=r)
        self.read_bytes = Counter("logport_segment_read_bytes", "Bytes sent in SegmentRead replies", registry=r)
        self.protocol_errors = Counter("logport_segment_protocol_errors",
                                       "Connections closed for breaking the protocol", registry=r)
        self.errors = Counter("logport_segment_connection_errors",
                              "Connections refused (max_connections, handshake_failures)", ["reason"], registry=r)
        self.read_pauses = Counter("logport_segment_read_pauses",
                                   "Times a connection stopped reading because the store was behind", registry=r)
        self.receive_pool_bytes = Gauge("logport_segment_receive_pool_bytes",
                                        "Free append-block receive buffers kept for reuse", registry=r)


@dataclass
class _Writer:
    """One appending connection id on one TCP connection.

    Each block becomes its own store append as soon as it arrives, so the
    store's group commit takes every block queued meanwhile in one fsync.
    """

    connection_id: uuid.UUID
    segment: str
    previous: set[asyncio.Task[None]]  # in-flight appends of the writer this SetupAppend replaced
    ready: asyncio.Future[bool] = field(default_factory=lambda: asyncio.get_running_loop().create_future())
    inflight: set[asyncio.Task[None]] = field(default_factory=set)
    last: asyncio.Task[None] | None = None  # the append of the block before
    waiting: int = 0  # blocks whose task has not yet queued them in the store (see _append_block)
    acked: int = -1  # the highest ack level sent
    failed: bool = False  # refused a block: later blocks are dropped until the next SetupAppend


class SegmentServer(TcpListener):
    name = "segment"

    def __init__(self, runtime: Runtime) -> None:
        super().__init__()
        self.runtime = runtime
        self.config: SegmentServerConfig = runtime.config.segment
        self.store: SegmentStore = runtime.store
        self.metrics: SegmentMetrics = runtime.metrics.once(SegmentMetrics, lambda: SegmentMetrics(runtime))
        self.hub_id = runtime.hub_id  # answers GetHubInfo
        self.limits = sp.Limits(self.config.max_message_size, self.config.max_event_size,
                                self.config.max_block_size)
        self.receive_pool = ReceivePool(self.config.receive_pool_bytes)
        # append-block bytes received and not yet answered by the store: max_pending_bytes per connection,
        # max_total_pending_bytes in all
        self.budget = ReceiveBudget(self.config.max_pending_bytes, self.config.max_total_pending_bytes,
                                    pauses=self.metrics.read_pauses)
        self.metrics.receive_pool_bytes.set_function(lambda: self.receive_pool.free_bytes)
        self.connections: set[SegmentServerProtocol] = set()
        self.guard = ConnectionGuard(log, max_connections=self.config.max_connections,
                                     max_per_peer=self.config.max_connections_per_peer)
        self.auth_failures = FailureLimiter(log, what="segment authentication")  # slows down token guessing
        self._server: asyncio.Server | None = None
        self._trim_task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        if self.config.tls.cert:  # only TLS connections' read replies are `bytes` (see keep_freed_memory)
            keep_freed_memory()
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: SegmentServerProtocol(self), self.config.bind, self.config.port,
            reuse_address=True, **self.tls_options(self.config.tls),
        )
        self._listening = self._server
        if self.config.receive_pool_bytes:
            self._trim_task = loop.create_task(self._trim_pool())
        log.info("segment listener", extra={"bind": self.config.bind, "port": self.port})

    def config_changed(self) -> None:
        super().config_changed()
        cfg = self.config  # new connections take the new limits; established ones keep theirs
        self.limits = sp.Limits(cfg.max_message_size, cfg.max_event_size, cfg.max_block_size)
        self.budget.set_limits(cfg.max_pending_bytes, cfg.max_total_pending_bytes)

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    async def _trim_pool(self) -> None:
        while True:
            await asyncio.sleep(POOL_TRIM_INTERVAL)
            self.receive_pool.trim()

    async def close(self) -> None:
        if self._trim_task is not None:
            self._trim_task.cancel()
        if self._server is not None:
            self._server.close()
        for conn in list(self.connections):
            conn.close()
        for conn in list(self.connections):
            await conn.finish()
        if self._server is not None:
            await self._server.wait_closed()


async def start(runtime: Runtime) -> SegmentServer:
    server = SegmentServer(runtime)
    await server.start()
    return server


class SegmentServerProtocol(asyncio.BufferedProtocol):
    """Receives into the connection's buffers (an append block's events land in place, stored with no copy)."""

    def __init__(self, server: SegmentServer) -> None:
        self.server = server
        self.store = server.store
        self.config = server.config
        self.conn = sp.Connection(sp.Role.SERVER, server.limits, allocate=server.receive_pool.take)
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self.writers: dict[uuid.UUID, _Writer] = {}
        self.tasks: set[asyncio.Task[None]] = set()
        self.pending_bytes = 0
        self.gate = ReadGate(None)
        self.authenticated = not server.config.token
        self.idle = IdleTimeout(self.config, busy=self.busy, expire=self.close)
        self._can_write = asyncio.Event()
        self._can_write.set()
        self._closing = False
        # requests other than reads and append blocks are answered one at a time, in order
        self._control: asyncio.Queue[sp.Message | _Writer] = asyncio.Queue()
        self._control_task: asyncio.Task[None] | None = None
        self._setups: set[asyncio.Future[bool]] = set()  # the ready of writers whose SetupAppend is unanswered
        # Read replies on a plain TCP connection are written to its socket by this listener, not through the
        # transport (see _send_direct): one at a time, and what else is replied meanwhile waits for it.
        self._socket_fd = -1  # the transport's socket, when read replies go to it directly
        self._sending = asyncio.Lock()
        self._held: list[bytes] | None = None  # replies made while a read reply is being sent directly
        self._socket_full = False  # a direct read reply waits for the socket: the peer is not reading

    # --- transport callbacks ---

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = typing.cast(asyncio.Transport, transport)  # uvloop's are not asyncio.Transport subclasses
        self.transport = transport
        self.gate = ReadGate(transport)
        self.peer = peer_name(transport)
        server = self.server
        if not server.admit(self, transport, server.auth_failures if server.config.token else None):
            return
        self.idle.start(self.peer)
        sock = transport.get_extra_info("socket")
        if sock is not None and transport.get_extra_info("ssl_object") is None:
            self._socket_fd = sock.fileno()
        self._control_task = asyncio.get_running_loop().create_task(self._run_control())
        self._control_task.add_done_callback(self._control_done)

    def connection_lost(self, exc: Exception | None) -> None:
        self._closing = True
        self._can_write.set()
        self.idle.cancel()
        self.server.forget(self)
        if self._control_task is not None:
            self._control_task.cancel()
        for task in list(self.tasks):
            task.cancel()  # reads; append pipelines finish what they hold

    def pause_writing(self) -> None:
        self._can_write.clear()

    def resume_writing(self) -> None:
        self._can_write.set()

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.conn.get_buffer(sizehint)

    def buffer_updated(self, nbytes: int) -> None:
        self.idle.touch()
        if self._closing:
            return
        conn = self.conn
        try:
            conn.buffer_updated(nbytes)
            while True:
                event = conn.next_event()
                if event is sp.NEED_DATA:
                    break
                self._dispatch(event)  # type: ignore[arg-type]
                if self._closing:
                    return
        except errors.RemoteProtocolError as e:
            e.peer = self.peer
            self._protocol_error(e)

    def eof_received(self) -> bool | None:
        try:
            self.conn.receive_data(b"")
            self.conn.next_event()
        except errors.RemoteProtocolError as e:
            e.peer = self.peer
            log.info("connection closed mid-message", extra={"peer": self.peer, "error": str(e)})
        return None

    def _protocol_error(self, e: errors.RemoteProtocolError) -> None:
        self.server.metrics.protocol_errors.inc()
        if isinstance(e, errors.LimitExceeded):
            log.warning("message too large", extra={"peer": self.peer, "limit": e.limit_name, "value": e.value})
            self.reply(sp.MessageTooLarge(e.what, e.value, e.limit_name, e.limit))
        else:
            log.warning("protocol error", extra={"peer": self.peer, "error": e.message})
            self.reply(sp.ProtocolViolation(e.message))
        self.close()

    def close(self) -> None:
        self._closing = True
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()

    def busy(self) -> bool:
        return bool(self.tasks) or not self._control.empty() or any(w.inflight for w in self.writers.values())

    async def settle(self) -> None:
        """Every append block received is stored and acknowledged, every queued request answered."""
        while True:
            appends = [t for w in self.writers.values() for t in w.inflight]
            if appends:
                await asyncio.gather(*appends, return_exceptions=True)
            elif self._control.empty() or self._closing:
                return
            else:
                await asyncio.sleep(SETTLE_POLL)

    async def finish(self) -> None:
        """Wait for the append pipelines (so nothing queued is lost), cancel the rest.

        The control task too: a peer that does not read keeps the transport (and so
        connection_lost) from closing, and blocks waiting on a SetupAppend would wait for it.
        """
        if self._control_task is not None:
            self._control_task.cancel()
        for task in list(self.tasks):
            task.cancel()
        appends = [t for w in self.writers.values() for t in w.inflight]
        if appends:
            await asyncio.gather(*appends, return_exceptions=True)

    # --- replies ---

    def reply(self, message: sp.Message) -> None:
        if self.transport is not None and not self.transport.is_closing():
            data = self._encode(message)
            if data is None:
                return
            if self._held is not None:  # a read reply is going out in pieces: after it
                self._held.append(data)
            else:
                self.transport.write(data)

    def _encode(self, message: sp.Message) -> bytes | None:
        """The reply's bytes; None, with the connection closed, if it cannot be encoded (a bug: the
        client would wait for it forever)."""
        try:
            return self.conn.send(message)
        except errors.LocalProtocolError as e:
            log.error("reply cannot be encoded, closing the connection",
                      extra={"peer": self.peer, "reply": type(message).__name__, "error": str(e)})
            self.close()
            return None

    async def _reply_read(self, segment: str, offset: int, at_tail: bool, end_of_segment: bool,
                          data: bytes | memoryview, stored: CheckedRead | None = None) -> None:
        async with self._sending:
            transport = self.transport
            if self._socket_fd < 0 or not data:
                await self._can_write.wait()
            if transport is None or transport.is_closing():
                raise ConnectionError("connection closed")
            # header and fields, then the data as it is: no copy of a 2 MiB body
            head = self._encode(sp.SegmentRead.make(segment, offset, at_tail, end_of_segment, b""))
            if head is None:
                raise ConnectionError("connection closed")
            type_code, length = sp.HEADER.unpack_from(head, 0)
            head = sp.HEADER.pack(type_code, length + len(data)) + head[sp.HEADER_SIZE :]
            if self._socket_fd >= 0 and data:
                await self._send_direct(transport, head, data, stored)
            elif data:
                transport.writelines([head, data])  # one writev for both
            else:
                transport.write(head)
            self.server.metrics.read_bytes.inc(len(data))

    async def _send_direct(self, transport: asyncio.Transport, head: bytes, data: bytes | memoryview,
                           stored: CheckedRead | None) -> None:
        """Write a read reply to the socket here, as the socket takes it, rather than hand it to the
        transport: `data` may be a view of a chunk file's mapping (store/verified.py `checked_view`), which
        is the segment's bytes only while the segment still holds them (`stored`), checked before each
        write, so no such view may wait in a transport's buffer. The kernel copies each byte once, from the
        page cache into the socket. The transport's buffer is empty first (what it holds goes before), and
        replies made meanwhile (acks, errors) are held and written after this one."""
        await self._drained(transport)
        self._held = []
        parts = [memoryview(head), memoryview(data)]
        try:
            while parts:
                if self._closing or transport.is_closing():
                    raise ConnectionError("connection closed")
                if stored is not None and not stored.stored():  # retention dropped the chunk mid-reply
                    log.warning("segment truncated while a read reply from it was being sent; closing the "
                                "connection", extra={"peer": self.peer, "offset": stored.offset})
                    self.close()
                    raise ConnectionError("segment truncated under a read reply")
                try:
                    sent = os.writev(self._socket_fd, parts)
                except BlockingIOError:
                    await self._writable()
                    continue
                except OSError as e:
                    self.close()
                    raise ConnectionError(str(e)) from e
                while parts and sent >= len(parts[0]):
                    sent -= len(parts.pop(0))
                if sent:
                    parts[0] = parts[0][sent:]
        finally:
            held, self._held = self._held, None
            if held and not transport.is_closing():
                transport.writelines(held)

    async def _drained(self, transport: asyncio.Transport) -> None:
        """Until the transport has written all it holds: its write limits are 0 meanwhile, so that it
        pauses the protocol at once and resumes it only once empty."""
        while transport.get_write_buffer_size() and not transport.is_closing():
            transport.set_write_buffer_limits(high=0, low=0)
            try:
                await self._can_write.wait()
            finally:
                transport.set_write_buffer_limits()

    async def _writable(self) -> None:
        """Until the socket takes more. The loop refuses to watch a transport's own descriptor, so it
        watches a duplicate of it (the same socket) for the time of the wait."""
        loop = asyncio.get_running_loop()
        fd = os.dup(self._socket_fd)
        ready: asyncio.Future[None] = loop.create_future()

        def wake() -> None:
            if not ready.done():
                ready.set_result(None)

        loop.add_writer(fd, wake)
        self._socket_full = True
        try:
            await ready
        finally:
            self._socket_full = False
            loop.remove_writer(fd)
            os.close(fd)

    def _spawn(self, coro) -> None:  # type: ignore[no-untyped-def]
        task = asyncio.get_running_loop().create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self.tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("segment request failed", exc_info=task.exception(), extra={"peer": self.peer})

    def _control_done(self, task: asyncio.Task[None]) -> None:
        """Without the control task no SetupAppend is answered: the blocks waiting on one are dropped
        (else they, and the listener's close, wait forever), and a failed one closes the connection.

        A done callback, not a finally: it also runs for a task cancelled before it started.
        """
        for ready in list(self._setups):
            ready.set_result(False)
        if not task.cancelled() and task.exception() is not None:
            log.error("segment control task failed, closing the connection", exc_info=task.exception(),
                      extra={"peer": self.peer})
            self.close()

    # --- dispatch ---

    def _dispatch(self, event: sp.Message | sp.AppendBlock) -> None:
        if isinstance(event, sp.AppendBlock):
            self._append_block(event)
            return
        if isinstance(event, sp.KeepAlive):
            # request/reply in the proposal, and Pravega's server (AppendProcessor.keepAlive) sends it back as it
            # came, at once, before authentication too. Not while the peer leaves what it was sent unread: a flood
            # of them would queue without bound, and those queued bytes answer for the connection anyway
            if self._can_write.is_set() and not self._socket_full:
                self.reply(event)
            return
        if not self.authenticated:
            if isinstance(event, sp.Authenticate) and hmac.compare_digest(
                event.token.encode("utf-8", "surrogatepass"), self.config.token.encode()
            ):
                self.authenticated = True
                self.reply(sp.Authenticated())
                return
            reason = "wrong token" if isinstance(event, sp.Authenticate) else "authentication required"
            self.server.auth_failures.record_failure(self.peer)
            log.warning("authentication failed", extra={"peer": self.peer, "reason": reason})
            self.reply(sp.AuthenticationFailed(reason))
            self.close()
            return
        if isinstance(event, sp.ReadSegment):
            limit = self.config.max_reads_per_connection
            if len(self.tasks) >= limit:
                raise sp.SegmentProtocolError(f"{len(self.tasks) + 1} outstanding ReadSegment requests exceed"
                                              f" max_reads_per_connection {limit}")
            self._spawn(self._read(event))  # concurrent: a read may wait at the tail
        elif isinstance(event, sp.SetupAppend):
            limit = self.config.max_writers_per_connection
            if event.connection_id not in self.writers and len(self.writers) >= limit:
                raise sp.SegmentProtocolError(f"{len(self.writers) + 1} connection ids exceed"
                                              f" max_writers_per_connection {limit}")
            self._control.put_nowait(self._setup_append(event))
        else:
            self._control.put_nowait(event)

    async def _run_control(self) -> None:
        while True:
            request = await self._control.get()
            if isinstance(request, _Writer):
                await self._setup_writer(request)
            elif isinstance(request, sp.Authenticate):
                self.reply(sp.Authenticated())
            elif isinstance(request, sp.GetSegmentInfo):
                self._info(request.segment)
            elif isinstance(request, sp.ListSegments):
                self.reply(sp.SegmentList(tuple(self.store.names())))
            elif isinstance(request, sp.GetHubInfo):
                self.reply(sp.HubInfo(self.server.hub_id))
            elif isinstance(request, sp.CreateSegment | sp.SealSegment | sp.TruncateSegment):
                await self._manage(request)
            else:  # the sans-IO layer lets through only requests; this is a bug if reached
                raise errors.LocalProtocolError(f"no handler for {type(request).__name__}")

    def _error_reply(self, segment: str, e: errors.StoreError) -> sp.Message:
        """The reply to a store error; the name field echoes the request (it fit in one String, so it
        does again), the message quotes it briefly (in full it need not fit)."""
        if isinstance(e, errors.NoSuchSegment):
            return sp.NoSuchSegment(segment)
        if isinstance(e, errors.SegmentSealed):
            return sp.SegmentIsSealed(segment)
        if isinstance(e, errors.OffsetTruncated):
            return sp.SegmentIsTruncated(segment, e.start_offset)
        message = str(e).replace(repr(segment), errors.brief(segment))
        if isinstance(e, errors.InvalidSegmentName):
            return sp.InvalidSegmentName(segment, message)
        return sp.OperationFailed(segment, message)

    def _info(self, segment: str) -> None:
        try:
            info = self.store.info(segment)
        except errors.StoreError as e:
            self.reply(self._error_reply(segment, e))
            return
        self.reply(sp.SegmentInfoReply(segment, info.start_offset, info.end_offset, info.sealed))

    async def _manage(self, request: sp.CreateSegment | sp.SealSegment | sp.TruncateSegment) -> None:
        segment = request.segment
        try:
            check_segment_name(segment)
            if isinstance(request, sp.CreateSegment):
                existed = self.store.exists(segment)
                await self.store.create(segment)
                self.reply(sp.SegmentCreated(segment, not existed))
            elif isinstance(request, sp.SealSegment):
                info = await self.store.seal(segment)
                self.reply(sp.SegmentSealed(segment, info.end_offset))
            else:
                info = await self.store.truncate(segment, request.offset)
                self.reply(sp.SegmentTruncated(segment, info.start_offset))
        except errors.StoreError as e:
            self.reply(self._error_reply(segment, e))

    # --- reads ---

    async def _read(self, request: sp.ReadSegment) -> None:
        cfg = self.config
        segment = request.segment
        loop = asyncio.get_running_loop()
        wait = cfg.read_wait if request.wait_ms is None else request.wait_ms / 1000.0
        deadline = loop.time() + wait
        offset = request.offset
        remaining = request.suggested_length
        sent = False
        try:
            check_segment_name(segment)
            # _reply_read writes the data after the encoded fields, past encode's size check: the data of one
            # reply is capped so that its body stays within the message size limit whatever read_reply_max says
            fields = len(sp.encode(sp.SegmentRead(segment, offset, 0, b""))) - sp.HEADER_SIZE
            reply_max = min(cfg.read_reply_max, self.server.limits.max_message_size - fields)
            while True:
                n = min(remaining, reply_max)
                if reply_max <= PIECE:  # a reply ends where the store's pieces do when it would cross one's end:
                    # what it sends is then a piece the store holds as it is (store/verified.py), not a copy
                    n = min(n, PIECE - offset % PIECE)
                if n == 0:  # a zero-length read: answered at once, its offset checked as any read's
                    empty = await self.store.read(segment, offset, 0)
                    await self._reply_read(segment, offset, empty.at_tail, empty.end_of_segment, b"")
                    return
                budget = 0.0 if sent else max(0.0, deadline - loop.time())
                if self._socket_fd >= 0:
                    result: ReadResult | CheckedRead = await self.store.read_checked(
                        segment, offset, n, wait=min(budget, cfg.keepalive_interval))
                else:
                    result = await self.store.read(segment, offset, n, wait=min(budget, cfg.keepalive_interval))
                if result.data:
                    await self._reply_read(segment, offset, result.at_tail, result.end_of_segment, result.data,
                                           result if isinstance(result, CheckedRead) else None)
                    sent = True
                    offset += len(result.data)
                    remaining -= len(result.data)
                    if remaining == 0 or result.at_tail:
                        return
                    continue
                if sent or result.end_of_segment or loop.time() >= deadline or self._closing:
                    await self._reply_read(segment, offset, True, result.end_of_segment, b"")
                    return
                await self._can_write.wait()
                self.reply(sp.KeepAlive())  # still waiting at the tail: the reader must not time out
        except errors.StoreError as e:
            self.reply(self._error_reply(segment, e))
        except ConnectionError:
            pass

    # --- appends ---

    def _setup_append(self, request: sp.SetupAppend) -> _Writer:
        """Blocks that follow at once wait on the new writer; the control task answers the setup."""
        old = self.writers.get(request.connection_id)
        writer = _Writer(request.connection_id, request.segment, set(old.inflight) if old else set())
        self.writers[request.connection_id] = writer
        self._setups.add(writer.ready)
        writer.ready.add_done_callback(self._setups.discard)
        return writer

    async def _setup_writer(self, writer: _Writer) -> None:
        if writer.previous:  # their appends move the ack level
            await asyncio.gather(*writer.previous, return_exceptions=True)
        segment = writer.segment
        try:
            check_segment_name(segment)
            if not self.store.exists(segment):
                if not self.config.auto_create:
                    raise errors.NoSuchSegment(segment)
                await self.store.create(segment)
            if self.store.info(segment).sealed:
                raise errors.SegmentSealed(segment)
        except errors.StoreError as e:
            writer.failed = True
            self.reply(self._error_reply(segment, e))
            writer.ready.set_result(False)
            return
        self.reply(sp.AppendSetup(segment, writer.connection_id,
                                  self.store.writer_offset(segment, writer.connection_id.bytes)))
        writer.ready.set_result(True)

    def _append_block(self, block: sp.AppendBlock) -> None:
        writer = self.writers.get(block.connection_id)
        if writer is None or not self.authenticated:
            self._protocol_error(errors.RemoteProtocolError(
                f"append block for connection id {block.connection_id} without SetupAppend", peer=self.peer))
            return
        self.server.metrics.append_blocks.inc()
        if writer.failed:
            return
        nbytes = len(block.data)
        self.pending_bytes += nbytes
        server = self.server
        server.budget.held += nbytes
        server.budget.check(self)  # back-pressure: the store is behind this connection, or all of them
        # Queued in the store now when the writer is set up and every block before is queued: a task
        # starts on the loop's next turn, which comes late while it reads many sockets (8 appenders of
        # 64 KiB events: 618-801 -> 808-883 MB/s). Otherwise the task queues it; tasks start in creation
        # order, so either way the blocks reach the store's queue in order.
        ready = writer.ready
        queued = None
        if not writer.waiting and ready.done() and not ready.cancelled() and ready.result() and not writer.failed:
            queued = self._submit(writer.segment, writer.connection_id.bytes, block.start_offset,
                                  block.end_offset, block.data)
        else:
            writer.waiting += 1
        task = asyncio.get_running_loop().create_task(self._store_block(writer, block, writer.last, queued))
        writer.last = task
        writer.inflight.add(task)
        task.add_done_callback(writer.inflight.discard)

    def _release(self, nbytes: int) -> None:
        self.pending_bytes -= nbytes
        budget = self.server.budget
        budget.held -= nbytes
        budget.relieve(self)

    def held(self) -> int:
        return self.pending_bytes

    @property
    def reading_paused(self) -> bool:
        """Paused by max_pending_bytes or max_total_pending_bytes."""
        return self.gate.holds(BUDGET)

    async def _store_block(self, writer: _Writer, block: sp.AppendBlock, before: asyncio.Task[None] | None,
                           queued: asyncio.Future[AppendResult] | None) -> None:
        await self._store_and_ack(writer, block, before, queued)
        # Reached once the store has answered every append of the block, after which it never reads
        # them again; not when cancelled (the hub stopping), as the store may still be writing it.
        self.server.receive_pool.give(block.data)

    async def _store_and_ack(self, writer: _Writer, block: sp.AppendBlock, before: asyncio.Task[None] | None,
                             queued: asyncio.Future[AppendResult] | None) -> None:
        segment = writer.segment
        key = writer.connection_id.bytes
        nbytes = len(block.data)
        try:
            if queued is None:
                try:
                    if not await writer.ready or writer.failed:
                        return
                    queued = self._submit(segment, key, block.start_offset, block.end_offset, block.data)
                finally:
                    writer.waiting -= 1
            ack, duplicate = await self._store_exactly_once(
                segment, key, block.start_offset, block.end_offset, block.data, before, queued)
        except errors.WriterOffsetMismatch as e:
            if not writer.failed:
                writer.failed = True
                log.warning("block does not continue the connection's offset",
                            extra={"peer": self.peer, "segment": segment, "ack_level": e.expected, "value": e.got})
                self.reply(sp.WrongConnectionOffset(writer.connection_id, e.expected, e.got))
            return
        except errors.StoreError as e:
            if not writer.failed:
                writer.failed = True
                log.warning("append refused", extra={"peer": self.peer, "segment": segment, "error": str(e)})
                self.reply(self._error_reply(segment, e))
            return
        finally:
            self._release(nbytes)
        if duplicate:
            self.server.metrics.duplicate_blocks.inc()
        else:
            self.server.metrics.append_bytes.inc(nbytes)
        # blocks may finish out of order after a retry; the ack level never goes back
        writer.acked = max(writer.acked, ack)
        self.reply(sp.DataAppended(writer.connection_id, writer.acked))

    def _submit(self, segment: str, key: bytes, start: int, end: int,
                data: bytes | bytearray | memoryview) -> asyncio.Future[AppendResult]:
        """Queue the events of [start, end) of a connection in the store; a refusal (no such segment,
        sealed, closing) comes back through the future, as a failed write does."""
        try:
            # a received block is not changed until the store has answered: it is written as it is
            return self.store.submit_framed(segment, data, writer=WriterCondition(key, end, start))
        except errors.StoreError as e:
            future: asyncio.Future[AppendResult] = asyncio.get_running_loop().create_future()
            future.set_exception(e)
            return future

    async def _store_exactly_once(self, segment: str, key: bytes, start: int, end: int,
                                  data: bytes | bytearray | memoryview, before: asyncio.Task[None] | None,
                                  queued: asyncio.Future[AppendResult]) -> tuple[int, bool]:
        """The (ack level, whether all were duplicates) of the events of [start, end) of a connection,
        `queued` in the store already.

        A retransmission may overlap what is stored (the server stored a block whose
        ack was lost, and the client re-cut its blocks): the stored prefix is cut
        off at its event boundary and the rest appended. A block that found the
        store short of its start while the block before it was still in flight
        (the store's queue was full and took them out of order) tries again after it.
        """
        while True:
            try:
                result = await queued
            except errors.WriterOffsetMismatch as e:
                stored = e.expected
                if start < stored < end and sp.is_message_boundary(data, stored - start):
                    data = data[stored - start :]
                    start = stored
                elif stored < start and before is not None:
                    await asyncio.gather(before, return_exceptions=True)
                    before = None
                else:
                    raise
                queued = self._submit(segment, key, start, end, data)
                continue
            assert result.writer_offset is not None
            return result.writer_offset, result.duplicate
