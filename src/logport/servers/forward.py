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
import hashlib
import logging
import socket
import typing
from typing import Any

from prometheus_client import Counter, Gauge

from logport.batch import encode_batch
from logport.errors import LimitExceeded, ProtocolError, StoreError
from logport.protocols import forward as fp
from logport.runtime import Runtime
from logport.servers._guard import ConnectionGuard, FailureLimiter
from logport.servers._lifecycle import BUDGET, IdleTimeout, ReadGate, TcpListener, peer_name
from logport.store import WriterCondition

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
        pending = [t for c in self.connections for t in c.tasks]
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


class ForwardConnection(asyncio.Protocol):
    def __init__(self, server: ForwardServer) -> None:
        self.server = server
        self.config = server.config
        self.store = server.runtime.store
        self.transport: asyncio.Transport | None = None
        self.peer = ""
        self.conn: fp.ServerConnection | None = None
        self.tasks: set[asyncio.Task[None]] = set()
        self.inflight = 0
        self.gate = ReadGate(None)
        self.closing = False
        self.eof = False
        self.storing = 0  # batches handed to the store and not yet answered
        self.idle = IdleTimeout(self.config, busy=lambda: bool(self.tasks), expire=self._close_idle)
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
        while self.tasks:
            await asyncio.wait(set(self.tasks))

    def _close_idle(self) -> None:
        self.server.metrics.errors.labels("idle_timeout").inc()
        self.close()

    # --- receiving ---

    def data_received(self, data: bytes) -> None:
        if self.conn is None or self.closing:
            return
        self.idle.touch()
        conn = self.conn
        try:
            conn.receive_data(data)
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
        if self.storing:
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
        metrics = self.server.metrics
        if batch.invalid:
            metrics.invalid_events.inc(batch.invalid)
            log.warning("invalid entries skipped", extra={"peer": self.peer, "value": batch.invalid, "tag": batch.tag})
        size = len(batch.entries)
        self.inflight += size
        self.server.inflight += size
        self.storing += 1
        task = asyncio.ensure_future(self._store(batch, size))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        if self.over_budget() and not self.gate.holds(BUDGET) and self.transport is not None:
            self.server.paused.add(self)
            self.server.metrics.read_pauses.inc()
            self.gate.hold(BUDGET)

    def over_budget(self) -> bool:
        """Received but not yet stored: over this connection's limit, or over the whole listener's."""
        return (self.inflight > self.config.max_inflight_bytes
                or self.server.inflight > self.config.max_total_inflight_bytes)

    def resume_if_under(self) -> None:
        cfg = self.config
        if (self.gate.holds(BUDGET) and self.inflight <= cfg.max_inflight_bytes * _READ_PAUSED_BELOW
                and self.server.inflight <= cfg.max_total_inflight_bytes * _READ_PAUSED_BELOW):
            self.server.paused.discard(self)
            self.gate.release(BUDGET)

    async def _store(self, batch: fp.EventBatch, size: int) -> None:
        server = self.server
        try:
            tag = batch.tag
            if self.config.add_tag_prefix:
                tag = f"{self.config.add_tag_prefix}.{tag}"
            entries = batch.entries
            extra = self._extra
            if extra and batch.size:
                entries = fp.add_record_keys(entries, extra)
            segment = server.runtime.router.segment_for(tag, self.config.segment)
            chunk = batch.chunk
            option: dict[str, Any] = {**batch.option, "source": "forward", "peer": self.peer}
            pieces = fp.split_entries(entries, self.store.config.max_frame_size - _BATCH_OVERHEAD)
            if len(pieces) == 1:
                bodies = [encode_batch(tag, entries, {**option, "size": batch.size})]
            else:
                bodies = [encode_batch(tag, piece, {**option, "size": _count(piece)}) for piece in pieces]
            key = _writer_key(fp.as_bytes(chunk)) if chunk is not None and self.config.exactly_once else None
            writer = WriterCondition(key=key, end=1) if key is not None else None
            count, mode, nbytes = batch.size, batch.mode, len(entries)
            del batch, entries, pieces  # while the store works, hold one copy of the data, not three
            if count:
                result = await self.store.append(segment, bodies, writer=writer)
                duplicate = result.duplicate
            elif chunk is not None:
                duplicate = False  # nothing valid to store: ack so the client does not retry a hopeless chunk
            else:
                return
            if duplicate:
                server.metrics.duplicates.inc()
                log.info("retried chunk acknowledged again, not stored", extra={"peer": self.peer})
            else:
                server.metrics.batches.inc()
                server.metrics.events.labels(mode.value).inc(count)
                server.metrics.bytes.inc(nbytes)
            if chunk is not None and self.transport is not None and not self.transport.is_closing():
                self.transport.write(self.conn.send(fp.Ack(chunk)))  # type: ignore[union-attr]
        except (StoreError, OSError) as e:
            log.error("store refused a batch; no ack, closing: %s", e, extra={"peer": self.peer})
            server.metrics.errors.labels("store").inc()
            self.close()
        except Exception:  # a bug: the client must not wait for an ack that never comes on a live connection
            log.exception("storing a batch failed; no ack, closing", extra={"peer": self.peer})
            server.metrics.errors.labels("internal").inc()
            self.close()
        finally:
            self.inflight -= size
            server.inflight -= size
            self.storing -= 1
            if self.eof and not self.storing:  # the last one after the client's EOF
                self.close()
            self.resume_if_under()
            if server.paused and server.inflight <= self.config.max_total_inflight_bytes * _READ_PAUSED_BELOW:
                for conn in list(server.paused):  # the listener's budget has room again
                    conn.resume_if_under()


def _count(entries: bytes) -> int:
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
