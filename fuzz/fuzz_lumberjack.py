"""atheris target: arbitrary bytes into a Lumberjack connection (sans-IO), either side, v1 and v2.

Byte 0 picks the side (bit 7: client, i.e. acks in), byte 1 the size of the receive_data
pieces. Only RemoteProtocolError (with LimitExceeded, TLSOnPlaintextPort) may come out;
limits are small so decompression bombs and huge windows hit them. Bit 6 of byte 0 makes
the server assemble windows (windows=True, as the listener does): bit 5 answers each
AnnouncedWindow with decode_window (the C pass) rather than "not whole", and the
partial-window timer runs out after every piece; a window's events are packed for the
store as the listener packs them.
"""

from __future__ import annotations

import sys
import zlib

from _fuzzlib import drain, instrumented, pieces, run, vector_stream

with instrumented():
    from logport.errors import RemoteProtocolError
    from logport.protocols import lumberjack as lj


LIMITS = lj.Limits(max_payload_size=64 * 1024, max_decompressed_size=256 * 1024, max_window_size=1000,
                   max_window_bytes=512 * 1024)


def windows_of(data: bytes, decode: bool) -> None:
    """The server's windows, as the listener takes them (every C frame's answer given at once)."""
    conn = lj.Connection(lj.Role.SERVER, LIMITS, peer="fuzz:1", windows=True)

    def take() -> None:
        for event in drain(conn.next_event, lj.NEED_DATA):
            if type(event) is lj.AnnouncedWindow:
                conn.window_decoded(event, lj.decode_window(event.compressed, LIMITS, event.size, 0, 1, "beats", True,
                                                            "fuzz:1", 1 << 20, 0) if decode else None)
            elif type(event) is lj.Window and event.batches is None and event.frames:
                lj.build_batches(event.frames, tag="beats", tag_from_beat=True, peer="fuzz:1", max_body=1 << 20,
                                 received_ns=0)

    try:
        for piece in pieces(data):
            conn.receive_data(piece)
            take()
            conn.partial_window_due(conn.partial_timer)
            take()
    except RemoteProtocolError:
        pass


def test_one_input(data: bytes) -> None:
    if len(data) < 2:
        return
    if data[0] & 0xC0 == 0x40:
        windows_of(data[1:], bool(data[0] & 0x20))
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
    out += [b"\x60\xff" + s for s in streams] + [b"\x40\x02" + s for s in streams]
    out.append(b"\x80\x03" + lj.encode_ack(lj.V2, 0) + lj.encode_ack(lj.V2, 3))
    out.append(b"\x80\xff" + vector_stream("go-lumber-client-v2-window.json", "server->client"))
    return [s for s in out if len(s) > 2]


if __name__ == "__main__":
    run("lumberjack", test_one_input, seeds)
    sys.exit(0)
