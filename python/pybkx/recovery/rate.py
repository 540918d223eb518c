"""A byte-rate limit shared by every copy of a recovery (BookKeeper's
``replicationRateByBytes``), so that healing cannot starve client traffic. It only paces; it
never decides what is copied."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

__all__ = ["ByteRate"]

#: The most a limiter lets pass at once after being idle: 50 ms' worth. Callers take per add, so
#: a small burst keeps the writes smooth; a second's worth let a copy send a second of data to
#: a bookie at once after each pause.
BURST_S = 0.05
#: A caller goes on while the limiter owes less than this much time, and sleeps the whole debt
#: off once it owes more. Sleeping off every add's own share woke each copy for every add and
#: sent the bookies one add at a time: healing then took more of the healer's and the bookies'
#: CPU, and the client's add p99 rose more (docs/performance.md, "Healing a lost bookie", "The
#: rate limit's sleeps"). The rate over any longer span is unchanged; the copies' windows still
#: bound what is in flight.
MIN_SLEEP_S = 0.008


class ByteRate:
    """A token bucket of ``bytes_per_s`` (None or <= 0: no limit). ``clock`` and ``sleep``
    are the monotonic clock and the sleep it uses (tests give their own)."""

    def __init__(
        self,
        bytes_per_s: int | None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.rate = bytes_per_s if bytes_per_s and bytes_per_s > 0 else None
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self._tokens = float(self.rate or 0)
        self._at = clock()

    def take(self, nbytes: int) -> None:
        """Let ``nbytes`` pass, first sleeping off the limiter's debt when it has grown past
        MIN_SLEEP_S (at most ``max(nbytes / rate, MIN_SLEEP_S)`` plus the other callers'
        share). Never raises."""
        if self.rate is None:
            return
        with self._lock:
            now = self._clock()
            cap = self.rate * BURST_S
            self._tokens = min(cap, self._tokens + (now - self._at) * self.rate) - nbytes
            self._at = now
            debt = -self._tokens / self.rate if self._tokens < 0 else 0.0
        if debt >= MIN_SLEEP_S:
            self._sleep(debt)
