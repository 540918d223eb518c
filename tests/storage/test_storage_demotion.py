"""Entry logs moving between tiers: a two-tier storage under a write load larger than its top
tier keeps that tier under its quota by demoting its coldest logs (quotas make the tiers small),
the watermark and annotator keys, and ``kill -9`` at random moments of moves.

Owns demotion and promotion of entry logs; where new logs go is test_storage_tiers.py's.
"""

from __future__ import annotations

import os
import random
import time
from pathlib import Path
from typing import Any

import pytest
from storage_helpers import StorageChild, parse_acks, payload

from pybkx._core import LedgerStorage
from pybkx.bookie.storage import open_ledger_storage
from pybkx.config import ConfigError, ServerConfig

KIB = 1 << 10
MIB = 1 << 20
ROUNDS = int(os.environ.get("PYBKX_CRASH_ROUNDS", "20"))
SEED = int(os.environ.get("PYBKX_CRASH_SEED", str(random.SystemRandom().randrange(1 << 30))))


def tiered(tmp_path: Path, quota: int, log_size: int, **more: Any) -> dict[str, Any]:
    return {
        "journalDirectories": str(tmp_path / "journal"),
        "indexDirectories": str(tmp_path / "index"),
        "tieredStorageLevels": 2,
        "tieredStorageLevel0Alias": "SSD",
        "tieredStorageLevel0Dirs": str(tmp_path / "ssd"),
        "tieredStorageLevel0DirsQuota": str(quota),
        "tieredStorageLevel1Alias": "HDD",
        "tieredStorageLevel1Dirs": str(tmp_path / "hdd"),
        "entryLogReviewerClass": "AcceptingReviewer",
        "logSizeLimit": log_size,
        "journalPreAllocSizeMB": 0,
        "flushInterval": 0,
        "dbStorage_writeCacheMaxSizeMb": 4,
        **more,
    }


def dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in (path / "current").iterdir() if f.is_file())


def logs_of(storage: LedgerStorage, ledger_id: int) -> set[int]:
    return {log for log, ledgers in storage.entry_log_ledgers().items() if ledger_id in ledgers}


def entry(ledger_id: int, entry_id: int) -> bytes:
    return payload(ledger_id, entry_id, min_size=16 * KIB - 64, max_size=16 * KIB)


def test_demotion_keeps_the_top_tier_under_its_quota_with_the_hot_logs_on_top(
    tmp_path: Path,
) -> None:
    """Twenty ledgers of 512 KiB through a 4 MiB top tier: the top tier stays within its
    quota, the first ledgers end up in the lower tier, the last one and a ledger read again
    and again stay on top, and every entry reads back, also after a reopen. The watermarks
    leave room for the logs written between two passes, so no new log has to start in the
    lower tier."""
    quota = 4 * MIB
    keys = tiered(
        tmp_path,
        quota,
        256 * KIB,
        tieredStorageLevel0HighWatermark=0.75,
        tieredStorageLevel0LowWatermark=0.5,
        # Read-ahead off: every read of the hot ledger reads its log (a read served from a
        # cache does not touch a log).
        dbStorage_readAheadCacheBatchSize=1,
    )
    ssd, hdd = tmp_path / "ssd", tmp_path / "hdd"
    hot = 7
    storage = open_ledger_storage(**keys)
    try:
        for ledger_id in range(1, 21):
            storage.add_entries(ledger_id, [(e, entry(ledger_id, e)) for e in range(32)], b"k")
            storage.checkpoint()
            if ledger_id >= hot:
                for e in range(32):
                    assert storage.read_entry(hot, e) == entry(hot, e)
            storage.move_entry_logs()
            # A log goes on top only while the whole of it fits (its seal may pass by a little).
            assert dir_bytes(ssd) <= quota + 4 * KIB
        homes = storage.entry_log_dirs()
        top = {log for log, home in homes.items() if Path(home).parent == ssd}
        assert logs_of(storage, hot) <= top, "the ledger read again and again stayed on top"
        assert logs_of(storage, 20) <= top, "the newest ledger is on top"
        cold = set().union(*(logs_of(storage, ledger_id) for ledger_id in range(1, 4)))
        assert cold and not cold & top, "the first ledgers went down"
        assert dir_bytes(hdd) >= 5 * MIB
        for ledger_id in range(1, 21):
            assert all(storage.read_entry(ledger_id, e) == entry(ledger_id, e) for e in range(32))
    finally:
        storage.close()
    reopened = open_ledger_storage(**keys)
    try:
        assert reopened.entry_log_dirs() == homes
        for ledger_id in range(1, 21):
            assert all(reopened.read_entry(ledger_id, e) == entry(ledger_id, e) for e in range(32))
    finally:
        reopened.close()


def test_a_demoted_ledger_read_again_comes_back_up(tmp_path: Path) -> None:
    """With ``tieredStoragePromoteOnRead`` the logs of a demoted ledger that is read again move
    back to the top tier once it has room below its low watermark; the moves are counted."""
    keys = tiered(
        tmp_path,
        4 * MIB,
        256 * KIB,
        tieredStorageLevel0HighWatermark=0.75,
        tieredStorageLevel0LowWatermark=0.5,
        tieredStoragePromoteOnRead=True,
        dbStorage_readAheadCacheBatchSize=1,
    )
    ssd = tmp_path / "ssd"
    storage = open_ledger_storage(**keys)
    try:
        for ledger_id in range(1, 21):
            storage.add_entries(ledger_id, [(e, entry(ledger_id, e)) for e in range(32)], b"k")
            storage.checkpoint()
            storage.move_entry_logs()

        def on_top(ledger_id: int) -> set[int]:
            homes = storage.entry_log_dirs()
            return {log for log in logs_of(storage, ledger_id) if Path(homes[log]).parent == ssd}

        assert not on_top(2)
        for ledger_id in range(10, 21):  # room on top
            storage.delete_ledger(ledger_id)
        storage.checkpoint()
        storage.gc_entry_logs()
        assert all(storage.read_entry(2, e) == entry(2, e) for e in range(32))
        # A pass now (the mover's own may have promoted some already: one pass at a time).
        storage.move_entry_logs()
        assert on_top(2) == logs_of(storage, 2)
        assert all(storage.read_entry(2, e) == entry(2, e) for e in range(32))
        counters = {m.name: m.value for m in storage.metrics()}
        assert counters["pybkx_tier_promoted_entry_logs"] >= len(logs_of(storage, 2))
        assert counters["pybkx_tier_demoted_entry_logs"] > 0
        assert counters["pybkx_tier_moved_bytes"] > 0
    finally:
        storage.close()


@pytest.mark.parametrize(
    "keys",
    [
        {"tieredStorageLevel0HighWatermark": 0.5, "tieredStorageLevel0LowWatermark": 0.6},
        {"tieredStorageLevel1LowWatermark": 1.5},
        {"entryLogAnnotatorClass": "FIFOAnnotator"},
        {"lrfuStepFactor": 2},
        {"lrfuAttenuationFactor": 1.5},
        {"tieredStorageMoveRateByBytes": -1},
    ],
)
def test_bad_demotion_settings_are_refused(keys: dict[str, object]) -> None:
    with pytest.raises(ConfigError):
        ServerConfig.of(**keys)


def test_demotion_settings_reach_the_storage(tmp_path: Path) -> None:
    config = ServerConfig.of(
        entryLogAnnotatorClass="alluxio.worker.block.annotator.LRFUAnnotator",
        lrfuStepFactor=0.5,
        tieredStorageLevel1HighWatermark=0.9,
        tieredStorageLevel1LowWatermark=0.5,
        tieredStoragePromoteOnRead=True,
    )
    assert config.entry_log_annotator_class == "LRFUAnnotator"
    assert config.tier_high_watermarks == [0.95, 0.9, 0.95, 0.95]
    assert config.tier_low_watermarks == [0.7, 0.5, 0.7, 0.7]
    assert config.tiered_storage_move_rate_by_bytes == 32 * MIB
    storage = open_ledger_storage(
        **tiered(tmp_path, 1 * MIB, 64 * KIB),
        entryLogAnnotatorClass="LRFUAnnotator",
        tieredStoragePromoteOnRead=True,
    )
    try:
        moved = storage.move_entry_logs()
        assert (moved.demoted, moved.promoted, moved.bytes) == (0, 0, 0)
    finally:
        storage.close()


def test_kill_9_during_moves_between_tiers_loses_no_entry(tmp_path: Path) -> None:
    """A child writes ledgers and reads earlier ones while entry logs move between a 1 MiB top
    tier and the tier below (paced, so kills land inside copies), and is SIGKILLed at random
    moments; after each kill every acknowledged entry reads back, every log is in exactly one
    directory and no half-moved copy is left."""
    config = tiered(
        tmp_path / "bookie",
        1 * MIB,
        128 * KIB,
        flushInterval=100,
        dbStorage_writeCacheMaxSizeMb=1,
        tieredStorageMoveRateByBytes=4 * MIB,
        tieredStoragePromoteOnRead=True,
        tieredStorageLevel0HighWatermark=0.8,
        tieredStorageLevel0LowWatermark=0.5,
    )
    rng = random.Random(SEED + 12)
    acked: dict[int, set[int]] = {}
    moved_before_kill = 0
    interrupted = 0  # kills that landed inside a move
    for round_no in range(max(ROUNDS, 20)):
        spec = {
            "config": config,
            "mode": "tiered",
            "seed": SEED + 1200 + round_no,
            "first_ledger": 1 + round_no * 10_000,
        }
        child = StorageChild(spec, tmp_path / f"tiered-{round_no}.stderr")
        try:
            child.wait_for("READY")
            time.sleep(rng.uniform(0.1, 0.6))  # not a wait: the kill comes at a random moment
            lines = child.kill()
        finally:
            child.close()
        for ledger_id, ids in parse_acks(lines).items():
            acked.setdefault(ledger_id, set()).update(ids)
        interrupted += sum(
            1
            for tier in ("ssd", "hdd")
            for f in (tmp_path / "bookie" / tier / "current").iterdir()
            if f.name.endswith((".moving", ".old"))
        )
        storage = open_ledger_storage(**config)
        try:
            homes = storage.entry_log_dirs()
            moved_before_kill += sum(
                1 for home in homes.values() if Path(home).parent == tmp_path / "bookie" / "hdd"
            )
            problems = [
                f"ledger {ledger_id} entry {e}"
                for ledger_id, ids in acked.items()
                for e in sorted(ids)
                if storage.read_entry(ledger_id, e) != payload(ledger_id, e, max_size=8192)
            ]
        finally:
            storage.close()
        assert not problems, f"seed {SEED}, round {round_no}: {problems[:5]}"
        left = [
            f.name
            for tier in ("ssd", "hdd")
            for f in (tmp_path / "bookie" / tier / "current").iterdir()
            if f.name.endswith((".moving", ".old"))
        ]
        assert not left, f"round {round_no}: {left}"
        names = [
            f.name
            for tier in ("ssd", "hdd")
            for f in (tmp_path / "bookie" / tier / "current").iterdir()
            if f.name.endswith(".log")
        ]
        assert len(names) == len(set(names)), f"round {round_no}: a log in two tiers"
    print(f"kills inside a move: {interrupted} of {max(ROUNDS, 20)}")
    assert moved_before_kill > 0, "no log ever reached the lower tier"
    assert sum(len(ids) for ids in acked.values()) > 0
