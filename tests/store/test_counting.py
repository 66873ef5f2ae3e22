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
    expected = sum(count_events(frames_body) for _, t, frames_body in frames.iter_frames(data) if t == frames.EVENT)
    assert count_frames(data) == expected
    assert count_frames(memoryview(bytearray(data))) == expected


def test_the_c_scan_is_built() -> None:
    assert counting.scan_frames is not scan_frames_in_python, "store/_eventscan.c was not built (make setup)"


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
