"""The ledger client: create, open, append, read, recover and close ledgers over the Rust data
plane. It decides (placement, metadata, recovery); it never moves entries itself per entry.

Semantics follow Apache BookKeeper's client: E >= Qw >= Qa, round-robin write sets, in-order
completion once Qa bookies acknowledged, the LAC piggy-backed in every entry, ensemble changes
written to the metadata by compare-and-set, fencing with the coverage rule and recovery on open.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pybkx import errors
from pybkx._core import (
    FLAG_DO_FENCING,
    FLAG_HIGH_PRIORITY,
    AppendFuture,
    BookieClient,
    BookieFuture,
    DigestManager,
    LedgerWriter,
    master_key,
    read_entries,
)
from pybkx.meta import (
    BookieServiceInfo,
    DigestType,
    LedgerMetadata,
    LedgerState,
    MetadataStore,
    Versioned,
    open_metadata_store,
)
from pybkx.placement import EnsemblePlacementPolicy, PlacementPolicyAdherence, create_policy

__all__ = ["BookKeeper", "LedgerEntry", "LedgerHandle", "ReadHandle"]

logger = logging.getLogger(__name__)

#: How often a metadata compare-and-set is retried after losing a race.
MAX_METADATA_RETRIES = 50
_FAILURE_POLL_S = 0.2


@dataclass(frozen=True)
class LedgerEntry:
    """One entry read from a ledger."""

    ledger_id: int
    entry_id: int
    payload: bytes


def _ensemble_segments(metadata: LedgerMetadata) -> list[tuple[int, list[str]]]:
    return [(first, list(bookies)) for first, bookies in metadata.ensembles.items()]


def _covered(ensemble_size: int, write_quorum: int, ack_quorum: int, known: Sequence[bool]) -> bool:
    """BookKeeper's coverage rule: in every write set fewer than Qa bookies are unknown."""
    for start in range(ensemble_size):
        unknown = sum(1 for i in range(write_quorum) if not known[(start + i) % ensemble_size])
        if unknown >= ack_quorum:
            return False
    return True


class BookKeeper:
    """A client of one cluster.

    ``metadata_service_uri`` is BookKeeper's ``metadataServiceUri`` (``zk+hierarchical://...``)
    or ``embedded:///dir``; None opens the embedded default store. ``conf`` takes BookKeeper's
    client keys: ``addEntryTimeoutSec``, ``readEntryTimeoutSec`` (default ``readTimeout`` = 5),
    ``clientConnectTimeoutMillis``, ``nettyMaxFrameSizeBytes``, ``batchReadEnabled`` (True),
    ``throttle`` (5000 pending appends per ledger), ``zkTimeout``,
    ``bookieReplacementTimeoutMs`` (10000). Raises MetaStoreException if the store cannot be
    reached.
    """

    def __init__(self, metadata_service_uri: str | None = None, **conf: Any) -> None:
        read_timeout = float(conf.get("readTimeout", 5))
        self.conf = dict(conf)
        self.max_frame_size = int(conf.get("nettyMaxFrameSizeBytes", 5 << 20))
        self.batch_read_enabled = bool(conf.get("batchReadEnabled", True))
        store_conf = {k: v for k, v in conf.items() if k in ("zkTimeout",)}
        self.store: MetadataStore = open_metadata_store(metadata_service_uri, **store_conf)
        # The placement policy (BookKeeper's `ensemblePlacementPolicy`, rack-aware by default)
        # follows the registered bookies from here on.
        self.placement: EnsemblePlacementPolicy = create_policy(conf)
        self._registered: frozenset[str] = frozenset()
        self._unwatch = self.store.watch_bookies(self._on_bookies_changed)
        self.bookies = BookieClient(
            add_entry_timeout_sec=float(conf.get("addEntryTimeoutSec", read_timeout)),
            read_entry_timeout_sec=float(conf.get("readEntryTimeoutSec", read_timeout)),
            connect_timeout_ms=int(conf.get("clientConnectTimeoutMillis", 10_000)),
            max_frame_size=self.max_frame_size,
        )
        self._addresses: dict[str, str] = {}
        self._closed = False

    # --- bookies ----------------------------------------------------------------------------

    def address_of(self, bookie_id: str) -> str:
        """``host:port`` to connect to for a bookie id (its registered ``bookie-rpc``
        endpoint; a bare ``host:port`` id when it publishes none)."""
        address = self._addresses.get(bookie_id)
        if address is None:
            address = bookie_id
            try:
                info: BookieServiceInfo = self.store.bookie_service_info(bookie_id)
                for endpoint in info.endpoints:
                    if endpoint.protocol == "bookie-rpc":
                        address = f"{endpoint.host}:{endpoint.port}"
                        break
            except errors.BKException:
                pass
            self._addresses[bookie_id] = address
        return address

    def _on_bookies_changed(self, writable: frozenset[str], readonly: frozenset[str]) -> None:
        self._registered = writable | readonly
        self.placement.on_cluster_changed(writable, readonly)

    def unregistered(self, bookies: Iterable[str]) -> list[str]:
        """The bookie ids of ``bookies`` that are not registered (writable or read-only)."""
        return [b for b in bookies if b not in self._registered]

    def _replacements(self, md: LedgerMetadata, failed: Sequence[int]) -> list[str]:
        """A bookie for each failed index of the last ensemble, from the placement policy; a
        failed bookie may take its own slot back once it is registered again (it restarted
        with its data; BookKeeper would fail the writes instead when no spare exists). Waits up
        to ``bookieReplacementTimeoutMs`` (10 s) for candidates. Raises
        NotEnoughBookiesException."""
        wait_s = float(self.conf.get("bookieReplacementTimeoutMs", 10_000)) / 1000
        deadline = time.monotonic() + wait_s
        while True:
            ensemble = list(md.last_ensemble)
            chosen: list[str] = []
            try:
                for index in failed:
                    result = self.placement.replace_bookie(
                        md.ensemble_size,
                        md.write_quorum_size,
                        md.ack_quorum_size,
                        md.custom_metadata,
                        ensemble,
                        ensemble[index],
                        chosen,
                    )
                    chosen.append(result.result)
                    ensemble[index] = result.result
                return chosen
            except errors.NotEnoughBookiesException as exc:
                writable = self.store.writable_bookies()
                # The policy never picks the bookie being replaced; a restarted one may return.
                back = [md.last_ensemble[i] for i in failed[len(chosen) :]]
                if all(b in writable for b in back):
                    return chosen + back
                if time.monotonic() >= deadline:
                    raise errors.NotEnoughBookiesException(
                        f"no bookie to replace {[md.last_ensemble[i] for i in failed]}: {exc}"
                    ) from exc
            time.sleep(0.2)

    # --- ledgers ----------------------------------------------------------------------------

    def create_ledger(
        self,
        ensemble_size: int = 3,
        write_quorum_size: int = 2,
        ack_quorum_size: int = 2,
        digest_type: str = "CRC32C",
        password: bytes = b"",
        custom_metadata: Mapping[str, bytes] | None = None,
    ) -> LedgerHandle:
        """Create a ledger on ``ensemble_size`` writable bookies and open it for writing.

        Raises IncorrectParameterException (quorums), NotEnoughBookiesException, ValueError
        (digest type), MetaStoreException.
        """
        self._check_open()
        digest = DigestType.parse(digest_type)
        if not ensemble_size >= write_quorum_size >= ack_quorum_size >= 1:
            raise errors.IncorrectParameterException(
                "need ensemble_size >= write_quorum_size >= ack_quorum_size >= 1, got "
                f"{ensemble_size}/{write_quorum_size}/{ack_quorum_size}"
            )
        placed = self.placement.new_ensemble(
            ensemble_size, write_quorum_size, ack_quorum_size, dict(custom_metadata or {}), ()
        )
        ensemble = placed.result
        if placed.adherence == PlacementPolicyAdherence.FAIL:
            logger.warning(
                "new ensemble %s does not adhere to the placement policy %s",
                ensemble,
                type(self.placement).__name__,
            )
        metadata = LedgerMetadata(
            ensemble_size=ensemble_size,
            write_quorum_size=write_quorum_size,
            ack_quorum_size=ack_quorum_size,
            ensembles={0: tuple(ensemble)},
            digest_type=digest,
            password=password,
            custom_metadata=dict(custom_metadata or {}),
            c_token=random.getrandbits(62),
        )
        for _ in range(MAX_METADATA_RETRIES):
            ledger_id = self.store.generate_ledger_id()
            try:
                versioned = self.store.create_ledger_metadata(ledger_id, metadata)
            except errors.LedgerExistException:
                continue  # the id was taken (e.g. by another client's retried create)
            return LedgerHandle(self, ledger_id, versioned)
        raise errors.MetaStoreException("could not allocate a free ledger id")

    def open_ledger(
        self, ledger_id: int, password: bytes = b"", recovery: bool = True
    ) -> ReadHandle:
        """Open a ledger for reading. With ``recovery`` (the default) an OPEN ledger is fenced,
        recovered and closed first, so its writer can add nothing more.

        Raises NoSuchLedgerExistsOnMetadataServerException, UnauthorizedAccessException (wrong
        password), LedgerRecoveryException, MetaStoreException.
        """
        self._check_open()
        versioned = self.store.read_ledger_metadata(ledger_id)
        if versioned.value.password != password:
            raise errors.UnauthorizedAccessException(f"wrong password for ledger {ledger_id}")
        handle = ReadHandle(self, ledger_id, versioned)
        if recovery and not versioned.value.is_closed:
            handle._recover()
        return handle

    def delete_ledger(self, ledger_id: int) -> None:
        """Delete the ledger's metadata (bookies drop its data). Raises
        NoSuchLedgerExistsOnMetadataServerException."""
        self._check_open()
        self.store.remove_ledger_metadata(ledger_id)

    def list_ledgers(self) -> list[int]:
        return list(self.store.list_ledgers())

    def close(self) -> None:
        """Close bookie connections and the metadata session. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._unwatch()
        self.placement.uninitialize()
        self.bookies.close()
        self.store.close()

    def _check_open(self) -> None:
        if self._closed:
            raise errors.ClientClosedException("the BookKeeper client is closed")

    def __enter__(self) -> BookKeeper:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class ReadHandle:
    """A ledger opened for reading (see ``BookKeeper.open_ledger``)."""

    def __init__(self, bk: BookKeeper, ledger_id: int, versioned: Versioned[LedgerMetadata]):
        self.bk = bk
        self.ledger_id = ledger_id
        self._versioned = versioned
        self._batch_supported = bk.batch_read_enabled
        md = versioned.value
        self._lac = md.last_entry_id if md.is_closed else -1
        self._length = md.length if md.is_closed else 0
        self._digest = DigestManager(ledger_id, md.password, md.digest_type.name)

    @property
    def metadata(self) -> LedgerMetadata:
        return self._versioned.value

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

    def _address_segments(self) -> list[tuple[int, list[str]]]:
        return [
            (first, [self.bk.address_of(b) for b in bookies])
            for first, bookies in _ensemble_segments(self.metadata)
        ]

    def _read_raw(
        self, first: int, last: int, batch: bool
    ) -> tuple[list[tuple[int, int, int, bytes]], bool]:
        md = self.metadata
        return read_entries(
            self.bk.bookies,
            self.ledger_id,
            md.write_quorum_size,
            md.password,
            md.digest_type.name,
            self._address_segments(),
            first,
            last,
            batch=batch and self._batch_supported,
            max_batch_bytes=self.bk.max_frame_size,
            # Replicas known to be gone are tried last, in the placement policy's read order.
            avoid=[self.bk.address_of(b) for b in self.bk.unregistered(self._all_bookies())],
            orders=self._read_orders(),
        )

    def _read_orders(self) -> list[list[list[int]]]:
        """Per segment, per write-set start: the replica order of the placement policy
        (``reorderReadSequenceEnabled``, default on); empty for the write-set order."""
        if not bool(self.bk.conf.get("reorderReadSequenceEnabled", True)):
            return []
        md = self.metadata
        return [
            [
                self.bk.placement.reorder_read_sequence(bookies, None, md.write_set(start))
                for start in range(md.ensemble_size)
            ]
            for bookies in md.ensembles.values()
        ]

    def _all_bookies(self) -> set[str]:
        return {b for bookies in self.metadata.ensembles.values() for b in bookies}

    def _read(self, first: int, last: int, batch: bool) -> list[LedgerEntry]:
        entries, batch_ok = self._read_raw(first, last, batch)
        if not batch_ok and self._batch_supported and batch:
            logger.info(
                "ledger %d: bookies do not support batch reads; using single reads", self.ledger_id
            )
            self._batch_supported = False
        return [LedgerEntry(self.ledger_id, e[0], e[3]) for e in entries]

    def read(self, first: int, last: int) -> list[LedgerEntry]:
        """Entries ``first..last`` (inclusive), at most up to the LAC.

        Raises ReadException (range beyond the LAC or unreadable), NoSuchEntryException,
        DigestMatchException (every copy corrupt).
        """
        if first < 0 or last < first:
            raise errors.IncorrectParameterException(f"bad range {first}..{last}")
        if last > self._lac:
            raise errors.ReadException(
                f"entries up to {last} requested, but the last confirmed is {self._lac}"
            )
        return self._read(first, last, batch=False)

    def read_unconfirmed(self, first: int, last: int) -> list[LedgerEntry]:
        """Entries ``first..last`` regardless of the LAC (they may not survive recovery)."""
        if first < 0 or last < first:
            raise errors.IncorrectParameterException(f"bad range {first}..{last}")
        return self._read(first, last, batch=False)

    def batch_read(self, start: int, max_count: int, max_size: int) -> list[LedgerEntry]:
        """Up to ``max_count`` entries from ``start`` in few requests (BP-62): batched where one
        bookie holds every entry (E == Qw) and bookies support it, else single reads; the size
        limit is loose as in BookKeeper. Never beyond the LAC.

        Raises ReadException (``start`` beyond the LAC), NoSuchEntryException.
        """
        if start < 0 or max_count <= 0:
            raise errors.IncorrectParameterException(
                f"bad batch read start {start} count {max_count}"
            )
        if start > self._lac:
            raise errors.ReadException(f"entry {start} is beyond the LAC {self._lac}")
        last = min(start + max_count - 1, self._lac)
        md = self.metadata
        striped = md.ensemble_size != md.write_quorum_size
        if striped or not self._batch_supported:
            return self._read(start, last, batch=False)
        out: list[LedgerEntry] = []
        budget = max_size if max_size > 0 else self.bk.max_frame_size
        next_id = start
        while next_id <= last:
            chunk = self._read(next_id, last, batch=True)
            for entry in chunk:
                if out and budget - len(entry.payload) < 0:
                    return out
                budget -= len(entry.payload)
                out.append(entry)
            next_id += len(chunk)
        return out

    def read_last_add_confirmed(self) -> int:
        """Ask the bookies of the last ensemble for the LAC (READ of entry -1, coverage rule)
        and update ``last_add_confirmed``. Raises ReadException, UnauthorizedAccessException."""
        if self.is_closed:
            return self._lac
        lac, length = self._lac_from_bookies(fence=False)
        if lac > self._lac:
            self._lac, self._length = lac, length
        return self._lac

    # --- recovery -------------------------------------------------------------------------

    def _lac_from_bookies(self, fence: bool) -> tuple[int, int]:
        md = self.metadata
        bookies = [self.bk.address_of(b) for b in md.last_ensemble]
        key = master_key(md.password)
        flags = FLAG_DO_FENCING if fence else 0
        futures: list[BookieFuture] = [
            self.bk.bookies.read(b, self.ledger_id, -1, flags, key if fence else None)
            for b in bookies
        ]
        known = [False] * len(bookies)
        best = (-1, 0)
        last_error: Exception | None = None
        for i, future in enumerate(futures):
            try:
                entry = future.result()
                entry_id, lac, length, _ = self._digest.verify(entry)
                del entry_id
                known[i] = True
                best = max(best, (lac, length))
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

    def _recover(self) -> None:
        """Fence the ledger, re-replicate the entries after its LAC, close it."""
        store = self.bk.store
        for _ in range(MAX_METADATA_RETRIES):
            md = self.metadata
            if md.is_closed:
                self._lac, self._length = md.last_entry_id, md.length
                return
            if md.state == LedgerState.IN_RECOVERY:
                break
            try:
                self._versioned = store.write_ledger_metadata(
                    self.ledger_id,
                    md.replace(state=LedgerState.IN_RECOVERY),
                    self._versioned.version,
                )
                break
            except errors.MetadataVersionException:
                self._versioned = store.read_ledger_metadata(self.ledger_id)
        md = self.metadata
        try:
            lac, _ = self._lac_from_bookies(fence=True)
        except errors.ReadException as exc:
            raise errors.LedgerRecoveryException(str(exc)) from exc
        lac = max(lac, md.last_segment_start - 1)
        found: list[tuple[bytes, int]] = []
        while (got := self._recovery_read(lac + 1 + len(found))) is not None:
            found.append(got)
        # Entries carry the ledger length through themselves: the recovered entries restart the
        # count from the first one's (as BookKeeper does); else it is entry LAC's.
        if found:
            length = found[0][1] - len(found[0][0])
        elif lac >= 0:
            length = self._entry_length(lac)
        else:
            length = 0
        writer = LedgerHandle._writer_for(self, next_entry_id=lac + 1, length=length, recovery=True)
        recovered = RecoveryWriter(self, writer)
        for offset, (payload, _) in enumerate(found):
            recovered.append(lac + 1 + offset, payload)
        last, total = recovered.finish()
        self._close_metadata(last, total, recovered.ensembles, expect=LedgerState.IN_RECOVERY)

    def _entry_length(self, entry_id: int) -> int:
        """The ledger length up to and including ``entry_id`` (from the entry's header)."""
        entries, _ = self._read_raw(entry_id, entry_id, batch=False)
        return int(entries[0][2])

    def _recovery_read(self, entry_id: int) -> tuple[bytes, int] | None:
        """The entry's payload and length field from any replica (fencing reads), or None once
        Qw - Qa + 1 replicas said it does not exist. Raises LedgerRecoveryException otherwise."""
        md = self.metadata
        ensemble = md.ensemble_for(entry_id)
        key = master_key(md.password)
        missing_needed = md.write_quorum_size - md.ack_quorum_size + 1
        missing = 0
        last_error: Exception | None = None
        for index in md.write_set(entry_id):
            bookie = self.bk.address_of(ensemble[index])
            try:
                entry = self.bk.bookies.read(
                    bookie, self.ledger_id, entry_id, FLAG_DO_FENCING | FLAG_HIGH_PRIORITY, key
                ).result()
                _, _, length, payload = self._digest.verify(entry, entry_id)
                return payload, length
            except (errors.NoSuchEntryException, errors.NoSuchLedgerExistsException):
                missing += 1
                if missing >= missing_needed:
                    return None
            except errors.BKException as exc:
                last_error = exc
        raise errors.LedgerRecoveryException(
            f"ledger {self.ledger_id}: entry {entry_id} neither readable nor missing on enough "
            f"bookies (last error: {last_error})"
        )

    def _close_metadata(
        self,
        last_entry_id: int,
        length: int,
        ensembles: Mapping[int, tuple[str, ...]],
        expect: LedgerState,
    ) -> None:
        store = self.bk.store
        for _ in range(MAX_METADATA_RETRIES):
            md = self.metadata
            if md.is_closed:
                if md.last_entry_id != last_entry_id and expect == LedgerState.OPEN:
                    raise errors.LedgerClosedException(
                        f"ledger {self.ledger_id} was closed by another client at "
                        f"{md.last_entry_id}"
                    )
                break
            if expect == LedgerState.OPEN and md.state == LedgerState.IN_RECOVERY:
                raise errors.LedgerFencedException(
                    f"ledger {self.ledger_id} is being recovered by another client"
                )
            new_md = md
            for first, bookies in ensembles.items():
                if first >= new_md.last_segment_start:
                    new_md = new_md.with_ensemble(first, bookies)
            try:
                self._versioned = store.write_ledger_metadata(
                    self.ledger_id, new_md.closed(last_entry_id, length), self._versioned.version
                )
                break
            except errors.MetadataVersionException:
                self._versioned = store.read_ledger_metadata(self.ledger_id)
        md = self.metadata
        self._lac, self._length = md.last_entry_id, md.length

    def close(self) -> None:
        """Nothing to release for a read handle; kept for symmetry with LedgerHandle."""

    def __enter__(self) -> ReadHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class RecoveryWriter:
    """Re-writes recovered entries (recovery adds) and applies ensemble changes locally, to be
    folded into the metadata when recovery closes the ledger (as BookKeeper does)."""

    def __init__(self, handle: ReadHandle, writer: LedgerWriter) -> None:
        self.handle = handle
        self.writer = writer
        self.ensembles: dict[int, tuple[str, ...]] = {}
        self.futures: list[AppendFuture] = []
        self.ids = list(handle.metadata.last_ensemble)

    def append(self, entry_id: int, payload: bytes) -> None:
        self._handle_failures(0)
        self.futures.append(self.writer.append(payload, entry_id))

    def _handle_failures(self, timeout: float) -> None:
        while (failure := self.writer.next_failure(timeout)) is not None:
            index, _bookie, error = failure
            logger.warning(
                "ledger %d recovery: bookie %s failed: %s",
                self.handle.ledger_id,
                self.ids[index],
                error,
            )
            md = self.handle.metadata.with_ensemble(
                self.handle.metadata.last_segment_start, self.ids
            )
            self.ids[index] = self.handle.bk._replacements(md, [index])[0]
            first = self.writer.last_add_confirmed + 1
            self.ensembles[first] = tuple(self.ids)
            self.writer.change_ensemble(first, [self.handle.bk.address_of(b) for b in self.ids])
            timeout = 0

    def finish(self) -> tuple[int, int]:
        """Wait for every recovery add; returns (last entry id, length)."""
        while not self.writer.wait_drained(_FAILURE_POLL_S):
            try:
                self._handle_failures(0)
            except errors.NotEnoughBookiesException as exc:
                self.writer.fail("LedgerRecoveryException", str(exc))
            self.writer.check()
        for future in self.futures:
            future.result()
        self.writer.check()
        return self.writer.last_add_confirmed, self.writer.length


class LedgerHandle(ReadHandle):
    """A ledger open for writing (see ``BookKeeper.create_ledger``). Thread-safe."""

    def __init__(self, bk: BookKeeper, ledger_id: int, versioned: Versioned[LedgerMetadata]):
        super().__init__(bk, ledger_id, versioned)
        self._writer = self._writer_for(self, next_entry_id=0, length=0, recovery=False)
        self._lock = threading.Lock()
        self._closing = False
        self._watchdog = threading.Thread(
            target=self._watch_failures, name=f"pybkx-ledger-{ledger_id}", daemon=True
        )
        self._watchdog.start()

    @staticmethod
    def _writer_for(
        handle: ReadHandle, next_entry_id: int, length: int, recovery: bool
    ) -> LedgerWriter:
        md = handle.metadata
        return LedgerWriter(
            handle.bk.bookies,
            handle.ledger_id,
            md.write_quorum_size,
            md.ack_quorum_size,
            md.password,
            md.digest_type.name,
            [handle.bk.address_of(b) for b in md.last_ensemble],
            next_entry_id=next_entry_id,
            length=length,
            recovery=recovery,
            throttle=int(handle.bk.conf.get("throttle", 5000)),
        )

    @property
    def last_add_confirmed(self) -> int:
        return self._writer.last_add_confirmed

    @property
    def length(self) -> int:
        return self._writer.length

    def append(self, data: bytes) -> int:
        """Append one entry; returns its id once Qa bookies hold it and all earlier entries are
        confirmed. Raises LedgerClosedException, LedgerFencedException (recovered by another
        client), NotEnoughBookiesException (no replacement for a failed bookie),
        UnauthorizedAccessException, TimeoutException."""
        return self.append_async(data).result()

    def append_async(self, data: bytes) -> AppendFuture:
        """Start an append; ``.result()`` gives the entry id (errors as ``append``)."""
        if self._closing:
            raise errors.LedgerClosedException(f"ledger {self.ledger_id} is closed")
        return self._writer.append(data)

    def append_many(self, payloads: Sequence[bytes]) -> int:
        """Append entries pipelined; returns the last entry id (errors as ``append``)."""
        if self._closing:
            raise errors.LedgerClosedException(f"ledger {self.ledger_id} is closed")
        return self._writer.append_many(list(payloads))

    def read(self, first: int, last: int) -> list[LedgerEntry]:
        self._lac = self._writer.last_add_confirmed
        return super().read(first, last)

    def batch_read(self, start: int, max_count: int, max_size: int) -> list[LedgerEntry]:
        self._lac = self._writer.last_add_confirmed
        return super().batch_read(start, max_count, max_size)

    def _watch_failures(self) -> None:
        last_change: dict[int, float] = {}
        while not self._closing or not self._writer.wait_drained(0):
            failure = self._writer.next_failure(_FAILURE_POLL_S)
            if failure is None:
                continue
            # A slot failing again right after its change is a bookie still down (its
            # registration not yet expired): back off instead of spinning.
            if time.monotonic() - last_change.get(failure[0], 0.0) < 1.0:
                time.sleep(0.5)
            last_change[failure[0]] = time.monotonic()
            try:
                self._change_ensemble(failure)
            except errors.BKException as exc:
                logger.error("ledger %d: ensemble change failed: %s", self.ledger_id, exc)
                self._writer.fail(type(exc).__name__, str(exc))
                return

    def _change_ensemble(self, failure: tuple[int, str, str]) -> None:
        """Replace failed bookies (this one and any other already reported), record the new
        ensemble by compare-and-set, then let the writer re-send to it."""
        failed = {failure[0]: failure}
        while (more := self._writer.next_failure(0)) is not None:
            failed[more[0]] = more
        store = self.bk.store
        for _ in range(MAX_METADATA_RETRIES):
            md = self.metadata
            if md.state == LedgerState.IN_RECOVERY:
                raise errors.LedgerFencedException(
                    f"ledger {self.ledger_id} is being recovered by another client"
                )
            if md.is_closed:
                raise errors.LedgerClosedException(f"ledger {self.ledger_id} is closed")
            ids = list(md.last_ensemble)
            replacements = self.bk._replacements(md, sorted(failed))
            for index, new in zip(sorted(failed), replacements, strict=True):
                logger.warning(
                    "ledger %d: replacing bookie %s (%s) with %s",
                    self.ledger_id,
                    ids[index],
                    failed[index][2],
                    new,
                )
                ids[index] = new
            first = self._writer.last_add_confirmed + 1
            try:
                self._versioned = store.write_ledger_metadata(
                    self.ledger_id, md.with_ensemble(first, ids), self._versioned.version
                )
            except errors.MetadataVersionException:
                self._versioned = store.read_ledger_metadata(self.ledger_id)
                continue
            self._writer.change_ensemble(first, [self.bk.address_of(b) for b in ids])
            return
        raise errors.MetadataVersionException(
            f"ledger {self.ledger_id}: lost {MAX_METADATA_RETRIES} metadata races in a row"
        )

    def close(self) -> None:
        """Wait for pending appends, then close the ledger in the metadata (last entry = LAC).
        Idempotent. Raises LedgerFencedException if another client recovered the ledger."""
        with self._lock:
            if self._closing and self.is_closed:
                return
            self._closing = True
            self._writer.close()
        while not self._writer.wait_drained(_FAILURE_POLL_S):
            if not self._watchdog.is_alive():
                break
        self._watchdog.join(timeout=10)
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
        self._close_metadata(
            self._writer.last_add_confirmed, self._writer.length, {}, expect=LedgerState.OPEN
        )

    def __enter__(self) -> LedgerHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
