"""The C pass over a logjam body (`_logjam_scan`) against the Python reference, byte for byte and error for error.

`MessageDecoder.accept` packs a body's JSON in C and leaves whatever the C pass declines to
`_entry_in_python` (the reference): these tests hold the stored batch (and the error) equal to the
reference's on arbitrary JSON text and bytes, under every compression method, and check that the C pass
itself takes the bodies it should.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from logport.config import LogjamConfig
from logport.errors import LogportError
from logport.protocols import logjam as lj
from logport.servers import logjam_ingest
from logport.servers.logjam_ingest import MessageDecoder
from tests.lumberjack.test_scan import OBJECTS, dumps, json_text, nested

pytestmark = pytest.mark.skipif(logjam_ingest._pack_body is None, reason="built without the C extensions")

STARTED_AT = st.sampled_from(["2026-11-22T03:00:00+01:00", "2026-11-22T03:00:00.123456Z", "2026-11-22",
                              "2026-11-22 03:00:00", "20261122T030000", "1969-12-31T23:59:59Z", "nope", "",
                              "2026-W47-7", "2026-11-22T03:00:00.1234567891+05:30"]) | st.text(max_size=30)
STARTED_MS = (st.integers(-10, 2**53) | st.floats(allow_nan=False, allow_infinity=False) | st.booleans() | st.none()
              | st.text(max_size=3) | st.just(2**52 - 1) | st.just(2**52) | st.just(2**64 - 1)
              | st.sampled_from([[], {}, [1], {"a": 1}]))


def outcome(decoder: MessageDecoder, body: bytes, compression: int, created_ms: int) -> Any:
    meta = lj.Meta(compression, 3, created_ms, 9)
    message = lj.DataMessage(b"app-production", b"logs.app", lj.compress(body, compression), meta)
    try:
        return decoder.accept(message, "10.0.0.2", "router").stored
    except LogportError as e:
        return type(e), str(e), getattr(e, "reason", None)


def assert_same(body: bytes, compression: int = lj.NO_COMPRESSION, created_ms: int = 1_795_316_400_123) -> Any:
    decoder = MessageDecoder(LogjamConfig())
    with_c = outcome(decoder, body, compression, created_ms)
    saved, logjam_ingest._pack_body = logjam_ingest._pack_body, None
    try:
        python = outcome(decoder, body, compression, created_ms)
    finally:
        logjam_ingest._pack_body = saved
    assert with_c == python
    return with_c


def scanned(body: bytes) -> Any:
    assert logjam_ingest._pack_body is not None
    return logjam_ingest._pack_body(body)


@given(OBJECTS, st.sampled_from([lj.NO_COMPRESSION, lj.ZLIB, lj.SNAPPY, lj.LZ4]))
def test_json_objects_stored_as_the_python_path_stores_them(record: dict[str, Any], compression: int) -> None:
    assert isinstance(assert_same(dumps(record), compression), bytes)


@given(json_text(20))
def test_json_text_gives_the_python_paths_batch_or_its_error(body: bytes) -> None:
    assert_same(body)


@given(st.binary(max_size=300))
def test_arbitrary_bytes_give_the_python_paths_answer(body: bytes) -> None:
    assert_same(body)


@given(STARTED_AT | st.integers() | st.none() | st.sampled_from([[], {}, ["x"]]), STARTED_MS, st.integers(1, 2**45))  # 0: the time of receipt
def test_started_at_and_started_ms_as_the_python_path_reads_them(started_at: Any, started_ms: Any,
                                                                 created_ms: int) -> None:
    body = dumps({"action": "a#b", "started_at": started_at, "started_ms": started_ms})
    assert isinstance(assert_same(body, created_ms=created_ms), bytes)
    assert scanned(body) is not None


@given(st.text(max_size=300), st.text(max_size=20), st.integers(0, 2**32 - 1), st.integers(0, 2**64 - 1),
       st.integers(0, 2**64 - 1), st.sampled_from(["router", "pull", "sub"]), st.integers(0, 70_000))
def test_stored_body_is_encode_batch(peer: str, env: str, device: int, sequence: int, created_ms: int,
                                     received_on: str, size: int) -> None:
    from logport.batch import encode_batch

    decoder = MessageDecoder(LogjamConfig())
    entry = (b"\x92" + bytes(size % 7), b"e" * size)
    tag = f"logjam.app-{env}.logs"
    option = {"size": 1, "source": "logjam", "peer": peer, "app_env": f"app-{env}", "topic": "logs",
              "device": device, "sequence": sequence, "created_ms": created_ms, "received_on": received_on}
    for _ in range(2):  # built, then from the cache
        assert decoder.stored_body(tag, entry, peer, f"app-{env}", "logs", device, sequence, created_ms,
                                   received_on) == encode_batch(tag, b"".join(entry), option)


@given(OBJECTS)
def test_the_c_pass_takes_every_json_object_without_duplicate_keys(record: dict[str, Any]) -> None:
    assert scanned(dumps(record)) is not None
    assert scanned(json.dumps(record).encode()) is not None  # every non-ASCII character as \u, pairs too


@pytest.mark.parametrize("depth", [1, 255, 256, 512, 513, 1024, 1025])
def test_nesting_to_orjsons_limit(depth: int) -> None:
    result = assert_same(nested(depth))
    assert (scanned(nested(depth)) is not None) == (depth <= 1024)
    assert isinstance(result, bytes) == (depth <= 1024)


@pytest.mark.parametrize("body", [b'{"a":1,"a":2}', b"[]", b'"x"', b"{}x", b'{"started_at":"\\ud800"}'])
def test_what_the_c_pass_leaves_to_python(body: bytes) -> None:
    assert scanned(body) is None
    assert_same(body)
