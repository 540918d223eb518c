"""The MetadataStore contract, the same behaviour tests for every backend (ZooKeeper, embedded),
plus ZooKeeper-only checks that the znodes are where Apache BookKeeper puts them."""

from __future__ import annotations

import contextlib
import os
import queue
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from java_metadata import run_metadata_formats
from kazoo.client import KazooClient
from support.wait import wait_until

from pybkx import errors
from pybkx.meta import (
    BookieServiceInfo,
    Cookie,
    DigestType,
    LedgerMetadata,
    LedgerState,
    MetadataStore,
    Versioned,
    open_metadata_store,
    serde,
)
from pybkx.meta.zookeeper import ZooKeeperMetadataStore, ledger_id_from_path, ledger_path
from pybkx.meta.zookeeper.layout import SHORT_ID_LIMIT

OpenStore = Callable[..., MetadataStore]
WAIT_S = 10.0
BOOKIE = "127.0.0.1:3181"


def metadata(**changes: Any) -> LedgerMetadata:
    base = LedgerMetadata(
        ensemble_size=3,
        write_quorum_size=2,
        ack_quorum_size=2,
        ensembles={0: ("127.0.0.1:3181", "127.0.0.2:3181", "127.0.0.3:3181")},
        digest_type=DigestType.CRC32C,
        password=b"secret",
        custom_metadata={"application": b"tests"},
    )
    return base.replace(**changes) if changes else base


def same_ledger(a: LedgerMetadata, b: LedgerMetadata) -> bool:
    """Equal apart from the creator token a backend may assign on create."""
    return a.replace(c_token=0) == b.replace(c_token=0)


def service_info(port: int = 3181) -> BookieServiceInfo:
    return BookieServiceInfo.for_address("127.0.0.1", port)


# --- cluster ----------------------------------------------------------------------------------


def test_init_new_cluster_is_idempotent_and_keeps_the_instance_id(open_store: OpenStore) -> None:
    first = open_store()
    assert not first.is_initialized()
    with pytest.raises(errors.MetaStoreException):
        first.instance_id()
    assert first.init_new_cluster() is True
    instance = first.instance_id()
    assert instance
    assert first.init_new_cluster() is False
    second = open_store()
    assert second.is_initialized()
    assert second.init_new_cluster() is False
    assert second.instance_id() == instance == first.instance_id()


def test_format_deletes_ledgers_and_cookies_and_renews_the_instance_id(
    store: MetadataStore,
) -> None:
    before = store.instance_id()
    store.create_ledger_metadata(store.generate_ledger_id(), metadata())
    store.write_cookie(BOOKIE, Cookie(BOOKIE, ("/j",), ("/l",), before), None)
    store.format()
    assert list(store.list_ledgers()) == []
    assert store.all_bookies() == frozenset()
    assert store.is_initialized()
    assert store.instance_id() != before


# --- ledger ids ---------------------------------------------------------------------------------


def test_generated_ledger_ids_are_unique_across_threads_and_stores(
    store: MetadataStore, open_store: OpenStore
) -> None:
    other = open_store()
    stores = [store, other] * 3  # 6 workers over two sessions

    def generate(s: MetadataStore) -> list[int]:
        return [s.generate_ledger_id() for _ in range(30)]

    with ThreadPoolExecutor(len(stores)) as pool:
        ids = [i for batch in pool.map(generate, stores) for i in batch]
    assert len(ids) == len(set(ids)) == 180
    assert all(0 <= i < 2**63 for i in ids)


# --- ledger metadata --------------------------------------------------------------------------


def test_create_read_update_delete_ledger_metadata(store: MetadataStore) -> None:
    ledger_id = store.generate_ledger_id()
    created = store.create_ledger_metadata(ledger_id, metadata())
    assert same_ledger(created.value, metadata())
    read = store.read_ledger_metadata(ledger_id)
    assert read == created

    with pytest.raises(errors.LedgerExistException):
        store.create_ledger_metadata(ledger_id, metadata())

    closed = read.value.closed(last_entry_id=41, length=4200)
    updated = store.write_ledger_metadata(ledger_id, closed, read.version)
    assert updated.version != read.version
    assert store.read_ledger_metadata(ledger_id) == updated
    assert updated.value.state == LedgerState.CLOSED and updated.value.last_entry_id == 41

    with pytest.raises(errors.MetadataVersionException):
        store.write_ledger_metadata(ledger_id, read.value, read.version)  # stale
    with pytest.raises(errors.MetadataVersionException):
        store.remove_ledger_metadata(ledger_id, read.version)  # stale

    store.remove_ledger_metadata(ledger_id, updated.version)
    with pytest.raises(errors.NoSuchLedgerExistsOnMetadataServerException):
        store.read_ledger_metadata(ledger_id)
    with pytest.raises(errors.NoSuchLedgerExistsOnMetadataServerException):
        store.write_ledger_metadata(ledger_id, closed, updated.version)
    with pytest.raises(errors.NoSuchLedgerExistsOnMetadataServerException):
        store.remove_ledger_metadata(ledger_id)


def test_metadata_written_by_one_store_is_read_by_another(
    store: MetadataStore, open_store: OpenStore
) -> None:
    created = store.create_ledger_metadata(7, metadata(ctime=1_700_000_000_000))
    assert open_store().read_ledger_metadata(7) == created


def test_of_two_concurrent_writers_exactly_one_wins(
    store: MetadataStore, open_store: OpenStore
) -> None:
    other = open_store()
    ledger_id = store.generate_ledger_id()
    store.create_ledger_metadata(ledger_id, metadata())
    for round_ in range(5):
        base = store.read_ledger_metadata(ledger_id)
        barrier = threading.Barrier(2)

        def write(
            s: MetadataStore,
            first_entry: int,
            base: Versioned[LedgerMetadata] = base,
            barrier: threading.Barrier = barrier,
        ) -> str:
            change = base.value.with_ensemble(
                first_entry, ("127.0.0.9:3181", "127.0.0.2:3181", "127.0.0.3:3181")
            )
            barrier.wait()
            try:
                s.write_ledger_metadata(ledger_id, change, base.version)
                return "won"
            except errors.MetadataVersionException:
                return "lost"

        start = 100 * (round_ + 1)
        with ThreadPoolExecutor(2) as pool:
            outcomes = list(pool.map(write, [store, other], [start, start + 50]))
        assert sorted(outcomes) == ["lost", "won"]
        assert store.read_ledger_metadata(ledger_id).version != base.version


def test_list_ledgers_is_ascending_and_includes_zero_and_long_ids(store: MetadataStore) -> None:
    ids = [0, 1, 9_999, SHORT_ID_LIMIT - 1, SHORT_ID_LIMIT, 2**32, 2**40 + 5, 2**62 + 3]
    for ledger_id in random.sample(ids, len(ids)):
        store.create_ledger_metadata(ledger_id, metadata())
    assert list(store.list_ledgers()) == ids
    for ledger_id in (1, 2**32, 2**62 + 3):
        store.remove_ledger_metadata(ledger_id)
    assert list(store.list_ledgers()) == [0, 9_999, SHORT_ID_LIMIT - 1, SHORT_ID_LIMIT, 2**40 + 5]
    for ledger_id in ids:
        if ledger_id not in (1, 2**32, 2**62 + 3):
            assert store.read_ledger_metadata(ledger_id).value.ensemble_size == 3


def test_watch_on_a_ledger_sees_updates_and_deletion(
    store: MetadataStore, open_store: OpenStore
) -> None:
    writer = open_store()
    ledger_id = store.generate_ledger_id()
    created = store.create_ledger_metadata(ledger_id, metadata())
    seen: list[tuple[int, Versioned[LedgerMetadata] | None]] = []
    unsubscribe = store.watch_ledger(ledger_id, lambda i, v: seen.append((i, v)))

    updated = writer.write_ledger_metadata(
        ledger_id, created.value.replace(state=LedgerState.IN_RECOVERY), created.version
    )
    wait_until(lambda: (ledger_id, updated) in seen, "told of the update", timeout_s=WAIT_S)
    writer.remove_ledger_metadata(ledger_id)
    wait_until(lambda: (ledger_id, None) in seen, "told of the deletion", timeout_s=WAIT_S)

    unsubscribe()
    count = len(seen)
    writer.create_ledger_metadata(ledger_id, metadata())
    time.sleep(0.3)  # not a wait: time for a notification that must not come
    assert len(seen) == count


# --- bookies --------------------------------------------------------------------------------


def test_bookie_registration_moves_between_writable_and_readonly(
    store: MetadataStore, open_store: OpenStore
) -> None:
    observer = open_store()
    states: queue.Queue[tuple[frozenset[str], frozenset[str]]] = queue.Queue()
    unsubscribe = observer.watch_bookies(lambda w, r: states.put((w, r)))
    assert states.get(timeout=WAIT_S) == (frozenset(), frozenset())  # called at once

    def next_state_is(expected: tuple[frozenset[str], frozenset[str]]) -> None:
        deadline = time.monotonic() + WAIT_S
        while True:
            state = states.get(timeout=max(0.01, deadline - time.monotonic()))
            if state == expected:
                return

    info = service_info()
    store.register_bookie(BOOKIE, False, info)
    next_state_is((frozenset({BOOKIE}), frozenset()))
    assert observer.writable_bookies() == {BOOKIE}
    assert observer.bookie_service_info(BOOKIE) == info

    store.register_bookie(BOOKIE, True, info)
    next_state_is((frozenset(), frozenset({BOOKIE})))
    assert observer.readonly_bookies() == {BOOKIE}
    assert observer.writable_bookies() == frozenset()
    assert observer.bookie_service_info(BOOKIE) == info

    store.register_bookie(BOOKIE, False, info)
    next_state_is((frozenset({BOOKIE}), frozenset()))

    store.unregister_bookie(BOOKIE)
    next_state_is((frozenset(), frozenset()))
    with pytest.raises(errors.BookieHandleNotAvailableException):
        observer.bookie_service_info(BOOKIE)

    unsubscribe()
    store.register_bookie("127.0.0.1:3182", False, service_info(3182))
    time.sleep(0.3)  # not a wait: time for a notification that must not come
    assert all(BOOKIE not in w for w, _ in list(states.queue))
    assert "127.0.0.1:3182" not in {b for w, _ in list(states.queue) for b in w}


def test_registration_vanishes_when_its_store_is_closed(
    store: MetadataStore, open_store: OpenStore
) -> None:
    bookie = open_store()
    bookie.register_bookie(BOOKIE, False, service_info())
    bookie.register_bookie("127.0.0.1:3182", True, service_info(3182))
    assert store.writable_bookies() == {BOOKIE}
    assert store.readonly_bookies() == {"127.0.0.1:3182"}
    bookie.close()
    wait_until(
        lambda: not store.writable_bookies() and not store.readonly_bookies(),
        "unregistered after close",
        timeout_s=WAIT_S,
    )


# --- cookies --------------------------------------------------------------------------------


def test_cookies_are_created_compared_and_set_and_removed(store: MetadataStore) -> None:
    cookie = Cookie(BOOKIE, ("/j1", "/j2"), ("/l1",), store.instance_id(), ("/i1",))
    with pytest.raises(errors.CookieNotFoundException):
        store.read_cookie(BOOKIE)
    created = store.write_cookie(BOOKIE, cookie, None)
    assert created.value == cookie
    assert store.read_cookie(BOOKIE) == created
    with pytest.raises(errors.MetadataVersionException):
        store.write_cookie(BOOKIE, cookie, None)  # exists

    grown = Cookie(BOOKIE, ("/j1", "/j2"), ("/l1", "/l2"), store.instance_id(), ("/i1",))
    updated = store.write_cookie(BOOKIE, grown, created.version)
    assert updated.version != created.version
    assert store.read_cookie(BOOKIE) == updated
    with pytest.raises(errors.MetadataVersionException):
        store.write_cookie(BOOKIE, cookie, created.version)  # stale

    store.write_cookie("127.0.0.1:3182", Cookie("127.0.0.1:3182", ("/j",), ("/l",)), None)
    assert store.all_bookies() == {BOOKIE, "127.0.0.1:3182"}

    with pytest.raises(errors.MetadataVersionException):
        store.remove_cookie(BOOKIE, created.version)  # stale
    store.remove_cookie(BOOKIE, updated.version)
    assert store.all_bookies() == {"127.0.0.1:3182"}
    with pytest.raises(errors.CookieNotFoundException):
        store.read_cookie(BOOKIE)


# --- coordination ---------------------------------------------------------------------------


def test_lock_excludes_a_second_store_until_released(
    store: MetadataStore, open_store: OpenStore
) -> None:
    other = open_store()
    acquired = threading.Event()
    with store.lock("auditor", "first"):
        with (
            pytest.raises(errors.TimeoutException),
            other.lock("auditor", "second", timeout=0.3),
        ):
            pytest.fail("entered a lock held by another store")

        def wait_for_it() -> None:
            with other.lock("auditor", "second", timeout=WAIT_S):
                acquired.set()

        waiter = threading.Thread(target=wait_for_it)
        waiter.start()
        time.sleep(0.3)  # not a wait: time for the waiter to enter a lock it must not get
        assert not acquired.is_set()
    waiter.join(WAIT_S)
    assert acquired.is_set()
    with store.lock("auditor", "first", timeout=WAIT_S):
        pass  # free again


def test_lock_is_released_when_its_holder_closes(
    store: MetadataStore, open_store: OpenStore
) -> None:
    holder = open_store()
    held = holder.lock("compaction", "holder")
    held.__enter__()
    holder.close()
    with store.lock("compaction", "next", timeout=WAIT_S):
        pass


class Contender:
    """Runs ``election.run`` on a thread; leads until ``stop`` is set."""

    def __init__(self, store: MetadataStore, identifier: str) -> None:
        self.identifier = identifier
        self.election = store.election("auditor", identifier)
        self.leading = threading.Event()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        with contextlib.suppress(errors.BKException):  # the store was closed under us
            self.election.run(self._lead)

    def _lead(self) -> None:
        self.leading.set()
        self.stop.wait(WAIT_S * 3)


def test_election_has_one_leader_and_the_other_takes_over_after_cancel(
    store: MetadataStore, open_store: OpenStore
) -> None:
    first = Contender(store, "bookie-1")
    assert first.leading.wait(WAIT_S)
    second = Contender(open_store(), "bookie-2")
    time.sleep(0.3)  # not a wait: time for a second leader that must not be
    assert not second.leading.is_set()
    assert first.election.leader() == second.election.leader() == "bookie-1"

    first.election.cancel()  # stops contending; the leader's work is not interrupted...
    time.sleep(0.3)  # not a wait: time for a hand-over that must not happen yet
    assert not second.leading.is_set()
    first.stop.set()  # ...its end is the end of the leadership
    assert second.leading.wait(WAIT_S)
    wait_until(
        lambda: second.election.leader() == "bookie-2", "bookie-2 named leader", timeout_s=WAIT_S
    )
    for contender in (first, second):
        contender.stop.set()
        contender.thread.join(WAIT_S)
        assert not contender.thread.is_alive()


def test_election_passes_on_when_the_leaders_store_closes(
    store: MetadataStore, open_store: OpenStore
) -> None:
    leader_store = open_store()
    first = Contender(leader_store, "bookie-1")
    assert first.leading.wait(WAIT_S)
    second = Contender(store, "bookie-2")
    time.sleep(0.2)  # not a wait: time for a second leader that must not be
    assert not second.leading.is_set()
    leader_store.close()
    assert second.leading.wait(WAIT_S)
    for contender in (first, second):
        contender.stop.set()
        contender.thread.join(WAIT_S)


def test_cancel_before_election_returns_without_leading(store: MetadataStore) -> None:
    election = store.election("idle", "bookie-1")
    called = threading.Event()
    election.cancel()
    runner = threading.Thread(target=election.run, args=(called.set,))
    runner.start()
    runner.join(WAIT_S)
    assert not runner.is_alive()
    assert not called.is_set()


# --- ZooKeeper only: the znodes, byte for byte where Apache BookKeeper puts them ------------

zookeeper_only = pytest.mark.integration


@pytest.mark.parametrize(
    ("ledger_id", "path"),
    [
        (0, "/ledgers/00/0000/L0000"),
        (1, "/ledgers/00/0000/L0001"),
        (123456789, "/ledgers/01/2345/L6789"),
        (2147483646, "/ledgers/21/4748/L3646"),
        (2147483647, "/ledgers/000/0000/0021/4748/L3647"),
        (4294967296, "/ledgers/000/0000/0042/9496/L7296"),
        (2**63 - 1, "/ledgers/922/3372/0368/5477/L5807"),
    ],
)
def test_ledger_paths_follow_bookkeepers_hierarchical_rule(ledger_id: int, path: str) -> None:
    assert ledger_path("/ledgers", ledger_id) == path
    assert ledger_id_from_path("/ledgers", path) == ledger_id
    long_path = ledger_path("/ledgers", ledger_id, long_layout=True)
    assert long_path.count("/") == 6
    assert ledger_id_from_path("/ledgers", long_path) == ledger_id


@pytest.mark.parametrize("path", ["/ledgers/00/0000", "/ledgers/0/0000/L0001", "/x/00/0000/L0001"])
def test_paths_that_are_not_ledgers_are_refused(path: str) -> None:
    with pytest.raises(ValueError):
        ledger_id_from_path("/ledgers", path)
    with pytest.raises(errors.IncorrectParameterException):
        ledger_path("/ledgers", -1)


@pytest.fixture
def raw_zk(zookeeper_server: str, zk_root: str) -> Any:
    """A kazoo client chrooted at this test's namespace, so BookKeeper's default paths
    (``/ledgers/...``) read literally."""
    chroot = zk_root.rsplit("/", 1)[0]
    client = KazooClient(hosts=zookeeper_server + chroot, timeout=5.0)
    client.start(timeout=10)
    yield client
    client.stop()
    client.close()


@pytest.fixture
def zk_store(zookeeper_server: str, zk_root: str) -> Any:
    store = ZooKeeperMetadataStore(f"zk+hierarchical://{zookeeper_server}{zk_root}")
    store.init_new_cluster()
    yield store
    store.close()


@zookeeper_only
def test_znodes_are_where_bookkeeper_puts_them(
    zk_store: ZooKeeperMetadataStore, raw_zk: Any
) -> None:
    assert {"available", "INSTANCEID", "LAYOUT"} <= set(raw_zk.get_children("/ledgers"))
    assert raw_zk.get_children("/ledgers/available") == ["readonly"]
    assert raw_zk.get("/ledgers/INSTANCEID")[0].decode() == zk_store.instance_id()
    assert raw_zk.get("/ledgers/LAYOUT")[0] == (
        b"2\norg.apache.bookkeeper.meta.HierarchicalLedgerManagerFactory:1"
    )

    md = metadata()
    created = zk_store.create_ledger_metadata(1, md)
    data, stat = raw_zk.get("/ledgers/00/0000/L0001")
    assert data == serde.serialize_ledger_metadata(created.value)
    assert data.startswith(b"BookieMetadataFormatVersion\t3\n")
    assert stat.version == created.version == 0
    zk_store.create_ledger_metadata(123456789, md)
    assert raw_zk.exists("/ledgers/01/2345/L6789")
    zk_store.create_ledger_metadata(2147483647, md)
    assert raw_zk.exists("/ledgers/000/0000/0021/4748/L3647")
    zk_store.create_ledger_metadata(4294967296, md)
    assert raw_zk.exists("/ledgers/000/0000/0042/9496/L7296")

    zk_store.remove_ledger_metadata(123456789)
    assert not raw_zk.exists("/ledgers/01")  # empty parents pruned
    assert raw_zk.exists("/ledgers/00/0000/L0001")

    info = BookieServiceInfo.for_address("127.0.0.1", 3181)
    zk_store.register_bookie(BOOKIE, False, info)
    data, stat = raw_zk.get("/ledgers/available/127.0.0.1:3181")
    assert data == serde.serialize_bookie_service_info(info)
    assert stat.ephemeralOwner != 0
    zk_store.register_bookie(BOOKIE, True, info)
    assert raw_zk.exists("/ledgers/available/readonly/127.0.0.1:3181")
    assert not raw_zk.exists("/ledgers/available/127.0.0.1:3181")

    cookie = Cookie(BOOKIE, ("/j",), ("/l1", "/l2"), zk_store.instance_id())
    zk_store.write_cookie(BOOKIE, cookie, None)
    assert raw_zk.get("/ledgers/cookies/127.0.0.1:3181")[0] == serde.serialize_cookie(cookie)


@zookeeper_only
@pytest.mark.interop
def test_bookkeepers_own_metadata_driver_shares_the_cluster(
    zk_store: ZooKeeperMetadataStore, raw_zk: Any
) -> None:
    """Apache BookKeeper's ZooKeeper driver reads what pybkx wrote, and pybkx reads what it
    writes: ledger scan, metadata bytes, registrations, cookies, ledger ids."""
    ids = [zk_store.generate_ledger_id(), 2147483647, 4294967296]
    written = {i: zk_store.create_ledger_metadata(i, metadata()).value for i in ids}
    zk_store.register_bookie(BOOKIE, False, service_info())
    zk_store.register_bookie("127.0.0.1:3182", True, service_info(3182))
    zk_store.write_cookie(BOOKIE, Cookie(BOOKIE, ("/j",), ("/l",), zk_store.instance_id()), None)

    lines = run_metadata_formats("zk", zk_store.uri, *map(str, ids))
    seen = dict(line.split("\t", 1) for line in lines if not line.startswith("ledger\t"))
    read = {
        int(i): bytes.fromhex(h)
        for _, i, h in (line.split("\t") for line in lines if line.startswith("ledger\t"))
    }
    assert seen["ledgers"] == ",".join(map(str, sorted(ids)))
    assert read == {i: serde.serialize_ledger_metadata(md) for i, md in written.items()}
    assert seen["writable"] == BOOKIE
    assert seen["readonly"] == "127.0.0.1:3182"
    assert seen["cookies"] == BOOKIE

    java_id_text, java_hex = seen["created"].split("\t")
    java_id = int(java_id_text)
    assert java_id not in ids
    assert zk_store.read_ledger_metadata(java_id).value == serde.parse_ledger_metadata(
        bytes.fromhex(java_hex)
    )
    assert raw_zk.get(ledger_path("/ledgers", java_id))[0] == bytes.fromhex(java_hex)
    assert list(zk_store.list_ledgers()) == sorted([*ids, java_id])
    assert zk_store.generate_ledger_id() not in (*ids, java_id)


@zookeeper_only
def test_metadata_placed_by_other_writers_in_any_format_is_read(
    zk_store: ZooKeeperMetadataStore, raw_zk: Any
) -> None:
    for ledger_id, version in ((5, 1), (6, 2), (7, 3)):
        md = metadata(metadata_format_version=version)
        data = serde.serialize_ledger_metadata(md)
        raw_zk.create(f"/ledgers/00/0000/L000{ledger_id}", data, makepath=True)
        read = zk_store.read_ledger_metadata(ledger_id).value
        assert read.metadata_format_version == version
        assert read.ensembles == md.ensembles
        updated = zk_store.write_ledger_metadata(ledger_id, read.closed(3, 30), 0)
        # An update keeps the ledger's format, as BookKeeper does.
        assert raw_zk.get(f"/ledgers/00/0000/L000{ledger_id}")[0].startswith(
            f"BookieMetadataFormatVersion\t{version}\n".encode()
        )
        assert zk_store.read_ledger_metadata(ledger_id).value.last_entry_id == 3
        assert updated.version == 1
    raw_zk.create("/ledgers/00/0000/L0009", b"not metadata")
    with pytest.raises(errors.MetadataSerializationException):
        zk_store.read_ledger_metadata(9)
    assert list(zk_store.list_ledgers()) == [5, 6, 7, 9]


@zookeeper_only
def test_ids_come_from_idgen_then_idgen_long_after_overflow(
    zk_store: ZooKeeperMetadataStore, raw_zk: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = zk_store.generate_ledger_id()
    assert 0 <= first < SHORT_ID_LIMIT
    assert raw_zk.exists("/ledgers/idgen")
    assert not raw_zk.exists("/ledgers/idgen-long")

    # The 31-bit counter running out (2^31 creates) is simulated: it reports overflow.
    real_short_id = zk_store._short_id
    monkeypatch.setattr(
        zk_store,
        "_short_id",
        lambda parent: None if parent.endswith("/idgen") else real_short_id(parent),
    )
    long_id = zk_store.generate_ledger_id()
    assert long_id >> 32 == 1  # HOB-0000000001
    assert raw_zk.exists("/ledgers/idgen-long/HOB-0000000001")
    monkeypatch.undo()

    # The switch is permanent, for this store and for every other one.
    assert zk_store.generate_ledger_id() > long_id
    other = ZooKeeperMetadataStore(zk_store.uri)
    try:
        assert other.generate_ledger_id() >> 32 == 1
    finally:
        other.close()
    assert not raw_zk.get_children("/ledgers/idgen-long/HOB-0000000001")  # ids deleted


@zookeeper_only
def test_a_full_high_order_directory_moves_on_to_the_next(
    zk_store: ZooKeeperMetadataStore, raw_zk: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    raw_zk.ensure_path("/ledgers/idgen-long/HOB-0000000007")
    real_short_id = zk_store._short_id
    monkeypatch.setattr(
        zk_store,
        "_short_id",
        lambda parent: None if parent.endswith("HOB-0000000007") else real_short_id(parent),
    )
    assert zk_store.generate_ledger_id() >> 32 == 8
    assert raw_zk.exists("/ledgers/idgen-long/HOB-0000000008")


@zookeeper_only
def test_registration_vanishes_when_the_holding_process_is_killed(
    zookeeper_server: str, zk_store: ZooKeeperMetadataStore
) -> None:
    child = (
        "import sys, time\n"
        "from pybkx.meta import BookieServiceInfo, open_metadata_store\n"
        "store = open_metadata_store(sys.argv[1], zkTimeout=2000)\n"
        "store.register_bookie('127.0.0.1:4181', False,"
        " BookieServiceInfo.for_address('127.0.0.1', 4181))\n"
        "print('REGISTERED', flush=True)\n"
        "time.sleep(60)\n"  # not a wait: it holds the registration until it is killed
    )
    process = subprocess.Popen(
        [sys.executable, "-c", child, zk_store.uri], stdout=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None
        assert process.stdout.readline().strip() == "REGISTERED"
        assert zk_store.writable_bookies() == {"127.0.0.1:4181"}
        os.kill(process.pid, signal.SIGKILL)
        process.wait(WAIT_S)
        killed = time.monotonic()
        wait_until(
            lambda: not zk_store.writable_bookies(), "expired after the kill", timeout_s=WAIT_S
        )
        assert time.monotonic() - killed < 2.0 + 3.0  # the session timeout, plus slack
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


@zookeeper_only
def test_registrations_come_back_after_the_session_expires(
    zookeeper_server: str, zk_store: ZooKeeperMetadataStore
) -> None:
    zk_store.register_bookie(BOOKIE, False, service_info())
    zk_store.register_bookie("127.0.0.1:3182", True, service_info(3182))
    # Expire the session from outside: a second client joins it, then closes it.
    session_id, password = zk_store._zk.client_id
    intruder = KazooClient(hosts=zookeeper_server, client_id=(session_id, password), timeout=5.0)
    intruder.start(timeout=10)
    intruder.stop()
    intruder.close()
    wait_until(
        lambda: zk_store._zk.client_id not in (None, (session_id, password)),
        "on a new session",
        timeout_s=WAIT_S,
    )
    wait_until(
        lambda: (
            zk_store.writable_bookies() == {BOOKIE}
            and zk_store.readonly_bookies() == {"127.0.0.1:3182"}
        ),
        "registered again",
        timeout_s=WAIT_S,
    )
    assert zk_store.bookie_service_info(BOOKIE) == service_info()


@zookeeper_only
def test_a_second_session_cannot_steal_a_live_registration(
    zookeeper_server: str, zk_store: ZooKeeperMetadataStore
) -> None:
    zk_store.register_bookie(BOOKIE, False, service_info())
    other = ZooKeeperMetadataStore(zk_store.uri, zkTimeout=1000)
    try:
        with pytest.raises(errors.MetaStoreException, match="another live"):
            other.register_bookie(BOOKIE, False, service_info())
        zk_store.close()  # the first bookie goes away: now it may register
        other.register_bookie(BOOKIE, False, service_info())
        assert other.writable_bookies() == {BOOKIE}
    finally:
        other.close()


@zookeeper_only
def test_unreachable_zookeeper_fails_fast_with_one_clear_line() -> None:
    with socket.socket() as sock:  # a loopback port with nothing listening
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    started = time.monotonic()
    with pytest.raises(errors.ZKException) as raised:
        open_metadata_store(f"zk+hierarchical://127.0.0.1:{port}/ledgers", zkTimeout=1000)
    assert time.monotonic() - started < 5
    message = str(raised.value)
    assert "\n" not in message and f"127.0.0.1:{port}" in message


@zookeeper_only
def test_a_layout_mismatch_is_refused(
    zookeeper_server: str, zk_store: ZooKeeperMetadataStore
) -> None:
    uri = zk_store.uri.replace("zk+hierarchical", "zk+longhierarchical")
    with pytest.raises(errors.MetaStoreException, match="does not match"):
        ZooKeeperMetadataStore(uri)
    follower = ZooKeeperMetadataStore(zk_store.uri.replace("zk+hierarchical", "zk+null"))
    follower.close()


@zookeeper_only
def test_uri_with_several_servers_and_semicolons(zookeeper_server: str, zk_root: str) -> None:
    uri = f"zk+hierarchical://{zookeeper_server};{zookeeper_server}{zk_root}"
    with open_metadata_store(uri) as store:
        assert store.init_new_cluster() is True
