"""A writer's ensemble changes: when bookies fail a ledger's adds, replace them in its last
ensemble (or delay the change while the others still make Qa), record the new ensemble in the
metadata by compare-and-set, and hand it to the Rust writer, which re-sends the pending
entries. One change at a time per ledger. It never chooses bookies itself (``replacement``
does) and never moves entries.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping, Sequence

from pybkx import errors
from pybkx._core import LedgerWriter
from pybkx.client.failures import BookieFailure
from pybkx.client.metrics import count_ensemble_change
from pybkx.client.read_handle import ReadHandle
from pybkx.client.replacement import replacement_ensemble
from pybkx.meta import LedgerMetadata, LedgerState

__all__ = ["EnsembleChanges"]

logger = logging.getLogger(__name__)

#: A slot failing again this soon after its replacement waits before the next change, so a
#: bookie still going down (its registration not yet expired) is not replaced in a tight loop.
_REFAIL_WINDOW_S = 1.0
_REFAIL_PAUSE_S = 0.5
#: A bookie that took its own slot back and failed again within this is not taken back again:
#: the next change needs another bookie, or fails the writer (never a loop of self-replacement).
_SELF_RETURN_WINDOW_S = 30.0


class EnsembleChanges:
    """The ensemble changes of one open ledger (``ledger``) and its writer. Register
    ``on_bookie_failures`` with the client's failure dispatcher."""

    def __init__(self, ledger: ReadHandle, writer: LedgerWriter) -> None:
        self._ledger = ledger
        self._writer = writer
        self._lock = threading.Lock()
        self._last_change: dict[int, float] = {}
        self._returned: dict[int, float] = {}  # when a failed bookie last took its slot back
        self._delayed: set[int] = set()  # failed slots left in place while Qa is still met

    def on_bookie_failures(self, failures: Mapping[int, BookieFailure]) -> None:
        """The failure dispatcher's call: replace the failed bookies, or stop the writer."""
        with self._lock:
            now = time.monotonic()
            if any(now - self._last_change.get(i, 0.0) < _REFAIL_WINDOW_S for i in failures):
                time.sleep(_REFAIL_PAUSE_S)
            try:
                self._change(failures)
            except errors.BKException as exc:
                logger.error("ledger %d: ensemble change failed: %s", self._ledger.ledger_id, exc)
                self._writer.fail(exc)
            for i in failures:
                self._last_change[i] = time.monotonic()

    def _change(self, failures: Mapping[int, BookieFailure]) -> None:
        """Replace the failed bookies, record the new ensemble by compare-and-set, then let the
        writer re-send to it. Failures of bookies already replaced are ignored; an ensemble
        identical to the current one is never written to the metadata."""
        md = self._ledger.metadata
        current = md.last_ensemble
        failed = sorted(
            {i for i, f in failures.items() if self._ledger.bk.address_of(current[i]) == f.bookie}
            | self._delayed
        )
        if not failed:
            return
        reasons = [failures[i].error if i in failures else "failed earlier" for i in failed]
        now = time.monotonic()
        no_return = frozenset(
            i
            for i in failed
            if now - self._returned.get(i, -_SELF_RETURN_WINDOW_S) < _SELF_RETURN_WINDOW_S
        )
        if self._delay(md, failed, reasons, no_return):
            return
        first = self._writer.begin_change()
        try:
            chosen = self._record(first, current, failed, reasons, no_return)
        except BaseException:
            self._writer.cancel_change()
            raise
        for i in failed:
            if chosen[i] == current[i]:
                self._returned[i] = time.monotonic()
        self._delayed.clear()
        self._writer.change_ensemble(first, [self._ledger.bk.address_of(b) for b in chosen])
        if chosen != list(current):
            count_ensemble_change()

    def _delay(
        self,
        md: LedgerMetadata,
        failed: Sequence[int],
        reasons: Sequence[str],
        no_return: frozenset[int],
    ) -> bool:
        """True when the change waits (BookKeeper's ``delayEnsembleChange``): no other bookie
        can take a failed slot while the others still make Qa for every write set, so appends
        go on and the slot is replaced with the next change."""
        if not _qa_met_without(md, failed):
            return False
        current = md.last_ensemble
        try:
            preview = replacement_ensemble(
                self._ledger.bk, self._ledger.ledger_id, md, failed, reasons, no_return, wait=False
            )
        except errors.NotEnoughBookiesException:
            preview = list(current)
        if any(preview[i] != current[i] for i in failed):
            return False
        if not set(failed) <= self._delayed:
            logger.warning(
                "ledger %d: no bookie to replace %s; writing on with Qa=%d met by the "
                "others (delayed ensemble change)",
                self._ledger.ledger_id,
                [current[i] for i in failed],
                md.ack_quorum_size,
            )
        self._delayed.update(failed)
        return True

    def _record(
        self,
        first: int,
        current: Sequence[str],
        failed: Sequence[int],
        reasons: Sequence[str],
        no_return: frozenset[int],
    ) -> list[str]:
        """Chooses the replacements and writes the segment starting at ``first`` into the
        metadata by compare-and-set (choosing again after a lost race); returns the ensemble
        the writer goes on with. Raises LedgerFencedException, LedgerClosedException,
        NotEnoughBookiesException."""
        ledger = self._ledger
        chosen: list[str] = []

        def change(md: LedgerMetadata) -> LedgerMetadata | None:
            if md.state == LedgerState.IN_RECOVERY:
                raise errors.LedgerFencedException(
                    f"ledger {ledger.ledger_id} is being recovered by another client"
                )
            if md.is_closed:
                raise errors.LedgerClosedException(f"ledger {ledger.ledger_id} is closed")
            if _landed(md, first, current, failed):
                # This change's own write took effect but its answer was lost (ZooKeeper's
                # connection dropped, and the retried write found its own version): choosing
                # again would replace the bookies just chosen.
                chosen[:] = md.last_ensemble
                return None
            ids = replacement_ensemble(ledger.bk, ledger.ledger_id, md, failed, reasons, no_return)
            chosen[:] = ids
            if list(ids) == list(md.last_ensemble):
                return None  # the same bookies take their slots back: nothing to record
            return md.with_ensemble(first, ids)

        ledger.update_metadata(change)
        return chosen


def _landed(md: LedgerMetadata, first: int, before: Sequence[str], failed: Sequence[int]) -> bool:
    """True if ``md`` already holds an ensemble change from ``first`` that replaced every
    ``failed`` index of ``before`` and nothing else. Only this writer changes an open ledger's
    ensemble (anyone else fences it first), so that change is this one."""
    if md.last_segment_start != first:
        return False
    now = md.last_ensemble
    bad = set(failed)
    return all((now[i] != before[i]) == (i in bad) for i in range(len(before)))


def _qa_met_without(md: LedgerMetadata, failed: Sequence[int]) -> bool:
    """True if every write set still has Qa bookies outside ``failed``."""
    e, qw, qa = md.ensemble_size, md.write_quorum_size, md.ack_quorum_size
    bad = set(failed)
    return all(sum(1 for k in range(qw) if (start + k) % e not in bad) >= qa for start in range(e))
