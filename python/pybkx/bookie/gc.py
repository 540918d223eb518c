"""Garbage collection of a bookie's ledgers, as BookKeeper's scan-and-compare collector does it:
a ledger this bookie stores whose metadata is gone from the cluster is deleted from its storage,
then the storage removes the entry logs none of whose ledgers is left (it also does so by itself
every ``gcWaitTime``). It decides which ledgers go (once per ledger); it never touches the
metadata. Entry logs that mix live and deleted ledgers stay (no compaction yet).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field

from pybkx import errors
from pybkx._core import LedgerStorage
from pybkx.meta import MetadataStore

__all__ = ["GarbageCollector", "GcRun"]

logger = logging.getLogger(__name__)


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True)
class GcRun:
    """One pass of the collector."""

    started_ms: int
    finished_ms: int
    checked: int
    """Ledgers this bookie stored when the pass began."""
    deleted: tuple[int, ...]
    """Ledgers deleted because their metadata no longer exists."""
    entry_logs_removed: int = 0
    """Entry logs removed because every ledger in them is deleted."""
    reclaimed_bytes: int = 0
    """Their bytes."""


@dataclass
class _State:
    running: bool = False
    runs: int = 0
    deleted_total: int = 0
    last: GcRun | None = None
    created_ms: int = field(default_factory=_now_ms)


class GarbageCollector:
    """Deletes the ledgers of ``storage`` whose metadata ``store`` no longer has.

    A ledger counts as gone only if it was stored before the metadata was listed, is missing
    from the listing, and reading its metadata again says it does not exist (BookKeeper's
    ``verifyMetadataOnGC``): a ledger created or recovered meanwhile is never deleted.
    Thread-safe; one pass at a time (a second caller waits for the running one).
    """

    def __init__(self, storage: LedgerStorage, store: MetadataStore) -> None:
        self._storage = storage
        self._store = store
        self._run_lock = threading.Lock()
        self._state_lock = threading.Lock()
        self._state = _State()

    @property
    def running(self) -> bool:
        with self._state_lock:
            return self._state.running

    def run(self) -> GcRun:
        """One pass. Raises MetaStoreException if the metadata cannot be listed (nothing is
        deleted then), BKException if the storage refuses a deletion."""
        with self._run_lock:
            with self._state_lock:
                self._state.running = True
            try:
                done = self._pass()
            finally:
                with self._state_lock:
                    self._state.running = False
            with self._state_lock:
                self._state.runs += 1
                self._state.deleted_total += len(done.deleted)
                self._state.last = done
            return done

    def _pass(self) -> GcRun:
        started = _now_ms()
        local = self._storage.list_ledgers()
        listed = set(self._store.list_ledgers())
        deleted: list[int] = []
        for ledger_id in local:
            if ledger_id in listed:
                continue
            try:
                self._store.read_ledger_metadata(ledger_id)
                continue  # created after the listing began
            except errors.NoSuchLedgerExistsOnMetadataServerException:
                pass
            try:
                self._storage.delete_ledger(ledger_id)
            except errors.NoSuchLedgerExistsException:
                continue  # deleted meanwhile by another pass or a client
            deleted.append(ledger_id)
            logger.info("gc: deleted ledger %d (its metadata is gone)", ledger_id)
        logs, freed = self._storage.gc_entry_logs()
        return GcRun(started, _now_ms(), len(local), tuple(deleted), logs, freed)

    def details(self) -> dict[str, object]:
        """BookKeeper's ``gc_details`` fields (no compaction exists, so its counters stay 0 and
        its times are when the collector started), and pybkx's own about ledger deletion."""
        with self._state_lock:
            state = self._state
            last = state.last
            return {
                "forceCompacting": False,
                "majorCompacting": False,
                "minorCompacting": False,
                "lastMajorCompactionTime": state.created_ms,
                "lastMinorCompactionTime": state.created_ms,
                "lastEntryLocationCompactionTime": state.created_ms,
                "majorCompactionCounter": 0,
                "minorCompactionCounter": 0,
                "entryLocationCompactionCounter": 0,
                "gcRunning": state.running,
                "gcRuns": state.runs,
                "deletedLedgerCounter": state.deleted_total,
                "lastGcTime": last.finished_ms if last else None,
                "lastGcDeletedLedgers": list(last.deleted) if last else [],
                "lastGcEntryLogsRemoved": last.entry_logs_removed if last else 0,
                "lastGcReclaimedBytes": last.reclaimed_bytes if last else 0,
            }
