"""store/frames.py's walks: the C cut of whole frames against its Python reference (the same frames, as views
of the same buffer), the walks built on it (complete_prefix, is_boundary, reaches, read_frame) against a plain
reading of the frames, and the stitcher across reads of any cut."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from logport.store import frames

try:
    from logport.store._frames import frame_list
except ImportError:  # pragma: no cover - the test below says what is missing
    frame_list = None  # type: ignore[assignment]


def test_the_c_walks_are_built() -> None:
    assert frame_list is not None, ("logport.store._frames was not built: install a C compiler and the Python "
                                    "headers, then `pip install -e .` again (make setup does both)")
    assert frames.frame_list is frame_list and frames.next_record is not frames.next_record_in_python


def message(type_code: int, body: bytes, length: int | None = None) -> bytes:
    return struct.pack(">iI", type_code, len(body) if length is None else length) + body


# frames of any type, now and then a length past what follows or a cut header
pieces = st.one_of(
    st.binary(max_size=40).map(lambda b: message(0, b)),
    st.tuples(st.integers(-2**31, 2**31 - 1), st.binary(max_size=20)).map(lambda t: message(*t)),
    st.integers(0, 2**32 - 1).map(lambda n: message(0, b"", n)),
    st.binary(max_size=7),
)
streams = st.one_of(st.binary(max_size=300), st.lists(pieces, max_size=12).map(b"".join))


@given(streams, st.integers(0, 2**62), st.sampled_from([bytes, bytearray, memoryview]), st.integers(0, 5))
def test_frame_lists_agree(data: bytes, base: int, kind: type, skip: int) -> None:
    assert frame_list is not None
    given_data = kind(data)
    if kind is memoryview:
        given_data = memoryview(b"?" * skip + data)[skip:]  # a view that starts inside its buffer
    got, consumed = frame_list(given_data, base)
    expected, expected_consumed = frames.frame_list_in_python(given_data, base)
    assert consumed == expected_consumed
    assert [(o, t, bytes(b)) for o, t, b in got] == [(o, t, bytes(b)) for o, t, b in expected]
    for _, _, body in got:
        assert type(body) is memoryview and body.readonly == (kind is not bytearray)
        assert body.obj is (given_data.obj if isinstance(given_data, memoryview) else given_data)


def test_frame_bodies_hold_their_buffer_and_see_it() -> None:
    """A body is a view: it keeps the buffer it was cut from alive, and sees what is written there."""
    assert frame_list is not None
    buffer = bytearray(message(0, b"abc") + message(-3, b"") + message(0, b"x" * 10)[:12])
    found, consumed = frame_list(buffer, 100)
    assert consumed == 11 + 8 and [(o, t) for o, t, _ in found] == [(100, 0), (111, -3)]
    buffer[8] = ord("z")
    assert bytes(found[0][2]) == b"zbc"
    with pytest.raises(BufferError):
        buffer.extend(b"more")  # exported: the bodies hold it
    with pytest.raises((TypeError, ValueError)):
        frame_list(memoryview(b"abcd").cast("i"), 0)
    with pytest.raises(TypeError):
        frame_list("text", 0)


def frame_ends(data: bytes) -> list[int]:
    """0 and the end of each whole frame `data` starts with, read one header at a time."""
    ends, pos = [0], 0
    while pos + 8 <= len(data):
        pos += 8 + struct.unpack_from(">iI", data, pos)[1]
        if pos > len(data):
            break
        ends.append(pos)
    return ends


@given(streams)
def test_the_walks_agree_with_the_frames(data: bytes) -> None:
    ends = frame_ends(data)
    assert frames.complete_prefix(data) == ends[-1] == frames.complete_prefix(memoryview(bytearray(data)))
    assert [at for at in range(len(data) + 2) if frames.is_boundary(data, at)] == ends
    chunk = data[: ends[-1]]

    def pread(offset: int, max_bytes: int, end: int) -> bytes:
        if max_bytes == frames.HEADER_WINDOW:  # windows of a few frames; a body read whole, as a file gives it
            max_bytes = 50
        return chunk[offset : min(offset + max_bytes, end)]

    assert [at for at in range(len(chunk) + 1) if frames.reaches(pread, 0, at)] == ends
    walked = [(o, t, n, bytes(b)) for o, t, n, b in frames.walk_frames(pread, 0, len(chunk), with_body={0})]
    assert walked == [(o, t, len(b), bytes(b) if t == 0 else b"") for o, t, b in frames.iter_frames(chunk)]


@pytest.mark.parametrize("head", [b"", b"\x00\x00", message(0, b"x" * 20)[:12]])
def test_read_frame_reads_a_cut_frame_whole(head: bytes) -> None:
    data = message(0, b"x" * 20) + message(0, b"y")
    asked: list[tuple[int, int]] = []

    def read(offset: int, n: int) -> bytes:
        asked.append((offset, n))
        return data[offset : offset + n]

    assert frames.read_frame(read, 0, head) == message(0, b"x" * 20)
    assert asked[-1] == (0, 28) and len(asked) == (1 if len(head) >= 8 else 2)
    assert frames.read_frame(lambda offset, n: data[:5][offset : offset + n], 0) == data[:5]  # the bytes end first


def _segment_bytes(sizes: list[int]) -> bytes:
    return b"".join(frames.HEADER.pack(frames.EVENT if i % 3 else -1, n) + bytes([i % 251]) * n
                    for i, n in enumerate(sizes))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=300), min_size=1, max_size=20),
       st.lists(st.integers(min_value=0, max_value=6000), max_size=10))
def test_stitched_frames_equal_the_frames_of_the_whole(sizes: list[int], cuts: list[int]) -> None:
    data = _segment_bytes(sizes)
    expect = [(o, t, bytes(b)) for o, t, b in frames.iter_frames(data, 1000)]
    stitch = frames.FrameStitcher(1000)
    got = []
    points = [0, *sorted(c for c in set(cuts) if c < len(data)), len(data)]
    for a, b in zip(points, points[1:], strict=False):
        piece = memoryview(data)[a:b] if a % 2 else data[a:b]
        got += [(o, t, bytes(body)) for o, t, body in stitch.feed(piece)]
    assert got == expect
    assert stitch.read_at == 1000 + len(data) and stitch.leftover == b""
