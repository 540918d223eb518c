"""The ledger client against real bookie processes (a sandbox) on each metadata backend.

Owns end-to-end client behaviour: quorum writes, ensemble change under kill -9, fencing and
recovery, compare-and-set races, corrupt copies; it never inspects bookie files to decide.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pybkx import errors
from pybkx._core import FLAG_RECOVERY_ADD, BookieClient, DigestManager, master_key
from pybkx.client import BookKeeper, LedgerHandle
from pybkx.config import ClientConfig
from pybkx.meta import LedgerState
from pybkx.tools.sandbox import Sandbox

pytestmark = pytest.mark.integration

FAST = {"addEntryTimeoutSec": 2, "readEntryTimeoutSec": 2, "bookieReplacementTimeoutMs": 15_000}


def payload(ledger_id: int, entry_id: int) -> bytes:
    rng = random.Random(ledger_id * 1_000_003 + entry_id)
    return f"{ledger_id}:{entry_id}:".encode() + rng.randbytes(rng.randint(0, 300))


@pytest.fixture(params=["embedded", pytest.param("zookeeper")])
def cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Sandbox]:
    """Four bookie processes sharing one metadata store of the parametrized backend."""
    zk_uri = None
    if request.param == "zookeeper":
        server = request.getfixturevalue("zookeeper_server")
        zk_uri = f"zk+hierarchical://{server}/c{random.getrandbits(40)}/ledgers"
    with Sandbox(4, zk_uri=zk_uri, directory=tmp_path / "sandbox", conf={"zkTimeout": 2000}) as sb:
        yield sb


def client(cluster: Sandbox) -> BookKeeper:
    return BookKeeper(cluster.metadata_uri, zkTimeout=2000, **FAST)


def index_of(cluster: Sandbox, bookie_id: str) -> int:
    return cluster.bookie_addresses.index(bookie_id)


def test_ledger_round_trip_and_reopen(cluster: Sandbox) -> None:
    with client(cluster) as bk:
        lh = bk.create_ledger(3, 2, 2, password=b"pw")
        assert lh.append(payload(lh.ledger_id, 0)) == 0
        last = lh.append_many([payload(lh.ledger_id, e) for e in range(1, 500)])
        assert last == 499 == lh.last_add_confirmed
        entries = lh.read(0, 499)
        assert [e.payload for e in entries] == [payload(lh.ledger_id, e) for e in range(500)]
        lh.close()
        assert lh.is_closed
        with pytest.raises(errors.LedgerClosedException):
            lh.append(b"after close")
        assert lh.ledger_id in bk.list_ledgers()

    with client(cluster) as bk2:
        rh = bk2.open_ledger(lh.ledger_id, b"pw")
        assert rh.metadata.state == LedgerState.CLOSED
        assert rh.last_add_confirmed == 499
        assert rh.length == sum(len(payload(lh.ledger_id, e)) for e in range(500))
        got = rh.batch_read(0, 1000, 1 << 30)
        assert [e.payload for e in got] == [payload(lh.ledger_id, e) for e in range(500)]
        with pytest.raises(errors.UnauthorizedAccessException):
            bk2.open_ledger(lh.ledger_id, b"wrong")
        bk2.delete_ledger(lh.ledger_id)
        assert lh.ledger_id not in bk2.list_ledgers()


def write_while_killing(
    cluster: Sandbox, lh: LedgerHandle, entries: int, restart: bool
) -> set[int]:
    """Append ``entries`` entries pipelined; a third of the way in, with appends in flight,
    SIGKILL a bookie of the ensemble (optionally restarting it half a second later) and keep
    appending. Returns the acknowledged ids."""
    victim = index_of(cluster, random.choice(lh.metadata.last_ensemble))
    # Not a wait: the victim stays down half a second, with appends in flight.
    restarter = threading.Thread(target=lambda: (time.sleep(0.5), cluster.restart_bookie(victim)))
    futures = []
    for e in range(entries):
        futures.append(lh.append_async(payload(lh.ledger_id, e)))
        if e == entries // 3:
            cluster.kill_bookie(victim)
            if restart:
                restarter.start()
    acked: set[int] = set()
    for e, future in enumerate(futures):
        assert future.result(60) == e
        acked.add(e)
    if restart:
        restarter.join()
    elif cluster.bookie_addresses[victim] in lh.metadata.last_ensemble:
        # Everything in flight was acknowledged before the bookie died: a few more appends
        # reach it (every slot is in two of three write sets) and must cause the change.
        for e in range(entries, entries + 3):
            assert lh.append(payload(lh.ledger_id, e)) == e
            acked.add(e)
    return acked


@pytest.mark.parametrize("restart", [False, True], ids=["spare-bookie", "bookie-restarts"])
def test_kill_9_of_a_bookie_during_writes_loses_no_acknowledged_entry(
    cluster: Sandbox, restart: bool
) -> None:
    for _round in range(2):
        with client(cluster) as writer_bk:
            lh = writer_bk.create_ledger(3, 2, 2)
            first_ensemble = lh.metadata.last_ensemble
            acked = write_while_killing(cluster, lh, 3000, restart)
            last_ensemble = lh.metadata.last_ensemble
            # The writer never closes: a second client recovers the ledger.
            with client(cluster) as reader_bk:
                rh = reader_bk.open_ledger(lh.ledger_id)
                assert rh.is_closed
                assert rh.last_add_confirmed >= max(acked)
                got = rh.read(0, rh.last_add_confirmed)
                assert {e.entry_id for e in got} >= acked
                for e in got:
                    assert e.payload == payload(lh.ledger_id, e.entry_id)
            if not restart:
                # A dead bookie must have been replaced (by a new segment, or in place when it
                # failed before any entry was confirmed: BookKeeper's LAC + 1 rule). A restarted
                # one may be reconnected to before any write failed.
                assert set(last_ensemble) != set(first_ensemble)
        for i in range(cluster.bookies):
            if not cluster.is_alive(i):
                cluster.restart_bookie(i)


def test_recovery_fences_the_old_writer(cluster: Sandbox) -> None:
    with client(cluster) as bk1, client(cluster) as bk2:
        lh = bk1.create_ledger(3, 3, 2)
        last = lh.append_many([payload(lh.ledger_id, e) for e in range(100)])
        rh = bk2.open_ledger(lh.ledger_id)
        assert rh.is_closed and rh.last_add_confirmed == last
        with pytest.raises(errors.LedgerFencedException):
            lh.append(b"too late")
        with pytest.raises(errors.LedgerFencedException):
            lh.close()
        # Opening without recovery reads what is there and changes nothing.
        again = bk2.open_ledger(lh.ledger_id, recovery=False)
        assert again.last_add_confirmed == last


def test_two_clients_recovering_at_once_agree(cluster: Sandbox) -> None:
    with client(cluster) as writer:
        lh = writer.create_ledger(3, 2, 2)
        lh.append_many([payload(lh.ledger_id, e) for e in range(300)])
        results: list[object] = []

        def recover() -> None:
            with client(cluster) as bk:
                try:
                    rh = bk.open_ledger(lh.ledger_id)
                    results.append((rh.last_add_confirmed, rh.length))
                except errors.BKException as exc:  # pragma: no cover - reported below
                    results.append(exc)

        threads = [threading.Thread(target=recover) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert results[0] == results[1] == (299, lh.length), results
        final = writer.store.read_ledger_metadata(lh.ledger_id)
        assert final.value.state == LedgerState.CLOSED
        assert final.value.last_entry_id == 299


def test_metadata_compare_and_set_race_has_one_winner(cluster: Sandbox) -> None:
    with client(cluster) as bk1, client(cluster) as bk2:
        lh = bk1.create_ledger(3, 2, 2)
        v1 = bk1.store.read_ledger_metadata(lh.ledger_id)
        v2 = bk2.store.read_ledger_metadata(lh.ledger_id)
        bk1.store.write_ledger_metadata(
            lh.ledger_id, v1.value.replace(custom_metadata={"who": b"1"}), v1.version
        )
        with pytest.raises(errors.MetadataVersionException):
            bk2.store.write_ledger_metadata(
                lh.ledger_id, v2.value.replace(custom_metadata={"who": b"2"}), v2.version
            )
        # The handle's own later writes (close) re-read and apply on top of the winner.
        lh.append(b"x")
        lh.close()
        final = bk2.store.read_ledger_metadata(lh.ledger_id).value
        assert final.custom_metadata == {"who": b"1"} and final.last_entry_id == 0


@pytest.mark.parametrize("ensemble", [(2, 2, 2), (3, 2, 2)], ids=["batched", "striped"])
def test_a_corrupt_copy_on_one_bookie_is_skipped(
    cluster: Sandbox, ensemble: tuple[int, int, int]
) -> None:
    with client(cluster) as bk:
        lh = bk.create_ledger(*ensemble, password=b"pw")
        lh.append_many([payload(lh.ledger_id, e) for e in range(20)])
        # Overwrite entry 5 on the first bookie of its write set with a copy whose digest is
        # wrong (a recovery add replaces the stored entry; bookies do not check digests).
        md = lh.metadata
        bookie = bk.address_of(md.ensemble_for(5)[md.write_set(5)[0]])
        good = DigestManager(lh.ledger_id, b"pw", md.digest_type.name).package(
            5, 4, 0, payload(lh.ledger_id, 5)
        )
        corrupt = good[:-1] + bytes([good[-1] ^ 0xFF])
        raw = BookieClient(ClientConfig())
        raw.add(bookie, lh.ledger_id, 5, master_key(b"pw"), corrupt, FLAG_RECOVERY_ADD).result()
        raw.close()
        got = lh.read(0, 19)
        assert [e.payload for e in got] == [payload(lh.ledger_id, e) for e in range(20)]
        batched = lh.batch_read(0, 20, 1 << 30)
        assert [e.payload for e in batched] == [payload(lh.ledger_id, e) for e in range(20)]


def test_not_enough_bookies_and_bad_quorums_are_refused(cluster: Sandbox) -> None:
    with client(cluster) as bk:
        with pytest.raises(errors.NotEnoughBookiesException):
            bk.create_ledger(5, 2, 2)
        with pytest.raises(errors.IncorrectParameterException):
            bk.create_ledger(2, 3, 2)
        with pytest.raises(errors.IncorrectParameterException):
            bk.create_ledger(-1, 2, 2)
        with pytest.raises(ValueError):
            bk.create_ledger(3, 2, 2, digest_type="SHA256")


def test_readers_learn_the_lac_from_the_bookies_while_the_writer_goes_on(
    cluster: Sandbox,
) -> None:
    with client(cluster) as writer, client(cluster) as reader:
        lh = writer.create_ledger(3, 2, 2)
        # Entries carry the writer's LAC as it was when they were sent. A pipelined burst's
        # entries carry whatever had been acknowledged when each left (-1 if the burst beat
        # every answer), never their own id or a later one; the next append carries the
        # burst's last id.
        lh.append_many([payload(lh.ledger_id, e) for e in range(100)])
        rh = reader.open_ledger(lh.ledger_id, recovery=False)
        assert -1 <= rh.last_add_confirmed <= 98 and not rh.is_closed
        assert rh.last_add_confirmed <= rh.read_last_add_confirmed() <= 98
        lh.append(payload(lh.ledger_id, 100))
        assert rh.read_last_add_confirmed() == 99
        assert [e.entry_id for e in rh.read(90, 99)] == list(range(90, 100))
        with pytest.raises(errors.ReadException):
            rh.read(0, 100)
        assert rh.read_unconfirmed(100, 100)[0].payload == payload(lh.ledger_id, 100)
        lh.append(payload(lh.ledger_id, 101))
        assert rh.read_last_add_confirmed() == 100
        lh.close()


def test_appends_block_beyond_the_throttle_until_bookies_answer(cluster: Sandbox) -> None:
    import os
    import signal

    with BookKeeper(cluster.metadata_uri, zkTimeout=2000, throttle=5) as bk:
        lh = bk.create_ledger(3, 3, 3)
        paused = [cluster.pid(index_of(cluster, b)) for b in lh.metadata.last_ensemble]
        for pid in paused:
            assert pid is not None
            os.kill(pid, signal.SIGSTOP)
        try:
            futures = [lh.append_async(payload(lh.ledger_id, e)) for e in range(5)]
            sixth: list[object] = []
            blocked = threading.Thread(
                target=lambda: sixth.append(lh.append_async(payload(lh.ledger_id, 5)))
            )
            blocked.start()
            blocked.join(0.5)
            assert blocked.is_alive() and not sixth, "the sixth append should wait for room"
        finally:
            for pid in paused:
                if pid is not None:
                    os.kill(pid, signal.SIGCONT)
        blocked.join(10)
        assert [f.result(10) for f in futures] == list(range(5))
        assert sixth and sixth[0].result(10) == 5  # type: ignore[attr-defined]
        lh.close()


def test_an_ensemble_change_whose_answer_was_lost_is_not_made_twice(tmp_path: Path) -> None:
    """ZooKeeper's client retries a write whose connection dropped; when the first try had
    taken effect the retry finds its own version and the change is tried again on top of
    itself. It must keep the bookie it chose, not replace that one too."""
    with (
        Sandbox(5, directory=tmp_path / "sandbox") as sb,
        client(sb) as bk,
    ):
        lh = bk.create_ledger(3, 2, 2)
        lh.append_many([payload(lh.ledger_id, e) for e in range(10)])
        before = lh.metadata.last_ensemble
        sb.kill_bookie(index_of(sb, bk.address_of(before[1])))
        written: list[tuple[str, ...]] = []
        write = bk.store.write_ledger_metadata

        def answer_lost(ledger_id, metadata, expected_version):  # type: ignore[no-untyped-def]
            result = write(ledger_id, metadata, expected_version)
            if not written:
                written.append(metadata.last_ensemble)
                raise errors.MetadataVersionException("the answer was lost; the retry lost")
            return result

        bk.store.write_ledger_metadata = answer_lost  # type: ignore[method-assign]
        lh.append_many([payload(lh.ledger_id, e) for e in range(10, 20)])
        after = bk.store.read_ledger_metadata(lh.ledger_id).value
        assert written, "no ensemble change was written"
        assert after.last_ensemble == written[0], (before, written[0], after.last_ensemble)
        assert [i for i in range(3) if after.last_ensemble[i] != before[i]] == [1]
        assert lh.metadata.last_ensemble == written[0]
        lh.append(payload(lh.ledger_id, 20))
        lh.close()
        got = [e.payload for e in lh.read(0, 20)]
        assert got == [payload(lh.ledger_id, e) for e in range(21)]
