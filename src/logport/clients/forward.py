"""Fluentd Forward sender: every mode, gzip, EventTime, acks with timeout and retry, the handshake, TLS,
weighted servers with standbys, heartbeats and a phi-accrual failure detector; and `logport send forward`.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import itertools
import logging
import math
import os
import random
import socket
import ssl
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from logport.batch import pack_entries
from logport.clients import flags
from logport.clients.lines import count, record_from_line
from logport.clients.stream import Sender, SenderInput, SendProgress, Waiting, run_sender
from logport.clients.stream import skip_acknowledged as resume
from logport.config import parse_server_address
from logport.errors import (
    AuthenticationError,
    ConfigError,
    LogportError,
    ProtocolError,
    failure_reason,
)
from logport.protocols import forward as fp

log = logging.getLogger("logport.forward.client")

Mode = fp.Mode


class SendFailed(LogportError):
    """No server acknowledged a chunk within the retries; `connected`: one of them took a connection (and may
    have stored the chunk without acknowledging it)."""

    def __init__(self, message: str, *, connected: bool = True) -> None:
        super().__init__(message)
        self.connected = connected


@dataclass
class ServerAddress:
    host: str = "127.0.0.1"
    port: int = 24224
    weight: int = 60
    standby: bool = False

    @classmethod
    def parse(cls, text: str, *, standby: bool = False) -> ServerAddress:
        """`host:port[:weight]`."""
        host, port, weight = parse_server_address(text)
        return cls(host, port, weight, standby)

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass
class SenderConfig:
    servers: list[ServerAddress] = field(default_factory=lambda: [ServerAddress()])
    mode: fp.Mode = fp.Mode.PACKED_FORWARD
    compress: str = ""  # "gzip" or "zstd": CompressedPackedForward
    require_ack: bool = True
    ack_timeout: float = 30.0
    connect_timeout: float = 10.0
    retries: int | None = 5  # attempts per chunk, each on the next healthy server (None: as retry_for allows)
    retry_for: float | None = None  # and no new attempt once a chunk has been tried for this long
    retry_wait: float = 0.5  # doubles per attempt, at most 30 s
    recover_wait: float = 10.0  # a server that failed is not chosen again for this long (unless all failed)
    shared_key: str = ""
    username: str = ""
    password: str = ""
    hostname: str = field(default_factory=socket.gethostname)
    tls: ssl.SSLContext | None = None
    server_hostname: str | None = None  # TLS SNI / certificate name; default: the server's host
    keepalive: bool = True  # keep a connection per server between sends; False: one connection per send
    keepalive_timeout: float = 60.0  # close a kept connection idle this long
    heartbeat: str = "none"  # "transport" (TCP or TLS connect), "udp" (0x00 datagram) or "none"
    heartbeat_interval: float = 1.0
    phi_threshold: float = 16.0  # failure detector: a server is down above this phi
    hard_timeout: float = 60.0  # and in any case when no heartbeat came for this long
    salt: str | None = None  # PING salt; None = random per connection (fixed only to replay recordings)
    waiting: Callable[[str, str], None] | None = None  # told (server, reason) of each attempt that failed


class FailureDetector:
    """Phi accrual (Hayashibara et al., as Fluentd out_forward): suspicion grows with heartbeat silence.

    Silence counts from the detector's start, as in Fluentd: a server never heard from is down after
    hard_timeout (phi needs intervals between heartbeats, so it suspects only servers once heard).
    """

    def __init__(self, threshold: float, hard_timeout: float, window: int = 100, now: float | None = None) -> None:
        self.threshold = threshold
        self.hard_timeout = hard_timeout
        self.intervals: deque[float] = deque(maxlen=window)
        self.last = time.monotonic() if now is None else now  # the last heartbeat, or the start
        self.heard = False

    def heartbeat(self, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        if self.heard:  # the time from the start to the first heartbeat is no interval
            self.intervals.append(now - self.last)
        self.last = now
        self.heard = True

    def phi(self, now: float | None = None) -> float:
        if not self.intervals:
            return 0.0
        now = time.monotonic() if now is None else now
        mean = sum(self.intervals) / len(self.intervals)
        variance = sum((x - mean) ** 2 for x in self.intervals) / len(self.intervals)
        std = max(math.sqrt(variance), mean / 4, 1e-3)
        t = now - self.last
        # P(interval > t) under a normal model; phi = -log10 of it
        p_later = 0.5 * math.erfc((t - mean) / (std * math.sqrt(2)))
        return -math.log10(max(p_later, 1e-300))

    def available(self, now: float | None = None) -> bool:
        now = time.monotonic() if now is None else now
        if now - self.last > self.hard_timeout:
            return False
        return self.phi(now) <= self.threshold


class ServerLink(asyncio.Protocol):
    """One TCP (or TLS) connection to a server: the handshake, then chunks out and acks in."""

    def __init__(self, address: ServerAddress, config: SenderConfig) -> None:
        self.address = address
        self.config = config
        self.conn = fp.ClientConnection(shared_key=config.shared_key, hostname=config.hostname,
                                        username=config.username, password=config.password, peer=str(address),
                                        salt=config.salt)
        self.transport: asyncio.Transport | None = None
        loop = asyncio.get_running_loop()
        self.ready: asyncio.Future[None] = loop.create_future()
        self.acks: dict[str | bytes, asyncio.Future[None]] = {}
        self.closed = False
        self.last_used = time.monotonic()
        self._sending = 0  # sends under way (an idle close waits for them)
        self._idle_close: asyncio.TimerHandle | None = None
        self._writable = asyncio.Event()
        self._writable.set()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        if not self.config.shared_key:
            self.ready.set_result(None)

    def data_received(self, data: bytes) -> None:
        try:
            self.conn.receive_data(data)
            while (event := self.conn.next_event()) is not fp.NEED_DATA:
                if isinstance(event, fp.Helo):
                    assert self.transport is not None
                    self.transport.write(self.conn.ping())
                elif isinstance(event, fp.Pong):
                    if not self.ready.done():
                        self.ready.set_result(None)
                elif isinstance(event, fp.Ack):
                    waiter = self.acks.pop(event.chunk, None)
                    if waiter is not None and not waiter.done():
                        waiter.set_result(None)
        except ProtocolError as e:
            self._fail(e)

    def _fail(self, e: BaseException) -> None:
        if not self.ready.done():
            self.ready.set_exception(e)
        for waiter in self.acks.values():
            if not waiter.done():
                waiter.set_exception(e)
        self.acks.clear()
        self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._cancel_idle_close()
        error = ConnectionError(f"connection to {self.address} closed" + (f": {exc}" if exc else ""))
        if not self.ready.done():
            # Fluent Bit closes on a wrong key without a PONG
            self.ready.set_exception(AuthenticationError(f"{self.address} closed the connection during the "
                                                         "handshake", peer=str(self.address))
                                     if self.config.shared_key else error)
        for waiter in self.acks.values():
            if not waiter.done():
                waiter.set_exception(error)
        self.acks.clear()
        self._writable.set()

    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()

    def close(self) -> None:
        self.closed = True
        self._cancel_idle_close()
        if self.transport is not None:
            self.transport.close()

    def close_when_idle(self) -> None:
        """Close once unused for keepalive_timeout, as Fluentd purges its idle kept sockets: the server
        is not left holding a connection we would not reuse anyway."""
        self._cancel_idle_close()
        if not self.closed:
            delay = self.last_used + self.config.keepalive_timeout - time.monotonic()
            self._idle_close = asyncio.get_running_loop().call_later(max(delay, 0.0), self._close_if_idle)

    def _close_if_idle(self) -> None:
        self._idle_close = None
        if self._sending:
            return  # the send's end sets the timer again
        if time.monotonic() - self.last_used < self.config.keepalive_timeout:
            self.close_when_idle()
        else:
            self.close()

    def _cancel_idle_close(self) -> None:
        if self._idle_close is not None:
            self._idle_close.cancel()
            self._idle_close = None

    async def send(self, messages: Sequence[tuple[bytes, str | bytes | None]]) -> None:
        """Write (message, chunk) pairs; return once every chunk is acked (or at once without acks)."""
        if self.closed or self.transport is None:
            raise ConnectionError(f"connection to {self.address} is closed")
        self._sending += 1
        try:
            await self._send(self.transport, messages)
        finally:
            self._sending -= 1
            self.last_used = time.monotonic()
            if self.config.keepalive and not self._sending:
                self.close_when_idle()

    async def _send(self, transport: asyncio.Transport, messages: Sequence[tuple[bytes, str | bytes | None]]
                    ) -> None:
        loop = asyncio.get_running_loop()
        waiters = []
        for message, chunk in messages:
            if chunk is not None:
                waiter = loop.create_future()
                self.acks[chunk] = waiter
                waiters.append(waiter)
            transport.write(message)
            await self._writable.wait()
        self.last_used = time.monotonic()
        if waiters:
            try:
                # asyncio.timeout, not wait_for: on Python 3.11 wait_for drops a cancellation that comes as
                # the acks do, and a task cancelled then (an output or a sender being stopped) went on sending
                async with asyncio.timeout(self.config.ack_timeout):
                    await asyncio.gather(*waiters)
            except TimeoutError:
                # an ack may still come for a chunk we will resend: drop the connection (Fluentd does the same)
                self.close()
                raise TimeoutError(f"no ack from {self.address} within {self.config.ack_timeout} s") from None


def new_chunk_id() -> str:
    """16 random bytes, base64, as Fluentd's out_forward makes them."""
    return base64.b64encode(os.urandom(16)).decode()


class ForwardSender:
    """Sends batches to one of several weighted servers, failing over to standbys; retries until acked."""

    def __init__(self, config: SenderConfig) -> None:
        if not config.servers:
            raise ValueError("a Forward sender needs at least one server")
        self.config = config
        self.detectors = self._new_detectors()
        self.down_until: dict[int, float] = {}
        self.links: dict[int, ServerLink] = {}
        self._heartbeat_task: asyncio.Task[None] | None = None
        self._udp: dict[int, asyncio.DatagramTransport] = {}
        self._connecting: dict[int, asyncio.Lock] = {}
        self._closed = False

    async def start(self) -> ForwardSender:
        if self.config.heartbeat in ("transport", "udp"):
            self.detectors = self._new_detectors()  # silence counts from when heartbeats start
            self._heartbeat_task = asyncio.ensure_future(self._heartbeats())
        return self

    def _new_detectors(self) -> dict[int, FailureDetector]:
        cfg = self.config
        return {id(s): FailureDetector(cfg.phi_threshold, cfg.hard_timeout) for s in cfg.servers}

    async def __aenter__(self) -> ForwardSender:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        self._closed = True
        if self._heartbeat_task is not None:
            self._heartbeat_task.cancel()
        for link in self.links.values():
            link.close()
        self.links.clear()
        for udp in self._udp.values():
            udp.close()

    # --- choosing a server ---

    def available(self, server: ServerAddress) -> bool:
        now = time.monotonic()
        if self.down_until.get(id(server), 0) > now:
            return False
        return self.config.heartbeat == "none" or self.detectors[id(server)].available(now)

    def choose(self, exclude: set[int] | None = None) -> ServerAddress:
        """A healthy primary by weight; else a healthy standby; else any server (we must try something)."""
        servers = self.config.servers
        exclude = exclude or set()
        for candidates in ([s for s in servers if not s.standby], [s for s in servers if s.standby], servers):
            healthy = [s for s in candidates if self.available(s) and id(s) not in exclude and s.weight > 0]
            if healthy:
                return random.choices(healthy, weights=[s.weight for s in healthy])[0]
        left = [s for s in servers if id(s) not in exclude] or list(servers)
        return random.choice(left)

    def server_hostname(self, server: ServerAddress) -> str | None:
        """The name TLS sends (SNI) and verifies the certificate against; None without TLS."""
        return (self.config.server_hostname or server.host) if self.config.tls else None

    async def _link(self, server: ServerAddress) -> ServerLink:
        """The kept connection to `server`, or a new one (concurrent senders share one handshake)."""
        lock = self._connecting.setdefault(id(server), asyncio.Lock())
        async with lock:
            return await self._link_locked(server)

    async def _link_locked(self, server: ServerAddress) -> ServerLink:
        link = self.links.get(id(server))
        if link is not None and not link.closed and (
                time.monotonic() - link.last_used < self.config.keepalive_timeout):
            return link
        if link is not None:
            link.close()
        cfg = self.config
        loop = asyncio.get_running_loop()
        async with asyncio.timeout(cfg.connect_timeout):  # not wait_for: see ServerLink.send
            _, new = await loop.create_connection(
                lambda: ServerLink(server, cfg), server.host, server.port, ssl=cfg.tls,
                server_hostname=self.server_hostname(server))
        try:
            async with asyncio.timeout(cfg.connect_timeout):
                await new.ready
        except BaseException:  # no HELO/PONG in time, or the handshake refused: the server keeps no half-open link
            new.close()
            raise
        if cfg.keepalive:
            self.links[id(server)] = new
            new.close_when_idle()
        return new

    # --- sending ---

    def messages(self, tag: str, entries: bytes, count: int, option: dict[str, Any] | None = None
                 ) -> list[tuple[bytes, str | bytes | None]]:
        """The wire messages for one batch in the configured mode, each with its chunk id when acked."""
        cfg = self.config
        option = dict(option or {})
        mode = fp.Mode.COMPRESSED_PACKED_FORWARD if cfg.compress else cfg.mode
        if cfg.compress:
            option["compressed"] = cfg.compress
        ready = fp.ClientConnection()
        if mode is fp.Mode.MESSAGE:
            out: list[tuple[bytes, str | bytes | None]] = []
            for single in fp.split_entries(entries, 1) if count != 1 else [entries]:
                chunk = new_chunk_id() if cfg.require_ack else None
                opt = {**option, "chunk": chunk} if chunk else option
                out.append((ready.send(fp.EventBatch(tag, single, opt, 1, 0, mode)), chunk))
            return out
        chunk = option.get("chunk") if "chunk" in option else (new_chunk_id() if cfg.require_ack else None)
        if chunk is not None and cfg.require_ack:
            option["chunk"] = chunk
        else:
            option.pop("chunk", None)
            chunk = None
        option.setdefault("size", count)
        return [(ready.send(fp.EventBatch(tag, entries, option, count, 0, mode)), chunk)]

    async def send_entries(self, tag: str, entries: bytes, count: int, option: dict[str, Any] | None = None) -> None:
        """Send one batch of packed entries; return once acked (retrying on other servers), else SendFailed."""
        await self.send_messages(self.messages(tag, entries, count, option))

    async def send(self, tag: str, events: Iterable[tuple[int, int, Any]], option: dict[str, Any] | None = None
                   ) -> None:
        """(seconds, nanos, record) events, EventTime on the wire."""
        events = list(events)
        await self.send_entries(tag, pack_entries(events), len(events), option)

    async def send_messages(self, messages: Sequence[tuple[bytes, str | bytes | None]]) -> None:
        cfg = self.config
        tried: set[int] = set()
        last = "the sender was closed"
        began = time.monotonic()
        attempts = 0
        connected = False
        for attempt in itertools.count():
            if self._closed or (cfg.retries is not None and attempt >= max(cfg.retries, 1)):
                break
            wait = min(cfg.retry_wait * 2 ** (attempt - 1), 30) * (attempt > 1)  # failover to the next: at once
            if attempt and cfg.retry_for is not None:
                left = began + cfg.retry_for - time.monotonic()
                if left <= 0:
                    break
                wait = min(wait, left)  # the last attempt comes when the time is up, not before
            await asyncio.sleep(wait)
            server = self.choose(tried if len(tried) < len(cfg.servers) else set())
            tried.add(id(server))
            attempts += 1
            try:
                link = await self._link(server)
                connected = True
                await link.send(messages)
                if not cfg.keepalive:
                    link.close()
                return
            except AuthenticationError as e:
                last = f"{server}: {e}"
                log.error("handshake failed: %s", e, extra={"peer": str(server)})
                self.down_until[id(server)] = time.monotonic() + max(cfg.recover_wait, 30)
            except (OSError, TimeoutError, ProtocolError) as e:
                last = f"{server}: {failure_reason(e) if str(e) else 'no answer within the connect timeout'}"
                # each attempt is info: the caller reports the chunk's failure (SendFailed) once
                log.info("send to %s failed, retrying: %s", server, last,
                         extra={"peer": str(server), "attempt": attempt + 1})
                if cfg.waiting is not None:
                    cfg.waiting(str(server), failure_reason(e) if str(e) else "no answer within the connect timeout")
                self.down_until[id(server)] = time.monotonic() + cfg.recover_wait
                stale = self.links.pop(id(server), None)
                if stale is not None:
                    stale.close()
        raise SendFailed(f"no server acknowledged the batch after {attempts} attempt{'s' if attempts != 1 else ''}"
                         f" in {time.monotonic() - began:.1f} s; the last: {last}", connected=connected)

    # --- heartbeats feeding the failure detector ---

    async def _heartbeats(self) -> None:
        cfg = self.config
        while not self._closed:
            await asyncio.gather(*(self._beat(s) for s in cfg.servers), return_exceptions=True)
            await asyncio.sleep(cfg.heartbeat_interval)

    async def _beat(self, server: ServerAddress) -> None:
        cfg = self.config
        loop = asyncio.get_running_loop()
        timeout = max(cfg.heartbeat_interval, 0.2)
        if cfg.heartbeat == "transport":
            # a connection as the data takes it (Fluentd's too): to a TLS port only a TLS handshake that
            # verifies counts, and no data is written
            try:
                async with asyncio.timeout(timeout):
                    _, w = await asyncio.open_connection(
                        server.host, server.port, ssl=cfg.tls, server_hostname=self.server_hostname(server))
            except (TimeoutError, OSError):
                return
            w.close()
            self.detectors[id(server)].heartbeat()
            return
        transport = self._udp.get(id(server))
        if transport is None or transport.is_closing():
            detector = self.detectors[id(server)]

            class Reply(asyncio.DatagramProtocol):
                def datagram_received(self, data: bytes, addr: Any) -> None:
                    detector.heartbeat()

                def error_received(self, exc: Exception) -> None:
                    pass

            transport, _ = await loop.create_datagram_endpoint(Reply, remote_addr=(server.host, server.port))
            self._udp[id(server)] = transport
        transport.sendto(b"\x00")


# --- `logport send forward` ---


def add_send_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = ("Read JSON lines from stdin and send them as Forward events. A line is a record, or "
                          '{"tag": ..., "time": seconds (float ok) or "time_ns": int, "record": {...}}.')
    flags.add_server_argument(parser, str(ServerAddress()), repeatable=True, metavar="HOST:PORT[:WEIGHT]")
    parser.add_argument("--standby", action="append", default=[], metavar="HOST:PORT",
                        help="a standby server, used when no other is healthy (repeatable)")
    parser.add_argument("--tag", default="logport.send", help="tag for lines without one")
    parser.add_argument("--mode", choices=[m.value for m in fp.Mode if m is not fp.Mode.JSON],
                        default="PackedForward", help="carrier mode")
    parser.add_argument("--compress", choices=["gzip", "zstd"], default="",
                        help="compress each chunk (CompressedPackedForward)")
    parser.add_argument("--batch", type=int, default=1000, help="lines per chunk")
    flags.add_stream_arguments(parser)
    parser.add_argument("--no-ack", action="store_true", help="do not ask for acks")
    parser.add_argument("--ack-timeout", type=float, default=30.0, help="seconds to wait for a chunk's ack")
    parser.add_argument("--retries", type=int, default=None,
                        help="at most this many attempts per chunk (default: as many as --timeout allows)")
    flags.add_timeout_argument(parser, "no server acknowledged a chunk")
    parser.add_argument("--shared-key", default="", help="the server's shared_key (the handshake)")
    parser.add_argument("--username", default="", help="user for the handshake")
    parser.add_argument("--password", default="", help="password for the handshake")
    parser.add_argument("--hostname", default=socket.gethostname(), help="our hostname in the handshake")
    flags.add_tls_arguments(parser)
    parser.add_argument("--heartbeat", choices=["none", "transport", "udp"], default="none",
                        help="how to tell a server is up between sends")


def _address(text: str, *, standby: bool = False) -> ServerAddress:
    try:
        return ServerAddress.parse(text, standby=standby)
    except ValueError:
        flag = "--standby" if standby else "--server"
        raise ConfigError(f"{flag} {text!r} is not HOST:PORT (or HOST:PORT:WEIGHT)") from None


def sender_config(args: argparse.Namespace, waiting: Callable[[str, str], None] | None = None) -> SenderConfig:
    servers = [_address(s) for s in flags.server_list(args, str(ServerAddress()))]
    servers += [_address(s, standby=True) for s in args.standby]
    compress = args.compress or ("gzip" if args.mode == "CompressedPackedForward" else "")
    return SenderConfig(servers=servers, mode=fp.Mode(args.mode), compress=compress, require_ack=not args.no_ack,
                        ack_timeout=args.ack_timeout, retries=args.retries, retry_for=flags.retry_for(args),
                        shared_key=args.shared_key, username=args.username, password=args.password,
                        hostname=args.hostname, tls=flags.tls_context(args), heartbeat=args.heartbeat,
                        waiting=waiting)


def parse_line(line: bytes | str, default_tag: str) -> tuple[str, int, int, Any]:
    """(tag, seconds, nanoseconds, record) of a line: an envelope `{"tag", "time" or "time_ns", "record"}`,
    or a record (see lines.record_from_line: a line that is not JSON is sent as {"message": line})."""
    obj = record_from_line(line)
    if "record" in obj:
        tag = obj.get("tag") or default_tag
        if "time_ns" in obj:
            seconds, nanos = divmod(int(obj["time_ns"]), 1_000_000_000)
        elif "time" in obj:
            t = float(obj["time"])
            seconds = int(t)
            nanos = min(round((t - seconds) * 1e9), 999_999_999)
        else:
            seconds, nanos = divmod(time.time_ns(), 1_000_000_000)
        record = obj["record"]
        return str(tag), seconds, nanos, record if isinstance(record, dict) else {"message": record}
    seconds, nanos = divmod(time.time_ns(), 1_000_000_000)
    return default_tag, seconds, nanos, obj


def tag_runs(lines: list[bytes], default_tag: str, first_number: int) -> list[tuple[str, list[tuple[int, int, Any]]]]:
    """The events of `lines` (blank ones skipped) as runs of one tag, in input order: chunks sent in this order
    keep what the server acknowledged a prefix of the input, which is what a resume skips."""
    runs: list[tuple[str, list[tuple[int, int, Any]]]] = []
    for number, line in enumerate(lines, first_number):
        if not line.strip():
            continue
        try:
            tag, seconds, nanos, record = parse_line(line, default_tag)
        except (ValueError, TypeError, OverflowError) as e:  # an envelope whose time is not a number
            raise SendFailed(f"line {number}: {e}") from e
        if not runs or runs[-1][0] != tag:
            runs.append((tag, []))
        runs[-1][1].append((seconds, nanos, record))
    return runs


async def send_lines(args: argparse.Namespace, config: SenderConfig, source: SenderInput,
                     progress: SendProgress) -> str:
    """Each batch of lines as one chunk per run of a tag, all written before their acks are awaited."""
    events = 0
    async with ForwardSender(config) as sender:
        async for batch in source.batches(args.batch):
            first = progress.skipped + progress.read - len(batch) + 1
            messages = []
            for tag, run in tag_runs(batch, args.tag, first):
                messages += sender.messages(tag, pack_entries(run), len(run))
                events += len(run)
            progress.sent += len(batch)
            if messages:
                await sender.send_messages(messages)
            progress.acked += len(batch)
    return f"sent {count(events)}, {'none acknowledged (--no-ack)' if args.no_ack else 'all acknowledged'}"


def send_main(args: argparse.Namespace) -> int:
    def sender() -> Sender:
        config = sender_config(args, Waiting("logport send forward", flags.retry_for(args)))
        return Sender("logport send forward", partial(send_lines, args, config), resume)

    return run_sender(sender, args)
