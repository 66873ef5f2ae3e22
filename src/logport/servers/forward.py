"""Fluentd Forward listener: TCP (optionally TLS) plus UDP heartbeats on one port, acks after the store.

Each message becomes one stored PackedForward batch (or several, when it is
larger than store.max_frame_size); `{"ack": chunk}` goes out only after
`store.append` returned. A chunk id is an exactly-once writer key
(`fwd:` + chunk), so a retried chunk is acked again but not stored twice,
also across restarts, for as long as the store keeps that id
(store.writer_state_limit ids per segment: the dedup window). The key is
shared by every client: a chunk whose id another client already used on the
segment is acked and dropped, so ids must be unique across clients (Fluent
Bit's are a hash of the chunk's entries: byte-identical chunks share one).
"""

from __future__ import annotations

import asyncio
import base64
import collections
import hashlib
import logging
import socket
import typing
from typing import Any

from prometheus_client import Counter, Gauge

from logport.batch import batch_head, pack_option
from logport.errors import LimitExceeded, ProtocolError, StoreError, StoreLimitExceeded
from logport.protocols import forward as fp
from logport.runtime import Runtime
from logport.servers._guard import ConnectionGuard, FailureLimiter
from logport.servers._lifecycle import BUDGET, IdleTimeout, ReadGate, TcpListener, peer_name
from logport.store import AppendResult, WriterCondition
from logport.store.appends import Buffer
from logport.store.frames import EVENT as _EVENT
from logport.store.frames import HEADER as _FRAME_HEADER

log = logging.getLogger("logport.forward")

_READ_PAUSED_BELOW = 0.5  # resume reading once in-flight bytes fall under half the limit
_BATCH_OVERHEAD = 512  # room for tag and option next to the entries in one stored frame


class ForwardMetrics:
    """Counters of the Forward listener (`logport_forward_*`)."""

    def __init__(self, runtime: Runtime) -> None:
        r = runtime.metrics.registry
        self.connections = Gauge("logport_forward_connections", "Open Forward connections", registry=r)
        self.events = Counter("logport_forward_events", "Events stored", ["mode"], registry=r)
        self.invalid_events = Counter("logport_forward_invalid_events", "Invalid entries skipped", registry=r)
        self.batches = Counter("logport_forward_batches", "Messages stored", registry=r)
        self.bytes = Counter("logport_forward_bytes", "Entry bytes stored", registry=r)
        self.duplicates = Counter("logport_forward_duplicate_chunks",
                                  "Retried chunks acknowledged again and not stored", registry=r)
        self.errors = Counter("logport_forward_errors", "Connections closed on an error", ["reason"], registry=r)
        self.heartbeats = Counter("logport_forward_heartbeats", "Heartbeats answered", ["transport"], registry=r)
        self.read_pauses = Counter("logport_forward_read_pauses",
                                   "Times a connection stopped reading because the store was behind", registry=r)
        self._events_of: dict[fp.Mode, Any] = {}

    def events_of(self, mode: fp.Mode) -> Any:
        """`events` of one mode (labels() looks the child up under a lock at every call)."""
        child = self._events_of.get(mode)
        if child is None:
            child = self._events_of[mode] = self.events.labels(mode.value)
        return child


class ForwardServer(TcpListener):
    """The running listener (the hub's Service)."""

    name = "forward"

    def __init__(self, runtime: Runtime) -> None:
        super().__init__()
        self.runtime = runtime
        self.config = runtime.config.forward
        self.hostname = self.config.self_hostname or runtime.hostname
        self.metrics = runtime.metrics.once(ForwardMetrics, lambda: ForwardMetrics(runtime))
        self.connections: set[ForwardConnection] = set()
        self.inflight = 0  # bytes received and not yet stored, over all connections
        self.paused: set[ForwardConnection] = set()
        self.guard = ConnectionGuard(log, max_connections=self.config.max_connections,
                                     max_per_peer=self.config.max_connections_per_peer)
        self.handshake_failures = FailureLimiter(log, what="forward handshake")  # slows down key guessing
        # (nonce, auth salt) for every HELO instead of random ones: only for replaying recorded handshakes
        self.fixed_nonce: tuple[bytes, bytes] | None = None
        self._tcp: asyncio.AbstractServer | None = None
        self._udp: asyncio.DatagramTransport | None = None
        self.port = 0

    async def start(self) -> None:
        cfg = self.config
        loop = asyncio.get_running_loop()
        options = self.tls_options(cfg.tls)
        self._tcp = await loop.create_server(lambda: ForwardConnection(self), cfg.bind, cfg.port,
                                             backlog=1024, reuse_address=True, **options)
        self._listening = self._tcp
        self.port = self._tcp.sockets[0].getsockname()[1]
        self._udp, _ = await loop.create_datagram_endpoint(lambda: HeartbeatProtocol(self),
                                                           local_addr=(cfg.bind, self.port))
        log.info("forward listening", extra={"bind": cfg.bind, "port": self.port, "tls": options["ssl"] is not None})

    def config_changed(self) -> None:
        super().config_changed()
        self.hostname = self.config.self_hostname or self.runtime.hostname

    def stop_accepting(self) -> None:
        super().stop_accepting()
        if self._udp is not None:
            self._udp.close()

    async def close(self) -> None:
        if self._tcp is not None:
            self._tcp.close()
        if self._udp is not None:
            self._udp.close()
        for conn in list(self.connections):
            conn.close()
        pending: list[asyncio.Future[Any]] = [f for c in self.connections for f in c.pending]
        if pending:
            await asyncio.wait(pending, timeout=5)
        if self._tcp is not None:
            await self._tcp.wait_closed()


class HeartbeatProtocol(asyncio.DatagramProtocol):
    """UDP heartbeat: any short datagram is answered with one 0x00 byte."""

    def __init__(self, server: ForwardServer) -> None:
        self.server = server
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        if len(data) <= 16 and self.transport is not None:  # never a reflector for large packets
            self.transport.sendto(b"\x00", addr)
            self.server.metrics.heartbeats.labels("udp").inc()


class ForwardConnection(asyncio.BufferedProtocol):
    """One client: its bytes are read into the protocol core's receive space (no copy into a bytes object per
    read, no join of a message that came in several reads), each batch is handed to the store as a view of it
    and released once its append is answered."""

    def __init__(self, server: ForwardServer) -> None:
        self.server = server
        self.config = server.config
        self.transport: asyncio.Transport | None = None
        self.peer = ""
        self.conn: fp.ServerConnection | None = None
        self.runtime = server.runtime
        self.pending: set[asyncio.Future[AppendResult]] = set()  # appends handed to the store, not yet answered
        self._order: collections.deque[asyncio.Future[AppendResult]] = collections.deque()  # pending, in order
        self._acks: list[str | bytes] = []  # chunk ids answered in this loop turn, acked by _flush
        self._counted: list[tuple[fp.Mode, int, int]] = []  # (mode, events, bytes) stored in this loop turn
        self._flush_pending = False
        self.inflight = 0
        self.gate = ReadGate(None)
        self.closing = False
        self.eof = False
        self.storing = 0  # batches handed to the store and not yet answered
        self.idle = IdleTimeout(self.config, busy=lambda: bool(self.storing), expire=self._close_idle)
        self._hostname: asyncio.Future[str] | None = None  # the peer name lookup, held while it runs
        self._extra: dict[str, str] = {}

    # --- lifecycle ---

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = typing.cast(asyncio.Transport, transport)  # uvloop's are not asyncio.Transport subclasses
        self.transport = transport
        self.gate = ReadGate(transport)
        addr = transport.get_extra_info("peername") or ("?", 0)
        self.peer = peer_name(transport)
        server = self.server
        if not server.guard.admit(self.peer):
            server.metrics.errors.labels("max_connections").inc()
            transport.abort()
            return
        if self.config.shared_key and not server.handshake_failures.allow(self.peer):
            server.guard.release(self.peer)
            server.metrics.errors.labels("handshake_failures").inc()
            transport.abort()
            return
        server.connections.add(self)
        server.metrics.connections.inc()
        server.admit_paused(self.gate)
        nonce, salt = server.fixed_nonce or (None, None)
        self.conn = fp.ServerConnection(
            peer=self.peer, shared_key=self.config.shared_key, users=self.config.users, hostname=server.hostname,
            keepalive=self.config.keepalive, chunk_size_limit=self.config.chunk_size_limit,
            decompression_size_limit=self.config.decompression_size_limit, nonce=nonce, auth_salt=salt)
        if self.config.source_address_key:
            self._extra[self.config.source_address_key] = str(addr[0])
        if self.config.source_hostname_key:
            # every record gets the peer's name: read nothing until it is known, so that no batch waits
            # for it (one that waited could be stored after a batch that came later)
            self.gate.hold("resolve")
            self._hostname = asyncio.ensure_future(_resolve(str(addr[0]), int(addr[1])))
            self._hostname.add_done_callback(self._hostname_known)
        helo = self.conn.initiate()
        if helo:
            transport.write(helo)
        self.idle.start(self.peer)

    def _hostname_known(self, resolved: asyncio.Future[str]) -> None:
        if resolved.cancelled() or self.closing or self.transport is None:
            return
        try:
            name = resolved.result()
        except Exception:  # _resolve answers the address when the lookup fails: this is a bug
            log.exception("resolving the peer's name failed", extra={"peer": self.peer})
            name = self.peer.rpartition(":")[0]
        self._extra[self.config.source_hostname_key] = name
        self.gate.release("resolve")

    def connection_lost(self, exc: Exception | None) -> None:
        self.closing = True
        self.server.paused.discard(self)
        if self in self.server.connections:
            self.server.connections.discard(self)
            self.server.guard.release(self.peer)
            self.server.metrics.connections.dec()
        self.idle.cancel()

    def close(self) -> None:
        if not self.closing and self.transport is not None:
            self.closing = True
            self.transport.close()

    async def settle(self) -> None:
        """Every batch received is stored and its ack written (or the connection failed)."""
        while self.pending or self._flush_pending:
            if self.pending:
                await asyncio.wait(set(self.pending))
            else:
                await asyncio.sleep(0)  # the acks of the last ones go out in this loop turn

    def _close_idle(self) -> None:
        self.server.metrics.errors.labels("idle_timeout").inc()
        self.close()

    # --- receiving ---

    def get_buffer(self, sizehint: int) -> memoryview:
        if self.conn is None:  # refused as it connected: what still comes is dropped
            return memoryview(bytearray(max(sizehint, 1 << 16)))
        return self.conn.get_buffer(sizehint)

    def buffer_updated(self, nbytes: int) -> None:
        if self.conn is None or self.closing:
            return
        self.idle.touch()
        conn = self.conn
        try:
            conn.buffer_updated(nbytes)
            while True:
                event = conn.next_event()
                if event is fp.NEED_DATA:
                    break
                if isinstance(event, fp.EventBatch):
                    self._accept(event)
                elif isinstance(event, fp.Ping):
                    self._answer(event)
                    if self.closing:
                        return
                # a Heartbeat needs nothing: the bytes already reset the idle timer
        except ProtocolError as e:
            self._fail(e)

    def eof_received(self) -> bool | None:
        if self.conn is not None and self.conn.buffered:
            log.warning("connection closed in the middle of a message",
                        extra={"peer": self.peer, "value": self.conn.buffered})
            self.server.metrics.errors.labels("truncated").inc()
        self.eof = True
        if self.storing or self._flush_pending:
            return True  # half-closed: the acks of what is still being stored go out, then we close
        return False

    def _fail(self, e: ProtocolError) -> None:
        if isinstance(e, LimitExceeded):
            log.warning(str(e), extra={"peer": self.peer, "limit": e.limit_name, "value": e.value})
            self.server.metrics.errors.labels(e.limit_name).inc()
        else:
            log.warning("protocol error: %s", e.message, extra={"peer": self.peer})
            self.server.metrics.errors.labels(type(e).__name__).inc()
        self.close()

    def _answer(self, ping: fp.Ping) -> None:
        assert self.conn is not None and self.transport is not None
        pong = self.conn.answer(ping)
        self.transport.write(self.conn.send(pong))
        if not pong.auth_result:
            reason = f"{pong.reason}: {ping.error}" if ping.error else pong.reason
            log.warning("handshake refused: %s", reason,
                        extra={"peer": self.peer, "hostname": ping.hostname, "username": ping.username})
            self.server.metrics.errors.labels("authentication").inc()
            self.server.handshake_failures.record_failure(self.peer)
            self.close()

    def _accept(self, batch: fp.EventBatch) -> None:
        """Hand a batch to the store now, in the order received, without a task: its future's callback
        (`_stored`) counts it and queues its ack."""
        server = self.server
        if batch.invalid:
            server.metrics.invalid_events.inc(batch.invalid)
            log.warning("invalid entries skipped", extra={"peer": self.peer, "value": batch.invalid, "tag": batch.tag})
        size = len(batch.entries)
        chunk = batch.chunk
        count = batch.size
        if not count:
            self.conn.release(batch)  # type: ignore[union-attr]
            if chunk is not None:  # nothing valid to store: ack so the client does not retry a hopeless chunk
                self._acks.append(chunk)
                self._flush_soon()
            return
        self.inflight += size
        server.inflight += size
        self.storing += 1
        try:
            tag = batch.tag
            if self.config.add_tag_prefix:
                tag = f"{self.config.add_tag_prefix}.{tag}"
            key = _writer_key(fp.as_bytes(chunk)) if chunk is not None and self.config.exactly_once else None
            parts, frames, events = frame_batch(tag, batch, {**batch.option, "source": "forward", "peer": self.peer},
                                                 self._extra, self.runtime.store.config.max_frame_size)
            future = self.runtime.submit_routed(self.config.segment, tag, parts,
                                                WriterCondition(key=key, end=1) if key is not None else None, frames,
                                                events)
        except Exception as e:  # refused before it reached the store's queue
            self.conn.release(batch)  # type: ignore[union-attr]
            self._refused(e)
            self._settled(size)
        else:
            self.pending.add(future)
            self._order.append(future)
            future.add_done_callback(lambda f: self._stored(f, batch, chunk, count, size))
        if self.over_budget() and not self.gate.holds(BUDGET) and self.transport is not None:
            server.paused.add(self)
            server.metrics.read_pauses.inc()
            self.gate.hold(BUDGET)

    def over_budget(self) -> bool:
        """Received but not yet stored: over this connection's limit, or over the whole listener's. The
        connection's counts the receive spaces its batches still hold, too (a space holds more than them)."""
        return (self.held_bytes() > self.config.max_inflight_bytes
                or self.server.inflight > self.config.max_total_inflight_bytes)

    def held_bytes(self) -> int:
        return self.inflight + (self.conn.pinned if self.conn is not None else 0)

    def resume_if_under(self) -> None:
        cfg = self.config
        if (self.gate.holds(BUDGET) and self.held_bytes() <= cfg.max_inflight_bytes * _READ_PAUSED_BELOW
                and self.server.inflight <= cfg.max_total_inflight_bytes * _READ_PAUSED_BELOW):
            self.server.paused.discard(self)
            self.gate.release(BUDGET)

    def _stored(self, future: asyncio.Future[AppendResult], batch: fp.EventBatch, chunk: str | bytes | None,
                count: int, size: int) -> None:
        """A batch's append is answered: release its receive space, count it and queue its ack (written with the
        others of this loop turn by `_flush`), or close without an ack."""
        self.pending.discard(future)
        if future.cancelled():  # the hub stopping: the client resends what it heard no ack for
            self.close()  # not released: a cancelled append may still be written (nothing is read again)
        elif (error := future.exception()) is not None:
            self.conn.release(batch)  # type: ignore[union-attr]
            self._refused(error)
        else:
            self.conn.release(batch)  # type: ignore[union-attr]
            if future.result().duplicate:
                self.server.metrics.duplicates.inc()
                log.info("retried chunk acknowledged again, not stored", extra={"peer": self.peer})
            else:
                self._counted.append((batch.mode, count, size))
            if chunk is not None:
                self._acks.append(chunk)
        self.inflight -= size
        self.server.inflight -= size
        self.storing -= 1
        # The appends of a commit group are answered together, in the order made, their callbacks queued one
        # after the other: the last of them writes every ack at once, in this pass of the loop (a call_soon
        # would wait for the next pass, behind whatever the sockets brought meanwhile, and delay the acks by
        # that). The oldest append not yet seen here tells: answered, its callback is still to come and
        # flushes. (A flush too many is harmless; none would strand acks, and the oldest never does that.)
        order = self._order
        while order and order[0] not in self.pending:
            order.popleft()
        if not (order and order[0].done()):
            self._flush()

    def _refused(self, error: BaseException) -> None:
        if isinstance(error, StoreError | OSError):
            log.error("store refused a batch; no ack, closing: %s", error, extra={"peer": self.peer})
            self.server.metrics.errors.labels("store").inc()
        else:  # a bug: the client must not wait for an ack that never comes on a live connection
            log.error("storing a batch failed; no ack, closing", exc_info=error, extra={"peer": self.peer})
            self.server.metrics.errors.labels("internal").inc()
        self.close()

    def _settled(self, size: int) -> None:
        self.inflight -= size
        self.server.inflight -= size
        self.storing -= 1
        self._flush_soon()

    def _flush_soon(self) -> None:
        if not self._flush_pending:
            self._flush_pending = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        """The acks of every batch answered since the last flush in one write, their counts in one update each,
        and reading resumed if the budget has room."""
        self._flush_pending = False
        server = self.server
        if self._counted:
            metrics = server.metrics
            events: dict[fp.Mode, int] = {}
            nbytes = 0
            for mode, count, size in self._counted:
                events[mode] = events.get(mode, 0) + count
                nbytes += size
            metrics.batches.inc(len(self._counted))
            metrics.bytes.inc(nbytes)
            for mode, count in events.items():
                metrics.events_of(mode).inc(count)
            self._counted.clear()
        if self._acks:
            if self.transport is not None and not self.transport.is_closing():
                self.transport.write(self.conn.send_acks(self._acks))  # type: ignore[union-attr]
            self._acks.clear()
        if self.eof and not self.storing:  # the last one after the client's EOF
            self.close()
        self.resume_if_under()
        if server.paused and server.inflight <= self.config.max_total_inflight_bytes * _READ_PAUSED_BELOW:
            for conn in list(server.paused):  # the listener's budget has room again
                conn.resume_if_under()


def frame_batch(tag: str, batch: fp.EventBatch, option: dict[str, Any], extra: dict[str, str],
                max_frame_size: int) -> tuple[list[Buffer], int, int]:
    """The store frames of a received batch, as the buffers the store writes (the entries a view of the bytes
    received: no copy), how many: one stored PackedForward body (several when it is larger than the store's
    max_frame_size), each behind its frame header; and the events they hold (the `size` each carries, as the
    store counts them)."""
    entries: bytes | memoryview = batch.entries
    if extra:
        entries = fp.add_record_keys(entries, extra)
    pieces = fp.split_entries(entries, max_frame_size - _BATCH_OVERHEAD)
    parts: list[Buffer] = []
    events = 0
    for piece in pieces:
        head = batch_head(tag, len(piece))
        size = batch.size if len(pieces) == 1 else _count(piece)
        events += size
        packed = pack_option({**option, "size": size})
        body_size = len(head) + len(piece) + len(packed)
        if body_size > max_frame_size:
            raise StoreLimitExceeded(f"event of {body_size} bytes (tag {tag!r}) exceeds max_frame_size "
                                     f"{max_frame_size}")
        parts += (_FRAME_HEADER.pack(_EVENT, body_size), head, piece, packed)
    return parts, len(pieces), events


def _count(entries: bytes | memoryview) -> int:
    return fp.scan_entries(entries)[1]


async def _resolve(host: str, port: int) -> str:
    try:
        name, _ = await asyncio.get_running_loop().getnameinfo((host, port), socket.NI_NAMEREQD)
        return str(name)
    except OSError:
        return host


async def start(runtime: Runtime) -> ForwardServer:
    server = ForwardServer(runtime)
    await server.start()
    return server


# Fluent Bit's chunk id is the first 16 bytes of the SHA-512 of what it sends, and in Message mode (a dynamic
# Tag) it hashes zero bytes of each message (its message mode never advances the offset it hashes): every
# message carries this one id, in hex or (older versions) base64. It tells nothing apart, so such messages
# are stored at least once, as Fluentd stores everything: deduplicating them dropped every message after the
# first, and a digest of the content would still drop a repeated line with a second-precision time.
_EMPTY_HASH = hashlib.sha512(b"").digest()[:16]
_NO_ID = frozenset({_EMPTY_HASH.hex().encode(), base64.b64encode(_EMPTY_HASH)})


def _writer_key(chunk: bytes) -> bytes | None:
    """The store's exactly-once key of a chunk id: the id itself (Fluentd sends 24 base64 characters,
    Fluent Bit 32 hex digits), or its SHA-256 when a peer sends a long one (the key goes in every chunk
    file's writer table); None for an id that identifies nothing (Fluent Bit's Message mode)."""
    if chunk in _NO_ID:
        return None
    if len(chunk) <= 64:
        return b"fwd:" + chunk
    return b"fwd#" + hashlib.sha256(chunk).digest()
