"""atheris target: arbitrary bytes as a stored event body: decode_batch, its entries, and the JSON form
`logport cat` prints. Only BatchDecodeError may come out (a body that is not a batch is printed raw).
"""

from __future__ import annotations

import io
import sys

from _fuzzlib import instrumented, run

with instrumented():
    import msgpack

    from logport.batch import BatchDecodeError, decode_batch, encode_batch, event_time
    from logport.eventjson import write_events


def test_one_input(data: bytes) -> None:
    try:
        batch = decode_batch(data)
        for _ in zip(batch, range(10_000), strict=False):
            pass
    except BatchDecodeError:
        pass
    write_events(io.StringIO(), "fuzz", 0, data)  # what `logport cat` prints: never raises (raw form at worst)


def seeds() -> list[bytes]:
    entries = [(1700000000, 5, {"message": "hi", "n": 1}), (1700000001, 0, {"nested": {"a": [1, 2]}})]
    meta_entry = msgpack.packb([[event_time(1700000000, 1), {"m": 1}], {"r": 2}])
    return [
        encode_batch("app", entries, {"size": 2, "source": "forward", "peer": "1.2.3.4:5"}),
        encode_batch("app", meta_entry, {"size": 1, "source": "forward"}),
        msgpack.packb(["app", "str entries", {}]),
        msgpack.packb(["app", b"\x92\x01\x80"]),
        b"opaque segment event",
    ]


if __name__ == "__main__":
    run("batch", test_one_input, seeds)
    sys.exit(0)
