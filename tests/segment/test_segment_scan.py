"""The segment protocol's C loops against the Python versions they stand in for: the same answer
for any bytes, any window into them and any limits (walk_events), and the same pieces for any
bodies (append_event_frames). (A reader's cut into frames is the store's: tests/store/test_frames.py.)"""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from logport.errors import LimitExceeded
from logport.protocols import segment as sp

try:
    from logport.protocols._segment_scan import append_event_frames, walk_events
except ImportError:  # pragma: no cover - the test below says what is missing
    append_event_frames = walk_events = None  # type: ignore[assignment]


def test_the_c_loops_are_built() -> None:
    assert walk_events is not None and append_event_frames is not None, (
        "logport.protocols._segment_scan was not built: install a C compiler and the Python headers, "
        "then `pip install -e .` again (make setup does both)")
    assert sp.walk_events is walk_events and sp.append_event_frames is append_event_frames


def message(type_code: int, body: bytes, length: int | None = None) -> bytes:
    return struct.pack(">iI", type_code, len(body) if length is None else length) + body


# streams of Event messages with now and then something else: another type, a length past the
# limit or past what follows, a cut header
pieces = st.one_of(
    st.binary(max_size=40).map(lambda b: message(0, b)),
    st.binary(max_size=40).map(lambda b: message(0, b)),
    st.tuples(st.integers(-2**31, 2**31 - 1), st.binary(max_size=20)).map(lambda t: message(*t)),
    st.integers(0, 2**32 - 1).map(lambda n: message(0, b"", n)),
    st.binary(max_size=7),
)
streams = st.one_of(st.binary(max_size=300), st.lists(pieces, max_size=12).map(b"".join))


def both(data: bytes | bytearray | memoryview, start: int, avail: int, remaining: int,
         max_event: int) -> tuple[int, int, int]:
    assert walk_events is not None
    got = walk_events(data, start, avail, remaining, max_event)
    assert got == sp.walk_events_in_python(data, start, avail, remaining, max_event)
    return got


@given(streams, st.data())
@settings(max_examples=500)
def test_walk_agrees_on_any_window_and_limits(data: bytes, draw: st.DataObject) -> None:
    start = draw.draw(st.integers(0, len(data)))
    avail = draw.draw(st.integers(0, len(data) - start))
    remaining = draw.draw(st.one_of(st.integers(0, 400), st.just(2**40)))
    max_event = draw.draw(st.one_of(st.integers(0, 50), st.just(2**32)))
    taken, events, stop = both(data, start, avail, remaining, max_event)
    assert 0 <= taken <= min(avail, remaining) and 0 <= events and stop in (0, sp.WALK_TOO_LARGE, sp.WALK_CROSSES)


def test_walk_answers() -> None:
    events = message(0, b"abc") + message(0, b"defgh")  # 11 + 13 bytes
    assert both(events, 0, 24, 100, 100) == (24, 2, 0)
    assert both(events, 0, 20, 100, 100) == (11, 1, 0)  # the second has not all arrived
    assert both(events, 11, 13, 100, 100) == (13, 1, 0)
    assert both(events + message(-5, b"x"), 0, 33, 100, 100) == (24, 2, 0)  # stops at another type
    assert both(events, 0, 24, 11, 100) == (11, 1, 0)  # the block ends after the first
    assert both(events, 0, 24, 20, 100) == (11, 1, sp.WALK_CROSSES)
    assert both(events, 0, 24, 100, 4) == (11, 1, sp.WALK_TOO_LARGE)
    assert both(bytearray(events), 0, 24, 100, 100) == (24, 2, 0)
    assert both(memoryview(events), 0, 24, 100, 100) == (24, 2, 0)


def test_walk_refuses_a_window_outside_the_buffer() -> None:
    assert walk_events is not None
    with pytest.raises(ValueError, match="within the buffer"):
        walk_events(b"12345678", 4, 5, 100, 100)
    with pytest.raises(ValueError, match="within the buffer"):
        walk_events(b"12345678", -1, 1, 100, 100)


@given(st.lists(st.one_of(st.binary(max_size=2000), st.binary(max_size=5).map(bytearray),
                          st.binary(max_size=5).map(memoryview)), max_size=200), st.lists(st.binary(), max_size=2))
def test_framing_agrees(bodies: list[bytes], before: list[bytes]) -> None:
    assert append_event_frames is not None
    for given_bodies in (bodies, tuple(bodies)):
        got, expected = list(before), list(before)
        assert append_event_frames(got, given_bodies) == sp.append_event_frames_in_python(expected, given_bodies)
        assert got == expected and all(type(piece) is bytes for piece in got)


def test_framed_bodies_are_kept_as_they_are_or_copied() -> None:
    """bytes are kept (no copy); anything else is copied, since the pieces wait for their ack."""
    assert append_event_frames is not None
    body = b"x" * 100
    mutable = bytearray(b"abc")
    pending: list[bytes] = []
    assert append_event_frames(pending, [body, mutable]) == 8 + 100 + 8 + 3
    assert pending[1] is body
    mutable[0] = ord("z")
    assert b"".join(pending) == sp.HEADER.pack(0, 100) + body + sp.HEADER.pack(0, 3) + b"abc"


def test_framing_refuses_what_is_not_a_buffer() -> None:
    assert append_event_frames is not None
    for frame in (append_event_frames, sp.append_event_frames_in_python):
        pending = [b"before"]
        for bad in ("text", 5):
            with pytest.raises(TypeError):
                frame(pending, [b"ok", bad])
            assert pending == [b"before"]  # all or nothing: the appender's byte counts stay true
    with pytest.raises(TypeError):
        append_event_frames([], 5)
    with pytest.raises(TypeError):
        append_event_frames((), [b"x"])


def test_the_listener_names_the_limit_and_the_value() -> None:
    """What the C walk stops at still raises the listener's errors (see test_protocol for the rest)."""
    import uuid

    conn = sp.Connection(sp.Role.SERVER, sp.Limits(max_event_size=100))
    block = sp.encode_block(uuid.UUID(int=1), 0, message(0, b"x" * 10) + message(0, b"y" * 200))
    conn.receive_data(block)
    with pytest.raises(LimitExceeded, match="max_event_size") as raised:
        while conn.next_event() is not sp.NEED_DATA:
            pass
    assert raised.value.value == 200
