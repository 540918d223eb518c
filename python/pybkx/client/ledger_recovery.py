"""Ledger recovery, as BookKeeper does it when a ledger is opened while still OPEN: mark it
IN_RECOVERY, fence it on its last ensemble (reading the LAC), read forward from the LAC until
enough bookies say an entry does not exist, write what was found again (recovery adds, with
ensemble changes of their own), and close it. It decides; the Rust writer moves the entries."""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping

from pybkx import errors
from pybkx._core import FLAG_DO_FENCING, FLAG_HIGH_PRIORITY, Future, LedgerWriter, master_key
from pybkx.client.failures import BookieFailure
from pybkx.client.read_handle import ReadHandle
from pybkx.client.replacement import replacement_ensemble
from pybkx.client.write_handle import new_writer
from pybkx.meta import LedgerMetadata, LedgerState

__all__ = ["recover"]

logger = logging.getLogger(__name__)


def recover(handle: ReadHandle) -> None:
    """Fence, re-replicate the entries after the LAC, close. Raises LedgerRecoveryException
    (the LAC or an entry could not be established), NotEnoughBookiesException, and what the
    metadata store raises."""

    def mark_in_recovery(md: LedgerMetadata) -> LedgerMetadata | None:
        if md.is_closed or md.state == LedgerState.IN_RECOVERY:
            return None
        return md.replace(state=LedgerState.IN_RECOVERY)

    md = handle.update_metadata(mark_in_recovery)
    if md.is_closed:
        return
    try:
        lac, _ = handle.lac_from_bookies(fence=True)
    except errors.ReadException as exc:
        raise errors.LedgerRecoveryException(str(exc)) from exc
    lac = max(lac, md.last_segment_start - 1)
    found: list[tuple[bytes, int]] = []
    while (got := _recovery_read(handle, lac + 1 + len(found))) is not None:
        found.append(got)
    # Entries carry the ledger length through themselves: the recovered entries restart the
    # count from the first one's (as BookKeeper does); else it is entry LAC's.
    if found:
        length = found[0][1] - len(found[0][0])
    elif lac >= 0:
        length = handle.read_unconfirmed(lac, lac)[0].ledger_length
    else:
        length = 0
    writer = new_writer(
        handle.bk,
        handle.ledger_id,
        handle.metadata,
        next_entry_id=lac + 1,
        length=length,
        recovery=True,
    )
    rewrite = _RecoveryWrite(handle, writer)
    try:
        for offset, (payload, _) in enumerate(found):
            rewrite.append(lac + 1 + offset, payload)
        last, total = rewrite.finish()
    finally:
        rewrite.stop()
    handle.close_metadata(last, total, rewrite.ensembles, expect=LedgerState.IN_RECOVERY)


def _recovery_read(handle: ReadHandle, entry_id: int) -> tuple[bytes, int] | None:
    """The entry's payload and length field from any replica (fencing reads), or None once
    Qw - Qa + 1 replicas said it does not exist. Raises LedgerRecoveryException otherwise."""
    md = handle.metadata
    ensemble = md.ensemble_for(entry_id)
    key = master_key(md.password)
    missing_needed = md.write_quorum_size - md.ack_quorum_size + 1
    missing = 0
    last_error: Exception | None = None
    for index in md.write_set(entry_id):
        bookie = handle.bk.address_of(ensemble[index])
        try:
            entry = handle.bk.bookies.read(
                bookie, handle.ledger_id, entry_id, FLAG_DO_FENCING | FLAG_HIGH_PRIORITY, key
            ).result()
            verified = handle.verify_entry(entry, entry_id)
            return verified.payload, verified.ledger_length
        except (errors.NoSuchEntryException, errors.NoSuchLedgerExistsException):
            missing += 1
            if missing >= missing_needed:
                return None
        except errors.BKException as exc:
            last_error = exc
    raise errors.LedgerRecoveryException(
        f"ledger {handle.ledger_id}: entry {entry_id} neither readable nor missing on enough "
        f"bookies (last error: {last_error})"
    )


class _RecoveryWrite:
    """Re-writes recovered entries (recovery adds) and applies ensemble changes locally, to be
    folded into the metadata when recovery closes the ledger (as BookKeeper does)."""

    def __init__(self, handle: ReadHandle, writer: LedgerWriter) -> None:
        self.handle = handle
        self.writer = writer
        self.ensembles: dict[int, tuple[str, ...]] = {}
        self.futures: list[Future] = []
        self.ids = list(handle.metadata.last_ensemble)
        self._lock = threading.Lock()
        handle.bk.failures.register(writer.writer_id, self._on_bookie_failures)

    def append(self, entry_id: int, payload: bytes) -> None:
        self.futures.append(self.writer.append(payload, entry_id))

    def _on_bookie_failures(self, failures: Mapping[int, BookieFailure]) -> None:
        with self._lock:
            failed = sorted(
                i for i, f in failures.items() if self.handle.bk.address_of(self.ids[i]) == f.bookie
            )
            if not failed:
                return
            md = self.handle.metadata.with_ensemble(
                self.handle.metadata.last_segment_start, tuple(self.ids)
            )
            try:
                self.ids = replacement_ensemble(
                    self.handle.bk,
                    self.handle.ledger_id,
                    md,
                    failed,
                    [failures[i].error for i in failed],
                )
            except errors.NotEnoughBookiesException as exc:
                self.writer.fail(errors.LedgerRecoveryException(str(exc)))
                return
            first = self.writer.begin_change()  # the LAC stays here until the change
            self.ensembles[first] = tuple(self.ids)
            self.writer.change_ensemble(first, [self.handle.bk.address_of(b) for b in self.ids])

    def finish(self) -> tuple[int, int]:
        """Wait for every recovery add; returns (last entry id, length)."""
        self.writer.when_drained().result()
        for future in self.futures:
            future.result()
        self.writer.check()
        return self.writer.last_add_confirmed, self.writer.length

    def stop(self) -> None:
        self.handle.bk.failures.unregister(self.writer.writer_id)
