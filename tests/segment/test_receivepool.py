"""The segment listener's pool of append-block receive buffers."""

from __future__ import annotations

import pytest

from logport.servers._receivepool import POOLED_MIN, ReceivePool, capacity

KiB = 1024
MiB = 1024 * KiB


@pytest.mark.parametrize(("n", "cap"), [
    (64 * KiB, 64 * KiB),
    (64 * KiB + 1, 80 * KiB),
    (MiB, MiB),
    (MiB + 8, MiB + 256 * KiB),  # a 1 MiB block of events and its headers: the next quarter
    (1_966_320, 2 * MiB),  # 30 events of 64 KiB with their headers
    (16 * MiB + 8, 20 * MiB),
])
def test_capacity_is_at_most_a_quarter_above(n: int, cap: int) -> None:
    assert capacity(n) == cap
    assert capacity(cap) == cap


def test_a_given_back_buffer_is_taken_again_and_each_take_is_exactly_its_size() -> None:
    pool = ReceivePool(8 * MiB)
    first = pool.take(MiB + 8)
    assert isinstance(first, memoryview) and len(first) == MiB + 8 and not first.readonly
    buf = first.obj
    first[:4] = b"used"
    pool.give(first)
    assert pool.free_bytes == capacity(MiB + 8)
    again = pool.take(MiB + 100)  # another size of the same capacity
    assert again.obj is buf and len(again) == MiB + 100 and pool.free_bytes == 0
    other = pool.take(MiB + 8)
    assert other.obj is not buf  # the pool had no other: a new one


def test_small_blocks_and_a_pool_of_nothing_get_plain_bytearrays() -> None:
    assert type(ReceivePool(MiB).take(POOLED_MIN - 1)) is bytearray
    off = ReceivePool(0)
    view = off.take(MiB)
    assert type(view) is bytearray and len(view) == MiB
    off.give(memoryview(view))
    assert off.free_bytes == 0


@pytest.mark.parametrize("foreign", [
    b"x" * MiB,
    bytearray(MiB),
    memoryview(b"x" * MiB),  # not a bytearray's
    memoryview(bytearray(MiB + 1)),  # not a capacity the pool makes
    memoryview(bytearray(1000)),  # too small to pool
])
def test_what_did_not_come_from_take_is_left_alone(foreign: object) -> None:
    pool = ReceivePool(64 * MiB)
    pool.give(foreign)
    assert pool.free_bytes == 0


def test_it_keeps_no_more_than_its_limit() -> None:
    pool = ReceivePool(3 * MiB)
    views = [pool.take(MiB) for _ in range(5)]
    for view in views:
        pool.give(view)
    assert pool.free_bytes == 3 * MiB
    taken = {id(pool.take(MiB).obj) for _ in range(4)}
    assert {id(v.obj) for v in views[:3]} <= taken  # the three it kept, then a new one


def test_trim_frees_what_was_not_taken_since_the_last_trim() -> None:
    pool = ReceivePool(64 * MiB)
    views = [pool.take(MiB) for _ in range(4)]
    for view in views:
        pool.give(view)
    assert pool.trim() == 0  # given back since the last trim (there was none): not idle yet
    pool.give(pool.take(MiB))  # a busy interval: one taken and given back, three never taken
    assert pool.trim() == 3 * MiB and pool.free_bytes == MiB
    assert pool.take(MiB).obj is views[-1].obj  # the one in use is the one kept
    assert pool.trim() == 0
    pool.give(views[-1][:MiB])
    assert pool.trim() == 0 and pool.free_bytes == MiB  # given back in this interval: kept
    assert pool.trim() == MiB and pool.free_bytes == 0  # then idle for a whole one: freed
