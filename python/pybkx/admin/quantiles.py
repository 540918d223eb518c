"""Quantiles from the Rust core's histogram buckets, over rolling windows as BookKeeper's
Prometheus provider keeps them. Pure arithmetic on snapshots; it never reads a metric itself.

A latency summary's quantiles describe the last complete window of
``prometheusStatsLatencyRolloverSeconds`` (NaN until the first window completes), while its count
and sum grow for ever, as in BookKeeper. Windows turn over when read (a scrape), so a window lasts
the rollover period or, when scrapes are further apart, until the next scrape after it.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Sequence
from typing import Final

__all__ = ["QUANTILES", "Windows", "quantile", "subtract"]

QUANTILES: Final = (0.5, 0.75, 0.95, 0.99, 0.999, 0.9999, 1.0)
"""The quantiles BookKeeper exports for every latency summary."""

Buckets = Sequence[tuple[int | None, int]]
"""``(inclusive upper bound, count)``, ascending; None is +Inf."""


def quantile(buckets: Buckets, q: float) -> float:
    """The ``q`` quantile of the values counted in ``buckets`` (NaN if there are none),
    interpolated linearly inside the bucket it falls in; at most a bucket's width (1/8 of the
    value for the core's log-linear buckets) off."""
    total = sum(count for _, count in buckets)
    if total == 0:
        return math.nan
    rank = q * total
    seen = 0
    lower = 0
    for upper, count in buckets:
        top = lower if upper is None else upper
        if count and seen + count >= rank:
            if q >= 1.0:
                return float(top)
            inside = (rank - seen) / count
            return float(lower + (top - lower) * inside)
        seen += count
        lower = top if upper is None else upper + 1
    return float(lower)


def subtract(now: Buckets, before: Buckets) -> list[tuple[int | None, int]]:
    """The values counted in ``now`` but not yet in ``before`` (an earlier snapshot of the same
    histogram), bucket by bucket."""
    earlier = dict(before)
    return [(upper, count - earlier.get(upper, 0)) for upper, count in now]


class Windows:
    """The last complete window of each summary, by key; thread-safe."""

    def __init__(self, rollover_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._rollover_s = rollover_s
        self._clock = clock
        self._lock = threading.Lock()
        # key -> (when the current window started, buckets then, last complete window)
        self._state: dict[object, tuple[float, Buckets, Buckets | None]] = {}

    def last_complete(self, key: object, buckets: Buckets) -> Buckets | None:
        """The buckets of ``key``'s last complete window given its cumulative ``buckets`` now
        (None before one completed). Starts a new window when the current one is due."""
        now = self._clock()
        with self._lock:
            state = self._state.get(key)
            if state is None:
                self._state[key] = (now, list(buckets), None)
                return None
            started, base, complete = state
            if now - started >= self._rollover_s:
                complete = subtract(buckets, base)
                self._state[key] = (now, list(buckets), complete)
            return complete
