"""The C pass over a whole batch (`accept_batch`) against the Python path, message by message.

For each (frames, peer) taken from a ROUTER or PULL socket the C pass answers what the listener's
Python path (read_router_message / read_pull_message, then MessageDecoder.accept with the C body pass off)
makes of it, byte for byte, or None: the Python path then decides. These tests hold every answer that is
not None equal to the reference on arbitrary frames, bytes, JSON, names and times, and check that the C
pass takes the messages it should (a pass that declined everything would pass the first kind of test).
"""

from __future__ import annotations

import types
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from logport.config import LogjamConfig
from logport.errors import LogportError
from logport.protocols import logjam as lj
from logport.servers import logjam_ingest
from logport.servers.logjam_ingest import MessageDecoder
from tests.logjam.test_scan import STARTED_AT, STARTED_MS
from tests.lumberjack.test_scan import OBJECTS, dumps, json_text, nested

pytestmark = pytest.mark.skipif(logjam_ingest._accept_batch is None, reason="built without the C extensions")

NOW_MS = 1_795_316_400_777  # the time of receipt, for messages without a created_ms
PEER = "10.0.0.7"
METHODS = st.sampled_from([lj.NO_COMPRESSION, lj.ZLIB, lj.SNAPPY, lj.LZ4])
Outcome = Any


def reference(frames: list[bytes], router: bool, limit: int, peer: str = PEER) -> Outcome:
    """The Python path's answer: the Taken tuple, "ping", or the error (type, words, reason)."""
    decoder = MessageDecoder(LogjamConfig(max_decompressed_size=limit))
    saved_pack, saved_time = logjam_ingest._pack_body, logjam_ingest.time
    logjam_ingest._pack_body = None
    logjam_ingest.time = types.SimpleNamespace(time=lambda: NOW_MS / 1000)  # type: ignore[assignment]
    try:
        message = lj.read_router_message(frames[1:]) if router else lj.read_pull_message(frames)
        if isinstance(message, lj.PingRequest):
            return "ping"
        return decoder.accept(message, peer, "router" if router else "pull").taken()
    except LogportError as e:
        return type(e), str(e), getattr(e, "reason", None)
    finally:
        logjam_ingest._pack_body, logjam_ingest.time = saved_pack, saved_time


def batch_outcomes(batch: list[list[bytes]], router: bool, limit: int = 16 << 20,
                   peer: str = PEER) -> list[Outcome]:
    """Each message's C answer, held equal to the reference's wherever it is not None."""
    assert logjam_ingest._accept_batch is not None
    answers = logjam_ingest._accept_batch([(frames, peer) for frames in batch], router, limit,
                                          "router" if router else "pull", NOW_MS)
    assert len(answers) == len(batch)
    for frames, answer in zip(batch, answers, strict=True):
        if answer is not None:
            assert answer == reference(frames, router, limit, peer)
    return answers


def meta(compression: int = lj.NO_COMPRESSION, created_ms: int = 1_795_316_400_123, device: int = 3,
         sequence: int = 9, tag: int = lj.TAG, version: int = lj.VERSION) -> bytes:
    return lj.META.pack(tag, compression, version, device, created_ms, sequence)


def data(body: bytes, compression: int = lj.NO_COMPRESSION, app_env: bytes = b"app-production",
         topic: bytes = b"logs.app", **kw: Any) -> list[bytes]:
    return [app_env, topic, lj.compress(body, compression), meta(compression, **kw)]


BODY = dumps({"action": "a#b", "started_at": "2026-11-22T03:00:00+01:00", "code": 200})


# --- what the C pass must take ---


@pytest.mark.parametrize("router", [True, False])
@pytest.mark.parametrize("compression", [lj.NO_COMPRESSION, lj.ZLIB, lj.SNAPPY, lj.LZ4])
def test_every_compression_is_taken_in_c(router: bool, compression: int) -> None:
    frames = data(BODY, compression)
    answers = batch_outcomes([[b"rid", *frames], [b"rid", b"", *frames]] if router else [frames], router)
    assert all(a is not None for a in answers)


def test_gzip_bodies_are_taken_too() -> None:
    import gzip

    frames = data(BODY, lj.ZLIB)
    frames[2] = gzip.compress(BODY)  # the Ruby agent's zlib
    assert batch_outcomes([frames], False)[0] is not None


@pytest.mark.parametrize("frames", [
    [b"app-production", b"logs.app", BODY],  # no meta: PULL and async ROUTER may leave it out
    data(BODY, created_ms=0),  # created_ms 0: the time of receipt
    data(BODY, tag=lj.TAG_SWAPPED),
    data(dumps({"started_ms": 1_795_316_400_999})), data(dumps({"started_at": 5, "started_ms": 12.9})),
    data(dumps({"started_at": "2026-11-22T03:00:00.5Z"})), data(dumps({"started_at": "2026-11-22T03:00:00"})),
    data(dumps({})), data(b" {\n} "),
])
def test_the_forms_agents_send_are_taken_in_c(frames: list[bytes]) -> None:
    assert batch_outcomes([frames], False)[0] is not None


# --- what it leaves to the Python path, and that path's answer stands ---


@pytest.mark.parametrize("router", [True, False])
@pytest.mark.parametrize("frames", [
    [], [b""], [b"ping", b"app-production", b"", meta()], [b"ping", b"x"],
    [b"app-production", b"logs.app"], [b"app-production", b"logs.app", BODY, meta(), b"5th"],
    data(BODY, app_env=b"app"), data(BODY, app_env=b"app-"), data(BODY, app_env=b"-production"),
    data(BODY, app_env=b"app-prod-1"), data(BODY, topic=b"logs."), data(BODY, topic=b"logsx"),
    data(BODY, topic=b"metrics"), data(BODY, topic=b"logs..a"), data(BODY, topic=b"frontend.pages"),
    data(BODY)[:3] + [b"short"], data(BODY)[:3] + [meta(tag=0x1234)], data(BODY)[:3] + [meta(version=2)],
    data(BODY)[:3] + [lj.META.pack(lj.TAG, 4, 1, 0, 0, 0)],
    [b"app-production", b"logs.app", b"\x78\x9c garbage", meta(lj.ZLIB)],
    [b"app-production", b"logs.app", b"\x00\x00\x00\x10abc", meta(lj.LZ4)],
    [b"app-production", b"logs.app", b"\x10abc", meta(lj.SNAPPY)],
    [b"app-production", b"logs.app", lj.compress(BODY, lj.ZLIB)[:-3], meta(lj.ZLIB)],
    data(b'{"a":1,"a":2}'), data(b"[1]"), data(b"{"), data(dumps({"started_at": "2026-11-22T03:00:00+0100"})),
    data(dumps({"started_at": "1969-12-31T23:59:59Z"})), data(nested(1025)),
])
def test_refused_and_unusual_messages_get_the_python_paths_answer(frames: list[bytes], router: bool) -> None:
    batch = [[b"rid", b"", *frames], [b"rid", *frames]] if router else [frames]
    batch_outcomes(batch, router)


@pytest.mark.parametrize("compression", [lj.NO_COMPRESSION, lj.ZLIB, lj.SNAPPY, lj.LZ4])
@pytest.mark.parametrize("limit", [len(BODY) - 1, len(BODY)])
def test_max_decompressed_size_holds_in_c(compression: int, limit: int) -> None:
    (answer,) = batch_outcomes([data(BODY, compression)], False, limit)
    assert (answer is not None) == (limit >= len(BODY))
    if answer is None:
        assert reference(data(BODY, compression), False, limit)[0].__name__ == "LimitExceeded"


def test_a_mixed_batch_answers_each_message_in_its_place() -> None:
    batch = [data(BODY), [b"ping", b"x"], data(b"[]"), data(BODY, lj.LZ4, app_env=b"other-staging"), data(BODY)]
    answers = batch_outcomes(batch, False)
    assert [a is not None for a in answers] == [True, False, False, True, True]
    assert answers[0][1] == "logjam.app-production.logs.app" and answers[3][1] == "logjam.other-staging.logs.app"


def test_a_peer_utf8_cannot_hold_is_left_to_python() -> None:
    assert batch_outcomes([data(BODY)], False, peer="\udcff")[0] is None


# --- properties ---

FRAME = st.binary(max_size=40) | st.sampled_from([b"", b"ping", b"app-production", b"logs.app", BODY, meta(),
                                                  meta(lj.ZLIB), meta(lj.LZ4), meta(lj.SNAPPY)])


@given(st.lists(st.lists(FRAME, max_size=7), max_size=6), st.booleans())
def test_arbitrary_frames_give_the_python_paths_answer(batch: list[list[bytes]], router: bool) -> None:
    batch_outcomes(batch, router)


@given(st.binary(max_size=300), METHODS, st.integers(0, 400))
def test_arbitrary_bodies_under_every_compression(body: bytes, compression: int, limit: int) -> None:
    batch_outcomes([[b"app-production", b"logs.app", body, meta(compression)]], False, limit)


@given(st.binary(max_size=200), METHODS)
def test_arbitrary_bytes_compressed_give_the_python_paths_answer(body: bytes, compression: int) -> None:
    batch_outcomes([data(body, compression)], False)


@given(json_text(20), METHODS)
def test_json_text_gives_the_python_paths_answer(body: bytes, compression: int) -> None:
    batch_outcomes([data(body, compression)], False)


@given(OBJECTS, METHODS, st.booleans())
def test_json_objects_are_taken_as_the_python_path_stores_them(record: dict[str, Any], compression: int,
                                                               router: bool) -> None:
    record.pop("started_at", None)
    frames = data(dumps(record), compression)
    (answer,) = batch_outcomes([[b"rid", *frames] if router else frames], router)
    assert answer is not None


NAME_BYTES = st.lists(st.sampled_from(list(b"aZ_-.09 \xc3") + [ord("-")] * 3), max_size=12).map(bytes)


@given(NAME_BYTES | st.sampled_from([b"app-production", b"a-b", b"my_app-prod_x"]),
       NAME_BYTES | st.sampled_from([b"logs", b"events.a-b", b"javascript.x.y_z", b"frontend.page",
                                     b"frontend.ajax", b"mobile", b"logs.a.b"]))
def test_app_env_and_topic_rules_hold_in_c(app_env: bytes, topic: bytes) -> None:
    (answer,) = batch_outcomes([data(BODY, app_env=app_env, topic=topic)], False)
    assert (answer is not None) == (lj.valid_app_env(app_env) and lj.valid_topic(topic))


ISO = st.builds(lambda dt, sep, frac, tz: dt.isoformat(sep, "seconds") + frac + tz,
                st.datetimes(), st.sampled_from(["T", " "]),
                st.sampled_from(["", ".1", ".12", ".123", ",5", ".123456", ".1234567", "."]),
                st.sampled_from(["", "Z", "+00:00", "-00:00", "+01:00", "-05:30", "+23:59", "+24:00", "+0100", "z"]))


@given(ISO | STARTED_AT | st.integers() | st.none(), STARTED_MS, st.integers(0, 2**64 - 1), METHODS)
def test_event_times_as_the_python_path_reads_them(started_at: Any, started_ms: Any, created_ms: int,
                                                   compression: int) -> None:
    body = dumps({"started_at": started_at, "started_ms": started_ms})
    batch_outcomes([data(body, compression, created_ms=created_ms)], False)


@given(st.datetimes(), st.sampled_from(["", "Z", "+01:00", "-05:30"]))
def test_plain_iso_times_are_taken_in_c(moment: Any, tz: str) -> None:
    text = moment.isoformat(timespec="microseconds") + tz
    (answer,) = batch_outcomes([data(dumps({"started_at": text}))], False)
    parsed = datetime.fromisoformat(text)
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    assert (answer is not None) == (parsed >= datetime(1970, 1, 1, tzinfo=UTC))  # before 1970: Python decides


@given(OBJECTS, METHODS, st.integers(0, 10_000), st.integers(0, 255), st.integers(-3, 3))
def test_damaged_compressed_bodies_give_the_python_paths_answer(record: dict[str, Any], compression: int,
                                                                 where: int, value: int, cut: int) -> None:
    body = bytearray(lj.compress(dumps(record), compression))
    if body:
        body[where % len(body)] = value  # one byte changed: lengths, offsets, tokens, checksums
    body = body[:len(body) + cut] if cut < 0 else body + bytes(cut)
    batch_outcomes([[b"app-production", b"logs.app", bytes(body), meta(compression)]], False)


# --- the listener with and without the C pass ---


async def test_the_listener_stores_replies_and_publishes_the_same_without_the_c_pass(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import zmq.asyncio

    from tests.logjam.helpers import AgentProducer, RawSubscriber, until_connected
    from tests.support import hub_config, running_hub, stored_batches

    messages = [data(BODY, c) for c in (lj.NO_COMPRESSION, lj.ZLIB, lj.SNAPPY, lj.LZ4)] + [
        data(b"[]"), data(BODY, app_env=b"bad"), [b"ping", b"app-production", b"", meta()],
        data(dumps({"started_at": "2026-11-22 03:00:00+0100", "x": [1, 2.5, None]}), lj.LZ4),
        [b"app-production", b"logs.app", b"not lz4", meta(lj.LZ4)]]

    async def run(name: str) -> tuple[list[Any], list[Any], list[Any]]:
        cfg = hub_config(tmp_path / name, ["logjam"], hub={"hostname": "h"})
        ctx = zmq.asyncio.Context()
        async with running_hub(cfg) as hub:
            producer = AgentProducer(ctx, cfg.logjam.router_port)
            sub = RawSubscriber(ctx, cfg.logjam.pub_port)
            await until_connected(sub, producer)
            replies = [await producer.send_sync(frames) for frames in messages]
            published = [(await sub.recv_data())[:3] for _ in range(5)]
            assert hub.runtime is not None
            stored = [(b.tag, b.entries, {k: v for k, v in b.option.items() if k != "peer"})
                      for _, b in await stored_batches(hub.runtime.store, "logjam")
                      if b.option.get("app_env") == "app-production"]  # not until_connected's probes
            producer.close()
            sub.close()
        ctx.destroy(linger=0)
        return replies, published, stored

    with_c = await run("c")
    monkeypatch.setattr(logjam_ingest, "_accept_batch", None)
    monkeypatch.setattr(logjam_ingest, "_pack_body", None)
    python = await run("python")
    assert with_c == python
    assert [r[-1] for r in with_c[0]] == [lj.ACCEPTED] * 4 + [lj.BAD_REQUEST] * 2 + [b"h", lj.ACCEPTED,
                                                                                      lj.BAD_REQUEST]
    assert len(with_c[2]) == 5
