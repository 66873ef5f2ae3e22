"""logport as a logjam-device: ROUTER + PULL in, durable store, PUB out (plus consumer and republisher).

Messages are taken from a socket in batches (up to `max_batch`); each batch is
one group-committed store append, and only once it is durable are the sync
replies sent and the messages published. Appends of consecutive batches
overlap (up to `_IN_FLIGHT`), replies and publishing keep their order.

Where the C pass can drain the sockets itself (logjam_ingest.drain), it does,
and a batch is not made of Python objects per message: its stored bodies come
framed for the store in one buffer, and the C side sends the replies and
publishes (Drained.finish). The first message it does not take, and every
message without it, goes the Python path (the reference).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import types
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

import zmq
import zmq.asyncio

from logport import zmqcurve
from logport.config import LogjamConfig
from logport.errors import LocalProtocolError, ProtocolError
from logport.protocols import logjam as lj
from logport.runtime import Runtime
from logport.servers import logjam_ingest
from logport.servers._lifecycle import wait_until
from logport.servers.logjam_consumer import run_subscription
from logport.servers.logjam_ingest import (
    LogjamMetrics,
    MessageDecoder,
    Taken,
    log,
    log_invalid,
    peer_address,
    receive_message,
    store_drained,
    store_taken,
)
from logport.servers.logjam_republish import StreamNames, run_republisher
from logport.servers.segment import keep_freed_memory

if TYPE_CHECKING:
    from logport.protocols._logjam_scan import Drained

_MAX_PEERS = 100_000  # routing ids whose address is remembered
_IN_FLIGHT = 16  # store appends of consecutive batches that may overlap


_MORE = zmq.SNDMORE | zmq.NOBLOCK


def now_ms() -> int:
    return int(time.time() * 1000)


# pyzmq's Socket.send is a Python wrapper that only adds DRAFT routing_id / group to its backend's send and
# costs as much as the send itself (4 frames: 1.4-1.7 us against 0.85); without them it is the same call
_BACKEND_SEND: Any = getattr(getattr(zmq, "backend", None), "Socket", zmq.Socket).send


def sender(sock: zmq.Socket[bytes]) -> Callable[[bytes, int], Any]:
    """`sock.send(data, flags)` for bytes frames, straight to pyzmq's backend."""
    return types.MethodType(_BACKEND_SEND, sock)  # type: ignore[no-any-return]


def send_frames(sock: zmq.Socket[bytes], frames: list[bytes]) -> None:
    """send_multipart without its per-call type checks (a third of a publish's cost); never blocks."""
    send = sender(sock)
    for frame in frames[:-1]:
        send(frame, _MORE)
    send(frames[-1], zmq.NOBLOCK)


class LogjamPublisher:
    """The PUB side: renumbers everything with our device number and one sequence."""

    def __init__(self, sock: zmq.Socket[bytes], config: LogjamConfig, endpoint: bytes, metrics: LogjamMetrics) -> None:
        self.sock = sock
        self.handle = sock.underlying  # libzmq's, for the C side (publish_drained)
        self._send = sender(sock)
        self.device = config.device_id
        self.compression = lj.COMPRESSION_NAMES[config.publish_compression]
        self.endpoint = endpoint
        self.sequence = lj.Sequencer()
        self._data = metrics.published.labels("data")
        self._heartbeat = metrics.published.labels("heartbeat")
        self._republished = metrics.published.labels("republished")

    def publish_received(self, accepted: list[Taken]) -> None:
        """Forward received messages: body as sent (compressed on publish if configured and it was not)."""
        send = self._send
        more = _MORE
        pack = lj.META.pack  # per message on the hot path: no Meta object, the frame straight away
        device = self.device
        recompress = self.compression
        sequence = self.sequence.last  # Sequencer.next inlined: a method call per message is a tenth of this loop
        wrap = lj.SEQUENCE_WRAP - 1
        try:
            for _, _, app_env, topic, body, compression, created_ms in accepted:
                if not created_ms:
                    created_ms = now_ms()
                if compression == lj.NO_COMPRESSION and recompress != lj.NO_COMPRESSION:
                    body, compression = lj.compress(body, recompress), recompress  # uncompressed: body is the JSON
                sequence = sequence + 1 if sequence < wrap else 1
                send(app_env, more)
                send(topic, more)
                send(body, more)
                send(pack(lj.TAG, compression, lj.VERSION, device, created_ms, sequence), zmq.NOBLOCK)
        finally:
            self.sequence.last = sequence
        self._data.inc(len(accepted))

    def publish_drained(self, drained: Drained, router: int, stored: bool) -> None:
        """A drained batch once the store answered: the replies on `router` (libzmq's handle) and the messages
        on PUB, as `publish_received` publishes them, by the C side; neither when not stored."""
        self.sequence.last = drained.finish(self.handle, router, stored, self.device, self.compression,
                                            self.sequence.last, now_ms())
        if stored:
            self._data.inc(drained.count)

    def publish_json(self, app_env: bytes, topic: bytes, json: bytes, created_ms: int) -> None:
        """Publish an event stored by another protocol (republishing)."""
        body = lj.compress(json, self.compression)
        meta = lj.Meta(self.compression, self.device, created_ms or now_ms(), self.sequence.next())
        send_frames(self.sock, lj.data_frames(app_env, topic, body, meta))
        self._republished.inc()

    def heartbeat(self) -> None:
        meta = lj.Meta(lj.NO_COMPRESSION, self.device, now_ms(), self.sequence.next())
        send_frames(self.sock, lj.heartbeat_frames(self.endpoint, meta))
        self._heartbeat.inc()


class _Pending:
    """One batch on its way: the store append, then the replies and what to publish (a list of Taken, or
    a drained batch the C side answers and publishes)."""

    __slots__ = ("append", "replies", "accepted", "kind", "drained")

    def __init__(self, append: asyncio.Future[None] | None, replies: list[tuple[bool, lj.Reply]],
                 accepted: list[Taken], kind: str, drained: Drained | None = None) -> None:
        self.append = append
        self.replies = replies  # (needs the append to succeed, the reply)
        self.accepted = accepted
        self.kind = kind
        self.drained = drained

    @property
    def count(self) -> int:
        return self.drained.count if self.drained is not None else len(self.accepted)


class LogjamDevice:
    """The ROUTER, PULL and PUB sockets (the hub's Service, and a `Listener`)."""

    name = "logjam"

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.config = runtime.config.logjam
        self.metrics = runtime.metrics.once(LogjamMetrics, lambda: LogjamMetrics(runtime))
        self.decoder = MessageDecoder(self.config)
        self.hostname = runtime.hostname.encode()
        self.ctx = zmq.asyncio.Context()
        self.tasks: list[asyncio.Task[Any]] = []
        self._pending: asyncio.Queue[_Pending] = asyncio.Queue(_IN_FLIGHT)
        self._sockets: list[zmq.asyncio.Socket] = []
        self.publisher: LogjamPublisher | None = None
        self._peers: dict[bytes, str] = {}  # ROUTER routing id -> the sender's address
        self.router_conn = lj.Connection("router")  # the protocol's side of each socket (replies owed, frames)
        self.pull_conn = lj.Connection("pull")
        self.zap: zmqcurve.ZapHandler | None = None
        self._reading = asyncio.Event()  # cleared while paused: the pumps take nothing from ROUTER and PULL
        self._reading.set()
        self._pumps: list[asyncio.Task[Any]] = []
        self._taking = 0
        self.draining = False
        # the C side drains the sockets and publishes where it can: built, and a publish compression it makes
        self.native = logjam_ingest.drain is not None and self.config.publish_compression in ("none", "zlib")

    def _socket(self, kind: int, hwm_option: int, hwm: int) -> zmq.asyncio.Socket:
        sock = self.ctx.socket(kind)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(hwm_option, hwm)
        if self.config.curve_secret_key:
            zmqcurve.make_server(sock, self.config.curve_secret_key)
        self._sockets.append(sock)
        return sock

    async def start(self) -> None:
        cfg = self.config
        if cfg.curve_allowed_clients:  # bound before any socket that asks it
            self.zap = zmqcurve.ZapHandler(self.ctx, cfg.curve_allowed_clients, log)
            self._spawn(self.zap.run())
        router = self._socket(zmq.ROUTER, zmq.RCVHWM, cfg.rcv_hwm)
        pull = self._socket(zmq.PULL, zmq.RCVHWM, cfg.rcv_hwm)
        pub = self._socket(zmq.PUB, zmq.SNDHWM, cfg.pub_hwm)
        for sock in (router, pull):
            sock.setsockopt(zmq.MAXMSGSIZE, cfg.max_message_size)
        router.bind(f"tcp://{cfg.bind}:{cfg.router_port}")
        pull.bind(f"tcp://{cfg.bind}:{cfg.pull_port}")
        pub.bind(f"tcp://{cfg.bind}:{cfg.pub_port}")
        endpoint = f"tcp://{self.runtime.hostname}:{cfg.pub_port}".encode()
        self.publisher = LogjamPublisher(zmq.Socket.shadow(pub.underlying), cfg, endpoint, self.metrics)
        self.router_sock: zmq.Socket[bytes] = zmq.Socket.shadow(router.underlying)
        self.router_handle: int = router.underlying
        if self.native:
            # a drained batch's framed bodies (a MiB or so) and libzmq's received messages are fresh heap each
            # batch; glibc gave that memory back at every free and faulted it in again: a tenth of the hub's CPU
            # in page faults and page clearing (perf, bench logjam), 60% fewer faults with freed memory kept
            keep_freed_memory()
        pump = self._pump_native if self.native else self._pump
        self._spawn(pump(router, "router"))
        self._spawn(pump(pull, "pull"))
        self._pumps = self.tasks[-2:]
        self._spawn(self._complete())
        self._spawn(self._heartbeats())
        names = StreamNames(cfg)  # refuses app-envs and topics a consumer would reject, before anything runs
        for segment in cfg.republish:
            self._spawn(run_republisher(self.runtime, segment, self.publisher, names))
        for endpoint_url in cfg.subscribe:
            self._spawn(run_subscription(self.runtime, self.ctx, endpoint_url, self.metrics, self.decoder))
        curve = zmqcurve.public_key(cfg.curve_secret_key) if cfg.curve_secret_key else ""
        log.info("logjam device listening", extra={
            "router": cfg.router_port, "pull": cfg.pull_port, "pub": cfg.pub_port, "device": cfg.device_id,
            "curve_public_key": curve, "curve_allowed_clients": len(cfg.curve_allowed_clients)})

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(coro)
        task.add_done_callback(_log_crash)
        self.tasks.append(task)

    # --- ROUTER and PULL ---

    async def _pump(self, asock: zmq.asyncio.Socket, kind: str) -> None:
        sock: zmq.Socket[bytes] = zmq.Socket.shadow(asock.underlying)
        max_batch = self.config.max_batch
        received = self.metrics.received.labels(kind)
        take = self._take_router if kind == "router" else self._take_pull
        peers = self._peers
        router = kind == "router"
        while True:
            await self._reading.wait()
            await asock.poll(timeout=None)  # POLLIN
            batch: list[tuple[list[bytes], str]] = []
            try:
                while len(batch) < max_batch:
                    frames, first = receive_message(sock)
                    if router:  # the address of a routing id, looked up once
                        peer = peers.get(frames[0])
                        if peer is None:
                            if len(peers) >= _MAX_PEERS:
                                peers.clear()
                            peer = peers[frames[0]] = peer_address(first)
                    else:
                        peer = peer_address(first)
                    batch.append((frames, peer))
            except zmq.Again:
                pass
            if not batch:
                continue
            received.inc(len(batch))
            self._taking += 1  # drain waits for a batch taken from the socket to be queued
            try:
                await take(batch)
            finally:
                self._taking -= 1

    async def _pump_native(self, asock: zmq.asyncio.Socket, kind: str) -> None:
        """`_pump` with the C side draining the socket: a batch of messages it took, then the one it did not
        take (if any), for the Python path, in their order."""
        drain = logjam_ingest.drain
        assert drain is not None
        handle = asock.underlying
        router = kind == "router"
        max_batch, limit = self.config.max_batch, self.decoder.limit
        max_frame = self.runtime.store.config.max_frame_size
        received = self.metrics.received.labels(kind)
        while True:
            await self._reading.wait()
            await asock.poll(timeout=None)  # POLLIN
            drained = drain(handle, router, max_batch, limit, kind, now_ms(), max_frame)
            if not drained.received:
                continue
            received.inc(drained.received)
            self._taking += 1
            try:
                append = None
                if drained.count:
                    append = asyncio.ensure_future(store_drained(self.runtime, self.config.segment, drained))
                    await self._pending.put(_Pending(append, [], [], kind, drained))
                if drained.left is not None and router:  # a ping is answered once the messages drained before it are
                    await self._take_router([drained.left], append)
                elif drained.left is not None:  # PULL answers nothing
                    await self._take_pull([drained.left])
            finally:
                self._taking -= 1

    async def _take_router(self, batch: list[tuple[list[bytes], str]],
                           before: asyncio.Future[None] | None = None) -> None:
        accepted: list[Taken] = []
        replies: list[tuple[bool, lj.Reply]] = []
        conn = self.router_conn
        for (frames, peer), taken in zip(batch, self.decoder.take_batch(batch, True, "router"), strict=True):
            if taken is not None:  # the C pass took it: a data message, stored as `_take_one` would
                accepted.append(taken)
                if len(frames) > 1 and not frames[1]:
                    conn.expect_reply(frames[0])
                    replies.append((True, lj.Accept(frames[0], taken[2])))
                continue
            conn.receive_message(frames)
            self._take_one(conn.next_event(), peer, "router", accepted, replies, before is not None)
        await self._enqueue(accepted, replies, "router", before)

    async def _take_pull(self, batch: list[tuple[list[bytes], str]]) -> None:
        accepted: list[Taken] = []
        conn = self.pull_conn
        for (frames, peer), taken in zip(batch, self.decoder.take_batch(batch, False, "pull"), strict=True):
            if taken is not None:
                accepted.append(taken)
                continue
            conn.receive_message(frames)
            self._take_one(conn.next_event(), peer, "pull", accepted, [])
        await self._enqueue(accepted, [], "pull")

    def _take_one(self, event: lj.Received | lj.Refused, peer: str, kind: str, accepted: list[Taken],
                  replies: list[tuple[bool, lj.Reply]], stored_before: bool = False) -> None:
        """One message the C pass left to Python (or every message, without the C extension); `stored_before`:
        messages the C pass drained before it are being stored."""
        if isinstance(event, lj.Refused):
            log_invalid(self.metrics, event.error, peer, kind)
            if event.sync:
                replies.append((False, lj.BadRequest(event.route, event.first_frame)))
            return
        message = event.event
        if isinstance(message, lj.PingRequest):
            self.metrics.pings.inc()  # nobody to answer on PULL
            if message.sync:  # after the messages before it in the batch are stored (else none): a sender's proof
                replies.append((bool(accepted) or stored_before, lj.Pong(event.route, self.hostname)))
            return
        assert isinstance(message, lj.DataMessage)
        try:
            accepted.append(self.decoder.accept(message, peer, kind).taken())
        except ProtocolError as e:
            log_invalid(self.metrics, e, peer, kind)
            if message.sync:
                replies.append((False, lj.BadRequest(event.route, message.app_env)))
            return
        if message.sync:
            replies.append((True, lj.Accept(event.route, message.app_env)))

    async def _enqueue(self, accepted: list[Taken], replies: list[tuple[bool, lj.Reply]], kind: str,
                       before: asyncio.Future[None] | None = None) -> None:
        """`before`: the append of the messages the C pass drained before this batch (of one message, then)."""
        append = before
        if accepted:
            append = asyncio.ensure_future(store_taken(self.runtime, self.config.segment, accepted))
        # a full queue stops the pumps: ZeroMQ's own queues then push back on the producers
        await self._pending.put(_Pending(append, replies, accepted, kind))

    async def _complete(self) -> None:
        assert self.publisher is not None
        router = self.router_sock
        while True:
            pending = await self._pending.get()
            stored = True
            if pending.append is not None:
                try:
                    await pending.append
                except Exception as e:
                    stored = False
                    if pending.count:  # else a ping waiting on a drained batch, whose failure was logged
                        self.metrics.store_errors.inc()
                        log.error("logjam messages not stored", extra={"count": pending.count, "error": str(e)})
            if pending.drained is not None:
                self.publisher.publish_drained(pending.drained, self.router_handle, stored)
                if stored:
                    self.metrics.stored.labels(pending.kind).inc(pending.drained.count)
                self._pending.task_done()
                continue
            conn = self.router_conn
            for needs_store, reply in pending.replies:
                try:
                    if stored or not needs_store:
                        frames = conn.send(reply)
                        with contextlib.suppress(zmq.ZMQError):
                            send_frames(router, frames)
                    else:
                        conn.forgo_reply(reply.route)
                except LocalProtocolError as e:  # a bug of ours: the other replies and publishing go on
                    log.error("logjam reply not sent", extra={"error": str(e)})
            if stored and pending.accepted:
                self.metrics.stored.labels(pending.kind).inc(len(pending.accepted))
                self.publisher.publish_received(pending.accepted)
            self._pending.task_done()

    async def _heartbeats(self) -> None:
        assert self.publisher is not None
        while True:
            await asyncio.sleep(self.config.heartbeat_interval)
            self.publisher.heartbeat()

    # --- lifecycle (servers/_lifecycle.py's Listener) ---

    def serving(self) -> bool:
        return bool(self._sockets) and not any(s.closed for s in self._sockets) and not self.draining

    def pause(self) -> None:
        self._reading.clear()  # ZeroMQ's own queues (rcv_hwm) then push back on the producers

    def resume(self) -> None:
        self._reading.set()

    async def drain(self, timeout: float) -> None:
        """Stop taking messages, then store and answer every one already taken: a message still in
        ZeroMQ's queue was never answered, and the sender's resend after its timeout is the sender's."""
        self.draining = True
        started = time.monotonic()
        self.pause()
        await wait_until(lambda: not self._taking)  # a pump that took a batch queues it (it is then answered)
        for task in self._pumps:
            task.cancel()
        await asyncio.gather(*self._pumps, return_exceptions=True)
        batches = self._pending.qsize()
        try:
            async with asyncio.timeout(max(timeout, 0.0)):
                await self._pending.join()
        except TimeoutError:
            log.warning("logjam drain timed out", extra={"queued": self._pending.qsize()})
        # as servers/_lifecycle.py's listeners say it; ZeroMQ shows no connections: the batches taken are drained
        log.info("listener drained", extra={"listener": "logjam", "batches": batches,
                                            "unsettled": self._pending.qsize(),
                                            "seconds": round(time.monotonic() - started, 3)})

    async def close(self) -> None:
        for task in self.tasks:
            task.cancel()
        for task in self.tasks:
            with contextlib.suppress(BaseException):
                await task
        while not self._pending.empty():  # appends already under way finish (stored, just not published)
            pending = self._pending.get_nowait()
            if pending.append is not None:
                with contextlib.suppress(Exception):
                    await pending.append
        for sock in self._sockets:
            sock.close(linger=0)
        if self.zap is not None:
            self.zap.close()
        self.ctx.destroy(linger=0)


def _log_crash(task: asyncio.Task[Any]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("logjam task failed", exc_info=task.exception())


async def start(runtime: Runtime) -> LogjamDevice:
    device = LogjamDevice(runtime)
    try:
        await device.start()
    except BaseException:
        await device.close()
        raise
    return device
