"""What the Forward listener says about bytes that are no Forward: the reason with the byte and its
offset (msgpack's own exceptions carry no text: `invalid msgpack: ` once ended there), and, for an HTTP
request or a TLS handshake, what the peer speaks instead."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import msgpack
import pytest

from logport.errors import RemoteProtocolError
from logport.protocols import forward as fp
from tests.forward.helpers import forward_config, running_hub

HTTP_HINT = "the Forward port speaks Fluentd's msgpack protocol, not HTTP"

# (bytes a peer sends first, what the error says)
FOREIGN = [
    (b"\xc1", "invalid msgpack: byte 0xc1 at offset 0 is not valid msgpack"),
    (b"\x93\xa1t\xc1", "invalid msgpack: byte 0xc1 at offset 3 is not valid msgpack"),
    (msgpack.packb(["t", 1, {}]) + b"\x92\xc1", "byte 0xc1 at offset 6 is not valid msgpack"),  # in the second message
    (b"\x91" * 2000, "invalid msgpack: values nested deeper than msgpack's limit at offset"),
    (b"\x81\x90\x01", "invalid msgpack: unhashable type: 'list' at offset 2"),
    # byte by byte, the method alone tells (the target is not there yet when the first bytes fail)
    (b"GET / HTTP/1.1\r\nHost: logs:24224\r\n\r\n", "this looks like HTTP (GET"),
    (b"POST /api/v1/ingest HTTP/1.1\r\nContent-Type: application/json\r\n\r\n{}", "this looks like HTTP (POST"),
    (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", "this looks like a TLS handshake, and this Forward port has no TLS"),
    (b"hello\n", "expected a [tag, ...] array, got 104"),
]
IDS = ["0xc1", "0xc1-inside-an-array", "0xc1-in-a-second-message", "nested-too-deep", "unhashable-key", "http-get",
       "http-post", "tls-client-hello", "text"]


@pytest.mark.parametrize(("wire", "message"), FOREIGN, ids=IDS)
@pytest.mark.parametrize("split", [0, 1], ids=["whole", "byte-by-byte"])
def test_the_error_says_what_was_found(wire: bytes, message: str, split: int) -> None:
    conn = fp.ServerConnection(peer="10.0.0.1:5000")
    pieces = [wire[i:i + 1] for i in range(len(wire))] if split else [wire]
    with pytest.raises(RemoteProtocolError) as info:
        for piece in pieces:
            conn.receive_data(piece)
            while conn.next_event() is not fp.NEED_DATA:
                pass
    assert message in str(info.value) and info.value.peer == "10.0.0.1:5000", str(info.value)
    if message.startswith("this looks like HTTP"):
        assert HTTP_HINT in str(info.value)
        if not split:
            assert wire.split(b" HTTP/")[0].decode() in str(info.value)  # "(GET /)", "(POST /api/v1/ingest)"


def test_http_before_the_handshake_is_refused_with_the_same_words() -> None:
    conn = fp.ServerConnection(shared_key="k", peer="10.0.0.1:5000")
    conn.initiate()
    conn.receive_data(b"GET /metrics HTTP/1.1\r\n\r\n")
    ping = conn.next_event()
    assert isinstance(ping, fp.Ping) and ping.error.startswith(f"this looks like HTTP (GET /metrics): {HTTP_HINT}")


def test_http_after_a_forward_message_is_no_foreign_protocol() -> None:
    """Only a connection's first bytes tell its protocol: later garbage is just garbage."""
    conn = fp.ServerConnection()
    conn.receive_data(msgpack.packb(["t", 1, {}]) + b"GET / HTTP/1.1\r\n")
    assert isinstance(conn.next_event(), fp.EventBatch)
    with pytest.raises(RemoteProtocolError, match=r"expected a \[tag, \.\.\.\] array, got 71"):
        conn.next_event()


@pytest.mark.parametrize(("wire", "message"), [
    (b"\x93\xa1t\xc1", "invalid msgpack: byte 0xc1 at offset 3 is not valid msgpack"),
    (b"GET /api/v1/logs HTTP/1.1\r\nHost: logs\r\n\r\n", f"this looks like HTTP (GET /api/v1/logs): {HTTP_HINT}"),
], ids=["0xc1", "http-get"])
async def test_the_listener_logs_the_reason(tmp_path: Path, caplog: pytest.LogCaptureFixture, wire: bytes,
                                            message: str) -> None:
    caplog.set_level(logging.WARNING, logger="logport.forward")
    config = forward_config(tmp_path)
    async with running_hub(config):
        reader, writer = await asyncio.open_connection("127.0.0.1", config.forward.port)
        writer.write(wire)
        assert await asyncio.wait_for(reader.read(), 10) == b""  # closed, nothing answered
        writer.close()
    (line,) = [r.getMessage() for r in caplog.records if "protocol error" in r.getMessage()]
    assert message in line, line
