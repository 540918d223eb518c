"""The client's metrics in the process's ``prometheus_client`` registry, under BookKeeper's
client names (``bookkeeper_client_*``): add and read latency from the Rust core (every client of
the process together), ledger create/open/delete/recover latency, ensemble changes and bookie
quarantines from here.
Registered once, when the first ``BookKeeper`` is made. It exports; it never decides anything.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from prometheus_client import REGISTRY, Counter, Gauge, Histogram
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from pybkx._core import client_metrics

__all__ = [
    "count_ensemble_change",
    "count_quarantine",
    "count_quarantine_skip",
    "ensure_registered",
    "set_quarantined",
    "timed",
]

# Powers of two microseconds, shown in milliseconds: 32 µs .. 67 s. The core's buckets split
# every power of two exactly, so counts at these bounds are exact.
_BOUNDS_US = [1 << k for k in range(5, 27)]
_BOUNDS_MS = [b / 1000 for b in _BOUNDS_US]

_lock = threading.Lock()
_registered = False
_ensemble_changes: Counter | None = None
_ledger_ops: dict[str, Histogram] = {}
_quarantines: Counter | None = None
_quarantine_skips: Counter | None = None
_quarantined: Gauge | None = None
# Quarantined bookies by client (``id`` of its health check): the gauge is their sum.
_quarantined_by: dict[int, int] = {}

LEDGER_OPS = ("LEDGER_CREATE", "LEDGER_OPEN", "LEDGER_DELETE", "LEDGER_RECOVER", "READ_LAC")
"""BookKeeper's per-ledger client operations, timed here (READ_LAC: an explicit-LAC read)."""


class _CoreCollector(Collector):
    """Reads the core's client metrics at each scrape."""

    def collect(self) -> Iterator[Metric]:
        for metric in client_metrics():
            name, value = metric.name, metric.value
            if metric.kind == "gauge" and isinstance(value, int):
                yield GaugeMetricFamily(name, f"{name} (pybkx core)", value=value)
            elif metric.kind == "counter" and isinstance(value, int):
                yield CounterMetricFamily(name, f"{name} (pybkx core)", value=value)
            elif metric.kind == "summary" and isinstance(value, dict):
                family = HistogramMetricFamily(
                    name, f"{name} latency in milliseconds", labels=["success"]
                )
                for success in ("true", "false"):
                    snapshot = value[success]
                    family.add_metric(
                        [success], _cumulative(snapshot.buckets), sum_value=snapshot.sum / 1000
                    )
                yield family


def _cumulative(buckets: list[tuple[int | None, int]]) -> list[tuple[str, float]]:
    """The core's bucket counts as cumulative counts at the export bounds (and +Inf)."""
    out: list[tuple[str, float]] = []
    seen = 0
    i = 0
    for bound_us, bound_ms in zip(_BOUNDS_US, _BOUNDS_MS, strict=True):
        while i < len(buckets):
            upper, count = buckets[i]
            if upper is None or upper >= bound_us:
                break
            seen += count
            i += 1
        out.append((repr(bound_ms), float(seen)))
    out.append(("+Inf", float(sum(count for _, count in buckets))))
    return out


def ensure_registered() -> None:
    """Register the client's metrics in the default registry (once per process)."""
    global _registered, _ensemble_changes, _quarantines, _quarantine_skips, _quarantined
    with _lock:
        if _registered:
            return
        REGISTRY.register(_CoreCollector())
        _ensemble_changes = Counter(
            "bookkeeper_client_NUM_ENSEMBLE_CHANGE",
            "Ensemble changes: failed bookies replaced in a ledger being written",
        )
        _quarantines = Counter(
            "bookkeeper_client_BOOKIE_QUARANTINE",
            "Bookies quarantined by the health check (too many errors in an interval)",
        )
        _quarantine_skips = Counter(
            "bookkeeper_client_BOOKIE_QUARANTINE_SKIP",
            "Faulty bookies the health check left out of quarantine (bookieQuarantineRatio)",
        )
        _quarantined = Gauge(
            "bookkeeper_client_QUARANTINED_BOOKIES",
            "Bookies quarantined now: new ensembles leave them out while others can serve",
        )
        for op in LEDGER_OPS:
            _ledger_ops[op] = Histogram(
                f"bookkeeper_client_{op}",
                f"{op} latency in milliseconds",
                ["success"],
                buckets=_BOUNDS_MS,
            )
        _registered = True


def count_ensemble_change() -> None:
    if _ensemble_changes is not None:
        _ensemble_changes.inc()


def count_quarantine() -> None:
    if _quarantines is not None:
        _quarantines.inc()


def count_quarantine_skip() -> None:
    if _quarantine_skips is not None:
        _quarantine_skips.inc()


def set_quarantined(count: int, owner: object) -> None:
    """Sets how many bookies ``owner`` (one client's health check) holds in quarantine."""
    with _lock:
        if count:
            _quarantined_by[id(owner)] = count
        else:
            _quarantined_by.pop(id(owner), None)
        if _quarantined is not None:
            _quarantined.set(sum(_quarantined_by.values()))


@contextmanager
def timed(op: str) -> Iterator[None]:
    """Times a ledger operation (one of ``LEDGER_OPS``) into its histogram."""
    started = time.monotonic()
    success = "false"
    try:
        yield
        success = "true"
    finally:
        histogram = _ledger_ops.get(op)
        if histogram is not None:
            histogram.labels(success).observe((time.monotonic() - started) * 1000)
