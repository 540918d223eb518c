"""The cluster part of the metadata contract: initialise, identify and format a cluster.
Abstract methods only; backends implement them."""

from __future__ import annotations

import abc


class ClusterAdmin(abc.ABC):
    """A cluster's identity: its layout and instance id."""

    @abc.abstractmethod
    def init_new_cluster(self) -> bool:
        """Create the cluster's layout and instance id if absent; True if this call created it."""

    @abc.abstractmethod
    def is_initialized(self) -> bool: ...

    @abc.abstractmethod
    def instance_id(self) -> str:
        """The cluster's instance id. Raises MetaStoreException if not initialised."""

    @abc.abstractmethod
    def format(self) -> None:
        """Delete every ledger, registration and cookie, then initialise afresh (metaformat)."""
