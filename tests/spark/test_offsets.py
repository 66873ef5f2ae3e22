"""startingOffsets / endingOffsets and streaming offsets of the `logport` source, planned in plain Python (no Spark)."""

from __future__ import annotations

import json
import re

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxBytes

from logport.spark.segments import DirectorySegments, SourceOptionError
from logport.spark.source import LogportBatchReader, LogportStreamReader, SegmentRange
from logport.store import frames
from tests.spark.sample import forward_batches, write_bodies

# Two segments, written in the opposite order of their names; small chunks, so frames start at chunk bases too.
BODIES = {"web": forward_batches(3, 5, tag="web"), "app": forward_batches(5, 5, tag="app")}
CHUNK_SIZE = 1000


def frame_starts(name: str) -> list[int]:
    """Where each frame of a segment starts, and (last) where the last one ends."""
    bodies = BODIES[name]
    return [sum(frames.HEADER_SIZE + len(b) for b in bodies[:i]) for i in range(len(bodies) + 1)]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    root = str(tmp_path_factory.mktemp("offsets"))
    write_bodies(root, BODIES, chunk_size=CHUNK_SIZE)
    return root


def plan(data_dir: str, **options: str) -> dict[str, tuple[int, int]]:
    """segment -> (first byte, end) the batch reader would read, from its partitions."""
    reader = LogportBatchReader({"path": data_dir, **{k.lower(): v for k, v in options.items()}})
    out: dict[str, tuple[int, int]] = {}
    for p in reader.partitions():
        assert isinstance(p, SegmentRange)
        lo, hi = out.get(p.segment, (p.start, p.end))
        out[p.segment] = (min(lo, p.start), max(hi, p.end))
    return out


def whole(name: str) -> tuple[int, int]:
    starts = frame_starts(name)
    return starts[0], starts[-1]


def test_the_sample_has_frames_at_chunk_bases(data_dir: str) -> None:
    bases = DirectorySegments(data_dir)._chunk_reader("app").bases
    assert len(bases) > 1 and set(bases) <= set(frame_starts("app"))


@pytest.mark.parametrize(("options", "expected"), [
    ({}, {"app": whole("app"), "web": whole("web")}),
    ({"startingOffsets": "earliest", "endingOffsets": "latest"}, {"app": whole("app"), "web": whole("web")}),
    ({"startingOffsets": " latest "}, {}),
    ({"endingOffsets": "earliest"}, {}),
    # -2 earliest, -1 latest inside the JSON map; segments left out: earliest to start, latest to end.
    ({"startingOffsets": '{"app": -2, "web": -1}'}, {"app": whole("app")}),
    ({"startingOffsets": '{"app": -1}'}, {"web": whole("web")}),
    ({"endingOffsets": '{"app": -2}'}, {"web": whole("web")}),
    ({"startingOffsets": '{"app": -2}', "endingOffsets": '{"app": -1, "web": -2}'}, {"app": whole("app")}),
    ({"startingOffsets": json.dumps({"app": frame_starts("app")[2]}),
      "endingOffsets": json.dumps({"app": frame_starts("app")[4], "web": frame_starts("web")[1]})},
     {"app": (frame_starts("app")[2], frame_starts("app")[4]), "web": (0, frame_starts("web")[1])}),
])
def test_earliest_latest_and_json_offsets(data_dir: str, options: dict[str, str],
                                          expected: dict[str, tuple[int, int]]) -> None:
    assert plan(data_dir, **options) == expected


def test_every_frame_start_and_the_end_are_accepted(data_dir: str) -> None:
    for name in BODIES:
        starts = frame_starts(name)
        for i, start in enumerate(starts):
            got = plan(data_dir, segments=name, startingOffsets=json.dumps({name: start}))
            assert got == ({name: (start, starts[-1])} if i < len(starts) - 1 else {})
            got = plan(data_dir, segments=name, endingOffsets=json.dumps({name: start}))
            assert got == ({name: (0, start)} if i else {})


def _mid_frame() -> list[tuple[str, int]]:
    starts = frame_starts("app")
    return [("startingOffsets", starts[1] + 1), ("startingOffsets", starts[2] + frames.HEADER_SIZE),
            ("endingOffsets", starts[3] - 1), ("endingOffsets", (starts[3] + starts[4]) // 2)]


@pytest.mark.parametrize(("option", "offset"), _mid_frame())
def test_an_offset_inside_a_frame_is_refused(data_dir: str, option: str, offset: int) -> None:
    with pytest.raises(SourceOptionError, match=rf"{option}: offset {offset} of segment 'app' is not where a frame "):
        plan(data_dir, **{option: json.dumps({"web": 0, "app": offset})})


@pytest.mark.parametrize(("option", "value", "message"), [
    ("startingOffsets", -3, "offset -3 of segment 'app' is neither a byte offset nor -2 (earliest) or -1 (latest)"),
    ("endingOffsets", -100, "offset -100 of segment 'app' is neither a byte offset nor -2"),
    ("startingOffsets", frame_starts("app")[-1] + 1, f"offset {frame_starts('app')[-1] + 1} of segment 'app' is "
                                                     f"beyond its end {frame_starts('app')[-1]}"),
    ("endingOffsets", 10**12, f"offset {10**12} of segment 'app' is beyond its end"),
])
def test_a_negative_or_too_large_offset_is_refused(data_dir: str, option: str, value: int, message: str) -> None:
    with pytest.raises(SourceOptionError, match=re.escape(f"{option}: {message}")):
        plan(data_dir, **{option: json.dumps({"app": value})})


@pytest.mark.parametrize("value", ['{"app": true}', '{"app": 1.5}', '["app", 0]', '{"app": "0"}', "soon"])
def test_malformed_offsets_are_refused(data_dir: str, value: str) -> None:
    with pytest.raises(SourceOptionError, match="startingOffsets=.* is not earliest, latest or a JSON map"):
        plan(data_dir, startingOffsets=value)


def test_stream_offsets_are_sorted_by_segment(data_dir: str) -> None:
    reader = LogportStreamReader({"path": data_dir, "startingoffsets": '{"web": -1, "app": -2}'})
    try:
        initial = reader.initialOffset()
        assert json.dumps(initial) == json.dumps({"app": 0, "web": frame_starts("web")[-1]})
        # Spark hands the last offset back as it was stored; whatever its order, the next one is sorted.
        start = {"web": 0, "app": frame_starts("app")[1]}
        end = reader.latestOffset(start, ReadAllAvailable())
        assert list(end) == ["app", "web"]
        assert end == {"app": frame_starts("app")[-1], "web": frame_starts("web")[-1]}
        limited = reader.latestOffset(start, ReadMaxBytes(1))  # one frame, of the first segment by name
        assert list(limited) == ["app", "web"] and limited == {"app": frame_starts("app")[2], "web": 0}
        # A segment the last offset does not know enters at its start, in its sorted place.
        assert list(reader.latestOffset({"web": 0}, ReadAllAvailable())) == ["app", "web"]
        assert list(reader.reportLatestOffset() or {}) == ["app", "web"]
    finally:
        reader.stop()


def test_stream_start_inside_a_frame_is_refused(data_dir: str) -> None:
    offset = frame_starts("web")[1] + 5
    reader = LogportStreamReader({"path": data_dir, "startingoffsets": json.dumps({"web": offset})})
    try:
        with pytest.raises(SourceOptionError, match=f"startingOffsets: offset {offset} of segment 'web' is not"):
            reader.initialOffset()
    finally:
        reader.stop()


def test_directory_frame_start_check_walks_one_chunk(data_dir: str) -> None:
    access = DirectorySegments(data_dir)
    try:
        starts = set(frame_starts("app"))
        assert [o for o in range(frame_starts("app")[-1] + 2) if access.could_start_frame("app", o)] == sorted(starts)
    finally:
        access.close()
