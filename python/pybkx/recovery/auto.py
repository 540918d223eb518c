"""AutoRecovery, as BookKeeper runs it: on every node a replication worker, and on one node of
the cluster (elected through the metadata store) the auditor.

The auditor (``pybkx.recovery.auditor``) marks the ledgers of lost bookies and runs
BookKeeper's periodic checks. A worker takes a marker under its lock, copies the fragments that
name lost bookies (the copy engine of manual recovery) and the fragments of ended segments a
registered bookie misses (checked as the auditor does: the first and last entry each bookie
stores, and the entries the marker's registered bookies list), then deletes the marker. An
open ledger's ended segments are copied under its writer; one whose last segment lost a bookie
is left to its writer for ``openLedgerRereplicationGracePeriod``, then fenced and closed so
that no writer can add to the fragment being copied. A ledger deleted meanwhile is just
unmarked; a failing one is released and tried again after ``rwRereplicateBackoffMs``.

A worker only heals what a marker names; it never marks a ledger itself (the auditor does)."""

from __future__ import annotations

import logging
import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from pybkx import errors
from pybkx._core import BookieClient, Metric
from pybkx.client import BookKeeper, ReadHandle
from pybkx.meta import Election, LedgerMetadata
from pybkx.recovery.auditor import Auditor, AuditorSettings
from pybkx.recovery.bookies import (
    RecoveryOptions,
    RecoveryReport,
    heal_fragments,
    heal_ledger,
)
from pybkx.recovery.checks import (
    check_ledger,
    check_replicas,
    merge_fragments,
    missing_fragments,
)
from pybkx.recovery.copy import FragmentUnreadable
from pybkx.recovery.fragments import Fragment
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
    auditor: AuditorSettings = field(default_factory=AuditorSettings)


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
        self._v3: BookieClient | None = None
        self.ledgers_replicated = 0
        self.auditor_stats: Counter[str] = Counter()

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
        if self._v3 is not None:
            self._v3.close()
            self._v3 = None

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
        auditor = Auditor(
            self.bk,
            self.settings.auditor,
            self._stopped,
            self._pause,
            self.settings.poll_s,
            self.auditor_stats,
        )
        try:
            auditor.run()
        except errors.BKException as exc:
            logger.warning("auditor: %s: %s", type(exc).__name__, exc)

    def metrics(self) -> list[Metric]:
        """BookKeeper's auditor and replication worker stats of this node (names scoped as
        its Prometheus provider's: ``auditor_...``, ``replication_worker_...``)."""
        # dict() copies in one step: the auditor's thread may add a name meanwhile.
        stats = dict(self.auditor_stats)
        out: list[Metric] = [
            Metric(f"auditor_{name}", "counter", "count", {}, value)
            for name, value in sorted(stats.items())
        ]
        out.append(
            Metric(
                "replication_worker_NUM_FULL_OR_PARTIAL_LEDGERS_REPLICATED",
                "counter",
                "count",
                {},
                self.ledgers_replicated,
            )
        )
        return out

    # --- the worker -----------------------------------------------------------------------

    def _work(self) -> None:
        store = self.bk.store
        while not self._stopped.is_set():
            worked = False
            try:
                if store.replication_enabled():
                    markers = store.underreplicated_ledgers()
                    order = list(markers)
                    random.shuffle(order)
                    for ledger_id in order:
                        if self._stopped.is_set():
                            break
                        version = store.lock_underreplicated_ledger(ledger_id, self.node_id)
                        if version is not None:
                            worked |= self._replicate_locked(ledger_id, version, markers[ledger_id])
            except errors.BKException as exc:
                logger.warning("replication worker: %s: %s", type(exc).__name__, exc)
            if not worked:
                self._pause(self.settings.poll_s)

    def _replicate_locked(self, ledger_id: int, version: int, suspects: list[str]) -> bool:
        """Heal one locked ledger; True when its marker could be deleted."""
        store = self.bk.store
        try:
            done = self._replicate(ledger_id, suspects)
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

    def _replicate(self, ledger_id: int, suspects: list[str]) -> bool:
        """Copy what lost bookies held and what registered ones miss; True when no segment
        names a lost bookie and every ended segment's bookies have their entries (or the
        ledger is gone), False to come back later (an open ledger in its grace period, a
        copy left to do). ``suspects``: the bookies the marker names."""
        store = self.bk.store
        try:
            md = store.read_ledger_metadata(ledger_id).value
        except errors.NoSuchLedgerExistsOnMetadataServerException:
            return True
        alive = store.writable_bookies() | store.readonly_bookies()
        lost = frozenset(b for bookies in md.ensembles.values() for b in bookies) - alive
        handle: ReadHandle | None = None
        options = RecoveryOptions(rate_bytes_per_s=self.settings.rate_bytes_per_s)
        report = RecoveryReport(lost=tuple(lost))
        if lost:
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
            heal_ledger(self.bk, handle, lost, options, report, _ignore, self._rate)
            md = handle.refresh_metadata()
            if lost & {b for bookies in md.ensembles.values() for b in bookies}:
                return False
        # Ended segments only (an open ledger's last one is its writer's): copied under it.
        missing = self._missing_fragments(ledger_id, md, alive, set(suspects) & alive)
        if not missing:
            return True
        if handle is None:
            handle = self.bk.open_ledger(ledger_id, md.password, recovery=False)
        heal_fragments(self.bk, handle, missing, options, report, _ignore, self._rate)
        md = handle.refresh_metadata()
        return not self._missing_fragments(ledger_id, md, alive, set())

    def _missing_fragments(
        self, ledger_id: int, md: LedgerMetadata, alive: frozenset[str], suspects: set[str]
    ) -> list[Fragment]:
        """The ended segments' fragments registered bookies cannot give: the ledger check's
        (first and last entry per bookie), and for ``suspects`` (registered bookies a marker
        names) the entries they do not list."""
        found = check_ledger(
            self.bk.bookies,
            self.bk.address_of,
            alive,
            ledger_id,
            md,
            self.settings.auditor.verification_percentage,
        )
        named = suspects & {b for bookies in md.ensembles.values() for b in bookies}
        if not named:
            return found
        if self._v3 is None:
            config = self.bk.config.with_overrides(
                {"useV2WireProtocol": False}, source="the replication worker"
            )
            self._v3 = BookieClient(config, self.bk.tls_material, self.bk.sasl_credentials)
        finding = check_replicas(self._v3, self.bk.address_of, named, ledger_id, md)
        return merge_fragments(found, missing_fragments(md, finding))


def _ignore(_: int) -> None:
    """No progress to report from a worker."""
