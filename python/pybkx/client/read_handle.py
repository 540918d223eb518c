"""``ReadHandle``: one ledger opened for reading. It reads through a read plan built once per
metadata version (never per read): ranges, single entries, batches, Arrow columns, iteration,
and the LAC the bookies report; it keeps the ledger's metadata and closes it in the metadata
when asked. It never writes entries; ``LedgerHandle`` (``write_handle``) does.

Semantics follow Apache BookKeeper's client: a read of confirmed entries stops at the LAC, each
entry comes from the first replica that returns a copy whose digest verifies.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pybkx import errors
from pybkx._core import MAX_READ_ENTRIES, Future, LedgerEntry, ReadPlan, VerifiedEntry
from pybkx.client import arrow, explicit_lac, lac
from pybkx.client.aio import run_blocking
from pybkx.client.context import ClientContext
from pybkx.client.metrics import timed
from pybkx.client.read_window import BatchReads, ReadWindow, check_range
from pybkx.client.sticky_reads import StickyBookie
from pybkx.meta import LedgerMetadata, LedgerState, Versioned

if TYPE_CHECKING:
    import pyarrow

    from pybkx._core import ColumnsResult, ReadResult

__all__ = ["ReadHandle", "VerifiedEntry", "read_chunk"]

#: Entries the first read of a ``batch_read`` asks for; later reads are sized from the mean
#: payload so far, so a small ``max_size`` does not fetch ``max_count`` entries.
_FIRST_BATCH_CHUNK = 1024


def read_chunk(value: Any) -> tuple[list[LedgerEntry], bool]:
    """The entries and ``batch_ok`` of a completed ``read_entries``: the one place its result
    is taken apart."""
    read: ReadResult = value
    return list(read.entries), read.batch_ok


class ReadHandle:
    """A ledger opened for reading (see ``BookKeeper.open_ledger``)."""

    def __init__(self, bk: ClientContext, ledger_id: int, versioned: Versioned[LedgerMetadata]):
        self.bk = bk
        self.ledger_id = ledger_id
        self._versioned = versioned
        # BATCH_READ_ENTRY is V2 only (as in BookKeeper, which batches only with
        # useV2WireProtocol): a V3 client reads entry by entry.
        self._batching = BatchReads(
            ledger_id, bk.config.batch_read_enabled and bk.config.use_v2_wire_protocol
        )
        md = versioned.value
        self._lac = md.last_entry_id if md.is_closed else -1
        self._length = md.length if md.is_closed else 0
        self._plan: tuple[Versioned[LedgerMetadata], int | None, ReadPlan] | None = None
        self._sticky = StickyBookie(bk, ledger_id)
        self._avoid: tuple[frozenset[str], list[str]] = (frozenset(), [])

    # --- state ------------------------------------------------------------------------------

    @property
    def metadata(self) -> LedgerMetadata:
        return self._versioned.value

    @property
    def versioned_metadata(self) -> Versioned[LedgerMetadata]:
        """The metadata with its version (the compare-and-set token of the next change)."""
        return self._versioned

    @property
    def last_add_confirmed(self) -> int:
        """The highest entry id known to be confirmed (-1: none)."""
        return self._lac

    @property
    def length(self) -> int:
        return self._length

    @property
    def is_closed(self) -> bool:
        return self.metadata.is_closed

    def update_metadata(
        self, change: Callable[[LedgerMetadata], LedgerMetadata | None]
    ) -> LedgerMetadata:
        """Compare-and-set ``change`` on the ledger's metadata (re-read and re-applied after a
        lost race; see ``MetadataStore.update_ledger_metadata``) and adopt the result. A closed
        result also fixes the handle's LAC and length."""
        self._versioned = self.bk.store.update_ledger_metadata(
            self.ledger_id, self._versioned, change
        )
        md = self._versioned.value
        if md.is_closed:
            self._lac, self._length = md.last_entry_id, md.length
        return md

    def refresh_metadata(self) -> LedgerMetadata:
        """Read the metadata again from the store."""
        self._versioned = self.bk.store.read_ledger_metadata(self.ledger_id)
        return self._versioned.value

    # --- reads ------------------------------------------------------------------------------

    def _read_plan(self) -> ReadPlan:
        """The plan of the current metadata version and sticky bookie, built once."""
        md = self.metadata
        sticky = self._sticky.index(md)
        cached = self._plan
        if cached is not None and cached[0] is self._versioned and cached[1] == sticky:
            return cached[2]
        plan = ReadPlan(
            self.bk.bookies,
            self.ledger_id,
            md.write_quorum_size,
            md.password,
            md.digest_type.name,
            [
                (first, [self.bk.address_of(b) for b in bookies])
                for first, bookies in md.ensembles.items()
            ],
            orders=self._read_orders(md, sticky),
            max_batch_bytes=self.bk.config.netty_max_frame_size_bytes,
        )
        self._plan = (self._versioned, sticky, plan)
        return plan

    def _read_orders(self, md: LedgerMetadata, sticky: int | None) -> list[list[list[int]]]:
        """Per segment, per write-set start: the sticky bookie first, then the next ones
        (``stickyReadSEnabled``, E == Qw); else the replica order of the placement policy
        (``reorderReadSequenceEnabled``, default on); empty for the write-set order."""
        if sticky is not None:
            return StickyBookie.orders(md, sticky)
        if not self.bk.config.reorder_read_sequence_enabled:
            return []
        return [
            [
                self.bk.placement.reorder_read_sequence(bookies, None, md.write_set(start))
                for start in range(md.ensemble_size)
            ]
            for bookies in md.ensembles.values()
        ]

    def _avoided(self) -> list[str]:
        """Addresses of this ledger's bookies that are not registered: tried last."""
        registered = self.bk.registered_bookies
        seen, avoid = self._avoid
        if seen is not registered:
            bookies = {b for bookies in self.metadata.ensembles.values() for b in bookies}
            avoid = [self.bk.address_of(b) for b in bookies if b not in registered]
            self._avoid = (registered, avoid)
        return avoid

    def read_entries(
        self,
        first: int,
        last: int,
        *,
        batch: bool = False,
        flags: int = 0,
        key: bytes | None = None,
        held_by: Sequence[int] = (),
    ) -> Future:
        """Start reading entries ``first..last`` whatever the LAC; the future gives a
        ``ReadResult`` (``entries``, ``batch_ok``). With ``held_by`` (ensemble positions), only
        the entries whose write set holds one of them: what a copy of lost bookies needs; on a
        striped ledger (E > Qw) the other entries are not read at all. Raises
        IncorrectParameterException for a bad range (through the future for a position outside
        the ensembles)."""
        return self._read_plan().read(
            first,
            last,
            batch=batch and self._batching.on,
            avoid=self._avoided(),
            flags=flags,
            master_key=key,
            held_by=list(held_by),
        )

    def _read(self, first: int, last: int, batch: bool) -> list[LedgerEntry]:
        entries, batch_ok = read_chunk(self.read_entries(first, last, batch=batch).result())
        if batch:
            self._batching.note(batch_ok)
        return entries

    def _check_confirmed(self, first: int, last: int) -> None:
        check_range(first, last, self.last_add_confirmed)

    def read(self, first: int, last: int) -> list[LedgerEntry]:
        """Entries ``first..last`` (inclusive), at most up to the LAC, at most
        ``MAX_READ_ENTRIES`` (1,048,576) per call.

        Raises IncorrectParameterException (bad range), ReadException (range beyond the LAC or
        unreadable), NoSuchEntryException, DigestMatchException (every copy corrupt).
        """
        self._check_confirmed(first, last)
        return self._read(first, last, batch=False)

    def read_async(self, first: int, last: int) -> Future:
        """``read`` without waiting: the future (awaitable) gives a ``ReadResult``.
        Raises at once what ``read`` raises for the range; the rest through the future."""
        self._check_confirmed(first, last)
        return self.read_entries(first, last)

    def read_arrow(self, first: int, last: int) -> pyarrow.RecordBatch:
        """Entries ``first..last`` (at most up to the LAC and ``MAX_READ_ENTRIES``) as one
        ``pyarrow.RecordBatch`` of ``ledger_id`` int64, ``entry_id`` int64, ``payload`` binary
        (see ``pybkx.client.arrow``), batched reads under the hood. The payload column is built
        once, off the interpreter's thread; no Python object per entry.

        Raises what ``read`` raises, IncorrectParameterException for payloads above 2 GiB in all
        (read a shorter range), ImportError without pyarrow (``pip install 'pybkx[arrow]'``).
        """
        self._check_confirmed(first, last)
        batched = self._batching.on
        return self._arrow_batch(self._read_columns(first, last, batched).result(), batched)

    def arrow_batches(
        self, first: int, last: int, batch_entries: int, read_ahead: int = 2
    ) -> Iterator[pyarrow.RecordBatch]:
        """Entries ``first..last`` as ``read_arrow`` batches of at most ``batch_entries`` rows,
        in order, with up to ``read_ahead`` further batches being read while the caller
        consumes one (0: each read starts when the previous batch is taken), so the bookies
        and the caller work at once. At most ``read_ahead + 1`` batches are held.

        Raises IncorrectParameterException (bad range, ``batch_entries`` < 1 or above
        ``MAX_READ_ENTRIES``, ``read_ahead`` < 0) and ReadException (range beyond the LAC) at
        once, and what ``read_arrow`` raises as the failing batch is reached.
        """
        return iter(
            ReadWindow(
                self._read_columns,
                self._arrow_split,
                self._batching,
                first,
                last,
                lac=self.last_add_confirmed,
                batch_entries=batch_entries,
                read_ahead=read_ahead,
            )
        )

    async def read_arrow_async(self, first: int, last: int) -> pyarrow.RecordBatch:
        """``read_arrow`` for asyncio code (the read is awaited, no thread blocks)."""
        self._check_confirmed(first, last)
        batched = self._batching.on
        return self._arrow_batch(await self._read_columns(first, last, batched), batched)

    def _read_columns(self, first: int, last: int, batch: bool) -> Future:
        return self._read_plan().read_columns(first, last, batch=batch, avoid=self._avoided())

    def _arrow_split(self, columns: ColumnsResult) -> tuple[pyarrow.RecordBatch, bool]:
        """The record batch and ``batch_ok`` of a completed ``read_columns``: the one place its
        result is taken apart."""
        batch = arrow.record_batch(
            self.ledger_id, columns.rows, columns.entry_ids, columns.offsets, columns.payloads
        )
        return batch, columns.batch_ok

    def _arrow_batch(self, columns: ColumnsResult, batched: bool) -> pyarrow.RecordBatch:
        batch, batch_ok = self._arrow_split(columns)
        if batched:
            self._batching.note(batch_ok)
        return batch

    def read_unconfirmed(self, first: int, last: int) -> list[LedgerEntry]:
        """Entries ``first..last`` regardless of the LAC (they may not survive recovery).
        Raises as ``read`` does, but never for the LAC."""
        return self._read(first, last, batch=False)

    async def read_unconfirmed_async(self, first: int, last: int) -> list[LedgerEntry]:
        """``read_unconfirmed`` for asyncio code."""
        entries, _ = read_chunk(await self.read_entries(first, last))
        return entries

    def batch_read(self, start: int, max_count: int, max_size: int) -> list[LedgerEntry]:
        """Up to ``max_count`` entries from ``start`` in few requests, never beyond the LAC:
        BP-62 batch reads where one bookie holds every entry (E == Qw), strided batch reads from
        every bookie where entries are striped (E > Qw; see docs/client.md), single reads when
        ``batchReadEnabled`` is off or the bookies do not support batch reads. The size limit is
        loose, as in BookKeeper: the first entry always, then entries while their payloads fit
        in ``max_size`` (``<= 0``: ``nettyMaxFrameSizeBytes``).

        Raises IncorrectParameterException, ReadException (``start`` beyond the LAC),
        NoSuchEntryException, DigestMatchException (every copy corrupt).
        """
        if start < 0 or max_count <= 0:
            raise errors.IncorrectParameterException(
                f"bad batch read start {start} count {max_count}"
            )
        lac = self.last_add_confirmed
        if start > lac:
            raise errors.ReadException(f"entry {start} is beyond the LAC {lac}")
        last = min(start + min(max_count, MAX_READ_ENTRIES) - 1, lac)
        if not self._batching.on:
            return self._read(start, last, batch=False)
        out: list[LedgerEntry] = []
        budget = max_size if max_size > 0 else self.bk.config.netty_max_frame_size_bytes
        used = 0
        next_id = start
        count = _FIRST_BATCH_CHUNK
        while next_id <= last:
            chunk = self._read(next_id, min(next_id + count - 1, last), batch=True)
            for entry in chunk:
                size = len(entry)  # the payload size, without making its bytes
                if out and used + size > budget:
                    return out
                used += size
                out.append(entry)
            next_id += len(chunk)
            # Next, about as many entries as the rest of the budget holds at the mean size.
            count = (budget - used) * len(out) // max(used, 1) + 1
        return out

    def verify_entry(self, entry: bytes, entry_id: int | None = None) -> VerifiedEntry:
        """(entry id, LAC, ledger length, payload) of an entry as a bookie stored it, its digest
        checked (and its id, if given): the one place a verified entry is taken apart. Raises
        DigestMatchException."""
        return self._read_plan().verify(entry, entry_id)

    # --- iteration and asyncio ----------------------------------------------------------------

    def __len__(self) -> int:
        """Entries known to be confirmed: ``last_add_confirmed + 1``."""
        return self.last_add_confirmed + 1

    def __iter__(self) -> Iterator[LedgerEntry]:
        return self.entries()

    def entries(
        self,
        start: int = 0,
        end: int | None = None,
        *,
        batch_entries: int = 1000,
        read_ahead: int = 2,
    ) -> Iterator[LedgerEntry]:
        """Entries ``start..end`` (default: up to the LAC now, none when ``start`` is past it),
        in order, read ``batch_entries`` at a time with up to ``read_ahead`` further reads in
        flight (batched reads under the hood, as ``batch_read``). Raises at once
        IncorrectParameterException (bad range, ``batch_entries`` outside
        1..``MAX_READ_ENTRIES``, ``read_ahead`` < 0) and ReadException (``end`` beyond the
        LAC), the rest as ``read`` when the failing entry is reached."""
        return itertools.chain.from_iterable(
            self._entry_window(start, end, batch_entries, read_ahead)
        )

    def __aiter__(self) -> AsyncIterator[LedgerEntry]:
        return self.aentries()

    def aentries(
        self,
        start: int = 0,
        end: int | None = None,
        *,
        batch_entries: int = 1000,
        read_ahead: int = 2,
    ) -> AsyncIterator[LedgerEntry]:
        """``entries`` for asyncio code (``async for entry in handle``): each read is awaited,
        no thread is blocked. Raises as ``entries``."""
        return _each_async(self._entry_window(start, end, batch_entries, read_ahead))

    def _entry_window(
        self, start: int, end: int | None, batch_entries: int, read_ahead: int
    ) -> ReadWindow[list[LedgerEntry]]:
        def start_read(first: int, last: int, batch: bool) -> Future:
            return self.read_entries(first, last, batch=batch)

        return ReadWindow(
            start_read,
            read_chunk,
            self._batching,
            start,
            end,
            lac=self.last_add_confirmed,
            batch_entries=batch_entries,
            read_ahead=read_ahead,
        )

    async def batch_read_async(
        self, start: int, max_count: int, max_size: int
    ) -> list[LedgerEntry]:
        """``batch_read`` for asyncio code."""
        return await run_blocking(self.bk.executor, self.batch_read, start, max_count, max_size)

    # --- the LAC ----------------------------------------------------------------------------------

    async def read_last_add_confirmed_async(self) -> int:
        """``read_last_add_confirmed`` for asyncio code."""
        return await run_blocking(self.bk.executor, self.read_last_add_confirmed)

    async def wait_for_last_add_confirmed_async(self, previous: int, timeout: float) -> int:
        """``wait_for_last_add_confirmed`` for asyncio code (on the client's worker threads)."""
        return await run_blocking(
            self.bk.executor, self.wait_for_last_add_confirmed, previous, timeout
        )

    def read_last_add_confirmed(self) -> int:
        """Ask the bookies of the last ensemble for the LAC and update
        ``last_add_confirmed``: over V2 a READ of entry -1 (coverage rule); over V3 READ_LAC,
        as BookKeeper's ``readLastAddConfirmed`` does, so an explicit LAC counts too (see
        ``read_explicit_lac``). Raises ReadException, UnauthorizedAccessException."""
        if self.is_closed:
            return self._lac
        if not self.bk.config.use_v2_wire_protocol:
            return self.read_explicit_lac()
        found, length = self.lac_from_bookies(fence=False)
        if found > self._lac:
            self._lac, self._length = found, length
        return self._lac

    def read_explicit_lac(self) -> int:
        """BookKeeper's ``readExplicitLastConfirmed``: READ_LAC to the last ensemble, the
        highest of the explicit LACs writers flushed (``explicitLacInterval``) and of the LACs
        the bookies' last entries carry; updates ``last_add_confirmed`` if higher. A closed
        ledger answers its last entry id. Raises IncorrectParameterException (a V2 client),
        ReadException (too few answers), UnauthorizedAccessException."""
        if self.is_closed:
            return self._lac
        with timed("READ_LAC"):
            found, length = explicit_lac.explicit_lac_from_bookies(
                self.bk, self.ledger_id, self.metadata, self.verify_entry
            )
        if found > self._lac:
            self._lac = found
            if length is not None:
                self._length = max(self._length, length)
        return self._lac

    async def read_explicit_lac_async(self) -> int:
        """``read_explicit_lac`` for asyncio code."""
        return await run_blocking(self.bk.executor, self.read_explicit_lac)

    def wait_for_last_add_confirmed(self, previous: int, timeout: float) -> int:
        """Wait until the LAC passes ``previous`` or ``timeout`` seconds end; the LAC then
        (what a tailing reader waits on), also in ``last_add_confirmed``. A closed ledger, or a
        LAC already past ``previous``, answers at once.

        Over V3 (``useV2WireProtocol=False``) the last ensemble's bookies get long-poll reads
        (BookKeeper's ``readLacLongPoll``), answered the moment an add carries the LAC past
        ``previous``; over V2, which has no such request, the LAC is read again at growing
        intervals (10 ms up to 200 ms). Raises IncorrectParameterException (negative timeout),
        ReadException, UnauthorizedAccessException."""
        if timeout < 0 or timeout != timeout:
            raise errors.IncorrectParameterException(f"timeout must be >= 0, got {timeout}")
        deadline = time.monotonic() + timeout
        if self.is_closed or self._lac > previous:
            return self._lac
        if not self.bk.config.use_v2_wire_protocol:
            if lac.long_poll_past(self.bk, self.ledger_id, self.metadata, previous, timeout):
                return self.read_last_add_confirmed()
            return self._lac
        return lac.poll_past(
            self.read_last_add_confirmed, lambda: self.is_closed, previous, deadline
        )

    def read_last_add_confirmed_and_entry(
        self, entry_id: int, timeout: float, parallel: bool = False
    ) -> tuple[int, LedgerEntry | None]:
        """The LAC and entry ``entry_id`` (BookKeeper's ``readLastAddConfirmedAndEntry``, the
        tailing read): an entry at or below the LAC known here is read at once; past it, the
        call waits up to ``timeout`` seconds for the LAC to reach it. Returns (LAC, the entry, or
        None when it was not confirmed in time or came without its body); the LAC is also kept
        in ``last_add_confirmed``. A closed ledger answers (its last entry, None) past its end.

        Over V3 (``useV2WireProtocol=False``) the replicas of ``entry_id`` get long-poll reads
        carrying the entry: one after another, the next after ``firstSpeculativeReadLACTimeout``
        (growing by ``speculativeReadLACTimeoutBackoffMultiplier`` up to
        ``maxSpeculativeReadLACTimeout``), or all at once with ``parallel``. Over V2, which has no
        long poll, the LAC is polled as ``wait_for_last_add_confirmed`` does, then the entry read.

        Raises IncorrectParameterException (negative entry or timeout), ReadException,
        UnauthorizedAccessException, DigestMatchException, NoSuchEntryException."""
        if entry_id < 0 or timeout < 0 or timeout != timeout:
            raise errors.IncorrectParameterException(
                f"entry_id and timeout must be >= 0, got {entry_id} and {timeout}"
            )
        if self.is_closed and entry_id > self._lac:
            return self._lac, None
        if entry_id > self._lac and not self.bk.config.use_v2_wire_protocol:
            return self._long_poll_entry(entry_id, timeout, parallel)
        if entry_id > self._lac:
            self.wait_for_last_add_confirmed(entry_id - 1, timeout)
        if entry_id > self._lac:
            return self._lac, None
        (entry,) = self._read(entry_id, entry_id, batch=False)
        return self._lac, entry

    def _long_poll_entry(
        self, entry_id: int, timeout: float, parallel: bool
    ) -> tuple[int, LedgerEntry | None]:
        """``read_last_add_confirmed_and_entry`` past the known LAC over V3."""
        config = self.bk.config
        speculation = lac.LacSpeculation(
            first_s=config.first_speculative_read_lac_timeout_ms / 1000,
            max_s=config.max_speculative_read_lac_timeout_ms / 1000,
            multiplier=config.speculative_read_lac_timeout_backoff_multiplier,
        )
        found, verified = lac.long_poll_lac_and_entry(
            self.bk,
            self.ledger_id,
            self.metadata,
            entry_id,
            timeout,
            known_lac=self._lac,
            parallel=parallel,
            speculation=speculation,
            verify=self.verify_entry,
        )
        if verified is not None:
            found = max(found, verified.last_add_confirmed)
        if found > self._lac:
            self._lac = found
        if verified is None:
            return self._lac, None
        if verified.entry_id == self._lac:
            self._length = max(self._length, verified.ledger_length)
        entry = LedgerEntry(
            self.ledger_id,
            verified.entry_id,
            verified.payload,
            verified.last_add_confirmed,
            verified.ledger_length,
        )
        return self._lac, entry

    async def read_last_add_confirmed_and_entry_async(
        self, entry_id: int, timeout: float, parallel: bool = False
    ) -> tuple[int, LedgerEntry | None]:
        """``read_last_add_confirmed_and_entry`` for asyncio code (on the client's worker
        threads)."""
        return await run_blocking(
            self.bk.executor, self.read_last_add_confirmed_and_entry, entry_id, timeout, parallel
        )

    def lac_from_bookies(self, fence: bool) -> tuple[int, int]:
        """(LAC, length at the LAC) as the last ensemble's bookies report it (READ of entry -1,
        fencing if asked), once enough answered by the coverage rule. Raises ReadException
        (too few answers), UnauthorizedAccessException."""
        return lac.lac_from_bookies(
            self.bk, self.ledger_id, self.metadata, self.verify_entry, fence=fence
        )

    # --- closing ----------------------------------------------------------------------------

    def close_metadata(
        self,
        last_entry_id: int,
        length: int,
        ensembles: Mapping[int, tuple[str, ...]],
        expect: LedgerState,
    ) -> None:
        """Close the ledger in the metadata at ``last_entry_id`` (compare-and-set), folding in
        ``ensembles`` that start at or after the last segment. ``expect`` is the state this
        client holds it in: a writer (OPEN) raises LedgerClosedException if another client
        closed it elsewhere, LedgerFencedException if it is being recovered."""

        def close(md: LedgerMetadata) -> LedgerMetadata | None:
            if md.is_closed:
                if md.last_entry_id != last_entry_id and expect == LedgerState.OPEN:
                    raise errors.LedgerClosedException(
                        f"ledger {self.ledger_id} was closed by another client at "
                        f"{md.last_entry_id}"
                    )
                return None
            if expect == LedgerState.OPEN and md.state == LedgerState.IN_RECOVERY:
                raise errors.LedgerFencedException(
                    f"ledger {self.ledger_id} is being recovered by another client"
                )
            for first, bookies in ensembles.items():
                if first >= md.last_segment_start:
                    md = md.with_ensemble(first, bookies)
            return md.closed(last_entry_id, length)

        md = self.update_metadata(close)
        self._lac, self._length = md.last_entry_id, md.length

    def close(self) -> None:
        """Nothing to release for a read handle; kept for symmetry with LedgerHandle."""

    async def close_async(self) -> None:
        """``close`` for asyncio code."""
        await run_blocking(self.bk.executor, self.close)

    def __enter__(self) -> ReadHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


async def _each_async(chunks: ReadWindow[list[LedgerEntry]]) -> AsyncIterator[LedgerEntry]:
    async for entries in chunks:
        for entry in entries:
            yield entry
