"""``pybkx top``: a live view of a cluster in the terminal, refreshed every second: per bookie
its state, adds/s, reads/s, latency, connections, disk use per directory tier and the bytes GC
and compaction can win back, and the
cluster's totals. It scrapes each bookie's ``/metrics`` (found through the registrations'
``httpserver`` endpoints, or given as URLs) and never changes anything.
"""

from __future__ import annotations

import math
import threading
import time
import urllib.error
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from prometheus_client.parser import text_string_to_metric_families

from pybkx.meta import MetadataStore
from pybkx.tools.admin_http import open_admin
from pybkx.tools.bookies import admin_url, list_bookies

if TYPE_CHECKING:
    from rich.console import RenderableType

__all__ = ["BookieSample", "ClusterTargets", "Target", "View", "parse_metrics", "scrape"]

LEDGER_COUNT_EVERY_S = 10.0
"""Counting ledgers lists them all: done this often, not every refresh."""
SCRAPE_TIMEOUT_S = 2.0
"""A bookie that does not answer within this is shown as unreachable."""

Series = dict[tuple[str, frozenset[tuple[str, str]]], float]


@dataclass(frozen=True)
class Target:
    """One bookie to watch: its id and the base URL of its metrics endpoint."""

    bookie_id: str
    url: str
    read_only: bool = False


@dataclass
class BookieSample:
    """One scrape of one bookie."""

    at: float
    series: Series = field(default_factory=dict)
    error: str | None = None

    def value(self, name: str, **labels: str) -> float:
        """The sum of every series named ``name`` whose labels include ``labels``."""
        wanted = set(labels.items())
        return sum(v for (n, lab), v in self.series.items() if n == name and wanted <= lab)

    def matching(self, predicate: Callable[[str], bool]) -> dict[str, float]:
        return {n: v for (n, lab), v in self.series.items() if predicate(n) and not lab}


class ClusterTargets:
    """The bookies of a cluster that publish an admin endpoint, found again at every call, and
    the cluster facts for the view's header."""

    def __init__(self, store: MetadataStore) -> None:
        self._store = store
        self.header: dict[str, str] = {}
        self._counted_at = -LEDGER_COUNT_EVERY_S

    def __call__(self) -> list[Target]:
        store = self._store
        ro = store.readonly_bookies()
        found = []
        for bookie_id in list_bookies(store, "all"):
            url = admin_url(store, bookie_id)
            if url is not None:
                found.append(Target(bookie_id, url, bookie_id in ro))
        self.header["bookies"] = f"{len(store.writable_bookies())} writable, {len(ro)} read-only"
        if time.monotonic() - self._counted_at >= LEDGER_COUNT_EVERY_S:
            self.header["ledgers"] = f"{sum(1 for _ in store.list_ledgers()):,}"
            self.header["under-replicated"] = f"{len(store.underreplicated_ledgers()):,}"
            self._counted_at = time.monotonic()
        return found


def parse_metrics(text: str) -> Series:
    """Every sample of a Prometheus exposition, by name and labels."""
    out: Series = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = float(s.value)
    return out


def scrape(url: str, timeout_s: float = SCRAPE_TIMEOUT_S) -> BookieSample:
    """``GET {url}/metrics``; a failure is kept in the sample, never raised."""
    now = time.monotonic()
    try:
        with open_admin(f"{url}/metrics", timeout_s) as response:
            text = response.read().decode()
        return BookieSample(now, parse_metrics(text))
    except (urllib.error.URLError, OSError, ValueError) as exc:
        return BookieSample(now, error=str(getattr(exc, "reason", exc)))


def _rate(now: BookieSample, before: BookieSample | None, name: str, **labels: str) -> float:
    if before is None or before.error or now.at <= before.at:
        return math.nan
    return (now.value(name, **labels) - before.value(name, **labels)) / (now.at - before.at)


def _latency_ms(now: BookieSample, before: BookieSample | None, name: str) -> float:
    """Mean latency of successful operations since the previous scrape."""
    if before is None or before.error:
        return math.nan
    count = now.value(f"{name}_count", success="true") - before.value(
        f"{name}_count", success="true"
    )
    total = now.value(f"{name}_sum", success="true") - before.value(f"{name}_sum", success="true")
    return total / count if count > 0 else math.nan


def _p99_ms(now: BookieSample, name: str) -> float:
    values = [
        v
        for (n, lab), v in now.series.items()
        if n == name and ("quantile", "0.99") in lab and ("success", "true") in lab
    ]
    return max(values) if values else math.nan


def _usage(now: BookieSample, tier: str) -> float:
    found = now.matching(lambda n: n.startswith(f"bookie_{tier}_dir_") and n.endswith("_usage"))
    return max(found.values()) if found else math.nan


@dataclass(frozen=True)
class Row:
    bookie_id: str
    state: str
    adds_per_s: float
    add_ms: float
    add_p99_ms: float
    reads_per_s: float
    read_ms: float
    connections: float
    ledger_disk: float
    index_disk: float
    journal_queue: float
    reclaimable_mib: float
    """Entry-log bytes GC and compaction can win back: deleted, orphaned, over-replicated."""


class View:
    """The samples of the watched bookies and the rows they make; thread-safe."""

    def __init__(self, targets: Callable[[], Iterable[Target]], workers: int = 8) -> None:
        self._targets = targets
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="pybkx-top")
        self._lock = threading.Lock()
        self._last: dict[str, tuple[Target, BookieSample]] = {}
        self._previous: dict[str, BookieSample] = {}

    def refresh(self) -> list[Row]:
        """Scrape every target once (in parallel, each bounded by the scrape timeout)."""
        targets = list(self._targets())
        samples = list(self._pool.map(lambda t: scrape(t.url), targets))
        with self._lock:
            for target, sample in zip(targets, samples, strict=True):
                old = self._last.get(target.bookie_id)
                if old is not None and not old[1].error:
                    self._previous[target.bookie_id] = old[1]
                self._last[target.bookie_id] = (target, sample)
            for gone in set(self._last) - {t.bookie_id for t in targets}:
                del self._last[gone]
                self._previous.pop(gone, None)
            return [
                self._row(t, s, self._previous.get(t.bookie_id)) for t, s in self._last.values()
            ]

    @staticmethod
    def _row(target: Target, now: BookieSample, before: BookieSample | None) -> Row:
        if now.error:
            nan = math.nan
            return Row(target.bookie_id, f"unreachable: {now.error}", *([nan] * 10))
        status = now.value("bookie_SERVER_STATUS")
        return Row(
            bookie_id=target.bookie_id,
            state="writable" if status >= 1 else "read-only",
            adds_per_s=_rate(now, before, "bookkeeper_server_ADD_ENTRY_REQUEST_count"),
            add_ms=_latency_ms(now, before, "bookkeeper_server_ADD_ENTRY_REQUEST"),
            add_p99_ms=_p99_ms(now, "bookkeeper_server_ADD_ENTRY_REQUEST"),
            reads_per_s=_rate(now, before, "bookkeeper_server_READ_ENTRY_REQUEST_count"),
            read_ms=_latency_ms(now, before, "bookkeeper_server_READ_ENTRY_REQUEST"),
            connections=now.value("pybkx_server_connections_active"),
            ledger_disk=_usage(now, "ledger"),
            index_disk=_usage(now, "index"),
            journal_queue=now.value("bookie_journal_JOURNAL_QUEUE_SIZE_total")
            + now.value("bookie_journal_JOURNAL_QUEUE_SIZE"),
            reclaimable_mib=sum(
                now.value("pybkx_space_bytes", state=state)
                for state in ("deleted", "orphaned", "over_replicated")
            )
            / (1 << 20),
        )

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


def render(rows: list[Row], header: Mapping[str, str]) -> RenderableType:
    """A rich renderable of the rows with a header line of cluster facts."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    def num(x: float, digits: int = 0) -> str:
        return "-" if math.isnan(x) else f"{x:,.{digits}f}"

    table = Table(expand=True)
    for column in (
        "bookie",
        "state",
        "adds/s",
        "add ms",
        "add p99 ms",
        "reads/s",
        "read ms",
        "conns",
        "journal queue",
        "ledger disk %",
        "index disk %",
        "reclaimable MiB",
    ):
        table.add_column(column, justify="left" if column in ("bookie", "state") else "right")
    total_adds = total_reads = 0.0
    for r in sorted(rows, key=lambda r: r.bookie_id):
        if not math.isnan(r.adds_per_s):
            total_adds += r.adds_per_s
        if not math.isnan(r.reads_per_s):
            total_reads += r.reads_per_s
        table.add_row(
            r.bookie_id,
            r.state,
            num(r.adds_per_s),
            num(r.add_ms, 2),
            num(r.add_p99_ms, 2),
            num(r.reads_per_s),
            num(r.read_ms, 2),
            num(r.connections),
            num(r.journal_queue),
            num(r.ledger_disk, 1),
            num(r.index_disk, 1),
            num(r.reclaimable_mib, 1),
        )
    facts = "   ".join(f"{k}: {v}" for k, v in header.items())
    summary = f"cluster adds/s: {total_adds:,.0f}   reads/s: {total_reads:,.0f}   {facts}"
    return Group(Text(summary, style="bold"), table)
