"""AutoRecovery, as BookKeeper runs it: on every node a replication worker, and on one node of
the cluster (elected through the metadata store) the auditor.

The auditor watches which bookies are registered. A bookie that joined once (it has a cookie)
and is neither writable nor read-only is lost; after ``lostBookieRecoveryDelay`` seconds (at
once when more than one is lost) every ledger with a segment on it is marked under-replicated.
A worker takes a marker under its lock, copies the fragments that name lost bookies (the copy
engine of manual recovery), and deletes the marker. An open ledger whose last segment lost a
bookie is left to its writer for ``openLedgerRereplicationGracePeriod``, then fenced and closed
so that no writer can add to the fragment being copied. A ledger deleted meanwhile is just
unmarked; a failing one is released and tried again after ``rwRereplicateBackoffMs``."""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from pybkx import errors
from pybkx.client import BookKeeper
from pybkx.meta import Election
from pybkx.recovery.bookies import RecoveryOptions, RecoveryReport, heal_ledger
from pybkx.recovery.copy import FragmentUnreadable
from pybkx.recovery.rate import ByteRate

__all__ = ["AutoRecovery", "AutoRecoverySettings"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class AutoRecoverySettings:
    """BookKeeper's AutoRecovery keys, in seconds. ``poll_s``: how often an idle worker and
    the auditor look again (they also wake on every registration change)."""

    lost_bookie_recovery_delay_s: int = 0
    open_ledger_grace_s: float = 30.0
    backoff_s: float = 5.0
    rate_bytes_per_s: int | None = None
    poll_s: float = 1.0


class AutoRecovery:
    """The auditor elector and the replication worker of one node, on their own threads.
    ``start()`` once, ``stop()`` to end both (bounded by the copy in progress)."""

    def __init__(self, bk: BookKeeper, node_id: str, settings: AutoRecoverySettings) -> None:
        self.bk = bk
        self.node_id = node_id
        self.settings = settings
        self._stopped = threading.Event()
        self._changed = threading.Event()
        self._rate = ByteRate(settings.rate_bytes_per_s)
        self._open_since: dict[int, float] = {}
        self._election: Election | None = None
        self._threads: list[threading.Thread] = []
        self._unwatch: Callable[[], None] | None = None
        self.ledgers_replicated = 0

    # --- life -----------------------------------------------------------------------------

    def start(self) -> None:
        """Start the auditor elector and the worker. Raises MetaStoreException."""
        store = self.bk.store
        if store.lost_bookie_recovery_delay() is None:
            store.set_lost_bookie_recovery_delay(self.settings.lost_bookie_recovery_delay_s)
        self._unwatch = store.watch_bookies(lambda *_: self._changed.set())
        for name, target in (("auditor", self._elect), ("replication-worker", self._work)):
            thread = threading.Thread(target=target, name=f"pybkx-{name}", daemon=True)
            thread.start()
            self._threads.append(thread)
        logger.info("AutoRecovery started on %s", self.node_id)

    def stop(self, timeout: float = 30.0) -> None:
        """Stop both threads (waits up to ``timeout`` seconds for a copy to end). Idempotent."""
        self._stopped.set()
        self._changed.set()
        if self._election is not None:
            self._election.cancel()
        if self._unwatch is not None:
            self._unwatch()
            self._unwatch = None
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        self._threads.clear()

    def _pause(self, seconds: float) -> None:
        self._changed.wait(seconds)
        self._changed.clear()

    # --- the auditor ----------------------------------------------------------------------

    def _elect(self) -> None:
        while not self._stopped.is_set():
            try:
                self._election = self.bk.store.auditor_election(self.node_id)
                self._election.run(self._audit_while_elected)
            except errors.BKException as exc:
                logger.warning("auditor election: %s: %s", type(exc).__name__, exc)
            self._stopped.wait(self.settings.poll_s)

    def _audit_while_elected(self) -> None:
        logger.info("%s is the auditor", self.node_id)
        store = self.bk.store
        audited: set[str] = set()
        lost_at: dict[str, float] = {}
        while not self._stopped.is_set():
            try:
                alive = store.writable_bookies() | store.readonly_bookies()
                lost = (store.all_bookies() | alive) - alive
                now = time.monotonic()
                for bookie in lost:
                    lost_at.setdefault(bookie, now)
                for bookie in set(lost_at) - lost:  # came back
                    del lost_at[bookie]
                    audited.discard(bookie)
                delay = store.lost_bookie_recovery_delay() or 0
                due = {
                    b
                    for b in lost - audited
                    if delay == 0 or len(lost) > 1 or now - lost_at[b] >= delay
                }
                if due and store.replication_enabled():
                    self.audit(due)
                    audited |= due
            except errors.BKException as exc:
                logger.warning("auditor: %s: %s", type(exc).__name__, exc)
            self._pause(self.settings.poll_s)

    def audit(self, lost: set[str]) -> list[int]:
        """Mark every ledger with a segment on a bookie of ``lost`` under-replicated; their ids.
        Raises MetaStoreException."""
        store = self.bk.store
        marked = []
        for ledger_id in store.list_ledgers():
            try:
                md = store.read_ledger_metadata(ledger_id).value
            except errors.NoSuchLedgerExistsOnMetadataServerException:
                continue
            missing = lost & {b for bookies in md.ensembles.values() for b in bookies}
            if missing:
                store.mark_ledger_underreplicated(ledger_id, missing)
                marked.append(ledger_id)
        logger.info(
            "audit of lost bookies %s: %d ledgers under-replicated", sorted(lost), len(marked)
        )
        return marked

    # --- the worker -----------------------------------------------------------------------

    def _work(self) -> None:
        store = self.bk.store
        while not self._stopped.is_set():
            worked = False
            try:
                if store.replication_enabled():
                    markers = list(store.underreplicated_ledgers())
                    random.shuffle(markers)
                    for ledger_id in markers:
                        if self._stopped.is_set():
                            break
                        version = store.lock_underreplicated_ledger(ledger_id, self.node_id)
                        if version is not None:
                            worked |= self._replicate_locked(ledger_id, version)
            except errors.BKException as exc:
                logger.warning("replication worker: %s: %s", type(exc).__name__, exc)
            if not worked:
                self._pause(self.settings.poll_s)

    def _replicate_locked(self, ledger_id: int, version: int) -> bool:
        """Heal one locked ledger; True when its marker could be deleted."""
        store = self.bk.store
        try:
            done = self._replicate(ledger_id)
        except (FragmentUnreadable, errors.BKException) as exc:
            logger.warning(
                "ledger %d not replicated (retry in %g s): %s: %s",
                ledger_id,
                self.settings.backoff_s,
                type(exc).__name__,
                exc,
            )
            self._stopped.wait(self.settings.backoff_s)
            store.release_underreplicated_ledger(ledger_id)
            return False
        if not done:
            store.release_underreplicated_ledger(ledger_id)
            return False
        if store.mark_ledger_replicated(ledger_id, version):
            self.ledgers_replicated += 1
            logger.info("ledger %d replicated", ledger_id)
        return True

    def _replicate(self, ledger_id: int) -> bool:
        """Copy what lost bookies held; True when no segment names one any more (or the
        ledger is gone), False to come back later (an open ledger in its grace period)."""
        store = self.bk.store
        try:
            md = store.read_ledger_metadata(ledger_id).value
        except errors.NoSuchLedgerExistsOnMetadataServerException:
            return True
        alive = store.writable_bookies() | store.readonly_bookies()
        lost = frozenset(b for bookies in md.ensembles.values() for b in bookies) - alive
        if not lost:
            return True
        fence = not md.is_closed and bool(lost & set(md.last_ensemble))
        if fence:
            since = self._open_since.setdefault(ledger_id, time.monotonic())
            if time.monotonic() - since < self.settings.open_ledger_grace_s:
                return False
            logger.info(
                "ledger %d: open with a lost bookie past the grace period: fencing", ledger_id
            )
        # Only fencing ends an open last segment; earlier segments are copied under a writer.
        handle = self.bk.open_ledger(ledger_id, md.password, recovery=fence)
        self._open_since.pop(ledger_id, None)
        options = RecoveryOptions(rate_bytes_per_s=self.settings.rate_bytes_per_s)
        heal_ledger(
            self.bk, handle, lost, options, RecoveryReport(lost=tuple(lost)), _ignore, self._rate
        )
        md = handle.refresh_metadata()
        return not (lost & {b for bookies in md.ensembles.values() for b in bookies})


def _ignore(_: int) -> None:
    """No progress to report from a worker."""
