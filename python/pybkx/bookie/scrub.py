"""The bookie's side of the scrubber: takes the damaged entries the storage's scrubber found
(``LedgerStorage.take_scrub_findings``) and repairs each from another replica. It asks the
ledger's metadata for the entry's write set, reads the entry from another bookie of it, checks
the client digest with the ledger's digest type and password, and writes it back into the local
storage as a recovery add (the index then points at the new copy; reads refused until then are
served again). It also runs a scrub now when asked (admin API) and keeps the figures of the
last run. It decides nothing the storage checks; it never changes the ledger's metadata.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import asdict, dataclass, field

from pybkx import errors
from pybkx._core import (
    BookieClient,
    DigestManager,
    LedgerStorage,
    Metric,
    ScrubFinding,
    ScrubReport,
    master_key,
)
from pybkx.bookie.cross_replica import CrossReplicaChecker
from pybkx.bookie.exceptions import BookieError
from pybkx.bookie.serving import close_storage_after_failure
from pybkx.config import ClientConfig, ServerConfig
from pybkx.config.tls import client_tls_material
from pybkx.meta import MetadataStore

__all__ = [
    "REPAIR_READ_TIMEOUT_S",
    "RepairCounts",
    "ScrubRepairer",
    "check_consistency_on_startup",
    "report_dict",
]

logger = logging.getLogger(__name__)

#: How often the repairer looks for new findings.
POLL_INTERVAL_S = 1.0
#: How long one read of an entry from another replica may take.
REPAIR_READ_TIMEOUT_S = 10.0


@dataclass
class RepairCounts:
    """What the repairer did since the bookie started."""

    repaired: int = 0
    """Entries rewritten from another replica."""
    unrepairable: int = 0
    """Entries no other replica could give whole (each is tried again when found again)."""
    deleted: int = 0
    """Findings dropped because the ledger is gone from the metadata."""
    repaired_entries: list[tuple[int, int]] = field(default_factory=list)
    """The last repaired (ledger, entry) pairs, at most ``MAX_LISTED``."""


#: Repaired entries listed in the status.
MAX_LISTED = 100


class ScrubRepairer:
    """Repairs the damaged entries ``storage``'s scrubber finds, from the replicas ``store``'s
    metadata names; runs scrubs asked for. ``store`` None (a standalone bookie): findings are
    only logged and counted by the storage."""

    def __init__(
        self,
        storage: LedgerStorage,
        store: MetadataStore | None,
        config: ServerConfig,
        bookie_id: str,
    ) -> None:
        self._storage = storage
        self._store = store
        self._config = config
        self._bookie_id = bookie_id
        self._client: BookieClient | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._run_thread: threading.Thread | None = None
        self.counts = RepairCounts()
        self.replicas = (
            None
            if store is None
            else CrossReplicaChecker(
                storage, store, config, bookie_id, self._bookie_client, self._address_of
            )
        )
        """The cross-replica check of the closed ledgers this bookie stores (with metadata)."""

    # --- life cycle

    def start(self) -> None:
        """Start taking findings (a daemon thread, every ``POLL_INTERVAL_S``)."""
        self._thread = threading.Thread(target=self._loop, name="pybkx-scrub-repair", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float) -> bool:
        """Stop taking findings; False if a repair was still running after ``timeout_s``."""
        self._stop.set()
        if self.replicas is not None and not self.replicas.stop(timeout_s):
            return False
        thread = self._thread
        if thread is not None:
            thread.join(timeout_s)
            if thread.is_alive():
                return False
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()
        return True

    def _loop(self) -> None:
        while not self._stop.wait(POLL_INTERVAL_S):
            self.repair_pending()

    # --- scrub runs asked for

    def start_run(self) -> bool:
        """Start a scrub run now at ``scrubRateBytesPerSecond`` in the background; False if one
        asked for is still running."""
        with self._lock:
            if self._run_thread is not None and self._run_thread.is_alive():
                return False
            thread = threading.Thread(target=self._run, name="pybkx-scrub-run", daemon=True)
            self._run_thread = thread
        thread.start()
        return True

    def _run(self) -> None:
        try:
            self._storage.scrub(self._config.scrub_rate_bytes_per_second)
        except errors.BKException as exc:
            logger.error("scrub run failed: %s: %s", type(exc).__name__, exc)
        # Its findings are repaired by the repair thread (one thread changes the counts).

    @property
    def running(self) -> bool:
        """Whether a scrub asked for is running."""
        thread = self._run_thread
        return thread is not None and thread.is_alive()

    def status(self) -> dict[str, object]:
        """The last finished run's figures, the current run's progress and the repairs."""
        last, done, total = self._storage.scrub_status()
        return {
            "running": self.running,
            "progress": {"bytes_done": done, "bytes_total": total},
            "last_run": None if last is None else report_dict(last),
            "repairs": asdict(self.counts),
        }

    def metrics(self) -> list[Metric]:
        """The repairs (and the cross-replica check's) as counters, beside the storage's
        ``pybkx_scrub_*``."""
        counts = self.counts
        repairs = [
            Metric(name, "counter", "count", {}, value)
            for name, value in (
                ("pybkx_scrub_repaired_entries", counts.repaired),
                ("pybkx_scrub_unrepairable_entries", counts.unrepairable),
                ("pybkx_scrub_findings_of_deleted_ledgers", counts.deleted),
            )
        ]
        return repairs + ([] if self.replicas is None else self.replicas.metrics())

    # --- repairs

    def repair_pending(self) -> int:
        """Repair every finding the storage holds now; returns how many were repaired."""
        repaired = 0
        for finding in self._storage.take_scrub_findings():
            if self._stop.is_set():
                break
            if self._repair(finding):
                repaired += 1
        if repaired:
            # The repaired copies are in the write cache; a checkpoint indexes them, so the next
            # scrub run reads them instead of finding the damaged copies again.
            try:
                self._storage.checkpoint()
            except errors.BKException as exc:
                logger.warning("checkpoint after scrub repairs failed: %s", exc)
        return repaired

    def _repair(self, finding: ScrubFinding) -> bool:
        ledger, entry = finding.ledger_id, finding.entry_id
        if self._store is None:
            return False
        try:
            md = self._store.read_ledger_metadata(ledger).value
        except errors.NoSuchLedgerExistsOnMetadataServerException:
            self.counts.deleted += 1
            return False
        except errors.BKException as exc:
            logger.warning("scrub repair of %d/%d: no metadata now: %s", ledger, entry, exc)
            self.counts.unrepairable += 1
            return False
        ensemble = md.ensemble_for(entry)
        others = [ensemble[i] for i in md.write_set(entry) if ensemble[i] != self._bookie_id]
        digest = DigestManager(ledger, md.password, md.digest_type.name)
        for other in others:
            data = self._read_from(other, ledger, entry, digest)
            if data is None:
                continue
            self._storage.add_entry(
                ledger, entry, data, master_key=master_key(md.password), recovery=True
            )
            self._storage.scrub_repaired(ledger, entry)
            self.counts.repaired += 1
            self.counts.repaired_entries = [*self.counts.repaired_entries, (ledger, entry)][
                -MAX_LISTED:
            ]
            logger.warning(
                "scrub: entry %d of ledger %d (%s at %s:%d) repaired from %s",
                entry,
                ledger,
                finding.check,
                finding.entry_log,
                finding.offset,
                other,
            )
            return True
        self.counts.unrepairable += 1
        logger.error(
            "scrub: entry %d of ledger %d (%s) could not be repaired: no other replica of %s "
            "gave it whole",
            entry,
            ledger,
            finding.check,
            others,
        )
        return False

    def _read_from(
        self, bookie: str, ledger: int, entry: int, digest: DigestManager
    ) -> bytes | None:
        """The entry as ``bookie`` stores it, if its digest checks; None otherwise."""
        try:
            data: bytes = (
                self._bookie_client()
                .read(self._address_of(bookie), ledger, entry)
                .result(REPAIR_READ_TIMEOUT_S)
            )
            digest.verify(data, entry)
        except (errors.BKException, TimeoutError) as exc:
            logger.info("scrub repair of %d/%d: %s cannot give it: %s", ledger, entry, bookie, exc)
            return None
        return data

    def _bookie_client(self) -> BookieClient:
        """The connections to the other bookies, made on first use with the client keys this
        bookie's configuration gives (TLS as its own clients use it)."""
        with self._lock:
            if self._client is None:
                config = ClientConfig.of(
                    **self._config.client_settings(), readEntryTimeoutSec=REPAIR_READ_TIMEOUT_S
                )
                self._client = BookieClient(config, client_tls_material(config))
            return self._client

    def _address_of(self, bookie_id: str) -> str:
        """``host:port`` of a bookie: its registered ``bookie-rpc`` endpoint, else its id."""
        if self._store is None:
            return bookie_id
        try:
            return self._store.bookie_service_info(bookie_id).rpc_address() or bookie_id
        except errors.BKException:
            return bookie_id


def report_dict(report: ScrubReport) -> dict[str, object]:
    """A scrub run's figures as JSON-ready data."""
    return {
        "logs_scrubbed": report.logs_scrubbed,
        "logs_skipped": report.logs_skipped,
        "bytes_scrubbed": report.bytes_scrubbed,
        "entries_verified": report.entries_verified,
        "digest_unverified": report.digest_unverified,
        "corrupt_entries": report.corrupt_entries,
        "complete": report.complete,
        "findings": [
            {
                "ledger_id": f.ledger_id,
                "entry_id": f.entry_id,
                "check": f.check,
                "entry_log": f.entry_log,
                "offset": f.offset,
            }
            for f in report.findings
        ],
    }


def check_consistency_on_startup(storage: LedgerStorage, config: ServerConfig) -> None:
    """With ``localConsistencyCheckOnStartup``, check every stored entry (an unpaced scrub)
    before the bookie serves, as BookKeeper does. Raises BookieError (the storage closed) when
    the check fails or finds a damaged entry: the bookie does not start."""
    if not config.local_consistency_check_on_startup:
        return
    logger.info("running the local consistency check on startup, before accepting I/O")
    try:
        report = storage.scrub(0)
    except errors.BKException as exc:
        close_storage_after_failure(storage)
        raise BookieError(f"local consistency check failed: {type(exc).__name__}: {exc}") from None
    if report.corrupt_entries == 0:
        logger.info(
            "local consistency check: %d entries verified in %d entry logs",
            report.entries_verified,
            report.logs_scrubbed,
        )
        return
    for f in report.findings:
        logger.error(
            "local consistency check: ledger %d, entry %d: %s at %s:%d",
            f.ledger_id,
            f.entry_id,
            f.check,
            f.entry_log,
            f.offset,
        )
    close_storage_after_failure(storage)
    raise BookieError(
        f"bookie failed the local consistency check: {report.corrupt_entries} damaged entries"
    )
