"""Format v2: every reader hands out only what was stored, or says which range is corrupt; a data
directory written by format v1 opens, reads and takes appends; `logport verify` reports what it finds."""

from __future__ import annotations

import asyncio
import json
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from logport.batch import decode_batch
from logport.config import StoreConfig
from logport.errors import CorruptData
from logport.store import SegmentStore, WriterCondition, frames, marks
from logport.store.files import SEGMENTS_DIR, chunk_path, list_chunk_bases
from logport.store.groups import COMMIT_SIZE, VERSION, walk_chunk
from logport.store.reader import DirectoryReader
from logport.store.verify import verify_segment
from tests.conftest import REPO
from tests.store import filled_store
from tests.store.filled_store import SEGMENTS, WRITER

FIXTURE_V1 = Path(__file__).parent / "fixtures" / "v1-data"


def events(data_dir: Path, segment: str) -> list[tuple[int, bytes]]:
    return [(offset, bytes(body)) for _, offset, body in DirectoryReader(data_dir).follow(segment)]


async def store_events(store: SegmentStore, segment: str, out: list[tuple[int, bytes]] | None = None
                       ) -> list[tuple[int, bytes]]:
    """Every Event frame of a segment through the store's own reads (into `out`, which keeps what was read
    before an error)."""
    out = [] if out is None else out
    info = store.info(segment)
    offset = info.start_offset
    while offset < info.end_offset:
        result = await store.read_frames(segment, offset, 4096)
        for frame_offset, frame_type, body in frames.iter_frames(result.data, offset):
            if frame_type == frames.EVENT:
                out.append((frame_offset, bytes(body)))
        offset = result.next_offset
    return out


# --- a store holding every protocol's data, damaged every way below its recovery point ---


@dataclass(frozen=True)
class Template:
    """A filled data directory: its events per segment, and each segment's recovery point (the end of its
    live mark, store/marks.py) with the base of the chunk it lies in."""

    data_dir: Path
    events: dict[str, list[tuple[int, bytes]]]
    points: dict[str, tuple[int, int]]
    ends: dict[str, int]


def _template(data_dir: Path) -> Template:
    points = {}
    ends = {}
    for segment in SEGMENTS:
        seg_dir = data_dir / SEGMENTS_DIR / segment
        point = marks.load(seg_dir).recovery_point(list_chunk_bases(seg_dir)[0])
        assert point is not None
        points[segment] = (point.base, point.end)
        ends[segment] = DirectoryReader(data_dir).bounds(segment)[1]
    return Template(data_dir, {s: events(data_dir, s) for s in SEGMENTS}, points, ends)


@pytest.fixture(scope="module", params=["clean stop", "SIGKILL"])
def template(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Template:
    data_dir = tmp_path_factory.mktemp("v2") / "data"
    if request.param == "clean stop":
        async def fill_and_stop() -> None:
            store = await SegmentStore.open(filled_store.config(str(data_dir)))
            try:
                await filled_store.fill(store)
            finally:
                await store.close()

        asyncio.run(fill_and_stop())
        made = _template(data_dir)
        assert made.points == {s: (list_chunk_bases(data_dir / SEGMENTS_DIR / s)[-1], made.ends[s]) for s in SEGMENTS}
        return made
    child = subprocess.Popen([sys.executable, "-m", "tests.store.filled_store", str(data_dir)], cwd=REPO,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert child.stdout is not None and child.stdout.readline() == b"FILLED\n", child.stderr
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    made = _template(data_dir)
    assert any(made.points[s][1] < made.ends[s] for s in SEGMENTS)  # groups above the recovery point: a crash's
    return made


def chunk_files(data_dir: Path) -> list[Path]:
    out = []
    for segment in SEGMENTS:
        seg_dir = data_dir / SEGMENTS_DIR / segment
        out += [chunk_path(seg_dir, base) for base in list_chunk_bases(seg_dir)]
    return out


def test_the_template_holds_several_v2_chunks_per_segment(template: Template) -> None:
    for segment in SEGMENTS:
        seg_dir = template.data_dir / SEGMENTS_DIR / segment
        bases = list_chunk_bases(seg_dir)
        assert len(bases) >= 2, segment
        for base, nxt in zip(bases, bases[1:] + [None], strict=True):
            data = chunk_path(seg_dir, base).read_bytes()
            layout = walk_chunk(data, base)
            assert layout.version == VERSION and not layout.corrupt
            if nxt is not None:
                assert layout.end == nxt  # a chunk's data ends where the next starts, whatever the file's size


def _damage(path: Path, position: int, replacement: bytes | None, bit: int) -> None:
    data = bytearray(path.read_bytes())
    if replacement is None:
        data[position] ^= 1 << bit
    else:
        data[position : position + len(replacement)] = replacement
        del data[len(path.read_bytes()) :]
    path.write_bytes(bytes(data))


@dataclass(frozen=True)
class Damaged:
    data_dir: Path
    path: Path
    segment: str
    start: int  # the segment offsets whose bytes changed (none: the replacement was what was there)
    end: int


def damaged_copy(template: Template, tmp: Path, hit: tuple[int, int, bytes | None, int]) -> Damaged:
    """A copy of the template with one chunk file damaged as `hit` says, at a position below its segment's
    recovery point."""
    data_dir = tmp / "data"
    shutil.copytree(template.data_dir, data_dir)
    files = chunk_files(data_dir)
    which, where, replacement, bit = hit
    path = files[which % len(files)]
    base = int(path.stem)
    point_base, point = template.points[path.parent.name]
    below = point - base if base == point_base else path.stat().st_size
    position = where % below
    before = path.read_bytes()
    _damage(path, position, replacement, bit)
    after = path.read_bytes()
    changed = [i for i in range(len(before)) if before[i] != after[i]]
    start, end = (base + changed[0], base + changed[-1] + 1) if changed else (0, 0)
    return Damaged(data_dir, path, path.parent.name, start, end)


damage = st.tuples(st.integers(0, 10**6), st.integers(0, 10**6),
                   st.one_of(st.none(), st.binary(min_size=1, max_size=64), st.integers(1, 64).map(bytes)),
                   st.integers(0, 7))


def _check(template: Template, got: list[tuple[int, bytes]], error: CorruptData | None, segment: str,
           damaged: Damaged) -> None:
    """Never a changed event; an event missing only inside a range reported as corrupt; damage below the
    recovery point always reported. Above it (a crash's last groups, which damage reaching past the point may
    hit) an acknowledged group that fails is a torn write to any reader: cut, the remaining window."""
    expected = dict(template.events[segment])
    for offset, body in got:
        assert expected.get(offset) == body, f"{segment}: a changed event at {offset}"
    hit = damaged.segment == segment and damaged.end > damaged.start
    if hit:
        assert error is not None, f"{segment}: damage at {damaged.start}..{damaged.end} below the recovery point " \
                                  f"{template.points[segment][1]} not reported"
    missing = [offset for offset, _ in template.events[segment] if offset not in dict(got)]
    if not missing:
        return
    assert error is not None, (segment, missing)
    assert error.name == segment and error.start <= min(missing) and str(error.path).endswith(".log")


def _read_directory(data_dir: Path, name: str) -> tuple[list[tuple[int, bytes]], CorruptData | None]:
    got: list[tuple[int, bytes]] = []
    try:
        for _, offset, body in DirectoryReader(data_dir).follow(name):
            got.append((offset, bytes(body)))
    except CorruptData as e:
        return got, e
    return got, None


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(damage)
def test_a_directory_reader_and_verify_report_any_damage_below_the_recovery_point(
        template: Template, hit: tuple[int, int, bytes | None, int]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        damaged = damaged_copy(template, Path(tmp), hit)
        for name in SEGMENTS:
            got, error = _read_directory(damaged.data_dir, name)
            _check(template, got, error, name, damaged)
            report = verify_segment(damaged.data_dir, name)
            assert bool(report.bad) == (name == damaged.segment and damaged.end > damaged.start), (name, report.bad)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(damage)
def test_the_hub_starts_serves_the_rest_and_cuts_nothing_below_the_recovery_point(
        template: Template, hit: tuple[int, int, bytes | None, int]) -> None:
    """The store opens the damaged directory, serves what is sound, keeps the damaged range (quarantined: still
    reported after appends and another restart), and its exactly-once state takes nothing from the range."""
    with tempfile.TemporaryDirectory() as tmp:
        damaged = damaged_copy(template, Path(tmp), hit)
        config = filled_store.config(str(damaged.data_dir))

        async def open_read_append() -> None:
            store = await SegmentStore.open(config)
            try:
                for name in SEGMENTS:
                    got: list[tuple[int, bytes]] = []
                    error = None
                    try:
                        await store_events(store, name, got)
                    except CorruptData as e:
                        error = e
                    _check(template, [g for g in got if g[1] != b"after the damage"], error, name, damaged)
                    assert store.info(name).end_offset >= template.points[name][1]  # nothing cut below the point
                    if name != damaged.segment:
                        assert store.info(name).end_offset == template.ends[name]
                await store.append(damaged.segment, [b"after the damage"])
            finally:
                await store.close()

        asyncio.run(open_read_append())
        for _ in range(2):  # reopened (after appends) the range is still there, and reported
            asyncio.run(open_read_append())
            got, error = _read_directory(damaged.data_dir, damaged.segment)
            _check(template, [g for g in got if g[1] != b"after the damage"], error, damaged.segment, damaged)
            assert error is not None or got[-1][1] == b"after the damage"
            assert bool(verify_segment(damaged.data_dir, damaged.segment).bad) == (damaged.end > damaged.start)


def test_verify_names_a_flipped_bit_and_exits_1(template: Template, tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    shutil.copytree(template.data_dir, data_dir)
    seg_dir = data_dir / SEGMENTS_DIR / "forward"
    base = list_chunk_bases(seg_dir)[0]
    path = chunk_path(seg_dir, base)
    layout = walk_chunk(path.read_bytes(), base)
    target = layout.groups[1] + COMMIT_SIZE + 20  # inside the second group's data
    _damage(path, target - base, None, 3)
    run = subprocess.run([sys.executable, "-m", "logport.cli", "verify", "--data-dir", str(data_dir), "--json"],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 1, run.stderr
    reports = {r["segment"]: r for r in map(json.loads, run.stdout.splitlines())}
    assert set(reports) == set(SEGMENTS)
    (bad,) = reports["forward"]["bad"]
    assert (bad["start"], bad["end"], bad["file"], bad["reason"]) == (
        layout.groups[1], layout.groups[2], str(path), "checksum mismatch")
    assert all(not r["bad"] for name, r in reports.items() if name != "forward")
    cat = subprocess.run([sys.executable, "-m", "logport.cli", "cat", "--data-dir", str(data_dir), "forward"],
                         capture_output=True, text=True, timeout=60)
    assert cat.returncode == 1
    assert f"bytes {layout.groups[1]}..{layout.groups[2]} of {path} are corrupt" in cat.stderr
    assert len(cat.stdout.splitlines()) == 1  # the first group's event, then the error


def test_verify_passes_a_sound_directory(template: Template) -> None:
    run = subprocess.run([sys.executable, "-m", "logport.cli", "verify", "--data-dir", str(template.data_dir)],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr
    assert sorted(line.split(":")[0] for line in run.stdout.splitlines()) == sorted(SEGMENTS)
    assert all(": ok: " in line for line in run.stdout.splitlines())


def test_verify_refuses_a_directory_that_is_not_a_data_directory(tmp_path: Path) -> None:
    (tmp_path / "nope").mkdir()
    run = subprocess.run([sys.executable, "-m", "logport.cli", "verify", "--data-dir", str(tmp_path / "nope")],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 1 and "not a logport data directory" in run.stderr


# --- upgrade from format v1 ---


def test_a_v1_data_directory_opens_reads_and_takes_appends(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    shutil.copytree(FIXTURE_V1, data_dir)
    forward = events(data_dir, "forward")
    assert [decode_batch(body).option["chunk"] for _, body in forward] == [f"c{i}" for i in range(12)]
    seg = events(data_dir, "seg")
    assert [body for _, body in seg] == [b"line %d %s" % (i, x) for i in range(20) for x in (b"a", b"b")]
    verify = subprocess.run([sys.executable, "-m", "logport.cli", "verify", "--data-dir", str(data_dir)],
                            capture_output=True, text=True, timeout=60)
    assert verify.returncode == 0 and "written before format v2 (no checksums)" in verify.stdout

    async def upgrade() -> None:
        store = await SegmentStore.open(StoreConfig(data_dir=str(data_dir), chunk_size=600))
        try:
            assert await store_events(store, "forward") == forward  # old chunks read as they are
            assert await store_events(store, "seg") == seg
            assert store.writer_offset("seg", WRITER) == 660  # the v1 writer state carries over
            n = 2 * frames.HEADER_SIZE + len(b"line 19 a") + len(b"line 19 b")
            retry = await store.append("seg", [b"line 19 a", b"line 19 b"], writer=WriterCondition(WRITER, 660, 660 - n))
            assert retry.duplicate
            more = await store.append("seg", [b"line 20 a", b"line 20 b"], writer=WriterCondition(WRITER, 660 + n, 660))
            assert not more.duplicate
            await store.append("forward", [b"after the upgrade"])
        finally:
            await store.close()

    asyncio.run(upgrade())
    for segment in ("forward", "seg"):
        seg_dir = data_dir / SEGMENTS_DIR / segment
        bases = list_chunk_bases(seg_dir)
        versions = [walk_chunk(chunk_path(seg_dir, b).read_bytes(), b).version for b in bases]
        assert versions[-1] == VERSION and 1 in versions  # new chunks in v2, old ones kept as they were
    assert [body for _, body in events(data_dir, "seg")][-2:] == [b"line 20 a", b"line 20 b"]
    assert events(data_dir, "forward")[:-1] == forward and events(data_dir, "forward")[-1][1] == b"after the upgrade"

    async def reopen() -> None:
        store = await SegmentStore.open(StoreConfig(data_dir=str(data_dir), chunk_size=600))
        try:
            assert store.writer_offset("seg", WRITER) == 660 + 2 * frames.HEADER_SIZE + 18
            assert len(await store_events(store, "seg")) == 42
        finally:
            await store.close()

    asyncio.run(reopen())
