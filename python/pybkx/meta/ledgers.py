"""The ledger part of the metadata contract: ids, ledger metadata with compare-and-set, listing
and watches, plus the one compare-and-set retry loop every writer of metadata uses. Abstract
methods but for that loop; it never talks to a store itself."""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterator

from pybkx import errors
from pybkx.meta.ledger_metadata import LedgerMetadata
from pybkx.meta.types import LedgerWatcher, Versioned

#: How often a metadata compare-and-set is retried after losing a race.
MAX_METADATA_RETRIES = 50


class LedgerStore(abc.ABC):
    """Ledger metadata: ids, versioned records, listing and watches."""

    @abc.abstractmethod
    def generate_ledger_id(self) -> int:
        """A new ledger id, never handed out before in this cluster."""

    @abc.abstractmethod
    def create_ledger_metadata(
        self, ledger_id: int, metadata: LedgerMetadata
    ) -> Versioned[LedgerMetadata]:
        """Raises LedgerExistException if the ledger exists."""

    @abc.abstractmethod
    def read_ledger_metadata(self, ledger_id: int) -> Versioned[LedgerMetadata]:
        """Raises NoSuchLedgerExistsOnMetadataServerException."""

    @abc.abstractmethod
    def write_ledger_metadata(
        self, ledger_id: int, metadata: LedgerMetadata, expected_version: int
    ) -> Versioned[LedgerMetadata]:
        """Compare-and-set against a version >= 0 read or written earlier (there is no "any
        version"). Raises MetadataVersionException if the stored version differs,
        NoSuchLedgerExistsOnMetadataServerException if the ledger is gone."""

    @abc.abstractmethod
    def remove_ledger_metadata(self, ledger_id: int, expected_version: int | None = None) -> None:
        """Delete (compare-and-set when a version is given). Raises
        NoSuchLedgerExistsOnMetadataServerException, MetadataVersionException."""

    @abc.abstractmethod
    def list_ledgers(self) -> Iterator[int]:
        """Every ledger id, ascending."""

    @abc.abstractmethod
    def watch_ledger(self, ledger_id: int, watcher: LedgerWatcher) -> Callable[[], None]:
        """Call ``watcher`` on every change of the ledger's metadata; returns an unsubscribe."""

    def update_ledger_metadata(
        self,
        ledger_id: int,
        current: Versioned[LedgerMetadata],
        change: Callable[[LedgerMetadata], LedgerMetadata | None],
    ) -> Versioned[LedgerMetadata]:
        """Compare-and-set ``change(metadata)`` from ``current``, re-reading and re-applying
        ``change`` after each lost race. ``change`` returns the new metadata, or None when no
        write is needed (the result is then the metadata as read). ``change`` may raise to
        stop (e.g. the ledger was closed meanwhile). Raises MetadataVersionException after
        ``MAX_METADATA_RETRIES`` lost races in a row, and what ``change`` and the store raise.
        """
        for _ in range(MAX_METADATA_RETRIES):
            wanted = change(current.value)
            if wanted is None:
                return current
            try:
                return self.write_ledger_metadata(ledger_id, wanted, current.version)
            except errors.MetadataVersionException:
                current = self.read_ledger_metadata(ledger_id)
        raise errors.MetadataVersionException(
            f"ledger {ledger_id}: lost {MAX_METADATA_RETRIES} metadata races in a row"
        )
