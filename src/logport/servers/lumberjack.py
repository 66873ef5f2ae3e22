"""The Lumberjack (Beats) listener: v1 and v2 on one port, each window acknowledged once durable.

A window (the events a `W` frame announced) is stored as PackedForward batches
and acknowledged with its highest sequence after `store.append` returns; while
it is being stored the writer gets a keep-alive `A 0` every few seconds, as
Logstash sends. A sender that pauses mid-window has what it sent so far stored
and acknowledged after `partial_window_delay` (streaming v1 clients announce
windows they never fill).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgpack
import orjson
import ormsgpack
from prometheus_client import Counter, Gauge

from logport.batch import ENTRY_HEAD, MAX_NESTING_DEPTH, encode_batch_pieces
from logport.config import LumberjackConfig
from logport.errors import LimitExceeded, LogportError, RemoteProtocolError
from logport.protocols._receivebuffer import NEED_DATA
from logport.protocols.lumberjack import (
    Compressed,
    Connection,
    DataFrames,
    Limits,
    Role,
    WindowSize,
    encode_ack,
    inflate_frames,
    inflate_payload,
    json_fields,
    parse_timestamp,
)
from logport.runtime import Runtime
from logport.servers._guard import ConnectionGuard
from logport.servers._lifecycle import (
    BUDGET,
    IdleTimeout,
    ReadGate,
    TcpListener,
    peer_name,
    wait_until,
)
from logport.workers import WorkerPool

log = logging.getLogger("logport.lumberjack")

_scan_window: Callable[..., tuple[list[tuple[str | None, bytes, int]], int, int] | None] | None
_scan_events: Callable[..., list[tuple[str | None, bytes, int]] | None] | None
try:
    from logport.protocols._lumberjack_scan import decode_window as _scan_window
    from logport.protocols._lumberjack_scan import pack_json_events as _scan_events
except ImportError:  # installed without a C compiler: windows are decoded in Python
    _scan_window = _scan_events = None

SOURCE = "lumberjack"
# windows decoded but not yet stored, per connection, before reading pauses (back-pressure)
PAUSE_AT_WINDOWS = 4
RESUME_AT_WINDOWS = 1
# share of the store's max_frame_size a batch's entries may fill: the rest is for the option and headers
BATCH_FILL = 7 / 8
# how deep an event may nest (its object is level 1): ormsgpack packs 255 levels and msgpack the rest
MAX_EVENT_DEPTH = MAX_NESTING_DEPTH


_record_packer = msgpack.Packer(use_bin_type=True, autoreset=True)
Batches = list[tuple[str, bytes, int]]  # (tag, stored body, event count): what build_batches makes


@dataclass(slots=True)
class Window:
    """Events to store together and acknowledge with one `A` (empty: a `W 0`, acknowledged with 0)."""

    version: int
    events: list[tuple[int, Any]]  # (seq, fields)
    last_seq: int = 0  # what its ack says
    batches: Batches | None = None  # built by a decode worker (then `events` is empty)
    stored: asyncio.Task[None] | None = None  # the append, started as soon as the window is complete


Decoded = tuple[Batches, int, int]  # batches, last seq, bytes of the window's frames
# a window of at least this many events is split between the decode workers: with two windows in flight (Filebeat)
# the next window's parts are queued while one is stored and acknowledged, so no worker waits for its sender
SPLIT_AT_EVENTS = 512


@dataclass(frozen=True, slots=True)
class _Announced:
    """A C frame right after its W frame, decoded in the event loop by the C pass (`decode_window`)."""

    compressed: Compressed
    window_size: int


@dataclass(slots=True)
class _Decoding:
    """A C frame that holds a whole window, in decode workers (a part each); what came after it waits behind it."""

    compressed: Compressed
    window_size: int
    parts: list[asyncio.Task[Decoded | None]]

    def done(self) -> bool:
        return all(part.done() for part in self.parts)


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


def _frames_bytes(frames: list[tuple[int, Any]]) -> int:
    """About the bytes `frames` took as received: exact for J frames' JSON bytes, close for D frames' fields."""
    return sum(10 + (sum(8 + len(k) + len(v) for k, v in f.items()) if type(f) is dict else len(f))
               for _, f in frames)


def _json_depth(value: Any) -> int:
    """How many dicts and lists deep `value` is, level by level: Python's own recursion stops near 1000."""
    depth = 0
    level = [value]
    while True:
        level = [v for v in level if type(v) is dict or type(v) is list]
        if not level:
            return depth
        depth += 1
        level = [child for v in level for child in (v.values() if type(v) is dict else v)]


def _check_depth(what: str, value: Any, limit: int) -> None:
    depth = _json_depth(value)
    if depth > limit:
        raise RemoteProtocolError(f"{what} is nested {depth} deep, over the limit of {limit}")


def decode_window(compressed: Compressed, limits: Limits, window_size: int, part: int, parts: int, tag: str,
                  tag_from_beat: bool, peer: str, max_body: int, received_ns: int) -> Decoded | None:
    """(batches, last seq, bytes) of part `part` of `parts` of a C frame that holds exactly the
    `window_size` events its W frame announced; None when it holds anything else (the event loop parses
    it then). Each part inflates and splits the whole frame, and packs its share of the events: in one C
    pass (`_lumberjack_scan`) when it takes the window, else in Python (`decode_window_in_python`, the
    reference, which also gives the error for a bad window)."""
    if _scan_window is not None:
        inner = inflate_payload(compressed, limits)  # its errors are the reference's
        default_s, default_ns = divmod(received_ns, 1_000_000_000)
        lo, hi = window_size * part // parts, window_size * (part + 1) // parts
        scanned = _scan_window(inner, window_size, lo, hi, tag.encode("utf-8", "surrogateescape"), tag_from_beat,
                               peer.encode("utf-8", "surrogateescape"), max_body, default_s, default_ns,
                               limits.max_payload_size)
        if scanned is not None:
            batches, last_seq, size = scanned
            return [(tag if batch_tag is None else batch_tag, body, count) for batch_tag, body, count in batches], \
                last_seq, size
    return decode_window_in_python(compressed, limits, window_size, part, parts, tag, tag_from_beat, peer,
                                   max_body, received_ns)


def decode_window_in_python(compressed: Compressed, limits: Limits, window_size: int, part: int, parts: int,
                            tag: str, tag_from_beat: bool, peer: str, max_body: int,
                            received_ns: int) -> Decoded | None:
    """decode_window without the C pass."""
    inflated = inflate_frames(compressed, limits, window_size)
    if inflated is None:
        return None
    frames, size = inflated
    share = frames[window_size * part // parts : window_size * (part + 1) // parts]
    batches = build_batches_in_python(share, tag=tag, tag_from_beat=tag_from_beat, peer=peer, max_body=max_body,
                                      received_ns=received_ns)
    return batches, share[-1][0], size


def build_batches(events: list[tuple[int, Any]], *, tag: str, tag_from_beat: bool, peer: str,
                  max_body: int, received_ns: int) -> Batches:
    """build_batches_in_python's batches, from the C pass (`_lumberjack_scan`) for a window of J frames
    (their JSON bytes) that it takes, else from build_batches_in_python itself (the reference)."""
    if _scan_events is not None and events:
        default_s, default_ns = divmod(received_ns, 1_000_000_000)
        scanned = _scan_events(events, tag.encode("utf-8", "surrogateescape"), tag_from_beat,
                               peer.encode("utf-8", "surrogateescape"), max_body, default_s, default_ns)
        if scanned is not None:
            return [(tag if batch_tag is None else batch_tag, body, count) for batch_tag, body, count in scanned]
    return build_batches_in_python(events, tag=tag, tag_from_beat=tag_from_beat, peer=peer, max_body=max_body,
                                   received_ns=received_ns)


def build_batches_in_python(events: list[tuple[int, Any]], *, tag: str, tag_from_beat: bool, peer: str,
                            max_body: int, received_ns: int) -> Batches:
    """(tag, stored body, event count) per run of events sharing @metadata (and so the tag).

    The record is the event without `@metadata`, which goes into the option;
    `@timestamp` becomes the event time (the receive time when it is missing or bad).
    Events are (seq, fields), fields a dict or a J frame's JSON bytes; bad JSON
    or an event nested deeper than MAX_EVENT_DEPTH raises RemoteProtocolError.
    """
    out: Batches = []
    default_s, default_ns = divmod(received_ns, 1_000_000_000)
    head = ENTRY_HEAD.pack
    pack = _record_packer.pack
    fast_pack = ormsgpack.packb
    loads = orjson.loads
    head_size = ENTRY_HEAD.size
    parts: list[bytes] = []  # entry head, packed record, entry head, ...
    run_bytes = 0
    run_meta: Any = None
    run_tag = tag

    def close_run() -> None:
        if parts:
            count = len(parts) // 2
            option: dict[str, Any] = {"size": count, "source": SOURCE, "peer": peer}
            if run_meta is not None:
                option["@metadata"] = run_meta
            out.append((run_tag, encode_batch_pieces(run_tag, parts, option), count))

    for seq, item in events:
        # a J frame's JSON is decoded here, right before it is packed, so the dicts die young
        if type(item) is dict:
            fields = item
        else:
            try:
                fields = loads(item)
            except orjson.JSONDecodeError:
                fields = json_fields(seq, item)  # raises the protocol's error for it
            if type(fields) is not dict:
                fields = json_fields(seq, item)
        meta = fields.pop("@metadata", None)
        t = parse_timestamp(fields.get("@timestamp"))
        seconds, nanos = t if t is not None else (default_s, default_ns)
        try:
            record = fast_pack(fields)  # what the decoder makes, ormsgpack packs byte for byte as msgpack does
        except ormsgpack.MsgpackEncodeError:  # nested deeper than its 255 levels
            _check_depth(f"event seq {seq}", fields, MAX_EVENT_DEPTH)
            record = pack(fields)
        entry_bytes = len(record) + head_size
        if meta != run_meta or (parts and run_bytes + entry_bytes > max_body):
            # checked once a run, not once an event; a checked run_meta bounds how deep `!=` recurses
            _check_depth(f"@metadata of event seq {seq}", meta, MAX_EVENT_DEPTH - 1)
            close_run()
            parts, run_bytes, run_meta = [], 0, meta
            run_tag = tag
            if tag_from_beat and isinstance(meta, dict):
                beat = meta.get("beat")
                if isinstance(beat, str) and beat:
                    run_tag = beat
        parts.append(head(0x92, 0xD7, 0, seconds & 0xFFFFFFFF, nanos))
        parts.append(record)
        run_bytes += entry_bytes
    close_run()
    return out


class LumberjackServer(TcpListener):
    """The listening socket and its connections (the hub's Service)."""

    name = "lumberjack"

    def __init__(self, runtime: Runtime) -> None:
        super().__init__()
        self.runtime = runtime
        self.config: LumberjackConfig = runtime.config.lumberjack
        cfg = self.config
        self.limits = Limits(cfg.max_payload_size, cfg.max_decompressed_size, cfg.max_window_size)
        self.metrics = runtime.metrics.once(LumberjackMetrics, lambda: LumberjackMetrics(runtime))
        self.connections: set[LumberjackConnection] = set()
        self.guard = ConnectionGuard(log, max_connections=cfg.max_connections,
                                     max_per_peer=cfg.max_connections_per_peer)
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
        self.limits = Limits(cfg.max_payload_size, cfg.max_decompressed_size, cfg.max_window_size)

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
    """One client: decode in data_received, store and acknowledge windows in order in one task."""

    def __init__(self, server: LumberjackServer) -> None:
        self.server = server
        self.config = server.config
        self.peer = "?"
        self.transport: asyncio.Transport | None = None
        self.proto: Connection | None = None
        self.loop = asyncio.get_running_loop()
        self.window: list[tuple[int, Any]] = []  # (seq, fields) of the current window, not yet being stored
        self.window_bytes = 0  # bytes of the frames in `window`, bounded by max_window_bytes
        self.window_version = 0x32
        self.window_remaining: int | None = None  # events still due in the current window; None: no W yet
        self.jobs: deque[Window] = deque()
        self.jobs_ready = asyncio.Event()
        # events parsed but not yet applied, because a C frame before them is still in a decode worker
        self.pending: deque[Any] = deque()
        self.decoding = 0  # _Decoding in `pending`
        self.announced = 0  # the size of the W frame parsed last, while nothing has followed it
        self.task: asyncio.Task[None] | None = None
        self.partial_timer: asyncio.TimerHandle | None = None
        self.keepalive_timer: asyncio.TimerHandle | None = None
        # an ack sent counts as activity too: a window being stored is not a silent connection
        self.idle = IdleTimeout(self.config, busy=self._holds_events, expire=self._close_idle)
        self.storing = False
        self.gate = ReadGate(None)
        self.closed = False

    # --- asyncio.Protocol ---

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's transports are not asyncio.Transport
        self.gate = ReadGate(transport)
        self.peer = peer_name(transport)
        srv = self.server
        if not srv.guard.admit(self.peer):  # logs the refusals, throttled
            srv.metrics.errors.labels("max_connections").inc()
            self.closed = True
            self.transport.abort()  # type: ignore[union-attr]
            return
        srv.connections.add(self)
        srv.metrics.connections.inc()
        srv.admit_paused(self.gate)
        self.proto = Connection(Role.SERVER, srv.limits, peer=self.peer, decode_json=False,
                                defer_compressed=srv.decoders is not None or _scan_window is not None)
        self.task = self.loop.create_task(self._store_windows(), name=f"lumberjack:{self.peer}")
        self.idle.start(self.peer)

    def data_received(self, data: bytes) -> None:
        if self.closed or self.proto is None:
            return
        self.idle.touch()
        srv = self.server
        proto = self.proto
        proto.receive_data(data)
        try:
            while True:
                event = proto.next_event()
                if event is NEED_DATA:
                    break
                self.announced, announced = event.size if type(event) is WindowSize else 0, self.announced
                item: Any = event
                if type(event) is Compressed and announced:
                    if srv.decoders is not None and len(event.payload) >= self.config.decode_offload_bytes:
                        self.pending.append(self._decode(event, announced))
                        continue
                    item = _Announced(event, announced)
                if self.pending:
                    self.pending.append(item)
                else:
                    self._apply(item)
        except LogportError as e:
            self._fail_window(e)
            return
        self._arm_partial()

    def _decode(self, compressed: Compressed, window_size: int) -> _Decoding:
        """Hand a C frame that should hold the whole window its W frame announced to a decode worker."""
        srv = self.server
        cfg = self.config
        decoders = srv.decoders
        assert decoders is not None
        parts = decoders.workers if window_size >= SPLIT_AT_EVENTS else 1
        received_ns = time.time_ns()
        tasks = [self.loop.create_task(decoders.run(decode_window, compressed, srv.limits, window_size, part, parts,
                                                    cfg.tag, cfg.tag_from_beat, self.peer, srv.max_body, received_ns))
                 for part in range(parts)]
        for task in tasks:
            task.add_done_callback(self._decoded)
        self.decoding += 1
        self._check_pressure()
        self._arm_keepalive(compressed.version)
        return _Decoding(compressed, window_size, tasks)

    def _decoded(self, task: asyncio.Task[Any]) -> None:
        if self.closed:
            if not task.cancelled():
                task.exception()  # retrieved: the connection that wanted it is gone
            return
        self._drain()

    def _drain(self) -> None:
        """Apply what waited behind decoded C frames, in the order it came."""
        pending = self.pending
        try:
            while pending and not self.closed:
                head = pending[0]
                if type(head) is _Decoding:
                    if not head.done():
                        return
                    pending.popleft()
                    self.decoding -= 1
                    self._apply_decoded(head)
                else:
                    pending.popleft()
                    self._apply(head)
        except LogportError as e:  # the peer's bad frame, or a worker lost
            self._fail_window(e)
            return
        except Exception as e:  # a bug: this connection is closed, the others go on
            log.exception("decoding a window failed", extra={"peer": self.peer})
            self._fail_window(e)
            return
        self._arm_partial()
        self._check_pressure()

    def _apply(self, event: Any) -> None:
        if type(event) is DataFrames:
            if self.window_remaining is None and not self.window:
                self.window_version = event.version  # no W: acks go in the data frames' version
            self._add_frames(event.frames, event.size)
        elif type(event) is WindowSize:
            if self.window:  # the previous window was cut short: store what came
                self._finish_window()
            self.window_version = event.version
            if event.size == 0:
                self.window_remaining = None
                self._queue(Window(event.version, []))
            else:
                self.window_remaining = event.size
        elif type(event) is Compressed:
            assert self.proto is not None
            for inner in self.proto.inflate(event):
                self._apply(inner)
        elif type(event) is _Announced:
            srv = self.server
            cfg = self.config
            decoded = decode_window(event.compressed, srv.limits, event.window_size, 0, 1, cfg.tag,
                                    cfg.tag_from_beat, self.peer, srv.max_body, time.time_ns())
            if decoded is None:  # the C frame holds more than the window: parse it frame by frame
                self._apply(event.compressed)
            else:
                self._queue_decoded(event.window_size, [decoded])

    def _apply_decoded(self, item: _Decoding) -> None:
        """A worker's decoded window: queue it (it is what the W frame before it announced), or, when the C
        frame held anything else, parse it here as if it had not been deferred."""
        results = [part.result() for part in item.parts]  # raises the first part's RemoteProtocolError, or WorkerLost
        decoded = [result for result in results if result is not None]
        if len(decoded) < len(results):  # then none is: each part parsed the whole frame
            self._apply(item.compressed)
            return
        self._queue_decoded(item.window_size, decoded)
        self.server.metrics.worker_windows.inc()

    def _queue_decoded(self, window_size: int, decoded: list[Decoded]) -> None:
        """Queue a window decoded whole (its parts in order): what the W frame right before it announced."""
        batches = [batch for part_batches, _, _ in decoded for batch in part_batches]
        _, last_seq, size = decoded[-1]
        assert not self.window and self.window_remaining == window_size  # the W frame came right before
        limit = self.config.max_window_bytes
        if size > limit:
            raise LimitExceeded("window", size, "max_window_bytes", limit)
        self.window_remaining = None
        self._queue(Window(self.window_version, [], last_seq, batches))

    def _fail_window(self, error: Exception) -> None:
        if self.window:  # events before the error are fine, but they will not be acknowledged
            self.window.clear()
        self._fail(error)

    def connection_lost(self, exc: Exception | None) -> None:
        self._shutdown()

    # --- windows ---

    def _add_frames(self, frames: list[tuple[int, Any]], size: int) -> None:
        """Add data frames (`size` bytes) to the current window, finishing windows as their announced size is
        reached. A window passing max_window_bytes before it is finished raises LimitExceeded."""
        limit = self.config.max_window_bytes
        while frames:
            remaining = self.window_remaining
            if remaining is None:  # no W frame (yet): the window ends on a pause or at max_window_size
                remaining = self.config.max_window_size - len(self.window)
            taken, frames = frames[:remaining], frames[remaining:]
            taken_bytes = _frames_bytes(taken) if frames else size  # split over two windows: rare, count them
            size = max(0, size - taken_bytes)
            self.window_bytes += taken_bytes
            if self.window_bytes > limit:
                raise LimitExceeded("window", self.window_bytes, "max_window_bytes", limit)
            self.window.extend(taken)
            if self.window_remaining is not None:
                self.window_remaining -= len(taken)
                if self.window_remaining <= 0:
                    self.window_remaining = None
                    self._finish_window()
            elif len(self.window) >= self.config.max_window_size:
                self._finish_window()

    def _finish_window(self) -> None:
        if self.partial_timer is not None:
            self.partial_timer.cancel()
            self.partial_timer = None
        self._queue(Window(self.window_version, self.window, self.window[-1][0]))
        self.window = []
        self.window_bytes = 0

    def _arm_partial(self) -> None:
        """A window left unfinished is stored and acknowledged if its sender pauses (partial_window_delay)."""
        if self.window and self.partial_timer is None and not self.closed:
            self.partial_timer = self.loop.call_later(self.config.partial_window_delay, self._flush_partial)

    def _flush_partial(self) -> None:
        self.partial_timer = None
        if self.window and not self.closed:
            self._finish_window()

    def _queue(self, window: Window) -> None:
        """Start storing the window now (its append overlaps the next window's decoding); ack in order."""
        if window.events or window.batches is not None:
            window.stored = self.loop.create_task(self._append(window))
            window.stored.add_done_callback(_retrieve)
        self.jobs.append(window)
        self.jobs_ready.set()
        self._check_pressure()

    def _check_pressure(self) -> None:
        """Pause reading while PAUSE_AT_WINDOWS windows are being decoded or stored; resume at RESUME_AT_WINDOWS."""
        if self.transport is None or self.closed:
            return
        busy = len(self.jobs) + self.decoding
        if busy >= PAUSE_AT_WINDOWS:
            self.gate.hold(BUDGET)
        elif busy <= RESUME_AT_WINDOWS:
            self.gate.release(BUDGET)

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
            batches = build_batches(window.events, tag=cfg.tag, tag_from_beat=cfg.tag_from_beat, peer=self.peer,
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
                window = self.jobs[0]
                if window.stored is not None:
                    self.storing = True
                    self._arm_keepalive(window.version)
                    try:
                        await asyncio.shield(window.stored)
                    finally:
                        self.storing = False
                        if self.keepalive_timer is not None and not self.decoding:
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
            if (self.storing or self.decoding) and not self.closed and self.transport is not None:
                self.transport.write(encode_ack(version, 0))
                self.server.metrics.keepalives.inc()
                self._arm_keepalive(version)

        self.keepalive_timer = self.loop.call_later(self.config.keepalive_interval, keepalive)

    # --- idle timeout, errors, shutdown ---

    def settled(self) -> bool:
        return self.closed or not (self.window or self.pending or self.jobs or self.storing or self.decoding)

    async def settle(self) -> None:
        """Every window received is stored and acknowledged: what a paused sender left unfinished is stored
        and acknowledged as a partial window (as after partial_window_delay) rather than waited for."""
        self._flush_partial()
        await wait_until(self.settled)

    def close(self) -> None:
        """Close after the acks already written are sent (abort() drops them)."""
        if self.transport is not None:
            self.transport.close()
        else:
            self._shutdown()

    def _holds_events(self) -> bool:
        return bool(self.storing or self.jobs or self.window or self.pending)

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
        for item in self.pending:
            if type(item) is _Decoding:
                for part in item.parts:
                    part.cancel()
        self.pending.clear()
        if self in self.server.connections:
            self.server.connections.discard(self)
            self.server.guard.release(self.peer)
            self.server.metrics.connections.dec()
