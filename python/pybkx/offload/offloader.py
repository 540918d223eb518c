"""Offload of one closed ledger to object storage: exactly one writer per ledger, decided by a
compare-and-set of the ledger's metadata (the claim), the Parquet object written (or one left by
a crashed attempt adopted, or removed and written again), checked back, then recorded complete
in the metadata and entered in the table's manifest. Never deletes the local copies: reads
from the object are not built yet.
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from pybkx import errors
from pybkx.client import BookKeeper
from pybkx.meta.ledger_metadata import LedgerMetadata
from pybkx.offload.context import DRIVER_NAME, OFFLOAD_CONTEXT_KEY, OffloadContext, context_of
from pybkx.offload.parquet import ObjectCheck, check_object, write_ledger
from pybkx.offload.store import ObjectStore
from pybkx.offload.table import object_key, write_manifest_entry

__all__ = ["DEFAULT_CLAIM_TIMEOUT_S", "OffloadResult", "offload_ledger", "offloaded_ledgers"]

DEFAULT_CLAIM_TIMEOUT_S = 600.0
"""A claim older than this is taken to belong to a dead offloader and may be taken over."""
#: Entries per read while the ledger is copied (each read a few batched requests).
READ_BATCH_ENTRIES = 4096


@dataclass(frozen=True)
class OffloadResult:
    """``context`` is the ledger's complete offload record; ``action`` says what this call did:
    ``written`` (uploaded the object), ``adopted`` (found a whole object a crashed attempt left
    and recorded it) or ``already`` (the ledger was offloaded before; nothing written)."""

    ledger_id: int
    action: str
    context: OffloadContext


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def offload_ledger(
    bk: BookKeeper,
    store: ObjectStore,
    ledger_id: int,
    password: bytes = b"",
    *,
    owner: str | None = None,
    claim_timeout_s: float = DEFAULT_CLAIM_TIMEOUT_S,
) -> OffloadResult:
    """Offload closed ledger ``ledger_id`` once: claim it in its metadata, write its entries to
    ``<prefix>/ledgers/<id>.parquet`` (or adopt a whole object an earlier attempt left there;
    a partial or foreign one is removed first), check the object's footer against the
    ledger, record the offload complete, and enter it in the table's manifest. A ledger
    already offloaded is left as it is (its manifest entry written again if missing).

    Raises IllegalOpException (the ledger is not closed), OffloadInProgressException (another
    ``owner``'s claim is younger than ``claim_timeout_s``; the same owner, e.g. a restarted
    bookie naming itself, takes its own claim back at once), ObjectStorageException (the store
    refused or did not answer: the claim stays, and a later call adopts or redoes the object),
    ReplicationException (the written object did not check back), what ``open_ledger`` and
    reading the ledger raise, MetadataVersionException after too many lost metadata races.
    """
    handle = bk.open_ledger(ledger_id, password, recovery=False)
    metadata = handle.metadata
    if not metadata.is_closed:
        raise errors.IllegalOpException(f"ledger {ledger_id} is open: only closed ledgers offload")
    existing = context_of(metadata)
    if existing is not None and existing.complete:
        write_manifest_entry(store, ledger_id, existing, only_if_missing=True)
        return OffloadResult(ledger_id, "already", existing)
    key = object_key(store.settings, ledger_id)
    mine = OffloadContext(
        uid=str(uuid.uuid4()),
        owner=owner or f"{socket.gethostname()}:{os.getpid()}",
        claimed_at_ms=_now_ms(),
        bucket=store.settings.bucket,
        object_key=key,
        driver={"name": DRIVER_NAME, "endpoint": store.settings.endpoint or ""},
    )

    def claim(md: LedgerMetadata) -> LedgerMetadata | None:
        current = context_of(md)
        if current is not None and current.complete:
            raise _AlreadyOffloaded(current)
        if current is not None and current.owner != mine.owner:
            age_s = (_now_ms() - current.claimed_at_ms) / 1000
            if age_s < claim_timeout_s:
                raise errors.OffloadInProgressException(
                    f"ledger {ledger_id}: offload claimed by {current.owner} {age_s:.0f} s ago"
                )
        # No claim, a timed-out one, or one by this same owner (restarted): the claim is ours.
        return _with_context(md, mine)

    try:
        handle.update_metadata(claim)
    except _AlreadyOffloaded as offloaded:
        write_manifest_entry(store, ledger_id, offloaded.context, only_if_missing=True)
        return OffloadResult(ledger_id, "already", offloaded.context)
    store.ensure_bucket()
    found = check_object(store, key, metadata, ledger_id)
    action = "adopted"
    if found is None:
        store.delete(key)  # a partial, foreign or stale object (no-op when there is none)
        batches = (
            handle.arrow_batches(0, metadata.last_entry_id, READ_BATCH_ENTRIES)
            if metadata.last_entry_id >= 0
            else iter(())  # an empty ledger: a Parquet file of no row groups
        )
        write_ledger(store, key, metadata, ledger_id, batches, store.settings.row_group_bytes)
        found = check_object(store, key, metadata, ledger_id)
        if found is None:
            raise errors.ReplicationException(
                f"ledger {ledger_id}: object {key} does not check back against the ledger"
            )
        action = "written"
    done = _record_complete(handle.update_metadata, ledger_id, mine, found)
    write_manifest_entry(store, ledger_id, done)
    return OffloadResult(ledger_id, action, done)


class _AlreadyOffloaded(Exception):
    """Raised from inside a metadata change: the ledger's offload is complete."""

    def __init__(self, context: OffloadContext) -> None:
        super().__init__(context.object_key)
        self.context = context


def _with_context(md: LedgerMetadata, context: OffloadContext) -> LedgerMetadata:
    custom = dict(md.custom_metadata)
    custom[OFFLOAD_CONTEXT_KEY] = context.encode()
    return md.replace(custom_metadata=custom)


def _record_complete(
    update: Callable[[Callable[[LedgerMetadata], LedgerMetadata | None]], LedgerMetadata],
    ledger_id: int,
    mine: OffloadContext,
    found: ObjectCheck,
) -> OffloadContext:
    """Compare-and-set our claim to complete, the ensembles and digest type taken from the
    metadata as it is then (AutoRecovery may have replaced bookies during the upload); the
    record as stored. Raises OffloadInProgressException when another offloader took the claim
    over meanwhile (ours had timed out): it records the same object."""

    def complete(md: LedgerMetadata) -> LedgerMetadata | None:
        current = context_of(md)
        if current is None or current.uid != mine.uid:
            owner = "nobody" if current is None else current.owner
            raise errors.OffloadInProgressException(
                f"ledger {ledger_id}: the offload claim passed to {owner} during the upload"
            )
        if current.complete:
            return None  # recorded already (a retried write whose answer was lost)
        done = mine.completed(
            md,
            at_ms=_now_ms(),
            size_bytes=found.size_bytes,
            payload_bytes=found.payload_bytes,
            row_groups=found.row_groups,
        )
        return _with_context(md, done)

    recorded = context_of(update(complete))
    if recorded is None or not recorded.complete:
        raise errors.UnexpectedConditionException(f"ledger {ledger_id}: offload not recorded")
    return recorded


def offloaded_ledgers(bk: BookKeeper) -> list[tuple[int, OffloadContext]]:
    """Every ledger with an offload record (complete or claimed), by ledger id. Raises
    MetaStoreException; MetadataSerializationException for an unreadable record."""
    found = []
    for ledger_id in bk.store.list_ledgers():
        try:
            metadata = bk.store.read_ledger_metadata(ledger_id).value
        except errors.NoSuchLedgerExistsOnMetadataServerException:
            continue  # deleted while listing
        context = context_of(metadata)
        if context is not None:
            found.append((ledger_id, context))
    return found
