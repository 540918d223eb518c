"""What a LedgerStorage keeps across a clean close and reopen: entries, metadata, file layout.

Owns restart and file-rollover behaviour; must never kill processes (see the durability tests).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from storage_helpers import (
    MIB,
    entry_log_files,
    journal_dirs,
    journal_files,
    ledger_dirs,
    master_key,
    payload,
)
from support.storage import OpenStorage, storage_config

from pybkx._core import LedgerStorage, scan_journal
from pybkx.bookie import open_ledger_storage
from pybkx.errors import (
    LedgerFencedException,
    NoSuchEntryException,
    NoSuchLedgerExistsException,
    UnauthorizedAccessException,
)

BIG = 16 * 1024  # payloads up to 16 KiB: a few MB is a few hundred entries


def write_ledgers(
    storage: LedgerStorage, ledgers: list[int], entries_per_ledger: int, batch: int = 25
) -> int:
    """Interleave batches over ``ledgers``; return the payload bytes written."""
    written = 0
    for start in range(0, entries_per_ledger, batch):
        ids = range(start, min(start + batch, entries_per_ledger))
        for ledger_id in ledgers:
            entries = [(e, payload(ledger_id, e, max_size=BIG)) for e in ids]
            storage.add_entries(ledger_id, entries, master_key(ledger_id))
            written += sum(len(d) for _, d in entries)
    return written


def assert_ledgers_intact(
    storage: LedgerStorage, ledgers: list[int], entries_per_ledger: int
) -> None:
    for ledger_id in ledgers:
        assert storage.last_entry_id(ledger_id) == entries_per_ledger - 1
        got = storage.read_range(ledger_id, 0, 0, 1 << 40)
        bad = [
            e
            for e in range(entries_per_ledger)
            if e >= len(got) or got[e] != payload(ledger_id, e, max_size=BIG)
        ]
        assert len(got) == entries_per_ledger, f"ledger {ledger_id}: read {len(got)} entries"
        assert not bad, f"ledger {ledger_id}: entries differ: {bad[:20]}"


def count_journal_entries(directory: Path) -> int:
    return sum(
        1 for f in journal_files(directory) for r in scan_journal(str(f)) if r["kind"] == "entry"
    )


def test_entries_survive_journal_and_entry_log_rollover(
    tmp_path: Path, open_storage: OpenStorage
) -> None:
    config = storage_config(tmp_path, journalMaxSizeMB=1, logSizeLimit=1 * MIB)
    ledgers, per_ledger = [1, 2, 3], 250  # ~6 MB of payload
    storage = open_storage(config)
    written = write_ledgers(storage, ledgers, per_ledger)
    assert written > 5 * MIB
    (journal_dir,) = journal_dirs(config)
    assert len(journal_files(journal_dir)) >= 3, "journal did not roll over at journalMaxSizeMB=1"
    storage.close()

    logs = [f for d in ledger_dirs(config) for f in entry_log_files(d)]
    assert len(logs) >= 3, f"entry log did not roll over at logSizeLimit=1MiB: {logs}"

    with open_ledger_storage(**config) as reopened:
        assert sorted(reopened.list_ledgers()) == ledgers
        assert_ledgers_intact(reopened, ledgers, per_ledger)


def test_entries_spread_over_several_journal_and_ledger_directories(
    tmp_path: Path, open_storage: OpenStorage
) -> None:
    config = storage_config(tmp_path, journals=2, ledgers=3, index=True, logSizeLimit=1 * MIB)
    ledgers, per_ledger = list(range(1, 9)), 100  # ~6.4 MB over 8 ledgers
    storage = open_storage(config)
    write_ledgers(storage, ledgers, per_ledger, batch=20)

    per_journal_dir = {d: count_journal_entries(d) for d in journal_dirs(config)}
    assert sum(per_journal_dir.values()) == len(ledgers) * per_ledger, per_journal_dir
    assert sum(1 for n in per_journal_dir.values() if n > 0) >= 2, per_journal_dir
    storage.close()

    logs_per_dir = {
        d: [f for f in entry_log_files(d) if f.stat().st_size > 4096] for d in ledger_dirs(config)
    }
    assert sum(1 for logs in logs_per_dir.values() if logs) >= 2, logs_per_dir
    index_dir = Path(config["indexDirectories"][0])
    assert (index_dir / "current" / "index.log").is_file()
    for d in ledger_dirs(config):
        assert not (d / "current" / "index.log").exists(), "index written outside indexDirectories"

    with open_ledger_storage(**config) as reopened:
        assert sorted(reopened.list_ledgers()) == ledgers
        assert_ledgers_intact(reopened, ledgers, per_ledger)


def test_index_lives_in_first_ledger_directory_without_index_directories(
    tmp_path: Path,
) -> None:
    config = storage_config(tmp_path, ledgers=2)
    with open_ledger_storage(**config) as storage:
        storage.add_entry(1, 0, b"x", master_key(1))
    first, second = ledger_dirs(config)
    assert (first / "current" / "index.log").is_file()
    assert not (second / "current" / "index.log").exists()


def test_fence_master_key_and_explicit_lac_survive_restart(tmp_path: Path) -> None:
    config = storage_config(tmp_path)
    fenced, open_ledger, fence_only = 1, 2, 3
    with open_ledger_storage(**config) as storage:
        storage.add_entry(fenced, 0, b"f0", master_key(fenced))
        storage.set_explicit_lac(fenced, b"lac-of-1", master_key(fenced))
        storage.fence(fenced, master_key(fenced))
        storage.add_entry(open_ledger, 0, b"o0", master_key(open_ledger))
        storage.fence(fence_only, master_key(fence_only))

    with open_ledger_storage(**config) as storage:
        assert sorted(storage.list_ledgers()) == [fenced, open_ledger, fence_only]
        assert storage.is_fenced(fenced) is True
        assert storage.is_fenced(open_ledger) is False
        assert storage.is_fenced(fence_only) is True
        for ledger_id in (fenced, open_ledger, fence_only):
            assert storage.read_master_key(ledger_id) == master_key(ledger_id)
        assert storage.get_explicit_lac(fenced) == b"lac-of-1"
        assert storage.get_explicit_lac(open_ledger) is None
        with pytest.raises(NoSuchEntryException):
            storage.last_entry_id(fence_only)

        with pytest.raises(LedgerFencedException):
            storage.add_entry(fenced, 1, b"late", master_key(fenced))
        storage.add_entry(fenced, 1, b"recovered", master_key(fenced), recovery=True)
        assert storage.fence(fenced, master_key(fenced)) is True
        storage.add_entry(open_ledger, 1, b"o1", master_key(open_ledger))

    with open_ledger_storage(**config) as storage:
        assert storage.read_range(fenced, 0, 0, 1 << 20) == [b"f0", b"recovered"]
        assert storage.read_range(open_ledger, 0, 0, 1 << 20) == [b"o0", b"o1"]


def test_latest_explicit_lac_survives_restart(tmp_path: Path) -> None:
    config = storage_config(tmp_path)
    with open_ledger_storage(**config) as storage:
        storage.add_entry(1, 0, b"x", master_key(1))
        storage.set_explicit_lac(1, b"old", master_key(1))
        storage.checkpoint()
        storage.set_explicit_lac(1, b"new", master_key(1))
    with open_ledger_storage(**config) as storage:
        assert storage.get_explicit_lac(1) == b"new"


def test_wrong_master_key_is_rejected_after_restart(tmp_path: Path) -> None:
    config = storage_config(tmp_path)
    with open_ledger_storage(**config) as storage:
        storage.add_entry(1, 0, b"x", master_key(1))
    with open_ledger_storage(**config) as storage:
        with pytest.raises(UnauthorizedAccessException):
            storage.add_entry(1, 1, b"y", b"not-the-key")
        with pytest.raises(UnauthorizedAccessException):
            storage.fence(1, b"not-the-key")
        with pytest.raises(UnauthorizedAccessException):
            storage.set_explicit_lac(1, b"lac", b"not-the-key")
        assert storage.is_fenced(1) is False
        storage.add_entry(1, 1, b"y", master_key(1))
        assert storage.read_entry(1, 1) == b"y"


@pytest.mark.parametrize("checkpoint_before_delete", [False, True])
def test_deleted_ledger_stays_deleted_after_restart(
    tmp_path: Path, checkpoint_before_delete: bool
) -> None:
    config = storage_config(tmp_path)
    with open_ledger_storage(**config) as storage:
        write_ledgers(storage, [1, 2], 30)
        if checkpoint_before_delete:
            storage.checkpoint()  # ledger 1's index and entries are now persisted
        storage.set_explicit_lac(1, b"lac", master_key(1))
        storage.fence(1, master_key(1))
        storage.delete_ledger(1)
    for _ in range(2):  # also after a second restart, when nothing is replayed any more
        with open_ledger_storage(**config) as storage:
            assert storage.ledger_exists(1) is False
            assert storage.list_ledgers() == [2]
            with pytest.raises(NoSuchLedgerExistsException):
                storage.read_entry(1, 0)
            with pytest.raises(NoSuchLedgerExistsException):
                storage.is_fenced(1)
            assert_ledgers_intact(storage, [2], 30)


@pytest.mark.parametrize("max_backups", [0, 2])
def test_checkpoint_removes_journals_beyond_max_backups(
    tmp_path: Path, open_storage: OpenStorage, max_backups: int
) -> None:
    config = storage_config(tmp_path, journalMaxSizeMB=1, journalMaxBackups=max_backups)
    (journal_dir,) = journal_dirs(config)
    ledgers, per_ledger = [1, 2], 400  # ~6.5 MB: six or more 1 MB journals
    storage = open_storage(config)
    write_ledgers(storage, ledgers, per_ledger)
    before = len(journal_files(journal_dir))
    assert before >= max_backups + 3

    storage.checkpoint()
    (mark,) = storage.journal_marks()
    after = [int(path.stem, 16) for path in journal_files(journal_dir)]
    # Kept: `max_backups` files before the mark's, and every file from the mark's on. The mark
    # is in the last file written; when that write filled it, the journal has already rolled
    # over to the next (empty) file, which is kept too: one or two files from the mark on.
    covered = [i for i in after if i < mark.file_id]
    assert len(covered) == max_backups, f"{before} journals before the checkpoint, after: {after}"
    assert 1 <= len(after) - len(covered) <= 2, (mark.file_id, after)
    assert_ledgers_intact(storage, ledgers, per_ledger)
    storage.close()

    with open_ledger_storage(**config) as reopened:
        assert_ledgers_intact(reopened, ledgers, per_ledger)


def test_timed_checkpoints_trim_the_journal_under_steady_adds(
    tmp_path: Path, open_storage: OpenStorage
) -> None:
    """The write cache (1 MiB) flushes every 20 ms or so under these adds, far more often than
    ``flushInterval``: the timed checkpoints still come, so the journal keeps a few files
    instead of one per MiB written."""
    config = storage_config(
        tmp_path,
        journalMaxSizeMB=1,
        journalMaxBackups=1,
        flushInterval=200,
        dbStorage_writeCacheMaxSizeMb=1,
    )
    (journal_dir,) = journal_dirs(config)
    storage = open_storage(config)
    ledger_id, entry_id, written = 1, 0, 0
    started = time.monotonic()
    while time.monotonic() - started < 1.6:
        batch = [
            (entry_id + k, payload(ledger_id, entry_id + k, min_size=16_384, max_size=16_384))
            for k in range(16)
        ]
        storage.add_entries(ledger_id, batch, master_key(ledger_id))
        entry_id += len(batch)
        written += sum(len(d) for _, d in batch)
        time.sleep(0.01)  # not a wait: the adds are paced over several flush intervals
    kept = journal_files(journal_dir)
    assert written > 20 * MIB, f"only {written} bytes written"
    # About 5 MiB are written per interval: the files since the last checkpoint, one backup
    # and the current one. One file per MiB written would be 20 or more.
    assert len(kept) <= 10, f"{len(kept)} journal files kept for {written >> 20} MiB written"
    got = storage.read_range(ledger_id, 0, 0, 1 << 40)
    assert got == [payload(ledger_id, e, min_size=16_384, max_size=16_384) for e in range(entry_id)]


def ledger_byte_totals(elm: dict[int, dict[int, int]]) -> dict[int, int]:
    totals: dict[int, int] = {}
    for per_ledger in elm.values():
        for ledger_id, size in per_ledger.items():
            totals[ledger_id] = totals.get(ledger_id, 0) + size
    return totals


def assert_entry_log_map_matches(
    elm: dict[int, dict[int, int]], config: dict[str, Any], written: dict[int, list[int]]
) -> int:
    """Check ``entry_log_ledgers()`` against what was written; return the per-entry overhead.

    The engine may count each entry's on-disk bytes rather than its payload; either way the
    count for a ledger is ``payload bytes + entries * overhead`` with one small fixed overhead.
    """
    log_ids = {int(f.stem, 16) for d in ledger_dirs(config) for f in entry_log_files(d)}
    assert set(elm) <= log_ids, f"map names logs {set(elm)} but files are {log_ids}"
    totals = ledger_byte_totals(elm)
    assert set(totals) == set(written)
    overheads = set()
    for ledger_id, sizes in written.items():
        extra = totals[ledger_id] - sum(sizes)
        assert extra % len(sizes) == 0, (ledger_id, totals[ledger_id], sum(sizes), len(sizes))
        overheads.add(extra // len(sizes))
    assert len(overheads) == 1, f"per-entry overhead differs between ledgers: {overheads}"
    (overhead,) = overheads
    assert 0 <= overhead <= 64
    return overhead


def test_entry_log_ledgers_reports_bytes_per_ledger(
    tmp_path: Path, open_storage: OpenStorage
) -> None:
    config = storage_config(tmp_path, logSizeLimit=256 * 1024)
    counts = {10: 40, 11: 15, 12: 3}
    written: dict[int, list[int]] = {}
    storage = open_storage(config)
    for ledger_id, n in counts.items():
        entries = [(e, payload(ledger_id, e, max_size=BIG)) for e in range(n)]
        storage.add_entries(ledger_id, entries, master_key(ledger_id))
        written[ledger_id] = [len(d) for _, d in entries]
    storage.fence(12, master_key(12))  # metadata must not be counted as entry bytes
    storage.set_explicit_lac(11, b"lac", master_key(11))
    storage.checkpoint()

    elm = storage.entry_log_ledgers()
    assert len(elm) >= 2, f"~470 KB at logSizeLimit=256KiB should span logs: {elm}"
    overhead = assert_entry_log_map_matches(elm, config, written)
    storage.close()

    with open_ledger_storage(**config) as reopened:
        non_empty = {log_id: m for log_id, m in reopened.entry_log_ledgers().items() if m}
        assert non_empty == elm
        assert (
            assert_entry_log_map_matches(reopened.entry_log_ledgers(), config, written) == overhead
        )
