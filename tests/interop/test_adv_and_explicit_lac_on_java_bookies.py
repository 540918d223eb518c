"""pybkx's adv ledgers and explicit LAC on three real Apache BookKeeper 4.17.3 bookies: adds out
of order read back whole; an idle writer's WRITE_LAC reaches a reader's READ_LAC, and a
long-poll reader wakes on it (the Java bookie raises the LAC it reports with the explicit LAC,
which is what pybkx's bookie copies); without the flush the reader sees one entry less.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import harness
import pytest

from pybkx.client import BookKeeper

pytestmark = pytest.mark.interop

BOOKIES = 3
N = 20
V3 = {"useV2WireProtocol": False, "zkTimeout": 5000}


@pytest.fixture(scope="module")
def java_cluster(
    java_classpath: str, zookeeper: str, interop_dir: Path, processes: list[harness.Process]
) -> Iterator[str]:
    """Three Java bookies under a fresh ZooKeeper root; the metadata service URI."""
    try:
        started, uri = harness.start_java_cluster(
            java_classpath, zookeeper, interop_dir, "adv-lac", BOOKIES
        )
    except harness.HarnessError as exc:
        pytest.fail(str(exc), pytrace=False)
    processes.extend(started)
    yield uri
    for process in started:
        process.stop()


@pytest.mark.parametrize("v2", [True, False], ids=["V2", "V3"])
def test_adv_ledgers_on_java_bookies(java_cluster: str, v2: bool) -> None:
    with BookKeeper(java_cluster, zkTimeout=5000, useV2WireProtocol=v2) as bk:
        lh = bk.create_ledger_adv(3, 2, 2, password=b"adv")
        order = [5, 0, 3, 1, 4, 2, *range(6, N)]
        futures = [lh.append_async(i, b"adv %d" % i) for i in order]
        assert [f.result(30) for f in futures] == order
        lh.close()
        rh = bk.open_ledger(lh.ledger_id, b"adv")
        assert rh.last_add_confirmed == N - 1
        assert [e.payload for e in rh] == [b"adv %d" % i for i in range(N)]


def test_explicit_lac_through_java_bookies(java_cluster: str) -> None:
    with (
        BookKeeper(java_cluster, explicitLacInterval=100, **V3) as writer_bk,
        BookKeeper(java_cluster, **V3) as reader_bk,
    ):
        lh = writer_bk.create_ledger(3, 3, 2, password=b"lac")
        assert lh.append_many([b"e%d" % i for i in range(N)]) == N - 1
        rh = reader_bk.open_ledger(lh.ledger_id, b"lac", recovery=False)
        # The timeout bounds the test; the explicit LAC's arrival is what ends the wait.
        assert rh.wait_for_last_add_confirmed(N - 2, timeout=30) == N - 1
        assert rh.read_explicit_lac() == N - 1
        assert rh.read(N - 1, N - 1)[0].payload == b"e%d" % (N - 1)
        lh.close()


def test_without_explicit_lac_a_reader_sees_one_entry_less(java_cluster: str) -> None:
    with (
        BookKeeper(java_cluster, **V3) as writer_bk,
        BookKeeper(java_cluster, **V3) as reader_bk,
    ):
        lh = writer_bk.create_ledger(3, 3, 3, password=b"lac")
        for i in range(N):  # one at a time: entry i carries LAC i - 1
            assert lh.append(b"x") == i
        rh = reader_bk.open_ledger(lh.ledger_id, b"lac", recovery=False)
        assert rh.read_explicit_lac() == N - 2
        assert rh.read_last_add_confirmed() == N - 2
        lh.close()
