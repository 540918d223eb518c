"""Copying one fragment: read the entries the lost bookies held from the surviving replicas
(batched reads, verified digests) and write each onto the bookie that replaces the lost one at its
ensemble index, with recovery adds, pipelined: the next chunk is read while the last one is
written, and the adds go out through a small sliding window of bytes in flight. It never
changes the ledger's metadata: re-pointing the ensemble is its caller's."""

from __future__ import annotations

import contextlib
import logging
from collections import deque
from collections.abc import Callable, Sequence

from pybkx import errors
from pybkx._core import FLAG_RECOVERY_ADD, DigestManager, Future, master_key
from pybkx.client import BookKeeper, ReadHandle
from pybkx.recovery.fragments import Fragment
from pybkx.recovery.rate import ByteRate

__all__ = ["CHUNK_BYTES", "FragmentUnreadable", "copy_fragment"]

logger = logging.getLogger(__name__)

#: About how many payload bytes one chunk of a copy holds; two chunks are in memory at once
#: (one being written, one being read). One batch read serves a chunk, and a source bookie
#: answers it at once on one of its I/O threads: 8 MiB reads held those threads long enough
#: to raise other clients' add p99 more than 1 MiB reads did, at the same speed
#: (docs/performance.md, "Healing a lost bookie", the read chunk per copy).
CHUNK_BYTES = 1 << 20
#: Entries per chunk, whatever their size.
MAX_CHUNK_ENTRIES = 4096
#: The most bytes of recovery adds one copy leaves unanswered; past it the copy waits for its
#: oldest add. Small on purpose: a target bookie's journal then never holds more than this much
#: of a copy's data ahead of a client's add, which is what a client's p99 pays while healing
#: runs (a whole chunk sent at once queued megabytes in front of it). Measured on one disk
#: (docs/performance.md, "Healing a lost bookie", "How big a window"): 1 MiB healed faster
#: than 256 KiB but cost the client's p99 much more; below 256 KiB healing slowed with no p99
#: gain.
IN_FLIGHT_BYTES = 256 << 10
#: Bytes acknowledged between two ``on_copied`` calls (progress, not accounting).
REPORT_BYTES = 1 << 20


class FragmentUnreadable(errors.BKException):
    """No surviving replica could give an entry of the fragment: its data is lost."""


def copy_fragment(
    bk: BookKeeper,
    handle: ReadHandle,
    fragment: Fragment,
    replacement: Sequence[str],
    on_copied: Callable[[int], None] | None = None,
    rate: ByteRate | None = None,
) -> tuple[int, int]:
    """Copy onto ``replacement[i]`` (a bookie id) every entry of ``fragment`` whose write set
    holds a lost index ``i``. Returns (entries written, bytes written); ``on_copied(bytes)`` is
    called as the targets acknowledge (about every REPORT_BYTES, and at the end); ``rate``
    paces the writes.

    Raises FragmentUnreadable (an entry is on no surviving replica, or every copy is corrupt),
    and what the bookies' answers raise for the adds (TimeoutException,
    BookieHandleNotAvailableException, ...): the fragment is then not copied.
    """
    if fragment.entries == 0:
        return 0, 0
    md = handle.metadata
    digest = DigestManager(fragment.ledger_id, md.password, md.digest_type.name)
    key = master_key(md.password)
    targets = {i: bk.address_of(replacement[i]) for i in fragment.lost}
    lost = set(fragment.lost)
    # Which lost indexes hold each write-set start: the same for every entry of that start.
    holders = [[i for i in md.write_set(start) if i in lost] for start in range(md.ensemble_size)]
    per_chunk = _entries_per_chunk(md.length, md.last_entry_id)

    # Only the entries the lost bookies held: on a striped ledger the other write-set starts
    # are not read at all (a third of the reads with E=3, Qw=2; three fifths with E=5, Qw=2).
    held_by = sorted(lost)

    def read(first: int) -> Future:
        last = min(fragment.last, first + per_chunk - 1)
        return handle.read_entries(first, last, batch=True, held_by=held_by)

    written = total = 0
    window = _Window(IN_FLIGHT_BYTES, on_copied)
    reading: Future | None = read(fragment.first)
    next_first = fragment.first + per_chunk
    try:
        while reading is not None:
            try:
                entries = reading.result().entries
            except (
                errors.ReadException,
                errors.DigestMatchException,
                errors.NoSuchEntryException,
            ) as exc:
                raise FragmentUnreadable(
                    f"ledger {fragment.ledger_id}: entries {fragment.first}..{fragment.last} "
                    f"cannot be read from any surviving replica: {type(exc).__name__}: {exc}"
                ) from exc
            reading = read(next_first) if next_first <= fragment.last else None
            next_first += per_chunk
            for entry in entries:
                # The read gave only entries a lost position held: `indexes` is never empty.
                indexes = holders[entry.entry_id % md.ensemble_size]
                # Its own LAC and length: the bytes are the ones its writer sent.
                packaged = entry.packaged(digest)
                for index in indexes:
                    window.make_room(len(packaged))
                    if rate is not None:
                        rate.take(len(packaged))
                    window.push(
                        bk.bookies.add(
                            targets[index],
                            fragment.ledger_id,
                            entry.entry_id,
                            key,
                            packaged,
                            FLAG_RECOVERY_ADD,
                        ),
                        len(packaged),
                    )
                    written += 1
                    total += len(packaged)
        window.drain()
    except BaseException:
        # No add may be left running behind a failed copy: the caller may retry at once.
        window.abandon()
        raise
    return written, total


class _Window:
    """The adds of one copy still unanswered, oldest first, bounded by ``limit`` bytes."""

    def __init__(self, limit: int, on_copied: Callable[[int], None] | None) -> None:
        self._limit = limit
        self._on_copied = on_copied
        self._adds: deque[tuple[Future, int]] = deque()
        self._in_flight = 0
        self._unreported = 0

    def make_room(self, size: int) -> None:
        """Wait for the oldest adds until ``size`` more bytes fit (one add always fits).
        Raises the first failed add's error."""
        while self._adds and self._in_flight + size > self._limit:
            self._complete_oldest()

    def push(self, future: Future, size: int) -> None:
        self._adds.append((future, size))
        self._in_flight += size

    def drain(self) -> None:
        """Wait for every add and report what is left. Raises the first failed add's error."""
        while self._adds:
            self._complete_oldest()
        self._report()

    def abandon(self) -> None:
        """Wait for every add, ignoring their errors (the copy has failed already)."""
        for future, _ in self._adds:
            with contextlib.suppress(errors.BKException):
                future.result()
        self._adds.clear()
        self._in_flight = 0

    def _complete_oldest(self) -> None:
        future, size = self._adds.popleft()
        self._in_flight -= size
        future.result()
        self._unreported += size
        if self._unreported >= REPORT_BYTES:
            self._report()

    def _report(self) -> None:
        if self._unreported and self._on_copied is not None:
            self._on_copied(self._unreported)
        self._unreported = 0


def _entries_per_chunk(length: int, last_entry_id: int) -> int:
    """Entries per chunk so that a chunk's range holds about CHUNK_BYTES (from the ledger's
    mean entry size; the metadata of a closed ledger gives both). Of a striped ledger's range
    only the lost bookies' entries are read, so each source bookie's answers stay as small as
    when every entry was read."""
    count = last_entry_id + 1
    mean = max(1, length // count) if count > 0 else 1
    return max(1, min(MAX_CHUNK_ENTRIES, CHUNK_BYTES // mean))
