"""A bookie's space account (``GET /api/v1/bookie/space``, ``pybkx_space_bytes``, ``pybkx top``'s
reclaimable column) follows a ledger through its life: live while its metadata names the bookie,
orphaned once the metadata is gone, deleted-not-yet-collected once GC dropped it from the index
while its entry log still holds it, and compactable then (the log is mostly dead).

Owns the space account; the orphan checks behind it are recovery/test_orphans.py's."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from admin_helpers import http
from support.wait import wait_until

import pybkx
from pybkx.admin.top import Target, View, scrape
from pybkx.bookie.space import compaction_progress
from pybkx.tools.sandbox import Sandbox

pytestmark = pytest.mark.integration

PASSWORD = b"space"
ENTRY = b"s" * 10_240
#: GC never runs by itself here; the write cache reaches the entry log within a flush.
CONF = {"gcWaitTime": 3_600_000, "flushInterval": 200}


@pytest.fixture
def bookie(tmp_path: Path) -> Iterator[Sandbox]:
    with Sandbox(1, directory=tmp_path / "cluster", conf=CONF) as sandbox:
        yield sandbox


def space(url: str, orphans: bool = True) -> dict[str, Any]:
    query = "" if orphans else "?orphans=false"
    answer: dict[str, Any] = http("GET", f"{url}/api/v1/bookie/space{query}").json()
    (tier,) = answer["tiers"]
    assert tier["tier"] == "default"
    tier["orphansChecked"] = answer["orphansChecked"]
    tier["compaction"] = answer["compaction"]
    return tier


def written(bk: pybkx.BookKeeper, entries: int) -> int:
    with bk.create_ledger(1, 1, 1, password=PASSWORD) as handle:
        handle.append_many([ENTRY] * entries)
        return handle.ledger_id


def test_a_ledger_is_live_then_orphaned_then_deleted_and_compactable(bookie: Sandbox) -> None:
    url = bookie.admin_urls[0]
    with pybkx.BookKeeper(bookie.metadata_uri) as bk:
        written(bk, 100)
        doomed = written(bk, 50)
        first = wait_until(
            lambda: space(url),
            "both ledgers flushed to the entry log",
            accept=lambda s: s["liveBytes"] >= 150 * len(ENTRY),
        )
        assert first["orphansChecked"] and first["ledgers"] == 2
        assert first["compaction"] is None  # none runs
        assert first["deletedBytes"] == first["orphanedBytes"] == first["compactableBytes"] == 0
        live = first["liveBytes"]

        bk.delete_ledger(doomed)
    # Metadata gone, still stored: orphaned (a third of the bytes: 50 of 150 equal entries).
    orphaned = space(url)
    assert orphaned["liveBytes"] + orphaned["orphanedBytes"] == live
    assert orphaned["orphanedBytes"] * 3 == live
    # Without the metadata look it is counted live.
    assert space(url, orphans=False)["liveBytes"] == live

    http("PUT", f"{url}/api/v1/bookie/orphans")  # GC drops it from the index now
    collected = space(url)
    doomed_bytes = orphaned["orphanedBytes"]
    assert collected["ledgers"] == 1 and collected["orphanedBytes"] == 0
    assert collected["deletedBytes"] == doomed_bytes
    assert collected["liveBytes"] == live - doomed_bytes
    # Two thirds live is at most majorCompactionThreshold (0.8): its dead third is compactable.
    assert collected["compactableBytes"] == doomed_bytes

    metrics = scrape(url)
    assert metrics.value("pybkx_space_bytes", tier="default", state="deleted") == doomed_bytes
    assert metrics.value("pybkx_space_bytes", state="live") == live - doomed_bytes
    view = View(lambda: [Target(bookie.bookie_addresses[0], url)])
    try:
        (row,) = view.refresh()
    finally:
        view.close()
    assert row.reclaimable_mib == pytest.approx(doomed_bytes / (1 << 20))


def test_compaction_progress_gives_an_eta_at_the_rate_so_far() -> None:
    assert compaction_progress({}) is None  # none runs
    gauges = {
        "pybkx_compaction_started_ms": 1_000_000,
        "pybkx_compaction_logs_planned": 8,
        "pybkx_compaction_logs_done": 2,
        "pybkx_compaction_bytes_planned": 800,
        "pybkx_compaction_bytes_done": 200,
    }
    progress = compaction_progress(gauges, now_ms=1_010_000)
    assert progress == {
        "logsPlanned": 8,
        "logsDone": 2,
        "bytesPlanned": 800,
        "bytesDone": 200,
        "runningSeconds": 10.0,
        "etaSeconds": 30.0,  # 600 bytes left at 20 bytes/s
    }
    just_started = compaction_progress({**gauges, "pybkx_compaction_bytes_done": 0}, 1_000_500)
    assert just_started is not None and just_started["etaSeconds"] is None
