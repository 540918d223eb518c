"""Behaviour of one open LedgerStorage: adds, reads, ranges, fencing, keys, LAC, config, locking.

Owns single-session semantics; must never depend on a restart (see test_storage_restart.py).
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from storage_helpers import master_key, payload
from support.storage import OpenStorage, storage_config
from support.wait import wait_until

from pybkx._core import LedgerStorage
from pybkx.bookie import open_ledger_storage
from pybkx.errors import (
    BKException,
    BookieException,
    LedgerFencedException,
    NoSuchEntryException,
    NoSuchLedgerExistsException,
    UnauthorizedAccessException,
)

LEDGER = 42
KEY = master_key(LEDGER)


def add_range(storage: LedgerStorage, ledger_id: int, entry_ids: range | list[int]) -> None:
    storage.add_entries(
        ledger_id, [(e, payload(ledger_id, e)) for e in entry_ids], master_key(ledger_id)
    )


# --- add / read ---------------------------------------------------------------------------


def test_added_entry_reads_back_byte_identical(storage: LedgerStorage) -> None:
    data = b"hello bookie \x00\xff" * 100
    storage.add_entry(LEDGER, 0, data, KEY)
    assert storage.read_entry(LEDGER, 0) == data


def test_batch_added_entries_read_back_byte_identical(storage: LedgerStorage) -> None:
    add_range(storage, LEDGER, range(50))
    for e in range(50):
        assert storage.read_entry(LEDGER, e) == payload(LEDGER, e)


def test_empty_entry_round_trips(storage: LedgerStorage) -> None:
    storage.add_entry(LEDGER, 0, b"", KEY)
    assert storage.read_entry(LEDGER, 0) == b""


def test_large_entry_round_trips(storage: LedgerStorage) -> None:
    data = bytes(range(256)) * 4096  # 1 MiB
    storage.add_entry(LEDGER, 0, data, KEY)
    assert storage.read_entry(LEDGER, 0) == data


def test_ledgers_do_not_see_each_others_entries(storage: LedgerStorage) -> None:
    add_range(storage, 1, range(3))
    add_range(storage, 2, range(5))
    assert storage.read_entry(1, 2) == payload(1, 2)
    assert storage.read_entry(2, 2) == payload(2, 2)
    with pytest.raises(NoSuchEntryException):
        storage.read_entry(1, 3)


def test_read_of_unknown_ledger_raises_no_such_ledger(storage: LedgerStorage) -> None:
    with pytest.raises(NoSuchLedgerExistsException):
        storage.read_entry(999, 0)


def test_read_of_missing_entry_raises_no_such_entry(storage: LedgerStorage) -> None:
    add_range(storage, LEDGER, [0, 1, 3])
    with pytest.raises(NoSuchEntryException):
        storage.read_entry(LEDGER, 2)
    with pytest.raises(NoSuchEntryException):
        storage.read_entry(LEDGER, 4)


def test_read_entry_minus_one_returns_highest_entry(storage: LedgerStorage) -> None:
    add_range(storage, LEDGER, [0, 7, 3])  # out of order, with gaps
    assert storage.read_entry(LEDGER, -1) == payload(LEDGER, 7)


def test_negative_ids_are_rejected_on_add(storage: LedgerStorage) -> None:
    with pytest.raises(ValueError):
        storage.add_entry(LEDGER, -1, b"x", KEY)
    with pytest.raises(ValueError):
        storage.add_entry(-5, 0, b"x", KEY)


def test_exceptions_share_the_bk_base_class() -> None:
    for exc in (
        NoSuchLedgerExistsException,
        NoSuchEntryException,
        LedgerFencedException,
        UnauthorizedAccessException,
        BookieException,
    ):
        assert issubclass(exc, BKException)


# --- read_range ---------------------------------------------------------------------------


def test_read_range_honours_max_count(storage: LedgerStorage) -> None:
    add_range(storage, LEDGER, range(20))
    got = storage.read_range(LEDGER, 5, 4, 1 << 30)
    assert got == [payload(LEDGER, e) for e in range(5, 9)]


def test_read_range_with_non_positive_max_count_is_unbounded(storage: LedgerStorage) -> None:
    add_range(storage, LEDGER, range(20))
    assert storage.read_range(LEDGER, 0, 0, 1 << 30) == [payload(LEDGER, e) for e in range(20)]
    assert storage.read_range(LEDGER, 15, -1, 1 << 30) == [
        payload(LEDGER, e) for e in range(15, 20)
    ]


def test_read_range_stops_before_exceeding_max_bytes(storage: LedgerStorage) -> None:
    sizes = [100, 200, 300, 400, 500]
    storage.add_entries(LEDGER, [(e, bytes([e]) * n) for e, n in enumerate(sizes)], KEY)
    # 100 + 200 + 300 = 600 fits, adding 400 would not.
    got = storage.read_range(LEDGER, 0, 0, 650)
    assert [len(d) for d in got] == [100, 200, 300]
    # Exactly at the limit is still allowed.
    got = storage.read_range(LEDGER, 0, 0, 600)
    assert [len(d) for d in got] == [100, 200, 300]


def test_read_range_returns_first_entry_even_if_larger_than_max_bytes(
    storage: LedgerStorage,
) -> None:
    storage.add_entries(LEDGER, [(0, b"a" * 5000), (1, b"b" * 10)], KEY)
    got = storage.read_range(LEDGER, 0, 10, 100)
    assert got == [b"a" * 5000]


def test_read_range_stops_at_first_gap(storage: LedgerStorage) -> None:
    add_range(storage, LEDGER, [0, 1, 2, 4, 5])
    got = storage.read_range(LEDGER, 0, 100, 1 << 30)
    assert got == [payload(LEDGER, e) for e in range(3)]


def test_read_range_stops_at_last_entry(storage: LedgerStorage) -> None:
    add_range(storage, LEDGER, range(3))
    assert storage.read_range(LEDGER, 1, 100, 1 << 30) == [payload(LEDGER, 1), payload(LEDGER, 2)]


def test_read_range_of_missing_first_entry_raises_no_such_entry(storage: LedgerStorage) -> None:
    add_range(storage, LEDGER, [0, 1, 3])
    with pytest.raises(NoSuchEntryException):
        storage.read_range(LEDGER, 2, 10, 1 << 30)
    with pytest.raises(NoSuchEntryException):
        storage.read_range(LEDGER, 10, 10, 1 << 30)


def test_read_range_of_unknown_ledger_raises_no_such_ledger(storage: LedgerStorage) -> None:
    with pytest.raises(NoSuchLedgerExistsException):
        storage.read_range(999, 0, 10, 1 << 30)


# --- last_entry_id ------------------------------------------------------------------------


def test_last_entry_id_is_the_highest_stored_entry(storage: LedgerStorage) -> None:
    add_range(storage, LEDGER, [0, 1])
    assert storage.last_entry_id(LEDGER) == 1
    add_range(storage, LEDGER, [9, 4])
    assert storage.last_entry_id(LEDGER) == 9


def test_last_entry_id_of_unknown_ledger_raises_no_such_ledger(storage: LedgerStorage) -> None:
    with pytest.raises(NoSuchLedgerExistsException):
        storage.last_entry_id(999)


def test_last_entry_id_of_ledger_without_entries_raises_no_such_entry(
    storage: LedgerStorage,
) -> None:
    storage.fence(LEDGER, KEY)  # creates the ledger, no entries
    with pytest.raises(NoSuchEntryException):
        storage.last_entry_id(LEDGER)


# --- fencing ------------------------------------------------------------------------------


def test_fenced_ledger_rejects_normal_adds(storage: LedgerStorage) -> None:
    add_range(storage, LEDGER, range(3))
    assert storage.fence(LEDGER, KEY) is False
    with pytest.raises(LedgerFencedException):
        storage.add_entry(LEDGER, 3, b"late", KEY)
    with pytest.raises(LedgerFencedException):
        storage.add_entries(LEDGER, [(3, b"late"), (4, b"later")], KEY)
    with pytest.raises(NoSuchEntryException):
        storage.read_entry(LEDGER, 3)


def test_fenced_ledger_accepts_recovery_adds(storage: LedgerStorage) -> None:
    add_range(storage, LEDGER, range(3))
    storage.fence(LEDGER, KEY)
    storage.add_entry(LEDGER, 3, b"recovered", KEY, recovery=True)
    storage.add_entries(LEDGER, [(4, b"r4"), (5, b"r5")], KEY, recovery=True)
    assert storage.read_range(LEDGER, 3, 0, 1 << 30) == [b"recovered", b"r4", b"r5"]


def test_fence_reports_whether_the_ledger_was_already_fenced(storage: LedgerStorage) -> None:
    add_range(storage, LEDGER, range(1))
    assert storage.is_fenced(LEDGER) is False
    assert storage.fence(LEDGER, KEY) is False
    assert storage.is_fenced(LEDGER) is True
    assert storage.fence(LEDGER, KEY) is True


def test_fence_creates_an_unknown_ledger_with_the_given_key(storage: LedgerStorage) -> None:
    assert storage.fence(LEDGER, KEY) is False
    assert storage.ledger_exists(LEDGER)
    assert storage.is_fenced(LEDGER)
    assert storage.read_master_key(LEDGER) == KEY
    with pytest.raises(LedgerFencedException):
        storage.add_entry(LEDGER, 0, b"x", KEY)


def test_is_fenced_of_unknown_ledger_raises_no_such_ledger(storage: LedgerStorage) -> None:
    with pytest.raises(NoSuchLedgerExistsException):
        storage.is_fenced(999)


def test_fencing_one_ledger_leaves_others_writable(storage: LedgerStorage) -> None:
    add_range(storage, 1, range(1))
    add_range(storage, 2, range(1))
    storage.fence(1, master_key(1))
    storage.add_entry(2, 1, b"still open", master_key(2))
    assert storage.read_entry(2, 1) == b"still open"


# --- master key ---------------------------------------------------------------------------


def test_first_add_sets_the_master_key(storage: LedgerStorage) -> None:
    storage.add_entry(LEDGER, 0, b"x", KEY)
    assert storage.read_master_key(LEDGER) == KEY


def test_wrong_master_key_is_rejected_on_add(storage: LedgerStorage) -> None:
    storage.add_entry(LEDGER, 0, b"x", KEY)
    with pytest.raises(UnauthorizedAccessException):
        storage.add_entry(LEDGER, 1, b"y", b"not-the-key")
    with pytest.raises(UnauthorizedAccessException):
        storage.add_entries(LEDGER, [(1, b"y")], b"not-the-key")
    with pytest.raises(NoSuchEntryException):
        storage.read_entry(LEDGER, 1)


def test_wrong_master_key_is_rejected_on_recovery_add(storage: LedgerStorage) -> None:
    storage.add_entry(LEDGER, 0, b"x", KEY)
    storage.fence(LEDGER, KEY)
    with pytest.raises(UnauthorizedAccessException):
        storage.add_entry(LEDGER, 1, b"y", b"not-the-key", recovery=True)


def test_wrong_master_key_is_rejected_on_fence(storage: LedgerStorage) -> None:
    storage.add_entry(LEDGER, 0, b"x", KEY)
    with pytest.raises(UnauthorizedAccessException):
        storage.fence(LEDGER, b"not-the-key")
    assert storage.is_fenced(LEDGER) is False


def test_wrong_master_key_is_rejected_on_explicit_lac(storage: LedgerStorage) -> None:
    storage.add_entry(LEDGER, 0, b"x", KEY)
    with pytest.raises(UnauthorizedAccessException):
        storage.set_explicit_lac(LEDGER, b"lac", b"not-the-key")
    assert storage.get_explicit_lac(LEDGER) is None


def test_read_master_key_of_unknown_ledger_raises_no_such_ledger(storage: LedgerStorage) -> None:
    with pytest.raises(NoSuchLedgerExistsException):
        storage.read_master_key(999)


# --- explicit LAC -------------------------------------------------------------------------


def test_explicit_lac_is_none_until_set(storage: LedgerStorage) -> None:
    storage.add_entry(LEDGER, 0, b"x", KEY)
    assert storage.get_explicit_lac(LEDGER) is None


def test_explicit_lac_round_trips_and_latest_wins(storage: LedgerStorage) -> None:
    storage.add_entry(LEDGER, 0, b"x", KEY)
    storage.set_explicit_lac(LEDGER, b"\x00lac-1", KEY)
    assert storage.get_explicit_lac(LEDGER) == b"\x00lac-1"
    storage.set_explicit_lac(LEDGER, b"lac-2" * 50, KEY)
    assert storage.get_explicit_lac(LEDGER) == b"lac-2" * 50


def test_explicit_lac_of_unknown_ledger_raises_no_such_ledger(storage: LedgerStorage) -> None:
    with pytest.raises(NoSuchLedgerExistsException):
        storage.get_explicit_lac(999)


# --- list / exists / delete ---------------------------------------------------------------


def test_list_and_exists_reflect_added_ledgers(storage: LedgerStorage) -> None:
    assert storage.list_ledgers() == []
    assert storage.ledger_exists(1) is False
    for ledger_id in (3, 1, 1 << 40):
        add_range(storage, ledger_id, range(2))
    assert sorted(storage.list_ledgers()) == [1, 3, 1 << 40]
    assert storage.ledger_exists(1 << 40)
    assert storage.ledger_exists(2) is False


def test_deleted_ledger_is_gone(storage: LedgerStorage) -> None:
    add_range(storage, 1, range(5))
    add_range(storage, 2, range(5))
    storage.delete_ledger(1)
    assert storage.ledger_exists(1) is False
    assert storage.list_ledgers() == [2]
    with pytest.raises(NoSuchLedgerExistsException):
        storage.read_entry(1, 0)
    with pytest.raises(NoSuchLedgerExistsException):
        storage.last_entry_id(1)
    assert storage.read_entry(2, 4) == payload(2, 4)


def test_deleting_unknown_ledger_raises_no_such_ledger(storage: LedgerStorage) -> None:
    with pytest.raises(NoSuchLedgerExistsException):
        storage.delete_ledger(999)


# --- configuration ------------------------------------------------------------------------


def test_unknown_config_key_raises_value_error(config: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        open_ledger_storage(**config, journalMaxSizeMb=1)  # wrong case: not a BookKeeper key


def test_bad_config_value_raises_value_error(config: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        open_ledger_storage(**{**config, "journalMaxSizeMB": "lots"})


def test_directories_accept_comma_separated_strings(
    tmp_path: Path, open_storage: OpenStorage
) -> None:
    config = storage_config(tmp_path, journals=2, ledgers=2)
    config["journalDirectories"] = ",".join(config["journalDirectories"])
    config["ledgerDirectories"] = ",".join(config["ledgerDirectories"])
    storage = open_storage(config)
    add_range(storage, LEDGER, range(3))
    assert storage.read_entry(LEDGER, 2) == payload(LEDGER, 2)


@pytest.mark.parametrize("direct", [True, False])
def test_entry_logs_are_written_with_direct_io_or_the_page_cache_as_configured(
    tmp_path: Path, open_storage: OpenStorage, direct: bool
) -> None:
    """dbStorage_directIOEntryLogger: with direct I/O an entry log's header is padded to a whole
    block (its first record is padding, ledger id 2^64-2); either way every entry reads back
    after a flush and after a reopen."""
    config = storage_config(tmp_path, dbStorage_directIOEntryLogger=direct)
    storage = open_storage(config)
    add_range(storage, LEDGER, range(20))
    storage.checkpoint()
    for e in range(20):
        assert storage.read_entry(LEDGER, e) == payload(LEDGER, e)
    storage.close()
    (log,) = (p for p in (tmp_path / "ledgers0" / "current").glob("*.log") if p.stem != "index")
    first_record = log.read_bytes()[32:48]  # after the 32-byte file header: [len][crc][ledger]
    assert int.from_bytes(first_record[8:], "big") == (2**64 - 2 if direct else LEDGER)
    with open_ledger_storage(**config) as reopened:
        for e in range(20):
            assert reopened.read_entry(LEDGER, e) == payload(LEDGER, e)


def _resident_bytes(path: Path) -> int:
    """Bytes of ``path`` in the page cache (util-linux ``fincore``)."""
    out = subprocess.run(
        ["fincore", "--bytes", "--noheadings", "--output", "RES", str(path)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return int(out.strip())


def _takes_direct_io(directory: Path) -> bool:
    probe = directory / "direct-io-probe"
    try:
        fd = os.open(probe, os.O_CREAT | os.O_WRONLY | os.O_DIRECT, 0o600)
    except OSError:
        return False
    os.close(fd)
    probe.unlink()
    return True


@pytest.mark.parametrize("direct", [True, False])
def test_the_journal_is_written_with_direct_io_or_the_page_cache_as_configured(
    tmp_path: Path, open_storage: OpenStorage, direct: bool
) -> None:
    """journalDirectIO: journal records go to the disk without passing through the page cache
    (only the header's page, written at creation, is cached); without it (and with
    journalRemoveFromPageCache off) the records stay cached. Either way every entry reads back.
    (Replay after kill -9 in both modes: test_storage_durability.py.)"""
    if direct and not _takes_direct_io(tmp_path):
        pytest.skip(f"the file system of {tmp_path} refuses O_DIRECT (the journal falls back)")
    config = storage_config(
        tmp_path, journalDirectIO=direct, journalRemoveFromPageCache=False, journalMaxSizeMB=64
    )
    storage = open_storage(config)
    entries = range(600)  # about 1.2 MB of payload, in many groups
    for chunk in (entries[i : i + 50] for i in range(0, len(entries), 50)):
        add_range(storage, LEDGER, chunk)
    (journal,) = (tmp_path / "journal0" / "current").glob("*.txn")
    resident = _resident_bytes(journal)
    if direct:
        assert resident <= 8192, resident
    else:
        assert resident >= 1_000_000, resident
    for e in entries:
        assert storage.read_entry(LEDGER, e) == payload(LEDGER, e)


@pytest.mark.parametrize("direct_reads", [True, False])
def test_entry_logs_are_read_directly_or_through_the_page_cache_as_configured(
    tmp_path: Path, open_storage: OpenStorage, direct_reads: bool
) -> None:
    """entryLogDirectReads: a scan's large reads (batch reads, read-ahead runs) leave nothing of
    the entry log in the page cache, and return the same bytes as the page cache does; without
    the key the pages read stay cached."""
    if direct_reads and not _takes_direct_io(tmp_path):
        pytest.skip(f"the file system of {tmp_path} refuses O_DIRECT (reads fall back)")
    config = storage_config(tmp_path, entryLogDirectReads=direct_reads)
    entries = range(300)  # up to 4 KiB each, about 600 KB
    with open_storage(config) as storage:
        add_range(storage, LEDGER, entries)
        storage.checkpoint()
    (log,) = (p for p in (tmp_path / "ledgers0" / "current").glob("*.log") if p.stem != "index")
    fd = os.open(log, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    with open_ledger_storage(**config) as storage:
        got = []
        while len(got) < len(entries):
            got.extend(storage.read_range(LEDGER, len(got), 64, 1 << 30))
        assert got == [payload(LEDGER, e) for e in entries]
        for e in entries:
            assert storage.read_entry(LEDGER, e) == payload(LEDGER, e)
        resident = _resident_bytes(log)
    if direct_reads:
        # The file's header, and small reads' pages, if any.
        assert resident <= 64 * 1024, resident
    else:
        assert resident >= 400_000, resident


@pytest.mark.parametrize("threads", [4, 0])
def test_read_ahead_threads_read_a_scanned_ledger_ahead_as_configured(
    tmp_path: Path, open_storage: OpenStorage, threads: int
) -> None:
    """entryLogReadAheadThreads: with direct reads, the threads read the runs after a scan's
    first batch (each between another ledger's runs) into the read-ahead cache while the scan
    goes on; with 0 nothing is read beyond what the scan asks for. The bytes are the same."""
    if not _takes_direct_io(tmp_path):
        pytest.skip(f"the file system of {tmp_path} refuses O_DIRECT (nothing read directly)")
    config = storage_config(tmp_path, entryLogReadAheadThreads=threads)
    rounds, per_run = 8, 50  # runs of about 100 KB, ledger 1's between ledger 2's
    with open_storage(config) as storage:
        for r in range(rounds):
            for ledger in (LEDGER, LEDGER + 1):
                add_range(storage, ledger, range(r * per_run, (r + 1) * per_run))
            storage.checkpoint()
    with open_ledger_storage(**config) as storage:
        got = storage.read_range(LEDGER, 0, per_run, 1 << 30)
        if threads:
            wait_until(
                lambda: storage.stats()["pybkx_storage_read_ahead_entries"] >= per_run,
                "a run read ahead",
                timeout_s=20,
                interval_s=0.01,
            )
        else:
            time.sleep(0.2)  # not a wait: time for a read-ahead that must not happen
            assert storage.stats()["pybkx_storage_read_ahead_entries"] == 0
        while len(got) < rounds * per_run:
            got.extend(storage.read_range(LEDGER, len(got), per_run, 1 << 30))
        assert got == [payload(LEDGER, e) for e in range(rounds * per_run)]


def test_stats_counts_journal_work(storage: LedgerStorage) -> None:
    before = storage.stats()
    for key in (
        "pybkx_journal_entries",
        "pybkx_journal_bytes",
        "pybkx_journal_syncs",
        "pybkx_journal_groups",
        "pybkx_storage_checkpoints",
        "bookie_journal_JOURNAL_WRITE_BYTES",
    ):
        assert key in before
    add_range(storage, LEDGER, range(10))
    after = storage.stats()
    assert after["pybkx_journal_entries"] - before["pybkx_journal_entries"] >= 10
    payload_bytes = sum(len(payload(LEDGER, e)) for e in range(10))
    assert after["pybkx_journal_bytes"] - before["pybkx_journal_bytes"] >= payload_bytes
    written = (
        after["bookie_journal_JOURNAL_WRITE_BYTES"] - before["bookie_journal_JOURNAL_WRITE_BYTES"]
    )
    assert written == payload_bytes
    assert after["pybkx_journal_syncs"] > before["pybkx_journal_syncs"]
    storage.checkpoint()
    assert storage.stats()["pybkx_storage_checkpoints"] > after["pybkx_storage_checkpoints"]


# --- lifecycle ----------------------------------------------------------------------------


def test_second_storage_on_same_directories_fails_while_first_is_open(
    config: dict[str, Any], open_storage: OpenStorage
) -> None:
    first = open_storage(config)
    with pytest.raises(BookieException):
        open_ledger_storage(**config)
    first.close()
    second = open_storage(config)  # the lock is released by close
    second.close()


def test_second_storage_sharing_only_the_journal_directory_fails(
    tmp_path: Path, config: dict[str, Any], open_storage: OpenStorage
) -> None:
    open_storage(config)
    other = tmp_path / "other-ledgers"
    other.mkdir()
    with pytest.raises(BookieException):
        open_ledger_storage(**{**config, "ledgerDirectories": [str(other)]})


def test_close_is_idempotent(config: dict[str, Any]) -> None:
    storage = open_ledger_storage(**config)
    storage.add_entry(LEDGER, 0, b"x", KEY)
    storage.close()
    storage.close()
    with open_ledger_storage(**config) as reopened:
        assert reopened.read_entry(LEDGER, 0) == b"x"


def test_context_manager_closes_the_storage(config: dict[str, Any]) -> None:
    with open_ledger_storage(**config) as storage:
        assert isinstance(storage, LedgerStorage)
        storage.add_entry(LEDGER, 0, b"x", KEY)
    # Closed: the directories are unlocked and the data is there.
    with open_ledger_storage(**config) as reopened:
        assert reopened.read_entry(LEDGER, 0) == b"x"


def test_context_manager_closes_the_storage_on_error(config: dict[str, Any]) -> None:
    with pytest.raises(RuntimeError), open_ledger_storage(**config) as storage:
        storage.add_entry(LEDGER, 0, b"x", KEY)
        raise RuntimeError("boom")
    with open_ledger_storage(**config) as reopened:
        assert reopened.read_entry(LEDGER, 0) == b"x"


def test_operations_on_a_closed_storage_raise(config: dict[str, Any]) -> None:
    storage = open_ledger_storage(**config)
    storage.close()
    with pytest.raises(Exception):  # noqa: B017 - the class is not specified, only that it raises
        storage.add_entry(LEDGER, 0, b"x", KEY)
