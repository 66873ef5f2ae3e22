"""Distributions that add up: logjam's 22 fixed buckets (heatmaps, distribution plots) and log-spaced sketch
buckets with a 1% relative error bound (percentiles of any range, as DDSketch maps values).

Both are maps bucket key -> count; merging two is adding their counts key by key, so a minute's, an hour's, an
app's or two hubs' distributions are sums of rows.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

# logjam's bucket bounds (importer-processor.c:517-541): a value goes to the smallest bound >= it; above the last,
# the last; so (0, 1] -> 0, (1, 3] -> 1, ... (1e10, 3e10] and above -> 21.
HIST_BOUNDS: tuple[float, ...] = tuple(float(m * 10**e) for e in range(11) for m in (1, 3))
assert len(HIST_BOUNDS) == 22

# Sketch buckets: key k holds the values in (GAMMA**(k-1), GAMMA**k]; a quantile found in bucket k is estimated as
# 2 * GAMMA**k / (GAMMA + 1), within RELATIVE_ERROR of every value the bucket holds.
GAMMA = 1.02
RELATIVE_ERROR = (GAMMA - 1) / (GAMMA + 1)  # 0.0099
_LOG_GAMMA = math.log(GAMMA)
# Values <= 0 (a negative other_time, a total_time logjam keeps negative) have no log bucket: they are counted
# under this key and estimated as 0.
ZERO_KEY = -32768


def hist_index(value: float) -> int:
    """logjam's bucket index of a value > 0 (heatmaps count only values > 0)."""
    for i, bound in enumerate(HIST_BOUNDS):
        if value <= bound:
            return i
    return len(HIST_BOUNDS) - 1


def sketch_key(value: float) -> int:
    """The sketch bucket of a value: ceil(log(value) / log(GAMMA)), ZERO_KEY for values <= 0.

    The Spark job computes the same expression in SQL (`ceil(ln(v) / ln(1.02))`); a value within floating point
    error of a bucket's edge may land in either neighbour, which moves its estimate by at most one bucket's width.
    """
    if not value > 0:  # also NaN
        return ZERO_KEY
    return math.ceil(math.log(value) / _LOG_GAMMA)


def sketch_value(key: int) -> float:
    """The estimate for a quantile that falls in bucket `key`."""
    if key == ZERO_KEY:
        return 0.0
    return 2 * GAMMA**key / (GAMMA + 1)


def merge(maps: Iterable[Mapping[int, int] | None]) -> dict[int, int]:
    """The sum of several bucket maps (None: no values)."""
    out: dict[int, int] = {}
    for m in maps:
        for key, count in (m or {}).items():
            out[key] = out.get(key, 0) + count
    return out


def quantile(counts: Mapping[int, int], q: float) -> float | None:
    """The q-quantile (0 <= q <= 1) of a sketch: the estimate of the bucket holding the value of rank
    max(1, ceil(q * n)) in ascending order (nearest rank); None for an empty sketch.

    Within RELATIVE_ERROR of the exact nearest-rank quantile of the values counted (for values > 0).
    """
    total = sum(counts.values())
    if total <= 0:
        return None
    rank = max(1, math.ceil(q * total))
    seen = 0
    for key in sorted(counts):
        seen += counts[key]
        if seen >= rank:
            return sketch_value(key)
    raise AssertionError("unreachable: the ranks add up to the total")
