"""The auditor of AutoRecovery while elected, as BookKeeper's: it marks under-replicated the
ledgers of lost bookies when registrations change (after ``lostBookieRecoveryDelay`` when one
bookie is lost), and runs BookKeeper's periodic checks on their intervals (0 disables one; the
bookie check then runs once, at election):

- the bookie check (``auditorPeriodicBookieCheckInterval``): bookies named by ledgers and not
  registered; their ledgers are marked;
- the all-ledgers check (``auditorPeriodicCheckInterval``): every bookie of every ended segment
  is asked for the first and last entry it stores (and ``auditorLedgerVerificationPercentage``
  % of the others); ledgers with a fragment a bookie cannot give are marked with it;
- the placement check (``auditorPeriodicPlacementPolicyCheckInterval``): closed ledgers whose
  ensembles do not adhere to the placement policy are counted and logged (BookKeeper marks them
  only with its placement repair, which pybkx does not have);
- the replicas check (``auditorReplicasCheckInterval``): every bookie lists the entries it
  holds; ledgers whose entries have fewer than Qw copies are counted by how few, logged, and
  (unlike BookKeeper, which only reports them) marked with the bookies missing entries.

A check's completion is stamped in the store (``checkallledgersctime`` ...) and the first run
after an election waits out the rest of the interval since that stamp. Storing the
lost-bookie delay (``triggeraudit`` stores the value it has) wakes the auditor: the same value
or 0 runs the bookie audit at once, another value reschedules a delayed one.

The auditor only marks; it never copies data (the replication workers of ``auto`` do)."""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterator, Set
from dataclasses import dataclass

from pybkx import errors
from pybkx._core import BookieClient
from pybkx.client import BookKeeper
from pybkx.meta import LedgerMetadata, MetadataStore
from pybkx.meta.audit import AuditUnavailable, trigger_audit
from pybkx.recovery.checks import check_ledger, check_replicas, not_adhering_segments

__all__ = ["AuditUnavailable", "Auditor", "AuditorSettings", "trigger_audit"]

logger = logging.getLogger(__name__)

BOOKIE_CHECK = "bookie"
ALL_LEDGERS_CHECK = "checkallledgers"
PLACEMENT_CHECK = "placementpolicycheck"
REPLICAS_CHECK = "replicascheck"
#: The store stamp of each periodic check (the bookie check has none, as in BookKeeper).
_STAMPS = {
    ALL_LEDGERS_CHECK: "checkallledgersctime",
    PLACEMENT_CHECK: "placementpolicycheckctime",
    REPLICAS_CHECK: "replicascheckctime",
}


@dataclass(frozen=True)
class AuditorSettings:
    """The intervals of the periodic checks in seconds (0: off; the bookie check then runs
    once, when elected), BookKeeper's defaults."""

    bookie_check_s: int = 86_400
    all_ledgers_check_s: int = 604_800
    placement_check_s: int = 0
    replicas_check_s: int = 0
    verification_percentage: int = 0


class Auditor:
    """One elected term of the auditor: ``run()`` until ``stopped`` is set or the store
    fails. ``stats``: BookKeeper's auditor counters and gauges by name (kept across terms by
    the caller)."""

    def __init__(
        self,
        bk: BookKeeper,
        settings: AuditorSettings,
        stopped: threading.Event,
        pause: Callable[[float], None],
        poll_s: float,
        stats: Counter[str],
    ) -> None:
        self.bk = bk
        self.settings = settings
        self._stopped = stopped
        self._pause = pause
        self._poll_s = poll_s
        self.stats = stats
        self._v3: BookieClient | None = None

    # --- the loop --------------------------------------------------------------------------

    def run(self) -> None:
        """Audit until stopped. Raises MetaStoreException (the caller re-elects)."""
        store = self.bk.store
        trigger = _DelayTrigger(store)
        lost = _LostBookies(self.stats)
        due = self._first_runs()
        try:
            while not self._stopped.is_set():
                if not store.replication_enabled():
                    self._pause(self._poll_s)
                    continue
                # The delay (and a trigger) first, the registrations after: a trigger stored
                # once a bookie unregistered (a decommission's) then sees that bookie lost.
                delay, triggered = trigger.read()
                delayed_audit = self._audit_lost(lost, delay, triggered)
                if triggered:
                    logger.info("audit triggered (lostBookieRecoveryDelay stored again)")
                    self.bookie_check()
                self._run_due(due, delayed_audit=delayed_audit)
                self._pause(self._until(due))
        finally:
            if self._v3 is not None:
                self._v3.close()
                self._v3 = None

    def _audit_lost(self, lost: _LostBookies, delay: int, triggered: bool) -> bool:
        """Audit the lost bookies not audited yet whose delay is over (all of them when
        ``triggered``, when the delay is 0, or when more than one waits); True while the audit
        of one is still delayed. Raises MetaStoreException."""
        store = self.bk.store
        now = time.monotonic()
        alive = store.writable_bookies() | store.readonly_bookies()
        lost.update((store.all_bookies() | alive) - alive, now)
        unaudited = lost.current - lost.audited
        waiting = {b for b in unaudited if now - lost.since[b] < delay}
        ready = unaudited - waiting
        if triggered or (ready and (delay == 0 or len(unaudited) > 1)):
            ready, waiting = unaudited, set()
        if ready:
            self.audit(ready)
            lost.audited |= ready
        for bookie in waiting - lost.delayed:
            logger.info("%s is lost: its audit is delayed by %d s", bookie, delay)
            self.stats["NUM_BOOKIE_AUDITS_DELAYED"] += 1
        lost.delayed |= waiting
        return bool(waiting)

    def _first_runs(self) -> dict[str, float | None]:
        """When each check runs first (monotonic seconds; None: never): the bookie check at
        once; the others once their interval passed since their stamp in the store."""
        s = self.settings
        now, wall_ms = time.monotonic(), time.time() * 1000
        due: dict[str, float | None] = {BOOKIE_CHECK: now}
        for name, interval in (
            (ALL_LEDGERS_CHECK, s.all_ledgers_check_s),
            (PLACEMENT_CHECK, s.placement_check_s),
            (REPLICAS_CHECK, s.replicas_check_s),
        ):
            if interval <= 0:
                logger.info("the auditor's %s check is disabled", name)
                due[name] = None
                continue
            stamp = self.bk.store.check_ctime(_STAMPS[name])
            since_s = max(0.0, (wall_ms - stamp) / 1000) if stamp is not None else None
            wait = 0.0 if since_s is None or since_s > interval else interval - since_s
            due[name] = now + wait
        return due

    def _until(self, due: dict[str, float | None]) -> float:
        times = [t for t in due.values() if t is not None]
        if not times:
            return self._poll_s
        return max(0.0, min(self._poll_s, min(times) - time.monotonic()))

    def _run_due(self, due: dict[str, float | None], *, delayed_audit: bool) -> None:
        s = self.settings
        checks: tuple[tuple[str, int, Callable[[], bool]], ...] = (
            (BOOKIE_CHECK, s.bookie_check_s, self.bookie_check),
            (ALL_LEDGERS_CHECK, s.all_ledgers_check_s, self.check_all_ledgers),
            (PLACEMENT_CHECK, s.placement_check_s, self.placement_check),
            (REPLICAS_CHECK, s.replicas_check_s, self.replicas_check),
        )
        for name, interval, check in checks:
            at = due[name]
            if at is None or time.monotonic() < at or self._stopped.is_set():
                continue
            due[name] = time.monotonic() + interval if interval > 0 else None
            if delayed_audit:
                # A delayed audit of a lost bookie is pending: the operator asked not to mark
                # its ledgers yet, and a check would.
                logger.info("a bookie audit is delayed: skipping the %s check", name)
                self.stats["NUM_SKIPPING_CHECK_TASK_TIMES"] += 1
                continue
            started = time.monotonic()
            completed = check()
            if completed and name in _STAMPS:
                self.bk.store.set_check_ctime(_STAMPS[name], int(time.time() * 1000))
            logger.info(
                "the auditor's %s check %s in %.1f s",
                name,
                "completed" if completed else "was cut short",
                time.monotonic() - started,
            )

    def _go_on(self) -> bool:
        return not self._stopped.is_set() and self.bk.store.replication_enabled()

    def _closed_or_open(self) -> Iterator[tuple[int, LedgerMetadata]]:
        """Every ledger's id and metadata (ledgers deleted meanwhile left out)."""
        store = self.bk.store
        for ledger_id in store.list_ledgers():
            try:
                yield ledger_id, store.read_ledger_metadata(ledger_id).value
            except errors.NoSuchLedgerExistsOnMetadataServerException:
                continue

    # --- the checks --------------------------------------------------------------------------

    def audit(self, lost: Collection[str]) -> list[int]:
        """Mark every ledger with a segment on a bookie of ``lost`` under-replicated; their ids.
        Raises MetaStoreException."""
        store = self.bk.store
        marked = []
        lost = frozenset(lost)
        for ledger_id, md in self._closed_or_open():
            missing = lost & {b for bookies in md.ensembles.values() for b in bookies}
            if missing:
                store.mark_ledger_underreplicated(ledger_id, missing)
                marked.append(ledger_id)
        self.stats["NUM_UNDER_REPLICATED_LEDGERS"] += len(marked)
        logger.info(
            "audit of lost bookies %s: %d ledgers under-replicated", sorted(lost), len(marked)
        )
        return marked

    def bookie_check(self) -> bool:
        """BookKeeper's bookie check: the bookies ledgers name that are not registered are
        lost; their ledgers are marked. Raises MetaStoreException."""
        store = self.bk.store
        alive = store.writable_bookies() | store.readonly_bookies()
        by_bookie: dict[str, list[int]] = {}
        for ledger_id, md in self._closed_or_open():
            for bookie in {b for bookies in md.ensembles.values() for b in bookies} - alive:
                by_bookie.setdefault(bookie, []).append(ledger_id)
        for bookie, ledgers in sorted(by_bookie.items()):
            logger.info("bookie check: %s is lost; marking its %d ledgers", bookie, len(ledgers))
            for ledger_id in ledgers:
                store.mark_ledger_underreplicated(ledger_id, [bookie])
            self.stats["NUM_UNDER_REPLICATED_LEDGERS"] += len(ledgers)
        return True

    def check_all_ledgers(self) -> bool:
        """BookKeeper's check of all ledgers; False when cut short (stopped, disabled).
        Raises MetaStoreException."""
        store = self.bk.store
        alive = store.writable_bookies() | store.readonly_bookies()
        marked = 0
        for ledger_id, md in self._closed_or_open():
            if not self._go_on():
                return False
            fragments = check_ledger(
                self.bk.bookies,
                self.bk.address_of,
                alive,
                ledger_id,
                md,
                self.settings.verification_percentage,
            )
            self.stats["NUM_LEDGERS_CHECKED"] += 1
            if not fragments:
                continue
            bookies = sorted({f.ensemble[i] for f in fragments for i in f.lost})
            logger.warning(
                "ledger %d: fragments from entries %s cannot be read from %s: marking it",
                ledger_id,
                [f.first for f in fragments],
                bookies,
            )
            store.mark_ledger_underreplicated(ledger_id, bookies)
            marked += 1
        self.stats["NUM_UNDER_REPLICATED_LEDGERS"] += marked
        self.stats["pybkx_LEDGERS_MARKED_BY_LEDGER_CHECK"] += marked
        return True

    def placement_check(self) -> bool:
        """BookKeeper's placement-policy check of closed ledgers: counted and logged, never
        marked. False when cut short. Raises MetaStoreException."""
        failing = soft = audited = 0
        for ledger_id, md in self._closed_or_open():
            if not self._go_on():
                return False
            if not md.is_closed:
                continue
            verdicts = not_adhering_segments(self.bk.placement, md)
            audited += 1
            if any(v.name == "FAIL" for v in verdicts.values()):
                failing += 1
                logger.warning(
                    "ledger %d: the segments from entries %s do not adhere to the placement policy",
                    ledger_id,
                    sorted(f for f, v in verdicts.items() if v.name == "FAIL"),
                )
            elif verdicts:
                soft += 1
        self.stats["NUM_LEDGERS_NOT_ADHERING_TO_PLACEMENT_POLICY"] = failing
        self.stats["NUM_LEDGERS_SOFTLY_ADHERING_TO_PLACEMENT_POLICY"] = soft
        logger.info(
            "placement check: %d closed ledgers, %d not adhering, %d softly adhering",
            audited,
            failing,
            soft,
        )
        return True

    def replicas_check(self) -> bool:
        """BookKeeper's replicas check of closed ledgers not already marked; a ledger whose
        entries lack copies is also marked (pybkx). False when cut short. Raises
        MetaStoreException."""
        store = self.bk.store
        if self._v3 is None:
            config = self.bk.config.with_overrides(
                {"useV2WireProtocol": False}, source="the auditor's replicas check"
            )
            self._v3 = BookieClient(config, self.bk.tls_material, self.bk.sasl_credentials)
        alive = store.writable_bookies() | store.readonly_bookies()
        marked_before = set(store.underreplicated_ledgers())
        none = below_aq = below_wq = 0
        for ledger_id, md in self._closed_or_open():
            if not self._go_on():
                return False
            if not md.is_closed or ledger_id in marked_before:
                continue
            finding = check_replicas(self._v3, self.bk.address_of, alive, ledger_id, md)
            if finding.unavailable:
                logger.warning(
                    "replicas check: ledger %d: %s could not be asked",
                    ledger_id,
                    sorted(finding.unavailable),
                )
            if not finding.missing:
                continue
            least = finding.least_copies
            if least == 0:
                none += 1
            elif least < finding.ack_quorum:
                below_aq += 1
            else:
                below_wq += 1
            logger.error(
                "replicas check: ledger %d has an entry with %d of %d copies; missing: %s",
                ledger_id,
                least,
                finding.write_quorum,
                {b: _runs_text(e) for b, e in finding.missing.items()},
            )
            store.mark_ledger_underreplicated(ledger_id, sorted(finding.missing))
            self.stats["NUM_UNDER_REPLICATED_LEDGERS"] += 1
        self.stats["NUM_LEDGERS_HAVING_NO_REPLICA_OF_AN_ENTRY"] = none
        self.stats["NUM_LEDGERS_HAVING_LESS_THAN_AQ_REPLICAS_OF_AN_ENTRY"] = below_aq
        self.stats["NUM_LEDGERS_HAVING_LESS_THAN_WQ_REPLICAS_OF_AN_ENTRY"] = below_wq
        return True


class _DelayTrigger:
    """The lost-bookie delay as the auditor last read it. BookKeeper's ``triggeraudit`` stores
    the delay again: a new version of it holding 0, or the value it had, means "audit now"."""

    def __init__(self, store: MetadataStore) -> None:
        self._store = store
        self._seen_version = store.lost_bookie_recovery_delay_version()
        self._previous_delay = store.lost_bookie_recovery_delay() or 0

    def read(self) -> tuple[int, bool]:
        """The delay in seconds, and whether it was stored again since the last read. Raises
        MetaStoreException."""
        # The version before the value: a store between the two reads is seen as a change on
        # the next read, never as a trigger with a stale value.
        version = self._store.lost_bookie_recovery_delay_version()
        delay = self._store.lost_bookie_recovery_delay() or 0
        if version == self._seen_version:
            return delay, False
        self._seen_version = version
        triggered = delay == 0 or delay == self._previous_delay
        self._previous_delay = delay
        return delay, triggered


class _LostBookies:
    """The bookies lost during one term of the auditor: since when (``since``), which were
    audited, and which have an audit delayed. A bookie that comes back is forgotten, and its
    delayed audit counted as cancelled."""

    def __init__(self, stats: Counter[str]) -> None:
        self._stats = stats
        self.since: dict[str, float] = {}
        self.audited: set[str] = set()
        self.delayed: set[str] = set()

    @property
    def current(self) -> set[str]:
        return set(self.since)

    def update(self, lost: Set[str], now: float) -> None:
        """The bookies lost ``now``: new ones start their delay, returned ones are forgotten."""
        for bookie in lost - set(self.since):
            self.since[bookie] = now
        for bookie in set(self.since) - lost:
            del self.since[bookie]
            if bookie in self.delayed - self.audited:
                self._stats["NUM_DELAYED_BOOKIE_AUDITS_CANCELLED"] += 1
            self.audited.discard(bookie)
            self.delayed.discard(bookie)


def _runs_text(entries: list[int]) -> str:
    """``0-9,12`` for sorted entry ids."""
    runs: list[str] = []
    start = prev = entries[0]
    for entry in [*entries[1:], None]:
        if entry is not None and entry == prev + 1:
            prev = entry
            continue
        runs.append(str(start) if start == prev else f"{start}-{prev}")
        if entry is not None:
            start = prev = entry
    return ",".join(runs)
