"""Metadata stores: the contract (one module per concern: ``cluster``, ``ledgers``,
``registration``, ``coordination``; ``store`` composes them), ledger metadata and its byte
formats, and opening a store from its URI. Backends live in ``zookeeper/`` and ``embedded/``.
It picks a backend by URI; it must never hold a backend's logic itself."""

from __future__ import annotations

from typing import Any

from pybkx.meta.coordination import Election
from pybkx.meta.discovery import default_embedded_uri, default_metadata_uri
from pybkx.meta.ledger_metadata import DigestType, LedgerMetadata, LedgerState
from pybkx.meta.ledgers import MAX_METADATA_RETRIES
from pybkx.meta.store import MetadataStore
from pybkx.meta.types import (
    BookieServiceInfo,
    BookiesWatcher,
    Cookie,
    Endpoint,
    LedgerWatcher,
    Versioned,
)

__all__ = [
    "MAX_METADATA_RETRIES",
    "BookieServiceInfo",
    "BookiesWatcher",
    "Cookie",
    "DigestType",
    "Election",
    "Endpoint",
    "LedgerMetadata",
    "LedgerState",
    "LedgerWatcher",
    "MetadataStore",
    "Versioned",
    "default_embedded_uri",
    "default_metadata_uri",
    "open_metadata_store",
]


def open_metadata_store(uri: str | None = None, **conf: Any) -> MetadataStore:
    """Open the store named by ``uri`` (BookKeeper's ``metadataServiceUri`` spelling).

    ``zk+hierarchical://h1:2181;h2:2181/ledgers`` (also ``zk+longhierarchical``, ``zk+null``,
    ``zk://``) opens ZooKeeper; ``embedded:///abs/dir`` the single-machine store; None the
    default (:func:`pybkx.meta.discovery.default_metadata_uri`: ``$PYBKX_METADATA_URI``, a running
    ``pybkx sandbox``, else ``~/.pybkx/metadata``)
    opens the single-machine store. ``conf`` takes client/server keys such as
    ``zkTimeout`` (ms). Raises ValueError for an unknown scheme, MetaStoreException if the store
    cannot be reached.
    """
    uri = uri or default_metadata_uri()
    scheme = uri.split("://", 1)[0].lower()
    if scheme.startswith("zk"):
        from pybkx.meta.zookeeper import ZooKeeperMetadataStore

        return ZooKeeperMetadataStore(uri, **conf)
    if scheme == "embedded":
        from pybkx.meta.embedded import EmbeddedMetadataStore

        return EmbeddedMetadataStore(uri, **conf)
    raise ValueError(
        f"unsupported metadataServiceUri {uri!r}: use zk+hierarchical://host:port/ledgers "
        "or embedded:///path"
    )
