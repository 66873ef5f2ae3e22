"""atheris target: arbitrary bytes into a Lumberjack connection (sans-IO), either side, v1 and v2.

Byte 0 picks the side (bit 7: client, i.e. acks in), byte 1 the size of the receive_data
pieces. Only RemoteProtocolError (with LimitExceeded, TLSOnPlaintextPort) may come out;
limits are small so decompression bombs and huge windows hit them.
"""

from __future__ import annotations

import sys
import zlib

from _fuzzlib import drain, instrumented, pieces, run, vector_stream

with instrumented():
    from logport.errors import RemoteProtocolError
    from logport.protocols import lumberjack as lj


LIMITS = lj.Limits(max_payload_size=64 * 1024, max_decompressed_size=256 * 1024, max_window_size=1000)


def test_one_input(data: bytes) -> None:
    if len(data) < 2:
        return
    role = lj.Role.CLIENT if data[0] & 0x80 else lj.Role.SERVER
    conn = lj.Connection(role, LIMITS, peer="fuzz:1")
    try:
        for piece in pieces(data[1:]):
            conn.receive_data(piece)
            for _ in drain(conn.next_event, lj.NEED_DATA):
                pass
    except RemoteProtocolError:
        pass


def seeds() -> list[bytes]:
    frames = lj.encode_json(1, b'{"message":"a","@timestamp":"2026-01-01T00:00:00.123456789Z"}') + \
        lj.encode_json(2, b'{"message":"b"}')
    streams = [
        lj.encode_window(lj.V2, 2) + frames,
        lj.encode_window(lj.V2, 2) + lj.compressed_frame(lj.V2, frames),
        lj.encode_window(lj.V1, 1) + lj.encode_data_v1(1, {"line": "x", "host": "h"}),
        lj.encode_window(lj.V2, 0),
        b"2C" + len(zlib.compress(b"\x00" * 100000)).to_bytes(4, "big") + zlib.compress(b"\x00" * 100000),
        b"\x16\x03\x01\x00\x10",
        vector_stream("go-lumber-client-v2-window.json", "client->server"),
    ]
    out = [b"\x00\xff" + s for s in streams] + [b"\x00\x02" + s for s in streams]
    out.append(b"\x80\x03" + lj.encode_ack(lj.V2, 0) + lj.encode_ack(lj.V2, 3))
    out.append(b"\x80\xff" + vector_stream("go-lumber-client-v2-window.json", "server->client"))
    return [s for s in out if len(s) > 2]


if __name__ == "__main__":
    run("lumberjack", test_one_input, seeds)
    sys.exit(0)
