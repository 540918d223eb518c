"""Ledger handles: ``ReadHandle`` (reads, LAC) and ``LedgerHandle`` (appends, ensemble
changes, close). They decide per ledger; every entry moves through the Rust ``LedgerWriter``
and ``ReadPlan``, and a read plan is built once per metadata version, not per read.

Semantics follow Apache BookKeeper's client: E >= Qw >= Qa, round-robin write sets, in-order
completion once Qa bookies acknowledged, the LAC piggy-backed in every entry, ensemble changes
written to the metadata by compare-and-set.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pybkx import errors
from pybkx._core import (
    FLAG_DO_FENCING,
    MAX_READ_ENTRIES,
    Future,
    LedgerEntry,
    LedgerWriter,
    ReadPlan,
    master_key,
)
from pybkx.client import arrow
from pybkx.client.aio import run_blocking
from pybkx.client.context import ClientContext
from pybkx.client.ensemble import replacement_ensemble
from pybkx.client.failures import BookieFailure
from pybkx.client.metrics import count_ensemble_change
from pybkx.meta import LedgerMetadata, LedgerState, Versioned

if TYPE_CHECKING:
    import pyarrow

    from pybkx._core import ColumnsResult, VerifiedEntry

__all__ = ["LedgerHandle", "ReadHandle", "new_writer"]

logger = logging.getLogger(__name__)

#: A slot failing again this soon after its replacement waits before the next change, so a
#: bookie still going down (its registration not yet expired) is not replaced in a tight loop.
_REFAIL_WINDOW_S = 1.0
_REFAIL_PAUSE_S = 0.5
#: Entries the first read of a ``batch_read`` asks for; later reads are sized from the mean
#: payload so far, so a small ``max_size`` does not fetch ``max_count`` entries.
_FIRST_BATCH_CHUNK = 1024
#: A bookie that took its own slot back and failed again within this is not taken back again:
#: the next change needs another bookie, or fails the writer (never a loop of self-replacement).
_SELF_RETURN_WINDOW_S = 30.0
#: How a V2 client waiting for the LAC reads it again: first after this, then twice as late
#: each time, up to the maximum (V2 has no long-poll read).
_POLL_FIRST_S = 0.01
_POLL_MAX_S = 0.2


def _covered(ensemble_size: int, write_quorum: int, ack_quorum: int, known: Sequence[bool]) -> bool:
    """BookKeeper's coverage rule: in every write set fewer than Qa bookies are unknown."""
    for start in range(ensemble_size):
        unknown = sum(1 for i in range(write_quorum) if not known[(start + i) % ensemble_size])
        if unknown >= ack_quorum:
            return False
    return True


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


@dataclass(frozen=True)
class _Chunk:
    """One read of an iteration in flight: entries ``first..last``, sent batched or not."""

    first: int
    last: int
    batched: bool
    future: Future


class ReadHandle:
    """A ledger opened for reading (see ``BookKeeper.open_ledger``)."""

    def __init__(self, bk: ClientContext, ledger_id: int, versioned: Versioned[LedgerMetadata]):
        self.bk = bk
        self.ledger_id = ledger_id
        self._versioned = versioned
        # BATCH_READ_ENTRY is V2 only (as in BookKeeper, which batches only with
        # useV2WireProtocol): a V3 client reads entry by entry.
        self._batch_supported = bk.config.batch_read_enabled and bk.config.use_v2_wire_protocol
        md = versioned.value
        self._lac = md.last_entry_id if md.is_closed else -1
        self._length = md.length if md.is_closed else 0
        self._plan: tuple[Versioned[LedgerMetadata], ReadPlan] | None = None
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
        """The plan of the current metadata version, built once."""
        cached = self._plan
        if cached is not None and cached[0] is self._versioned:
            return cached[1]
        md = self.metadata
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
            orders=self._read_orders(md),
            max_batch_bytes=self.bk.config.netty_max_frame_size_bytes,
        )
        self._plan = (self._versioned, plan)
        return plan

    def _read_orders(self, md: LedgerMetadata) -> list[list[list[int]]]:
        """Per segment, per write-set start: the replica order of the placement policy
        (``reorderReadSequenceEnabled``, default on); empty for the write-set order."""
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
            batch=batch and self._batch_supported,
            avoid=self._avoided(),
            flags=flags,
            master_key=key,
            held_by=list(held_by),
        )

    def _read(self, first: int, last: int, batch: bool) -> list[LedgerEntry]:
        read = self.read_entries(first, last, batch=batch).result()
        if batch:
            self._note_batch_support(read.batch_ok)
        return list(read.entries)

    def _read_chunk(self, first: int, last: int) -> _Chunk:
        """Starts reading one chunk of an iteration, batched while the bookies allow it."""
        batched = self._batch_supported
        return _Chunk(first, last, batched, self.read_entries(first, last, batch=True))

    def _read_again_singly(self, chunk: _Chunk, in_flight: list[Future]) -> list[LedgerEntry]:
        """Reads a failed chunk of an iteration again, with single reads, once the reads still
        in flight are done. Bookies without BP-62 close the connection on a batch request, so
        the batch requests of an iteration's other chunks can close the connections that this
        chunk's single reads (its own fall-back, or all it sent) were using, on every replica of
        an entry. Raises as ``read`` if it fails again."""
        for other in in_flight:
            other.exception()  # waits; its outcome is taken in its turn
        return list(self.read_entries(chunk.first, chunk.last, batch=False).result().entries)

    def _note_batch_support(self, batch_ok: bool) -> None:
        """Stop batching for good once every replica dropped a batch request (BP-62's rule for
        bookies that predate BATCH_READ_ENTRY)."""
        if not batch_ok and self._batch_supported:
            logger.info(
                "ledger %d: bookies do not support batch reads; using single reads", self.ledger_id
            )
            self._batch_supported = False

    def _check_confirmed(self, first: int, last: int) -> None:
        if first < 0 or last < first:
            raise errors.IncorrectParameterException(f"bad range {first}..{last}")
        lac = self.last_add_confirmed
        if last > lac:
            raise errors.ReadException(
                f"entries up to {last} requested, but the last confirmed is {lac}"
            )

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
        return self._arrow_batch(self._read_columns(first, last).result())

    def arrow_batches(
        self, first: int, last: int, batch_entries: int, read_ahead: int = 2
    ) -> Iterator[pyarrow.RecordBatch]:
        """Entries ``first..last`` as ``read_arrow`` batches of at most ``batch_entries`` rows,
        in order, with up to ``read_ahead`` further batches being read while the caller
        consumes one (0: each read starts when the previous batch is taken), so the bookies
        and the caller work at once. At most ``read_ahead + 1`` batches are held.

        Raises IncorrectParameterException (bad range, ``batch_entries`` < 1 or above
        ``MAX_READ_ENTRIES``, ``read_ahead`` < 0) at once, and what ``read_arrow`` raises as
        the failing batch is reached.
        """
        self._check_confirmed(first, last)
        if not 1 <= batch_entries <= MAX_READ_ENTRIES or read_ahead < 0:
            raise errors.IncorrectParameterException(
                f"batch_entries must be 1..{MAX_READ_ENTRIES} and read_ahead >= 0, "
                f"got {batch_entries} and {read_ahead}"
            )
        return self._arrow_batches(first, last, batch_entries, read_ahead)

    def _arrow_batches(
        self, first: int, last: int, batch_entries: int, read_ahead: int
    ) -> Iterator[pyarrow.RecordBatch]:
        reading: deque[Future] = deque()
        next_first = first
        while reading or next_first <= last:
            while next_first <= last and len(reading) <= read_ahead:
                reading.append(
                    self._read_columns(next_first, min(last, next_first + batch_entries - 1))
                )
                next_first += batch_entries
            yield self._arrow_batch(reading.popleft().result())

    async def read_arrow_async(self, first: int, last: int) -> pyarrow.RecordBatch:
        """``read_arrow`` for asyncio code (the read is awaited, no thread blocks)."""
        self._check_confirmed(first, last)
        return self._arrow_batch(await self._read_columns(first, last))

    def _read_columns(self, first: int, last: int) -> Future:
        return self._read_plan().read_columns(
            first, last, batch=self._batch_supported, avoid=self._avoided()
        )

    def _arrow_batch(self, columns: ColumnsResult) -> pyarrow.RecordBatch:
        self._note_batch_support(columns.batch_ok)
        return arrow.record_batch(
            self.ledger_id, columns.rows, columns.entry_ids, columns.offsets, columns.payloads
        )

    def read_unconfirmed(self, first: int, last: int) -> list[LedgerEntry]:
        """Entries ``first..last`` regardless of the LAC (they may not survive recovery).
        Raises as ``read`` does, but never for the LAC."""
        return self._read(first, last, batch=False)

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
        if not self._batch_supported:
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
        """The entry a bookie stored (its id, LAC, ledger length, payload), its digest checked
        (and its id, if given). Raises DigestMatchException."""
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
        """Entries ``start..end`` (default: up to the LAC when iteration starts), in order,
        read ``batch_entries`` at a time with up to ``read_ahead`` further reads in flight
        (batched reads under the hood, as ``batch_read``). Raises as ``read``."""
        last = self.last_add_confirmed if end is None else end
        if start < 0 or batch_entries <= 0 or read_ahead < 0:
            raise errors.IncorrectParameterException(
                f"bad iteration start {start}, batch {batch_entries}, read-ahead {read_ahead}"
            )
        if last > self.last_add_confirmed:
            raise errors.ReadException(
                f"entries up to {last} requested, but the last confirmed is "
                f"{self.last_add_confirmed}"
            )
        window: deque[_Chunk] = deque()
        next_first = start
        # Whether a chunk went out batched: its batch requests may close connections that the
        # single reads of other chunks use (bookies without BP-62).
        sent_batched = False

        def fill() -> None:
            nonlocal next_first, sent_batched
            while next_first <= last and len(window) <= read_ahead:
                chunk_last = min(next_first + batch_entries - 1, last)
                window.append(self._read_chunk(next_first, chunk_last))
                sent_batched |= window[-1].batched
                next_first = chunk_last + 1

        fill()
        while window:
            chunk = window.popleft()
            try:
                read = chunk.future.result()
            except errors.ReadException:
                if not sent_batched:
                    raise
                entries = self._read_again_singly(chunk, [c.future for c in window])
            else:
                entries = read.entries
                self._note_batch_support(read.batch_ok)
            fill()
            yield from entries

    def __aiter__(self) -> AsyncIterator[LedgerEntry]:
        return self.aentries()

    async def aentries(
        self,
        start: int = 0,
        end: int | None = None,
        *,
        batch_entries: int = 1000,
        read_ahead: int = 2,
    ) -> AsyncIterator[LedgerEntry]:
        """``entries`` for asyncio code (``async for entry in handle``): each read is awaited,
        no thread is blocked."""
        last = self.last_add_confirmed if end is None else end
        if start < 0 or batch_entries <= 0 or read_ahead < 0 or last > self.last_add_confirmed:
            raise errors.IncorrectParameterException(
                f"bad iteration {start}..{last} (LAC {self.last_add_confirmed})"
            )
        window: deque[_Chunk] = deque()
        next_first = start
        sent_batched = False  # as in `entries`
        while next_first <= last or window:
            while next_first <= last and len(window) <= read_ahead:
                chunk_last = min(next_first + batch_entries - 1, last)
                window.append(self._read_chunk(next_first, chunk_last))
                sent_batched |= window[-1].batched
                next_first = chunk_last + 1
            chunk = window.popleft()
            try:
                read = await chunk.future
            except errors.ReadException:
                if not sent_batched:
                    raise
                in_flight = [c.future for c in window]
                entries = await run_blocking(
                    self.bk.executor, self._read_again_singly, chunk, in_flight
                )
            else:
                entries = read.entries
                self._note_batch_support(read.batch_ok)
            for entry in entries:
                yield entry

    async def batch_read_async(
        self, start: int, max_count: int, max_size: int
    ) -> list[LedgerEntry]:
        """``batch_read`` for asyncio code."""
        return await run_blocking(self.bk.executor, self.batch_read, start, max_count, max_size)

    async def read_last_add_confirmed_async(self) -> int:
        """``read_last_add_confirmed`` for asyncio code."""
        return await run_blocking(self.bk.executor, self.read_last_add_confirmed)

    async def wait_for_last_add_confirmed_async(self, previous: int, timeout: float) -> int:
        """``wait_for_last_add_confirmed`` for asyncio code (on the client's worker threads)."""
        return await run_blocking(
            self.bk.executor, self.wait_for_last_add_confirmed, previous, timeout
        )

    def read_last_add_confirmed(self) -> int:
        """Ask the bookies of the last ensemble for the LAC (READ of entry -1, coverage rule)
        and update ``last_add_confirmed``. Raises ReadException, UnauthorizedAccessException."""
        if self.is_closed:
            return self._lac
        lac, length = self.lac_from_bookies(fence=False)
        if lac > self._lac:
            self._lac, self._length = lac, length
        return self._lac

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
            if self._long_poll(previous, timeout):
                return self.read_last_add_confirmed()
            return self._lac
        pause = _POLL_FIRST_S
        while True:
            lac = self.read_last_add_confirmed()
            remaining = deadline - time.monotonic()
            if lac > previous or remaining <= 0 or self.is_closed:
                return lac
            time.sleep(min(pause, remaining))
            pause = min(pause * 2, _POLL_MAX_S)

    def _long_poll(self, previous: int, timeout: float) -> bool:
        """Long-poll reads to every bookie of the last ensemble; True once one reports a LAC
        past ``previous`` within ``timeout`` seconds."""
        passed = threading.Event()

        def answered(future: Future) -> None:
            if future.exception() is None and future.result().lac > previous:
                passed.set()

        ms = int(timeout * 1000)
        for bookie in self.metadata.last_ensemble:
            self.bk.bookies.long_poll_lac(
                self.bk.address_of(bookie), self.ledger_id, previous, ms
            ).add_done_callback(answered)
        return passed.wait(timeout)

    def lac_from_bookies(self, fence: bool) -> tuple[int, int]:
        """(LAC, length at the LAC) as the last ensemble's bookies report it (READ of entry -1,
        fencing if asked), once enough answered by the coverage rule. Raises ReadException
        (too few answers), UnauthorizedAccessException."""
        md = self.metadata
        bookies = [self.bk.address_of(b) for b in md.last_ensemble]
        key = master_key(md.password)
        flags = FLAG_DO_FENCING if fence else 0
        futures = [
            self.bk.bookies.read(b, self.ledger_id, -1, flags, key if fence else None)
            for b in bookies
        ]
        known = [False] * len(bookies)
        best = (-1, 0)
        last_error: Exception | None = None
        for i, future in enumerate(futures):
            try:
                last = self.verify_entry(future.result())
                known[i] = True
                best = max(best, (last.last_add_confirmed, last.ledger_length))
            except (errors.NoSuchEntryException, errors.NoSuchLedgerExistsException):
                known[i] = True
            except errors.UnauthorizedAccessException:
                raise
            except errors.BKException as exc:
                last_error = exc
        if not _covered(md.ensemble_size, md.write_quorum_size, md.ack_quorum_size, known):
            raise errors.ReadException(
                f"ledger {self.ledger_id}: too few bookies answered the LAC read"
                + (f" (last error: {last_error})" if last_error else "")
            )
        return best

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
