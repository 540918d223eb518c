"""Placement counters under BookKeeper's metric names. Thread-safe counting only."""

from __future__ import annotations

import threading

__all__ = ["PlacementStats"]


class PlacementStats:
    """Thread-safe counters under BookKeeper's metric names (``bookies_joined``,
    ``bookies_left``, ``failed_to_resolve_network_location_count``,
    ``read_requests_reordered``, ``region_aware_anomalous_ensemble``, ...)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counters: dict[str, int] = {}

    def inc(self, name: str, delta: int = 1) -> None:
        with self._lock:
            self._counters[name] = self._counters.get(name, 0) + delta

    def get(self, name: str) -> int:
        with self._lock:
            return self._counters.get(name, 0)

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counters)
