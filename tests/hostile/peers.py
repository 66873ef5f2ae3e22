"""Well-behaved clients the hostile tests measure beside the attack: one acknowledged send each, timed.

Forward is spoken with raw msgpack (PackedForward with a chunk id, read the ack), so
these tests do not depend on logport's own Forward client; Lumberjack uses the real
pylogbeat; the segment protocol uses logport's exactly-once appender (its only client).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import socket
import struct
import time
from typing import Any

import msgpack
import pylogbeat

from logport.clients.segment import SegmentAppender
from logport.tls import client_context

EVENT_TIME = 0


def event_time(seconds: int, nanos: int = 0) -> msgpack.ExtType:
    return msgpack.ExtType(EVENT_TIME, struct.pack(">II", seconds, nanos))


def forward_entries(count: int, size: int = 100, tag_index: int = 0) -> bytes:
    packer = msgpack.Packer()
    now = int(time.time())
    record = {"message": "m" * max(1, size - 30), "i": tag_index}
    return b"".join(packer.pack([event_time(now, i), record]) for i in range(count))


def forward_message(tag: str, entries: bytes, count: int, chunk: str) -> bytes:
    return msgpack.packb([tag, entries, {"chunk": chunk, "size": count}], use_bin_type=True)


def read_forward_ack(sock: socket.socket, unpacker: msgpack.Unpacker) -> dict[str, Any]:
    while True:
        for obj in unpacker:
            return obj  # type: ignore[no-any-return]
        data = sock.recv(65536)
        if not data:
            raise ConnectionError("forward server closed the connection before the ack")
        unpacker.feed(data)


def forward_send_acked(port: int, count: int = 10, tag: str = "hostile.normal", timeout: float = 10.0,
                       ca: str | None = None) -> float:
    """One PackedForward message with a chunk id on a fresh connection (TLS when `ca` is given, the
    server's certificate checked against it); seconds until its ack."""
    chunk = os.urandom(16).hex()
    began = time.monotonic()
    with contextlib.ExitStack() as stack:
        sock = stack.enter_context(socket.create_connection(("127.0.0.1", port), timeout=timeout))
        if ca is not None:
            sock = stack.enter_context(client_context(ca=ca).wrap_socket(sock, server_hostname="localhost"))
        sock.sendall(forward_message(tag, forward_entries(count), count, chunk))
        ack = read_forward_ack(sock, msgpack.Unpacker(raw=False))
    assert ack == {"ack": chunk}, ack
    return time.monotonic() - began


def lumberjack_send_acked(port: int, count: int = 10, timeout: float = 10.0, ca: str | None = None) -> float:
    """One window through pylogbeat on a fresh connection (TLS when `ca` is given); seconds until it was
    acknowledged."""
    began = time.monotonic()
    tls: dict[str, Any] = {"ssl_enable": True, "ca_certs": ca} if ca is not None else {}
    with pylogbeat.PyLogBeatClient("127.0.0.1", port, timeout=timeout, **tls) as client:
        client.send([{"message": f"normal {i}", "@metadata": {"beat": "hostile"}} for i in range(count)])
    return time.monotonic() - began


async def segment_send_acked(port: int, count: int = 10, segment: str = "hostile-normal",
                             timeout: float = 10.0, ca: str | None = None) -> float:
    """`count` events appended and flushed (DataAppended) on a fresh appender (TLS when `ca` is given);
    seconds until durable."""
    began = time.monotonic()
    appender = SegmentAppender("127.0.0.1", port, segment, retry_for=timeout, connect_timeout=timeout,
                               ssl=client_context(ca=ca) if ca is not None else None)
    await appender.start()
    try:
        await appender.append_many([b"normal %d" % i for i in range(count)])
        await asyncio.wait_for(appender.flush(), timeout)
    finally:
        await appender.close(flush=False)
    return time.monotonic() - began


# --- the Forward handshake, spoken by hand (for wrong keys) ---


def _hex512(*parts: bytes) -> str:
    return hashlib.sha512(b"".join(parts)).hexdigest()


def _b(value: str | bytes) -> bytes:
    return value.encode() if isinstance(value, str) else value


def forward_handshake(port: int, shared_key: str, hostname: str = "brute", timeout: float = 5.0) -> str:
    """Connect and try `shared_key`: "helo-refused" (closed before HELO), "accepted", or "refused"."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        unpacker = msgpack.Unpacker(raw=False)
        try:
            helo = read_forward_ack(sock, unpacker)
        except (ConnectionError, OSError):
            return "helo-refused"
        assert isinstance(helo, list) and helo[0] == "HELO", helo
        nonce = _b(helo[1]["nonce"])
        salt = os.urandom(16).hex()
        digest = _hex512(salt.encode(), hostname.encode(), nonce, shared_key.encode())
        sock.sendall(msgpack.packb(["PING", hostname, salt, digest, "", ""], use_bin_type=True))
        try:
            pong = read_forward_ack(sock, unpacker)
        except (ConnectionError, OSError):
            return "refused"  # closed without a PONG (as Fluent Bit does)
        assert isinstance(pong, list) and pong[0] == "PONG", pong
        return "accepted" if pong[1] else "refused"
