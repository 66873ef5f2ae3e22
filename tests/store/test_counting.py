"""The store's event counts (store/counting.py) give count_events' number, by any path: the fast body count,
the C frame scan beside its Python reference, an append's buffers."""

from __future__ import annotations

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from logport.batch import encode_batch, pack_entry
from logport.store import counting, frames
from logport.store.counting import (
    count_body,
    count_events,
    count_frames,
    count_parts,
    scan_frames_in_python,
)

_scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**63), 2**64 - 1), st.text(max_size=8),
                     st.binary(max_size=8), st.floats(allow_nan=False))
_values = st.recursive(_scalars, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                        st.dictionaries(st.text(max_size=4), inner, max_size=3)),
                       max_leaves=8)
_options = st.dictionaries(st.sampled_from(["size", "source", "chunk", "peer", "x"]), _values, max_size=4)
_entries = st.lists(st.tuples(st.integers(0, 2**32 - 1), st.integers(0, 10**9 - 1),
                              st.dictionaries(st.text(max_size=4), _scalars, max_size=3)), max_size=4)


@st.composite
def bodies(draw: st.DrawFn) -> bytes:
    """Stored bodies of every kind: batches (with and without a size, odd options, long options), their
    prefixes and mutations, msgpack that is no batch, arbitrary bytes."""
    kind = draw(st.sampled_from(["batch", "cut", "flip", "msgpack", "bytes", "long option"]))
    if kind == "bytes":
        return draw(st.binary(max_size=64))
    if kind == "msgpack":
        return msgpack.packb(draw(st.lists(_values, max_size=4)), use_bin_type=True)
    option = draw(_options)
    if kind == "long option":
        option["pad"] = "x" * draw(st.integers(400, 700))
    entries = b"".join(pack_entry(s, ns, r) for s, ns, r in draw(_entries)) + draw(st.sampled_from([b"", b"\xc1"]))
    body = encode_batch(draw(st.text(max_size=300)), entries, option)
    if kind == "cut":
        return body[: draw(st.integers(0, len(body)))]
    if kind == "flip":
        at = draw(st.integers(0, len(body) - 1))
        return body[:at] + bytes([body[at] ^ (1 << draw(st.integers(0, 7)))]) + body[at + 1 :]
    return body


@settings(deadline=None)
@given(bodies())
def test_the_fast_count_is_count_events(body: bytes) -> None:
    assert count_body(body) == count_events(body)


@settings(deadline=None)
@given(st.lists(st.tuples(st.sampled_from([frames.EVENT, frames.EVENT, frames.WRITER_RECORD, frames.COMMIT]),
                          bodies()), max_size=8), st.integers(0, 12))
def test_the_c_scan_is_its_python_reference(framed: list[tuple[int, bytes]], torn: int) -> None:
    data = b"".join(frames.frame(body, frame_type) for frame_type, body in framed)
    data = data[: max(0, len(data) - torn)]  # a torn last frame counts nothing
    assert counting.scan_frames(data) == scan_frames_in_python(data)
    pairs = [x for frame_type, body in framed for x in (frames.HEADER.pack(frame_type, len(body)), body)]
    for parts in ([data], pairs, pairs[:-1], [data[:3], data[3:]]):
        assert counting.scan_parts(parts) == counting.scan_parts_in_python(parts)
    for pos in {0, *(o for o, _, _ in frames.iter_frames(data))}:
        assert frames.next_record(data, pos) == frames.next_record_in_python(data, pos)
    expected = sum(count_events(frames_body) for _, t, frames_body in frames.iter_frames(data) if t == frames.EVENT)
    assert count_frames(data) == expected
    assert count_frames(memoryview(bytearray(data))) == expected


def test_the_c_scan_is_built() -> None:
    assert counting.scan_frames is not scan_frames_in_python, "store/_eventscan.c was not built (make setup)"
    assert frames.next_record is not frames.next_record_in_python


@pytest.mark.parametrize("cut", ["one buffer", "header and body", "other"])
def test_an_appends_buffers_count_as_their_frames(cut: str) -> None:
    bodies_ = [encode_batch("t", [(1, 0, {"a": 1})] * 3, {"size": 3}), b"opaque", b"", encode_batch("t", b"", {})]
    framed = [frames.HEADER.pack(frames.EVENT, len(b)) for b in bodies_]
    if cut == "one buffer":
        parts = [b"".join(h + b for h, b in zip(framed, bodies_, strict=True))]
    elif cut == "header and body":
        parts = [x for h, b in zip(framed, bodies_, strict=True) for x in (h, b)]
    else:
        whole = b"".join(h + b for h, b in zip(framed, bodies_, strict=True))
        parts = [whole[:3], whole[3:20], whole[20:]]
    assert count_parts(parts) == 3 + 1 + 1 + 0
    assert counting.scan_parts(parts) == counting.scan_parts_in_python(parts)


# whole frames of the types a commit group holds (writer records covering what follows, or not, and a table)
_group_frames = st.one_of(
    st.binary(max_size=12).map(frames.frame),
    st.tuples(st.binary(max_size=4), st.integers(0, 2**64 - 1), st.sampled_from([0, 9, 10, 18, 19, 20, 36, 40])).map(
        lambda t: frames.writer_record(*t)),
    st.dictionaries(st.binary(max_size=4), st.integers(0, 2**64 - 1), max_size=2).map(frames.writer_table),
    st.binary(max_size=12).map(lambda b: frames.frame(b, frames.WRITER_RECORD)),  # a record that does not parse
    st.binary(max_size=12).map(lambda b: frames.frame(b, frames.COMMIT)),
)


@given(st.lists(_group_frames, max_size=10).map(b"".join), st.integers(0, 6), st.booleans())
def test_a_groups_frames_walked_by_runs_are_walked_as_frame_by_frame(group: bytes, torn: int, table_first: bool) -> None:
    """frames.scan_run (runs of Events in C, records in Python) leaves the scan as `add` on every frame does."""
    if table_first:
        group = frames.writer_table({b"k": 1}) + group
    group = group[: max(0, len(group) - torn)]
    fast, slow = frames.ChunkScan(), frames.ChunkScan()
    fast.writers = {b"before": 1}
    slow.writers = {b"before": 1}
    went = frames.scan_run(group, fast)
    slow_went = True
    for offset, frame_type, body in frames.iter_frames(group):
        if not slow.add(offset, frame_type, len(body), body):
            slow_went = False
            break
    assert (went, fast.keep, fast.writers, fast.broken, fast.pending_start) == (
        slow_went, slow.keep, slow.writers, slow.broken, slow.pending_start)
