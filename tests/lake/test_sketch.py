"""lake/sketch.py: logjam's 22 buckets and the 1% sketch add up (any split of the data merges to the whole's
buckets), and a merged sketch's quantiles are within RELATIVE_ERROR of the exact nearest-rank quantiles."""

from __future__ import annotations

import math
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from logport.lake import sketch

# request times as logjam sees them: 0 and negatives (a total_time kept negative), sub-millisecond to hours
VALUES = st.lists(st.one_of(st.floats(min_value=1e-3, max_value=1e7, allow_nan=False), st.sampled_from(
    [0.0, -5.0, 1.0, 3.0, 10.0, 3e10, 1e11, 1.02, 1.02**300])), min_size=1, max_size=300)


def hist(values: list[float]) -> dict[int, int]:
    return dict(Counter(sketch.hist_index(v) for v in values if v > 0))


def sk(values: list[float]) -> dict[int, int]:
    return dict(Counter(sketch.sketch_key(v) for v in values))


def nearest_rank(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(1, math.ceil(q * len(ordered))) - 1]


@given(VALUES, st.lists(st.integers(min_value=0, max_value=5)))
def test_any_split_merges_to_the_whole(values: list[float], parts: list[int]) -> None:
    """Rows of minutes, hubs or batches (any split of the values) sum to the buckets of all the values."""
    pieces: list[list[float]] = [[] for _ in range(6)]
    for i, v in enumerate(values):
        pieces[parts[i % len(parts)] if parts else 0].append(v)
    assert sketch.merge(hist(p) for p in pieces) == hist(values)
    assert sketch.merge([*(sk(p) for p in pieces), None]) == sk(values)
    assert sum(sketch.merge(sk(p) for p in pieces).values()) == len(values)


@given(VALUES, st.sampled_from([0.0, 0.5, 0.9, 0.95, 0.99, 1.0]))
def test_merged_quantile_within_the_stated_error(values: list[float], q: float) -> None:
    half = len(values) // 2
    estimate = sketch.quantile(sketch.merge([sk(values[:half]), sk(values[half:])]), q)
    exact = nearest_rank(values, q)
    assert estimate is not None
    if exact <= 0:
        assert estimate == 0
    else:
        assert abs(estimate - exact) <= sketch.RELATIVE_ERROR * exact * (1 + 1e-9), (estimate, exact)


@pytest.mark.parametrize(("value", "index"), [
    (0.5, 0), (1.0, 0), (1.0001, 1), (3.0, 1), (3.5, 2), (10.0, 2), (30.0, 3), (100.0, 4), (2999.0, 7),
    (3000.0, 7), (3001.0, 8), (1e10, 20), (3e10, 21), (1e12, 21),
])
def test_logjam_bucket_of_a_value(value: float, index: int) -> None:
    """A value goes to the smallest bound >= it; above the last, the last (importer-processor.c:517-541)."""
    assert sketch.hist_index(value) == index


def test_stated_error_is_at_most_one_percent() -> None:
    assert sketch.RELATIVE_ERROR <= 0.01
    assert sketch.quantile({}, 0.5) is None
