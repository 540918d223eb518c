"""The admin API's decommission, as BookKeeper's ``BookKeeperAdmin.decommissionBookie``: the
audit is triggered so that AutoRecovery re-replicates the stopped bookie's ledgers, then a
thread waits until no ledger's ensemble and no under-replication marker names the bookie, and
(when asked) deletes its cookie. It never copies data itself: AutoRecovery does."""

from __future__ import annotations

import logging
import threading

from pybkx import errors
from pybkx.meta import MetadataStore
from pybkx.meta.audit import trigger_audit

__all__ = ["Decommissions"]

logger = logging.getLogger(__name__)

_POLL_S = 2.0


class Decommissions:
    """The decommissions this admin server started; each ends when done or at ``closed``."""

    def __init__(self, closed: threading.Event) -> None:
        self._closed = closed
        self._lock = threading.Lock()
        self._running: dict[str, threading.Thread] = {}

    def start(self, store: MetadataStore, bookie: str, delete_cookie: bool) -> bool:
        """Trigger the audit and watch ``bookie``'s ledgers heal in a thread; False when a
        decommission of it already runs. Raises ValueError while the bookie is registered,
        AuditUnavailable (AutoRecovery disabled or no auditor), MetaStoreException."""
        if bookie in store.writable_bookies() | store.readonly_bookies():
            raise ValueError(f"{bookie} is still registered: stop it before decommissioning it")
        with self._lock:
            running = self._running.get(bookie)
            if running is not None and running.is_alive():
                return False
            trigger_audit(store)
            thread = threading.Thread(
                target=self._watch,
                args=(store, bookie, delete_cookie),
                name=f"pybkx-decommission-{bookie}",
                daemon=True,
            )
            self._running[bookie] = thread
            thread.start()
        return True

    def running(self) -> list[str]:
        """The bookies whose decommission is still under way."""
        with self._lock:
            return sorted(b for b, t in self._running.items() if t.is_alive())

    def _watch(self, store: MetadataStore, bookie: str, delete_cookie: bool) -> None:
        logger.info("decommissioning %s: waiting for AutoRecovery to re-replicate it", bookie)
        while not self._closed.wait(_POLL_S):
            try:
                left = _ledgers_naming(store, bookie)
            except errors.BKException as exc:
                logger.warning("decommission of %s: %s: %s", bookie, type(exc).__name__, exc)
                continue
            if left:
                logger.debug("decommission of %s: %d ledgers left", bookie, len(left))
                continue
            logger.info("decommission of %s: no ledger names it any more", bookie)
            if delete_cookie:
                _delete_cookie(store, bookie)
            return
        logger.info("decommission of %s: stopped with the admin server", bookie)


def _ledgers_naming(store: MetadataStore, bookie: str) -> set[int]:
    """The ledgers whose ensembles or under-replication markers name ``bookie``. Raises
    MetaStoreException."""
    found = {
        ledger_id
        for ledger_id, missing in store.underreplicated_ledgers().items()
        if bookie in missing
    }
    for ledger_id in store.list_ledgers():
        try:
            md = store.read_ledger_metadata(ledger_id).value
        except errors.NoSuchLedgerExistsOnMetadataServerException:
            continue
        if any(bookie in ensemble for ensemble in md.ensembles.values()):
            found.add(ledger_id)
    return found


def _delete_cookie(store: MetadataStore, bookie: str) -> None:
    try:
        cookie = store.read_cookie(bookie)
        store.remove_cookie(bookie, cookie.version)
    except errors.CookieNotFoundException:
        logger.warning("decommission of %s: no cookie to delete (deleted already?)", bookie)
    except errors.BKException as exc:
        logger.error(
            "decommission of %s: cookie not deleted: %s: %s", bookie, type(exc).__name__, exc
        )
    else:
        logger.info("decommission of %s: cookie deleted", bookie)
