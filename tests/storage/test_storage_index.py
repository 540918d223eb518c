"""The on-disk index: migration from the in-memory format, merges, and kill -9 during merges.

Owns the storage-format upgrade path (a bookie written before the on-disk index opens without
losing an entry) and crash tests aimed at index segment merges; the general kill -9 rounds are in
test_storage_durability.py.
"""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest

from pybkx._core import LedgerStorage
from pybkx.bookie import open_ledger_storage
from pybkx.errors import NoSuchLedgerExistsException

FIXTURE = Path(__file__).parent / "fixtures" / "storage-v1.tar.gz"


def v1_payload(ledger: int, entry: int) -> bytes:
    """The payloads tests/storage/fixtures/make_storage_v1.py wrote."""
    return f"v1-ledger-{ledger}-entry-{entry}-".encode() * (1 + (ledger * 7 + entry) % 5)


def index_version(path: Path) -> int:
    return int.from_bytes(path.read_bytes()[8:12], "big")


def open_fixture(root: Path) -> LedgerStorage:
    return open_ledger_storage(
        journalDirectories=str(root / "j"),
        ledgerDirectories=str(root / "l"),
        journalPreAllocSizeMB=1,
        flushInterval=0,
        logSizeLimit=65536,
    )


def check_v1_contents(storage: LedgerStorage) -> None:
    s = storage
    assert s.list_ledgers() == [1, 2, 3]
    # Ledger 1: 300 entries checkpointed in index.log, 40 more only in the journal.
    assert s.last_entry_id(1) == 339
    for e in range(340):
        assert s.read_entry(1, e) == v1_payload(1, e)
    for e in range(300):
        if e % 3 != 1:
            assert s.read_entry(2, e) == v1_payload(2, e)
    assert s.is_fenced(3)
    assert s.read_entry(3, 299) == v1_payload(3, 299)
    assert s.get_explicit_lac(1) == b"explicit-lac-1"
    with pytest.raises(NoSuchLedgerExistsException):
        s.read_entry(4, 0)


def test_a_storage_written_before_the_on_disk_index_opens_without_losing_an_entry(
    tmp_path: Path,
) -> None:
    with tarfile.open(FIXTURE) as tar:
        tar.extractall(tmp_path, filter="data")
    index_log = tmp_path / "l" / "current" / "index.log"
    assert index_version(index_log) == 1
    with open_fixture(tmp_path) as storage:
        check_v1_contents(storage)
    assert index_version(index_log) == 2
    assert list((tmp_path / "l" / "current").glob("*.idx"))
    # Opened again in the new format only.
    with open_fixture(tmp_path) as storage:
        check_v1_contents(storage)
        storage.add_entry(1, 340, b"after the upgrade", master_key=b"key-1")
    with open_fixture(tmp_path) as storage:
        assert storage.read_entry(1, 340) == b"after the upgrade"
