"""pybkx's ledger client on three real Apache BookKeeper 4.17 bookies: striped ledgers (E=3,
Qw=2) written, then read back with ``batch_read`` and iteration.

A Java bookie does not know pybkx's strided batch read: it ignores the flag and the stride after
the BP-62 fields and answers consecutive entries from the start, flags 0. The client must notice
that and read runs of the entries each bookie holds consecutively, with every entry back exactly
and in order; the bookies also answer a strided request byte for byte as a plain one.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import harness
import pytest

from pybkx._core import BookieClient, DigestManager
from pybkx.client import BookKeeper
from pybkx.config import ClientConfig

pytestmark = pytest.mark.interop

BOOKIES = 3


@pytest.fixture(scope="module")
def java_cluster(
    java_classpath: str, zookeeper: str, interop_dir: Path, processes: list[harness.Process]
) -> Iterator[str]:
    """Three Java bookies under a fresh ZooKeeper root; the metadata service URI."""
    try:
        started, uri = harness.start_java_cluster(
            java_classpath, zookeeper, interop_dir, "striped", BOOKIES
        )
    except harness.HarnessError as exc:
        pytest.fail(str(exc), pytrace=False)
    processes.extend(started)
    yield uri
    for process in started:
        process.stop()


def payload(entry_id: int) -> bytes:
    return b"java striped %d " % entry_id * (1 + entry_id % 9)


def test_striped_ledgers_read_back_in_runs_from_java_bookies(java_cluster: str) -> None:
    count = 2000
    want = [payload(e) for e in range(count)]
    with BookKeeper(java_cluster, zkTimeout=5000) as bk:
        lh = bk.create_ledger(3, 2, 2, password=b"java")
        lh.append_many(want)
        lh.close()
        rh = bk.open_ledger(lh.ledger_id, password=b"java")
        assert [e.payload for e in rh.batch_read(0, count, 1 << 30)] == want
        got = rh.batch_read(101, 500, 1 << 30)
        assert [e.entry_id for e in got] == list(range(101, 601))
        assert [e.payload for e in rh] == want
        assert [e.payload for e in rh.entries(7, 1500, batch_entries=97)] == want[7:1501]


def test_a_java_bookie_answers_a_strided_request_with_consecutive_entries(
    java_cluster: str,
) -> None:
    with BookKeeper(java_cluster, zkTimeout=5000) as bk:
        lh = bk.create_ledger(3, 3, 3)
        lh.append_many([payload(e) for e in range(20)])
        lh.close()
        bookie = bk.address_of(lh.metadata.last_ensemble[0])
    digest = DigestManager(lh.ledger_id, b"", "CRC32C")
    raw = BookieClient(ClientConfig())
    try:
        strided = raw.batch_read(bookie, lh.ledger_id, 4, 5, 1 << 20, stride=3).result(30)
        plain = raw.batch_read(bookie, lh.ledger_id, 4, 5, 1 << 20).result(30)
    finally:
        raw.close()
    assert strided == plain
    assert [digest.verify(e).entry_id for e in strided] == [4, 5, 6, 7, 8]
