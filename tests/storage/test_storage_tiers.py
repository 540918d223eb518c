"""Tiered ledger directories: the ``tieredStorage*`` keys, the allocator and reviewer keys, and
a two-tier storage under a write load larger than its top tier (quotas make the tiers small).

Owns where new entry logs go; demotion of old logs, GC and compaction are not here.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.bookies import local_bookie

from pybkx.admin.bookie_metrics import bookie_metrics
from pybkx.bookie.storage import open_ledger_storage
from pybkx.config import ConfigError, ServerConfig
from pybkx.config.tiers import byte_size

KIB = 1 << 10
MIB = 1 << 20


@given(n=st.integers(0, 1 << 20), unit=st.sampled_from(["", "K", "M", "G", "KB", "mb", "g"]))
def test_sizes_read_as_alluxio_writes_them(n: int, unit: str) -> None:
    factor = {"": 1, "K": KIB, "M": MIB, "G": 1 << 30}[unit[:1].upper()]
    assert byte_size(f"{n}{unit}") == n * factor


def test_tiers_take_the_place_of_ledger_directories(tmp_path: Path) -> None:
    config = ServerConfig.of(
        ledgerDirectories=str(tmp_path / "ignored"),
        tieredStorageLevels=2,
        tieredStorageLevel0Alias="SSD",
        tieredStorageLevel0Dirs=f"{tmp_path / 's1'},{tmp_path / 's2'},{tmp_path / 's3'}",
        tieredStorageLevel0DirsQuota="64M,32M",
        tieredStorageLevel1Dirs=str(tmp_path / "h1"),
        entryLogAllocatorClass="alluxio.worker.block.allocator.GreedyAllocator",
    )
    assert config.ledger_directories == tuple(str(tmp_path / d) for d in ("s1", "s2", "s3", "h1"))
    assert config.ledger_dir_tiers == [0, 0, 0, 1]
    # The last quota applies to the directories after it (as Alluxio).
    assert config.ledger_dir_quotas == [64 * MIB, 32 * MIB, 32 * MIB, None]
    assert [t.alias for t in config.tiers] == ["SSD", "level1"]
    assert config.entry_log_allocator_class == "GreedyAllocator"
    assert any("replaced by the directories" in note for note in config.notes())
    defaults = ServerConfig.of()
    assert defaults.tiers == () and defaults.ledger_dir_tiers == [0]
    assert defaults.entry_log_allocator_class == "MaxFreeAllocator"
    assert defaults.entry_log_reviewer_class == "ProbabilisticBufferReviewer"


@pytest.mark.parametrize(
    "keys",
    [
        {"tieredStorageLevels": 2, "tieredStorageLevel0Dirs": "/a"},  # level 1 has no dirs
        {
            "tieredStorageLevels": 1,
            "tieredStorageLevel0Dirs": "/a",
            "tieredStorageLevel1Dirs": "/b",
        },
        {
            "tieredStorageLevels": 1,
            "tieredStorageLevel0Dirs": "/a",
            "tieredStorageLevel0DirsQuota": "1M,2M",
        },
        {
            "tieredStorageLevels": 2,
            "tieredStorageLevel0Dirs": "/a",
            "tieredStorageLevel1Dirs": "/a",
        },
        {"tieredStorageLevels": 5},
        {"tieredStorageLevel0DirsQuota": "lots"},
        {"entryLogAllocatorClass": "LRUAllocator"},
        {"entryLogReviewerClass": "Nope"},
    ],
)
def test_bad_tier_settings_are_refused(keys: dict[str, object]) -> None:
    with pytest.raises(ConfigError):
        ServerConfig.of(**keys)


def dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in (path / "current").iterdir() if f.is_file())


@pytest.mark.parametrize(
    "allocator", ["MaxFreeAllocator", "GreedyAllocator", "RoundRobinAllocator"]
)
def test_a_write_load_larger_than_the_top_tier_overflows_to_the_next(
    tmp_path: Path, allocator: str
) -> None:
    quota = 2 * MIB
    log_size = 256 * KIB
    storage = open_ledger_storage(
        journalDirectories=str(tmp_path / "journal"),
        indexDirectories=str(tmp_path / "index"),
        tieredStorageLevels=2,
        tieredStorageLevel0Alias="SSD",
        tieredStorageLevel0Dirs=f"{tmp_path / 'ssd1'},{tmp_path / 'ssd2'}",
        tieredStorageLevel0DirsQuota=f"{quota}",
        tieredStorageLevel1Alias="HDD",
        tieredStorageLevel1Dirs=str(tmp_path / "hdd"),
        entryLogAllocatorClass=allocator,
        entryLogReviewerClass="AcceptingReviewer",
        logSizeLimit=log_size,
        journalPreAllocSizeMB=0,
        flushInterval=0,
    )
    entry = bytes(range(256)) * 64  # 16 KiB
    count = 12 * MIB // len(entry)  # three times the top tier
    try:
        for e in range(count):
            storage.add_entry(1, e, entry[:-1] + bytes([e % 256]), b"k")
        for e in range(0, count, 7):
            assert storage.read_entry(1, e) == entry[:-1] + bytes([e % 256])
        usage = storage.directory_usage()
        ssd = [row for row in usage if row.kind == "ledger"][:2]
        assert all(row.total_bytes == quota for row in ssd)
    finally:
        storage.close()
    for d in ("ssd1", "ssd2"):
        # A log goes to the top tier only while the whole of it fits in the quota (the seal's
        # ledgers map may pass it by a few bytes).
        assert 0 < dir_bytes(tmp_path / d) <= quota + 4 * KIB, d
    assert dir_bytes(tmp_path / "hdd") >= 12 * MIB - 2 * quota - 4 * KIB
    reopened = open_ledger_storage(
        journalDirectories=str(tmp_path / "journal"),
        indexDirectories=str(tmp_path / "index"),
        tieredStorageLevels=2,
        tieredStorageLevel0Dirs=f"{tmp_path / 'ssd1'},{tmp_path / 'ssd2'}",
        tieredStorageLevel0DirsQuota=f"{quota}",
        tieredStorageLevel1Dirs=str(tmp_path / "hdd"),
        logSizeLimit=log_size,
        journalPreAllocSizeMB=0,
        flushInterval=0,
    )
    try:
        assert all(reopened.read_entry(1, e) == entry[:-1] + bytes([e % 256]) for e in range(count))
    finally:
        reopened.close()


@pytest.mark.integration
def test_a_quota_directorys_usage_gauge_counts_against_its_quota(tmp_path: Path) -> None:
    ssd = tmp_path / "ssd"
    bookie = local_bookie(
        tmp_path,
        tieredStorageLevels="2",
        tieredStorageLevel0Dirs=str(ssd),
        tieredStorageLevel0DirsQuota=str(4 * MIB),
        tieredStorageLevel1Dirs=str(tmp_path / "hdd"),
    )
    bookie.start()
    try:
        (ssd / "current" / "filler").write_bytes(b"\0" * MIB)  # a quarter of the quota
        gauges = {metric.name: metric.value for metric in bookie_metrics(bookie)}
        ssd_gauge = next(v for k, v in gauges.items() if k.endswith("ssd_usage"))
        # The file system's usage is whatever this machine's disk holds; the quota's is 25 %.
        assert 24 <= ssd_gauge <= 27
    finally:
        bookie.stop()
