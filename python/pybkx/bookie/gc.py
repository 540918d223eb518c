"""Garbage collection of a bookie's ledgers by metadata, as BookKeeper's scan-and-compare
collector decides it: a ledger this bookie stores whose metadata is gone from the cluster is
deleted from its storage. It decides which ledgers go (once per ledger, a control-plane decision
the storage cannot make); it never touches the metadata and schedules no disk work of its own:
after deleting it asks the storage's lifecycle to collect now (``LedgerStorage.collect``), which
removes the entry logs none of whose ledgers is left and, for a forced pass
(``forceMajor``/``forceMinor``), compacts. The lifecycle also collects and compacts by itself
(every ``gcWaitTime`` and compaction interval).

A bookie runs a pass every ``gcWaitTime`` (``start_periodic``), as BookKeeper's garbage
collector thread does, and whenever an operator asks (``PUT /api/v1/bookie/gc``).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Literal

from pybkx import errors
from pybkx._core import LedgerStorage
from pybkx.meta import MetadataStore

__all__ = ["GarbageCollector", "GcRun", "LocalOrphans"]

logger = logging.getLogger(__name__)


#: The lifecycle's compaction for each kind of pass ("": none forced).
_COMPACTIONS: dict[str, Literal["major", "minor"] | None] = {
    "major": "major",
    "minor": "minor",
    "": None,
}


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
    over_replicated: tuple[int, ...] = ()
    """Closed ledgers removed because no ensemble names this bookie any more."""
    entry_logs_removed: int = 0
    """Entry logs removed because every ledger in them is deleted."""
    reclaimed_bytes: int = 0
    """Their bytes, and those of compacted logs."""
    compacted_logs: int = 0
    """Entry logs compacted (forced major or minor compaction)."""
    compaction: str = ""
    """"major", "minor" or "" (none forced)."""


@dataclass(frozen=True)
class LocalOrphans:
    """What this bookie stores that no ledger's metadata accounts for (found, not removed)."""

    without_metadata: tuple[int, ...]
    """Ledgers stored here whose metadata is gone (a pass would delete them)."""
    over_replicated: tuple[int, ...]
    """Closed ledgers stored here that no ensemble names this bookie in (their copies moved to
    other bookies); empty for a collector without a bookie id."""


@dataclass
class _State:
    running: bool = False
    runs: int = 0
    deleted_total: int = 0
    over_replicated_total: int = 0
    last: GcRun | None = None
    created_ms: int = field(default_factory=_now_ms)
    major_compactions: int = 0
    minor_compactions: int = 0
    last_major_ms: int | None = None
    last_minor_ms: int | None = None


class GarbageCollector:
    """Deletes the ledgers of ``storage`` whose metadata ``store`` no longer has.

    A ledger counts as gone only if it was stored before the metadata was listed, is missing
    from the listing, and reading its metadata again says it does not exist (BookKeeper's
    ``verifyMetadataOnGC``): a ledger created or recovered meanwhile is never deleted.

    Given ``bookie_id``, a pass every ``over_replicated_interval_s`` also removes the closed
    ledgers no ensemble names this bookie in (their copies moved to other bookies while it was
    away), as BookKeeper's ``gcOverreplicatedLedgerWaitTime``: only while it holds the
    ledger's replication lock and after reading the metadata again under it, so a replication
    worker copying the ledger onto this bookie is never undercut.

    Thread-safe; one pass at a time (a second caller waits for the running one).
    """

    def __init__(
        self,
        storage: LedgerStorage,
        store: MetadataStore,
        *,
        bookie_id: str | None = None,
        over_replicated_interval_s: float = 0.0,
    ) -> None:
        self._storage = storage
        self._store = store
        self._bookie_id = bookie_id
        self._over_interval_s = over_replicated_interval_s if bookie_id else 0.0
        # As BookKeeper: the first look for over-replicated ledgers comes one interval after
        # the start (a bookie back from a long absence is not emptied before it catches up).
        self._last_over_check = time.monotonic()
        self._run_lock = threading.Lock()
        self._state_lock = threading.Lock()
        self._state = _State()
        self._halt = threading.Event()
        self._periodic: threading.Thread | None = None
        self._last_orphans: LocalOrphans | None = None

    def start_periodic(self, interval_s: float) -> None:
        """Run a pass every ``interval_s`` seconds on a daemon thread until ``stop_periodic``
        (nothing when ``interval_s`` is 0: ``gcWaitTime=0`` turns it off). A pass that fails
        (the metadata store unreachable, say: nothing is deleted without a full listing) is
        logged and tried again at the next interval."""
        if interval_s <= 0 or self._periodic is not None:
            return
        self._halt.clear()
        self._periodic = threading.Thread(
            target=self._every, args=(interval_s,), name="pybkx-gc", daemon=True
        )
        self._periodic.start()

    def stop_periodic(self, timeout_s: float) -> bool:
        """Stop the periodic passes: a pass under way stops between two ledgers. Waits at most
        ``timeout_s`` for it; False if it is still running then."""
        self._halt.set()
        thread, self._periodic = self._periodic, None
        if thread is None:
            return True
        thread.join(timeout_s)
        return not thread.is_alive()

    def _every(self, interval_s: float) -> None:
        while not self._halt.wait(interval_s):
            try:
                done = self.run()
            except Exception as exc:  # the next pass tries again; the bookie goes on
                if not self._halt.is_set():
                    logger.warning(
                        "gc: pass failed (next in %.0f s): %s: %s",
                        interval_s,
                        type(exc).__name__,
                        exc,
                    )
                continue
            if done.deleted or done.over_replicated or done.entry_logs_removed:
                logger.info(
                    "gc: pass deleted %d ledgers (%d over-replicated), removed %d entry logs "
                    "(%d bytes)",
                    len(done.deleted) + len(done.over_replicated),
                    len(done.over_replicated),
                    done.entry_logs_removed,
                    done.reclaimed_bytes,
                )

    @property
    def running(self) -> bool:
        with self._state_lock:
            return self._state.running

    def run(
        self,
        *,
        force_major: bool = False,
        force_minor: bool = False,
        over_replicated_now: bool = False,
    ) -> GcRun:
        """One pass, then a major (or minor) compaction of the entry logs when forced;
        ``over_replicated_now``: the pass also removes over-replicated ledgers whatever the
        time since the last look (an operator's explicit fix). Raises MetaStoreException if the
        metadata cannot be listed (nothing is deleted then), BKException if the storage refuses
        a deletion or a compaction fails."""
        compaction = "major" if force_major else "minor" if force_minor else ""
        with self._run_lock:
            with self._state_lock:
                self._state.running = True
            try:
                done = self._pass(compaction, over_replicated_now)
            finally:
                with self._state_lock:
                    self._state.running = False
            with self._state_lock:
                if self._last_orphans is not None:
                    removed = {*done.deleted, *done.over_replicated}
                    self._last_orphans = LocalOrphans(
                        tuple(i for i in self._last_orphans.without_metadata if i not in removed),
                        tuple(i for i in self._last_orphans.over_replicated if i not in removed),
                    )
                self._state.runs += 1
                self._state.deleted_total += len(done.deleted)
                self._state.over_replicated_total += len(done.over_replicated)
                self._state.last = done
                if done.compaction == "major":
                    self._state.major_compactions += 1
                    self._state.last_major_ms = done.finished_ms
                elif done.compaction == "minor":
                    self._state.minor_compactions += 1
                    self._state.last_minor_ms = done.finished_ms
            return done

    def orphans(self) -> LocalOrphans:
        """What a pass would remove now, found with the same checks and removed by none:
        ledgers whose metadata is gone, and (given a bookie id) closed ledgers no ensemble
        names this bookie in. Raises MetaStoreException."""
        local = self._storage.list_ledgers()
        listed = set(self._store.list_ledgers())
        without = [i for i in local if i not in listed and self._metadata_gone(i)]
        over: list[int] = []
        if self._bookie_id is not None:
            for ledger_id in local:
                if ledger_id not in listed:
                    continue
                try:
                    if not self._must_keep(ledger_id):
                        over.append(ledger_id)
                except errors.NoSuchLedgerExistsOnMetadataServerException:
                    continue  # deleted meanwhile: the next look finds it without metadata
        found = LocalOrphans(tuple(without), tuple(over))
        with self._state_lock:
            self._last_orphans = found
        return found

    @property
    def last_orphans(self) -> LocalOrphans | None:
        """What the last ``orphans`` call found (None before the first), less what passes
        since have removed: cheap, for metrics."""
        with self._state_lock:
            return self._last_orphans

    def _pass(self, compaction: str, over_replicated_now: bool = False) -> GcRun:
        started = _now_ms()
        local = self._storage.list_ledgers()
        listed = set(self._store.list_ledgers())
        deleted = self._delete_gone(local, listed)
        over: list[int] = []
        now = time.monotonic()
        due = self._over_interval_s > 0 and now - self._last_over_check >= self._over_interval_s
        if self._bookie_id is not None and (due or over_replicated_now):
            over = self._remove_over_replicated([i for i in local if i in listed])
            self._last_over_check = now
        logs, freed, compacted = self._collect(compaction)
        return GcRun(
            started,
            _now_ms(),
            len(local),
            tuple(deleted),
            tuple(over),
            logs,
            freed,
            compacted,
            compaction,
        )

    def _delete_gone(self, local: list[int], listed: set[int]) -> list[int]:
        """Deletes the ledgers of ``local`` missing from ``listed`` whose metadata a second read
        confirms is gone; returns them."""
        deleted: list[int] = []
        for ledger_id in local:
            if ledger_id in listed:
                continue
            if self._halt.is_set():
                break  # the bookie is stopping: the next start goes on from here
            if not self._metadata_gone(ledger_id):
                continue  # created after the listing began
            try:
                self._storage.delete_ledger(ledger_id)
            except errors.NoSuchLedgerExistsException:
                continue  # deleted meanwhile by another pass or a client
            deleted.append(ledger_id)
            logger.info("gc: deleted ledger %d (its metadata is gone)", ledger_id)
        return deleted

    def _metadata_gone(self, ledger_id: int) -> bool:
        """Whether a second read of a ledger missing from a listing confirms its metadata is
        gone (BookKeeper's ``verifyMetadataOnGC``): false for one created meanwhile."""
        try:
            self._store.read_ledger_metadata(ledger_id)
        except errors.NoSuchLedgerExistsOnMetadataServerException:
            return True
        return False

    def _collect(self, compaction: str) -> tuple[int, int, int]:
        """Asks the storage's lifecycle to collect now, compacting as ``compaction`` says
        ("major", "minor" or "": none); returns (entry logs removed, bytes freed by removal
        and compaction, logs compacted)."""
        done = self._storage.collect(_COMPACTIONS[compaction])
        freed = done.gc.bytes_freed
        compacted = 0
        if done.compaction is not None:
            compacted = done.compaction.logs_compacted
            freed += done.compaction.bytes_freed
            logger.info(
                "gc: %s compaction rewrote %d entry logs (%d live bytes moved, %d freed)",
                compaction,
                compacted,
                done.compaction.bytes_moved,
                done.compaction.bytes_freed,
            )
        return done.gc.logs_removed, freed, compacted

    def _remove_over_replicated(self, ledgers: list[int]) -> list[int]:
        removed: list[int] = []
        holder = self._bookie_id
        if holder is None:
            return removed
        for ledger_id in ledgers:
            if self._halt.is_set():
                break
            try:
                if self._must_keep(ledger_id):
                    continue
                if not self._store.lock_ledger_against_replication(ledger_id, holder):
                    continue  # a worker is copying it (perhaps onto this bookie): next time
                try:
                    # Again under the lock: a worker may have put this bookie back meanwhile.
                    if self._must_keep(ledger_id):
                        continue
                    self._storage.delete_ledger(ledger_id)
                finally:
                    self._store.release_underreplicated_ledger(ledger_id)
            except (
                errors.NoSuchLedgerExistsOnMetadataServerException,  # deleted: the next pass
                errors.NoSuchLedgerExistsException,
            ):
                continue
            removed.append(ledger_id)
            logger.info("gc: removed ledger %d (over-replicated: no ensemble names us)", ledger_id)
        return removed

    def _must_keep(self, ledger_id: int) -> bool:
        """Whether this bookie must keep the ledger: it is open (its ensembles may still
        change) or one of its ensembles names this bookie."""
        md = self._store.read_ledger_metadata(ledger_id).value
        if not md.is_closed:
            return True
        return any(self._bookie_id in ensemble for ensemble in md.ensembles.values())

    def details(self) -> dict[str, object]:
        """BookKeeper's ``gc_details`` fields (compaction counters and times count the passes
        this collector forced; the storage's own timed compactions are in its metrics), and
        pybkx's own about ledger deletion and entry-log removal."""
        with self._state_lock:
            state = self._state
            last = state.last
            return {
                "forceCompacting": False,
                "majorCompacting": state.running and bool(last and last.compaction == "major"),
                "minorCompacting": state.running and bool(last and last.compaction == "minor"),
                "lastMajorCompactionTime": state.last_major_ms or state.created_ms,
                "lastMinorCompactionTime": state.last_minor_ms or state.created_ms,
                "lastEntryLocationCompactionTime": state.created_ms,
                "majorCompactionCounter": state.major_compactions,
                "minorCompactionCounter": state.minor_compactions,
                "entryLocationCompactionCounter": 0,
                "gcRunning": state.running,
                "gcRuns": state.runs,
                "deletedLedgerCounter": state.deleted_total,
                "overReplicatedLedgerCounter": state.over_replicated_total,
                "lastGcOverReplicatedLedgers": list(last.over_replicated) if last else [],
                "lastGcTime": last.finished_ms if last else None,
                "lastGcDeletedLedgers": list(last.deleted) if last else [],
                "lastGcEntryLogsRemoved": last.entry_logs_removed if last else 0,
                "lastGcReclaimedBytes": last.reclaimed_bytes if last else 0,
            }
