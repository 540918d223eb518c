"""The ZooKeeper metadata backend in BookKeeper's layout: ``store`` composes the session,
ledger, registration and coordination parts; ``layout`` holds the paths. This package file only
names them."""

from pybkx.meta.zookeeper.layout import ledger_id_from_path, ledger_path
from pybkx.meta.zookeeper.store import ZooKeeperMetadataStore

__all__ = ["ZooKeeperMetadataStore", "ledger_id_from_path", "ledger_path"]
