"""AutoRecovery with real bookie processes that run it (``autoRecoveryDaemonEnabled=true``), on
the embedded store and on a real ZooKeeper: the auditor's own bookie is killed for good, another
bookie takes over as auditor, and every ledger it held (closed, and open with a live writer, fenced
after the grace period) ends up on Qw live bookies of each write set with no marker left; a
worker killed while it holds a ledger's lock leaves that ledger to another. Also
the under-replication contract on both stores, and its ZooKeeper layout as BookKeeper's."""

from __future__ import annotations

import os
import select
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient
from recovery_helpers import FAST, assert_replicated, create_on
from support.certs import TestCA, bookie_keys, client_keys, need_tools
from support.sandboxes import sandboxes as sandboxes
from support.wait import wait_until

from pybkx import errors
from pybkx.client import BookKeeper
from pybkx.config import ClientConfig
from pybkx.meta import MetadataStore, open_metadata_store
from pybkx.tools.sandbox import Sandbox

pytestmark = pytest.mark.integration

AUTORECOVERY = {
    "zkTimeout": 2000,
    "autoRecoveryDaemonEnabled": True,
    "openLedgerRereplicationGracePeriod": 1000,
    "rwRereplicateBackoffMs": 500,
}
#: How long an auditor's election or the healing of the ledgers may take here.
HEAL_TIMEOUT_S = 90.0


def zk_uri(server: str, name: str) -> str:
    return f"zk+hierarchical://{server}/{name}-{os.getpid()}-{time.time_ns()}/ledgers"


@pytest.fixture(params=["embedded", "zookeeper"])
def cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Sandbox]:
    """Four bookies running AutoRecovery."""
    uri = None
    if request.param == "zookeeper":
        uri = zk_uri(request.getfixturevalue("zookeeper_server"), "autorecovery")
    with Sandbox(4, directory=tmp_path / "sandbox", zk_uri=uri, conf=AUTORECOVERY) as sandbox:
        yield sandbox


def test_a_killed_auditor_is_replaced_and_its_ledgers_heal(cluster: Sandbox) -> None:
    with BookKeeper(cluster.metadata_uri, **FAST) as bk:
        store = bk.store
        election = store.auditor_election("test-observer")
        wait_until(lambda: election.leader() is not None, "an auditor", timeout_s=HEAL_TIMEOUT_S)
        auditor = election.leader()
        assert auditor in cluster.bookie_addresses

        closed = create_on(bk, (3, 2, 2), {auditor}, 1500)
        closed.close()
        whole = create_on(bk, (3, 3, 3), {auditor}, 300)
        whole.close()
        open_ledger = create_on(bk, (3, 2, 2), {auditor}, 200)
        ids = [closed.ledger_id, whole.ledger_id, open_ledger.ledger_id]

        cluster.kill_bookie(cluster.bookie_addresses.index(bk.address_of(auditor)))
        wait_until(
            lambda: election.leader() not in (None, auditor),
            "a new auditor",
            timeout_s=HEAL_TIMEOUT_S,
        )

        def healed() -> bool:
            names = {
                b
                for i in ids
                for ens in store.read_ledger_metadata(i).value.ensembles.values()
                for b in ens
            }
            return auditor not in names and not store.underreplicated_ledgers()

        wait_until(healed, "every ledger healed and unmarked", timeout_s=HEAL_TIMEOUT_S)
        for ledger_id in ids:
            assert_replicated(bk, ledger_id, {auditor})
        # The open ledger was fenced once its grace period ended: its writer is stopped.
        with pytest.raises((errors.LedgerFencedException, errors.LedgerClosedException)):
            open_ledger.append(b"late")
        assert store.read_ledger_metadata(open_ledger.ledger_id).value.last_entry_id == 199


def test_ledgers_heal_on_a_cluster_that_requires_tls_and_roles(
    sandboxes: Any, tmp_path: Path
) -> None:
    """AutoRecovery's own clients take the bookie's TLS settings and certificate (whose role
    the other bookies authorize): a lost bookie's ledgers are copied over TLS, and a plaintext
    client is still refused by every bookie."""
    need_tools()
    ca = TestCA(tmp_path / "ca")
    bookie_cert = ca.issue("bookie-with-role", ou="0:bookie")
    cluster = sandboxes(
        {**AUTORECOVERY, **bookie_keys(ca, bookie_cert, roles="writer,bookie")}, bookies=4
    )
    keys = {**FAST, **client_keys(ca, ca.issue("writer", ou="0:writer"))}
    with BookKeeper(cluster.metadata_uri, **keys) as bk:
        first = bk.create_ledger(3, 2, 2, password=b"pw")
        lost = first.metadata.last_ensemble[0]
        first.close()
        bk.delete_ledger(first.ledger_id)
        ledgers = [create_on(bk, (3, 2, 2), {lost}, 400) for _ in range(2)]
        for handle in ledgers:
            handle.close()
        cluster.kill_bookie(cluster.bookie_addresses.index(bk.address_of(lost)))

        def healed() -> bool:
            held = {
                b
                for handle in ledgers
                for ens in bk.store.read_ledger_metadata(handle.ledger_id).value.ensembles.values()
                for b in ens
            }
            return lost not in held and not bk.store.underreplicated_ledgers()

        wait_until(healed, "the lost bookie's ledgers healed over TLS", timeout_s=HEAL_TIMEOUT_S)
        for handle in ledgers:
            assert_replicated(bk, handle.ledger_id, {lost}, ClientConfig.of(**keys))
    with BookKeeper(cluster.metadata_uri, **FAST) as plaintext:
        handle = plaintext.create_ledger(3, 2, 2)
        with pytest.raises(errors.BKException):
            handle.append(b"refused without TLS and a role")


#: A replication worker in a process of its own: marks a ledger under-replicated, takes the
#: marker's lock as a worker starting its copy would, says so, and waits to be killed.
DOOMED_WORKER = """
import sys, time
from pybkx.meta import open_metadata_store
store = open_metadata_store(sys.argv[1], zkTimeout=2000)
ledger = int(sys.argv[2])
store.mark_ledger_underreplicated(ledger, [sys.argv[3]])
assert store.lock_underreplicated_ledger(ledger, "doomed-worker") is not None
print("locked", flush=True)
time.sleep(600)  # not a wait: it holds the lock until it is killed
"""


def test_a_worker_killed_holding_its_lock_leaves_the_ledger_to_another(
    cluster: Sandbox,
) -> None:
    with BookKeeper(cluster.metadata_uri, **FAST) as bk:
        store = bk.store
        election = store.auditor_election("test-observer")
        wait_until(lambda: election.leader() is not None, "an auditor", timeout_s=HEAL_TIMEOUT_S)
        victim = next(b for b in cluster.bookie_addresses if b != election.leader())
        ledger = create_on(bk, (3, 2, 2), {victim}, 600)
        ledger.close()
        # Copying paused while the victim dies, so that the doomed worker takes the lock first.
        store.set_replication_enabled(False)
        cluster.kill_bookie(cluster.bookie_addresses.index(victim))
        worker = subprocess.Popen(
            [
                sys.executable,
                "-c",
                DOOMED_WORKER,
                cluster.metadata_uri,
                str(ledger.ledger_id),
                victim,
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert worker.stdout is not None
            ready, _, _ = select.select([worker.stdout], [], [], 60.0)
            assert ready, "the doomed worker did not take the lock within 60 s"
            assert worker.stdout.readline().strip() == "locked"
            # Held: no one else may take it while its holder lives.
            assert store.lock_underreplicated_ledger(ledger.ledger_id, "test") is None
        finally:
            worker.kill()  # SIGKILL: the lock is never given back, only its session lapses
            worker.wait(timeout=30)
        store.set_replication_enabled(True)

        def healed() -> bool:
            md = store.read_ledger_metadata(ledger.ledger_id).value
            in_use = {b for ens in md.ensembles.values() for b in ens}
            return victim not in in_use and not store.underreplicated_ledgers()

        wait_until(
            healed, "the ledger healed by another worker and unmarked", timeout_s=HEAL_TIMEOUT_S
        )
        assert_replicated(bk, ledger.ledger_id, {victim})


def contract_store(request: pytest.FixtureRequest, tmp_path: Path) -> MetadataStore:
    if request.param == "zookeeper":
        uri = zk_uri(request.getfixturevalue("zookeeper_server"), "underreplication")
    else:
        uri = f"embedded://{tmp_path / 'metadata'}"
    store = open_metadata_store(uri)
    store.init_new_cluster()
    return store


@pytest.fixture(params=["embedded", "zookeeper"])
def stores(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[MetadataStore, MetadataStore]]:
    """Two sessions of one store (as two nodes would hold)."""
    first = contract_store(request, tmp_path)
    second = open_metadata_store(first.uri)
    try:
        yield first, second
    finally:
        second.close()
        first.close()


def test_markers_merge_lock_and_survive_a_re_mark(
    stores: tuple[MetadataStore, MetadataStore],
) -> None:
    a, b = stores
    a.mark_ledger_underreplicated(7, ["b1:3181"])
    a.mark_ledger_underreplicated(7, ["b2:3181", "b1:3181"])
    a.mark_ledger_underreplicated(2**40 + 5, ["b3:3181"])
    assert b.underreplicated_ledgers() == {7: ["b1:3181", "b2:3181"], 2**40 + 5: ["b3:3181"]}

    version = a.lock_underreplicated_ledger(7, "node-a")
    assert version is not None
    assert b.lock_underreplicated_ledger(7, "node-b") is None  # held by a
    # A re-mark while a copies makes a's version stale: the marker stays.
    b.mark_ledger_underreplicated(7, ["b4:3181"])
    assert not a.mark_ledger_replicated(7, version)
    version = b.lock_underreplicated_ledger(7, "node-b")  # a's lock went with its mark attempt
    assert version is not None
    assert b.mark_ledger_replicated(7, version)
    assert list(a.underreplicated_ledgers()) == [2**40 + 5]
    assert a.lock_underreplicated_ledger(7, "node-a") is None  # no marker, no lock

    # A holder that goes away frees its locks.
    assert b.lock_underreplicated_ledger(2**40 + 5, "node-b") is not None
    b.close()
    assert a.lock_underreplicated_ledger(2**40 + 5, "node-a") is not None

    assert a.replication_enabled()
    a.set_replication_enabled(False)
    assert not a.replication_enabled()
    a.set_replication_enabled(True)
    assert a.lost_bookie_recovery_delay() is None
    a.set_lost_bookie_recovery_delay(45)
    assert a.lost_bookie_recovery_delay() == 45


def test_a_garbage_collectors_lock_keeps_workers_off_with_or_without_a_marker(
    stores: tuple[MetadataStore, MetadataStore],
) -> None:
    gc, worker = stores
    assert gc.lock_ledger_against_replication(9, "bookie-a")  # no marker: locked all the same
    assert not worker.lock_ledger_against_replication(9, "bookie-b")
    worker.mark_ledger_underreplicated(9, ["b1:3181"])
    assert worker.lock_underreplicated_ledger(9, "node-b") is None  # the collector holds it
    gc.release_underreplicated_ledger(9)
    version = worker.lock_underreplicated_ledger(9, "node-b")
    assert version is not None
    assert not gc.lock_ledger_against_replication(9, "bookie-a")  # a worker copies it
    assert worker.mark_ledger_replicated(9, version)
    assert gc.lock_ledger_against_replication(9, "bookie-a")
    gc.release_underreplicated_ledger(9)


def test_zookeeper_markers_are_in_bookkeepers_layout(zookeeper_server: str) -> None:
    uri = zk_uri(zookeeper_server, "layout")
    root = uri.split(zookeeper_server, 1)[1]
    with open_metadata_store(uri) as store:
        store.init_new_cluster()
        store.mark_ledger_underreplicated(1, ["10.0.0.1:3181", "10.0.0.2:3181"])
        store.set_replication_enabled(False)
        store.set_lost_bookie_recovery_delay(30)
        zk = KazooClient(hosts=zookeeper_server)
        zk.start(timeout=10)
        try:
            base = f"{root}/underreplication"
            data, _ = zk.get(f"{base}/ledgers/0000/0000/0000/0001/urL0000000001")
            text = data.decode()
            assert 'replica: "10.0.0.1:3181"\nreplica: "10.0.0.2:3181"\nctime: ' in text
            assert zk.get(f"{base}/LAYOUT")[0] == b'type: "BASIC"\nversion: 1\n'
            assert zk.exists(f"{base}/disable")
            assert zk.get(f"{base}/lostBookieRecoveryDelay")[0] == b"30"
            assert store.lock_underreplicated_ledger(1, "me:3181") is not None
            assert zk.get(f"{base}/locks/urL0000000001")[0] == b'bookieId: "me:3181"\n'
        finally:
            zk.stop()
            zk.close()
