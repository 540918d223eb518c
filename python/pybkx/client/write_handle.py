"""``LedgerHandle``: one ledger open for writing. Appends go to the Rust ``LedgerWriter`` of
its last ensemble (round-robin write sets, in-order completion once Qa bookies acknowledged,
the LAC piggy-backed in every entry); bookies that fail an add are replaced by an ensemble
change written to the metadata by compare-and-set; ``close`` waits for pending appends and
closes the ledger at the LAC. It reads as a ``ReadHandle`` and never moves entries itself.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping, Sequence

from pybkx import errors
from pybkx._core import Future, LedgerWriter
from pybkx.client.aio import run_blocking
from pybkx.client.context import ClientContext
from pybkx.client.ensemble import replacement_ensemble
from pybkx.client.failures import BookieFailure
from pybkx.client.metrics import count_ensemble_change
from pybkx.client.read_handle import ReadHandle
from pybkx.meta import LedgerMetadata, LedgerState, Versioned

__all__ = ["LedgerHandle", "new_writer"]

logger = logging.getLogger(__name__)

#: A slot failing again this soon after its replacement waits before the next change, so a
#: bookie still going down (its registration not yet expired) is not replaced in a tight loop.
_REFAIL_WINDOW_S = 1.0
_REFAIL_PAUSE_S = 0.5
#: A bookie that took its own slot back and failed again within this is not taken back again:
#: the next change needs another bookie, or fails the writer (never a loop of self-replacement).
_SELF_RETURN_WINDOW_S = 30.0


def new_writer(
    bk: ClientContext,
    ledger_id: int,
    metadata: LedgerMetadata,
    *,
    next_entry_id: int,
    length: int,
    recovery: bool,
) -> LedgerWriter:
    """A Rust writer for the last ensemble of ``metadata`` (a recovery writer sends recovery
    adds). Its failures go to ``bk.failures``."""
    return LedgerWriter(
        bk.bookies,
        ledger_id,
        metadata.write_quorum_size,
        metadata.ack_quorum_size,
        metadata.password,
        metadata.digest_type.name,
        [bk.address_of(b) for b in metadata.last_ensemble],
        bk.failures.queue,
        next_entry_id=next_entry_id,
        length=length,
        recovery=recovery,
        throttle=bk.config.throttle,
    )


class LedgerHandle(ReadHandle):
    """A ledger open for writing (see ``BookKeeper.create_ledger``). Thread-safe."""

    def __init__(self, bk: ClientContext, ledger_id: int, versioned: Versioned[LedgerMetadata]):
        super().__init__(bk, ledger_id, versioned)
        self._writer = new_writer(
            bk, ledger_id, self.metadata, next_entry_id=0, length=0, recovery=False
        )
        self._lock = threading.Lock()
        self._change_lock = threading.Lock()
        self._last_change: dict[int, float] = {}
        self._returned: dict[int, float] = {}  # when a failed bookie last took its slot back
        self._delayed: set[int] = set()  # failed slots left in place while Qa is still met
        self._closing = False
        bk.failures.register(self._writer.writer_id, self._on_bookie_failures)

    @property
    def last_add_confirmed(self) -> int:
        return self._writer.last_add_confirmed

    @property
    def length(self) -> int:
        return self._writer.length

    def append(self, data: bytes | bytearray | memoryview) -> int:
        """Append one entry; returns its id once Qa bookies hold it and all earlier entries are
        confirmed. Raises LedgerClosedException, LedgerFencedException (recovered by another
        client), NotEnoughBookiesException (no replacement for a failed bookie),
        IncorrectParameterException (an entry larger than the bookies accept),
        UnauthorizedAccessException, TypeError (not bytes-like)."""
        result: int = self.append_async(data).result()
        return result

    def append_async(self, data: bytes | bytearray | memoryview) -> Future:
        """Start an append; the future (``result()``, ``add_done_callback``, ``await``) gives the
        entry id, or raises as ``append`` does. Waits while ``throttle`` appends are pending."""
        if self._closing:
            raise errors.LedgerClosedException(f"ledger {self.ledger_id} is closed")
        return self._writer.append(data)

    def append_many(self, payloads: Sequence[bytes | bytearray | memoryview]) -> int:
        """Append entries pipelined; returns the last entry id (errors as ``append``)."""
        if self._closing:
            raise errors.LedgerClosedException(f"ledger {self.ledger_id} is closed")
        return self._writer.append_many(list(payloads))

    async def append_many_async(self, payloads: Sequence[bytes | bytearray | memoryview]) -> int:
        """``append_many`` for asyncio code: the batch moves on the client's bounded executor
        with the GIL released, so the event loop keeps running. The fastest way to append from
        asyncio: one await per batch, not per entry. Raises as ``append``."""
        return await run_blocking(self.bk.executor, self.append_many, payloads)

    # --- ensemble changes -------------------------------------------------------------------

    def _on_bookie_failures(self, failures: Mapping[int, BookieFailure]) -> None:
        """The failure dispatcher's call: replace the failed bookies, or stop the writer."""
        with self._change_lock:
            now = time.monotonic()
            if any(now - self._last_change.get(i, 0.0) < _REFAIL_WINDOW_S for i in failures):
                time.sleep(_REFAIL_PAUSE_S)
            try:
                self._change_ensemble(failures)
            except errors.BKException as exc:
                logger.error("ledger %d: ensemble change failed: %s", self.ledger_id, exc)
                self._writer.fail(exc)
            for i in failures:
                self._last_change[i] = time.monotonic()

    def _change_ensemble(self, failures: Mapping[int, BookieFailure]) -> None:
        """Replace the failed bookies, record the new ensemble by compare-and-set, then let the
        writer re-send to it. Failures of bookies already replaced are ignored.

        With no other bookie to take a failed slot while the others still make Qa for every
        write set, the change is delayed (BookKeeper's ``delayEnsembleChange``): appends go on
        and the slot is replaced with the next change. An ensemble identical to the current
        one is never written to the metadata."""
        current = self.metadata.last_ensemble
        failed = sorted(
            {i for i, f in failures.items() if self.bk.address_of(current[i]) == f.bookie}
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
        md = self.metadata
        if self._qa_met_without(md, failed):
            try:
                preview = replacement_ensemble(
                    self.bk, self.ledger_id, md, failed, reasons, no_return, wait=False
                )
            except errors.NotEnoughBookiesException:
                preview = list(current)
            if all(preview[i] == current[i] for i in failed):
                if not set(failed) <= self._delayed:
                    logger.warning(
                        "ledger %d: no bookie to replace %s; writing on with Qa=%d met by the "
                        "others (delayed ensemble change)",
                        self.ledger_id,
                        [current[i] for i in failed],
                        md.ack_quorum_size,
                    )
                self._delayed.update(failed)
                return
        first = self._writer.begin_change()
        chosen: list[str] = []

        def change(md: LedgerMetadata) -> LedgerMetadata | None:
            if md.state == LedgerState.IN_RECOVERY:
                raise errors.LedgerFencedException(
                    f"ledger {self.ledger_id} is being recovered by another client"
                )
            if md.is_closed:
                raise errors.LedgerClosedException(f"ledger {self.ledger_id} is closed")
            if self._landed(md, first, current, failed):
                # This change's own write took effect but its answer was lost (ZooKeeper's
                # connection dropped, and the retried write found its own version): choosing
                # again would replace the bookies just chosen.
                chosen[:] = md.last_ensemble
                return None
            ids = replacement_ensemble(self.bk, self.ledger_id, md, failed, reasons, no_return)
            chosen[:] = ids
            if list(ids) == list(md.last_ensemble):
                return None  # the same bookies take their slots back: nothing to record
            return md.with_ensemble(first, ids)

        before = list(current)
        try:
            self.update_metadata(change)
        except BaseException:
            self._writer.cancel_change()
            raise
        for i in failed:
            if chosen[i] == before[i]:
                self._returned[i] = time.monotonic()
        self._delayed.clear()
        self._writer.change_ensemble(first, [self.bk.address_of(b) for b in chosen])
        if chosen != before:
            count_ensemble_change()

    @staticmethod
    def _landed(
        md: LedgerMetadata, first: int, before: Sequence[str], failed: Sequence[int]
    ) -> bool:
        """True if ``md`` already holds an ensemble change from ``first`` that replaced
        every ``failed`` index of ``before`` and nothing else. Only this writer changes an open
        ledger's ensemble (anyone else fences it first), so that change is this one."""
        if md.last_segment_start != first:
            return False
        now = md.last_ensemble
        bad = set(failed)
        return all((now[i] != before[i]) == (i in bad) for i in range(len(before)))

    @staticmethod
    def _qa_met_without(md: LedgerMetadata, failed: Sequence[int]) -> bool:
        """True if every write set still has Qa bookies outside ``failed``."""
        e, qw, qa = md.ensemble_size, md.write_quorum_size, md.ack_quorum_size
        bad = set(failed)
        return all(
            sum(1 for k in range(qw) if (start + k) % e not in bad) >= qa for start in range(e)
        )

    # --- closing ----------------------------------------------------------------------------

    def close(self) -> None:
        """Wait for pending appends, then close the ledger in the metadata (last entry = LAC).
        Idempotent. Raises LedgerFencedException if another client recovered the ledger."""
        with self._lock:
            if self._closing and self.is_closed:
                return
            self._closing = True
            self._writer.close()
        # Pending appends finish, or fail once no replacement bookie can be found.
        self._writer.when_drained().result()
        self.bk.failures.unregister(self._writer.writer_id)
        fatal: errors.BKException | None = None
        try:
            self._writer.check()
        except errors.BKException as exc:
            fatal = exc
        if isinstance(fatal, errors.LedgerFencedException):
            raise fatal
        if fatal is not None:
            # As BookKeeper: the ledger still closes, at the last confirmed entry.
            logger.warning("ledger %d: closing after the writer failed: %s", self.ledger_id, fatal)
        self.close_metadata(
            self._writer.last_add_confirmed, self._writer.length, {}, expect=LedgerState.OPEN
        )

    def __enter__(self) -> LedgerHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
