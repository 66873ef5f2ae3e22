"""startingOffsets / endingOffsets and streaming offsets of the `logport` source, planned in plain Python (no Spark)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxBytes, ReadMaxRows

from logport.spark.segments import DirectorySegments, SourceOptionError
from logport.spark.source import LogportBatchReader, LogportStreamReader, SegmentRange
from logport.store import frames, groups
from tests.spark.sample import Layout, forward_batches, layout, write_bodies

# Two segments, written in the opposite order of their names; small chunks, so frames start at chunk bases too.
BODIES = {"web": forward_batches(3, 5, tag="web"), "app": forward_batches(5, 5, tag="app")}
CHUNK_SIZE = 1000

Layouts = dict[str, Layout]


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Layouts]:
    """The data directory, and where each segment's frames are (from the appends' results)."""
    root = str(tmp_path_factory.mktemp("offsets"))
    results = write_bodies(root, BODIES, chunk_size=CHUNK_SIZE)
    return root, {name: layout(results[name], BODIES[name]) for name in BODIES}


@pytest.fixture(scope="module")
def data_dir(written: tuple[str, Layouts]) -> str:
    return written[0]


@pytest.fixture(scope="module")
def at(written: tuple[str, Layouts]) -> Layouts:
    return written[1]


def bare(offsets: dict[str, int]) -> dict[str, int]:
    """HUB/SEGMENT keys of one hub's offsets as SEGMENT keys (in their order)."""
    assert len({key.rpartition("/")[0] for key in offsets}) <= 1
    return {key.rpartition("/")[2]: value for key, value in offsets.items()}


def plan(data_dir: str, **options: str) -> dict[str, tuple[int, int]]:
    """segment -> (first byte, end) the batch reader would read, from its partitions."""
    reader = LogportBatchReader({"path": data_dir, **{k.lower(): v for k, v in options.items()}})
    out: dict[str, tuple[int, int]] = {}
    for p in reader.partitions():
        assert isinstance(p, SegmentRange)
        segment = p.segment.rpartition("/")[2]
        lo, hi = out.get(segment, (p.start, p.end))
        out[segment] = (min(lo, p.start), max(hi, p.end))
    return out


def whole(segment: Layout) -> tuple[int, int]:
    return segment.frame_starts[0], segment.end


def test_the_sample_has_frames_at_chunk_bases(data_dir: str, at: Layouts) -> None:
    access = DirectorySegments(data_dir)
    try:
        assert len(at["app"].chunk_bases) > 1
        for name, segment in at.items():
            chunks = access._chunk_reader(name)
            assert chunks.bases == segment.chunk_bases and set(chunks.bases) <= set(segment.frame_starts)
            for base, stop in zip(chunks.bases, [*chunks.bases[1:], segment.end], strict=True):
                # Each chunk starts with its header, its first event right after that and a commit frame;
                # its data (not its file: a spare is chunk_size long) ends where the next chunk starts.
                assert base + groups.CHUNK_HEADER_SIZE + groups.COMMIT_SIZE in segment.events
                size = chunks.chunk_end(base) - base
                chunk = groups.walk_chunk(chunks.pread(base, size, base + size), base)
                assert (chunk.version, chunk.end, chunk.corrupt) == (groups.VERSION, stop, [])
                assert chunk.groups[0] == base + groups.CHUNK_HEADER_SIZE
    finally:
        access.close()


OffsetCase = Callable[[Layouts], tuple[dict[str, str], dict[str, tuple[int, int]]]]
OFFSET_CASES: dict[str, OffsetCase] = {
    "defaults": lambda at: ({}, {"app": whole(at["app"]), "web": whole(at["web"])}),
    "earliest-latest": lambda at: ({"startingOffsets": "earliest", "endingOffsets": "latest"},
                                   {"app": whole(at["app"]), "web": whole(at["web"])}),
    "from-latest": lambda at: ({"startingOffsets": " latest "}, {}),
    "to-earliest": lambda at: ({"endingOffsets": "earliest"}, {}),
    # -2 earliest, -1 latest inside the JSON map; segments left out: earliest to start, latest to end.
    "json-from-earliest-and-latest": lambda at: ({"startingOffsets": '{"app": -2, "web": -1}'},
                                                 {"app": whole(at["app"])}),
    "json-from-latest": lambda at: ({"startingOffsets": '{"app": -1}'}, {"web": whole(at["web"])}),
    "json-to-earliest": lambda at: ({"endingOffsets": '{"app": -2}'}, {"web": whole(at["web"])}),
    "json-both": lambda at: ({"startingOffsets": '{"app": -2}', "endingOffsets": '{"app": -1, "web": -2}'},
                             {"app": whole(at["app"])}),
    # Event offsets (the offset column): the range spans a chunk boundary of app.
    "json-offsets": lambda at: ({"startingOffsets": json.dumps({"app": at["app"].events[2]}),
                                 "endingOffsets": json.dumps({"app": at["app"].events[4], "web": at["web"].events[1]})},
                                {"app": (at["app"].events[2], at["app"].events[4]),
                                 "web": (at["web"].frame_starts[0], at["web"].events[1])}),
}


@pytest.mark.parametrize("case", OFFSET_CASES.values(), ids=OFFSET_CASES.keys())
def test_earliest_latest_and_json_offsets(data_dir: str, at: Layouts, case: OffsetCase) -> None:
    options, expected = case(at)
    assert plan(data_dir, **options) == expected


def test_every_frame_start_and_the_end_are_accepted(data_dir: str, at: Layouts) -> None:
    # Every frame: events, and the store's records (chunk headers, commit frames) that readers skip.
    for name, segment in at.items():
        starts = segment.frame_starts
        for i, start in enumerate(starts):
            got = plan(data_dir, segments=name, startingOffsets=json.dumps({name: start}))
            assert got == ({name: (start, segment.end)} if i < len(starts) - 1 else {})
            got = plan(data_dir, segments=name, endingOffsets=json.dumps({name: start}))
            assert got == ({name: (starts[0], start)} if i else {})


MID_FRAME: dict[str, tuple[str, Callable[[Layout], int]]] = {
    "start-in-an-event": ("startingOffsets", lambda app: app.events[1] + 1),
    "start-in-an-event-body": ("startingOffsets", lambda app: app.events[2] + frames.HEADER_SIZE),
    "start-in-a-commit-frame": ("startingOffsets", lambda app: app.ends[0] + frames.HEADER_SIZE),
    "end-in-an-event": ("endingOffsets", lambda app: app.ends[2] - 1),
    "end-in-an-event-middle": ("endingOffsets", lambda app: (app.events[3] + app.ends[3]) // 2),
    "end-in-a-chunk-header": ("endingOffsets", lambda app: app.chunk_bases[1] + 1),
}


@pytest.mark.parametrize(("option", "offset_in"), MID_FRAME.values(), ids=MID_FRAME.keys())
def test_an_offset_inside_a_frame_is_refused(data_dir: str, at: Layouts, option: str,
                                             offset_in: Callable[[Layout], int]) -> None:
    offset = offset_in(at["app"])
    assert offset not in at["app"].frame_starts
    with pytest.raises(SourceOptionError, match=rf"{option}: offset {offset} of segment 'app' is not where a frame "):
        plan(data_dir, **{option: json.dumps({"web": 0, "app": offset})})


REFUSED: dict[str, tuple[str, Callable[[int], int], Callable[[int], str]]] = {  # option, value, message of app's end
    "start-below-latest": ("startingOffsets", lambda end: -3,
                           lambda end: "offset -3 of segment 'app' is neither a byte offset nor -2 (earliest) or -1 "
                                       "(latest)"),
    "end-far-negative": ("endingOffsets", lambda end: -100,
                         lambda end: "offset -100 of segment 'app' is neither a byte offset nor -2"),
    "start-past-the-end": ("startingOffsets", lambda end: end + 1,
                           lambda end: f"offset {end + 1} of segment 'app' is beyond its end {end}"),
    "end-far-past-the-end": ("endingOffsets", lambda end: 10**12,
                             lambda end: f"offset {10**12} of segment 'app' is beyond its end"),
}


@pytest.mark.parametrize(("option", "value", "message"), REFUSED.values(), ids=REFUSED.keys())
def test_a_negative_or_too_large_offset_is_refused(data_dir: str, at: Layouts, option: str,
                                                   value: Callable[[int], int], message: Callable[[int], str]) -> None:
    end = at["app"].end
    with pytest.raises(SourceOptionError, match=re.escape(f"{option}: {message(end)}")):
        plan(data_dir, **{option: json.dumps({"app": value(end)})})


@pytest.mark.parametrize("value", ['{"app": true}', '{"app": 1.5}', '["app", 0]', '{"app": "0"}', "soon"])
def test_malformed_offsets_are_refused(data_dir: str, value: str) -> None:
    with pytest.raises(SourceOptionError, match="startingOffsets=.* is not earliest, latest or a JSON map"):
        plan(data_dir, startingOffsets=value)


def test_stream_offsets_are_sorted_by_segment(data_dir: str, at: Layouts) -> None:
    app, web = at["app"], at["web"]
    reader = LogportStreamReader({"path": data_dir, "startingoffsets": '{"web": -1, "app": -2}'})
    try:
        initial = bare(reader.initialOffset())
        assert json.dumps(initial) == json.dumps({"app": app.frame_starts[0], "web": web.end})
        # Spark hands the last offset back as it was stored; whatever its order, the next one is sorted.
        start = {"web": web.frame_starts[0], "app": app.events[1]}
        end = bare(reader.latestOffset(start, ReadAllAvailable()))
        assert list(end) == ["app", "web"]
        assert end == {"app": app.end, "web": web.end}
        limited = bare(reader.latestOffset(start, ReadMaxBytes(1)))  # one event, of the first segment by name
        assert list(limited) == ["app", "web"] and limited == {"app": app.ends[1], "web": web.frame_starts[0]}
        # The store's records go with the event after them: from a chunk's base (its header, a commit
        # frame) or from a commit frame, one event is admitted with them, never the records alone.
        base = app.chunk_bases[1]
        first = next(i for i, offset in enumerate(app.events) if offset > base)
        assert bare(reader.latestOffset({"app": base, "web": web.end}, ReadMaxBytes(1))) == {"app": app.ends[first],
                                                                                       "web": web.end}
        assert bare(reader.latestOffset({"app": app.ends[0], "web": web.end}, ReadMaxRows(1))) == {"app": app.ends[1],
                                                                                             "web": web.end}
        # A budget that ends inside the records before an event stops after the event before them.
        two = app.ends[2] - app.events[1]  # events 1 and 2, and the commit frame between them
        assert bare(reader.latestOffset({"app": app.events[1], "web": web.end}, ReadMaxBytes(2 * two - 2))) == {
            "app": app.ends[1], "web": web.end}
        # A segment the last offset does not know enters at its start, in its sorted place.
        assert list(bare(reader.latestOffset({"web": 0}, ReadAllAvailable()))) == ["app", "web"]
        assert list(bare(reader.reportLatestOffset() or {})) == ["app", "web"]
    finally:
        reader.stop()


def test_stream_start_inside_a_frame_is_refused(data_dir: str, at: Layouts) -> None:
    offset = at["web"].events[1] + 5
    reader = LogportStreamReader({"path": data_dir, "startingoffsets": json.dumps({"web": offset})})
    try:
        with pytest.raises(SourceOptionError, match=f"startingOffsets: offset {offset} of segment 'web' is not"):
            reader.initialOffset()
    finally:
        reader.stop()


def test_directory_frame_start_check_walks_one_chunk(data_dir: str, at: Layouts) -> None:
    access = DirectorySegments(data_dir)
    try:
        app = at["app"]
        assert [o for o in range(app.end + 2) if access.could_start_frame("app", o)] == app.frame_starts
    finally:
        access.close()


@pytest.fixture(scope="module", params=[64 * 1024 * 1024, 2500], ids=["one-chunk", "chunks"])
def even_dir(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Layout]:
    """One segment of 40 frames of one size, in one chunk or in many (whose bases the cuts walk from)."""
    root = str(tmp_path_factory.mktemp("even"))
    bodies = forward_batches(40, 3, tag="even")
    results = write_bodies(root, {"even": bodies}, chunk_size=request.param)
    return root, layout(results["even"], bodies)


@pytest.mark.parametrize("parts", [2, 3, 4, 7])
def test_partitions_are_cut_equal(even_dir: tuple[str, Layout], parts: int) -> None:
    """partitionBytes for parts - 0.7 partitions: `parts` partitions of about 1/parts of the bytes each, not
    parts - 1 of partitionBytes each and a rest of a third of one (which ran alone at the end of a read);
    each cut at the end of the first event past its share."""
    data_dir, at = even_dir
    first, end = whole(at)
    limit = (end - first) * 10 // (10 * parts - 7)
    ranges = LogportBatchReader({"path": data_dir, "partitionbytes": str(limit)}).partitions()
    cuts = [min(e for e in at.ends if e >= first + (end - first) * k // parts) for k in range(1, parts)]
    assert [(p.start, p.end) for p in ranges] == list(zip([first, *cuts], [*cuts, end], strict=True))
    assert all(isinstance(p, SegmentRange) and p.segment.endswith("/even") for p in ranges)
    step = max(b - a for a, b in zip([first, *at.ends], at.ends, strict=False))  # an event and the frames before it
    sizes = [p.end - p.start for p in ranges]
    assert max(sizes) - min(sizes) <= 2 * step, sizes


MiB = 1024 * 1024
# (partitionBytes option, the session's parallelism, bytes to read) -> the most bytes a partition reads
PARTITION_LIMITS = [
    ("8192", 2, 200 * MiB, 8192),  # the option, whatever the session
    ("8192", None, 200 * MiB, 8192),
    (None, None, 200 * MiB, 32 * MiB),  # a class not from register(): no parallelism known
    (None, 2, 191 * MiB, 96 * MiB - MiB // 2),  # a share per core
    (None, 3, 10 * MiB, 4 * MiB),  # at least 4 MiB: 3 partitions, not 3 of 3.3 MiB (as Spark's openCostInBytes)
    (None, 2, 1 * MiB, 4 * MiB),
    (None, 4, 4 * 1024 * MiB, 128 * MiB),  # at most 128 MiB (Spark's maxPartitionBytes): 32 partitions
]


@pytest.mark.parametrize(("option", "parallelism", "total", "expected"), PARTITION_LIMITS)
def test_partition_limit(data_dir: str, option: str | None, parallelism: int | None, total: int,
                         expected: int) -> None:
    from logport.spark.source import SegmentPlanner

    options = {"path": data_dir} | ({"partitionbytes": option} if option else {})
    assert SegmentPlanner(options, parallelism).partition_limit(total) == expected


def test_the_registered_class_carries_the_session_parallelism(data_dir: str) -> None:
    """The planner runs in a Python worker that sees only the pickled class and the options: the session's
    parallelism goes with the class (pickled by value), to each reader."""
    from pyspark import cloudpickle

    from logport.spark.source import LogportDataSource, session_data_source

    cls = cloudpickle.loads(cloudpickle.dumps(session_data_source(3)))
    assert issubclass(cls, LogportDataSource) and cls.name() == "logport" and cls.parallelism == 3
    source = cls({"path": data_dir})
    assert source.reader(None).parallelism == 3  # type: ignore[arg-type, attr-defined]
    assert source.streamReader(None).planner.parallelism == 3  # type: ignore[arg-type, attr-defined]
    assert LogportDataSource.parallelism is None
