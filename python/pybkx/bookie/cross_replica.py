"""The bookie's cross-replica checker: in the scrubber's cycle (every ``scrubIntervalSeconds``,
paced to ``scrubRateBytesPerSecond`` of replica reads) it compares the replicas of the closed
ledgers it stores, for the fragments whose ensemble it heads (so one bookie checks each
fragment), repairs the odd one out (``bookie.replica_check``), logs each finding once and
counts them; it also runs a check asked for (admin API). It needs the admin HTTP API to ask its
peers (the admin service hands it the way). It never changes ledger metadata.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from pybkx import errors
from pybkx._core import BookieClient, LedgerStorage, Metric
from pybkx.bookie.exceptions import BookieError
from pybkx.bookie.replica_access import AdminReplicas, AskBookie
from pybkx.bookie.replica_check import LedgerCheck, ReplicaFinding, check_ledger
from pybkx.config import ServerConfig
from pybkx.meta import LedgerMetadata, MetadataStore

__all__ = ["CrossReplicaChecker", "ReplicaCounts"]

logger = logging.getLogger(__name__)

#: Findings remembered as logged, so one seen again by the next cycle is not logged again.
MAX_REMEMBERED_FINDINGS = 10_000
#: Findings of the last run shown by the status, and entries shown per finding.
MAX_SHOWN = 100


@dataclass
class ReplicaCounts:
    """What the checker did since the bookie started (``pybkx_scrub_replica_*``)."""

    runs: int = 0
    ranges: int = 0
    entries: int = 0
    differing: int = 0
    repaired: int = 0
    unrepaired: int = 0
    not_asked: int = 0

    def add(self, check: LedgerCheck) -> None:
        self.ranges += check.ranges
        self.entries += check.entries
        self.differing += check.differing
        self.repaired += check.repaired
        self.unrepaired += check.unrepaired
        self.not_asked += len(check.not_asked)


class CrossReplicaChecker:
    """Checks the replicas of the closed ledgers ``storage`` holds whose fragments this bookie
    (``bookie_id``) heads; ``client_of`` and ``address_of`` reach the bookies' RPC ports (the
    scrub repairer's)."""

    def __init__(
        self,
        storage: LedgerStorage,
        store: MetadataStore,
        config: ServerConfig,
        bookie_id: str,
        client_of: Callable[[], BookieClient],
        address_of: Callable[[str], str],
    ) -> None:
        self._storage = storage
        self._store = store
        self._config = config
        self._bookie_id = bookie_id
        self._client_of = client_of
        self._address_of = address_of
        self._ask: AskBookie | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._running = threading.Lock()
        self._logged: OrderedDict[tuple[object, ...], None] = OrderedDict()
        self.counts = ReplicaCounts()
        self.last_run: LedgerCheck | None = None

    @property
    def enabled(self) -> bool:
        """Whether the check runs in the scrubber's cycle (``crossReplicaCheckEnabled`` and a
        background scrubber)."""
        config = self._config
        return (
            config.cross_replica_check_enabled
            and config.scrub_interval_s > 0
            and config.scrub_rate_bytes_per_second > 0
        )

    def use_peers(self, ask: AskBookie) -> None:
        """How to reach the other bookies' admin endpoints; starts the background cycle (when
        enabled) the first time."""
        with self._lock:
            self._ask = ask
            if self._thread is not None or not self.enabled or self._stop.is_set():
                return
            self._thread = threading.Thread(
                target=self._loop, name="pybkx-scrub-replicas", daemon=True
            )
            self._thread.start()

    def stop(self, timeout_s: float) -> bool:
        """Stop the cycle; False if a check was still running after ``timeout_s``."""
        self._stop.set()
        thread = self._thread
        if thread is not None:
            thread.join(timeout_s)
            return not thread.is_alive()
        return True

    def _loop(self) -> None:
        while not self._stop.wait(self._config.scrub_interval_s):
            try:
                self.run(pace=True)
            except (errors.BKException, BookieError) as exc:
                logger.warning("cross-replica check stopped: %s: %s", type(exc).__name__, exc)

    # --- runs

    def run(self, *, pace: bool = False, repair: bool = True) -> LedgerCheck | None:
        """Check every closed ledger this bookie stores, for the fragments it heads; None if a
        run is already going on. Raises BookieError (no way to the peers), MetaStoreException."""
        replicas = self._replicas()
        if not self._running.acquire(blocking=False):
            return None
        try:
            done = LedgerCheck()
            for ledger_id in self._storage.list_ledgers():
                if self._stop.is_set():
                    break
                md = self._closed_metadata(ledger_id)
                if md is None:
                    continue
                check = check_ledger(
                    replicas,
                    ledger_id,
                    md,
                    repair=repair,
                    first_bookie=self._bookie_id,
                    pace=self._pace if pace else None,
                )
                self._account(check)
                done.add(check)
            with self._lock:
                self.counts.runs += 1
                self.last_run = done
            self._log_not_asked(done)
            return done
        finally:
            self._running.release()

    def run_in_background(self, *, repair: bool = True) -> None:
        """``run`` (unpaced) on a thread of its own; its outcome in ``status``. Raises
        BookieError (no way to the peers)."""
        self._replicas()  # fails now, not on the thread
        thread = threading.Thread(
            target=self._run_logged, args=(repair,), name="pybkx-scrub-replicas-run", daemon=True
        )
        thread.start()

    def _run_logged(self, repair: bool) -> None:
        try:
            self.run(repair=repair)
        except (errors.BKException, BookieError) as exc:
            logger.error("cross-replica check failed: %s: %s", type(exc).__name__, exc)

    def check(self, ledger_id: int, *, repair: bool = True) -> LedgerCheck:
        """Check every fragment of one closed ledger now, whoever heads it. Raises
        NoSuchLedgerExistsOnMetadataServerException, ValueError (not closed), BookieError
        (no way to the peers), MetaStoreException."""
        replicas = self._replicas()
        md = self._store.read_ledger_metadata(ledger_id).value
        check = check_ledger(replicas, ledger_id, md, repair=repair)
        self._account(check)
        self._log_not_asked(check)
        return check

    @property
    def running(self) -> bool:
        return self._running.locked()

    def _replicas(self) -> AdminReplicas:
        ask = self._ask
        if ask is None:
            raise BookieError("the cross-replica check needs the admin HTTP server")
        return AdminReplicas(
            ask, self._client_of(), self._address_of, (self._bookie_id, self._storage)
        )

    def _closed_metadata(self, ledger_id: int) -> LedgerMetadata | None:
        try:
            md = self._store.read_ledger_metadata(ledger_id).value
        except errors.NoSuchLedgerExistsOnMetadataServerException:
            return None  # garbage collection's business
        return md if md.is_closed else None

    def _pace(self, read_bytes: int) -> bool:
        """Wait as long as ``read_bytes`` take at the rate; False once stopping."""
        rate = self._config.scrub_rate_bytes_per_second
        return not self._stop.wait(read_bytes / rate) if rate > 0 else not self._stop.is_set()

    # --- findings

    def _account(self, check: LedgerCheck) -> None:
        with self._lock:
            self.counts.add(check)
        for finding in check.findings:
            self._log_once(finding)

    @staticmethod
    def _log_not_asked(check: LedgerCheck) -> None:
        """Once per run (not per ledger): the bookies whose copies were not compared."""
        for bookie, why in sorted(check.not_asked.items()):
            logger.warning("cross-replica check: %s could not be asked: %s", bookie, why)

    def _log_once(self, f: ReplicaFinding) -> None:
        key = (f.ledger_id, f.bookie, f.kind, f.entries, f.repaired)
        with self._lock:
            if key in self._logged:
                return
            self._logged[key] = None
            while len(self._logged) > MAX_REMEMBERED_FINDINGS:
                self._logged.popitem(last=False)
        shown = ",".join(str(e) for e in f.entries[:10]) + ("..." if len(f.entries) > 10 else "")
        if f.repaired and len(f.repaired) == len(f.entries):
            logger.warning(
                "cross-replica check: ledger %d: %s's copies of %d entries (%s) %s; rewritten "
                "from %s",
                f.ledger_id,
                f.bookie,
                len(f.entries),
                shown,
                "were missing" if f.kind == "missing" else "differed from the majority",
                f.source,
            )
            return
        logger.error(
            "cross-replica check: ledger %d: %s's copies of %d entries (%s): %s; %s",
            f.ledger_id,
            f.bookie,
            len(f.entries),
            shown,
            f.kind,
            f.detail or "not repaired",
        )

    def status(self) -> dict[str, object]:
        """The counts, whether a run goes on, and the last background run's findings."""
        counts = self.counts
        last = self.last_run
        return {
            "enabled": self.enabled,
            "running": self.running,
            "counts": {
                "runs": counts.runs,
                "ranges": counts.ranges,
                "entries": counts.entries,
                "differing": counts.differing,
                "repaired": counts.repaired,
                "unrepaired": counts.unrepaired,
                "notAsked": counts.not_asked,
            },
            "lastRun": None if last is None else _shown(last.as_json()),
        }

    def metrics(self) -> list[Metric]:
        """The counts as ``pybkx_scrub_replica_*`` counters."""
        c = self.counts
        return [
            Metric(name, "counter", "count", {}, value)
            for name, value in (
                ("pybkx_scrub_replica_runs", c.runs),
                ("pybkx_scrub_replica_ranges_compared", c.ranges),
                ("pybkx_scrub_replica_entries_compared", c.entries),
                ("pybkx_scrub_replica_differing_entries", c.differing),
                ("pybkx_scrub_replica_repaired_entries", c.repaired),
                ("pybkx_scrub_replica_unrepaired_entries", c.unrepaired),
                ("pybkx_scrub_replica_bookies_not_asked", c.not_asked),
            )
        ]


def _shown(run: dict[str, object]) -> dict[str, object]:
    """A run's JSON with at most ``MAX_SHOWN`` findings, each listing at most ``MAX_SHOWN``
    entries (the counts stay whole), so a status answer stays small."""
    findings = run.get("findings")
    if not isinstance(findings, list):
        return run
    shown = []
    for finding in findings[:MAX_SHOWN]:
        trimmed = dict(finding)
        for key in ("entries", "repaired"):
            listed = trimmed.get(key)
            if isinstance(listed, list) and len(listed) > MAX_SHOWN:
                trimmed[key] = listed[:MAX_SHOWN]
                trimmed[f"{key}Count"] = len(listed)
        shown.append(trimmed)
    return {**run, "findings": shown, "findingsCount": len(findings)}
