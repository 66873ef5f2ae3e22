"""From accepted logjam messages to stored batches: decode the JSON body, count, append durably.

Shared by the device side (ROUTER / PULL) and the consumer side (SUB).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import msgpack
import orjson
import zmq
from prometheus_client import Counter

from logport.batch import entry_head, pack_entry
from logport.config import LogjamConfig
from logport.errors import ProtocolError
from logport.protocols.logjam import DataMessage, InvalidMessage, decompress, event_time_of
from logport.runtime import Runtime
from logport.servers._guard import ThrottledLog

if TYPE_CHECKING:
    from logport.protocols._logjam_scan import Drained

log = logging.getLogger("logport.logjam")

SOURCE = "logjam"

# packs as batch.py's packer does (encode_batch, the reference for stored_body)
_packer = msgpack.Packer(use_bin_type=True, autoreset=True, unicode_errors="surrogateescape")

# A message taken: (stored body, tag, app-env, topic, body as sent, compression, the meta's created_ms or 0),
# what the store append and the publisher need, as a tuple (a batch makes thousands of them).
Taken = tuple[bytes, str, bytes, bytes, bytes, int, int]

_pack_body: Callable[[bytes], tuple[bytes, str | None, int | float | None] | None] | None
_accept_batch: Callable[[list[tuple[list[bytes], str]], bool, int, str, int], list[Taken | None]] | None
try:
    from logport.protocols._logjam_scan import accept_batch as _accept_batch
    from logport.protocols._logjam_scan import pack_body as _pack_body
except ImportError:  # installed without a C compiler: bodies are decoded in Python
    _pack_body = _accept_batch = None

# The C pass draining a socket itself (built where libzmq's headers were), on pyzmq's own libzmq; None: the
# listener takes messages with pyzmq and hands them to the C pass (or the Python path) as lists of frames.
drain: Callable[[int, bool, int, int, str, int, int], Drained] | None = None
try:
    from zmq.backend.cython import _zmq as _zmq_backend

    from logport.protocols._logjam_scan import bind_libzmq
    from logport.protocols._logjam_scan import drain as _drain_c

    if bind_libzmq(_zmq_backend.__file__):
        drain = _drain_c
except ImportError:
    pass


def receive_message(sock: zmq.Socket[bytes]) -> tuple[list[bytes], zmq.Frame]:
    """One whole message and its first Frame (for `peer_address`), or zmq.Again: recv_multipart less
    its per-frame RCVMORE lookup (a Frame knows whether more follow), a sixth of a receive's cost."""
    first = part = sock.recv(zmq.NOBLOCK, copy=False)
    frames = [part.bytes]
    while part.more:
        part = sock.recv(0, copy=False)
        frames.append(part.bytes)
    return frames, first


def peer_address(frame: zmq.Frame) -> str:
    """The sender's IP address as libzmq knows it (ZeroMQ does not tell the port)."""
    try:
        return str(frame.get("Peer-Address"))
    except zmq.ZMQError:
        return "unknown"


class LogjamMetrics:
    """Counters of the logjam listener, consumer and republisher (`logport_logjam_*`)."""

    def __init__(self, runtime: Runtime) -> None:
        r = runtime.metrics.registry
        self.received = Counter("logport_logjam_messages_received", "Messages read from a socket", ["socket"],
                                registry=r)
        self.invalid = Counter("logport_logjam_invalid_messages", "Messages refused (not stored, not published)",
                               ["reason"], registry=r)
        self.stored = Counter("logport_logjam_messages_stored", "Messages stored durably", ["socket"], registry=r)
        self.published = Counter("logport_logjam_messages_published", "Messages sent on PUB", ["kind"], registry=r)
        self.pings = Counter("logport_logjam_pings", "Pings answered", registry=r)
        self.lost = Counter("logport_logjam_lost_messages", "Sequence gaps seen by the consumer", ["endpoint"],
                            registry=r)
        self.restarts = Counter("logport_logjam_sequence_restarts", "Devices whose sequence went back",
                                ["endpoint"], registry=r)
        self.reconnects = Counter("logport_logjam_reconnects", "Subscriptions reopened after silence",
                                  ["endpoint"], registry=r)
        self.store_errors = Counter("logport_logjam_store_errors", "Appends that failed", registry=r)
        self.invalid_logs: dict[str, ThrottledLog] = {}  # reason -> its throttled log line


@dataclass(slots=True)
class Accepted:
    """A message that decoded: what is stored, and what is needed to publish it."""

    message: DataMessage
    tag: str  # "logjam.<app-env>.<topic>": what routes match
    json: bytes  # the decompressed body
    stored: bytes  # the stored batch body

    def taken(self) -> Taken:
        m = self.message
        created_ms = m.meta.created_ms if m.meta is not None else 0
        return self.stored, self.tag, m.app_env, m.topic, m.body, m.compression, created_ms


class MessageDecoder:
    """Turns a DataMessage into its stored batch, or raises InvalidMessage / LimitExceeded."""

    def __init__(self, config: LogjamConfig) -> None:
        self.limit = config.max_decompressed_size
        self._names: dict[tuple[bytes, bytes], tuple[str, str, str]] = {}  # (app-env, topic) -> str forms, tag
        # (tag, peer, app-env, topic, received_on) -> the packed pieces of a stored body that repeat
        self._pieces: dict[tuple[str, str, str, str, str], tuple[bytes, bytes, bytes]] = {}

    def take_batch(self, batch: list[tuple[list[bytes], str]], router: bool, received_on: str) -> list[Taken | None]:
        """A batch of (frames, peer) from a ROUTER (routing id first) or PULL socket in one C pass: each message's
        Taken, or None where the Python path (read_*_message, then `accept`) must decide, which is every
        message when the C extension is not built. What the C pass takes is what that path would make."""
        if _accept_batch is None:
            return [None] * len(batch)
        return _accept_batch(batch, router, self.limit, received_on, int(time.time() * 1000))

    def accept(self, message: DataMessage, peer: str, received_on: str) -> Accepted:
        meta = message.meta
        json = decompress(message.body, message.compression, self.limit)
        created_ms = meta.created_ms if meta is not None and meta.created_ms else int(time.time() * 1000)
        # the body's JSON to its stored entry in one C pass; the Python path (the reference) decides the rest
        packed = _pack_body(json) if _pack_body is not None else None
        entry: tuple[bytes, ...]
        if packed is not None:
            record_bytes, started_at, started_ms = packed
            seconds, nanos = event_time_of({"started_at": started_at, "started_ms": started_ms}, created_ms)
            entry = (entry_head(seconds, nanos), record_bytes)
        else:
            entry = (self._entry_in_python(json, created_ms),)
        names = self._names.get((message.app_env, message.topic))
        if names is None:
            names = self._names_of(message.app_env, message.topic)
        app_env, topic, tag = names
        device, sequence = (meta.device, meta.sequence) if meta is not None else (0, 0)
        stored = self.stored_body(tag, entry, peer, app_env, topic, device, sequence, created_ms, received_on)
        return Accepted(message, tag, json, stored)

    def stored_body(self, tag: str, entry: tuple[bytes, ...], peer: str, app_env: str, topic: str, device: int,
                    sequence: int, created_ms: int, received_on: str) -> bytes:
        """encode_batch(tag, entry, {"size": 1, "source": "logjam", "peer": ..., "received_on": ...}), byte for
        byte, from the packed pieces that repeat for a stream (a sixth of the cost: building and packing the
        option dict cost more per message than decoding its JSON in C)."""
        key = (tag, peer, app_env, topic, received_on)
        pieces = self._pieces.get(key)
        if pieces is None:
            pack = _packer.pack
            head = b"\x93" + pack(tag)
            option_head = b"\x89" + b"".join(pack(v) for v in ("size", 1, "source", SOURCE, "peer", peer,
                                                                "app_env", app_env, "topic", topic, "device"))
            pieces = head, option_head, pack("received_on") + pack(received_on)
            if len(self._pieces) < 10_000:
                self._pieces[key] = pieces
        head, option_head, option_tail = pieces
        size = sum(map(len, entry))
        bin_head = (b"\xc4" + size.to_bytes(1, "big") if size < 0x100
                    else b"\xc5" + size.to_bytes(2, "big") if size < 0x10000 else b"\xc6" + size.to_bytes(4, "big"))
        pack_int = _packer.pack
        return b"".join((head, bin_head, *entry, option_head, pack_int(device), b"\xa8sequence", pack_int(sequence),
                         b"\xaacreated_ms", pack_int(created_ms), option_tail))

    @staticmethod
    def _entry_in_python(json: bytes, created_ms: int) -> bytes:
        """The stored `[time, record]` entry of a body, without the C pass."""
        try:
            record: Any = orjson.loads(json)
        except orjson.JSONDecodeError as e:
            raise InvalidMessage("json", f"body is not JSON: {e}") from None
        if not isinstance(record, dict):
            raise InvalidMessage("json", f"body is a JSON {type(record).__name__}, not an object")
        seconds, nanos = event_time_of(record, created_ms)
        return pack_entry(seconds, nanos, record)

    def _names_of(self, app_env: bytes, topic: bytes) -> tuple[str, str, str]:
        names = (app_env.decode(), topic.decode(), f"logjam.{app_env.decode()}.{topic.decode()}")
        if len(self._names) < 10_000:
            self._names[(app_env, topic)] = names
        return names


def log_invalid(metrics: LogjamMetrics, error: ProtocolError, peer: str, socket: str) -> None:
    """Count a refused message by reason; log it, at most one line per reason per interval (a flood of
    bad messages must not flood the log: the next line says how many were not logged)."""
    reason = error.reason if isinstance(error, InvalidMessage) else "limit"
    metrics.invalid.labels(reason).inc()
    throttled = metrics.invalid_logs.get(reason)
    if throttled is None:
        throttled = metrics.invalid_logs[reason] = ThrottledLog(log)
    throttled.warning("invalid logjam message", peer=peer, socket=socket, reason=reason, error=str(error))


async def store_taken(runtime: Runtime, default_segment: str, taken: list[Taken]) -> None:
    """Append every taken message (one stored event each) durably, grouped per routed segment."""
    await runtime.append_routed(default_segment, ((item[1], item[0], 1) for item in taken))


async def store_drained(runtime: Runtime, default_segment: str, drained: Drained) -> None:
    """Append a drained batch's framed bodies durably, as store_taken appends the same messages."""
    await runtime.submit_framed(default_segment, drained.framed, drained.runs)


async def store_accepted(runtime: Runtime, default_segment: str, accepted: list[Accepted]) -> None:
    """Append every accepted message (one stored event each) durably, grouped per routed segment."""
    await runtime.append_routed(default_segment, ((item.tag, item.stored, 1) for item in accepted))
