"""The whole metadata store contract: one class per concern, composed. It names what a backend
must provide; it must never hold a backend's logic or talk to a server."""

from __future__ import annotations

import abc

from pybkx.meta.cluster import ClusterAdmin
from pybkx.meta.coordination import Coordination
from pybkx.meta.ledgers import LedgerStore
from pybkx.meta.registration import BookieRegistry
from pybkx.meta.underreplication import UnderReplication


class MetadataStore(ClusterAdmin, LedgerStore, BookieRegistry, Coordination, UnderReplication):
    """Ledger metadata, bookie registration, cookies, coordination and under-replication (for
    AutoRecovery) for one cluster.

    All methods are blocking and thread-safe. Errors are ``pybkx.errors`` classes:
    ``MetaStoreException`` (store unreachable or failed; ``ZKException`` on ZooKeeper),
    ``MetadataVersionException`` (compare-and-set lost a race),
    ``NoSuchLedgerExistsOnMetadataServerException``, ``LedgerExistException``,
    ``LedgerIdOverflowException``, ``ClientClosedException`` (used after ``close()``). Watch
    callbacks run on a background thread of the store.
    """

    #: The URI this store was opened with (``zk+hierarchical://...`` or ``embedded://...``).
    uri: str

    @abc.abstractmethod
    def close(self) -> None:
        """End the session: ephemeral registrations go away. Idempotent."""

    def __enter__(self) -> MetadataStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
