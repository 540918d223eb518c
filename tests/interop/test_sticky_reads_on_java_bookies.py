"""Sticky reads (``stickyReadSEnabled``) by pybkx's client on real Apache BookKeeper bookies: one
Java bookie serves every read of a handle, counted by the bookies' own Prometheus metrics; once
it is quarantined, and once it is stopped, another serves them. Owns the client's behaviour on
Java bookies; the same on pybkx bookies is tests/client/test_bookie_health.py."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import harness
import pytest
from prometheus_client.parser import text_string_to_metric_families

import pybkx

pytestmark = pytest.mark.interop

#: A Java bookie's count of the single-entry reads it served.
_READS = "bookkeeper_server_READ_ENTRY_REQUEST_count"


class JavaBookie:
    """A Java bookie with BookKeeper's Prometheus provider and admin HTTP server."""

    def __init__(self, classpath: str, zookeeper: str, workdir: Path) -> None:
        workdir.mkdir(parents=True)
        port = harness.free_port()
        self.process, self.address = harness.start_java_bookie(
            classpath,
            zookeeper,
            workdir,
            "statsProviderClass=org.apache.bookkeeper.stats.prometheus.PrometheusMetricsProvider",
            "httpServerEnabled=true",
            f"httpServerPort={port}",
            "httpServerClass=org.apache.bookkeeper.http.vertx.VertxHttpServer",
        )
        self.url = f"http://127.0.0.1:{port}"
        harness.wait_until(self.process, self._answers, "serving its metrics")

    def _answers(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/heartbeat", timeout=2):
                return True
        except (urllib.error.URLError, OSError):
            return False

    def reads(self) -> float:
        with urllib.request.urlopen(f"{self.url}/metrics", timeout=30) as response:
            text = response.read().decode()
        return sum(
            s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
            if s.name == _READS
        )


@pytest.fixture
def java_bookies(java_classpath: str, zookeeper: str, tmp_path: Path) -> Iterator[list[JavaBookie]]:
    """Two Java bookies of their own (under the interop ZooKeeper's ``/ledgers``)."""
    started: list[JavaBookie] = []
    try:
        for name in ("a", "b"):
            started.append(JavaBookie(java_classpath, zookeeper, tmp_path / name))
        yield started
    finally:
        for bookie in started:
            bookie.process.stop()


def test_sticky_reads_stay_on_one_java_bookie_and_move_when_it_fails(
    java_bookies: list[JavaBookie], zookeeper: str
) -> None:
    ours = {b.address: b for b in java_bookies}
    uri = f"zk+hierarchical://{zookeeper}/ledgers"
    with pybkx.BookKeeper(
        uri, stickyReadSEnabled=True, zkTimeout=10_000, readEntryTimeoutSec=5
    ) as bk:
        # Other bookies of the session may share /ledgers: quarantined, they are left out of
        # the ensemble while these two can form it.
        for bookie in bk.store.writable_bookies() - set(ours):
            bk.health.quarantine(bookie)
        lh = bk.create_ledger(2, 2, 2, password=b"pw")
        assert set(lh.metadata.last_ensemble) == set(ours)
        lh.append_many([b"java %d" % e for e in range(100)])
        lh.close()
        rh = bk.open_ledger(lh.ledger_id, b"pw")

        def served(read: object) -> dict[str, float]:
            before = {a: b.reads() for a, b in ours.items()}
            read()  # type: ignore[operator]
            return {a: ours[a].reads() - before[a] for a in ours}

        first = served(lambda: [rh.read(e, e) for e in range(100)])
        sticky = [a for a, n in first.items() if n > 0]
        assert len(sticky) == 1 and first[sticky[0]] >= 100, first

        bk.health.quarantine(sticky[0])
        moved = served(lambda: [rh.read(e, e) for e in range(100)])
        other = [a for a, n in moved.items() if n > 0]
        assert other != sticky and len(other) == 1 and moved[other[0]] >= 100, moved

        # Stopped, the bookie reads go to is left again (for the quarantined one: no other).
        ours[other[0]].process.stop()
        before = ours[sticky[0]].reads()
        got = [rh.read(e, e)[0].payload for e in range(100)]
        assert got == [b"java %d" % e for e in range(100)]
        assert ours[sticky[0]].reads() - before >= 100
