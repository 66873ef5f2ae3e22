"""The server connection's receive space: bytes read where the last read ended (get_buffer / buffer_updated),
PackedForward entries handed on as views of it, a space written again only once nothing viewing it is held."""

from __future__ import annotations

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from logport.protocols import forward as fp
from tests.forward.test_forward_scan import MUTATIONS, decode, mutate, packed_messages


def message(n: int, size: int) -> tuple[bytes, bytes]:
    """(a PackedForward message whose one entry's record is about `size` bytes, its entries)."""
    stream = msgpack.packb([1700000000 + n, {"n": n, "pad": "x" * size}])
    return fp.encode_packed_forward("t", stream, {"chunk": f"c{n}"}), stream


def read(conn: fp.ServerConnection, data: bytes | memoryview, most: int) -> int:
    """One read as the event loop makes it: into the buffer get_buffer gives, at most `most` bytes."""
    buf = conn.get_buffer(-1)
    n = min(len(buf), most, len(data))
    buf[:n] = data[:n]
    conn.buffer_updated(n)
    return n


SIZES = st.one_of(st.integers(0, 2000), st.sampled_from([60_000, 180_000, 400_000]))


@settings(deadline=None)
@given(st.lists(SIZES, min_size=1, max_size=10), st.lists(st.one_of(st.integers(1, 400_000), st.just(1 << 20)), min_size=1),
       st.lists(st.sampled_from(["now", "after the next read", "never"]), min_size=1))
def test_held_entries_never_change_and_every_message_comes_whole(sizes: list[int], reads: list[int],
                                                                   keep: list[str]) -> None:
    """Messages from a few bytes to several spaces' worth, read in pieces of any size, their batches released
    at once, after the next read or never: each batch's entries are the message's, and stay so until released."""
    made = [message(n, size) for n, size in enumerate(sizes)]
    data = memoryview(b"".join(m for m, _ in made))
    conn = fp.ServerConnection(chunk_size_limit=1 << 20)
    got: list[fp.EventBatch] = []
    held: list[tuple[fp.EventBatch, bytes]] = []
    after_next_read: list[tuple[fp.EventBatch, bytes]] = []
    pos = turn = 0
    while pos < len(data):
        pos += read(conn, data[pos:], reads[turn % len(reads)])
        turn += 1
        for batch, entries in after_next_read:
            assert bytes(batch.entries) == entries
            conn.release(batch)
        after_next_read = []
        while (event := conn.next_event()) is not fp.NEED_DATA:
            assert isinstance(event, fp.EventBatch)
            n = len(got)
            assert bytes(event.entries) == made[n][1] and event.size == 1 and event.chunk == f"c{n}"
            got.append(event)
            when = keep[n % len(keep)]
            if when == "now":
                conn.release(event)
            else:
                (held if when == "never" else after_next_read).append((event, made[n][1]))
    assert len(got) == len(made) and conn.buffered == 0
    for batch, entries in held + after_next_read:
        assert bytes(batch.entries) == entries


@settings(deadline=None)
@given(st.lists(st.one_of(packed_messages(), st.just(b"\xc0"), st.just(msgpack.packb(["t", 1, {"a": 1}]))),
                max_size=5), MUTATIONS, st.integers(1, 700), st.lists(st.integers(1, 70_000), min_size=1))
def test_reads_into_the_space_decode_as_the_unpacker_does(messages: list[bytes],
                                                         mutations: list[tuple[str, int, int]], split: int,
                                                         reads: list[int]) -> None:
    """Damaged or not, read in pieces of any size through get_buffer: the events and the error are the
    unpacker's (the reference), and a batch released at once never changes one that follows."""
    data = mutate(b"".join(messages), mutations)
    conn = fp.ServerConnection(peer="fuzz:1", chunk_size_limit=4096, decompression_size_limit=1 << 16)
    out: list[object] = []
    view = memoryview(data)
    pos = turn = 0
    try:
        while pos < len(data):
            pos += read(conn, view[pos:], min(split, reads[turn % len(reads)]) if turn % 2 else split)
            turn += 1
            while (event := conn.next_event()) is not fp.NEED_DATA:
                if isinstance(event, fp.EventBatch):
                    conn.release(event)
                    event = (event.tag, bytes(event.entries), repr(event.option), event.size, event.invalid, event.mode)
                out.append(event)
    except fp.RemoteProtocolError as e:
        out.append(type(e))
    reference = decode(data, len(data) or 1, False, pytest.MonkeyPatch())
    events = [e for e in out if not isinstance(e, type)]
    ref_events = [e for e in reference[:-1] if not isinstance(e, type)]
    assert events == ref_events[:len(events)]
    if not any(isinstance(e, type) for e in out):  # no error: every event came
        assert events == ref_events


def test_a_busy_connection_reads_into_a_few_spaces_in_turn() -> None:
    """Steady streaming of 180 KB messages, each released three reads later (as appends are answered while
    more comes): the held ones never change, and no space is made per message."""
    conn = fp.ServerConnection()
    made = [message(n, 180_000) for n in range(100)]
    data = memoryview(b"".join(m for m, _ in made))
    spaces: set[int] = set()
    pos = n = 0
    reads: list[list[fp.EventBatch]] = []
    while pos < len(data):
        pos += read(conn, data[pos:], 256 * 1024)
        for held in reads:
            assert all(bytes(b.entries) == made[int(b.chunk[1:])][1] for b in held)  # type: ignore[index]
        if len(reads) == 3:
            for batch in reads.pop(0):
                conn.release(batch)
        reads.append([])
        while (event := conn.next_event()) is not fp.NEED_DATA:
            assert isinstance(event, fp.EventBatch) and event.space is not None
            assert bytes(event.entries) == made[n][1]
            n += 1
            spaces.add(id(event.space))
            reads[-1].append(event)
    assert n == len(made)
    assert len(spaces) <= 3  # 1 MiB spaces taken in turn
    for held in reads:
        for batch in held:
            conn.release(batch)
    assert conn.pinned == 0


def test_a_held_space_is_counted_until_its_batch_is_released() -> None:
    conn = fp.ServerConnection()
    first, _ = message(0, 40_000)
    read(conn, first, len(first))
    batch = conn.next_event()
    assert isinstance(batch, fp.EventBatch) and batch.space is not None
    space = batch.space
    big, entries = message(1, 2_000_000)  # needs a space of its own
    pos = 0
    while pos < len(big):
        pos += read(conn, memoryview(big)[pos:], len(big))
        if pos < len(big):
            assert conn.next_event() is fp.NEED_DATA
    assert conn.pinned == len(space.data)
    second = conn.next_event()
    assert isinstance(second, fp.EventBatch) and bytes(second.entries) == entries
    conn.release(batch)
    assert conn.pinned == 0
    assert bytes(second.entries) == entries


def test_receive_data_copies_into_the_space_and_keeps_every_byte() -> None:
    """The bytes-in API of the sans-IO core: one call with more than a space holds."""
    made = [message(n, 100_000) for n in range(30)]
    conn = fp.ServerConnection(chunk_size_limit=1 << 20)
    conn.receive_data(b"".join(m for m, _ in made))
    batches = [conn.next_event() for _ in made]
    assert conn.next_event() is fp.NEED_DATA
    assert [bytes(b.entries) for b in batches] == [e for _, e in made]  # type: ignore[union-attr]
