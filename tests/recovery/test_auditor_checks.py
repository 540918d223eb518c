"""The auditor's store state on both stores: the periodic checks' stamps (BookKeeper's node
names and binary format on ZooKeeper) and ``triggeraudit``'s re-store of the lost-bookie delay,
which the auditor notices by its version; the triggering refused without an auditor."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from pybkx.meta import MetadataStore, open_metadata_store
from pybkx.meta.zookeeper.underreplication import parse_ctime, render_ctime
from pybkx.recovery.auditor import AuditUnavailable, trigger_audit

pytestmark = pytest.mark.integration


@pytest.fixture(params=["embedded", "zookeeper"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MetadataStore]:
    if request.param == "zookeeper":
        server = request.getfixturevalue("zookeeper_server")
        uri = f"zk+hierarchical://{server}/auditor-{os.getpid()}-{time.time_ns()}/ledgers"
    else:
        uri = f"embedded://{tmp_path / 'meta'}"
    opened = open_metadata_store(uri)
    try:
        opened.init_new_cluster()
        yield opened
    finally:
        opened.close()


def test_stamps_round_trip_and_delay_versions(store: MetadataStore) -> None:
    assert store.check_ctime("checkallledgersctime") is None
    store.set_check_ctime("checkallledgersctime", 1_700_000_000_123)
    assert store.check_ctime("checkallledgersctime") == 1_700_000_000_123
    assert store.check_ctime("replicascheckctime") is None
    with pytest.raises(ValueError):
        store.check_ctime("nosuchstamp")
    assert store.lost_bookie_recovery_delay_version() is None
    store.set_lost_bookie_recovery_delay(7)
    first = store.lost_bookie_recovery_delay_version()
    store.set_lost_bookie_recovery_delay(7)  # the same value still counts
    assert store.lost_bookie_recovery_delay_version() == (first or 0) + 1
    assert store.lost_bookie_recovery_delay() == 7


def test_trigger_audit_needs_an_enabled_cluster_with_an_auditor(store: MetadataStore) -> None:
    with pytest.raises(AuditUnavailable, match="no auditor"):
        trigger_audit(store)
    store.set_replication_enabled(False)
    with pytest.raises(AuditUnavailable, match="disabled"):
        trigger_audit(store)
    store.set_replication_enabled(True)


def test_ctime_binary_format() -> None:
    # CheckAllLedgersFormat{checkAllLedgersCTime: 1700000000123} as protobuf-java writes it.
    data = render_ctime(1_700_000_000_123)
    assert data[0] == 0x08
    assert parse_ctime(data) == 1_700_000_000_123
    assert parse_ctime(b"") is None


def test_zookeeper_stamp_is_at_bookkeepers_path(zookeeper_server: str) -> None:
    root = f"/auditor-layout-{os.getpid()}-{time.time_ns()}"
    with open_metadata_store(f"zk+hierarchical://{zookeeper_server}{root}/ledgers") as s:
        s.init_new_cluster()
        s.set_check_ctime("placementpolicycheckctime", 42)
    zk = KazooClient(hosts=zookeeper_server, timeout=5)
    zk.start(timeout=10)
    try:
        data, _ = zk.get(f"{root}/ledgers/underreplication/placementpolicycheckctime")
        assert data == b"\x08\x2a"
    finally:
        zk.stop()
        zk.close()
