"""The disk checker and read-only mode: BookKeeper's thresholds as pure rules (property tests),
their configuration, and a bookie whose ledger directory is a small tmpfs that fills up: it
turns read-only in the metadata store, still serves reads, and turns writable again by itself
once space returns.

Owns the disk checker's rules and the bookie's mode moves; never writes a registration itself.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.bookies import (
    REQUEST_TIMEOUT_S,
    add_entries,
    bookie_client,
    disk_bookie,
    payload,
    read_payload,
    wait_for_disk_checks,
)
from support.disks import fill, small_tmpfs
from support.wait import wait_until

from pybkx import errors
from pybkx.bookie import BookieError
from pybkx.bookie.disks import DirUsage, DiskThresholds, evaluate
from pybkx.config import ConfigError, ServerConfig
from pybkx.meta import open_metadata_store

MIB = 1 << 20
TOTAL = 1000


def ledger(used: int, total: int = TOTAL) -> DirUsage:
    return DirUsage("ledger", f"/l{used}", total, total - used)


usages = st.lists(st.integers(0, TOTAL), min_size=1, max_size=5)
limits_st = st.tuples(st.integers(1, 999), st.integers(0, 999), st.integers(0, 999)).map(
    lambda t: DiskThresholds(
        threshold=t[0] / TOTAL,
        warn=min(t[1], t[0]) / TOTAL,
        lwm=min(t[2], t[0]) / TOTAL,
        min_usable_for_high_priority=100,
    )
)


# --- the rules ------------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(used=usages, limits=limits_st)
def test_a_writable_directory_is_full_exactly_past_the_threshold(
    used: list[int], limits: DiskThresholds
) -> None:
    dirs = [ledger(u) for u in used]
    verdict = evaluate(dirs, [False] * len(dirs), limits)
    assert verdict.full == tuple(d.usage > limits.threshold for d in dirs)
    assert verdict.writable == (not all(verdict.full))
    if not verdict.writable:
        assert verdict.high_priority_writes == any(d.free_bytes >= 100 for d in dirs)


@settings(max_examples=300, deadline=None)
@given(used=usages, limits=limits_st)
def test_the_garbage_collector_hears_of_full_and_almost_full_ledger_directories(
    used: list[int], limits: DiskThresholds
) -> None:
    dirs = [ledger(u) for u in used]
    verdict = evaluate(dirs, [False] * len(dirs), limits)
    if any(verdict.full):
        assert verdict.ledger_pressure == 2
    elif any(d.usage > limits.warn for d in dirs):
        assert verdict.ledger_pressure == 1
    else:
        assert verdict.ledger_pressure == 0
    # A journal directory's usage is not the garbage collector's business.
    journal = DirUsage("journal", "/j", TOTAL, 0)
    assert evaluate([ledger(0), journal], [], limits).ledger_pressure == 0


@settings(max_examples=300, deadline=None)
@given(used=usages, was=st.lists(st.booleans(), min_size=5, max_size=5), limits=limits_st)
def test_full_directories_come_back_only_by_bookkeepers_rules(
    used: list[int], was: list[bool], limits: DiskThresholds
) -> None:
    dirs = [ledger(u) for u in used]
    before = was[: len(dirs)]
    verdict = evaluate(dirs, before, limits)
    overall = 1 - sum(d.free_bytes for d in dirs) / sum(d.total_bytes for d in dirs)
    still_writable = any(
        not b and d.usage <= limits.threshold for b, d in zip(before, dirs, strict=True)
    )
    for b, d, now in zip(before, dirs, verdict.full, strict=True):
        if d.usage > limits.threshold:
            assert now  # past the threshold: full whatever it was
        elif not b:
            assert not now  # writable and under it: stays writable
        else:  # full and under the threshold: back only with company or below the low mark
            assert now == (not (still_writable or overall < limits.lwm))


@settings(max_examples=200, deadline=None)
@given(used=st.integers(0, TOTAL), was=st.booleans(), limits=limits_st)
def test_a_journal_directory_has_hysteresis_between_threshold_and_low_mark(
    used: int, was: bool, limits: DiskThresholds
) -> None:
    dirs = [ledger(0), DirUsage("journal", "/j", TOTAL, TOTAL - used)]
    verdict = evaluate(dirs, [False, was], limits)
    usage = dirs[1].usage
    expected = usage >= limits.lwm if was else usage > limits.threshold
    assert verdict.other_full == (expected,)
    assert verdict.writable == (not expected)


def test_any_disk_full_turns_read_only_on_the_first_full_directory() -> None:
    limits = DiskThresholds(threshold=0.9, warn=0.8, lwm=0.9, any_disk_full=True)
    verdict = evaluate([ledger(950), ledger(10)], [False, False], limits)
    assert verdict.full == (True, False) and not verdict.writable
    assert evaluate([ledger(850), ledger(10)], [True, False], limits).writable


def test_disk_keys_are_checked_as_bookkeeper_does(tmp_path: Path) -> None:
    base = {"journalDirectories": str(tmp_path / "j"), "ledgerDirectories": str(tmp_path / "l")}
    config = ServerConfig.of(**base)
    assert (config.disk_usage_threshold, config.disk_usage_warn_threshold) == (0.95, 0.90)
    assert config.disk_usage_lwm == 0.95 and config.disk_check_interval_ms == 10_000
    assert config.high_priority_min_free_bytes == config.log_size_limit_bytes
    for bad in (
        {"diskUsageThreshold": "1.0"},
        {"diskUsageThreshold": "0.8", "diskUsageWarnThreshold": "0.9"},
        {"diskUsageThreshold": "0.8", "diskUsageLwmThreshold": "0.85"},
    ):
        with pytest.raises(ConfigError):
            ServerConfig.of(**base, **bad)


# --- a bookie on a small file system ---------------------------------------------------------


@pytest.fixture(params=["embedded", "zookeeper"])
def cluster_uri(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "zookeeper":
        server = request.getfixturevalue("zookeeper_server")
        return f"zk+hierarchical://{server}/t{os.urandom(6).hex()}/ledgers"
    return f"embedded://{tmp_path / 'metadata'}"


@pytest.mark.integration
def test_a_full_disk_turns_the_bookie_read_only_and_it_comes_back_by_itself(
    tmp_path: Path, cluster_uri: str
) -> None:
    with open_metadata_store(cluster_uri) as store:
        store.init_new_cluster()
    with small_tmpfs(tmp_path / "disk", 8) as disk:
        bookie = disk_bookie(tmp_path, cluster_uri, disk)
        bookie.start()
        try:
            address = f"127.0.0.1:{bookie.port}"
            with open_metadata_store(cluster_uri) as store, bookie_client() as client:
                assert bookie.bookie_id in store.writable_bookies()
                for f in add_entries(client, address, range(0, 10)):
                    f.result(REQUEST_TIMEOUT_S)

                filler = fill(disk, 1 * MIB)  # ~88 % used
                wait_until(lambda: bookie.read_only, "read-only on a full disk", timeout_s=10)
                wait_until(
                    lambda: (
                        bookie.bookie_id in store.readonly_bookies()
                        and bookie.bookie_id not in store.writable_bookies()
                    ),
                    "registered read-only",
                    timeout_s=10,
                )
                with pytest.raises(errors.WriteOnReadOnlyBookieException):
                    add_entries(client, address, range(10, 11))[0].result(REQUEST_TIMEOUT_S)
                for e in range(10):  # reads go on
                    assert read_payload(client, address, e) == payload(e)
                assert bookie.storage.directory_usage()[0].full is True  # marked full
                assert bookie.available_for_high_priority_writes  # 1 MiB free > 64 KiB

                filler.unlink()  # space returns
                wait_until(lambda: not bookie.read_only, "writable again", timeout_s=10)
                wait_until(
                    lambda: (
                        bookie.bookie_id in store.writable_bookies()
                        and bookie.bookie_id not in store.readonly_bookies()
                    ),
                    "registered writable again",
                    timeout_s=10,
                )
                for f in add_entries(client, address, range(10, 20)):
                    f.result(REQUEST_TIMEOUT_S)
                assert read_payload(client, address, 19) == payload(19)
        finally:
            bookie.stop()


@pytest.mark.integration
def test_an_operators_read_only_mode_outlives_the_disk_checker(tmp_path: Path) -> None:
    with small_tmpfs(tmp_path / "disk", 8) as disk:
        bookie = disk_bookie(tmp_path, None, disk)
        bookie.start()
        try:
            bookie.set_read_only(True)
            wait_for_disk_checks(bookie, 3)  # disks fine
            assert bookie.read_only
            bookie.set_read_only(False)
            assert not bookie.read_only
        finally:
            bookie.stop()


@pytest.mark.integration
def test_a_full_disk_stops_the_bookie_when_read_only_mode_is_disabled(tmp_path: Path) -> None:
    with small_tmpfs(tmp_path / "disk", 8) as disk:
        bookie = disk_bookie(tmp_path, None, disk, readOnlyModeEnabled="false")
        bookie.start()
        filler = fill(disk, 1 * MIB)
        try:
            wait_until(lambda: not bookie.running, "the bookie stops by itself", timeout_s=10)
            assert "readOnlyModeEnabled=false" in bookie.halt_reason
        finally:
            bookie.stop()
        # Starting on full disks fails the same way.
        with pytest.raises(BookieError, match="readOnlyModeEnabled=false"):
            disk_bookie(tmp_path, None, disk, readOnlyModeEnabled="false").start()
        filler.unlink()
