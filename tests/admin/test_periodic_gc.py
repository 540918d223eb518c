"""A bookie collects deleted ledgers by itself every ``gcWaitTime``, as BookKeeper's garbage
collector thread does: a client's delete only removes the metadata, and the bookies free the
ledger at their next pass without an operator asking, while ledgers still in use stay whole.

Owns the periodic pass; the operator's ``PUT /api/v1/bookie/gc`` is test_admin_api.py's."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from admin_helpers import http
from support.wait import wait_until

import pybkx
from pybkx.tools.sandbox import Sandbox

pytestmark = pytest.mark.integration

PASSWORD = b"secret"
GC_WAIT_MS = 300
#: Passes run every GC_WAIT_MS: a few seconds is many of them.
WAIT_S = 30.0


@pytest.fixture
def gc_cluster(tmp_path: Path) -> Iterator[Sandbox]:
    sandbox = Sandbox(
        2,
        directory=tmp_path / "cluster",
        conf={"gcWaitTime": GC_WAIT_MS, "flushInterval": 200},
    )
    sandbox.start()
    try:
        yield sandbox
    finally:
        sandbox.stop()


def gc_details(url: str) -> dict[str, object]:
    details: dict[str, object] = http("GET", f"{url}/api/v1/bookie/gc_details").json()[0]
    return details


def test_deleted_ledgers_leave_every_bookie_at_the_next_pass(gc_cluster: Sandbox) -> None:
    with pybkx.BookKeeper(gc_cluster.metadata_uri) as bk:
        doomed = bk.create_ledger(2, 2, 2, password=PASSWORD)
        doomed.append_many([b"doomed"] * 20)
        doomed.close()
        kept = bk.create_ledger(2, 2, 2, password=PASSWORD)
        kept.append_many([b"kept-%d" % i for i in range(20)])
        bk.delete_ledger(doomed.ledger_id)

        for url in gc_cluster.admin_urls:
            # A few passes after the deletion: the kept ledger is still there.
            details = wait_until(
                lambda url=url: gc_details(url),
                "a pass deleted the ledger, and a few passes ran",
                timeout_s=WAIT_S,
                interval_s=0.1,
                accept=lambda details: (
                    int(str(details["deletedLedgerCounter"])) >= 1
                    and int(str(details["gcRuns"])) >= 3
                ),
            )
            assert details["deletedLedgerCounter"] == 1, details
            assert details["majorCompactionCounter"] == 0  # periodic passes force nothing

        # The open ledger, written before and after passes, is whole on both bookies.
        kept.append_many([b"kept-%d" % i for i in range(20, 30)])
        kept.close()
        reader = bk.open_ledger(kept.ledger_id, PASSWORD)
        assert [e.payload for e in reader.read(0, 29)] == [b"kept-%d" % i for i in range(30)]
