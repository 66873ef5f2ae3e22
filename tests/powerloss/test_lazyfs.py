"""The lazy file system keeps what was fsynced and loses the rest, as its model says (model.py)."""

from __future__ import annotations

import contextlib
import errno
import os
import random
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from logport.store.files import fsync_dir

from .lazyfs import LazyFS, fuse_skip_reason, is_mounted
from .overlay import Mode, Op, Overlay, Truncate, Write, crash_ops


@pytest.fixture
def lazy(tmp_path: Path) -> Iterator[LazyFS]:
    reason = fuse_skip_reason()
    if reason:
        pytest.skip(reason)
    with LazyFS(tmp_path / "disk", tmp_path / "mnt", seed=1) as fs:
        yield fs




def put(path: Path, data: bytes, *, sync: bool = True) -> None:
    """Write a whole file; with `sync`, fsync it and its directory."""
    fd = os.open(path, os.O_CREAT | os.O_TRUNC | os.O_WRONLY, 0o644)
    try:
        os.write(fd, data)
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)
    if sync:
        fsync_dir(path.parent)


def pwrite(path: Path, data: bytes, offset: int, *, datasync: bool = False) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.pwrite(fd, data, offset)
        if datasync:
            os.fdatasync(fd)
    finally:
        os.close(fd)


def replay(base: bytes, ops: list[Op]) -> bytes:
    """What `ops` make of a file holding `base`: the reference for the overlay and the modes."""
    out = bytearray(base)
    for op in ops:
        if isinstance(op, Write):
            if len(out) < op.offset:
                out += bytes(op.offset - len(out))
            out[op.offset:op.offset + len(op.data)] = op.data
        else:
            del out[op.size:]
            out += bytes(op.size - len(out))
    return bytes(out)


def random_ops(rng: random.Random, size: int, count: int, truncates: bool = True) -> list[Op]:
    """Writes of nonzero bytes (so a zero is a hole), now and then a truncate."""
    ops: list[Op] = []
    for _ in range(count):
        if truncates and rng.random() < 0.15:
            ops.append(Truncate(rng.randrange(2 * size)))
        else:
            data = bytes(rng.randrange(1, 256) for _ in range(rng.randrange(1, size)))
            ops.append(Write(rng.randrange(2 * size), data))
    return ops


# --- the overlay alone (no FUSE) ---


def test_overlay_reads_its_latest_writes_and_syncs_them(tmp_path: Path) -> None:
    rng = random.Random(5)
    for trial in range(40):
        base = bytes(rng.randrange(1, 256) for _ in range(rng.randrange(0, 9000)))
        path = tmp_path / f"f{trial}"
        path.write_bytes(base)
        fd = os.open(path, os.O_RDWR)
        try:
            overlay = Overlay(len(base))
            ops = random_ops(rng, 6000, 12)
            for i, op in enumerate(ops):
                if isinstance(op, Write):
                    overlay.write(fd, op.offset, op.data)
                else:
                    overlay.truncate(op.size)
                want = replay(base, ops[:i + 1])
                assert overlay.size == len(want)
                at = rng.randrange(len(want) + 1)
                assert overlay.read(fd, at, 5000) == want[at:at + 5000]
                assert overlay.read(fd, 0, len(want) + 10) == want
            assert path.read_bytes() == base  # nothing reached the file
            overlay.sync(fd)
            assert path.read_bytes() == want
            assert overlay.read(fd, 0, len(want)) == want
        finally:
            os.close(fd)


def test_torn_is_a_prefix_in_write_order_cut_at_a_byte() -> None:
    rng = random.Random(3)
    ops = random_ops(rng, 50, 8, truncates=False)
    states = {replay(b"", ops[:k]) for k in range(len(ops) + 1)}
    for k, op in enumerate(ops):
        assert isinstance(op, Write)
        states |= {replay(b"", [*ops[:k], Write(op.offset, op.data[:n])]) for n in range(len(op.data))}
    seen = set()
    for seed in range(300):
        got = replay(b"", crash_ops(ops, "torn", random.Random(seed)))
        assert got in states
        seen.add(got)
    assert len(seen) > 50  # cut at many places, not only between writes


def test_subset_pieces_are_block_aligned() -> None:
    ops: list[Op] = [Write(1000, b"\1" * 9000)]
    kept = set()
    for seed in range(20):
        for p in crash_ops(ops, "subset", random.Random(seed), block=4096):
            assert isinstance(p, Write)
            assert p.offset // 4096 == (p.offset + len(p.data) - 1) // 4096
            kept.add((p.offset, len(p.data)))
    assert kept == {(1000, 3096), (4096, 4096), (8192, 1808)}
    assert crash_ops(ops, "drop", random.Random(1)) == []


# --- data: kept when fsynced, lost when not ---


def test_unsynced_write_is_visible_then_lost(lazy: LazyFS) -> None:
    f = lazy.mountpoint / "f"
    put(f, b"old contents")
    pwrite(f, b"NEW", 0)
    assert f.read_bytes() == b"NEW contents"  # read through the mount: the page cache
    assert (lazy.backing / "f").read_bytes() == b"old contents"  # not on the disk
    assert lazy.stats()["pending_bytes"] == 3
    report = lazy.power_loss("drop")
    assert report["files"] == {"/f": {"unsynced_ops": 1, "applied_ops": 0, "applied_bytes": 0}}
    assert f.read_bytes() == b"old contents"
    assert lazy.stats()["pending_bytes"] == 0


def test_fdatasync_and_fsync_both_keep_data(lazy: LazyFS) -> None:
    f, g = lazy.mountpoint / "f", lazy.mountpoint / "g"
    put(f, b"0123456789")
    put(g, b"0123456789")
    pwrite(f, b"AB", 2, datasync=True)
    fd = os.open(g, os.O_WRONLY)
    os.pwritev(fd, [b"C", b"D"], 8)
    os.fsync(fd)
    os.close(fd)
    lazy.power_loss("drop")
    assert f.read_bytes() == b"01AB456789"
    assert g.read_bytes() == b"01234567CD"
    stats = lazy.stats()
    assert stats["fdatasyncs"] == 1 and stats["fsyncs"] == 3 and stats["power_losses"] == 1


def test_a_write_through_an_o_dsync_descriptor_is_durable_when_it_returns(lazy: LazyFS) -> None:
    f, g = lazy.mountpoint / "f", lazy.mountpoint / "g"
    put(f, b"0123456789")
    put(g, b"0123456789")
    for path, flags in ((f, os.O_DSYNC), (g, 0)):
        fd = os.open(path, os.O_WRONLY | flags)
        os.pwrite(fd, b"XY", 4)
        os.close(fd)
    lazy.power_loss("drop")
    assert f.read_bytes() == b"0123XY6789"  # the store's direct commits rely on this
    assert g.read_bytes() == b"0123456789"
    assert lazy.stats()["sync_writes"] == 1 and lazy.stats()["fdatasyncs"] == 0


@pytest.mark.parametrize("mode", ["drop", "subset", "torn", "reorder"])
def test_an_o_dsync_write_makes_only_itself_durable(lazy: LazyFS, mode: Mode) -> None:
    """Unsynced writes before it stay unsynced (and, kept in part by a power loss, never put older bytes
    over it); one that overlaps it keeps only what it does not cover."""
    f = lazy.mountpoint / "f"
    put(f, bytes(16384))
    for seed in range(8):
        fd = os.open(f, os.O_WRONLY)
        os.pwrite(fd, b"a" * 6000, 1000)  # buffered, under the O_DSYNC write's bytes and past them
        os.pwrite(fd, b"b" * 2000, 12000)  # buffered, elsewhere
        os.close(fd)
        fd = os.open(f, os.O_WRONLY | os.O_DSYNC)
        os.pwrite(fd, b"S" * 3000, 2000)
        os.close(fd)
        assert f.read_bytes()[1000:7000] == b"a" * 1000 + b"S" * 3000 + b"a" * 2000
        lazy.power_loss(mode, seed=seed, block=512 if seed % 2 else 0)
        got = f.read_bytes()
        assert got[2000:5000] == b"S" * 3000, (mode, seed)
        assert set(got[1000:2000]) <= {0, ord("a")} and set(got[5000:7000]) <= {0, ord("a")}
        assert set(got[12000:14000]) <= {0, ord("b")}
        if mode == "drop":
            assert got.count(b"a") == 0 and got.count(b"b") == 0
        put(f, bytes(16384))


def test_close_persists_nothing(lazy: LazyFS) -> None:
    f = lazy.mountpoint / "f"
    put(f, b"")
    with open(f, "ab") as out:
        out.write(b"appended")
        out.flush()
    assert f.read_bytes() == b"appended"
    lazy.power_loss("drop")
    assert f.read_bytes() == b""


def test_truncate_semantics(lazy: LazyFS) -> None:
    f = lazy.mountpoint / "f"
    put(f, b"abcdefghij")
    fd = os.open(f, os.O_RDWR)
    os.ftruncate(fd, 4)
    assert os.fstat(fd).st_size == 4
    os.pwrite(fd, b"XY", 6)  # past the end: a hole of zeros, not the old bytes
    assert f.read_bytes() == b"abcd\0\0XY"
    os.close(fd)
    lazy.power_loss("drop")
    assert f.read_bytes() == b"abcdefghij"  # unsynced truncate undone

    fd = os.open(f, os.O_RDWR)
    os.ftruncate(fd, 3)
    os.ftruncate(fd, 6)  # grown again: zeros, not "def"
    assert os.pread(fd, 10, 0) == b"abc\0\0\0"
    os.fdatasync(fd)
    os.close(fd)
    lazy.power_loss("drop")
    assert f.read_bytes() == b"abc\0\0\0"
    os.truncate(f, 1)  # by path (truncate(2)), then open with O_TRUNC
    assert f.read_bytes() == b"a"
    os.close(os.open(f, os.O_WRONLY | os.O_TRUNC))
    assert f.read_bytes() == b""
    lazy.power_loss("drop")
    assert f.read_bytes() == b"abc\0\0\0"


def test_big_file_reads_back_and_syncs(lazy: LazyFS) -> None:
    f = lazy.mountpoint / "big"
    put(f, b"")
    rng = random.Random(2)
    blob = rng.randbytes(3 << 20)
    fd = os.open(f, os.O_RDWR)
    for at in range(0, len(blob), 100_000):  # unaligned writes
        os.pwrite(fd, blob[at:at + 100_000], at)
    assert os.pread(fd, 1 << 22, 0) == blob
    os.fdatasync(fd)
    os.close(fd)
    lazy.power_loss("drop")
    assert f.read_bytes() == blob


# --- names: kept when their directory is fsynced ---


def test_new_file_needs_its_directory_fsynced(lazy: LazyFS) -> None:
    m = lazy.mountpoint
    put(m / "kept", b"data")  # file and directory fsynced
    put(m / "lost", b"data", sync=False)
    fd = os.open(m / "lost", os.O_WRONLY)
    os.fsync(fd)  # the data is durable, the name is not
    os.close(fd)
    assert sorted(os.listdir(lazy.backing)) == ["kept"]
    lazy.power_loss("drop")
    assert sorted(os.listdir(m)) == ["kept"]
    assert (m / "kept").read_bytes() == b"data"


def test_directory_fsync_before_the_data_fsync(lazy: LazyFS) -> None:
    m = lazy.mountpoint
    fd = os.open(m / "f", os.O_CREAT | os.O_WRONLY, 0o644)
    fsync_dir(m)  # the name first, empty
    os.write(fd, b"later")
    os.fsync(fd)  # then the data, through the same inode
    os.close(fd)
    lazy.power_loss("drop")
    assert (m / "f").read_bytes() == b"later"


def test_rename_durable_with_directory_fsync(lazy: LazyFS) -> None:
    m = lazy.mountpoint
    put(m / "a.tmp", b"new")
    put(m / "a", b"old")
    os.replace(m / "a.tmp", m / "a")
    fsync_dir(m)
    lazy.power_loss("drop")
    assert sorted(os.listdir(m)) == ["a"]
    assert (m / "a").read_bytes() == b"new"


def test_rename_without_directory_fsync_is_undone(lazy: LazyFS) -> None:
    m = lazy.mountpoint
    put(m / "a.tmp", b"new")
    put(m / "a", b"old")
    os.replace(m / "a.tmp", m / "a")
    assert (m / "a").read_bytes() == b"new" and not (m / "a.tmp").exists()
    lazy.power_loss("drop")
    assert sorted(os.listdir(m)) == ["a", "a.tmp"]
    assert (m / "a").read_bytes() == b"old"
    assert (m / "a.tmp").read_bytes() == b"new"


def test_renamed_file_keeps_data_synced_under_its_new_name(lazy: LazyFS) -> None:
    m = lazy.mountpoint
    put(m / "x", b"one")
    os.rename(m / "x", m / "y")
    pwrite(m / "y", b"TWO", 0, datasync=True)  # the inode's data, whatever its name on the disk
    lazy.power_loss("drop")
    assert os.listdir(m) == ["x"]
    assert (m / "x").read_bytes() == b"TWO"


def test_unlink_needs_its_directory_fsynced(lazy: LazyFS) -> None:
    m = lazy.mountpoint
    put(m / "a", b"a")
    put(m / "b", b"b")
    os.unlink(m / "a")
    os.unlink(m / "b")
    assert os.listdir(m) == []
    lazy.power_loss("drop")
    assert sorted(os.listdir(m)) == ["a", "b"]
    os.unlink(m / "a")
    fsync_dir(m)
    lazy.power_loss("drop")
    assert os.listdir(m) == ["b"]


def test_unlinked_open_file_stays_readable(lazy: LazyFS) -> None:
    m = lazy.mountpoint
    put(m / "a", b"contents")
    fd = os.open(m / "a", os.O_RDWR)
    os.unlink(m / "a")
    fsync_dir(m)  # gone from the disk too
    assert not (lazy.backing / "a").exists()
    os.pwrite(fd, b"C", 0)
    os.fsync(fd)
    assert os.pread(fd, 100, 0) == b"Contents"
    os.close(fd)
    lazy.power_loss("drop")
    assert os.listdir(m) == []


def test_mkdir_and_rmdir(lazy: LazyFS) -> None:
    m = lazy.mountpoint
    os.mkdir(m / "c")
    os.makedirs(m / "a" / "b")
    os.mkdir(m / "d")
    put(m / "a" / "b" / "f", b"deep")  # fsyncs b, which commits the mkdirs of b and a ...
    lazy.power_loss("drop")
    assert sorted(os.listdir(m)) == ["a", "c"]  # ... and of c, before a's in their directory
    assert (m / "a" / "b" / "f").read_bytes() == b"deep"
    os.unlink(m / "a" / "b" / "f")
    os.rmdir(m / "a" / "b")
    with pytest.raises(OSError) as e:
        os.rmdir(m / "a" / "missing")
    assert e.value.errno == errno.ENOENT
    fsync_dir(m / "a")
    lazy.power_loss("drop")
    assert os.listdir(m / "a") == []


def test_cross_directory_rename_is_atomic(lazy: LazyFS) -> None:
    m = lazy.mountpoint
    os.mkdir(m / "src")
    os.mkdir(m / "dst")
    put(m / "src" / "f", b"moved")
    fsync_dir(m)
    os.rename(m / "src" / "f", m / "dst" / "g")
    fsync_dir(m / "dst")  # either directory commits both sides
    lazy.power_loss("drop")
    assert os.listdir(m / "src") == [] and os.listdir(m / "dst") == ["g"]
    assert (m / "dst" / "g").read_bytes() == b"moved"


def test_sync_makes_everything_durable(lazy: LazyFS) -> None:
    m = lazy.mountpoint
    os.mkdir(m / "d")
    put(m / "d" / "f", b"x", sync=False)
    lazy.sync()
    assert lazy.stats()["pending_changes"] == 0
    lazy.power_loss("drop")
    assert (m / "d" / "f").read_bytes() == b"x"


def test_namespace_prefix_is_a_state_in_order(lazy: LazyFS) -> None:
    m = lazy.mountpoint
    put(m / "a", b"a")
    steps = [lambda: os.rename(m / "a", m / "b"), lambda: os.mkdir(m / "c"),
             lambda: put(m / "d", b"", sync=False), lambda: os.unlink(m / "b")]
    allowed = [["a"], ["b"], ["b", "c"], ["b", "c", "d"], ["c", "d"]]
    seen = set()
    for seed in range(12):
        for step in steps:
            step()
        lazy.power_loss("drop", seed=seed, namespace="prefix")
        names = sorted(os.listdir(m))
        assert names in allowed
        seen.add(tuple(names))
        for name in names:  # back to the start
            (os.rmdir if name == "c" else os.unlink)(m / name)
        put(m / "a", b"a")
    assert len(seen) > 1


# --- the random modes keep only allowed states ---


def test_subset_and_reorder_keep_old_or_written_bytes(lazy: LazyFS) -> None:
    f = lazy.mountpoint / "f"
    rng = random.Random(9)
    base = bytes(rng.randrange(1, 256) for _ in range(3000))
    for seed in range(24):
        put(f, base)
        ops = random_ops(rng, 2000, 6, truncates=False)
        fd = os.open(f, os.O_WRONLY)
        for op in ops:
            assert isinstance(op, Write)
            os.pwrite(fd, op.data, op.offset)
        os.close(fd)
        mode: Mode = "subset" if seed % 2 else "reorder"
        lazy.power_loss(mode, seed=seed, block=4096 if seed % 4 < 2 else 0)
        got = f.read_bytes()
        assert len(got) <= len(replay(base, ops))
        for i, byte in enumerate(got):
            allowed = {base[i]} if i < len(base) else {0}
            allowed |= {op.data[i - op.offset] for op in ops
                        if isinstance(op, Write) and op.offset <= i < op.offset + len(op.data)}
            assert byte in allowed, (seed, i)


def test_torn_keeps_a_prefix_of_the_writes(lazy: LazyFS) -> None:
    f = lazy.mountpoint / "f"
    put(f, b"")
    records = [bytes([i + 1]) * 512 for i in range(40)]
    lengths = set()
    for seed in range(10):
        fd = os.open(f, os.O_WRONLY)
        os.ftruncate(fd, 0)
        os.fsync(fd)
        for i, rec in enumerate(records):
            os.pwrite(fd, rec, i * 512)
        os.close(fd)
        report = lazy.power_loss("torn", seed=seed)
        got = f.read_bytes()
        assert got == b"".join(records)[:len(got)]
        assert report["files"]["/f"]["applied_bytes"] == len(got)
        lengths.add(len(got))
    assert len(lengths) > 5 and any(n % 512 for n in lengths)  # torn inside a write, too


# --- processes ---

WRITER = textwrap.dedent("""
    import os, sys
    path = sys.argv[1]
    fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o644)
    os.fsync(fd)
    dfd = os.open(os.path.dirname(path), os.O_RDONLY | os.O_DIRECTORY)
    os.fsync(dfd)
    i = 0
    while True:
        os.pwritev(fd, [b"%08d" % i, bytes([i % 255 + 1]) * 92], i * 100)
        i += 1
        if i % 10 == 0:
            os.fdatasync(fd)
            print(i, flush=True)
""")


def expected_records(n: int) -> bytes:
    return b"".join(b"%08d" % i + bytes([i % 255 + 1]) * 92 for i in range(n))


def test_killed_writer_then_power_loss(lazy: LazyFS) -> None:
    path = lazy.mountpoint / "log"
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path)], stdout=subprocess.PIPE)
    assert proc.stdout is not None
    synced = 0
    while synced < 300:
        synced = int(proc.stdout.readline())
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    proc.stdout.close()
    seen = path.read_bytes()  # the process is gone, its writes are not
    assert len(seen) >= synced * 100 and seen == expected_records(len(seen) // 100 + 1)[:len(seen)]
    lazy.power_loss("torn", seed=4)
    got = path.read_bytes()
    assert synced * 100 <= len(got) <= len(seen)
    assert got == seen[:len(got)]
    # the mount goes on: the next run appends and syncs
    fd = os.open(path, os.O_WRONLY)
    os.pwrite(fd, b"next", len(got))
    os.fdatasync(fd)
    os.close(fd)
    lazy.power_loss("drop")
    assert path.read_bytes() == got + b"next"


def test_descriptor_from_before_the_power_loss_is_stale(lazy: LazyFS) -> None:
    put(lazy.mountpoint / "f", b"x")
    fd = os.open(lazy.mountpoint / "f", os.O_RDWR)
    lazy.power_loss("drop")
    with pytest.raises(OSError) as e:
        os.pread(fd, 1, 0)
    assert e.value.errno == errno.EIO
    os.close(fd)
    assert (lazy.mountpoint / "f").read_bytes() == b"x"


def test_unmounts_on_stop(tmp_path: Path) -> None:
    reason = fuse_skip_reason()
    if reason:
        pytest.skip(reason)
    fs = LazyFS(tmp_path / "disk", tmp_path / "mnt")
    with pytest.raises(RuntimeError), fs:
        assert is_mounted(fs.mountpoint)
        fd = os.open(fs.mountpoint / "held", os.O_CREAT | os.O_WRONLY, 0o644)  # still open at stop
        raise RuntimeError("a failing test")
    assert not is_mounted(tmp_path / "mnt")
    with contextlib.suppress(OSError):  # ENOTCONN: its file system is gone (the fd is closed anyway)
        os.close(fd)


def test_stop_unmounts_after_the_file_system_died(tmp_path: Path) -> None:
    reason = fuse_skip_reason()
    if reason:
        pytest.skip(reason)
    with LazyFS(tmp_path / "disk", tmp_path / "mnt") as fs:
        assert fs._proc is not None
        fs._proc.kill()
        fs._proc.wait()
        with pytest.raises(OSError) as e:
            os.listdir(fs.mountpoint)
        assert e.value.errno == errno.ENOTCONN
    assert not is_mounted(tmp_path / "mnt")
