"""What every admin endpoint works with: the bookie, its metrics exporter, and a client of its
cluster made on first use (ledger reads and deletes go through the client, as BookKeeper's admin
API uses ``BookKeeperAdmin``). It owns that client's life; it never handles a request.
"""

from __future__ import annotations

import threading

from pybkx.admin.bookie_metrics import bookie_metrics
from pybkx.admin.http import HttpError
from pybkx.admin.prometheus import PrometheusText
from pybkx.bookie import Bookie
from pybkx.client import BookKeeper
from pybkx.meta import MetadataStore

__all__ = ["AdminContext"]


class AdminContext:
    """The bookie an admin server belongs to, and the shared tools of its endpoints."""

    def __init__(self, bookie: Bookie) -> None:
        self.bookie = bookie
        config = bookie.config
        self.exporter = PrometheusText(config.prometheus_stats_latency_rollover_seconds)
        self._client: BookKeeper | None = None
        self._lock = threading.Lock()
        self.closed = threading.Event()
        """Set when the admin server stops: background work of endpoints ends then."""

    def metrics_text(self) -> str:
        """The bookie's metrics in Prometheus text. Raises HttpError 500 when metrics are off
        (as BookKeeper answers without a stats provider), 503 while it is not running."""
        if not self.bookie.config.collects_metrics:
            raise HttpError(
                500,
                "Stats provider is not enabled. Please enable it by set statsProviderClass on "
                "bookie configuration",
            )
        if not self.bookie.running:
            raise HttpError(503, "the bookie is not running")
        return self.exporter.render(bookie_metrics(self.bookie))

    def store(self) -> MetadataStore:
        """The bookie's metadata store. Raises HttpError 404 for a standalone bookie."""
        store = self.bookie.metadata_store
        if store is None:
            raise HttpError(404, "this bookie runs standalone: it has no metadata service")
        return store

    def client(self) -> BookKeeper:
        """A client of the bookie's cluster, made on first use. Raises HttpError 404 for a
        standalone bookie, MetaStoreException if the store cannot be reached."""
        uri = self.bookie.config.metadata_uri()
        if uri is None:
            raise HttpError(404, "this bookie runs standalone: it has no metadata service")
        with self._lock:
            if self._client is None:
                self._client = BookKeeper(uri, **self.bookie.config.client_settings())
            return self._client

    def close(self) -> None:
        self.closed.set()
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()
