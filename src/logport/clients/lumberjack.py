"""A Lumberjack (Beats) writer: v1 or v2 windows, compressed, pipelined, resent after a reconnect.

Frames are shaped as Filebeat's go-lumber sends them: `W n`, then one `C`
holding `J` (or v1 `D`) frames numbered 1..n, so a window's bytes can be sent
again unchanged after a reconnect. Acks of 0 are keep-alives: they only reset
the ack timeout. Delivery is at-least-once (what was sent but not acknowledged
before a connection broke is sent again). Also `logport send lumberjack`.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import ssl
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

import orjson

from logport.clients import flags
from logport.clients.lines import count, record_from_line
from logport.clients.stream import Sender, SenderInput, SendProgress, Waiting, run_sender
from logport.clients.stream import skip_acknowledged as resume
from logport.errors import LogportError, ServerUnavailable, failure_reason
from logport.protocols._receivebuffer import NEED_DATA
from logport.protocols.lumberjack import (
    V1,
    V2,
    Ack,
    Connection,
    Role,
    compressed_frame,
    encode_data_v1,
    encode_json,
    encode_window,
)

log = logging.getLogger("logport.lumberjack.client")

MAX_RECONNECT_DELAY = 30.0
DEFAULT_PORT = 5044


class ClientClosed(LogportError):
    """The client was closed before a window was acknowledged."""


def window_frames(version: int, items: Sequence[Any], level: int) -> bytes:
    """`W n` + the n data frames (seq 1..n), compressed into one `C` frame unless `level` is 0.

    v2 items are serialised JSON (bytes); v1 items are mappings of fields.
    """
    if version == V2:
        data = [encode_json(seq, item) for seq, item in enumerate(items, 1)]
    else:
        data = [encode_data_v1(seq, item) for seq, item in enumerate(items, 1)]
    head = encode_window(version, len(items))
    if level:
        return head + compressed_frame(version, data, level)
    return head + b"".join(data)


class PendingWindow:
    """One window until its ack: its items, how many are acknowledged, and who waits for it."""

    __slots__ = ("items", "acked", "sent_from", "future", "_frames")

    def __init__(self, items: Sequence[Any], future: asyncio.Future[None]) -> None:
        self.items = items
        self.acked = 0  # events acknowledged so far (partial acks)
        self.sent_from = 0  # index of the item sent as seq 1 on the current connection
        self.future = future
        self._frames: bytes | None = None

    def frames(self, version: int, level: int) -> bytes:
        """The window's bytes: whole at first, only the unacknowledged tail after a partial ack."""
        self.sent_from = self.acked
        if self.acked:
            return window_frames(version, self.items[self.acked :], level)
        if self._frames is None:
            self._frames = window_frames(version, self.items, level)
        return self._frames


class _Wire(asyncio.Protocol):
    """One TCP/TLS connection of the client: acks in, frames out."""

    def __init__(self, client: LumberjackClient) -> None:
        self.client = client
        self.proto = Connection(Role.CLIENT, peer=f"{client.host}:{client.port}")
        self.transport: asyncio.Transport | None = None
        self.lost: asyncio.Future[Exception | None] = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's transports are not asyncio.Transport

    def data_received(self, data: bytes) -> None:
        self.proto.receive_data(data)
        try:
            while (event := self.proto.next_event()) is not NEED_DATA:
                if isinstance(event, Ack):
                    self.client._on_ack(event.seq)
        except LogportError as e:
            log.warning(f"closing connection: {e}", extra={"peer": self.proto.peer})
            if self.transport is not None:
                self.transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.lost.done():
            self.lost.set_result(exc)


class LumberjackClient:
    """Send windows to a Logstash-compatible server; `send` returns once they are acknowledged.

    It reconnects for ever, unless `retry_for` is set: after that many seconds without reaching the
    server (or without an ack from it) every window waiting fails with ServerUnavailable.
    """

    def __init__(self, host: str, port: int, *, version: int = 2, window_size: int = 2048,
                 compression_level: int = 3, windows_in_flight: int = 2, ack_timeout: float = 30.0,
                 ssl_context: ssl.SSLContext | None = None, server_hostname: str | None = None,
                 reconnect_delay: float = 1.0, retry_for: float | None = None,
                 waiting: Callable[[str, str], None] | None = None) -> None:
        self.host = host
        self.port = port
        self.version = V1 if version in (1, V1) else V2
        self.window_size = window_size
        self.level = compression_level
        self.windows_in_flight = windows_in_flight
        self.ack_timeout = ack_timeout
        self.ssl_context = ssl_context
        self.server_hostname = server_hostname
        self.reconnect_delay = reconnect_delay
        self.retry_for = retry_for
        self.waiting = waiting  # told (server, reason) of each connect that failed
        self.peer = f"{host}:{port}"
        self.inflight: deque[PendingWindow] = deque()  # sent (or to resend), oldest first
        self.connects = 0
        self.acks = 0  # non-zero acks received
        self._wire: _Wire | None = None
        self._connected = asyncio.Event()
        self._space = asyncio.Event()
        self._space.set()
        self._last_progress = time.monotonic()
        self._runner: asyncio.Task[None] | None = None
        self._closed = False
        self._failed: ServerUnavailable | None = None  # gave up: retry_for passed

    # --- public ---

    async def send(self, events: Sequence[Mapping[str, Any]]) -> None:
        """Send events in windows of `window_size` (pipelined); return when every one is acknowledged."""
        futures = [await self.send_window(events[i : i + self.window_size])
                   for i in range(0, len(events), self.window_size)]
        if futures:
            await asyncio.gather(*futures)

    async def send_window(self, events: Sequence[Mapping[str, Any]]) -> asyncio.Future[None]:
        """Queue one window (waiting while `windows_in_flight` are unacknowledged); the future is its ack."""
        if self.version == V2:
            dumps = orjson.dumps
            items: list[Any] = [e if isinstance(e, bytes) else dumps(e) for e in events]
        else:
            items = list(events)
        return await self._send_items(items)

    async def _send_items(self, items: Sequence[Any]) -> asyncio.Future[None]:
        self._check_open()
        self._ensure_running()
        while len(self.inflight) >= self.windows_in_flight:
            self._space.clear()
            await self._space.wait()
            self._check_open()
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        window = PendingWindow(items, future)
        if not items:
            future.set_result(None)
            return future
        if not self.inflight:
            self._last_progress = time.monotonic()
        self.inflight.append(window)
        wire = self._wire
        if wire is not None and wire.transport is not None and not wire.lost.done():
            wire.transport.write(window.frames(self.version, self.level))
        return future

    def _check_open(self) -> None:
        if self._failed is not None:
            raise self._failed
        if self._closed:
            raise ClientClosed("lumberjack client is closed")

    async def flush(self) -> None:
        """Wait until everything sent so far is acknowledged."""
        pending = [w.future for w in self.inflight]
        if pending:
            await asyncio.gather(*pending)

    async def wait_connected(self) -> None:
        self._ensure_running()
        await self._connected.wait()

    async def close(self) -> None:
        self._closed = True
        if self._runner is not None:
            self._runner.cancel()
            try:
                await self._runner
            except asyncio.CancelledError:
                pass
        self._drop_wire()
        self._fail_windows(ClientClosed("lumberjack client closed before the window was acknowledged"))

    def _fail_windows(self, error: LogportError) -> None:
        for window in self.inflight:
            if not window.future.done():
                window.future.set_exception(error)
                window.future.exception()  # retrieved: a caller that stopped waiting gets no warning
        self.inflight.clear()
        self._space.set()

    def _give_up(self, reason: str, connected: bool) -> None:
        self._failed = ServerUnavailable(self.peer, reason, waited=self.retry_for, connected=connected)
        self._fail_windows(self._failed)

    # --- acks ---

    def _on_ack(self, seq: int) -> None:
        self._last_progress = time.monotonic()
        if seq == 0 or not self.inflight:
            return  # keep-alive
        self.acks += 1
        window = self.inflight[0]
        # seqs restart at 1 in each window, and in a tail resent after a partial ack
        window.acked = max(window.acked, window.sent_from + seq)
        if window.acked >= len(window.items):
            self.inflight.popleft()
            if not window.future.done():
                window.future.set_result(None)
            self._space.set()

    # --- connection ---

    def _ensure_running(self) -> None:
        if self._runner is None or self._runner.done():
            self._runner = asyncio.get_running_loop().create_task(self._run(), name="lumberjack-client")

    def _drop_wire(self) -> None:
        wire, self._wire = self._wire, None
        self._connected.clear()
        if wire is not None and wire.transport is not None:
            wire.transport.abort()

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        delay = self.reconnect_delay
        failing_since: float | None = None  # since when nothing got through (None: it works)
        outage = False  # a lost connection was reported: the reconnects that follow are info, not warnings
        while not self._closed:
            connect_timeout = max(self.ack_timeout, 5.0)
            if self.retry_for is not None:
                connect_timeout = min(connect_timeout, max(self.retry_for, 0.1))
            try:
                async with asyncio.timeout(connect_timeout):
                    _, wire = await loop.create_connection(
                        lambda: _Wire(self), self.host, self.port, ssl=self.ssl_context,
                        server_hostname=self.server_hostname if self.ssl_context else None)
            except (TimeoutError, OSError, ssl.SSLError) as e:
                reason = failure_reason(e) if str(e) else f"no connection within {connect_timeout:g} s"
                failing_since = failing_since or time.monotonic()
                if self._out_of_time(failing_since):
                    self._give_up(reason, connected=False)
                    return
                # each attempt is info: the outage is reported once (below, or as the error of giving up)
                log.info(f"connecting to {self.peer} failed: {reason}; retrying in {delay:g} s",
                         extra={"peer": self.peer, "error": reason, "retry_in": delay})
                if self.waiting is not None:
                    self.waiting(self.peer, reason)
                await asyncio.sleep(self._capped(delay, failing_since))
                delay = min(delay * 2, MAX_RECONNECT_DELAY)
                continue
            self._wire = wire
            self.connects += 1
            acks_before = self.acks
            self._last_progress = time.monotonic()
            if self.inflight:  # the unacknowledged tail, in order
                assert wire.transport is not None
                wire.transport.write(b"".join(w.frames(self.version, self.level) for w in self.inflight))
            self._connected.set()
            timed_out = await self._watch(wire)
            lost = wire.lost.result() if wire.lost.done() else None
            self._drop_wire()
            if self._closed:
                return
            progressed = self.acks > acks_before
            if progressed:
                failing_since, outage = None, False
            failing_since = failing_since or time.monotonic()
            if timed_out:
                reason = f"no ack within ack_timeout {self.ack_timeout:g} s"
            else:
                reason = failure_reason(lost) if lost is not None else "it closed the connection"
            if self.inflight and self._out_of_time(failing_since):
                self._give_up(reason, connected=True)
                return
            windows = len(self.inflight)
            extra: dict[str, Any] = {"peer": self.peer, "error": reason}
            if timed_out:
                extra.update(limit="ack_timeout", value=self.ack_timeout)
            (log.info if outage else log.warning)(
                f"{self.peer} went away ({reason}); reconnecting, then resending "
                f"{windows} unacknowledged window{'s' if windows != 1 else ''}", extra=extra)
            outage = True
            # a server that takes the connection but acknowledges nothing (say, it refuses a window
            # over its limits) is retried ever more slowly, like one that refuses connections
            delay = self.reconnect_delay if progressed else min(delay * 2, MAX_RECONNECT_DELAY)
            await asyncio.sleep(self._capped(delay, failing_since))

    def _out_of_time(self, failing_since: float) -> bool:
        return self.retry_for is not None and time.monotonic() - failing_since >= self.retry_for

    def _capped(self, delay: float, failing_since: float) -> float:
        """`delay`, but no later than retry_for allows: the last attempt comes when the time is up."""
        if self.retry_for is None:
            return delay
        return max(0.0, min(delay, failing_since + self.retry_for - time.monotonic()))

    async def _watch(self, wire: _Wire) -> bool:
        """Wait until the connection is lost (False) or no ack came for ack_timeout with windows out (True)."""
        step = min(1.0, self.ack_timeout / 4)
        while True:
            try:
                async with asyncio.timeout(step):
                    await asyncio.shield(wire.lost)
                return False
            except TimeoutError:
                pass
            if self.inflight and time.monotonic() - self._last_progress > self.ack_timeout:
                return True


def client_from_args(args: argparse.Namespace, waiting: Callable[[str, str], None] | None = None) -> LumberjackClient:
    host, port = flags.server_address(args, f"127.0.0.1:{DEFAULT_PORT}")
    return LumberjackClient(
        host, port, version=args.protocol_version, window_size=args.window_size,
        compression_level=args.compression_level, windows_in_flight=args.windows_in_flight,
        ack_timeout=args.ack_timeout, ssl_context=flags.tls_context(args), retry_for=flags.retry_for(args),
        waiting=waiting,
    )


# --- logport send lumberjack ---


def add_send_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = ("Send JSON lines from stdin as Beats events (one JSON object per line; "
                          "other lines are sent as {\"message\": line}). Exits once all are acknowledged.")
    flags.add_server_argument(parser, f"127.0.0.1:{DEFAULT_PORT}")
    parser.add_argument("--protocol-version", type=int, choices=(1, 2), default=2,
                        help="2: J frames (Beats); 1: D frames, values sent as strings")
    parser.add_argument("--window-size", type=int, default=2048, help="lines per window")
    flags.add_stream_arguments(parser)
    parser.add_argument("--compression-level", type=int, default=3, choices=range(10), metavar="0-9",
                        help="zlib level; 0 sends frames uncompressed")
    parser.add_argument("--windows-in-flight", type=int, default=2, help="windows sent before the first ack")
    parser.add_argument("--ack-timeout", type=float, default=30.0,
                        help="seconds without an ack (keep-alives count) before reconnecting")
    flags.add_timeout_argument(parser, "the server cannot be reached, or acknowledges nothing,")
    flags.add_tls_arguments(parser)


async def send_lines(client: LumberjackClient, source: SenderInput, progress: SendProgress) -> str:
    """Each batch of stdin's lines as a window, pipelined; windows are acknowledged in order, so the lines
    acknowledged are always the input's first ones."""

    def count_ack(lines: int) -> Callable[[asyncio.Future[None]], None]:
        def acknowledged(future: asyncio.Future[None]) -> None:
            if not future.cancelled() and future.exception() is None:
                progress.acked += lines
        return acknowledged

    events = 0
    try:
        async for batch in source.batches(client.window_size):
            records = [record_from_line(line) for line in batch if line.strip()]
            window = await client.send_window(records)
            progress.sent += len(batch)
            window.add_done_callback(count_ack(len(batch)))
            events += len(records)
        await client.flush()
    finally:
        await client.close()
    return f"sent {count(events)}, all acknowledged"


def send_main(args: argparse.Namespace) -> int:
    def sender() -> Sender:
        client = client_from_args(args, Waiting("logport send lumberjack", flags.retry_for(args)))
        return Sender("logport send lumberjack", partial(send_lines, client), resume)

    return run_sender(sender, args)
