"""Ledger operations for administrators, shared by ``pybkx shell`` and the admin HTTP API:
metadata as BookKeeper's tools show it, reading entries without recovering the ledger, listing,
deleting, and the write-and-read check (``simpletest``, ``bookiesanity``). It acts through the
client and the metadata store; it never prints or parses arguments.
"""

from __future__ import annotations

import base64
import logging
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from pybkx import errors
from pybkx.client import BookKeeper
from pybkx.meta import LedgerMetadata, MetadataStore, Versioned

__all__ = [
    "CheckResult",
    "ledger_metadata_json",
    "read_ledger",
    "write_and_read",
]

logger = logging.getLogger(__name__)

#: At most this many entries are fetched per read call while walking a ledger.
READ_CHUNK = 1000


def ledger_metadata_json(ledger_id: int, metadata: LedgerMetadata) -> dict[str, object]:
    """The metadata of a ledger as BookKeeper's admin API shows it (``/api/v1/ledger/metadata``
    and ``ledgermetadata``): Jackson's rendering of ``LedgerMetadataImpl``, bytes in base64."""
    md = metadata
    return {
        "ledgerId": ledger_id,
        "metadataFormatVersion": md.metadata_format_version,
        "ensembleSize": md.ensemble_size,
        "writeQuorumSize": md.write_quorum_size,
        "ackQuorumSize": md.ack_quorum_size,
        "state": md.state.name,
        "length": md.length,
        "lastEntryId": md.last_entry_id,
        "ctime": md.ctime if md.ctime is not None else -1,
        "digestType": md.digest_type.name if md.digest_type.name != "HMAC" else "MAC",
        "password": base64.b64encode(md.password).decode(),
        "customMetadata": {
            key: base64.b64encode(value).decode() for key, value in md.custom_metadata.items()
        },
        "allEnsembles": {
            str(first): [{"id": bookie} for bookie in bookies]
            for first, bookies in md.ensembles.items()
        },
        "closed": md.is_closed,
        "ctoken": md.c_token,
    }


def read_ledger(
    bk: BookKeeper, ledger_id: int, first: int = 0, last: int = -1
) -> Iterator[tuple[int, bytes]]:
    """``(entry id, payload)`` of entries ``first..last`` (``-1``: up to the last entry the
    bookies confirm) without recovering the ledger, as BookKeeper's admin reads do.

    Reads in chunks of ``READ_CHUNK``. Raises NoSuchLedgerExistsOnMetadataServerException,
    IncorrectParameterException (a bad range), ReadException.
    """
    if first < 0 or (last != -1 and last < first):
        raise errors.IncorrectParameterException(f"bad range {first}..{last}")
    versioned = bk.store.read_ledger_metadata(ledger_id)
    handle = bk.open_ledger(ledger_id, versioned.value.password, recovery=False)
    top = handle.read_last_add_confirmed()
    if last != -1:
        top = min(top, last)
    entry = first
    while entry <= top:
        chunk_end = min(top, entry + READ_CHUNK - 1)
        for e in handle.read(entry, chunk_end):
            yield e.entry_id, bytes(e.payload)
        entry = chunk_end + 1


def ledger_ids(store: MetadataStore) -> Iterator[int]:
    """Every ledger id of the cluster, ascending."""
    return store.list_ledgers()


def ledger_metadata(store: MetadataStore, ledger_id: int) -> Versioned[LedgerMetadata]:
    """Raises NoSuchLedgerExistsOnMetadataServerException."""
    return store.read_ledger_metadata(ledger_id)


@dataclass(frozen=True)
class CheckResult:
    """What a write-and-read check did."""

    ledger_id: int
    entries: int
    ensemble: tuple[str, ...]
    write_s: float
    read_s: float


def write_and_read(
    bk: BookKeeper,
    entries: int,
    *,
    ensemble_size: int,
    write_quorum_size: int,
    ack_quorum_size: int,
    entry_size: int = 64,
    progress: Callable[[int], None] | None = None,
) -> CheckResult:
    """Create a ledger, append ``entries`` entries, close it, read them back and compare, then
    delete it (BookKeeper's ``simpletest``; ``bookiesanity`` passes a client whose placement
    policy picks one bookie). ``progress`` is called with the entries done so far (writes then
    reads, up to ``2 * entries``).

    Raises what appending and reading raise, and BKException if an entry reads back different.
    """
    if entries < 1:
        raise errors.IncorrectParameterException(f"entries must be >= 1, got {entries}")
    password = os.urandom(8)
    handle = bk.create_ledger(ensemble_size, write_quorum_size, ack_quorum_size, password=password)
    ledger_id = handle.ledger_id
    try:
        payloads = [os.urandom(entry_size) for _ in range(entries)]
        started = time.monotonic()
        step = max(1, min(1000, entries // 100))
        for i in range(0, entries, step):
            handle.append_many(payloads[i : i + step])
            if progress:
                progress(min(entries, i + step))
        handle.close()
        wrote = time.monotonic() - started
        started = time.monotonic()
        reader = bk.open_ledger(ledger_id, password, recovery=False)
        for i in range(0, entries, step):
            got = reader.read(i, min(entries, i + step) - 1)
            for e in got:
                if bytes(e.payload) != payloads[e.entry_id]:
                    raise errors.BKException(
                        f"entry {e.entry_id} of ledger {ledger_id} read back different"
                    )
            if progress:
                progress(entries + min(entries, i + step))
        read = time.monotonic() - started
        return CheckResult(ledger_id, entries, handle.metadata.last_ensemble, wrote, read)
    finally:
        try:
            bk.delete_ledger(ledger_id)
        except errors.BKException as exc:
            logger.warning("could not delete the test ledger %d: %s", ledger_id, exc)
