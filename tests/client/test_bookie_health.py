"""Bookie health with real processes: quarantine of a bookie whose adds time out (left out
of new ensembles while spares exist, used when none do, released after the quarantine time,
with its metric and log lines) and sticky reads (one bookie serves a handle's reads, counted by
the bookies' own ``/metrics``; another once it is quarantined or stopped); the check's
threshold and ratio against a listener that never answers. Owns the client's side only.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families
from support.wait import wait_until

from pybkx import errors
from pybkx._core import BookieClient
from pybkx.client import BookKeeper
from pybkx.client.bookie_health import BookieHealth
from pybkx.client.metrics import ensure_registered
from pybkx.config import ClientConfig
from pybkx.tools.sandbox import Sandbox

pytestmark = pytest.mark.integration

#: Metrics of a bookie that count the read requests it served.
_READ_REQUESTS = (
    "bookkeeper_server_READ_ENTRY_REQUEST_count",
    "bookkeeper_server_BATCH_READ_ENTRY_REQUEST_count",
)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Sandbox]:
    """Four bookie processes on the embedded store. A long session timeout keeps a paused
    (SIGSTOPped) bookie registered, so only quarantine can keep it out of ensembles."""
    with Sandbox(4, directory=tmp_path / "sandbox", conf={"zkTimeout": 60_000}) as sb:
        yield sb


def read_requests(cluster: Sandbox, index: int) -> float:
    """Read requests bookie ``index`` served so far, from its own ``/metrics``."""
    with urllib.request.urlopen(f"{cluster.admin_urls[index]}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name in _READ_REQUESTS
    )


def client_metric(name: str) -> float:
    return REGISTRY.get_sample_value(name) or 0.0


def test_sticky_reads_go_to_one_bookie_and_to_another_once_it_stops(cluster: Sandbox) -> None:
    with BookKeeper(cluster.metadata_uri, addEntryTimeoutSec=2, readEntryTimeoutSec=2) as bk:
        lh = bk.create_ledger(3, 3, 2, password=b"pw")
        lh.append_many([b"entry %d" % e for e in range(300)])
        lh.close()
        ensemble = list(lh.metadata.last_ensemble)
    indexes = [cluster.bookie_addresses.index(b) for b in ensemble]

    def served_by(read: object) -> dict[int, float]:
        """Read requests each bookie of the ensemble served while ``read()`` ran."""
        before = {i: read_requests(cluster, i) for i in indexes}
        read()  # type: ignore[operator]
        return {i: read_requests(cluster, i) - before[i] for i in indexes}

    # Without sticky reads, entries go to the first bookie of their write set: all three.
    with BookKeeper(cluster.metadata_uri) as bk:
        rh = bk.open_ledger(lh.ledger_id, b"pw")
        spread = served_by(lambda: [rh.read(e, e) for e in range(30)])
    assert all(n > 0 for n in spread.values()), spread

    with BookKeeper(cluster.metadata_uri, stickyReadSEnabled=True, readEntryTimeoutSec=2) as bk:
        rh = bk.open_ledger(lh.ledger_id, b"pw")
        sticky = served_by(lambda: [rh.read(e, e + 9) for e in range(0, 300, 10)])
        busy = [i for i, n in sticky.items() if n > 0]
        assert len(busy) == 1, sticky
        assert sticky[busy[0]] >= 30
        # Range reads and batch reads too.
        again = served_by(lambda: (rh.read(0, 299), rh.batch_read(0, 300, 1 << 20)))
        assert [i for i, n in again.items() if n > 0] == busy, again

        # Quarantined, it is left for another bookie, which then serves every read.
        bk.health.quarantine(cluster.bookie_addresses[busy[0]])
        moved = served_by(lambda: [rh.read(e, e + 9) for e in range(0, 300, 10)])
        second = [i for i, n in moved.items() if n > 0]
        assert len(second) == 1 and second != busy, moved

        # Stopped, it is left for the one bookie not quarantined: every read goes on there.
        cluster.kill_bookie(second[0])
        others = [i for i in indexes if i != second[0]]
        before = {i: read_requests(cluster, i) for i in others}
        got = [rh.read(e, e)[0].payload for e in range(300)]
        assert got == [b"entry %d" % e for e in range(300)]
        after = {i: read_requests(cluster, i) - before[i] for i in others}
        third = [i for i, n in after.items() if n > 0]
        assert len(third) == 1 and third != busy, after
        assert after[third[0]] >= 300


def test_a_bookie_whose_adds_time_out_is_quarantined_then_released(
    cluster: Sandbox, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="pybkx.client.bookie_health")
    quarantines = client_metric("bookkeeper_client_BOOKIE_QUARANTINE_total")
    with BookKeeper(
        cluster.metadata_uri,
        bookieHealthCheckEnabled=True,
        bookieHealthCheckIntervalSeconds=1,
        bookieErrorThresholdPerInterval=1,
        bookieQuarantineTimeSeconds=10,
        addEntryTimeoutSec=1,
        bookieReplacementTimeoutMs=0,
    ) as bk:
        # Every bookie holds this ledger; one pauses, so its adds time out (Qa=3 is still met
        # by the others and no spare exists: the change is delayed, the writes go on).
        lh = bk.create_ledger(4, 4, 3)
        paused = cluster.bookie_addresses[2]
        pid = cluster.pid(2)
        assert pid is not None
        os.kill(pid, signal.SIGSTOP)
        try:
            lh.append_many([b"x"] * 5)
            wait_until(lambda: paused in bk.health.quarantined(), "the paused bookie quarantined")
        finally:
            os.kill(pid, signal.SIGCONT)  # healthy and registered again: only quarantined
        assert client_metric("bookkeeper_client_BOOKIE_QUARANTINE_total") == quarantines + 1
        assert client_metric("bookkeeper_client_QUARANTINED_BOOKIES") == 1
        assert any(
            r.levelno == logging.WARNING
            and paused in r.getMessage()
            and "quarantined" in r.getMessage()
            for r in caplog.records
        )
        assert paused in bk.registered_bookies

        # While it is quarantined, new ensembles leave it out as long as three others exist...
        for _ in range(10):
            created = bk.create_ledger(3, 3, 2)
            assert paused not in created.metadata.last_ensemble
            created.close()
        # ... and use it when no other will do.
        everyone = bk.create_ledger(4, 4, 3)
        assert paused in everyone.metadata.last_ensemble
        assert everyone.append(b"on every bookie") == 0
        everyone.close()

        # A replacement leaves it out too: of the two bookies outside this ensemble, the
        # quarantined one is passed over.
        pair = bk.create_ledger(2, 2, 2)
        assert paused not in pair.metadata.last_ensemble
        failed = cluster.bookie_addresses.index(pair.metadata.last_ensemble[0])
        cluster.kill_bookie(failed)
        assert pair.append(b"after the kill") == 0
        assert pair.metadata.last_ensemble[0] not in (paused, cluster.bookie_addresses[failed])
        pair.close()
        cluster.restart_bookie(failed)

        wait_until(lambda: not bk.health.quarantined(), "the quarantine to end", timeout_s=30)
        assert client_metric("bookkeeper_client_QUARANTINED_BOOKIES") == 0
        assert any(
            "no longer quarantined" in r.getMessage() and paused in r.getMessage()
            for r in caplog.records
        )

        def chosen_again() -> bool:
            created = bk.create_ledger(3, 3, 2)
            created.close()
            return paused in created.metadata.last_ensemble

        # With E=3 of 4 each new ensemble holds it with probability 3/4 once released.
        wait_until(chosen_again, "a new ensemble with the released bookie", interval_s=0)
        lh.close()
    # close() stopped the health check's thread.
    assert not any(t.name == "pybkx-bookie-health" for t in threading.enumerate())


def test_the_check_quarantines_by_threshold_and_ratio_and_resets_the_counts() -> None:
    """Against a listener that never answers (each read times out), with the check run by
    hand: under the threshold nothing happens, at it the bookie is quarantined (by its address
    when it is no registered bookie); with ratio 0 it is counted as skipped instead."""
    ensure_registered()
    with socket.create_server(("127.0.0.1", 0)) as silent:
        address = f"127.0.0.1:{silent.getsockname()[1]}"
        for ratio, quarantined in ((1.0, [address]), (0.0, [])):
            config = ClientConfig.of(
                readEntryTimeoutSec=0.2,
                bookieErrorThresholdPerInterval=2,
                bookieQuarantineRatio=ratio,
            )
            bookies = BookieClient(config)
            health = BookieHealth(config, bookies, lambda b: b, frozenset)
            try:
                skipped = client_metric("bookkeeper_client_BOOKIE_QUARANTINE_SKIP_total")
                timeouts = [bookies.read(address, 1, e) for e in range(2)]
                for future in timeouts:
                    with pytest.raises(errors.TimeoutException):
                        future.result(timeout=10)
                assert health.check() == quarantined
                assert health.quarantined() == frozenset(quarantined)
                assert client_metric("bookkeeper_client_BOOKIE_QUARANTINE_SKIP_total") == (
                    skipped + (1 if ratio == 0.0 else 0)
                )
                assert health.check() == []  # the counts were reset
            finally:
                health.close()
                bookies.close()
