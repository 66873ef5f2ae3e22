"""ui/merge.py against lake/sketch.py: the quantiles of sketches summed per group from Arrow arrays are
sketch.quantile's of sketch.merge's sum, exactly, and counter maps add up key by key."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from logport.lake import sketch
from logport.ui import merge

QS = (0.0, 0.01, 0.5, 0.9, 0.95, 0.99, 1.0)
SKETCHES = pa.list_(pa.map_(pa.int32(), pa.int64()))

# keys as the lake holds them: values <= 0 under ZERO_KEY, the usual few hundred buckets, and now and then keys far
# apart (below ZERO_KEY for values under 1e-282, or huge values), which take the sorted path instead of the table
keys = st.one_of(st.integers(-40, 600), st.just(sketch.ZERO_KEY), st.integers(-40_000, 30_000))  # 1.02 ** 35_800 overflows
maps = st.none() | st.dictionaries(keys, st.integers(1, 10**12), max_size=8)
groups = st.lists(st.lists(maps, max_size=5), max_size=8)


def arrow(lists: list[list[dict[int, int] | None]], type_: pa.DataType = SKETCHES) -> pa.Array:
    return pa.array([[None if m is None else list(m.items()) for m in group] for group in lists], type_)


@given(groups, st.integers(0, 2))
def test_quantiles_are_sketch_quantile_of_the_merged_maps(lists: list[list[dict[int, int] | None]],
                                                          skip: int) -> None:
    array = arrow(lists).slice(min(skip, len(lists)))  # a slice: its offsets do not start at 0
    got = merge.quantiles(array, QS)
    for group, found in zip(lists[min(skip, len(lists)):], got, strict=True):
        merged = sketch.merge(group)
        assert found == [sketch.quantile(merged, q) for q in QS]


@given(groups)
def test_counters_add_up_key_by_key(lists: list[list[dict[int, int] | None]]) -> None:
    assert merge.counters(arrow(lists)) == [sketch.merge(group) for group in lists]


@pytest.mark.parametrize(("lists", "expected"), [
    ([], []),
    ([[]], [[None] * len(QS)]),
    ([[None, {}]], [[None] * len(QS)]),
    # one value <= 0 and one of ~100 ms: the median is the zero bucket's estimate (0), p99 the other's
    ([[{sketch.ZERO_KEY: 1}, {233: 1}]], [[0.0, 0.0, 0.0, sketch.sketch_value(233), sketch.sketch_value(233),
                                           sketch.sketch_value(233), sketch.sketch_value(233)]]),
])
def test_quantiles_of_empty_and_zero_groups(lists: list[Any], expected: list[Any]) -> None:
    assert merge.quantiles(arrow(lists), QS) == expected


def test_counter_maps_with_text_keys() -> None:
    lists = [[{"200": 3, "500": 1}, {"200": 2}], [None]]
    array = pa.array([[None if m is None else list(m.items()) for m in g] for g in lists],
                     pa.list_(pa.map_(pa.string(), pa.int64())))
    assert merge.counters(array) == [{"200": 5, "500": 1}, {}]
