"""The `logport` PySpark data source: batch and streaming reads of stored segments.

A partition is a byte range of one segment that starts and ends on frame
boundaries; a streaming offset is a JSON map HUB/SEGMENT -> byte offset (HUB: the
hub's identity, so several hubs are one source) with sorted
keys, always on a frame boundary, so a restart from a checkpoint resumes
exactly where the last committed batch ended.
"""

from __future__ import annotations

import gc
import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from logport.errors import CorruptData, DataGivenUp, OffsetTruncated
from logport.spark.columns import ROWS_PER_BATCH, Layout, frames_to_batches
from logport.spark.segments import (
    HubLocation,
    HubsSegments,
    SegmentAccess,
    SourceOptionError,
    hub_key,
    open_hub,
    open_segments,
    select_segments,
    split_key,
)
from logport.store import frames
from logport.store.reader import count_events

log = logging.getLogger("logport.spark")

DEFAULT_PARTITION_BYTES = 32 * 1024 * 1024  # without partitionBytes and without the session's parallelism
# With the session's parallelism (register()), partitions are cut as Spark cuts files (FilePartition.maxSplitBytes):
# the bytes to read spread over its cores, between these two (Spark's maxPartitionBytes and openCostInBytes)
MAX_PARTITION_BYTES = 128 * 1024 * 1024
MIN_PARTITION_BYTES = 4 * 1024 * 1024
EARLIEST, LATEST = -2, -1  # as numbers inside a JSON offsets option (Kafka's convention)
OFFSET_OPTIONS = {"startingoffsets": "startingOffsets", "endingoffsets": "endingOffsets"}  # as README spells them

Offsets = dict[str, int]


@dataclass(frozen=True)
class SegmentRange(InputPartition):
    """Bytes [start, end) of one hub's segment (`segment` is HUB/SEGMENT); both on frame boundaries."""

    segment: str
    start: int
    end: int
    location: HubLocation


def _is_record(frame_type: int) -> bool:
    """One of the store's own records (negative types), which readers skip: no rows."""
    return frame_type < 0


def _close(walk: Iterator[Any] | None) -> None:
    """Stop a walk of frames before its end (a generator's close: its reads end there)."""
    close = getattr(walk, "close", None)
    if close is not None:
        close()


def _sorted(offsets: Offsets) -> Offsets:
    return {name: offsets[name] for name in sorted(offsets)}


def _int_option(options: dict[str, str], key: str, default: int | None) -> int | None:
    value = options.get(key)
    if value is None or value == "":
        return default
    try:
        number = int(value)
    except ValueError:
        raise SourceOptionError(f"option {key}={value!r} is not an integer") from None
    if number <= 0:
        raise SourceOptionError(f"option {key}={value!r} must be positive")
    return number


def _offset_spec(options: dict[str, str], key: str, default: str) -> str | dict[str, int]:
    value = options.get(key, default).strip()
    if value in ("earliest", "latest"):
        return value
    try:
        parsed = json.loads(value)
    except ValueError:
        parsed = None
    # bool is an int to Python, not an offset.
    if not (isinstance(parsed, dict) and all(isinstance(v, int) and not isinstance(v, bool) for v in parsed.values())):
        raise SourceOptionError(f"option {OFFSET_OPTIONS[key]}={value!r} is not earliest, latest or a JSON map "
                                "segment -> offset")
    for name, offset in parsed.items():
        if offset < 0 and offset not in (EARLIEST, LATEST):
            raise SourceOptionError(f"option {OFFSET_OPTIONS[key]}: offset {offset} of segment {name!r} is "
                                    f"neither a byte offset nor {EARLIEST} (earliest) or {LATEST} (latest)")
    return parsed


class SegmentPlanner:
    """Offsets and partitions over the selected segments, for the batch and the stream reader."""

    def __init__(self, options: dict[str, str], parallelism: int | None = None) -> None:
        self.options = options
        self.patterns = options.get("segments")
        self.partition_bytes = _int_option(options, "partitionbytes", None)  # None: from the bytes to read
        self.parallelism = parallelism
        self.fail_on_data_loss = options.get("failondataloss", "true").lower() != "false"
        self._access: HubsSegments | None = None

    @property
    def access(self) -> HubsSegments:
        if self._access is None:
            self._access = open_segments(self.options)
        return self._access

    def close(self) -> None:
        if self._access is not None:
            self._access.close()
            self._access = None

    def segments(self) -> list[str]:
        return select_segments(self.access.names(), self.patterns)

    def complete_end(self, name: str, start: int, end: int | None = None) -> int:
        """The end of the last whole frame at or before `end` (default: the segment's end), from `start`.

        The segment's end is one already: a store's end, and a data directory's, is where a whole commit
        ends. A corrupt range on the way is skipped with failOnDataLoss=false (it ends on a frame)."""
        bound = self.access.bounds(name)[1]
        if end is None or end >= bound:
            return bound
        position = start
        while True:
            try:
                for offset, _, length in self.access.frame_headers(name, position, end):
                    position = offset + frames.HEADER_SIZE + length
                return position
            except CorruptData as e:
                given_up = isinstance(e, DataGivenUp)  # `logport verify --repair`: skipped whatever failOnDataLoss
                if (self.fail_on_data_loss and not given_up) or e.end <= position or e.end > end:
                    raise
                position = e.end

    def resolve(self, spec: str | dict[str, int], names: list[str], *, ending: bool) -> Offsets:
        """Offsets for earliest / latest / a JSON map (segments left out of the map: earliest, or latest when ending).

        An offset from the map must be where a frame starts: read from anywhere else, the bytes of a
        frame's middle would decode as garbage events. One below the segment's start is left to
        `check_start` (failOnDataLoss): its bytes are gone, nothing can tell where frames were.
        """
        option = OFFSET_OPTIONS["endingoffsets" if ending else "startingoffsets"]
        out: Offsets = {}
        for name in names:
            lo, hi, _ = self.access.bounds(name)
            if isinstance(spec, dict):  # HUB/SEGMENT, else SEGMENT (on every hub)
                value = spec.get(name, spec.get(split_key(name)[1], LATEST if ending else EARLIEST))
            else:
                value = EARLIEST if spec == "earliest" else LATEST
            if value == EARLIEST:
                out[name] = lo
            elif value == LATEST:
                out[name] = self.complete_end(name, lo)
            else:
                hub, segment = split_key(name)
                if value > hi:
                    raise SourceOptionError(f"option {option}: offset {value} of segment {segment!r} is beyond its "
                                            f"end {hi} (hub {hub})")
                if value >= lo and not self.access.could_start_frame(name, value):
                    raise SourceOptionError(f"option {option}: offset {value} of segment {segment!r} is not where a "
                                            f"frame starts (hub {hub}; use an offset column value, {EARLIEST} or "
                                            f"{LATEST})")
                out[name] = value
        return _sorted(out)

    def check_start(self, name: str, start: int) -> int:
        """`start`, or the segment's start when retention removed the bytes below it and data loss is allowed."""
        lo, _, _ = self.access.bounds(name)
        if start < lo:
            if self.fail_on_data_loss:
                raise OffsetTruncated(name, start, lo)
            return lo
        return start

    def keyed(self, offsets: Offsets) -> Offsets:
        """Offsets with HUB/SEGMENT keys; a checkpoint from before hub identities (SEGMENT keys) is one
        hub's, and resumes when the source reads one hub."""
        bare = sorted(key for key in offsets if "/" not in key)
        if not bare:
            return offsets
        hubs = sorted(self.access.hubs)
        if len(hubs) != 1:
            raise SourceOptionError(f"offsets keyed by segment alone ({', '.join(bare)}: a checkpoint from before "
                                    f"hub identities) cannot say which of {len(hubs)} hubs they belong to; read "
                                    "that one hub, or start a new checkpoint")
        return _sorted({key if "/" in key else hub_key(hubs[0], key): value for key, value in offsets.items()})

    def _range(self, name: str, start: int, end: int) -> SegmentRange:
        return SegmentRange(name, start, end, self.access.location(split_key(name)[0]))

    def partition_limit(self, total: int) -> int:
        """The most bytes a partition reads, when the ranges to read hold `total` bytes: partitionBytes; else
        the total over the session's cores (every core gets a share, and no more partitions than that: each
        costs Spark and its Python worker 30-45 ms of CPU), at least 4 MiB and at most 128 MiB; else 32 MiB."""
        if self.partition_bytes is not None:
            return self.partition_bytes
        if not self.parallelism:
            return DEFAULT_PARTITION_BYTES
        return min(MAX_PARTITION_BYTES, max(MIN_PARTITION_BYTES, -(-total // self.parallelism)))

    def split(self, name: str, start: int, end: int, limit: int) -> list[SegmentRange]:
        """[start, end) cut on frame boundaries into the fewest ranges of at most about `limit` bytes, of about
        equal size.

        Equal, not `limit` each and a rest: a last range of a fraction of the others ran alone at the end of
        the read while the other cores had nothing left to do. Each cut is the end of the first event past its
        share, found by walking frame headers from the last frame start known before it (a chunk's base, in a
        data directory), not from `start`: the planner's walk of every header was a serial 25-30 ms a query.
        """
        if end <= start:
            return []
        if end - start <= limit:
            return [self._range(name, start, end)]
        count = -(-(end - start) // limit)
        known = self.access.known_frame_starts(name)
        ranges: list[SegmentRange] = []
        cut = start
        walk: Iterator[tuple[int, int, int]] | None = None  # goes on from the last cut, unless a known start is nearer
        try:
            for k in range(1, count):
                share = start + (end - start) * k // count
                anchor = max((at for at in known if cut < at <= share), default=None)
                if walk is None or anchor is not None:
                    _close(walk)
                    walk = iter(self.access.frame_headers(name, cut if anchor is None else anchor, end))
                for offset, frame_type, length in walk:
                    stop = offset + frames.HEADER_SIZE + length
                    # Never right after one of the store's records: it goes with the frames after it (_advance).
                    if not _is_record(frame_type) and stop >= share:
                        break
                else:
                    break  # no event ends past the share: what is left is the last range
                if stop < end:
                    ranges.append(self._range(name, cut, stop))
                    cut = stop
        finally:
            _close(walk)  # over the network: its reads still to come are not waited for (ServerSegments)
        ranges.append(self._range(name, cut, end))
        return ranges

    def ranges(self, start: Offsets, end: Offsets) -> list[SegmentRange]:
        bounds = {name: (start.get(name, end[name]), end[name]) for name in sorted(end)}
        limit = self.partition_limit(sum(max(0, hi - lo) for lo, hi in bounds.values()))
        out: list[SegmentRange] = []
        for name, (lo, hi) in bounds.items():
            out.extend(self.split(name, lo, hi, limit))
        return out


_imports_frozen = False


def freeze_worker_imports() -> None:
    """Move what a Python worker holds before its first read (the modules of pyspark, pyarrow and logport:
    some 50,000 objects) out of the garbage collector's sight, once per process (gc.freeze).

    Spark's daemon runs gc.collect() in a reused worker after every task, and each full collection walked
    all of them again: 11-60 ms a task, 12% of the workers' profile samples on the bench's reads. They live as long
    as the process; what a task allocates after this is collected as before.
    """
    global _imports_frozen
    if not _imports_frozen and TaskContext.get() is not None:  # in a Spark task, not a test or a driver
        gc.collect()
        gc.freeze()
        _imports_frozen = True


def read_range(options: dict[str, str], partition: SegmentRange) -> Iterator[pa.RecordBatch]:
    """The rows of one partition (runs in a task: opens its own access, to the partition's hub only)."""
    freeze_worker_imports()
    hub, segment = split_key(partition.segment)
    access = open_hub(partition.location, hub, options)
    try:
        rows = _int_option(options, "rowsperbatch", ROWS_PER_BATCH) or ROWS_PER_BATCH
        frames_in_range = _frames_past_corruption(access, segment, partition, options.get("failondataloss", "true"))
        yield from frames_to_batches(segment, frames_in_range, rows, Layout.from_options(options), hub=hub)
    finally:
        access.close()


def _frames_past_corruption(access: SegmentAccess, segment: str, partition: SegmentRange,
                            fail_on_data_loss: str) -> Iterator[tuple[int, int, bytes | memoryview]]:
    """The partition's frames; a corrupt range (format v2's checksums) fails the task, or, with
    failOnDataLoss=false, is skipped with a warning: it ends on a commit group's boundary, a frame's. A range
    given up (`logport verify --repair`) is skipped with a warning either way."""
    start = partition.start
    while True:
        try:
            for frame in access.iter_frames(segment, start, partition.end):
                start = frame[0] + 8 + len(frame[2])
                yield frame
            return
        except DataGivenUp as e:  # an operator gave the range up (`logport verify --repair`): always skipped
            if e.end <= start:
                raise
            log.warning("skipping data given up: %s", e)
            start = e.end
        except CorruptData as e:
            if fail_on_data_loss.lower() != "false" or e.end <= start:
                raise
            log.warning("skipping corrupt data (failOnDataLoss=false): %s", e)
            start = e.end


class LogportBatchReader(DataSourceReader):
    def __init__(self, options: dict[str, str], parallelism: int | None = None) -> None:
        self.options = options
        self.parallelism = parallelism

    def partitions(self) -> list[SegmentRange]:  # type: ignore[override]
        planner = SegmentPlanner(self.options, self.parallelism)
        try:
            names = planner.segments()
            start = planner.resolve(_offset_spec(self.options, "startingoffsets", "earliest"), names, ending=False)
            end = planner.resolve(_offset_spec(self.options, "endingoffsets", "latest"), names, ending=True)
            for name in names:
                start[name] = planner.check_start(name, start[name])
            return planner.ranges(start, end)
        finally:
            planner.close()

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        if not isinstance(partition, SegmentRange):  # Spark reads one empty partition when there are none
            return iter(())
        return read_range(self.options, partition)


class LogportStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches of whole frames; maxBytesPerTrigger / maxRowsPerTrigger bound each one."""

    def __init__(self, options: dict[str, str], parallelism: int | None = None) -> None:
        self.options = options
        self.planner = SegmentPlanner(options, parallelism)
        self.max_bytes = _int_option(options, "maxbytespertrigger", None)
        self.max_rows = _int_option(options, "maxrowspertrigger", None)
        self.target: Offsets | None = None  # Trigger.AvailableNow: never read past these

    def initialOffset(self) -> dict:  # type: ignore[type-arg]
        spec = _offset_spec(self.options, "startingoffsets", "earliest")
        return self.planner.resolve(spec, self.planner.segments(), ending=False)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.max_bytes is not None:
            return ReadMaxBytes(self.max_bytes)
        if self.max_rows is not None:
            return ReadMaxRows(self.max_rows)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        names = self.planner.segments()
        self.target = {name: self.planner.complete_end(name, self.planner.access.bounds(name)[0]) for name in names}

    def _available(self, start: Offsets) -> tuple[Offsets, Offsets]:
        """(from, limit) per segment: where each segment resumes and the end of its whole frames."""
        names = self.planner.segments()
        resume: Offsets = {}
        until: Offsets = {}
        for name in names:
            if self.target is not None and name not in self.target:
                continue
            lo, hi, _ = self.planner.access.bounds(name)
            if name not in start:
                # A segment seen for the first time enters the offsets at its start, with no data
                # yet, so every batch's range is fixed by the offsets alone (replayable).
                resume[name] = until[name] = lo
                continue
            resume[name] = self.planner.check_start(name, start[name])
            if self.target is not None:
                hi = min(hi, self.target[name])
            until[name] = max(resume[name], hi)
        return resume, until

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:  # type: ignore[type-arg]
        start = self.planner.keyed(start)
        resume, until = self._available(start)
        end: Offsets = dict(start)
        end.update(resume)
        budget: int | None = None
        by_rows = False
        if isinstance(limit, ReadMaxBytes):
            budget = limit.max_bytes
        elif isinstance(limit, ReadMaxRows):
            budget, by_rows = limit.max_rows, True
        names = sorted(resume)
        taken_total = 0
        for i, name in enumerate(names):
            # An even share of what is left, so one busy segment cannot starve the others.
            share = None if budget is None else (budget - taken_total) // (len(names) - i)
            end[name], taken = self._advance(name, resume[name], until[name], share, by_rows)
            taken_total += taken
        if budget is not None and taken_total == 0:
            # Not even one frame fitted: admit one anyway, or the query would never move.
            for name in names:
                end[name], taken = self._advance(name, resume[name], until[name], None, by_rows, max_frames=1)
                if end[name] > resume[name]:
                    break
        return _sorted(end)

    def _advance(self, name: str, start: int, limit: int, share: int | None, by_rows: bool,
                 max_frames: int | None = None) -> tuple[int, int]:
        """(new offset, bytes or rows admitted) from `start`: whole frames below `limit`, at most `share`,
        at most `max_frames` events.

        The store's records (format v2's chunk header and commit frames, writer records and tables) go
        with the event after them: the offset never ends right after one, where a batch would hold a
        record and none of the rows it heads (with `max_frames` 1, only a commit frame), and its range
        would end inside the commit group the next batch reads. Records the walk ends on at `limit` are
        taken when everything before them was.
        """
        if limit <= start:
            return start, 0
        position, taken, count = start, 0, 0  # after the last event admitted
        ahead, ahead_taken = start, 0  # and after the records that follow it, admitted with the next event
        for offset, frame_type, size, cost in self._frame_costs(name, start, limit, by_rows):
            record = _is_record(frame_type)
            if (share is not None and ahead_taken + cost > share) or (not record and count == max_frames):
                break
            ahead, ahead_taken = offset + size, ahead_taken + cost
            if not record:
                position, taken, count = ahead, ahead_taken, count + 1
        else:
            position, taken = ahead, ahead_taken
        return position, taken

    def _frame_costs(self, name: str, start: int, limit: int, by_rows: bool) -> Iterator[tuple[int, int, int, int]]:
        """(offset, type, size, cost) of each whole frame in [start, limit); its cost in rows (a record's: 0)
        or in bytes."""
        if by_rows:
            for offset, frame_type, body in self.planner.access.iter_frames(name, start, limit):
                rows = count_events(body) if frame_type == frames.EVENT else 0
                yield offset, frame_type, frames.HEADER_SIZE + len(body), rows
        else:
            for offset, frame_type, length in self.planner.access.frame_headers(name, start, limit):
                size = frames.HEADER_SIZE + length
                yield offset, frame_type, size, size

    def reportLatestOffset(self) -> dict | None:  # type: ignore[type-arg]
        names = self.planner.segments()
        return _sorted({name: self.planner.access.bounds(name)[1] for name in names})

    def partitions(self, start: dict, end: dict) -> list[SegmentRange]:  # type: ignore[type-arg, override]
        # Retention may have removed bytes below a checkpointed start since: fail, or skip them.
        start, end = self.planner.keyed(start), self.planner.keyed(end)
        resume = {name: self.planner.check_start(name, value) for name, value in start.items() if name in end}
        return self.planner.ranges(resume, end)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        if not isinstance(partition, SegmentRange):  # Spark reads one empty partition when there are none
            return iter(())
        return read_range(self.options, partition)

    def commit(self, end: dict) -> None:  # type: ignore[type-arg]
        pass  # the hub keeps nothing per reader: the position lives only in Spark's checkpoint

    def stop(self) -> None:
        self.planner.close()


class LogportDataSource(DataSource):
    """`spark.read.format("logport")` / `spark.readStream.format("logport")`; see README "Spark"."""

    parallelism: int | None = None  # the session's default parallelism, when registered by register()

    @classmethod
    def name(cls) -> str:
        return "logport"

    def schema(self) -> str:
        return Layout.from_options({key.lower(): value for key, value in self.options.items()}).spark_schema()

    def _options(self) -> dict[str, Any]:
        # Spark hands options over case-insensitively (lower-cased keys): look them up in lower case.
        options = {key.lower(): value for key, value in self.options.items()}
        open_segments(options).close()  # fail at plan time on a missing or malformed path/server
        return options

    def reader(self, schema: StructType) -> DataSourceReader:
        return LogportBatchReader(self._options(), self.parallelism)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return LogportStreamReader(self._options(), self.parallelism)


def session_data_source(parallelism: int) -> type[LogportDataSource]:
    """LogportDataSource for a session of `parallelism` cores (SparkContext.defaultParallelism), to partition
    reads by: Spark runs a source's planning in a Python worker of its own, which sees only the registered
    class and the read's options. A class made here is pickled with its attributes (cloudpickle pickles a
    class that is not importable by value), so the planner gets the number with it."""
    return type("SessionLogportDataSource", (LogportDataSource,), {
        "__module__": __name__, "__doc__": LogportDataSource.__doc__, "parallelism": parallelism})
