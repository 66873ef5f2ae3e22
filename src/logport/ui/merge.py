"""The lake's bucket maps summed per group from Arrow arrays (numpy, no Python loop per entry): the quantiles of
merged sketches, exactly as lake/sketch.py's `quantile` answers them for the merged maps, and counter maps summed.

A view's query hands its maps over as one Arrow list of maps per group (DuckDB's `list(column)` in a GROUP BY), so
the bucket counts never become Python objects.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from logport.lake import sketch

DENSE_CELLS = 4_000_000  # groups x keys up to which the counts are summed in a dense table


def _flat(lists: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray, pa.Array, pa.Array]:
    """(group index, key, count) of every map entry of a list<map> column: group i is the i-th list."""
    if isinstance(lists, pa.ChunkedArray):
        lists = lists.combine_chunks() if lists.num_chunks else pa.array([], lists.type)
    maps = pc.list_flatten(lists)
    offsets = maps.offsets.to_numpy()
    start, end = (int(offsets[0]), int(offsets[-1])) if len(offsets) else (0, 0)
    groups = np.repeat(pc.list_parent_indices(lists).to_numpy(), np.diff(offsets))
    return groups, maps.keys.slice(start, end - start), maps.items.slice(start, end - start)


def quantiles(lists: pa.ChunkedArray | pa.Array, qs: Sequence[float]) -> list[list[float | None]]:
    """For each list of sketches (one per group), the q-quantile of their sum for every q: the estimate of the
    first bucket, in key order, where the running count reaches rank max(1, ceil(q * n)); None where the group
    counted nothing. The same figures as sketch.quantile(sketch.merge(group's maps), q)."""
    groups, key_array, count_array = _flat(lists)
    keys = key_array.to_numpy().astype(np.int64)
    counts = count_array.to_numpy().astype(np.int64)
    n_groups = len(lists)
    out: list[list[float | None]] = [[None] * len(qs) for _ in range(n_groups)]
    if not len(keys):
        return out
    # values <= 0 (ZERO_KEY, far below the others): moved next to the smallest other key, order kept, so that
    # the buckets in use span a few hundred keys and the counts fit a dense table of groups x keys
    real = keys != sketch.ZERO_KEY
    lowest_real = int(keys[real].min()) if real.any() else 0
    zero_at = lowest_real - 1 if lowest_real > sketch.ZERO_KEY else None
    if zero_at is not None:
        keys = np.where(real, keys, zero_at)
    low = int(keys.min())
    width = int(keys.max()) - low + 1
    if zero_at is None or n_groups * width > DENSE_CELLS:
        return _quantiles_sorted(groups, keys, counts, n_groups, qs, out)
    # counts are whole numbers below 2**53: float64 sums them exactly
    running = np.cumsum(np.bincount(groups * width + (keys - low), weights=counts, minlength=n_groups * width)
                        .reshape(n_groups, width), axis=1)
    totals = running[:, -1]
    for j, q in enumerate(qs):
        rank = np.maximum(1, np.ceil(float(q) * totals))  # q * n in double precision, as sketch.quantile
        first = (running >= rank[:, None]).argmax(axis=1) + low
        for i in np.flatnonzero(totals > 0):
            key = int(first[i])
            out[i][j] = sketch.sketch_value(sketch.ZERO_KEY if key == zero_at else key)
    return out


def _quantiles_sorted(groups: np.ndarray, keys: np.ndarray, counts: np.ndarray, n_groups: int,
                      qs: Sequence[float], out: list[list[float | None]]) -> list[list[float | None]]:
    """quantiles() for keys too spread for a dense table: the entries sorted by group and key, one running
    count over all of them."""
    low = keys.min()
    order = np.argsort(groups * (keys.max() - low + 1) + (keys - low), kind="stable")
    groups, keys = groups[order], keys[order]
    running = np.cumsum(counts[order])
    starts = np.searchsorted(groups, np.arange(n_groups), side="left")
    ends = np.searchsorted(groups, np.arange(n_groups), side="right")
    present = ends > starts
    before = np.where(starts > 0, running[np.maximum(starts - 1, 0)], 0)
    totals = np.where(present, running[np.maximum(ends - 1, 0)] - before, 0)
    for j, q in enumerate(qs):
        rank = np.maximum(1, np.ceil(float(q) * totals.astype(np.float64))).astype(np.int64)
        found = np.searchsorted(running, before + rank, side="left")
        for i in np.flatnonzero(totals > 0):
            out[i][j] = sketch.sketch_value(int(keys[found[i]]))
    return out


def counters(lists: pa.ChunkedArray | pa.Array) -> list[dict[Any, int]]:
    """For each list of counter maps (one per group), their sum key by key."""
    groups, keys, counts = _flat(lists)
    out: list[dict[Any, int]] = [{} for _ in range(len(lists))]
    summed = pa.table({"g": groups, "k": keys, "v": counts}).group_by(["g", "k"]).aggregate([("v", "sum")])
    for g, k, v in zip(*summed.to_pydict().values(), strict=True):
        out[g][k] = int(v)
    return out
