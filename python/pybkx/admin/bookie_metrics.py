"""A bookie's metrics at one moment: the Rust server's and storage's read-outs, plus the gauges
BookKeeper computes from the bookie's state and disks (``SERVER_STATUS``, directory counts and
usage, entry-log totals). It gathers; it never formats (``prometheus``) nor records.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

from pybkx import errors
from pybkx._core import Metric
from pybkx.bookie import Bookie, BookieError
from pybkx.bookie.space import account_space

if TYPE_CHECKING:
    from pybkx._core import LedgerStorage
    from pybkx.bookie.disks import DiskVerdict

__all__ = ["bookie_metrics", "dir_usage_percent", "is_entry_log", "is_journal"]

_UNSAFE = re.compile(r"[^a-zA-Z0-9_]")
_ENTRY_LOG = re.compile(r"[0-9a-f]+\.log")
_JOURNAL = re.compile(r"[0-9a-f]+\.txn")


def is_entry_log(name: str) -> bool:
    """Entry logs are named by their hex id, as BookKeeper's (``1a.log``)."""
    return _ENTRY_LOG.fullmatch(name) is not None


def is_journal(name: str) -> bool:
    return _JOURNAL.fullmatch(name) is not None


def dir_usage_percent(path: str) -> float | None:
    """How full the file system holding ``path`` is, in percent (None if it cannot be read)."""
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    total = st.f_blocks * st.f_frsize
    if total == 0:
        return None
    free = st.f_bavail * st.f_frsize
    return 100.0 * (total - free) / total


def _measured_usage(storage: LedgerStorage) -> dict[str, list[float | None]]:
    """Per kind (``ledger``, ``index``), the usage in percent of each directory in order, as the
    storage measures it for the disk checker: a directory with a tier quota counts its bytes
    against the quota. Empty when the storage cannot say."""
    try:
        rows = storage.directory_usage()
    except errors.BKException:
        return {}
    out: dict[str, list[float | None]] = {}
    for r in rows:
        total, free = r.total_bytes, r.free_bytes
        out.setdefault(r.kind, []).append(100.0 * (total - free) / total if total > 0 else None)
    return out


def _gauge(name: str, value: int) -> Metric:
    return Metric(name, "gauge", "count", {}, value)


def _entry_logs(ledger_dirs: tuple[str, ...]) -> tuple[int, int]:
    """Number and total size of the entry logs in the ledger directories."""
    count = size = 0
    for d in ledger_dirs:
        try:
            entries = list(os.scandir(Path(d) / "current"))
        except OSError:
            continue
        for entry in entries:
            if is_entry_log(entry.name):
                try:
                    size += entry.stat().st_size
                except OSError:
                    continue
                count += 1
    return count, size


def bookie_metrics(bookie: Bookie) -> list[Metric]:
    """Every metric of a running bookie. Raises BookieError if it is not running."""
    server, storage = bookie.server, bookie.storage
    config = bookie.config
    out: list[Metric] = [*server.metrics(), *storage.metrics()]
    try:
        read_only = bookie.read_only
    except BookieError:
        read_only = True
    out.append(_gauge("bookie_SERVER_STATUS", 0 if read_only else 1))
    out.append(_gauge("bookie_JOURNAL_DIRS", len(config.journal_directories)))
    out.append(_gauge("bookie_JOURNAL_QUEUE_MAX_SIZE", config.journal_queue_size))
    scopes = [("ledger", config.ledger_directories)]
    if config.index_directories:
        scopes.append(("index", config.index_directories))
    checker = bookie.disk_checker
    verdict = checker.last if checker is not None else None
    measured = _measured_usage(storage)
    for scope, dirs in scopes:
        out += _directory_gauges(scope, dirs, verdict, measured.get(scope, []))
    out.append(
        _gauge("pybkx_bookie_high_priority_writes", int(bookie.available_for_high_priority_writes))
    )
    out.append(_gauge("pybkx_disk_checks", checker.checks if checker is not None else 0))
    logs, log_bytes = _entry_logs(config.ledger_directories)
    out.append(_gauge("bookie_gc_ACTIVE_ENTRY_LOG_TOTAL", logs))
    out.append(_gauge("bookie_gc_ACTIVE_ENTRY_LOG_SPACE_BYTES", log_bytes))
    out += _space_gauges(bookie)
    scrubber = bookie.scrubber
    if scrubber is not None:  # the repairs of what the storage's scrubber found
        out.extend(scrubber.metrics())
    for service in bookie.services:  # AutoRecovery in the bookie's process: its stats
        metrics = getattr(service, "metrics", None)
        if callable(metrics):
            out.extend(metrics())
    return out


#: ``pybkx_space_bytes``'s ``state`` label: the fields of a tier's space account.
_SPACE_STATES = (
    "live",
    "deleted",
    "orphaned",
    "over_replicated",
    "compactable",
    "overhead",
)


def _space_gauges(bookie: Bookie) -> list[Metric]:
    """``pybkx_space_bytes{tier, state}``: the entry-log bytes of each tier by what they hold.
    Orphaned and over-replicated bytes are those of the collector's last look
    (``/api/v1/bookie/orphans`` or ``/api/v1/bookie/space``; counted as live before one)."""
    collector = bookie.garbage_collector
    orphans = collector.last_orphans if collector is not None else None
    try:
        tiers = account_space(bookie.storage, bookie.config, orphans)
    except (errors.BKException, BookieError):
        return []
    out: list[Metric] = []
    for tier in tiers:
        for state in _SPACE_STATES:
            value = getattr(tier, state)
            labels = {"tier": tier.tier, "state": state}
            out.append(Metric("pybkx_space_bytes", "gauge", "bytes", labels, value))
    return out


def _directory_gauges(
    scope: str, dirs: tuple[str, ...], verdict: DiskVerdict | None, rows: list[float | None]
) -> list[Metric]:
    """BookKeeper's gauges of one kind (``scope``) of directories: how many, how many
    writable (not marked full by the disk checker's last ``verdict``), and each one's usage
    (``rows``: the storage's own measure, against a tier's quota where one is set; else the
    file system's)."""
    writable = len(dirs)
    if verdict is not None:
        if scope == "ledger":
            writable = verdict.writable_dirs
        elif verdict.other_full:
            writable = 0 if verdict.other_full[0] else 1
    out = [
        _gauge(f"bookie_{scope}_num_dirs", len(dirs)),
        _gauge(f"bookie_{scope}_writable_dirs", writable),
    ]
    for i, d in enumerate(dirs):
        usage = rows[i] if i < len(rows) and rows[i] is not None else dir_usage_percent(d)
        if usage is not None:
            name = f"bookie_{scope}_dir_{_UNSAFE.sub('_', d)}_usage"
            out.append(Metric(name, "gauge", "percent", {}, usage))
    return out
