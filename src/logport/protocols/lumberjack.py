"""Lumberjack v1 and v2 (the Beats protocol), sans-IO: frames in, events out, and back.

Frames are a version byte ('1' or '2'), a type byte and big-endian uint32s;
there is no frame length, so after any error the stream cannot resync and the
connection must close. Writer -> reader: `W` window size, `D` (v1 key/value
pairs), `J` (v2 JSON), `C` (zlib of whole frames, may nest). Reader -> writer:
`A` ack of the highest sequence.

A server's Connection made with `windows=True` goes one step further and hands
out whole windows (`Window`), the window rules written once as
WINDOW_TRANSITIONS; the listener stores each and acknowledges it with `A`. The
stored form of a window's events (PackedForward batches, `build_batches`) is
written here too, in Python as the reference of the C pass (`_lumberjack_scan`).
"""

from __future__ import annotations

import calendar
import enum
import re
import struct
import time
import zlib
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import msgpack
import orjson
import ormsgpack

from logport import _native
from logport.batch import ENTRY_HEAD, MAX_NESTING_DEPTH, encode_batch_pieces
from logport.config import LumberjackConfig
from logport.errors import (
    LimitExceeded,
    LocalProtocolError,
    RemoteProtocolError,
    TLSOnPlaintextPort,
)
from logport.protocols._receivebuffer import NEED_DATA, ReceiveBuffer, _NeedData

# without the C pass (not built, or LOGPORT_PUREPYTHON): windows are decoded in Python
_scan = _native.load("logport.protocols._lumberjack_scan")
_scan_window: Callable[..., tuple[list[tuple[str | None, bytes, int]], int, int] | None] | None = (
    _scan.decode_window if _scan else None)
_scan_events: Callable[..., list[tuple[str | None, bytes, int]] | None] | None = (
    _scan.pack_json_events if _scan else None)

V1 = 0x31  # '1'
V2 = 0x32  # '2'
WINDOW = 0x57  # 'W'
ACK = 0x41  # 'A'
DATA = 0x44  # 'D' (v1)
JSON = 0x4A  # 'J' (v2)
COMPRESSED = 0x43  # 'C'
TLS_HANDSHAKE = 0x16  # first byte of a TLS ClientHello

MAX_NESTING = 4  # C frames inside C frames: go-lumber accepts them, nobody needs more

_U32 = struct.Struct(">I")
_FRAME_U32 = struct.Struct(">BBI")  # version, type, one uint32 (W, A, C length)
_JSON_HEAD = struct.Struct(">BBII")  # version, type, seq, payload length
_U32_PAIR = struct.Struct(">II")


# --- events ---


@dataclass(frozen=True, slots=True)
class WindowSize:
    """`W`: the writer will send up to `size` events before it waits for an ack."""

    version: int
    size: int


@dataclass(frozen=True, slots=True)
class DataFrames:
    """Consecutive data frames of one version, in stream order, as (seq, fields) pairs.

    `D` frames (v1) carry str -> str fields, `J` frames (v2) a JSON object. One
    event per run of frames (all of a C frame, say) keeps Python object churn
    off the per-event path.
    """

    version: int
    frames: list[tuple[int, Any]]  # fields: a dict, or a J frame's JSON bytes with decode_json=False
    # bytes of these frames as received (headers included, after inflating): what a window holds, counted
    # once per run rather than once per event; how bytes arrive splits runs differently, so it is not compared
    size: int = field(default=0, compare=False)

    @property
    def seqs(self) -> list[int]:
        return [seq for seq, _ in self.frames]


@dataclass(frozen=True, slots=True)
class Ack:
    """`A`: every event up to and including `seq` is acknowledged (0: keep-alive)."""

    version: int
    seq: int


@dataclass(frozen=True, slots=True)
class Compressed:
    """A top-level `C` frame, not yet inflated (with defer_compressed=True): `Connection.inflate` turns it
    into the events it holds, or `inflate_frames` does in another process."""

    version: int
    payload: bytes


Event = WindowSize | DataFrames | Ack | Compressed

Batches = list[tuple[str, bytes, int]]  # (tag, stored body, event count): what build_batches makes
Decoded = tuple[Batches, int, int]  # a window's batches, its last seq, the bytes of its frames: decode_window's


# --- window events (a server's Connection with windows=True) ---


@dataclass(frozen=True, slots=True)
class Window:
    """Events to store together and acknowledge with one `A` of `last_seq` in `version`.

    `frames` are (seq, fields): a J frame's JSON bytes or a D frame's dict. A window
    that `decode_window` took whole comes with its stored `batches` instead (and no
    frames); an empty one is a `W 0`'s, acknowledged with 0.
    """

    version: int
    frames: list[tuple[int, Any]]
    last_seq: int
    batches: Batches | None = None


@dataclass(frozen=True, slots=True, eq=False)
class AnnouncedWindow:
    """A C frame right after the W frame that announced `size` events: it may hold exactly that window.

    The caller decodes it (`decode_window`, in the event loop or a worker process) and hands the result
    to `Connection.window_decoded`; what came after it is held back until then. Compared by identity.
    """

    version: int
    compressed: Compressed
    size: int


@dataclass(frozen=True, slots=True)
class WindowFull:
    """The window's announced count (or max_window_size without a W frame) is reached."""


@dataclass(frozen=True, slots=True)
class PartialWindowDue:
    """The sender paused with part of a window sent (the partial-window timer ran out, or the hub drains)."""


@dataclass(frozen=True, slots=True)
class WindowDecoded:
    """An AnnouncedWindow's C frame held exactly its window, decoded to stored batches."""

    decoded: Decoded


# --- errors ---


@dataclass(frozen=True, slots=True)
class Limits:
    """What one connection may send; the defaults are the [lumberjack] section's, written once in config.py."""

    max_payload_size: int = LumberjackConfig.max_payload_size  # one J/D/C frame's payload
    max_decompressed_size: int = LumberjackConfig.max_decompressed_size  # what one C frame (with its nested ones) inflates to
    max_window_size: int = LumberjackConfig.max_window_size  # events announced by one W frame
    max_window_bytes: int = LumberjackConfig.max_window_bytes  # bytes of frames (inflated) one window may collect


class Role(enum.Enum):
    SERVER = "server"  # the reader (Logstash's side): receives W/D/J/C, sends A
    CLIENT = "client"  # the writer (Beats' side): receives A, sends W/D/J/C


class WindowState(enum.Enum):
    """Where a server is in the writer's windows (windows=True)."""

    BETWEEN = "between windows"  # no W frame in force and no events held
    ANNOUNCED = "announced"  # a W frame in force (or what is left of its count after a pause), no events held
    FILLING = "filling"  # events held towards the count of the W frame in force
    STREAMING = "streaming"  # events held without a W frame (v1 streaming clients): up to max_window_size


_S = WindowState
# (state, event type) -> state; what an event does besides is Connection._on_<event>. A pair missing here is
# a caller's mistake (LocalProtocolError): the peer's frames are all legal in every state.
WINDOW_TRANSITIONS: dict[tuple[WindowState, type], WindowState] = {
    (_S.BETWEEN, WindowSize): _S.ANNOUNCED,
    (_S.ANNOUNCED, WindowSize): _S.ANNOUNCED,  # the W before had nothing: nothing to store
    (_S.FILLING, WindowSize): _S.ANNOUNCED,  # the window before was cut short: what came of it is a window
    (_S.STREAMING, WindowSize): _S.ANNOUNCED,
    (_S.BETWEEN, DataFrames): _S.STREAMING,  # no W: acks go in the data frames' version
    (_S.ANNOUNCED, DataFrames): _S.FILLING,
    (_S.FILLING, DataFrames): _S.FILLING,
    (_S.STREAMING, DataFrames): _S.STREAMING,
    (_S.ANNOUNCED, WindowFull): _S.BETWEEN,  # a W 0: an empty window, acknowledged with 0
    (_S.FILLING, WindowFull): _S.BETWEEN,
    (_S.STREAMING, WindowFull): _S.BETWEEN,
    (_S.ANNOUNCED, WindowDecoded): _S.BETWEEN,  # the C frame right after the W held all of it
    (_S.BETWEEN, PartialWindowDue): _S.BETWEEN,
    (_S.ANNOUNCED, PartialWindowDue): _S.ANNOUNCED,
    (_S.FILLING, PartialWindowDue): _S.ANNOUNCED,  # what came is stored; the W's count goes on
    (_S.STREAMING, PartialWindowDue): _S.BETWEEN,
}


class Connection:
    """One lumberjack connection, either side. Raises only RemoteProtocolError / LocalProtocolError.

    Frame by frame, `next_event` hands out WindowSize, DataFrames (and Compressed with
    defer_compressed) on the server, Ack on the client. A server with `windows=True`
    hands out whole windows instead: `Window` to store and acknowledge, and
    `AnnouncedWindow` for the caller to decode and answer with `window_decoded`. A
    window a paused sender left unfinished ends with `partial_window_due`, which the
    caller feeds when the timer `partial_timer` names runs out: the core keeps the
    timer's state, the caller keeps the clock.
    """

    def __init__(self, role: Role, limits: Limits | None = None, *, peer: str | None = None,
                 decode_json: bool = True, defer_compressed: bool = False, windows: bool = False) -> None:
        if windows:
            if role is not Role.SERVER:
                raise LocalProtocolError("only a lumberjack server assembles windows")
            decode_json, defer_compressed = False, True  # J frames stay bytes for build_batches or the C pass
        self.role = role
        # False: J frames come out as their JSON bytes, for the caller to decode with `json_fields`
        # right before it is done with each event (short-lived dicts keep the cyclic GC idle)
        self.decode_json = decode_json
        # True: a top-level C frame comes out as a Compressed event, for the caller to inflate where it likes
        self.defer_compressed = defer_compressed
        self.limits = limits or Limits()
        self.peer = peer
        self.version: int | None = None  # the version of the last frame received
        self._buffer = ReceiveBuffer()
        self._events: deque[Event] = deque()
        self._run: list[tuple[int, Any]] = []  # data frames not yet handed out as DataFrames
        self._run_version = V2
        self._run_bytes = 0  # bytes of the frames in _run
        self._error: RemoteProtocolError | None = None
        self._fresh = True
        # the incomplete D frame at the buffer's front: (its bytes parsed, pairs parsed, fields so far)
        self._partial_data: tuple[int, int, dict[str, str]] | None = None
        # what the top-level C frame being parsed may still inflate to, shared by every C frame nested in it
        self._inflate_budget = 0
        self.windows = windows
        self.window_state = WindowState.BETWEEN
        self._window: list[tuple[int, Any]] = []  # (seq, fields) held for the window being received
        self._window_bytes = 0  # bytes of the frames in _window, bounded by max_window_bytes
        self._window_version = V2
        self._remaining = 0  # events still due in the window of the W frame in force (ANNOUNCED, FILLING)
        self._announced = 0  # the size of the W frame parsed last, while nothing has followed it
        # frame events parsed but not yet applied, in stream order: an AnnouncedWindow not yet answered holds back
        # everything after it (its answer decides what the window is)
        self._held: deque[Event | AnnouncedWindow] = deque()
        self._answers: dict[AnnouncedWindow, Decoded | None] = {}
        self._out: deque[Window | AnnouncedWindow] = deque()
        self._window_error: RemoteProtocolError | None = None  # raised once the windows before it are handed out
        self._timers = 0
        self.partial_timer: int | None = None  # the partial-window timer that should be running (None: none)

    # --- receiving ---

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        if self._error is None:
            self._buffer += data

    @property
    def buffered(self) -> int:
        """Bytes received but not yet parsed into events (part of a frame)."""
        return len(self._buffer)

    def next_event(self) -> Event | Window | AnnouncedWindow | _NeedData:
        if self.windows:
            return self._next_window_event()
        return self._next_frame_event()

    def _next_frame_event(self) -> Event | _NeedData:
        if self._events:
            return self._events.popleft()
        if self._error is not None:
            raise self._error
        try:
            self._parse_buffer()
        except RemoteProtocolError as e:
            e.peer = self.peer
            self._error = e
            self._end_run()
            if self._events:  # hand out what came before the error first
                return self._events.popleft()
            raise
        self._end_run()
        if self._events:
            return self._events.popleft()
        return NEED_DATA

    def _parse_buffer(self) -> None:
        buf = self._buffer
        if not buf:
            return
        if self._fresh and buf.peek_byte() == TLS_HANDSHAKE:
            raise TLSOnPlaintextPort(
                "TLS handshake (first byte 0x16) on a plaintext lumberjack port: "
                "the client uses TLS but [lumberjack.tls] is not configured"
            )
        self._fresh = False
        data, start = buf.raw, buf.start
        end = len(data)
        pos = start
        # parse every whole frame in the buffer: one call per TCP read, not per frame
        while True:
            new_pos = self._parse_frame(data, pos, end, 0)
            if new_pos is None:
                break
            pos = new_pos
        buf.consumed(pos - start)

    def _parse_frame(self, data: bytes | bytearray, pos: int, end: int, depth: int) -> int | None:
        """Parse the frame at `pos`, queue its events, return where the next starts (None: incomplete)."""
        if end - pos < 2:
            return None
        version = data[pos]
        kind = data[pos + 1]
        if version != V1 and version != V2:
            raise RemoteProtocolError(
                f"invalid lumberjack version byte 0x{version:02x} (frame type byte 0x{kind:02x}); expected '1' or '2'"
            )
        self.version = version
        if self.role is Role.CLIENT:
            if kind != ACK:
                raise RemoteProtocolError(f"invalid frame type 0x{kind:02x} from a lumberjack server (only 'A')")
            if end - pos < 6:
                return None
            self._events.append(Ack(version, _U32.unpack_from(data, pos + 2)[0]))
            return pos + 6
        if kind == JSON:
            if end - pos < 10:
                return None
            _, _, seq, length = _JSON_HEAD.unpack_from(data, pos)
            if length > self.limits.max_payload_size:
                raise LimitExceeded("J frame", length, "max_payload_size", self.limits.max_payload_size)
            stop = pos + 10 + length
            if stop > end:
                return None
            payload = bytes(data[pos + 10 : stop])
            fields = json_fields(seq, payload) if self.decode_json else payload
            if version != self._run_version:
                self._end_run()
                self._run_version = version
            self._run.append((seq, fields))
            self._run_bytes += stop - pos
            return stop
        if kind == WINDOW:
            if end - pos < 6:
                return None
            size = _U32.unpack_from(data, pos + 2)[0]
            if size > self.limits.max_window_size:
                raise LimitExceeded("window", size, "max_window_size", self.limits.max_window_size, unit="events")
            self._end_run()
            self._events.append(WindowSize(version, size))
            return pos + 6
        if kind == COMPRESSED:
            if end - pos < 6:
                return None
            length = _U32.unpack_from(data, pos + 2)[0]
            if length > self.limits.max_payload_size:
                raise LimitExceeded("C frame", length, "max_payload_size", self.limits.max_payload_size)
            stop = pos + 6 + length
            if stop > end:
                return None
            if depth == 0 and self.defer_compressed:
                self._end_run()
                self._events.append(Compressed(version, bytes(data[pos + 6 : stop])))
            else:
                self._inflate(memoryview(data)[pos + 6 : stop], depth)
            return stop
        if kind == DATA:
            return self._parse_data_frame(data, pos, end, version, depth)
        if kind == ACK:
            raise RemoteProtocolError("'A' frame from a lumberjack client: only the server acknowledges")
        raise RemoteProtocolError(f"invalid lumberjack frame type 0x{kind:02x} (version '{chr(version)}')")

    def _parse_json_run(self, data: bytes, pos: int, end: int) -> int:
        """The hot path: consecutive whole `J` frames of the run's version (what Filebeat's C frames hold).

        Stops at anything else (returning its position) for `_parse_frame` to handle.
        """
        version = self._run_version
        limit = self.limits.max_payload_size
        unpack = _JSON_HEAD.unpack_from
        loads = orjson.loads
        view = memoryview(data)
        run = self._run
        decode = self.decode_json
        start = pos
        while end - pos >= 10 and data[pos + 1] == JSON and data[pos] == version:
            _, _, seq, length = unpack(data, pos)
            stop = pos + 10 + length
            if length > limit or stop > end:
                break  # _parse_frame reports it
            if decode:
                try:
                    fields = loads(view[pos + 10 : stop])
                except orjson.JSONDecodeError:
                    break
                if type(fields) is not dict:
                    break
                run.append((seq, fields))
            else:
                run.append((seq, data[pos + 10 : stop]))
            pos = stop
        if pos > start:
            self.version = version
            self._run_bytes += pos - start
        return pos

    def _end_run(self) -> None:
        if self._run:
            self._events.append(DataFrames(self._run_version, self._run, self._run_bytes))
            self._run = []
            self._run_bytes = 0

    def _parse_data_frame(self, data: bytes | bytearray, pos: int, end: int, version: int,
                          depth: int) -> int | None:
        """A `D` frame has no length to wait for: an incomplete one in the receive buffer (depth 0) keeps
        what it parsed and resumes there, so one arriving in many small reads is parsed once, not once per read.
        """
        limit = self.limits.max_payload_size
        if end - pos < 10:
            return None
        seq, pairs = _U32_PAIR.unpack_from(data, pos + 2)
        if pairs * 8 > limit:
            raise LimitExceeded("D frame", pairs * 8, "max_payload_size", limit)
        if depth == 0 and self._partial_data is not None:
            parsed, first, fields = self._partial_data
            p = pos + parsed
            self._partial_data = None
        else:
            p, first, fields = pos + 10, 0, {}
        for i in range(first, pairs):
            pair = _read_pair(data, p, end, pos, limit)
            if pair is None:
                if depth == 0:
                    self._partial_data = (p - pos, i, fields)
                return None
            key, value, p = pair
            fields[key] = value
        if version != self._run_version:
            self._end_run()
            self._run_version = version
        self._run.append((seq, fields))
        self._run_bytes += p - pos
        return p

    def inflate(self, compressed: Compressed) -> list[Event]:
        """The events a deferred C frame holds, as if it had been parsed where it came."""
        saved = self._events, self._run, self._run_bytes, self._run_version
        self._events, self._run, self._run_bytes = deque(), [], 0
        try:
            self._inflate(memoryview(compressed.payload), 0)
            self._end_run()
            return list(self._events)
        except RemoteProtocolError as e:
            e.peer = self.peer
            raise
        finally:
            self._events, self._run, self._run_bytes, self._run_version = saved

    def _inflate(self, compressed: memoryview, depth: int) -> None:
        """Decompress a C frame without ever holding more than the limit, then parse its frames.

        The limit covers a top-level C frame and everything nested in it together: a nested C frame gets
        only what is left of the budget, else each level of nesting multiplies what one frame inflates to.
        """
        if depth >= MAX_NESTING:
            raise RemoteProtocolError(f"C frames nested more than {MAX_NESTING} deep")
        limit = self.limits.max_decompressed_size
        budget = limit if depth == 0 else self._inflate_budget
        inner = _inflate_bytes(compressed, budget, limit, depth)
        self._inflate_budget = budget - len(inner)
        pos, end = 0, len(inner)
        while pos < end:
            pos = self._parse_json_run(inner, pos, end)
            if pos >= end:
                break
            new_pos = self._parse_frame(inner, pos, end, depth + 1)
            if new_pos is None:
                raise RemoteProtocolError(
                    f"truncated frame inside a C frame: {end - pos} bytes left at offset {pos} of {end}"
                )
            pos = new_pos

    # --- windows (windows=True) ---

    @property
    def holds_events(self) -> bool:
        """Events received that no Window handed out holds yet."""
        return bool(self._window or self._held or self._out)

    @property
    def decodes_pending(self) -> int:
        """AnnouncedWindows handed out whose windows are not yet (answered, or held behind one that is not)."""
        return len(self._answers)

    def window_decoded(self, announced: AnnouncedWindow, decoded: Decoded | None) -> None:
        """The answer to an AnnouncedWindow: its window decoded whole, or None when its C frame holds anything
        else (fewer or more events, a W frame), to be parsed frame by frame where it came."""
        if self._window_error is not None:
            return  # broken: nothing after the error is applied
        if announced not in self._answers or self._answers[announced] is not None:
            raise LocalProtocolError("window_decoded for a window that was not announced, or twice")
        self._answers[announced] = decoded if decoded is not None else _NOT_WHOLE

    def partial_window_due(self, timer: int | None = None) -> None:
        """The sender paused: the window it left unfinished is handed out as it is. `timer`: the partial_timer
        that ran out (a timer since replaced is ignored); None: now, whatever runs (a drain)."""
        if self._window_error is not None or (timer is not None and timer != self.partial_timer):
            return
        self._on(PartialWindowDue())

    def _next_window_event(self) -> Window | AnnouncedWindow | _NeedData:
        if not self._out:
            self._run_windows()
        if self._out:
            return self._out.popleft()
        if self._window_error is not None:
            raise self._window_error
        return NEED_DATA

    def _run_windows(self) -> None:
        """Parse what was received into held frame events, then apply them to the window in order."""
        held = self._held
        while self._window_error is None:
            try:
                event = self._next_frame_event()
            except RemoteProtocolError as e:  # sticky: raised once the windows before it are handed out
                self._window_error = e
                break
            if event is NEED_DATA:
                break
            announced, self._announced = self._announced, event.size if type(event) is WindowSize else 0
            if type(event) is Compressed and announced:
                request = AnnouncedWindow(event.version, event, announced)
                self._answers[request] = None
                self._out.append(request)
                held.append(request)
            else:
                held.append(event)  # type: ignore[arg-type]  # the server's parser hands out no Ack
        try:
            while held:
                item = held[0]
                if type(item) is AnnouncedWindow:
                    answer = self._answers[item]
                    if answer is None:
                        return  # what follows waits for it
                    del self._answers[item]
                    held.popleft()
                    if answer is _NOT_WHOLE:
                        for inner in self.inflate(item.compressed):
                            self._on(inner)
                    else:
                        self._on(WindowDecoded(answer))
                elif type(item) is Compressed:  # not right after a W frame: parsed where it came
                    held.popleft()
                    for inner in self.inflate(item):
                        self._on(inner)
                else:
                    held.popleft()
                    self._on(item)
        except RemoteProtocolError as e:
            e.peer = self.peer
            self._window_error = e
            held.clear()
            self._answers.clear()
            self._out = deque(event for event in self._out if type(event) is Window)  # none will be applied
            return
        if self.window_state in (WindowState.FILLING, WindowState.STREAMING) and self.partial_timer is None:
            self._timers += 1
            self.partial_timer = self._timers

    def _on(self, event: Any) -> None:
        """Apply one event to the window: the state it leads to is WINDOW_TRANSITIONS', the work its handler's."""
        kind = type(event)
        try:
            self.window_state = WINDOW_TRANSITIONS[self.window_state, kind]
        except KeyError:
            raise LocalProtocolError(f"{kind.__name__} in window state {self.window_state.value}") from None
        self._handlers[kind](self, event)

    def _end_window(self) -> None:
        """Hand out the events held as a window (the state says what comes next)."""
        self._out.append(Window(self._window_version, self._window, self._window[-1][0]))
        self._window = []
        self._window_bytes = 0
        self.partial_timer = None

    def _on_window_size(self, event: WindowSize) -> None:
        if self._window:
            self._end_window()
        self._window_version = event.version
        self._remaining = event.size
        if event.size == 0:
            self._out.append(Window(event.version, [], 0))
            self._on(WindowFull())

    def _on_data_frames(self, event: DataFrames) -> None:
        """Add data frames to the window, ending windows as their count is reached (a run of frames may end
        one and start the next); a window passing max_window_bytes before it ends raises LimitExceeded."""
        frames, size = event.frames, event.size
        limits = self.limits
        while True:
            if self.window_state is WindowState.FILLING:
                room = self._remaining
            else:  # STREAMING
                if not self._window:
                    self._window_version = event.version
                room = limits.max_window_size - len(self._window)
            taken, frames = (frames[:room], frames[room:]) if len(frames) > room else (frames, [])
            taken_bytes = _frames_bytes(taken) if frames else size  # split over two windows: rare, count them
            size = max(0, size - taken_bytes)
            self._window_bytes += taken_bytes
            if self._window_bytes > limits.max_window_bytes:
                raise LimitExceeded("window", self._window_bytes, "max_window_bytes", limits.max_window_bytes)
            self._window.extend(taken)
            if self.window_state is WindowState.FILLING:
                self._remaining -= len(taken)
                full = self._remaining <= 0
            else:
                full = len(self._window) >= limits.max_window_size
            if full:
                self._on(WindowFull())
            if not frames:
                return
            self.window_state = WINDOW_TRANSITIONS[self.window_state, DataFrames]  # the rest starts the next

    def _on_window_full(self, event: WindowFull) -> None:
        if self._window:
            self._end_window()

    def _on_window_decoded(self, event: WindowDecoded) -> None:
        batches, last_seq, size = event.decoded
        limit = self.limits.max_window_bytes
        if size > limit:
            raise LimitExceeded("window", size, "max_window_bytes", limit)
        self._out.append(Window(self._window_version, [], last_seq, batches))

    def _on_partial_window_due(self, event: PartialWindowDue) -> None:
        if self._window:
            self._end_window()

    _handlers: dict[type, Callable[[Connection, Any], None]] = {
        WindowSize: _on_window_size,
        DataFrames: _on_data_frames,
        WindowFull: _on_window_full,
        WindowDecoded: _on_window_decoded,
        PartialWindowDue: _on_partial_window_due,
    }

    # --- sending ---

    def send(self, event: Event) -> bytes:
        """The bytes of one frame (uncompressed); `compressed_frame` wraps frames in a C frame."""
        if isinstance(event, Ack):
            if self.role is not Role.SERVER:
                raise LocalProtocolError("only the server (reader) sends 'A' frames")
            return encode_ack(event.version, event.seq)
        if self.role is not Role.CLIENT:
            raise LocalProtocolError(f"a lumberjack server cannot send {type(event).__name__}")
        if isinstance(event, WindowSize):
            return encode_window(event.version, event.size)
        if isinstance(event, DataFrames):
            if event.version == V1:
                return b"".join(encode_data_v1(seq, fields) for seq, fields in event.frames)
            if event.version == V2:
                return b"".join(encode_json(seq, orjson.dumps(fields)) for seq, fields in event.frames)
            _check_version(event.version)
        raise LocalProtocolError(f"cannot send {event!r}")


def _inflate_bytes(compressed: memoryview, budget: int, limit: int, depth: int) -> bytes:
    """The zlib payload of a C frame, inflated to at most `budget` bytes (of `limit` for the top-level frame)."""
    inflater = zlib.decompressobj()
    try:
        inner = inflater.decompress(compressed, budget + 1)
    except zlib.error as e:
        raise RemoteProtocolError(f"C frame of {len(compressed)} bytes is not valid zlib: {e}") from None
    if len(inner) > budget:
        what = "decompressed C frame" if depth == 0 else "decompressed C frame (with its nested C frames)"
        raise LimitExceeded(what, limit - budget + len(inner), "max_decompressed_size", limit)
    if not inflater.eof:
        raise RemoteProtocolError(f"truncated C frame: its {len(compressed)} bytes of zlib end mid-stream")
    if inflater.unused_data:
        raise RemoteProtocolError(f"C frame has {len(inflater.unused_data)} bytes after its zlib stream")
    return inner


def inflate_payload(compressed: Compressed, limits: Limits) -> bytes:
    """The frames a top-level C frame holds, inflated (not parsed), or the error `Connection.inflate` raises
    for its zlib: what the C pass (`_lumberjack_scan`) reads."""
    limit = limits.max_decompressed_size
    return _inflate_bytes(memoryview(compressed.payload), limit, limit, 0)


def _read_pair(data: bytes | bytearray, p: int, end: int, frame_start: int,
               limit: int) -> tuple[str, str, int] | None:
    """A `D` frame's key and value (each uint32-length-prefixed) at `p`: (key, value, next position).

    None if the pair is incomplete, before decoding anything: a big pair arriving in many reads
    costs O(1) per read until it is all there.
    """
    if end - p < 4:
        return None
    key_stop = p + 4 + _U32.unpack_from(data, p)[0]
    if key_stop - frame_start > limit:
        raise LimitExceeded("D frame", key_stop - frame_start, "max_payload_size", limit)
    if end - key_stop < 4:
        return None
    stop = key_stop + 4 + _U32.unpack_from(data, key_stop)[0]
    if stop - frame_start > limit:
        raise LimitExceeded("D frame", stop - frame_start, "max_payload_size", limit)
    if stop > end:
        return None
    key = data[p + 4 : key_stop].decode("utf-8", "replace")
    return key, data[key_stop + 4 : stop].decode("utf-8", "replace"), stop


def inflate_frames(compressed: Compressed, limits: Limits, expected: int) -> tuple[list[tuple[int, Any]], int] | None:
    """The data frames of a C frame that holds exactly `expected` of them and nothing else, with their size
    (as DataFrames.size), as a server's Connection would parse them (J frames as bytes); None when it
    holds anything else. A pure function, for a worker process; bad frames raise RemoteProtocolError."""
    frames: list[tuple[int, Any]] = []
    size = 0
    for event in Connection(Role.SERVER, limits, decode_json=False).inflate(compressed):
        if type(event) is not DataFrames:
            return None
        frames.extend(event.frames)
        size += event.size
    return (frames, size) if len(frames) == expected else None


def json_fields(seq: int, payload: bytes | bytearray | memoryview) -> dict[str, Any]:
    """A `J` frame's JSON object, or RemoteProtocolError."""
    try:
        fields = orjson.loads(payload)
    except orjson.JSONDecodeError as e:
        raise RemoteProtocolError(f"J frame seq {seq} is not valid JSON: {e}") from None
    if type(fields) is not dict:
        raise RemoteProtocolError(f"J frame seq {seq} holds JSON {type(fields).__name__}, not an object")
    return fields


# --- the stored form: a window's events as PackedForward batches (the Python reference of the C pass) ---

SOURCE = "lumberjack"  # the batches' option `source`
# how deep an event may nest (its object is level 1): ormsgpack packs 255 levels and msgpack the rest
MAX_EVENT_DEPTH = MAX_NESTING_DEPTH
_record_packer = msgpack.Packer(use_bin_type=True, autoreset=True)
# an AnnouncedWindow answered with None: its C frame is parsed frame by frame
_NOT_WHOLE: Decoded = ([], -1, -1)


def _frames_bytes(frames: list[tuple[int, Any]]) -> int:
    """About the bytes `frames` took as received: exact for J frames' JSON bytes, close for D frames' fields."""
    return sum(10 + (sum(8 + len(k) + len(v) for k, v in f.items()) if type(f) is dict else len(f))
               for _, f in frames)


def _json_depth(value: Any) -> int:
    """How many dicts and lists deep `value` is, level by level: Python's own recursion stops near 1000."""
    depth = 0
    level = [value]
    while True:
        level = [v for v in level if type(v) is dict or type(v) is list]
        if not level:
            return depth
        depth += 1
        level = [child for v in level for child in (v.values() if type(v) is dict else v)]


def _check_depth(what: str, value: Any, limit: int) -> None:
    depth = _json_depth(value)
    if depth > limit:
        raise RemoteProtocolError(f"{what} is nested {depth} deep, over the limit of {limit}")


def decode_window(compressed: Compressed, limits: Limits, window_size: int, part: int, parts: int, tag: str,
                  tag_from_beat: bool, peer: str, max_body: int, received_ns: int) -> Decoded | None:
    """(batches, last seq, bytes) of part `part` of `parts` of a C frame that holds exactly the
    `window_size` events its W frame announced; None when it holds anything else (the event loop parses
    it then). Each part inflates and splits the whole frame, and packs its share of the events: in one C
    pass (`_lumberjack_scan`) when it takes the window, else in Python (`decode_window_in_python`, the
    reference, which also gives the error for a bad window)."""
    if _scan_window is not None:
        inner = inflate_payload(compressed, limits)  # its errors are the reference's
        default_s, default_ns = divmod(received_ns, 1_000_000_000)
        lo, hi = window_size * part // parts, window_size * (part + 1) // parts
        scanned = _scan_window(inner, window_size, lo, hi, tag.encode("utf-8", "surrogateescape"), tag_from_beat,
                               peer.encode("utf-8", "surrogateescape"), max_body, default_s, default_ns,
                               limits.max_payload_size)
        if scanned is not None:
            batches, last_seq, size = scanned
            return [(tag if batch_tag is None else batch_tag, body, count) for batch_tag, body, count in batches], \
                last_seq, size
    return decode_window_in_python(compressed, limits, window_size, part, parts, tag, tag_from_beat, peer,
                                   max_body, received_ns)


def decode_window_in_python(compressed: Compressed, limits: Limits, window_size: int, part: int, parts: int,
                            tag: str, tag_from_beat: bool, peer: str, max_body: int,
                            received_ns: int) -> Decoded | None:
    """decode_window without the C pass."""
    inflated = inflate_frames(compressed, limits, window_size)
    if inflated is None:
        return None
    frames, size = inflated
    share = frames[window_size * part // parts : window_size * (part + 1) // parts]
    batches = build_batches_in_python(share, tag=tag, tag_from_beat=tag_from_beat, peer=peer, max_body=max_body,
                                      received_ns=received_ns)
    return batches, share[-1][0], size


def build_batches(events: list[tuple[int, Any]], *, tag: str, tag_from_beat: bool, peer: str,
                  max_body: int, received_ns: int) -> Batches:
    """build_batches_in_python's batches, from the C pass (`_lumberjack_scan`) for a window of J frames
    (their JSON bytes) that it takes, else from build_batches_in_python itself (the reference)."""
    if _scan_events is not None and events:
        default_s, default_ns = divmod(received_ns, 1_000_000_000)
        scanned = _scan_events(events, tag.encode("utf-8", "surrogateescape"), tag_from_beat,
                               peer.encode("utf-8", "surrogateescape"), max_body, default_s, default_ns)
        if scanned is not None:
            return [(tag if batch_tag is None else batch_tag, body, count) for batch_tag, body, count in scanned]
    return build_batches_in_python(events, tag=tag, tag_from_beat=tag_from_beat, peer=peer, max_body=max_body,
                                   received_ns=received_ns)


def build_batches_in_python(events: list[tuple[int, Any]], *, tag: str, tag_from_beat: bool, peer: str,
                            max_body: int, received_ns: int) -> Batches:
    """(tag, stored body, event count) per run of events sharing @metadata (and so the tag).

    The record is the event without `@metadata`, which goes into the option;
    `@timestamp` becomes the event time (the receive time when it is missing or bad).
    Events are (seq, fields), fields a dict or a J frame's JSON bytes; bad JSON
    or an event nested deeper than MAX_EVENT_DEPTH raises RemoteProtocolError.
    """
    out: Batches = []
    default_s, default_ns = divmod(received_ns, 1_000_000_000)
    head = ENTRY_HEAD.pack
    pack = _record_packer.pack
    fast_pack = ormsgpack.packb
    loads = orjson.loads
    head_size = ENTRY_HEAD.size
    parts: list[bytes] = []  # entry head, packed record, entry head, ...
    run_bytes = 0
    run_meta: Any = None
    run_tag = tag

    def close_run() -> None:
        if parts:
            count = len(parts) // 2
            option: dict[str, Any] = {"size": count, "source": SOURCE, "peer": peer}
            if run_meta is not None:
                option["@metadata"] = run_meta
            out.append((run_tag, encode_batch_pieces(run_tag, parts, option), count))

    for seq, item in events:
        # a J frame's JSON is decoded here, right before it is packed, so the dicts die young
        if type(item) is dict:
            fields = item
        else:
            try:
                fields = loads(item)
            except orjson.JSONDecodeError:
                fields = json_fields(seq, item)  # raises the protocol's error for it
            if type(fields) is not dict:
                fields = json_fields(seq, item)
        meta = fields.pop("@metadata", None)
        t = parse_timestamp(fields.get("@timestamp"))
        seconds, nanos = t if t is not None else (default_s, default_ns)
        try:
            record = fast_pack(fields)  # what the decoder makes, ormsgpack packs byte for byte as msgpack does
        except ormsgpack.MsgpackEncodeError:  # nested deeper than its 255 levels
            _check_depth(f"event seq {seq}", fields, MAX_EVENT_DEPTH)
            record = pack(fields)
        entry_bytes = len(record) + head_size
        if meta != run_meta or (parts and run_bytes + entry_bytes > max_body):
            # checked once a run, not once an event; a checked run_meta bounds how deep `!=` recurses
            _check_depth(f"@metadata of event seq {seq}", meta, MAX_EVENT_DEPTH - 1)
            close_run()
            parts, run_bytes, run_meta = [], 0, meta
            run_tag = tag
            if tag_from_beat and isinstance(meta, dict):
                beat = meta.get("beat")
                if isinstance(beat, str) and beat:
                    run_tag = beat
        parts.append(head(0x92, 0xD7, 0, seconds & 0xFFFFFFFF, nanos))
        parts.append(record)
        run_bytes += entry_bytes
    close_run()
    return out


# --- encoders (shared by Connection.send and the clients' hot path) ---


def _check_version(version: int) -> None:
    if version not in (V1, V2):
        raise LocalProtocolError(f"lumberjack version must be 0x31 or 0x32, not 0x{version:02x}")


def _check_u32(what: str, value: int) -> None:
    if not 0 <= value <= 0xFFFFFFFF:
        raise LocalProtocolError(f"{what} {value} does not fit a uint32")


def encode_ack(version: int, seq: int) -> bytes:
    _check_version(version)
    _check_u32("ack sequence", seq)
    return _FRAME_U32.pack(version, ACK, seq)


def encode_window(version: int, size: int) -> bytes:
    _check_version(version)
    _check_u32("window size", size)
    return _FRAME_U32.pack(version, WINDOW, size)


def encode_json(seq: int, payload: bytes) -> bytes:
    """A `2J` frame around already-serialised JSON."""
    _check_u32("sequence", seq)
    return _JSON_HEAD.pack(V2, JSON, seq, len(payload)) + payload


def encode_data_v1(seq: int, fields: Mapping[str, Any]) -> bytes:
    """A `1D` frame; v1 carries only strings, so other values are sent as their JSON text."""
    _check_u32("sequence", seq)
    parts = [_JSON_HEAD.pack(V1, DATA, seq, len(fields))]
    for key, value in fields.items():
        k = str(key).encode("utf-8")
        v = value.encode("utf-8") if isinstance(value, str) else orjson.dumps(value)
        parts.append(_U32.pack(len(k)))
        parts.append(k)
        parts.append(_U32.pack(len(v)))
        parts.append(v)
    return b"".join(parts)


def compressed_frame(version: int, frames: bytes | Iterable[bytes], level: int = 3) -> bytes:
    """A `C` frame holding whole frames, zlib (RFC 1950) at `level`."""
    _check_version(version)
    raw = frames if isinstance(frames, bytes | bytearray) else b"".join(frames)
    body = zlib.compress(raw, level)
    return _FRAME_U32.pack(version, COMPRESSED, len(body)) + body


# --- @timestamp ---

_second_cache: dict[str, int] = {}
_FRACTION_SCALE = [10 ** (8 - digits) for digits in range(9)]  # nanoseconds per unit of 1 to 9 fraction digits


_TIMESTAMP = re.compile(r"(\d{4}-\d\d-\d\d)[Tt ](\d\d:\d\d:\d\d)(?:\.(\d+))?(?:([Zz])|([+-])(\d\d):(\d\d))\Z")


def parse_timestamp(value: Any) -> tuple[int, int] | None:
    """(seconds, nanos) of a Beats `@timestamp` (RFC 3339, up to nanoseconds), None if it is not one."""
    if type(value) is not str:
        return None
    # fast path: what Beats write, "2026-11-22T03:25:39.028Z" (libbeat) or with up to nanoseconds (go-lumber)
    n = len(value)
    if 22 <= n <= 30 and value[19] == "." and value[-1] == "Z" and value[10] == "T":
        seconds = _second_cache.get(value[:19])
        if seconds is not None:
            fraction = value[20:-1]
            if fraction.isdigit() and fraction.isascii():
                return seconds, int(fraction) * _FRACTION_SCALE[n - 22]
    m = _TIMESTAMP.match(value)
    if m is None:
        return None
    date, clock, fraction, zulu, sign, hours, minutes = m.groups()
    if not value.isascii():
        return None
    head = f"{date}T{clock}"
    seconds = _second_cache.get(head)
    if seconds is None:
        try:
            seconds = calendar.timegm(time.strptime(head, "%Y-%m-%dT%H:%M:%S"))
        except ValueError:
            return None
        if seconds >= 0:  # the fast path above takes cached heads as they are: only those it may answer with
            if len(_second_cache) >= 4096:
                _second_cache.clear()
            _second_cache[head] = seconds
    if not zulu:
        offset = int(hours) * 3600 + int(minutes) * 60
        seconds += -offset if sign == "+" else offset
    if seconds < 0:
        return None
    return seconds, int(fraction[:9].ljust(9, "0")) if fraction else 0


def format_timestamp(seconds: int, nanos: int) -> str:
    """RFC 3339 UTC with nanoseconds, as go-lumber's Filebeat writes `@timestamp`."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{nanos:09d}Z"
