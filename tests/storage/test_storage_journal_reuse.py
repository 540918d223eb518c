"""Reused journal files (``journalReuseFiles``): rollovers take the files a checkpoint let go.

Owns the reuse of journal files across checkpoints, rollovers and kill -9; must never replay a
record from a reused file's previous life, nor lose an acknowledged entry written into one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from storage_helpers import (
    StorageChild,
    journal_dirs,
    journal_files,
    master_key,
    parse_acks,
    payload,
)
from support.storage import storage_config

from pybkx._core import scan_journal
from pybkx.bookie import open_ledger_storage

LEDGER = 9
SIZES = {"min_size": 1024, "max_size": 4096}
PER_ROUND = 1500  # about 3.8 MB: three or four 1 MiB journal files


def reuse_config(root: Path, **overrides: Any) -> dict[str, Any]:
    return storage_config(
        root,
        journalMaxSizeMB=1,
        journalMaxBackups=3,
        journalReuseFiles=True,
        **overrides,
    )


def inodes(config: dict[str, Any]) -> dict[int, int]:
    """Journal file id -> inode."""
    (journal_dir,) = journal_dirs(config)
    return {int(p.stem, 16): p.stat().st_ino for p in journal_files(journal_dir)}


def entry_payload(entry_id: int, generation: int) -> bytes:
    return payload(LEDGER, entry_id, generation=generation, **SIZES)


def test_rollovers_after_a_checkpoint_reuse_its_files(tmp_path: Path) -> None:
    config = reuse_config(tmp_path)
    with open_ledger_storage(**config) as storage:
        for e in range(PER_ROUND):
            storage.add_entry(LEDGER, e, entry_payload(e, 0), master_key(LEDGER))
        storage.checkpoint()
        covered = inodes(config)
        newest_before = max(covered)
        for e in range(PER_ROUND, 2 * PER_ROUND):
            storage.add_entry(LEDGER, e, entry_payload(e, 0), master_key(LEDGER))
        after = inodes(config)
    reused = {
        file_id
        for file_id, inode in after.items()
        if file_id > newest_before and inode in covered.values()
    }
    assert len(reused) >= 2, f"no old file was reused: before {covered}, after {after}"
    assert max(after) - newest_before >= len(reused)

    with open_ledger_storage(**config) as storage:
        got = storage.read_range(LEDGER, 0, 0, 1 << 30)
        assert got == [entry_payload(e, 0) for e in range(2 * PER_ROUND)]


def test_acknowledged_entries_in_reused_files_survive_kill_9(tmp_path: Path) -> None:
    """Each round opens (replay, then a checkpoint that lets the old files go), writes about
    four files' worth into reused files, and is killed; the reused files hold the previous
    rounds' records after the new ones, and none of those may come back."""
    config = reuse_config(tmp_path)
    acked: set[int] = set()
    seen: set[int] = set()
    ids_seen: set[int] = set()
    for generation in range(4):
        spec = {
            "config": config,
            "mode": "write",
            "ledger": LEDGER,
            "count": PER_ROUND,
            "generation": generation,
            **SIZES,
        }
        child = StorageChild(spec, tmp_path / f"round{generation}.stderr")
        try:
            child.wait_for("DONE")
            lines = child.kill()
        finally:
            child.close()
        start = len(acked)
        assert f"RESUME {LEDGER} {start}" in lines
        round_acks = parse_acks(lines)[LEDGER]
        assert round_acks == set(range(start, start + PER_ROUND))
        acked |= round_acks
        files = inodes(config)
        seen |= set(files.values())
        ids_seen |= set(files)

    # Sixteen files' worth was written; reuse kept the distinct files to a few.
    assert len(ids_seen) > len(seen), f"ids {sorted(ids_seen)}, inodes {len(seen)}"
    (journal_dir,) = journal_dirs(config)
    for path in journal_files(journal_dir):
        *_, end = scan_journal(str(path))
        assert end["kind"] == "end", end

    with open_ledger_storage(**config) as storage:
        assert storage.last_entry_id(LEDGER) == len(acked) - 1
        got = storage.read_range(LEDGER, 0, 0, 1 << 30)
        expected = [entry_payload(e, e // PER_ROUND) for e in range(len(acked))]
        bad = [e for e, (a, b) in enumerate(zip(got, expected, strict=True)) if a != b]
        assert not bad, f"entries with wrong bytes: {bad[:10]}"
