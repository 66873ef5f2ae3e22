"""A logjam producer as the logjam agent talks (DEALER, 4 frames; sync with the empty frame; ping),
and `logport send logjam`.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import orjson
import zmq
import zmq.asyncio

from logport import zmqcurve
from logport.clients import flags
from logport.clients.lines import count, record_from_line
from logport.clients.stream import Sender, SenderInput, SendProgress, Waiting, run_sender
from logport.clients.stream import skip_acknowledged as resume
from logport.errors import ConfigError, LogportError, RemoteProtocolError
from logport.protocols import logjam as lj

DEFAULT_ROUTER = "tcp://127.0.0.1:9604"
DEFAULT_SERVER = "127.0.0.1:9604"  # `logport send logjam --server`
LATE_REPLY = 1.0  # seconds without a reply before a waiting producer says it waits


class LogjamRefused(RemoteProtocolError):
    """The device answered a sync send with something other than `202 Accepted`."""


class LogjamProducer:
    """Sends to a logjam-device's ROUTER. Sync sends wait for the reply (the device stored the message)."""

    def __init__(self, endpoint: str = DEFAULT_ROUTER, app_env: str = "logport-production",
                 topic: str = "logs", *, compression: str = "none", device: int = 0,
                 ctx: zmq.asyncio.Context | None = None, curve_server_key: str = "", curve_secret_key: str = "",
                 waiting: Callable[[str, str], None] | None = None) -> None:
        self.app_env = app_env.encode()
        self.topic = topic.encode()
        lj.check_names(self.app_env, self.topic)
        self.compression = lj.COMPRESSION_NAMES[compression]
        self.device = device
        self.sequence = lj.Sequencer()
        self.endpoint = endpoint
        self.waiting = waiting  # told (endpoint, why) when a reply is late
        self._own_ctx = ctx is None
        self.ctx = ctx or zmq.asyncio.Context()
        self.curve = (curve_server_key, curve_secret_key)
        self.sock = self._connect()
        self.sock.setsockopt(zmq.LINGER, 2000)  # let queued async sends go out on close

    def _connect(self) -> zmq.asyncio.Socket:
        sock = self.ctx.socket(zmq.DEALER)
        server_key, secret = self.curve
        if server_key:
            zmqcurve.make_client(sock, server_key, secret)
        sock.connect(self.endpoint)
        return sock

    def frames(self, body: Any, app_env: bytes | None = None, topic: bytes | None = None) -> list[bytes]:
        json = body if isinstance(body, bytes) else orjson.dumps(body)
        meta = lj.Meta(self.compression, self.device, int(time.time() * 1000), self.sequence.next())
        return lj.data_frames(app_env or self.app_env, topic or self.topic, lj.compress(json, self.compression), meta)

    async def send(self, body: Any, *, app_env: str | None = None, topic: str | None = None) -> None:
        """Fire and forget (the agent's default): 4 frames, no reply."""
        await self.sock.send_multipart(self.frames(body, _enc(app_env), _enc(topic)))

    async def send_sync(self, body: Any, *, app_env: str | None = None, topic: str | None = None,
                        timeout: float = 10.0) -> None:
        """Empty frame + 4 frames; returns once the device answered `202 Accepted`."""
        reply = await self._request(self.frames(body, _enc(app_env), _enc(topic)), timeout)
        if len(reply) < 2 or reply[1] != lj.ACCEPTED:
            raise LogjamRefused(f"logjam device {self.endpoint} answered {reply!r:.200}")

    async def ping(self, timeout: float = 10.0) -> str:
        """The device's host name from its `200 OK`."""
        meta = lj.Meta(lj.NO_COMPRESSION, self.device, int(time.time() * 1000), 0)
        reply = await self._request([lj.PING, self.app_env, b"{}", meta.pack()], timeout)
        if len(reply) != 3 or reply[1] != lj.OK:
            raise LogjamRefused(f"logjam device {self.endpoint} answered the ping with {reply!r:.200}")
        return reply[2].decode("utf-8", "replace")

    async def _request(self, frames: list[bytes], timeout: float) -> list[bytes]:
        await self.sock.send_multipart([b"", *frames])
        reply = asyncio.ensure_future(self.sock.recv_multipart())
        done, _ = await asyncio.wait((reply,), timeout=min(timeout, LATE_REPLY))
        if not done and timeout > LATE_REPLY:
            if self.waiting is not None:
                self.waiting(self.endpoint, f"no reply within {LATE_REPLY:g} s")
            rest = timeout - LATE_REPLY
            done, _ = await asyncio.wait((reply,), timeout=rest if rest < 1e9 else None)
        if done:
            return reply.result()
        reply.cancel()
        # a DEALER would pair a late reply with the next request: start over with a fresh socket
        self.sock.close(linger=0)
        self.sock = self._connect()
        raise LogportError(f"no reply from logjam device {self.endpoint} within {timeout:g} s")

    def close(self) -> None:
        self.sock.close()
        if self._own_ctx:
            self.ctx.term()


def _enc(value: str | None) -> bytes | None:
    return value.encode() if value is not None else None


# --- logport send logjam ---

# async sends: a batch of lines, then a ping whose answer says the device stored them; with the ping, fewer than
# ZeroMQ's default SNDHWM (1000), so a batch never blocks on a device that is not there yet: the ping times out
LINES_PER_PING = 500


def add_send_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = ("Send JSON lines from stdin as logjam messages to a logjam-device's ROUTER "
                          "(one JSON object per line; other lines are sent as {\"message\": line}).")
    flags.add_server_argument(parser, DEFAULT_SERVER, metavar="HOST:PORT",
                              help="the device's ROUTER (HOST:PORT, or a ZeroMQ endpoint: tcp://HOST:PORT)")
    parser.add_argument("--app-env", default="logport-production", help="application-environment")
    parser.add_argument("--topic", default="logs", help="logjam topic (logs.*, events.*, ...)")
    parser.add_argument("--compression", choices=list(lj.COMPRESSION_NAMES), default="none")
    parser.add_argument("--sync", action="store_true",
                        help="wait for 202 Accepted after each message (default: a ping after each batch)")
    parser.add_argument("--ping", action="store_true", help="ping the device first and print its host name")
    flags.add_stream_arguments(parser)
    flags.add_timeout_argument(parser, "the device does not answer")
    parser.add_argument("--curve-server-key", default="", help="the device's CurveZMQ public key (Z85): encrypt")
    parser.add_argument("--curve-secret-key", default="",
                        help="our CurveZMQ secret key (Z85), for a device that lists allowed clients; "
                             "default: a fresh keypair")
    # the other senders' TLS flags, hidden: ZeroMQ has no TLS, and using one says what to use instead
    parser.add_argument("--tls", "--tls-insecure", "--insecure", "--tls-no-verify", dest="tls", action="store_true",
                        help=argparse.SUPPRESS)
    parser.add_argument("--tls-ca", "--tls-cert", "--tls-key", "--ca", dest="tls_file", default="",
                        help=argparse.SUPPRESS)


def endpoint(server: str) -> str:
    """A ZeroMQ endpoint for --server: `HOST:PORT` means tcp://HOST:PORT."""
    return server if "://" in server else f"tcp://{server}"


async def send_lines(args: argparse.Namespace, source: SenderInput, progress: SendProgress) -> str:
    """Each line a message; a batch is acknowledged by a ping after it (the device answers a ping once it has
    stored the messages before it), or message by message with --sync (202 Accepted once stored)."""
    timeout = args.timeout if args.timeout > 0 else float("inf")  # _request waits for ever past 1e9 s
    producer = LogjamProducer(endpoint(flags.server_list(args, DEFAULT_SERVER)[0]), args.app_env, args.topic,
                              compression=args.compression, curve_server_key=args.curve_server_key,
                              curve_secret_key=args.curve_secret_key,
                              waiting=Waiting("logport send logjam", flags.retry_for(args)))
    sent = 0
    try:
        if args.ping:
            print(f"ping: 200 OK from {await producer.ping(timeout)}", file=sys.stderr)
        async for batch in source.batches(LINES_PER_PING):
            before = progress.read - len(batch)
            messages = 0
            for number, line in enumerate(batch, before + 1):
                if not line.strip():
                    continue
                record = record_from_line(line)
                progress.sent = number
                if args.sync:
                    await producer.send_sync(record, timeout=timeout)
                    progress.acked = number
                else:
                    await producer.send(record)
                messages += 1
            progress.sent = progress.read
            if messages and not args.sync:
                await producer.ping(timeout)
            progress.acked = progress.read
            sent += messages
    finally:
        producer.close()
    answered = "each answered 202 Accepted" if args.sync else "the device answered a ping after the last"
    return f"sent {count(sent, 'message')}, all stored ({answered})"


def send_main(args: argparse.Namespace) -> int:
    def sender() -> Sender:
        if args.tls or args.tls_file:
            raise ConfigError("ZeroMQ has no TLS; encrypt with CurveZMQ instead (--curve-server-key: the device's "
                              "public key)")
        try:
            lj.check_names(args.app_env.encode(), args.topic.encode())
        except lj.InvalidMessage as e:
            raise ConfigError(f"{e} (--app-env like shop-production, --topic like logs.shop)") from None
        flags.server_list(args, DEFAULT_SERVER)
        return Sender("logport send logjam", partial(send_lines, args), resume)

    return run_sender(sender, args)
