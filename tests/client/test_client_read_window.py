"""The read window behind iteration and Arrow batches, without bookies: read-ahead bounds, the
batch-or-single choice, a failed batched chunk read again singly, the same for ``for`` and
``async for``.

Owns the window's rules; reads are fakes that complete at once (or fail) as a test says.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Generator
from typing import Any

import pytest

from pybkx import errors
from pybkx.client.aio import await_future
from pybkx.client.read_window import BatchReads, ReadWindow


class Done(concurrent.futures.Future[Any]):
    """A completed future, awaitable as a ``pybkx.Future`` is."""

    def __init__(self, value: Any = None, error: BaseException | None = None) -> None:
        super().__init__()
        if error is None:
            self.set_result(value)
        else:
            self.set_exception(error)

    def __await__(self) -> Generator[Any, None, Any]:
        return await_future(self)  # type: ignore[arg-type]


class Reads:
    """Fake reads of entries ``first..last``: the value is the list of ids and ``batch_ok``;
    a batched read of a chunk starting in ``fail_batched`` raises ReadException."""

    def __init__(self, fail_batched: frozenset[int] = frozenset(), batch_ok: bool = True) -> None:
        self.fail_batched = fail_batched
        self.batch_ok = batch_ok
        self.sent: list[tuple[int, int, bool]] = []

    def start(self, first: int, last: int, batch: bool) -> Any:
        self.sent.append((first, last, batch))
        if batch and first in self.fail_batched:
            return Done(error=errors.ReadException(f"batch read of {first} dropped"))
        return Done((list(range(first, last + 1)), self.batch_ok if batch else False))


def split(value: Any) -> tuple[list[int], bool]:
    entries, batch_ok = value
    return entries, batch_ok


SIZES = {"batch_entries": 10, "read_ahead": 2}


def window(reads: Reads, batching: BatchReads, **kw: Any) -> ReadWindow[list[int]]:
    args = {"lac": 99, **SIZES, **kw}
    first, last = args.pop("first", 0), args.pop("last", 29)
    return ReadWindow(reads.start, split, batching, first, last, **args)


def both_faces(make: Any) -> list[list[list[int]]]:
    """The chunks of a fresh window by ``for`` and by ``async for``."""

    async def chunks_async() -> list[list[int]]:
        return [chunk async for chunk in make()]

    return [list(make()), asyncio.run(chunks_async())]


def test_read_ahead_bounds_the_chunks_in_flight() -> None:
    reads = Reads()
    it = iter(window(reads, BatchReads(1, True), read_ahead=1))
    assert next(it) == list(range(10))
    # The first chunk taken, one more in flight: never more than read_ahead + 1 sent.
    assert reads.sent == [(0, 9, True), (10, 19, True)]
    assert list(it) == [list(range(10, 20)), list(range(20, 30))]


def test_a_failed_batched_chunk_is_read_again_singly_on_both_faces() -> None:
    reads = Reads(fail_batched=frozenset({10}))
    for got in both_faces(lambda: window(reads, BatchReads(1, True))):
        assert [e for chunk in got for e in chunk] == list(range(30))
    assert reads.sent.count((10, 19, False)) == 2  # once per face


def test_a_chunk_failing_with_nothing_batched_raises_on_both_faces() -> None:
    def failing(first: int, last: int, batch: bool) -> Any:
        return Done(error=errors.ReadException(f"{first}..{last} unreadable"))

    def make() -> ReadWindow[list[int]]:
        return ReadWindow(failing, split, BatchReads(1, False), 0, 29, lac=99, **SIZES)

    with pytest.raises(errors.ReadException):
        list(make())  # nothing went out batched: no second try

    async def drain() -> None:
        async for _ in make():
            pass

    with pytest.raises(errors.ReadException):
        asyncio.run(drain())


def test_batching_stops_for_good_once_a_batched_read_says_unsupported() -> None:
    reads = Reads(batch_ok=False)
    batching = BatchReads(1, True)
    assert both_faces(lambda: window(reads, batching, read_ahead=0))[0][0] == list(range(10))
    assert not batching.on
    assert [batch for _, _, batch in reads.sent] == [True, False, False, False, False, False]


def test_an_open_end_reads_up_to_the_lac_and_nothing_past_it() -> None:
    reads = Reads()
    assert list(window(reads, BatchReads(1, True), first=25, last=None, lac=29)) == [
        list(range(25, 30))
    ]
    assert list(window(reads, BatchReads(1, True), first=30, last=None, lac=29)) == []
    with pytest.raises(errors.IncorrectParameterException):
        window(reads, BatchReads(1, True), first=-1, last=None)
    for bad in ({"batch_entries": 0}, {"read_ahead": -1}, {"batch_entries": (1 << 20) + 1}):
        with pytest.raises(errors.IncorrectParameterException):
            window(reads, BatchReads(1, True), **bad)
