"""A ``pybkx bookie`` process with two tiers: under a write load larger than its top tier, the
bookie's own mover keeps that tier near its quota by demoting the coldest entry logs, every
entry reads back over the wire while and after logs move, and after ``kill -9`` and a restart.

Owns demotion seen from outside a running bookie; the storage-level rules (watermarks,
annotators, crash points of a move) are test_storage_demotion.py's.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from support.bookies import (
    PASSWORD,
    REQUEST_TIMEOUT_S,
    ROOMY,
    bookie_client,
    needs_server,
)
from support.bookies import start_bookie as start_bookie
from support.ports import free_port
from support.wait import wait_until

import pybkx._core as core

pytestmark = pytest.mark.integration

KIB = 1 << 10
MIB = 1 << 20
QUOTA = 4 * MIB
LEDGERS = range(1, 21)
ENTRIES = range(32)
#: How long the mover (a pass every half second) may take to bring the top tier down.
SETTLE_TIMEOUT_S = 30.0


def entry_payload(ledger_id: int, entry_id: int) -> bytes:
    stamp = f"ledger {ledger_id} entry {entry_id} ".encode()
    return (stamp * (16 * KIB // len(stamp) + 1))[: 16 * KIB - 128]


def write_tiered_conf(root: Path, port: int) -> Path:
    conf = root / "bk_server.conf"
    keys = {
        "bookiePort": port,
        "listeningInterface": "127.0.0.1",
        "allowLoopback": "true",
        "journalDirectories": root / "journal",
        "journalPreAllocSizeMB": 0,
        "tieredStorageLevels": 2,
        "tieredStorageLevel0Alias": "SSD",
        "tieredStorageLevel0Dirs": root / "ssd",
        "tieredStorageLevel0DirsQuota": QUOTA,
        "tieredStorageLevel0HighWatermark": 0.75,
        "tieredStorageLevel0LowWatermark": 0.5,
        "tieredStorageLevel1Alias": "HDD",
        "tieredStorageLevel1Dirs": root / "hdd",
        "entryLogReviewerClass": "AcceptingReviewer",
        "logSizeLimit": 256 * KIB,
        "flushInterval": 100,
        "dbStorage_writeCacheMaxSizeMb": 4,
        **ROOMY,
    }
    conf.write_text("".join(f"{key}={value}\n" for key, value in keys.items()))
    return conf


def log_bytes(tier: Path) -> int:
    current = tier / "current"
    return sum(f.stat().st_size for f in current.glob("*.log")) if current.exists() else 0


def write_ledger(client: Any, address: str, ledger_id: int) -> None:
    digest = core.DigestManager(ledger_id, PASSWORD, "CRC32C")
    key = core.master_key(PASSWORD)
    length = 0
    futures = []
    for entry_id in ENTRIES:
        data = entry_payload(ledger_id, entry_id)
        length += len(data)
        packed = digest.package(entry_id, entry_id - 1, length, data)
        futures.append(client.add(address, ledger_id, entry_id, key, packed))
    for future in futures:
        assert future.result(REQUEST_TIMEOUT_S) is None


def read_back(client: Any, address: str, ledger_id: int, entry_id: int) -> bytes:
    digest = core.DigestManager(ledger_id, PASSWORD, "CRC32C")
    packed = client.read(address, ledger_id, entry_id).result(REQUEST_TIMEOUT_S)
    verified = digest.verify(packed, entry_id)
    assert verified.entry_id == entry_id
    return verified.payload


def assert_every_entry_reads_back(client: Any, address: str) -> None:
    for ledger_id in LEDGERS:
        for entry_id in ENTRIES:
            assert read_back(client, address, ledger_id, entry_id) == entry_payload(
                ledger_id, entry_id
            ), f"ledger {ledger_id} entry {entry_id}"


@dataclass(frozen=True)
class TierBytes:
    """The entry-log bytes of each tier; true once the demotion settled."""

    top: int
    lower: int

    def __bool__(self) -> bool:
        return self.top <= QUOTA and self.lower >= 4 * MIB


def wait_for_demotion(ssd: Path, hdd: Path) -> None:
    """Until the top tier is within its quota and the lower tier holds the demoted logs."""
    wait_until(
        lambda: TierBytes(log_bytes(ssd), log_bytes(hdd)),
        f"the top tier within its quota ({QUOTA} B), the lower one holding the demoted logs",
        timeout_s=SETTLE_TIMEOUT_S,
        interval_s=0.1,
    )


@needs_server
def test_a_two_tier_bookie_demotes_cold_logs_and_serves_every_entry_across_kill_9(
    tmp_path: Path, start_bookie: Any
) -> None:
    """Twenty ledgers of about 512 KiB through a bookie whose top tier holds 4 MiB: reads of
    the first ledgers run between writes (moves going on meanwhile never fail a read), the top
    tier ends within its quota with the rest demoted, and everything reads back after
    ``kill -9`` and a restart, which finds each log where its last move put it."""
    port = free_port()
    conf = write_tiered_conf(tmp_path, port)
    address = f"127.0.0.1:{port}"
    ssd, hdd = tmp_path / "ssd", tmp_path / "hdd"
    first = start_bookie("--conf", str(conf))
    first.wait_listening(port)
    with bookie_client() as client:
        for ledger_id in LEDGERS:
            write_ledger(client, address, ledger_id)
            # Reads of older ledgers while the mover may be copying their logs.
            for entry_id in ENTRIES[::8]:
                assert read_back(client, address, 1, entry_id) == entry_payload(1, entry_id)
        wait_for_demotion(ssd, hdd)
        assert_every_entry_reads_back(client, address)
    first.stop(signal.SIGKILL)
    assert log_bytes(hdd) >= 4 * MIB

    second = start_bookie("--conf", str(conf))
    second.wait_listening(port)
    with bookie_client() as client:
        assert_every_entry_reads_back(client, address)
    assert log_bytes(ssd) <= QUOTA + 256 * KIB
    assert second.stop() == 0, second.stderr()
