"""What the parts of the client (handles, ensemble changes, recovery) need from the client that
owns them: its configuration, metadata store, placement policy, bookie connections, failure
dispatcher and bookie health (quarantine). A protocol only, so those parts never import
``BookKeeper`` itself."""

from __future__ import annotations

from concurrent.futures import Executor
from typing import Protocol

from pybkx._core import BookieClient
from pybkx.client.bookie_health import BookieHealth
from pybkx.client.failures import FailureDispatcher
from pybkx.config import ClientConfig
from pybkx.meta import MetadataStore
from pybkx.placement import EnsemblePlacementPolicy

__all__ = ["ClientContext"]


class ClientContext(Protocol):
    """A ``BookKeeper`` as its ledgers see it."""

    config: ClientConfig
    store: MetadataStore
    placement: EnsemblePlacementPolicy
    bookies: BookieClient
    failures: FailureDispatcher
    health: BookieHealth
    """The quarantined bookies (new ensembles and replacements avoid them)."""
    executor: Executor
    """Runs blocking control-plane calls for the ``*_async`` methods (bounded pool)."""

    def address_of(self, bookie_id: str) -> str:
        """``host:port`` to connect to for a bookie id."""
        ...

    @property
    def registered_bookies(self) -> frozenset[str]:
        """The bookie ids registered now (writable or read-only)."""
        ...
