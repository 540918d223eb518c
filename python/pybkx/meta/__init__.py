"""Metadata stores: the contract (one module per concern: ``cluster``, ``ledgers``,
``registration``, ``coordination``; ``store`` composes them), ledger metadata and its byte
formats, and opening a store from its URI. Backends live in ``zookeeper/`` and ``embedded/``.
It picks a backend by URI; it must never hold a backend's logic itself."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pybkx.meta.coordination import Election
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
    "open_metadata_store",
]


def default_embedded_uri() -> str:
    """Where the embedded store lives when no URI is given: ``$PYBKX_METADATA_DIR``, else
    ``~/.pybkx/metadata``."""
    root = os.environ.get("PYBKX_METADATA_DIR") or str(Path.home() / ".pybkx" / "metadata")
    return "embedded://" + str(Path(root).resolve())


def open_metadata_store(uri: str | None = None, **conf: Any) -> MetadataStore:
    """Open the store named by ``uri`` (BookKeeper's ``metadataServiceUri`` spelling).

    ``zk+hierarchical://h1:2181;h2:2181/ledgers`` (also ``zk+longhierarchical``, ``zk+null``,
    ``zk://``) opens ZooKeeper; ``embedded:///abs/dir`` (or None: :func:`default_embedded_uri`)
    opens the single-machine store. ``conf`` takes client/server keys such as
    ``zkTimeout`` (ms). Raises ValueError for an unknown scheme, MetaStoreException if the store
    cannot be reached.
    """
    uri = uri or default_embedded_uri()
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
