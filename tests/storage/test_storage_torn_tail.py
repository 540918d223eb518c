"""Replay of a damaged journal tail: a torn or corrupt last record is cut, the rest is intact.

Owns journal tail damage after a crash; must never damage anything but the newest journal's last
record (earlier damage is corruption, not a torn write, and is out of scope here).
"""

from __future__ import annotations

import itertools
import os
from pathlib import Path
from typing import Any

import pytest
from storage_helpers import (
    StorageChild,
    journal_dirs,
    journal_files,
    master_key,
    parse_acks,
    payload,
)
from support.storage import storage_config

from pybkx._core import LedgerStorage, scan_journal
from pybkx.bookie import open_ledger_storage
from pybkx.errors import NoSuchEntryException

LEDGER = 5
COUNT = 20
SIZES = {"min_size": 256, "max_size": 1024}  # the middle of every record is payload


def entry_payload(entry_id: int, generation: int = 0) -> bytes:
    return payload(LEDGER, entry_id, generation=generation, **SIZES)


def crash_after_writing(
    config: dict[str, Any], count: int, generation: int, stderr: Path
) -> list[str]:
    """Child resumes LEDGER at last_entry_id + 1, adds ``count`` entries, and is killed -9."""
    spec = {
        "config": config,
        "mode": "write",
        "ledger": LEDGER,
        "count": count,
        "generation": generation,
        **SIZES,
    }
    child = StorageChild(spec, stderr)
    try:
        child.wait_for("DONE")
        return child.kill()
    finally:
        child.close()


def damage_last_record(config: dict[str, Any], how: str) -> tuple[Path, int, bytes]:
    """Tear or corrupt the newest journal's last record.

    Returns the journal, the cut offset (start of the damaged record) and the damaged bytes.
    """
    (journal_dir,) = journal_dirs(config)
    newest = journal_files(journal_dir)[-1]
    records = scan_journal(str(newest))
    *valid, end = records
    last = valid[-1]
    assert end["kind"] == "end"
    assert (last["kind"], last["ledger_id"], last["entry_id"]) == ("entry", LEDGER, COUNT - 1)
    assert end["offset"] == last["offset"] + last["size"]
    assert [r["entry_id"] for r in valid if r["kind"] == "entry"] == list(range(COUNT))

    middle = last["offset"] + last["size"] // 2
    if how == "truncate":
        os.truncate(newest, middle)
    else:
        with newest.open("r+b") as f:
            f.seek(middle - 4)
            original = f.read(8)
            f.seek(middle - 4)
            f.write(bytes(b ^ 0xFF for b in original))
            f.flush()
            os.fsync(f.fileno())

    rescanned = scan_journal(str(newest))
    *still_valid, cut = rescanned
    assert cut["kind"] == "end"
    assert cut["offset"] == last["offset"], (
        f"scan_journal did not stop at the damaged record: {cut}"
    )
    assert cut.get("reason"), cut
    assert still_valid == valid[:-1]
    damaged = newest.read_bytes()[last["offset"] : last["offset"] + last["size"]]
    return newest, last["offset"], damaged


def assert_prefix_intact(storage: LedgerStorage, upto: int) -> None:
    got = storage.read_range(LEDGER, 0, 0, 1 << 30)
    assert len(got) >= upto
    bad = [e for e in range(upto) if got[e] != entry_payload(e)]
    assert not bad, f"entries changed by replay: {bad}"


@pytest.fixture
def crashed(tmp_path: Path) -> dict[str, Any]:
    """Directories where a child journalled COUNT entries and was killed before any checkpoint."""
    config = storage_config(tmp_path / "bookie", flushInterval=0)
    lines = crash_after_writing(config, COUNT, 0, tmp_path / "first.stderr")
    assert parse_acks(lines)[LEDGER] == set(range(COUNT))
    return config


@pytest.mark.parametrize("how", ["truncate", "overwrite"])
def test_damaged_last_record_is_cut_and_earlier_entries_survive(
    crashed: dict[str, Any], how: str
) -> None:
    config = crashed
    journal, cut, damaged = damage_last_record(config, how)
    records_before_cut = scan_journal(str(journal))[:-1]

    with open_ledger_storage(**config) as storage:
        assert_prefix_intact(storage, COUNT - 1)
        with pytest.raises(NoSuchEntryException):
            storage.read_entry(LEDGER, COUNT - 1)
        assert storage.last_entry_id(LEDGER) == COUNT - 2
        assert storage.read_entry(LEDGER, -1) == entry_payload(COUNT - 2)
        # Replay truncated the journal at the cut: earlier records stay, the damaged bytes go.
        assert scan_journal(str(journal))[: len(records_before_cut)] == records_before_cut
        assert journal.read_bytes()[cut : cut + len(damaged)] != damaged

        # Writing goes on where the damaged entry was, with new contents.
        for e in range(COUNT - 1, COUNT + 9):
            storage.add_entry(LEDGER, e, entry_payload(e, generation=1), master_key(LEDGER))

    with open_ledger_storage(**config) as storage:
        assert_prefix_intact(storage, COUNT - 1)
        got = storage.read_range(LEDGER, COUNT - 1, 0, 1 << 30)
        assert got == [entry_payload(e, generation=1) for e in range(COUNT - 1, COUNT + 9)]


@pytest.mark.parametrize("how", ["truncate", "overwrite"])
def test_entries_written_after_a_cut_survive_another_kill_9(
    tmp_path: Path, crashed: dict[str, Any], how: str
) -> None:
    """The recovering process itself appends after the cut and crashes: replay must reach them."""
    config = crashed
    damage_last_record(config, how)

    lines = crash_after_writing(config, 10, 1, tmp_path / "second.stderr")
    assert f"RESUME {LEDGER} {COUNT - 1}" in lines, "the damaged entry was not cut at replay"
    assert parse_acks(lines)[LEDGER] == set(range(COUNT - 1, COUNT + 9))

    with open_ledger_storage(**config) as storage:
        assert_prefix_intact(storage, COUNT - 1)
        got = storage.read_range(LEDGER, COUNT - 1, 0, 1 << 30)
        assert got == [entry_payload(e, generation=1) for e in range(COUNT - 1, COUNT + 9)]
        assert storage.last_entry_id(LEDGER) == COUNT + 8


def test_scan_journal_lists_contiguous_records(crashed: dict[str, Any]) -> None:
    (journal_dir,) = journal_dirs(crashed)
    records = scan_journal(str(journal_files(journal_dir)[-1]))
    assert records[-1]["kind"] == "end"
    assert records[0]["offset"] > 0  # the file header (magic + version) comes first
    for before, after in itertools.pairwise(records):
        assert after["offset"] == before["offset"] + before["size"]
    entries = [r for r in records if r["kind"] == "entry"]
    assert [(r["ledger_id"], r["entry_id"]) for r in entries] == [(LEDGER, e) for e in range(COUNT)]
    for r in entries:
        # header (8 B) + at least the payload
        assert r["size"] >= 8 + len(entry_payload(r["entry_id"]))
