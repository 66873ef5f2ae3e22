"""atheris target: arbitrary bytes into a segment-protocol connection (sans-IO), server or client side.

Byte 0 picks the side (bit 7: client), byte 1 the size of the receive_data pieces.
Only SegmentProtocolError / RemoteProtocolError (LimitExceeded) may come out. Every
AppendBlock must hold whole store frames (the listener appends its data as is).
"""

from __future__ import annotations

import sys
import uuid

from _fuzzlib import drain, instrumented, pieces, run

with instrumented():
    from logport.errors import RemoteProtocolError
    from logport.protocols import segment as sp
    from logport.store import frames


LIMITS = sp.Limits(max_message_size=64 * 1024, max_event_size=16 * 1024, max_block_size=64 * 1024)


def test_one_input(data: bytes) -> None:
    if len(data) < 2:
        return
    role = sp.Role.CLIENT if data[0] & 0x80 else sp.Role.SERVER
    conn = sp.Connection(role, LIMITS)
    try:
        for piece in pieces(data[1:]):
            conn.receive_data(piece)
            for event in drain(conn.next_event, sp.NEED_DATA):
                if isinstance(event, sp.AppendBlock):
                    block = bytes(event.data)
                    assert frames.complete_prefix(block) == len(block), "append block of torn frames"
                    assert sum(1 for _ in frames.iter_frames(block)) == event.event_count
                    assert event.end_offset - event.start_offset == len(block)
    except RemoteProtocolError:
        pass


def seeds() -> list[bytes]:
    cid = uuid.UUID(int=7)
    requests = [
        sp.encode(sp.SetupAppend(cid, "seg")),
        sp.encode_block(cid, 0, sp.event_messages([b"one", b"two", b"three"])),
        sp.encode_block(cid, 0, sp.event_messages([b"x" * 100, b"y" * 50]), split_at=130),
        sp.encode(sp.ReadSegment("seg", 0, 1000, 10)),
        sp.encode(sp.CreateSegment("new")) + sp.encode(sp.SealSegment("new")),
        sp.encode(sp.TruncateSegment("seg", 0)) + sp.encode(sp.GetSegmentInfo("seg")) + sp.encode(sp.ListSegments()),
        sp.encode(sp.Authenticate("token")),
        sp.split_into_partials(sp.SetupAppend(cid, "seg"), 8),
    ]
    replies = [
        sp.encode(sp.AppendSetup(segment="seg", connection_id=cid, ack_level=0)),
        sp.encode(sp.KeepAlive()),
    ]
    out = [b"\x00\xff" + r for r in requests] + [b"\x00\x04" + r for r in requests]
    out += [b"\x80\x07" + r for r in replies]
    return [s for s in out if len(s) > 2]


if __name__ == "__main__":
    run("segment", test_one_input, seeds)
    sys.exit(0)
