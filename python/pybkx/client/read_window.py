"""Reading a range of a ledger through a window of chunked reads: the range rule every read of
confirmed entries obeys, whether a handle still batches its reads, and the window behind
iteration (sync and asyncio) and Arrow batches: chunks in flight, read-ahead bounds, and a
failed batched chunk read again singly. It never builds a read plan nor converts entries; the
handle hands it a function that starts one chunk's read and one that takes its result apart.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pybkx import errors
from pybkx._core import MAX_READ_ENTRIES, Future
from pybkx.client.aio import wrap

__all__ = ["BatchReads", "ReadWindow", "check_range"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

StartRead = Callable[[int, int, bool], Future]
"""Starts reading entries ``first..last``, batched or not; its future gives a raw result."""

Split = Callable[[Any], tuple[T, bool]]
"""Takes a raw read result apart: what the face yields, and ``batch_ok``."""


def check_range(first: int, last: int, lac: int) -> None:
    """BookKeeper's rule for reading confirmed entries (``LedgerHandle.asyncReadEntries`` and
    ``readAsync``): IncorrectParameterException when ``first`` is negative or past ``last``,
    then ReadException when ``last`` is past the LAC."""
    if first < 0 or first > last:
        raise errors.IncorrectParameterException(f"bad range {first}..{last}")
    if last > lac:
        raise errors.ReadException(
            f"entries up to {last} requested, but the last confirmed is {lac}"
        )


class BatchReads:
    """Whether one handle's reads go out batched: while ``batchReadEnabled`` holds and the
    bookies take BATCH_READ_ENTRY, off for good once every replica dropped a batch request
    (BP-62's rule for bookies that predate it; BookKeeper's ``notSupportBatch``)."""

    def __init__(self, ledger_id: int, enabled: bool) -> None:
        self.ledger_id = ledger_id
        self.on = enabled

    def note(self, batch_ok: bool) -> None:
        """Take the ``batch_ok`` of a read sent batched."""
        if not batch_ok and self.on:
            logger.info(
                "ledger %d: bookies do not support batch reads; using single reads", self.ledger_id
            )
            self.on = False


@dataclass(frozen=True)
class _Chunk:
    """One read of the window in flight: entries ``first..last``, sent batched or not."""

    first: int
    last: int
    batched: bool
    future: Future


class ReadWindow(Generic[T]):
    """Entries ``first..last`` read ``batch_entries`` at a time, in order, with up to
    ``read_ahead`` further chunks in flight while the caller takes one (0: each read starts
    when the previous chunk is taken): at most ``read_ahead + 1`` chunks are held. Each chunk
    goes out batched while ``batching`` is on; iterating (``for`` or ``async for``) gives one
    ``T`` per chunk.

    ``last`` None reads up to ``lac``, nothing when ``first`` is past it. Raises at once
    IncorrectParameterException (bad range, ``batch_entries`` outside 1..MAX_READ_ENTRIES,
    ``read_ahead`` < 0) and ReadException (``last`` past ``lac``); the reads' own errors as
    their chunk is reached. A chunk failing with ReadException after any chunk went out batched
    is read again singly, once the reads in flight are done: bookies without BP-62 close the
    connection on a batch request, so one chunk's batch requests can close the connections
    another chunk's single reads were using, on every replica of an entry.
    """

    def __init__(
        self,
        start: StartRead,
        split: Split[T],
        batching: BatchReads,
        first: int,
        last: int | None,
        *,
        lac: int,
        batch_entries: int,
        read_ahead: int,
    ) -> None:
        if last is None:
            if first < 0:
                raise errors.IncorrectParameterException(f"bad range start {first}")
            last = lac
        else:
            check_range(first, last, lac)
        if not 1 <= batch_entries <= MAX_READ_ENTRIES or read_ahead < 0:
            raise errors.IncorrectParameterException(
                f"batch_entries must be 1..{MAX_READ_ENTRIES} and read_ahead >= 0, "
                f"got {batch_entries} and {read_ahead}"
            )
        self._start = start
        self._split = split
        self._batching = batching
        self._next_first = first
        self._last = last
        self._batch_entries = batch_entries
        self._read_ahead = read_ahead
        self._window: deque[_Chunk] = deque()  # at most read_ahead + 1 (``_next_chunk``)
        self._sent_batched = False

    def _next_chunk(self) -> _Chunk | None:
        """Fills the window to ``read_ahead + 1`` chunks, then takes the oldest one."""
        while self._next_first <= self._last and len(self._window) <= self._read_ahead:
            first = self._next_first
            last = min(first + self._batch_entries - 1, self._last)
            batched = self._batching.on
            self._window.append(_Chunk(first, last, batched, self._start(first, last, batched)))
            self._sent_batched |= batched
            self._next_first = last + 1
        return self._window.popleft() if self._window else None

    def _single_reads_of(self, chunk: _Chunk) -> _Chunk:
        return _Chunk(chunk.first, chunk.last, False, self._start(chunk.first, chunk.last, False))

    def _took(self, chunk: _Chunk, value: Any) -> T:
        out, batch_ok = self._split(value)
        if chunk.batched:
            self._batching.note(batch_ok)
        return out

    def __iter__(self) -> Iterator[T]:
        while (chunk := self._next_chunk()) is not None:
            try:
                value = chunk.future.result()
            except errors.ReadException:
                if not self._sent_batched:
                    raise
                for other in self._window:
                    other.future.exception()  # waits; its outcome is taken in its turn
                chunk = self._single_reads_of(chunk)
                value = chunk.future.result()
            yield self._took(chunk, value)

    async def __aiter__(self) -> AsyncIterator[T]:
        while (chunk := self._next_chunk()) is not None:
            try:
                value = await chunk.future
            except errors.ReadException:
                if not self._sent_batched:
                    raise
                if self._window:  # waits; their outcomes are taken in their turn
                    await asyncio.wait([wrap(other.future) for other in self._window])
                chunk = self._single_reads_of(chunk)
                value = await chunk.future
            yield self._took(chunk, value)
