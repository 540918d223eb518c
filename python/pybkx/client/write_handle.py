"""``LedgerHandle``: one ledger open for writing. Appends go to the Rust ``LedgerWriter`` of
its last ensemble (round-robin write sets, in-order completion once Qa bookies acknowledged,
the LAC piggy-backed in every entry); bookies that fail an add are replaced by its ensemble
changes (``ensemble``); ``close`` waits for pending appends and closes the ledger at the LAC.
With ``WriteFlag.DEFERRED_SYNC`` bookies answer adds before their sync and ``force`` makes the
entries durable and advances the LAC. It reads as a ``ReadHandle`` and never moves entries
itself.
"""

from __future__ import annotations

import enum
import logging
import threading
from collections.abc import Iterable, Sequence

from pybkx import errors
from pybkx._core import Future, LedgerWriter
from pybkx.client.aio import run_blocking
from pybkx.client.context import ClientContext
from pybkx.client.ensemble import EnsembleChanges
from pybkx.client.read_handle import ReadHandle
from pybkx.meta import LedgerMetadata, LedgerState, Versioned

__all__ = ["LedgerHandle", "WriteFlag", "new_writer", "parse_write_flags"]

logger = logging.getLogger(__name__)


class WriteFlag(enum.IntEnum):
    """BookKeeper's ``WriteFlag``s, with their wire values (V3 ``AddRequest.writeFlags``)."""

    #: Bookies acknowledge an add once it is written to their journal, before the sync; the
    #: entries become durable (and the LAC advances) with ``LedgerHandle.force``.
    DEFERRED_SYNC = 1


def parse_write_flags(
    write_flags: Iterable[WriteFlag | str], *, use_v2_wire_protocol: bool
) -> frozenset[WriteFlag]:
    """``write_flags`` as ``WriteFlag``s (BookKeeper's names accepted as strings). Raises
    IncorrectParameterException for an unknown name, and for DEFERRED_SYNC over the V2
    protocol, which has no write flags (BookKeeper's client fails those adds with
    IllegalOpException)."""
    if isinstance(write_flags, str):
        write_flags = [write_flags]
    flags: set[WriteFlag] = set()
    for flag in write_flags:
        if isinstance(flag, WriteFlag):
            flags.add(flag)
            continue
        try:
            flags.add(WriteFlag[str(flag).upper()])
        except KeyError:
            known = ", ".join(f.name for f in WriteFlag)
            raise errors.IncorrectParameterException(
                f"unknown write flag {flag!r} (known: {known})"
            ) from None
    if WriteFlag.DEFERRED_SYNC in flags and use_v2_wire_protocol:
        raise errors.IncorrectParameterException(
            "WriteFlag.DEFERRED_SYNC needs the V3 protocol: the V2 protocol has no write flags "
            "(set useV2WireProtocol=false)"
        )
    return frozenset(flags)


def new_writer(
    bk: ClientContext,
    ledger_id: int,
    metadata: LedgerMetadata,
    *,
    next_entry_id: int,
    length: int,
    recovery: bool,
    adv: bool = False,
) -> LedgerWriter:
    """A Rust writer for the last ensemble of ``metadata`` (a recovery writer sends recovery
    adds; an ``adv`` one takes the entry id of each append). Its failures go to
    ``bk.failures``. A client's writer (not a recovery's) flushes explicit LACs every
    ``explicitLacInterval`` ms when that is on and the client speaks V3."""
    explicit_lac_ms = bk.config.explicit_lac_interval_ms
    if recovery or bk.config.use_v2_wire_protocol:
        explicit_lac_ms = 0  # BookKeeper.__init__ warned once about V2
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
        adv=adv,
        explicit_lac_interval_ms=explicit_lac_ms,
    )


class LedgerHandle(ReadHandle):
    """A ledger open for writing (see ``BookKeeper.create_ledger``). Thread-safe."""

    _ADV = False
    """Whether appends name their entry ids (``LedgerHandleAdv``)."""

    def __init__(
        self,
        bk: ClientContext,
        ledger_id: int,
        versioned: Versioned[LedgerMetadata],
        write_flags: frozenset[WriteFlag] = frozenset(),
    ):
        super().__init__(bk, ledger_id, versioned)
        self._writer = new_writer(
            bk, ledger_id, self.metadata, next_entry_id=0, length=0, recovery=False, adv=self._ADV
        )
        self.write_flags = write_flags
        if WriteFlag.DEFERRED_SYNC in write_flags:
            self._writer.enable_deferred_sync()
        self._lock = threading.Lock()
        self._closing = False
        changes = EnsembleChanges(self, self._writer)
        bk.failures.register(self._writer.writer_id, changes.on_bookie_failures)

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

    # --- deferred sync ----------------------------------------------------------------------

    def force(self) -> int:
        """Make every entry acknowledged so far durable on every bookie of the current
        ensemble (FORCE_LEDGER to each; BookKeeper's ``force()``) and return the LAC, advanced
        to the last of them. Needed with ``WriteFlag.DEFERRED_SYNC``, whose LAC only a force
        advances; harmless without. Raises LedgerClosedException, IncorrectParameterException
        over V2 (``useV2WireProtocol=true``), the first failing bookie's error (the LAC stays),
        the writer's error if it failed."""
        lac: int = self.force_async().result()
        return lac

    def force_async(self) -> Future:
        """Start ``force``; the future gives the LAC it confirmed, or raises as ``force``."""
        if self._closing:
            raise errors.LedgerClosedException(f"ledger {self.ledger_id} is closed")
        return self._writer.force()

    # --- closing ----------------------------------------------------------------------------

    def close(self) -> None:
        """Wait for pending appends, then close the ledger in the metadata (last entry = LAC;
        with DEFERRED_SYNC the last forced entry, as BookKeeper: force first to keep the rest).
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
