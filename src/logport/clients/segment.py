"""Segment-protocol clients: an exactly-once asyncio appender, an asyncio tail reader,
a blocking reader (the Spark source's `server` option), and `logport cat --server` / `logport send segment`.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import logging
import socket
import ssl as ssl_module
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from typing import IO, Any

from logport import errors
from logport.batch import BatchDecodeError, Entry, decode_batch
from logport.clients import flags
from logport.clients.lines import count as events
from logport.clients.stream import (
    InputDoesNotFit,
    Sender,
    SenderInput,
    SendProgress,
    Waiting,
    run_sender,
)
from logport.eventjson import write_events
from logport.protocols import segment as sp
from logport.store import frames
from logport.store.reader import check_start, walk_frames

log = logging.getLogger("logport.segment.client")

DEFAULT_PORT = 12345
READ_SIZE = 1024 * 1024


class _FrameStitcher:
    """Whole frames out of successive reads, which may end inside a frame: its start waits for the next read."""

    def __init__(self, pos: int) -> None:
        self.pos = pos  # offset of leftover[0], always a frame boundary
        self.leftover = b""

    @property
    def read_at(self) -> int:
        return self.pos + len(self.leftover)

    def feed(self, data: bytes | memoryview) -> list[sp.Frame]:
        """The whole frames that `data` (the bytes after the last read's) completes and holds, each body a view
        of `data` (cut by the C scan of protocols/_segment_scan.c) but for one begun in the last read."""
        found: list[sp.Frame] = []
        if self.leftover:  # a frame begun in the last read: only its own bytes are joined, not all of `data`
            leftover = self.leftover
            data = memoryview(data)
            if len(leftover) < frames.HEADER_SIZE:
                take = frames.HEADER_SIZE - len(leftover)
                leftover, data = leftover + bytes(data[:take]), data[take:]
            if len(leftover) < frames.HEADER_SIZE:
                self.leftover = leftover
                return found
            frame_type, length = frames.HEADER.unpack_from(leftover, 0)
            take = frames.HEADER_SIZE + length - len(leftover)
            if take > len(data):
                self.leftover = leftover + bytes(data)
                return found
            whole = leftover + bytes(data[:take])
            data = data[take:]
            self.leftover = b""
            found.append((self.pos, frame_type, memoryview(whole)[frames.HEADER_SIZE :]))
            self.pos += len(whole)
        cut, consumed = sp.frame_list(data, self.pos)
        if found:
            found += cut
        else:
            found = cut
        self.leftover = bytes(data[consumed:])
        self.pos += consumed
        return found


class SegmentRequestFailed(errors.LogportError):
    """The server answered a request with an error reply."""

    def __init__(self, reply: sp.Message) -> None:
        super().__init__(f"segment server refused: {reply}")
        self.reply = reply


class AcknowledgedDataLost(errors.LogportError):
    """The server's ack level went backwards: data it had acknowledged is gone (fsync off, disk lost)."""


class InputDoesNotResume(InputDoesNotFit):
    """`logport send segment --connection-id`: the input does not line up with what the server stored for the id."""


def reply_error(reply: sp.Message) -> errors.LogportError:
    """The exception an error reply stands for (store errors where one matches)."""
    if isinstance(reply, sp.NoSuchSegment):
        return errors.NoSuchSegment(reply.segment)
    if isinstance(reply, sp.SegmentIsSealed):
        return errors.SegmentSealed(reply.segment)
    if isinstance(reply, sp.SegmentIsTruncated):
        return errors.OffsetTruncated(reply.segment, -1, reply.start_offset)
    if isinstance(reply, sp.InvalidSegmentName):
        return errors.InvalidSegmentName(reply.segment, reply.reason)
    if isinstance(reply, sp.AuthenticationFailed):
        return errors.AuthenticationError(f"segment server: {reply.message}")
    if isinstance(reply, sp.OperationFailed):  # a read of corrupt data on the hub names its range
        corrupt = (errors.DataGivenUp.from_message(reply.segment, reply.message)
                   or errors.CorruptData.from_message(reply.segment, reply.message))
        if corrupt is not None:
            return corrupt
    return SegmentRequestFailed(reply)


def parse_server(server: str, default_port: int = DEFAULT_PORT) -> tuple[str, int]:
    return flags.parse_server(server, default_port)


# --- a blocking client (plain sockets): the Spark data source reads a hub with it ---


CHECK_READS = 4  # windows BlockingSegmentClient.could_start_frame reads
READS_AHEAD = 3  # reads BlockingSegmentClient.iter_frames and SegmentReader.frames ask for at once
# What a read at the tail asks for: its replies come as the hub has the bytes and go on one by one as they come,
# so asking for much costs this side no memory (TCP paces the hub); a tail reader that fell behind by more than
# its read_size waited a round trip per read_size (4 MiB reads of 64 KiB events beside one appender: 171-175 ms
# behind at the end of 256 MiB; 16 MiB: 13-32 ms; load average 4-5)
TAIL_READ = 256 * 1024 * 1024
_SPARE_REFS = 3  # sys.getrefcount of a spare buffer nothing else holds: the list, the loop, the call


class _ReadEnough(Exception):
    """could_start_frame has read the windows it reads."""


class BlockingSegmentClient:
    """One socket, one request at a time. Not thread-safe: one per thread."""

    def __init__(self, host: str, port: int, timeout: float = 10.0, *, token: str = "",
                 ssl: ssl_module.SSLContext | None = None, read_size: int = 4 * READ_SIZE) -> None:
        self.timeout = timeout
        self.read_size = read_size
        sock = socket.create_connection((host, port), timeout=timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock: socket.socket = ssl.wrap_socket(sock, server_hostname=host) if ssl is not None else sock
        self.conn = sp.Connection(sp.Role.CLIENT)
        if token:
            reply = self._request(sp.Authenticate(token))
            if not isinstance(reply, sp.Authenticated):
                raise errors.AuthenticationError(f"segment server refused the token: {reply}")

    def _send(self, message: sp.Message) -> None:
        self.sock.sendall(self.conn.send(message))

    def _receive(self) -> sp.Message:
        while True:
            event = self.conn.next_event()
            if event is sp.NEED_DATA:
                data = self.sock.recv(1 << 20)
                self.conn.receive_data(data)
                if not data:
                    self.conn.next_event()  # raises if closed mid-message
                    raise ConnectionError("segment server closed the connection")
                continue
            if isinstance(event, sp.KeepAlive):
                continue
            assert isinstance(event, sp.Message)
            if isinstance(event, sp.ERROR_REPLIES):
                raise reply_error(event)
            return event

    def _request(self, message: sp.Message) -> sp.Message:
        self._send(message)
        return self._receive()

    def list_segments(self) -> list[str]:
        reply = self._request(sp.ListSegments())
        assert isinstance(reply, sp.SegmentList), reply
        return list(reply.segments)

    def hub_id(self) -> str:
        """The hub's stable identity (logport.store.identity)."""
        reply = self._request(sp.GetHubInfo())
        assert isinstance(reply, sp.HubInfo), reply
        return reply.hub_id

    def info(self, name: str) -> tuple[int, int, bool]:
        """(start offset, end offset, sealed)."""
        reply = self._request(sp.GetSegmentInfo(name))
        assert isinstance(reply, sp.SegmentInfoReply), reply
        return reply.start_offset, reply.end_offset, reply.sealed

    def read(self, name: str, offset: int, length: int, wait_ms: int = 0) -> tuple[bytes, bool, bool]:
        """Raw bytes from `offset` (up to `length`): (data, at tail, end of segment)."""
        self._send(sp.ReadSegment(name, offset, length, wait_ms))
        parts: list[bytes] = []
        got = 0
        while True:
            try:
                reply = self._receive()
            except errors.CorruptData:
                if got:  # what came before the corrupt range is sound; the next read raises again
                    return b"".join(parts), False, False
                raise
            if not isinstance(reply, sp.SegmentRead) or reply.segment != name or reply.offset != offset + got:
                raise sp.SegmentProtocolError(f"unexpected reply to ReadSegment: {reply!r:.200}")
            parts.append(reply.data)
            got += len(reply.data)
            if got >= length or reply.at_tail:
                return b"".join(parts), reply.at_tail, reply.end_of_segment

    def could_start_frame(self, name: str, offset: int, reads: int = CHECK_READS) -> bool:
        """False when no frame can start at `offset`; True when one may (exact at the start and the end).

        The segment protocol tells no frame boundaries, and proving one means reading every frame
        before it. A few windows are cheap: from a frame start every header is one the store writes,
        no frame passes the end and the last one ends exactly there, which the bytes from inside a
        frame rarely keep up for long.
        """
        start, end, _ = self.info(name)
        if offset in (start, end):
            return True
        if not start < offset < end:
            return False
        done = 0

        def pread(position: int, max_bytes: int, limit: int) -> bytes:
            nonlocal done
            if done == reads:
                raise _ReadEnough
            done += 1
            return self.read(name, position, min(max_bytes, limit - position))[0]

        position = offset
        try:
            for frame_offset, frame_type, length, _ in walk_frames(pread, offset, end):
                if frame_type not in frames.STORED_TYPES:
                    return False
                position = frame_offset + frames.HEADER_SIZE + length
        except _ReadEnough:
            return True
        return position == end  # short of it: a header or frame ran past the end

    def check_start(self, name: str, offset: int) -> None:
        """Refuse a start offset below the segment's start, past its end, or (as far as a few reads tell)
        inside a frame, as DirectoryReader.check_start does."""
        start, end, _ = self.info(name)
        check_start(name, offset, start, end, self.could_start_frame)

    def iter_frames(self, name: str, start: int, end: int) -> Iterator[tuple[int, int, memoryview]]:
        """(offset, type, body) of each whole frame in [start, end); `start` on a frame boundary.

        Up to READS_AHEAD reads are asked for at once, so the server reads the next range while this
        side cuts the last one into frames. Their replies may interleave (the server answers reads
        concurrently); each carries its offset, which puts it in place. When a read fails, the frames
        before the failure come first, then the error; the connection is closed (replies of the reads
        still asked for would follow).
        """
        stitch = _FrameStitcher(start)
        asked: list[tuple[int, int]] = []  # (offset, length) of the reads asked for, in order
        early: dict[int, sp.SegmentRead] = {}  # replies for a later read, by offset
        next_at = start
        try:
            while stitch.read_at < end:
                while len(asked) < READS_AHEAD and next_at < end:
                    length = min(self.read_size, end - next_at)
                    self._send(sp.ReadSegment(name, next_at, length, 0))
                    asked.append((next_at, length))
                    next_at += length
                offset, length = asked[0]
                got, at_tail = 0, False
                while got < length and not at_tail:  # each reply's frames as it comes (they were joined first)
                    reply = early.pop(offset + got, None)
                    if reply is None:
                        try:
                            received = self._receive()
                        except errors.LogportError:  # an error reply (CorruptData...) ends the read; the frames
                            asked.pop(0)  # before it have gone out already
                            raise
                        reply = _in_place(received, name, offset + got, early)
                        if reply is None:
                            continue
                    got += len(reply.data)
                    at_tail = reply.at_tail
                    if got >= length or at_tail:
                        asked.pop(0)  # all of its replies are in: stopped now, the connection is in step
                    yield from stitch.feed(reply.data)
                if not got:
                    return
                if at_tail and stitch.read_at < end:
                    return
        finally:
            if asked or early:  # replies still to come for reads not taken: the connection is out of step
                self.close()

    def create(self, name: str) -> bool:
        reply = self._request(sp.CreateSegment(name))
        assert isinstance(reply, sp.SegmentCreated), reply
        return reply.created

    def seal(self, name: str) -> int:
        reply = self._request(sp.SealSegment(name))
        assert isinstance(reply, sp.SegmentSealed), reply
        return reply.end_offset

    def truncate(self, name: str, offset: int) -> int:
        reply = self._request(sp.TruncateSegment(name, offset))
        assert isinstance(reply, sp.SegmentTruncated), reply
        return reply.start_offset

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self) -> BlockingSegmentClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# --- asyncio plumbing shared by the appender and the reader ---


class _ClientProtocol(asyncio.BufferedProtocol):
    """Frames the server's messages and hands each to `on_message`.

    A SegmentRead of IN_PLACE bytes or more is received straight into a buffer of its own size and handed on
    with its data a view of that buffer: the only copy of a reply's bytes on this side is the kernel's. Every
    other message (and a small SegmentRead) goes whole through the sans-IO connection, as before.
    """

    IN_PLACE = 64 * 1024
    SCRATCH = 256 * 1024
    SPARES = 4
    SPARE_SIZE = 2 * 1024 * 1024 + 4096  # a 2 MiB reply (the server's read_reply_max) and its fields

    def __init__(self, on_message: Any, on_lost: Any) -> None:
        self.conn = sp.Connection(sp.Role.CLIENT)
        self.on_message = on_message
        self.on_lost = on_lost
        self.transport: asyncio.Transport | None = None
        self.can_write = asyncio.Event()
        self.can_write.set()
        self.closed = False
        self.last_received = time.monotonic()
        self._scratch = memoryview(bytearray(self.SCRATCH))
        self._pending = bytearray()  # the start of a message that is not received whole yet
        self._body: memoryview | None = None  # a large SegmentRead's body, received in place
        self._spares: list[bytearray] = []  # buffers of bodies handed on, taken again once nothing uses them
        self._body_filled = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's transports are not asyncio.Transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass

    def _body_buffer(self, length: int) -> memoryview:
        """A buffer of `length` bytes for a reply's body: a spare one that nothing refers to any more (the frames
        handed out of it are views that hold it), else a new one. A new 2 MiB bytearray is zeroed and faults in
        each of its pages: reusing one took a third of this side's CPU off."""
        spares = self._spares
        for i in range(len(spares)):
            spare = spares[i]
            if len(spare) >= length and sys.getrefcount(spare) <= _SPARE_REFS:
                del spares[i]
                break
        else:
            spare = bytearray(max(length, self.SPARE_SIZE))
            if len(self._spares) >= self.SPARES:
                self._spares.pop(0)
        self._spares.append(spare)
        return memoryview(spare)[:length]

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._body is not None:
            return self._body[self._body_filled :]
        return self._scratch

    def buffer_updated(self, nbytes: int) -> None:
        self.last_received = time.monotonic()
        try:
            if self._body is not None:
                self._body_filled += nbytes
                if self._body_filled == len(self._body):
                    body, self._body = self._body, None
                    self.on_message(sp.decode_segment_read(body))
                return
            self._frame(self._scratch[:nbytes])
        except errors.RemoteProtocolError as e:
            self.on_lost(e)
            self.abort()

    def _frame(self, data: memoryview) -> None:
        """Whole messages out of `data` (after what is pending); the rest waits for more."""
        limit = self.conn.limits.max_message_size
        if self._pending:  # complete the pending message alone (not all of it again per chunk)
            pending = self._pending
            take = sp.HEADER_SIZE - len(pending) if len(pending) < sp.HEADER_SIZE else 0
            pending += data[:take]
            data = data[take:]
            if len(pending) < sp.HEADER_SIZE:
                return
            type_code, length = sp.HEADER.unpack_from(pending, 0)
            if type_code == sp.SegmentRead.TYPE and length >= self.IN_PLACE or length > limit:
                data = memoryview(bytes(pending) + bytes(data))  # a header only: the loop below takes it
                self._pending = bytearray()
            else:
                take = sp.HEADER_SIZE + length - len(pending)
                pending += data[:take]
                data = data[take:]
                if len(pending) < sp.HEADER_SIZE + length:
                    return
                self._pending = bytearray()
                self.conn.receive_data(bytes(pending))
                while (event := self.conn.next_event()) is not sp.NEED_DATA:
                    self.on_message(event)
        pos, end = 0, len(data)
        while end - pos >= sp.HEADER_SIZE:
            type_code, length = sp.HEADER.unpack_from(data, pos)
            if type_code == sp.SegmentRead.TYPE and length >= self.IN_PLACE:
                if length > limit:
                    raise errors.LimitExceeded("message", length, "max_message_size", limit)
                have = min(length, end - pos - sp.HEADER_SIZE)
                body = self._body_buffer(length)
                body[:have] = data[pos + sp.HEADER_SIZE : pos + sp.HEADER_SIZE + have]
                pos += sp.HEADER_SIZE + have
                if have < length:  # the rest comes straight into it
                    self._body, self._body_filled = body, have
                    return
                self.on_message(sp.decode_segment_read(body))
                continue
            stop = pos + sp.HEADER_SIZE + length
            if stop > end:
                if type_code != sp.SegmentRead.TYPE and length > limit:
                    self.conn.receive_data(bytes(data[pos:]))  # the connection names the limit
                    self.conn.next_event()
                break
            self.conn.receive_data(bytes(data[pos:stop]))
            while (event := self.conn.next_event()) is not sp.NEED_DATA:
                self.on_message(event)
            pos = stop
        if pos < end:
            self._pending += data[pos:]

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.can_write.set()
        self.on_lost(exc or ConnectionError("segment server closed the connection"))

    def pause_writing(self) -> None:
        self.can_write.clear()

    def resume_writing(self) -> None:
        self.can_write.set()

    @property
    def is_closing(self) -> bool:
        """The connection is gone, or going (connection_lost may not have run yet): write nothing more."""
        return self.closed or self.transport is None or self.transport.is_closing()

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self.transport is None or self.closed:
            raise ConnectionError("not connected")
        # a transport already closing drops it: connection_lost comes next (asyncio would log each write)
        if not self.transport.is_closing():
            self.transport.write(data)

    def writelines(self, parts: list[bytes]) -> None:
        if self.transport is None or self.closed:
            raise ConnectionError("not connected")
        if not self.transport.is_closing():
            self.transport.writelines(parts)

    def send(self, message: sp.Message) -> None:
        self.write(self.conn.send(message))

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()


def _in_place(received: sp.Message, segment: str, expected: int,
              early: dict[int, sp.SegmentRead]) -> sp.SegmentRead | None:
    """`received` when it is the reply a read of `segment` waits for at `expected`; None when it belongs to a
    read asked for later (kept in `early` by its offset, until that read comes to it); anything else is the
    server out of step with the reads asked for."""
    if not isinstance(received, sp.SegmentRead) or received.segment != segment:
        raise sp.SegmentProtocolError(f"unexpected reply to ReadSegment: {received!r:.200}")
    if received.offset != expected:
        early[received.offset] = received
        return None
    return received

async def _connect(host: str, port: int, on_message: Any, on_lost: Any, *, ssl: ssl_module.SSLContext | None,
                   timeout: float) -> _ClientProtocol:
    loop = asyncio.get_running_loop()
    async with asyncio.timeout(timeout):  # not wait_for: on 3.11 it can swallow a cancellation (7511765)
        _, protocol = await loop.create_connection(lambda: _ClientProtocol(on_message, on_lost), host, port, ssl=ssl)
    return protocol


# --- the appender ---


class SegmentAppender:
    """Appends events to one segment exactly once, across reconnects and server restarts.

    Events are kept until the server acknowledges them (DataAppended: durable).
    After a reconnect the server's ack level for the connection id says where to
    resume; everything after it is sent again, and the server stores none of it twice.
    Events gather into blocks of `block_size` bytes as they are appended; a block
    keeps its bounds across retransmissions, so acks always fall on block ends.
    """

    def __init__(self, host: str, port: int, segment: str, *, connection_id: uuid.UUID | None = None,
                 ssl: ssl_module.SSLContext | None = None, token: str = "", block_size: int = 1024 * 1024,
                 linger: float = 0.001, max_unacked_bytes: int = 64 * 1024 * 1024,
                 connect_timeout: float = 10.0, reconnect_delay: float = 0.05, max_reconnect_delay: float = 2.0,
                 retry_for: float = 300.0, waiting: Callable[[str, str], None] | None = None) -> None:
        self.host, self.port, self.segment = host, port, segment
        self.connection_id = connection_id or uuid.uuid4()
        self.ssl, self.token = ssl, token
        self.block_size = block_size
        self.linger = linger
        self.max_unacked_bytes = max_unacked_bytes
        self.connect_timeout = connect_timeout
        self.reconnect_delay, self.max_reconnect_delay = reconnect_delay, max_reconnect_delay
        self.retry_for = retry_for  # give up after failing to connect for this long
        self.waiting = waiting  # told (server, reason) of each attempt to set up that failed
        self.ack_level: int | None = None  # the server's, once known
        self.reconnects = 0
        self.retransmitted_bytes = 0  # sent again after a reconnect (the server stores none of it twice)
        self._high_water = 0  # the highest connection offset ever sent
        # unacknowledged whole blocks: (size, the headers and bodies of their Event messages, uncopied)
        self._blocks: collections.deque[tuple[int, list[bytes]]] = collections.deque()
        self._pending: list[bytes] = []  # headers and bodies not yet in a block
        self._pending_size = 0
        self._unacked_bytes = 0  # in _blocks and _pending
        self._sent = 0  # how many of _blocks went out on the current connection
        self._sent_offset = 0  # connection offset up to which this connection sent
        self._wake = asyncio.Event()  # more to send
        self._acked = asyncio.Event()  # the ack level moved (or the connection state changed)
        self._protocol: _ClientProtocol | None = None
        self._setup: asyncio.Future[sp.Message] | None = None
        self._lost: asyncio.Future[BaseException] | None = None
        self._task: asyncio.Task[None] | None = None
        self._error: BaseException | None = None
        self._closing = False
        self._set_up = False  # the current session got its AppendSetup
        self._setup_level: int | None = None  # the ack level it started from
        self._loss_reported = False  # the loss of the last session that was set up was logged

    async def start(self) -> SegmentAppender:
        self._task = asyncio.get_running_loop().create_task(self._run())
        return self

    async def __aenter__(self) -> SegmentAppender:
        return await self.start()

    async def __aexit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        # on an error or a cancellation nothing more is waited for: what is unacknowledged stays so
        await self.close(flush=exc_type is None)

    @property
    def next_offset(self) -> int | None:
        """Connection offset after the last appended event (None before the first setup)."""
        return None if self.ack_level is None else self.ack_level + self._unacked_bytes

    async def initial_ack_level(self) -> int:
        """The ack level of the first AppendSetup: the connection offset up to which events this connection id
        appended before (an earlier run) are stored. Waits for the setup; call it before appending."""
        while self.ack_level is None:
            self._check()
            self._acked.clear()
            await self._acked.wait()
        return self.ack_level

    async def append(self, body: bytes) -> None:
        """Queue one event; waits while too much is unacknowledged (back-pressure)."""
        await self.append_many((body,))

    async def append_many(self, bodies: list[bytes] | tuple[bytes, ...]) -> None:
        while self._unacked_bytes >= self.max_unacked_bytes:
            self._check()
            self._acked.clear()
            await self._acked.wait()
        self._check()
        added = sp.append_event_frames(self._pending, bodies)  # a header for each body; the bodies as they are
        self._pending_size += added
        self._unacked_bytes += added
        if self._pending_size >= self.block_size:
            self._seal_block()
        self._wake.set()

    def _seal_block(self) -> None:
        if self._pending:
            self._blocks.append((self._pending_size, self._pending))
            self._pending = []
            self._pending_size = 0

    async def flush(self) -> None:
        """Wait until everything appended so far is durable on the server."""
        while self._blocks or self._pending:
            self._check()
            self._acked.clear()
            await self._acked.wait()
        self._check()

    def _check(self) -> None:
        if self._error is not None:
            raise self._error
        if self._task is None:
            raise errors.LocalProtocolError("SegmentAppender used before start()")

    def abort_connection(self) -> None:
        """Cut the current connection (tests: a network failure at a random moment)."""
        if self._protocol is not None:
            self._protocol.abort()

    async def close(self, *, flush: bool = True) -> None:
        try:
            if flush and self._error is None and self._task is not None:
                await self.flush()
        finally:
            self._closing = True
            self._wake.set()
            if self._task is not None:
                self._task.cancel()
                await asyncio.gather(self._task, return_exceptions=True)
            if self._protocol is not None:
                self._protocol.abort()

    # -- the connection loop --

    @property
    def peer(self) -> str:
        return f"{self.host}:{self.port}"

    async def _run(self) -> None:
        delay = self.reconnect_delay
        failing_since: float | None = None
        refused_before = False  # the last session was set up only to refuse every block
        while not self._closing:
            self._set_up = False
            try:
                await self._session()
            except errors.AuthenticationError as e:
                self._fail(e)
                return
            except (ConnectionError, OSError, TimeoutError, errors.RemoteProtocolError, SegmentRequestFailed) as e:
                reason = errors.failure_reason(e)
                if self._set_up and self.ack_level != self._setup_level:
                    self._loss_reported = False  # that session got something stored: this is a new outage
                if self._set_up and not self._loss_reported:
                    self._loss_reported = True  # until a session stores something again, the retries are info
                    what = "refused a block" if isinstance(e, SegmentRequestFailed) else "went away"
                    log.warning(f"segment server {self.peer} {what} ({reason}); reconnecting, then resending"
                                f" the {self._unacked_bytes:,} bytes it had not acknowledged (it stores none twice)",
                                extra={"peer": self.peer, "error": reason})
                else:
                    log.info(f"segment server {self.peer}: {reason}; retrying",
                             extra={"peer": self.peer, "error": reason})
                    if self.waiting is not None and not self._set_up:
                        self.waiting(self.peer, reason)
                # SegmentRequestFailed is OperationFailed: a write failure or a store shutting down, worth a retry
                refused = self._set_up and isinstance(e, SegmentRequestFailed) and self.ack_level == self._setup_level
                if self._set_up and not refused:  # that session worked: start the back-off afresh
                    failing_since = None
                    delay = self.reconnect_delay
                elif refused and not refused_before:
                    # the first of a run of sessions set up only to refuse every block (OperationFailed: a full
                    # disk): retry_for counts from here (not from an older failure before a long quiet session),
                    # and the back-off keeps growing, else the client would resend all it holds every
                    # reconnect_delay for ever
                    failing_since = None
                refused_before = refused
                now = time.monotonic()
                failing_since = failing_since or now
                if now - failing_since > self.retry_for:
                    self._fail(errors.ServerUnavailable(f"segment server {self.peer}", reason, waited=self.retry_for,
                                                        connected=self._set_up))
                    return
            except errors.LogportError as e:  # an error reply no retry can fix
                self._fail(e)
                return
            finally:
                if self._protocol is not None:
                    self._protocol.abort()
                    self._protocol = None
            if self._closing:
                return
            self.reconnects += 1
            await asyncio.sleep(delay)
            delay = min(delay * 2, self.max_reconnect_delay)

    def _fail(self, error: BaseException) -> None:
        self._error = error
        self._acked.set()

    async def _session(self) -> None:
        loop = asyncio.get_running_loop()
        self._lost = loop.create_future()
        self._setup = loop.create_future()
        protocol = await _connect(self.host, self.port, self._on_message, self._on_lost, ssl=self.ssl,
                                  timeout=self.connect_timeout)
        self._protocol = protocol
        if self.token:
            protocol.send(sp.Authenticate(self.token))
        protocol.send(sp.SetupAppend(self.connection_id, self.segment))
        futures: set[asyncio.Future[Any]] = {self._setup, self._lost}
        done, _ = await asyncio.wait(futures, timeout=self.connect_timeout,
                                     return_when=asyncio.FIRST_COMPLETED)
        if self._lost.done():
            raise self._lost.result()
        if not done:
            raise TimeoutError("no AppendSetup from the segment server")
        reply = self._setup.result()
        if isinstance(reply, sp.ERROR_REPLIES):
            raise reply_error(reply)
        assert isinstance(reply, sp.AppendSetup)
        self._resume_from(reply.ack_level)
        self._set_up = True
        self._setup_level = self.ack_level
        if self._loss_reported:
            log.info(f"segment server {self.peer} is back; resending from connection offset {reply.ack_level}",
                     extra={"peer": self.peer})
        self._sent = 0
        self._sent_offset = reply.ack_level
        lost = self._lost
        while not lost.done():
            if self._sent == len(self._blocks):
                if self._pending:
                    if self.linger > 0:
                        await asyncio.sleep(self.linger)  # let a fuller block gather
                    self._seal_block()
                    continue
                self._wake.clear()
                waiter: asyncio.Future[Any] = loop.create_task(self._wake.wait())
                await asyncio.wait({waiter, lost}, return_when=asyncio.FIRST_COMPLETED)
                waiter.cancel()
                continue
            if protocol.is_closing:
                # a write found the connection gone: the rest of the blocks would go nowhere (each one a
                # `socket.send() raised exception.` from asyncio); connection_lost tells why
                await lost
                break
            if not protocol.can_write.is_set():
                waiter = loop.create_task(protocol.can_write.wait())
                await asyncio.wait({waiter, lost}, return_when=asyncio.FIRST_COMPLETED)
                waiter.cancel()
                continue
            self._send_block(protocol)
        raise lost.result()

    def _send_block(self, protocol: _ClientProtocol) -> None:
        size, parts = self._blocks[self._sent]
        start = self._sent_offset
        protocol.write(sp.encode(sp.BeginAppendBlock(self.connection_id, start, size)))
        protocol.writelines(parts)  # the transport gathers them into its writes: no copy here
        protocol.write(sp.encode(sp.EndAppendBlock(self.connection_id, start + size, size)))
        self._sent += 1
        self._sent_offset = start + size
        if start < self._high_water:
            self.retransmitted_bytes += min(self._high_water, start + size) - start
        self._high_water = max(self._high_water, start + size)

    def _resume_from(self, level: int) -> None:
        if self.ack_level is None:
            self.ack_level = level
            self._acked.set()  # initial_ack_level waits for it
            return
        self._drop_acked(level)
        if level < self.ack_level:
            raise AcknowledgedDataLost(
                f"segment server's ack level {level} for connection {self.connection_id} is below the"
                f" {self.ack_level} it acknowledged before: acknowledged data was lost"
            )

    def _drop_acked(self, level: int) -> None:
        assert self.ack_level is not None
        blocks = self._blocks
        acked = self.ack_level
        dropped = 0
        while blocks and acked + blocks[0][0] <= level:
            acked += blocks.popleft()[0]
            dropped += 1
        if level > acked:
            # not a block end: only a server that stored part of a block another process sent
            cut = level - acked
            first = b"".join(blocks[0][1]) if blocks else b""
            if not blocks or not sp.is_message_boundary(first, cut) or self._sent > dropped:
                raise errors.RemoteProtocolError(
                    f"segment server acknowledged offset {level}, which is not an event boundary (at {acked})"
                )
            blocks[0] = (len(first) - cut, [first[cut:]])
            acked = level
        if acked != self.ack_level:
            self._unacked_bytes -= acked - self.ack_level
            self._sent = max(0, self._sent - dropped)
            self.ack_level = acked
            self._acked.set()

    def _on_message(self, message: sp.Message) -> None:
        if isinstance(message, sp.DataAppended):
            if message.connection_id == self.connection_id and self.ack_level is not None:
                self._drop_acked(message.ack_level)
        elif isinstance(message, sp.AppendSetup | sp.NoSuchSegment | sp.SegmentIsSealed | sp.InvalidSegmentName
                        | sp.OperationFailed | sp.AuthenticationFailed):
            if self._setup is not None and not self._setup.done():
                self._setup.set_result(message)
            elif isinstance(message, sp.ERROR_REPLIES):
                self._lose(reply_error(message))
        elif isinstance(message, sp.WrongConnectionOffset):
            # the server refused a block: set up again and resume from its ack level
            self._lose(ConnectionError(f"server refused a block: {message}"))
        elif isinstance(message, sp.ProtocolViolation | sp.MessageTooLarge):
            self._lose(errors.LocalProtocolError(f"segment server: {message}"))

    def _lose(self, error: BaseException) -> None:
        if self._lost is not None and not self._lost.done():
            self._lost.set_result(error)
        if self._protocol is not None:
            self._protocol.abort()

    def _on_lost(self, exc: BaseException) -> None:
        if self._lost is not None and not self._lost.done():
            self._lost.set_result(exc if isinstance(exc, BaseException) else ConnectionError(str(exc)))


# --- the asyncio reader ---


class SegmentReader:
    """Reads a segment over the protocol: raw ranges, Event frames, and the entries of stored batches."""

    def __init__(self, host: str, port: int, *, ssl: ssl_module.SSLContext | None = None, token: str = "",
                 read_size: int = READ_SIZE, timeout: float = 90.0, connect_timeout: float = 10.0) -> None:
        self.host, self.port = host, port
        self.ssl, self.token = ssl, token
        self.read_size = read_size
        self.timeout = timeout  # with nothing at all received (keep-alives count) for this long, give up
        self.connect_timeout = connect_timeout
        self._protocol: _ClientProtocol | None = None
        self._replies: asyncio.Queue[sp.Message | BaseException] = asyncio.Queue()

    async def connect(self) -> SegmentReader:
        replies: asyncio.Queue[sp.Message | BaseException] = asyncio.Queue()
        self._replies = replies

        def lost(exc: BaseException) -> None:  # into this connection's queue: a closed one's loss comes late
            replies.put_nowait(exc if isinstance(exc, BaseException) else ConnectionError(str(exc)))

        self._protocol = await _connect(self.host, self.port, replies.put_nowait, lost, ssl=self.ssl,
                                        timeout=self.connect_timeout)
        if self.token:
            reply = await self._request(sp.Authenticate(self.token))
            if not isinstance(reply, sp.Authenticated):
                raise errors.AuthenticationError(f"segment server refused the token: {reply}")
        return self

    async def __aenter__(self) -> SegmentReader:
        return await self.connect()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _receive(self) -> sp.Message:
        while True:
            try:
                async with asyncio.timeout(self.timeout):
                    item = await self._replies.get()
            except TimeoutError:
                raise TimeoutError(f"nothing from the segment server for {self.timeout}s") from None
            if isinstance(item, BaseException):
                raise item
            if isinstance(item, sp.KeepAlive):
                continue
            if isinstance(item, sp.ERROR_REPLIES):
                raise reply_error(item)
            return item

    async def _request(self, message: sp.Message) -> sp.Message:
        if self._protocol is None:
            await self.connect()
        assert self._protocol is not None
        self._protocol.send(message)
        return await self._receive()

    async def info(self, segment: str) -> tuple[int, int, bool]:
        reply = await self._request(sp.GetSegmentInfo(segment))
        assert isinstance(reply, sp.SegmentInfoReply), reply
        return reply.start_offset, reply.end_offset, reply.sealed

    async def hub_id(self) -> str:
        """The hub's stable identity (logport.store.identity)."""
        reply = await self._request(sp.GetHubInfo())
        assert isinstance(reply, sp.HubInfo), reply
        return reply.hub_id

    async def list_segments(self) -> list[str]:
        reply = await self._request(sp.ListSegments())
        assert isinstance(reply, sp.SegmentList), reply
        return list(reply.segments)

    async def read(self, segment: str, offset: int, length: int, *, wait: float | None = 0.0) -> sp.SegmentRead:
        """Raw bytes from `offset`; `wait` seconds at the tail (None: the server's default)."""
        wait_ms = None if wait is None else int(wait * 1000)
        first = await self._request(sp.ReadSegment(segment, offset, length, wait_ms))
        parts = []
        reply = first
        got = 0
        while True:
            if not isinstance(reply, sp.SegmentRead) or reply.offset != offset + got:
                raise sp.SegmentProtocolError(f"unexpected reply to ReadSegment: {reply!r:.200}")
            parts.append(reply.data)
            got += len(reply.data)
            if got >= length or reply.at_tail:
                break
            reply = await self._receive()
        if len(parts) == 1:
            return reply
        return sp.SegmentRead(segment, offset, reply.flags, b"".join(parts))

    async def frames(self, segment: str, offset: int | None = None, *, follow: bool = False,
                     wait: float = 30.0) -> AsyncIterator[tuple[int, int, memoryview]]:
        """(offset, type, body) of each whole frame from `offset`; with `follow`, wait for more at the tail.

        Below the end the segment had when this began, up to READS_AHEAD reads are asked for at once, so the
        server reads and sends the next range while this side cuts the last one into frames; past it (at the
        tail) one read at a time, each waiting for the next append.
        """
        async for batch in self._frame_lists(segment, offset, follow, wait):
            for frame in batch:
                yield frame

    async def _frame_lists(self, segment: str, offset: int | None, follow: bool,
                           wait: float) -> AsyncIterator[list[tuple[int, int, memoryview]]]:
        """`frames`, a reply's frames at a time: one async step per reply, not per frame (at 1 KiB events a
        tail reader spent more time stepping nested async generators than the hub took to append)."""
        start, end, sealed = await self.info(segment)
        stitch = _FrameStitcher(start if offset is None else offset)
        while True:
            if stitch.read_at < end:
                try:
                    async for batch in self._frames_below(segment, stitch, end):
                        yield batch
                except (ConnectionError, TimeoutError):
                    if not follow:
                        raise
                    await self._reconnect()
                    stitch.leftover = b""  # read again from the last whole frame
                    continue
                except errors.DataGivenUp as e:
                    stitch = await self._skip(e)
                    continue
                if stitch.read_at < end and not follow:
                    return
                continue
            if not follow:
                return
            try:
                async for batch in self._frames_at_tail(segment, stitch, wait):
                    yield batch
                return  # sealed, and all of it read
            except (ConnectionError, TimeoutError):
                await self._reconnect()
                stitch.leftover = b""
            except errors.DataGivenUp as e:
                stitch = await self._skip(e)

    async def _skip(self, given_up: errors.DataGivenUp) -> _FrameStitcher:
        """A range `logport verify --repair` gave up: said, and read on after it, on a new connection (the
        reads asked for past it would answer out of step)."""
        log.warning("%s", given_up)
        await self._reconnect()
        return _FrameStitcher(given_up.end)

    async def _frames_at_tail(self, segment: str, stitch: _FrameStitcher,
                              wait: float) -> AsyncIterator[list[tuple[int, int, memoryview]]]:
        """Frames from stitch.read_at on, one read at a time, each waiting (`wait` seconds) for the next append.
        The next read is asked for as soon as the last reply of the one before is in, before its frames are
        handed on: the hub has it waiting for the next commit (or reading what came meanwhile) while this side
        cuts frames and its caller takes them. Each reply's frames go on as it comes (before 2026-11-25 the
        replies of a read were joined first, a copy of all of them). Ends once the segment is sealed and read."""
        if self._protocol is None:
            await self.connect()
        protocol = self._protocol
        assert protocol is not None
        wait_ms = int(wait * 1000)
        length = max(self.read_size, TAIL_READ)
        read_from = stitch.read_at
        protocol.send(sp.ReadSegment(segment, read_from, length, wait_ms))
        asked = True
        try:
            while True:
                reply = await self._receive()
                expected = stitch.read_at
                if not isinstance(reply, sp.SegmentRead) or reply.segment != segment or reply.offset != expected:
                    raise sp.SegmentProtocolError(f"unexpected reply to ReadSegment: {reply!r:.200}")
                after = expected + len(reply.data)
                asked = not (reply.at_tail or after - read_from >= length)
                if not asked and not reply.end_of_segment:
                    read_from = after
                    protocol.send(sp.ReadSegment(segment, read_from, length, wait_ms))
                    asked = True
                yield stitch.feed(reply.data)
                if reply.end_of_segment:
                    return
        finally:
            if asked:  # a reply still to come for a read not taken: the connection is out of step
                await self.close()

    async def _frames_below(self, segment: str, stitch: _FrameStitcher,
                            end: int) -> AsyncIterator[list[tuple[int, int, memoryview]]]:
        """The frames of [stitch.read_at, end) (as far as the segment still has them), with reads asked for
        ahead; their replies may interleave (the server answers reads concurrently), each carries its offset,
        which puts it in place. A read that fails closes the connection (replies to the reads asked for after
        it would follow): the frames before it come first, then the error."""
        if self._protocol is None:
            await self.connect()
        protocol = self._protocol
        assert protocol is not None
        asked: collections.deque[tuple[int, int]] = collections.deque()
        early: dict[int, sp.SegmentRead] = {}
        next_at = stitch.read_at
        try:
            while stitch.read_at < end:
                while len(asked) < READS_AHEAD and next_at < end:
                    length = min(self.read_size, end - next_at)
                    protocol.send(sp.ReadSegment(segment, next_at, length, 0))
                    asked.append((next_at, length))
                    next_at += length
                if not asked:
                    return
                at, length = asked.popleft()
                got, at_tail = 0, False
                while got < length and not at_tail:
                    reply = early.pop(at + got, None)
                    if reply is None:
                        received = await self._receive()
                        reply = _in_place(received, segment, at + got, early)
                        if reply is None:
                            continue
                    got += len(reply.data)
                    at_tail = reply.at_tail
                    yield stitch.feed(reply.data)
                if at_tail and stitch.read_at < end:
                    return  # truncated or cut short: the caller looks again
            asked.clear()
        finally:
            if asked or early:  # replies still to come for reads not taken: the connection is out of step
                await self.close()

    async def _reconnect(self) -> None:
        await self.close()
        await self.connect_retrying(None)

    async def connect_retrying(self, retry_for: float | None,
                               waiting: Callable[[str, str], None] | None = None) -> SegmentReader:
        """connect(), again and again (0.2 s apart, then up to 2 s) until it works, `waiting` told (server,
        reason) of each failure; after `retry_for` seconds (None: never) ServerUnavailable says why the last
        attempt failed."""
        began = time.monotonic()
        delay = 0.2
        while True:
            try:
                return await self.connect()
            except (ConnectionError, OSError, TimeoutError) as e:
                left = None if retry_for is None else began + retry_for - time.monotonic()
                if left is not None and left <= 0:
                    reason = errors.failure_reason(e) if str(e) else f"no connection within {self.connect_timeout:g} s"
                    raise errors.ServerUnavailable(f"segment server {self.host}:{self.port}", reason,
                                                   waited=retry_for) from None
                if waiting is not None:
                    waiting(f"{self.host}:{self.port}", errors.failure_reason(e) if str(e) else "no connection")
                await asyncio.sleep(delay if left is None else min(delay, left))
                delay = min(delay * 2, 2.0)

    async def wait_for_segment(self, segment: str, waiting: Callable[[], None], poll: float = 0.5) -> None:
        """Return once `segment` exists on the server; `waiting` is called once if it does not yet."""
        told = False
        while True:
            try:
                await self.info(segment)
                return
            except errors.NoSuchSegment:
                if not told:
                    waiting()
                    told = True
            except (ConnectionError, TimeoutError):
                await self._reconnect()
                continue
            await asyncio.sleep(poll)

    async def event_lists(self, segment: str, offset: int | None = None, *, follow: bool = False,
                          wait: float = 30.0) -> AsyncIterator[list[tuple[int, memoryview]]]:
        """`events`, a reply's events at a time: what a consumer that must keep up with a busy segment takes
        (one async step per event cost a 1 KiB tail reader more than the hub spent appending the event)."""
        event = frames.EVENT
        async for batch in self._frame_lists(segment, offset, follow, wait):
            found = [(frame_offset, body) for frame_offset, frame_type, body in batch if frame_type == event]
            if found:
                yield found

    async def events(self, segment: str, offset: int | None = None, *, follow: bool = False,
                     wait: float = 30.0) -> AsyncIterator[tuple[int, memoryview]]:
        """(offset, body) of each Event; the store's own records are skipped."""
        event = frames.EVENT
        async for batch in self._frame_lists(segment, offset, follow, wait):
            for frame_offset, frame_type, body in batch:
                if frame_type == event:
                    yield frame_offset, body

    async def entries(self, segment: str, offset: int | None = None, *,
                      follow: bool = False) -> AsyncIterator[tuple[int, int, Entry | bytes]]:
        """(offset, index, entry) of each entry of the hub's stored batches; opaque events come as bytes."""
        async for frame_offset, body in self.events(segment, offset, follow=follow):
            try:
                batch = decode_batch(body)
                items = list(batch)
            except BatchDecodeError:
                yield frame_offset, 0, bytes(body)
                continue
            for index, entry in enumerate(items):
                yield frame_offset, index, entry

    async def close(self) -> None:
        if self._protocol is not None:
            self._protocol.abort()
            self._protocol = None


# --- the CLI ---


def _check_start(host: str, port: int, segment: str, offset: int, ssl: ssl_module.SSLContext | None) -> None:
    client = BlockingSegmentClient(host, port, ssl=ssl)
    try:
        client.check_start(segment, offset)
    finally:
        client.close()


async def cat_from_server(server: str, segment: str, offset: int | None, follow: bool, out: IO[str], *,
                          timeout: float | None = flags.DEFAULT_TIMEOUT, ssl: ssl_module.SSLContext | None = None,
                          say: Callable[[str], None] | None = None, waiting: Waiting | None = None) -> int:
    """`logport cat --server HOST:PORT SEGMENT`: print the events as JSON lines. Connecting is retried for
    `timeout` seconds (None: for ever), `waiting` told of it; with `follow`, a segment not created yet is waited
    for (`say` tells so once, on stderr by default; `waiting.waiting` is True meanwhile)."""
    host, port = parse_server(server)
    reader = SegmentReader(host, port, ssl=ssl)
    await reader.connect_retrying(timeout, waiting)
    if waiting is not None:
        waiting.over()
    try:
        if follow:
            tell = say or (lambda text: print(text, file=sys.stderr, flush=True))

            def creating() -> None:
                if waiting is not None:
                    waiting.waiting = True
                tell(f"waiting for segment {segment!r} to be created on {host}:{port} (Ctrl-C to stop)")

            await reader.wait_for_segment(segment, creating)
            if waiting is not None:
                waiting.over()
        if offset is not None:
            try:
                await asyncio.to_thread(_check_start, host, port, segment, offset, ssl)
            except OSError as e:
                raise errors.ServerUnavailable(f"segment server {host}:{port}", errors.failure_reason(e)) from None
        async for frame_offset, body in reader.events(segment, offset, follow=follow):
            write_events(out, segment, frame_offset, body)
    finally:
        await reader.close()
    return 0


def add_send_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = "Append each line of stdin to a segment as one opaque event, exactly once."
    parser.add_argument("segment", help="segment to append to (created if missing)")
    flags.add_server_argument(parser, f"127.0.0.1:{DEFAULT_PORT}")
    parser.add_argument("--connection-id", type=uuid.UUID, default=None,
                        help="UUID of this appender (default: a new one); re-run with the same id and the same"
                             " input to resume exactly once after a crash or a stop (the lines already stored are"
                             " skipped)")
    parser.add_argument("--token", default="", help="the server's segment.token")
    parser.add_argument("--block-size", type=int, default=1024 * 1024, help="bytes per append block")
    flags.add_stream_arguments(parser, skip_lines=False)
    flags.add_timeout_argument(parser, "the hub cannot be reached, or refuses every block,")
    flags.add_tls_arguments(parser)


class LineAppender:
    """`logport send segment`: stdin's lines appended with one connection id, skipping the lines the server
    stored for that id before (a resume), and counting the lines it acknowledged."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        host, port = flags.server_address(args, f"127.0.0.1:{DEFAULT_PORT}")
        self.appender = SegmentAppender(
            host, port, args.segment, connection_id=args.connection_id, ssl=flags.tls_context(args),
            token=args.token, block_size=args.block_size,
            retry_for=args.timeout if args.timeout > 0 else float("inf"),
            waiting=Waiting("logport send segment", flags.retry_for(args)))
        self.progress: SendProgress | None = None
        # (connection offset after a batch, lines of the input up to it): the lines an ack level covers
        self._marks: collections.deque[tuple[int, int]] = collections.deque()

    @property
    def connection_id(self) -> uuid.UUID:
        return self.appender.connection_id

    def _count_acked(self) -> None:
        level, marks, progress = self.appender.ack_level, self._marks, self.progress
        if level is None or progress is None:
            return
        while marks and marks[0][0] <= level:
            progress.acked = marks.popleft()[1]

    async def send(self, source: SenderInput, progress: SendProgress) -> str:
        self.progress = progress
        progress.refresh = self._count_acked
        appender, segment = self.appender, self.args.segment
        appended = skipped = 0
        async with appender:
            # a reused connection id: the server holds the events of the input up to its ack level (an earlier
            # run of this input); they are skipped, as the appender counts them (8-byte header + body), so the
            # rest continues the connection's offset and nothing is stored twice
            stored = await appender.initial_ack_level() if self.args.connection_id is not None else 0
            offset = 0  # connection offset after the input's lines so far
            async for batch in source.batches(1 << 20, self.args.block_size):
                number = progress.read - len(batch)
                bodies = []
                for line in batch:
                    number += 1
                    body = line.rstrip(b"\r")
                    if offset < stored:
                        start, offset = offset, offset + frames.HEADER_SIZE + len(body)
                        if offset > stored:
                            raise InputDoesNotResume(
                                f"the server's ack level for connection {self.connection_id} on segment {segment!r}"
                                f" is {stored}, inside line {number} of the input (its event spans connection"
                                f" offsets {start}..{offset}): this is not the input that connection id sent"
                                f" before; nothing appended")
                        skipped += 1
                        continue
                    bodies.append(body)
                    offset += frames.HEADER_SIZE + len(body)
                if bodies:
                    await appender.append_many(bodies)
                    appended += len(bodies)
                progress.sent = progress.read
                self._marks.append((offset, progress.read))
                self._count_acked()
            if offset < stored:
                raise InputDoesNotResume(
                    f"the server's ack level for connection {self.connection_id} on segment {segment!r} is {stored},"
                    f" but the input ends at connection offset {offset}: this is not the input that connection id"
                    f" sent before, or only part of it; nothing appended")
            await appender.flush()
        self._count_acked()
        return (f"appended {events(appended)} to {segment!r} (skipped {events(skipped)} stored before);"
                f" connection {self.connection_id} ack level {appender.ack_level}")

    def resume(self, progress: SendProgress) -> list[str] | None:
        if self.appender.ack_level is None:  # never set up: nothing appended, the same command starts afresh
            return None
        return ["--connection-id", str(self.connection_id)]


def send_main(args: argparse.Namespace) -> int:
    def sender() -> Sender:
        lines = LineAppender(args)
        return Sender("logport send segment", lines.send, lines.resume, exactly_once=True,
                      resume_says=f"connection {lines.connection_id}; to append the rest exactly once")

    return run_sender(sender, args)
