"""The ZooKeeper metadata store (kazoo) in Apache BookKeeper's znode layout, shared with Java:
the cluster's identity here, each other concern in its own module. It must never invent paths
or bytes of its own (layout.py, serde.py) nor block kazoo's event thread."""

from __future__ import annotations

import uuid

from kazoo.exceptions import NodeExistsError, NoNodeError

from pybkx import errors
from pybkx.meta import serde
from pybkx.meta.store import MetadataStore
from pybkx.meta.zookeeper.coordination import ZkCoordination
from pybkx.meta.zookeeper.layout import (
    AVAILABLE,
    COOKIES,
    ID_PREFIX,
    IDGEN,
    IDGEN_LONG,
    INSTANCEID,
    LAYOUT,
    LEDGER_PARENT_RE,
    LOCKS,
    READONLY,
    UNDER_REPLICATION,
    zk_error,
)
from pybkx.meta.zookeeper.ledgers import ZkLedgers
from pybkx.meta.zookeeper.registration import ZkRegistry
from pybkx.meta.zookeeper.underreplication import ZkUnderReplication

__all__ = ["ZooKeeperMetadataStore"]


class ZooKeeperMetadataStore(
    ZkLedgers, ZkRegistry, ZkCoordination, ZkUnderReplication, MetadataStore
):
    """Metadata in ZooKeeper, laid out as Apache BookKeeper 4.17 lays it out under the root of
    ``zk+hierarchical://h1:2181;h2:2181/ledgers`` (``zk+longhierarchical``, ``zk+null`` and
    plain ``zk`` too). ``conf``: ``zkTimeout`` (ms, default 10000) is the session timeout, the
    connect timeout and the retry deadline of a call.

    Raises ValueError for an unsupported URI, ZKException if ZooKeeper cannot be reached within
    the timeout, MetaStoreException if the cluster's LAYOUT names another ledger manager.
    """

    def init_new_cluster(self) -> bool:
        """Create root, ``available``, ``available/readonly``, LAYOUT and INSTANCEID in one
        transaction (whichever are missing). False if INSTANCEID already existed or another
        initialiser won the race. Raises ZKException."""
        parent = self._root.rsplit("/", 1)[0]
        if parent:
            self._ensure(parent)
        layout = serde.serialize_layout(serde.LedgerLayout(self._factory))
        for _ in range(3):
            if self._exists(self._path(INSTANCEID)):
                return False
            txn = self._zk.transaction()
            for path in (self._root, self._path(AVAILABLE), self._path(AVAILABLE, READONLY)):
                if not self._exists(path):
                    txn.create(path, b"")
            if not self._exists(self._path(LAYOUT)):
                txn.create(self._path(LAYOUT), layout)
            txn.create(self._path(INSTANCEID), str(uuid.uuid4()).encode())
            results = self._call("initialise the cluster", txn.commit)
            failures = [r for r in results if isinstance(r, Exception)]
            if not failures:
                return True
            if not any(isinstance(r, (NodeExistsError, NoNodeError)) for r in failures):
                raise zk_error(failures[0], f"initialise the cluster at {self._root}")
            # Someone created a piece meanwhile: look again.
        return False

    def is_initialized(self) -> bool:
        return self._exists(self._path(INSTANCEID))

    def instance_id(self) -> str:
        """Raises MetaStoreException if the cluster is not initialised."""
        try:
            data, _ = self._call("read INSTANCEID", self._zk.get, self._path(INSTANCEID))
        except NoNodeError:
            raise errors.MetaStoreException(
                f"no cluster at {self.uri}: initialise it first (init_new_cluster / metaformat)"
            ) from None
        return bytes(data).decode("utf-8")

    def format(self) -> None:
        """Delete ledgers, id generators, cookies, registrations and under-replication marks;
        write LAYOUT and a new INSTANCEID. Locks and elections are left alone."""
        if not self._exists(self._root):
            self.init_new_cluster()
            return
        for child in self._children(self._root):
            if (
                LEDGER_PARENT_RE.fullmatch(child)
                or child in (IDGEN, IDGEN_LONG)
                or child.startswith(ID_PREFIX)
            ):
                self._delete_quietly(self._path(child), recursive=True)
        self._delete_quietly(self._path(UNDER_REPLICATION, "ledgers"), recursive=True)
        self._delete_quietly(self._path(UNDER_REPLICATION, LOCKS), recursive=True)
        self._delete_quietly(self._path(COOKIES), recursive=True)
        for bookie_id in self.writable_bookies():
            self._delete_quietly(self._path(AVAILABLE, bookie_id))
        for bookie_id in self.readonly_bookies():
            self._delete_quietly(self._path(AVAILABLE, READONLY, bookie_id))
        self._ensure(self._path(AVAILABLE, READONLY))
        self._delete_quietly(self._path(LAYOUT))
        layout = serde.serialize_layout(serde.LedgerLayout(self._factory))
        self._call("write LAYOUT", self._zk.create, self._path(LAYOUT), layout)
        self._delete_quietly(self._path(INSTANCEID))
        instance = str(uuid.uuid4()).encode()
        self._call("write INSTANCEID", self._zk.create, self._path(INSTANCEID), instance)
        with self._lock:
            self._long_idgen = None
