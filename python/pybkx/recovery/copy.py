"""Copying one fragment: read its entries from the surviving replicas (batched reads, verified
digests) and write each onto the bookie that replaces the lost one at its ensemble index, with
recovery adds, pipelined: the next chunk is read while the last one is written."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from pybkx import errors
from pybkx._core import FLAG_RECOVERY_ADD, DigestManager, Future, master_key
from pybkx.client import BookKeeper, ReadHandle
from pybkx.recovery.fragments import Fragment
from pybkx.recovery.rate import ByteRate

__all__ = ["CHUNK_BYTES", "FragmentUnreadable", "copy_fragment"]

logger = logging.getLogger(__name__)

#: About how many payload bytes one chunk of a copy holds; two chunks are in memory at once
#: (one being written, one being read).
CHUNK_BYTES = 8 << 20
#: Entries per chunk, whatever their size.
MAX_CHUNK_ENTRIES = 4096


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
    called after each chunk is durable on its targets; ``rate`` paces the writes.

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

    def read(first: int) -> Future:
        return handle.read_entries(first, min(fragment.last, first + per_chunk - 1), batch=True)

    written = total = 0
    adds: list[tuple[Future, int]] = []
    reading: Future | None = read(fragment.first)
    next_first = fragment.first + per_chunk
    while reading is not None:
        try:
            entries, _ = reading.result()
        except (
            errors.ReadException,
            errors.DigestMatchException,
            errors.NoSuchEntryException,
        ) as exc:
            _drain(adds)
            raise FragmentUnreadable(
                f"ledger {fragment.ledger_id}: entries {fragment.first}..{fragment.last} "
                f"cannot be read from any surviving replica: {type(exc).__name__}: {exc}"
            ) from exc
        reading = read(next_first) if next_first <= fragment.last else None
        next_first += per_chunk
        chunk_bytes = _drain(adds)
        if chunk_bytes and on_copied is not None:
            on_copied(chunk_bytes)
        adds = []
        if rate is not None:
            rate.take(sum(len(e) * len(holders[e.entry_id % md.ensemble_size]) for e in entries))
        for entry in entries:
            indexes = holders[entry.entry_id % md.ensemble_size]
            if not indexes:
                continue
            packaged = digest.package(
                entry.entry_id, entry.last_add_confirmed, entry.ledger_length, entry.payload
            )
            for index in indexes:
                adds.append(
                    (
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
                )
                written += 1
                total += len(packaged)
    last_bytes = _drain(adds)
    if last_bytes and on_copied is not None:
        on_copied(last_bytes)
    return written, total


def _drain(adds: list[tuple[Future, int]]) -> int:
    """Wait for every add; their bytes. Raises the first add's error (after waiting for all,
    so that no add is left running behind a failed copy)."""
    first_error: BaseException | None = None
    done = 0
    for future, size in adds:
        try:
            future.result()
            done += size
        except errors.BKException as exc:
            first_error = first_error or exc
    if first_error is not None:
        raise first_error
    return done


def _entries_per_chunk(length: int, last_entry_id: int) -> int:
    """Entries per chunk so that a chunk holds about CHUNK_BYTES (from the ledger's mean entry
    size; the metadata of a closed ledger gives both)."""
    count = last_entry_id + 1
    mean = max(1, length // count) if count > 0 else 1
    return max(1, min(MAX_CHUNK_ENTRIES, CHUNK_BYTES // mean))
