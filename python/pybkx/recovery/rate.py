"""A byte-rate limit shared by every copy of a recovery (BookKeeper's
``replicationRateByBytes``), so that healing cannot starve client traffic."""

from __future__ import annotations

import threading
import time

__all__ = ["ByteRate"]

#: The most a limiter lets pass at once after being idle: 50 ms' worth. Callers take per add, so
#: a small burst keeps the writes smooth; a second's worth let a copy send a second of data to
#: a bookie at once after each pause.
BURST_S = 0.05


class ByteRate:
    """A token bucket of ``bytes_per_s`` (None or <= 0: no limit)."""

    def __init__(self, bytes_per_s: int | None) -> None:
        self.rate = bytes_per_s if bytes_per_s and bytes_per_s > 0 else None
        self._lock = threading.Lock()
        self._tokens = float(self.rate or 0)
        self._at = time.monotonic()

    def take(self, nbytes: int) -> None:
        """Wait until ``nbytes`` may pass (at most ``nbytes / rate`` seconds)."""
        if self.rate is None:
            return
        with self._lock:
            now = time.monotonic()
            cap = self.rate * BURST_S
            self._tokens = min(cap, self._tokens + (now - self._at) * self.rate) - nbytes
            self._at = now
            wait = -self._tokens / self.rate if self._tokens < 0 else 0.0
        if wait > 0:
            time.sleep(wait)
