"""The window rules of the protocol core (Connection(windows=True)): bytes in, whole windows out.

Tables of streams and the windows they make, the transition table itself, the partial-window timer as state
plus an input, AnnouncedWindows answered in and out of order, and arbitrary bytes (only the protocol's own
error, never a hang; however the bytes are split and however a C frame is decoded, the same windows).
"""

from __future__ import annotations

import zlib
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from logport.errors import LimitExceeded, LocalProtocolError, RemoteProtocolError
from logport.protocols._receivebuffer import NEED_DATA
from logport.protocols.lumberjack import (
    WINDOW_TRANSITIONS,
    AnnouncedWindow,
    Connection,
    DataFrames,
    Limits,
    PartialWindowDue,
    Role,
    Window,
    WindowDecoded,
    WindowFull,
    WindowSize,
    WindowState,
    build_batches,
    compressed_frame,
    decode_window,
    encode_data_v1,
    encode_json,
    encode_window,
)

V1, V2 = 0x31, 0x32
PEER = "10.0.0.1:4000"
RECEIVED_NS = 1_764_000_000_123_456_789


def j(seq: int, **fields: Any) -> bytes:
    return encode_json(seq, orjson.dumps(fields or {"m": seq}))


def payload(seq: int) -> bytes:
    return orjson.dumps({"m": seq})


def d(seq: int) -> bytes:
    return encode_data_v1(seq, {"line": f"l{seq}"})


def decoded(conn: Connection, request: AnnouncedWindow) -> Any:
    return decode_window(request.compressed, conn.limits, request.size, 0, 1, "beats", False, PEER, 1 << 20,
                         RECEIVED_NS)


def drain(conn: Connection, answer: str = "decode") -> list[Any]:
    """The events the connection hands out now, AnnouncedWindows answered at once (`decode`: with
    decode_window; `none`: as a C frame that does not hold the window; `keep`: not answered)."""
    out: list[Any] = []
    steps = 0
    while (event := conn.next_event()) is not NEED_DATA:
        steps += 1
        assert steps < 100_000
        out.append(event)
        if type(event) is AnnouncedWindow and answer != "keep":
            conn.window_decoded(event, decoded(conn, event) if answer == "decode" else None)
    return out


def windows_of(stream: bytes, limits: Limits | None = None, answer: str = "none", chunk: int = 0,
               pause: bool = True) -> list[Any]:
    """(version, [(seq, fields)], last seq) per window a stream makes (then what a pause at its end hands out)."""
    conn = Connection(Role.SERVER, limits, peer=PEER, windows=True)
    out: list[Any] = []
    for piece in [stream[i : i + chunk] for i in range(0, len(stream), chunk)] if chunk else [stream]:
        conn.receive_data(piece)
        out += drain(conn, answer)
    if pause:
        conn.partial_window_due()
        out += drain(conn, answer)
    return [(w.version, w.frames, w.last_seq) if w.batches is None else (w.version, "decoded", w.last_seq)
            for w in out if type(w) is Window]


def frames(*seqs: int) -> list[tuple[int, bytes]]:
    return [(s, payload(s)) for s in seqs]


def d_frames(*seqs: int) -> list[tuple[int, dict[str, str]]]:
    return [(s, {"line": f"l{s}"}) for s in seqs]


WINDOW_TABLE = [
    ("announced, plain frames", encode_window(V2, 3) + j(1) + j(2) + j(3), [(V2, frames(1, 2, 3), 3)]),
    ("W 0: an empty window, acked with 0", encode_window(V2, 0) + encode_window(V1, 0), [(V2, [], 0), (V1, [], 0)]),
    ("no W: ends on a pause", j(1) + j(2), [(V2, frames(1, 2), 2)]),
    ("no W, v1: acked in v1", d(1) + d(2), [(V1, d_frames(1, 2), 2)]),
    ("fewer than announced: ends on a pause", encode_window(V1, 1000) + d(1) + d(2), [(V1, d_frames(1, 2), 2)]),
    ("a W cuts the window before it short", encode_window(V2, 5) + j(1) + encode_window(V2, 1) + j(2),
     [(V2, frames(1), 1), (V2, frames(2), 2)]),
    ("a W after a W with nothing between", encode_window(V2, 5) + encode_window(V2, 1) + j(1), [(V2, frames(1), 1)]),
    ("a run of frames ends one window and starts the next", encode_window(V2, 2) + compressed_frame(V2, [j(1), j(2), j(3)]),
     [(V2, frames(1, 2), 2), (V2, frames(3), 3)]),
    ("spread over C frames, plain and nested",
     encode_window(V2, 4) + compressed_frame(V2, j(1)) + j(2) + compressed_frame(V2, compressed_frame(V2, j(3) + j(4))),
     [(V2, frames(1, 2, 3, 4), 4)]),
    ("the W's version, not the frames'", encode_window(V1, 1) + j(1), [(V1, frames(1), 1)]),
    ("two windows inside one C frame", compressed_frame(V2, (encode_window(V2, 1) + j(1)) * 2),
     [(V2, frames(1), 1), (V2, frames(1), 1)]),
    ("a W inside the C frame after a W", encode_window(V2, 2) + compressed_frame(V2, encode_window(V2, 1) + j(1)) + j(7),
     [(V2, frames(1), 1), (V2, frames(7), 7)]),
    ("without a W, max_window_size (2) events a window", j(1) + j(2) + j(3) + j(4) + j(5),
     [(V2, frames(1, 2), 2), (V2, frames(3, 4), 4), (V2, frames(5), 5)]),
    ("incomplete frame: no window", encode_window(V2, 1) + j(1)[:-1], []),
]


@pytest.mark.parametrize("stream,expected", [(s, e) for _, s, e in WINDOW_TABLE], ids=[n for n, _, _ in WINDOW_TABLE])
@pytest.mark.parametrize("chunk", [0, 1, 5], ids=["whole", "bytewise", "by5"])
@pytest.mark.parametrize("answer", ["none", "decode"])
def test_window_table(stream: bytes, expected: list[Any], chunk: int, answer: str) -> None:
    limits = Limits(max_window_size=2) if len(expected) == 3 and expected[-1][2] == 5 else Limits()
    got = windows_of(stream, limits, answer=answer, chunk=chunk)
    if answer == "decode":  # a C frame holding its whole window comes back as batches
        expected = [(v, "decoded", seq) if (v, "decoded", seq) in got else (v, f, seq) for v, f, seq in expected]
    assert got == expected


def test_a_c_frame_that_holds_its_window_is_asked_about_and_comes_back_decoded() -> None:
    stream = encode_window(V2, 3) + compressed_frame(V2, [j(1), j(2), j(3)])
    conn = Connection(Role.SERVER, peer=PEER, windows=True)
    conn.receive_data(stream)
    (request,) = drain(conn, "keep")
    assert (request.version, request.size) == (V2, 3)
    assert conn.decodes_pending == 1 and conn.holds_events and conn.window_state is WindowState.ANNOUNCED
    answer = decoded(conn, request)
    conn.window_decoded(request, answer)
    (window,) = drain(conn)
    assert window == Window(V2, [], 3, answer[0])
    assert window.batches == build_batches(frames(1, 2, 3), tag="beats", tag_from_beat=False, peer=PEER,
                                           max_body=1 << 20, received_ns=RECEIVED_NS)
    assert conn.decodes_pending == 0 and not conn.holds_events and conn.window_state is WindowState.BETWEEN
    with pytest.raises(LocalProtocolError, match="not announced, or twice"):
        conn.window_decoded(request, None)


def test_what_follows_an_unanswered_c_frame_waits_and_answers_apply_in_stream_order() -> None:
    """Decode workers answer in any order: the windows come out in the stream's."""
    first = encode_window(V2, 2) + compressed_frame(V2, [j(1), j(2)])
    second = encode_window(V2, 2) + compressed_frame(V2, [j(3), j(4)])
    conn = Connection(Role.SERVER, peer=PEER, windows=True)
    conn.receive_data(first + j(9) + second)
    a, b = drain(conn, "keep")
    assert type(a) is type(b) is AnnouncedWindow and conn.decodes_pending == 2
    conn.window_decoded(b, decoded(conn, b))
    assert drain(conn) == []  # the second waits behind the first
    conn.window_decoded(a, None)  # parsed frame by frame: its window, then J 9 until the second's W cuts it
    assert [(w.last_seq, w.batches is None) for w in drain(conn)] == [(2, True), (9, True), (4, False)]
    assert conn.decodes_pending == 0 and conn.partial_timer is None


def test_a_decoded_window_over_max_window_bytes_is_refused() -> None:
    stream = encode_window(V2, 2) + compressed_frame(V2, [j(1), j(2)])
    conn = Connection(Role.SERVER, Limits(max_window_bytes=len(j(1) + j(2)) - 1), peer=PEER, windows=True)
    conn.receive_data(stream)
    (request,) = drain(conn, "keep")
    conn.window_decoded(request, decoded(conn, request))
    with pytest.raises(LimitExceeded) as info:
        conn.next_event()
    assert str(info.value) == f"window of {len(j(1) + j(2))} bytes from {PEER} exceeds max_window_bytes " \
                              f"{len(j(1) + j(2)) - 1}"
    with pytest.raises(LimitExceeded):  # sticky
        conn.next_event()


@pytest.mark.parametrize("answer", ["decode", "none"])
def test_a_window_of_frames_over_max_window_bytes_is_refused_after_the_windows_before_it(answer: str) -> None:
    frame = len(j(1, m="x" * 100))
    stream = (encode_window(V2, 2) + j(1, m="x" * 100) + j(2, m="x" * 100)
              + encode_window(V2, 3) + compressed_frame(V2, [j(s, m="x" * 100) for s in (1, 2)]) + j(3, m="x" * 100))
    conn = Connection(Role.SERVER, Limits(max_window_bytes=2 * frame), peer=PEER, windows=True)
    conn.receive_data(stream)
    out: list[Any] = []
    with pytest.raises(LimitExceeded) as info:
        while (event := conn.next_event()) is not NEED_DATA:
            out.append(event)
            if type(event) is AnnouncedWindow:
                conn.window_decoded(event, decoded(conn, event) if answer == "decode" else None)
    # a C frame right after its W is asked about as soon as it is parsed, before the windows ahead of it come out
    assert [type(e) for e in out] == [AnnouncedWindow, Window] and out[1].last_seq == 2
    assert (info.value.limit_name, info.value.value) == ("max_window_bytes", 3 * frame)


def test_the_partial_window_timer_is_state_and_an_input() -> None:
    conn = Connection(Role.SERVER, peer=PEER, windows=True)
    conn.receive_data(encode_window(V1, 1000) + d(1) + d(2) + d(3))
    assert drain(conn) == [] and conn.window_state is WindowState.FILLING
    timer = conn.partial_timer
    assert timer is not None
    conn.partial_window_due(timer + 1)  # a timer the core did not ask for: ignored
    assert drain(conn) == []
    conn.partial_window_due(timer)
    assert drain(conn) == [Window(V1, d_frames(1, 2, 3), 3)]
    assert conn.partial_timer is None and conn.window_state is WindowState.ANNOUNCED  # the W's count goes on
    conn.receive_data(d(4))
    assert drain(conn) == [] and conn.partial_timer not in (None, timer)  # a new timer for the new part
    stale, conn.partial_timer = timer, conn.partial_timer
    conn.partial_window_due(stale)
    assert drain(conn) == []
    conn.receive_data(encode_window(V1, 1))  # a W ends the window: the timer with it
    assert drain(conn) == [Window(V1, d_frames(4), 4)]
    assert conn.partial_timer is None and conn.window_state is WindowState.ANNOUNCED
    conn.partial_window_due()  # a drain with nothing held: nothing
    assert drain(conn) == [] and conn.window_state is WindowState.ANNOUNCED


def test_a_timer_is_asked_for_only_while_part_of_a_window_is_held() -> None:
    conn = Connection(Role.SERVER, Limits(max_window_size=2), peer=PEER, windows=True)
    conn.receive_data(encode_window(V2, 2) + j(1) + j(2))
    assert drain(conn) == [Window(V2, frames(1, 2), 2)] and conn.partial_timer is None
    conn.receive_data(j(3) + j(4) + j(5))  # no W: two a window, the third held
    assert conn.next_event() == Window(V2, frames(3, 4), 4)
    timer = conn.partial_timer
    assert timer is not None and conn.window_state is WindowState.STREAMING
    assert conn.next_event() is NEED_DATA and conn.partial_timer == timer
    conn.partial_window_due(timer)
    assert drain(conn) == [Window(V2, frames(5), 5)] and conn.partial_timer is None


STATES = list(WindowState)


def test_the_peers_frames_and_a_pause_are_legal_in_every_state() -> None:
    for state in STATES:
        for kind in (WindowSize, DataFrames, PartialWindowDue):
            assert (state, kind) in WINDOW_TRANSITIONS, (state, kind)
    # a window ends (full, or decoded whole) only where one is under way
    assert {s for s, k in WINDOW_TRANSITIONS if k is WindowFull} == {WindowState.ANNOUNCED, WindowState.FILLING,
                                                                        WindowState.STREAMING}
    assert {s for s, k in WINDOW_TRANSITIONS if k is WindowDecoded} == {WindowState.ANNOUNCED}
    assert {WINDOW_TRANSITIONS[s, PartialWindowDue] for s in STATES} == {WindowState.BETWEEN, WindowState.ANNOUNCED}


def test_an_event_the_table_does_not_allow_is_the_callers_mistake() -> None:
    conn = Connection(Role.SERVER, peer=PEER, windows=True)
    conn.receive_data(j(1))
    drain(conn)
    assert conn.window_state is WindowState.STREAMING
    with pytest.raises(LocalProtocolError, match="WindowDecoded in window state streaming"):
        conn._on(WindowDecoded(([], 1, 10)))
    with pytest.raises(LocalProtocolError, match="only a lumberjack server assembles windows"):
        Connection(Role.CLIENT, windows=True)


def test_a_protocol_error_comes_after_the_windows_before_it_and_sticks() -> None:
    conn = Connection(Role.SERVER, peer=PEER, windows=True)
    conn.receive_data(encode_window(V2, 1) + j(1) + j(2) + b"2Z")
    assert conn.next_event() == Window(V2, frames(1), 1)
    for _ in range(2):
        with pytest.raises(RemoteProtocolError, match="invalid lumberjack frame type 0x5a") as info:
            conn.next_event()
        assert info.value.peer == PEER
    conn.partial_window_due()  # ignored once broken: J 2 is never a window
    with pytest.raises(RemoteProtocolError):
        conn.next_event()


def test_a_bad_c_frame_after_a_w_is_refused_when_answered_frame_by_frame() -> None:
    conn = Connection(Role.SERVER, peer=PEER, windows=True)
    conn.receive_data(encode_window(V2, 1) + b"2C\0\0\0\4abcd")
    (request,) = drain(conn, "keep")
    conn.window_decoded(request, None)
    with pytest.raises(RemoteProtocolError, match="not valid zlib") as info:
        conn.next_event()
    assert info.value.peer == PEER


# --- arbitrary bytes ---

SMALL = Limits(max_payload_size=4096, max_decompressed_size=16384, max_window_size=50, max_window_bytes=8192)

frame = st.one_of(
    st.builds(lambda v, n: encode_window(v, n), st.sampled_from([V1, V2]), st.integers(0, 6)),
    st.builds(lambda s, m: encode_json(s, orjson.dumps({"m": m})), st.integers(0, 2**32 - 1), st.text(max_size=8)),
    st.builds(lambda s, line: encode_data_v1(s, {"line": line}), st.integers(0, 2**32 - 1), st.text(max_size=8)),
)


@st.composite
def streams(draw: st.DrawFn) -> bytes:
    """Frames as Beats send them (W then a C frame of J frames), and otherwise, some of it in C frames."""
    parts = []
    for _ in range(draw(st.integers(0, 5))):
        if draw(st.booleans()):
            n = draw(st.integers(1, 4))
            inner = b"".join(encode_json(s, payload(s)) for s in range(1, n + draw(st.integers(-1, 1)) + 1))
            parts.append(encode_window(V2, n) + compressed_frame(V2, inner))
        else:
            pieces = draw(st.lists(frame, max_size=4))
            raw = b"".join(pieces)
            parts.append(compressed_frame(V2, raw) if pieces and draw(st.booleans()) else raw)
    return b"".join(parts)


def run(stream: bytes, sizes: list[int], answer: str, pauses: list[bool] | None = None) -> list[Any]:
    """What the listener would store of a stream fed in pieces, window by window, then the error if any (the
    core's, or that of building a window's batches)."""
    conn = Connection(Role.SERVER, SMALL, peer=PEER, windows=True)
    pieces, pos = [], 0
    for n in [*sizes, len(stream)]:
        pieces.append(stream[pos : pos + n])
        pos += n
    out: list[Any] = []
    try:
        for i, piece in enumerate(pieces):
            conn.receive_data(piece)
            out += [stored(w) for w in drain(conn, answer) if type(w) is Window]
            if pauses is not None and i < len(pauses) and pauses[i]:
                conn.partial_window_due(conn.partial_timer)
                out += [stored(w) for w in drain(conn, answer) if type(w) is Window]
        conn.partial_window_due()
        out += [stored(w) for w in drain(conn, answer) if type(w) is Window]
        assert conn.decodes_pending == 0 and not conn.holds_events
    except RemoteProtocolError as e:
        e.peer = PEER  # as the listener names it
        out.append(f"{type(e).__name__}: {e}")
    return out


def stored(window: Window) -> tuple[int, int, Any]:
    """What the listener stores of a window: decoded batches, or the batches of its frames."""
    batches = window.batches
    if batches is None and window.frames:
        batches = build_batches(window.frames, tag="beats", tag_from_beat=False, peer=PEER, max_body=1 << 20,
                                received_ns=RECEIVED_NS)
    return window.version, window.last_seq, batches


@given(st.binary(max_size=2048), st.lists(st.integers(1, 64), max_size=8), st.sampled_from(["decode", "none"]),
       st.lists(st.booleans(), max_size=8))
def test_arbitrary_bytes_make_windows_or_protocol_errors_only(data: bytes, sizes: list[int], answer: str,
                                                               pauses: list[bool]) -> None:
    run(data, sizes, answer, pauses)


@given(streams(), st.data())
def test_mutated_streams_make_windows_or_protocol_errors_only(stream: bytes, data: st.DataObject) -> None:
    mutated = bytearray(stream)
    for _ in range(data.draw(st.integers(0, 3))):
        if mutated:
            mutated[data.draw(st.integers(0, len(mutated) - 1))] = data.draw(st.integers(0, 255))
    run(bytes(mutated), data.draw(st.lists(st.integers(1, 32), max_size=5)), data.draw(st.sampled_from(["decode", "none"])),
        data.draw(st.lists(st.booleans(), max_size=5)))


@given(streams(), st.lists(st.integers(1, 24), max_size=32))
def test_how_the_bytes_are_split_and_how_c_frames_are_decoded_never_change_the_windows(
        stream: bytes, sizes: list[int]) -> None:
    """Without pauses a window ends by its count or a W frame, never by a read; a C frame decoded whole (the
    C pass) stores what parsing it frame by frame stores."""
    whole = run(stream, [], "none")
    assert run(stream, sizes, "none") == whole
    assert run(stream, sizes, "decode") == whole


@given(streams())
def test_windows_hold_every_frame_once_in_order(stream: bytes) -> None:
    """Cut into windows, the frames are the frame-level decoding's, in order, none lost or repeated."""
    conn = Connection(Role.SERVER, SMALL, peer=PEER, decode_json=False)
    conn.receive_data(stream)
    expected = []
    while (event := conn.next_event()) is not NEED_DATA:
        if type(event) is DataFrames:
            expected += event.frames
    assert [f for _, frames_, _ in windows_of(stream, SMALL) for f in frames_] == expected


@pytest.mark.parametrize("inner", [[j(1), encode_json(2, b"{nope")], [j(1), encode_json(2, b"[1]")]],
                         ids=["bad json", "json array"])
def test_a_bad_event_is_the_same_error_decoded_whole_or_frame_by_frame(inner: list[bytes]) -> None:
    bad = encode_window(V2, 2) + compressed_frame(V2, inner)
    (error,) = run(bad, [], "none")
    assert error.startswith("RemoteProtocolError: J frame seq 2 ") and error.endswith(f"(peer {PEER})")
    assert run(bad, [], "decode") == [error]


def test_zlib_of_a_window_is_what_the_c_pass_sees() -> None:
    """An AnnouncedWindow carries its C frame's zlib as received."""
    inner = j(1) + j(2)
    conn = Connection(Role.SERVER, peer=PEER, windows=True)
    conn.receive_data(encode_window(V2, 2) + compressed_frame(V2, inner, 1))
    (request,) = drain(conn, "keep")
    assert zlib.decompress(request.compressed.payload) == inner
