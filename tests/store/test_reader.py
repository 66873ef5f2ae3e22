"""The read-only directory reader: event counts of stored bodies."""

from __future__ import annotations

import msgpack
import pytest

from logport.batch import encode_batch
from logport.store.reader import count_events


@pytest.mark.parametrize(("body", "events"), [
    (encode_batch("t", [(1, 0, {"a": 1})] * 3, {"size": 3}), 3),
    (encode_batch("t", [(1, 0, {"a": 1})] * 2, {}), 2),  # no size option: the entries are counted
    (b"", 1),
    (b"\x00raw", 1),
    (msgpack.packb(["t", b"\xc1"]), 1),  # a batch whose entries are not msgpack
    (msgpack.packb(["t", msgpack.packb(1)]), 1),  # entries that are not [time, record]
    (msgpack.packb(["t", msgpack.packb([1, {}]) + b"\xc1"]), 1),  # a good entry, then garbage
])
def test_count_events(body: bytes, events: int) -> None:
    assert count_events(body) == events
