"""protocols/logjam.py's Connection: multipart messages in, events out; replies in, frames out (tables)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from logport.errors import LimitExceeded, LocalProtocolError
from logport.protocols import NEED_DATA
from logport.protocols import logjam as lj

META = lj.Meta(lj.NO_COMPRESSION, 3, 1_795_316_400_123, 9)
DATA = [b"app-production", b"logs.app", b'{"a":1}', META.pack()]
PING = [b"ping", b"app-production", b"", META.pack()]
HEARTBEAT = [b"heartbeat", b"tcp://h:9606", b"{}", META.pack()]
MSG = lj.DataMessage(b"app-production", b"logs.app", b'{"a":1}', META)


def first_event(socket: lj.SocketKind, frames: list[bytes]) -> Any:
    conn = lj.Connection(socket)
    conn.receive_message(frames)
    event = conn.next_event()
    assert conn.next_event() is NEED_DATA
    return event


@pytest.mark.parametrize(("socket", "frames", "expected"), [
    ("router", [b"r1", *DATA], lj.Received(MSG, b"r1")),
    ("router", [b"r1", b"", *DATA], lj.Received(lj.DataMessage(*DATA[:3], META, sync=True), b"r1")),
    ("router", [b"r1", *DATA[:3]], lj.Received(lj.DataMessage(*DATA[:3], None), b"r1")),
    ("router", [b"r1", b"", *PING], lj.Received(lj.PingRequest(b"app-production", True), b"r1")),
    ("router", [b"r1", *PING], lj.Received(lj.PingRequest(b"app-production", False), b"r1")),
    ("pull", DATA, lj.Received(MSG)),
    ("pull", DATA[:3], lj.Received(lj.DataMessage(*DATA[:3], None))),
    ("pull", PING, lj.Received(lj.PingRequest(b"app-production", False))),
    ("sub", DATA, lj.Received(MSG)),
    ("sub", HEARTBEAT, lj.Received(lj.Heartbeat(b"tcp://h:9606", META))),
])
def test_messages_become_events(socket: lj.SocketKind, frames: list[bytes], expected: Any) -> None:
    assert first_event(socket, frames) == expected


@pytest.mark.parametrize(("socket", "frames", "reason", "first_frame", "sync"), [
    ("router", [], "frames", b"", False),
    ("router", [b"r1"], "frames", b"", False),
    ("router", [b"r1", b"", *DATA[:3]], "frames", b"app-production", True),  # sync needs the meta
    ("router", [b"r1", b"", b"app", *DATA[1:]], "app_env", b"app", True),
    ("router", [b"r1", *DATA[:3], b"short"], "meta", b"app-production", False),
    ("router", [b"r1", b"", b"ping", b"x"], "frames", b"ping", True),
    ("pull", [b"app-production", b"metrics", *DATA[2:]], "topic", b"app-production", False),
    ("pull", DATA + [b"5th"], "frames", b"app-production", False),
    ("sub", DATA[:3], "frames", b"app-production", False),
    ("sub", [*DATA[:3], lj.META.pack(lj.TAG, 7, 1, 0, 0, 0)], "compression", b"app-production", False),
])
def test_messages_that_break_the_protocol_are_refused(socket: lj.SocketKind, frames: list[bytes], reason: str,
                                                      first_frame: bytes, sync: bool) -> None:
    event = first_event(socket, frames)
    assert isinstance(event, lj.Refused)
    assert (event.error.reason, event.first_frame, event.sync) == (reason, first_frame, sync)  # type: ignore[attr-defined]
    assert event.route == (frames[0] if socket == "router" and frames else b"")


# (what came in, the reply sent) -> its frames, or LocalProtocolError
@pytest.mark.parametrize(("frames", "reply", "expected"), [
    ([b"r1", b"", *DATA], lj.Accept(b"r1", b"app-production"), [b"r1", b"app-production", lj.ACCEPTED]),
    ([b"r1", b"", *DATA], lj.BadRequest(b"r1", b"app-production"), [b"r1", b"app-production", lj.BAD_REQUEST]),
    ([b"r1", b"", *PING], lj.Pong(b"r1", b"host"), [b"r1", b"ping", lj.OK, b"host"]),
    ([b"r1", b"", b"x"], lj.BadRequest(b"r1", b"x"), [b"r1", b"x", lj.BAD_REQUEST]),
    ([b"r1", b"", *PING], lj.Accept(b"r1", b"app-production"), LocalProtocolError),  # a ping gets a pong
    ([b"r1", b"", *DATA], lj.Pong(b"r1", b"host"), LocalProtocolError),
    ([b"r1", b"", b"x"], lj.Accept(b"r1", b"x"), LocalProtocolError),  # refused: never accepted
    ([b"r1", *DATA], lj.Accept(b"r1", b"app-production"), LocalProtocolError),  # async: no reply
    ([b"r1", b"", *DATA], lj.Accept(b"r2", b"app-production"), LocalProtocolError),  # another sender
])
def test_replies_as_the_table_allows(frames: list[bytes], reply: lj.Reply, expected: Any) -> None:
    conn = lj.Connection("router")
    conn.receive_message(frames)
    conn.next_event()
    if expected is LocalProtocolError:
        with pytest.raises(LocalProtocolError):
            conn.send(reply)
    else:
        assert conn.owed(reply.route) is lj.Owed.REPLY
        assert conn.send(reply) == expected
        assert conn.owed(reply.route) is lj.Owed.NOTHING
        with pytest.raises(LocalProtocolError):  # one reply per sync message
            conn.send(reply)


def test_replies_owed_to_one_sender_go_in_order() -> None:
    conn = lj.Connection("router")
    for frames in ([b"r1", b"", *DATA], [b"r1", b"", *PING], [b"r1", b"", *DATA]):
        conn.receive_message(frames)
    while conn.next_event() is not NEED_DATA:
        pass
    with pytest.raises(LocalProtocolError):
        conn.send(lj.Pong(b"r1", b"h"))  # the data message came first
    assert conn.send(lj.Accept(b"r1", b"app-production"))[-1] == lj.ACCEPTED
    conn.forgo_reply(b"r1")  # the ping's
    conn.expect_reply(b"r1")  # a fourth, taken by the listener's C pass
    conn.forgo_reply(b"r1")
    conn.forgo_reply(b"r1")
    assert conn.owed(b"r1") is lj.Owed.NOTHING
    with pytest.raises(LocalProtocolError):
        conn.forgo_reply(b"r1")


@pytest.mark.parametrize("socket", ["pull", "sub"])
def test_pull_and_sub_send_nothing(socket: lj.SocketKind) -> None:
    conn = lj.Connection(socket)
    conn.receive_message(DATA)
    conn.next_event()
    with pytest.raises(LocalProtocolError):
        conn.send(lj.Accept(b"", b"app-production"))


def test_unknown_socket_kind() -> None:
    with pytest.raises(LocalProtocolError, match="dealer"):
        lj.Connection("dealer")  # type: ignore[arg-type]


def test_nothing_received_is_need_data() -> None:
    assert lj.Connection("router").next_event() is NEED_DATA


def test_limits_are_not_the_connections() -> None:
    # decoding a body (and its max_decompressed_size) is the listener's, after next_event
    assert isinstance(first_event("pull", [*DATA[:2], b"x" * 100, META.pack()]), lj.Received)
    with pytest.raises(LimitExceeded):
        lj.decompress(b"x" * 100, lj.NO_COMPRESSION, 99)


@given(st.lists(st.lists(st.binary(max_size=30) | st.sampled_from([b"", b"ping", *DATA, *PING]), max_size=7),
                max_size=5), st.sampled_from(["router", "pull", "sub"]))
def test_arbitrary_frames_give_events_never_exceptions(batch: list[list[bytes]], socket: lj.SocketKind) -> None:
    conn = lj.Connection(socket)
    for frames in batch:
        conn.receive_message(frames)
    events = []
    while (event := conn.next_event()) is not NEED_DATA:
        events.append(event)
    assert len(events) == len(batch)
    for frames, event in zip(batch, events, strict=True):
        assert isinstance(event, lj.Received | lj.Refused)
        owed = isinstance(event, lj.Refused) and event.sync or isinstance(event, lj.Received) and getattr(
            event.event, "sync", False)
        assert owed == (socket == "router" and len(frames) > 1 and not frames[1])
