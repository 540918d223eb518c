"""Crash durability: a child writes and is SIGKILLed; every acknowledged entry must survive.

Owns kill -9 testing of LedgerStorage on accumulating directories; must never trust an entry that
was not acknowledged on a complete stdout line, nor accept a present entry with wrong bytes.
"""

from __future__ import annotations

import os
import random
import time
from pathlib import Path
from typing import Any

import pytest
from storage_helpers import MIB, StorageChild, master_key, parse_acks, payload
from support.storage import storage_config

from pybkx._core import LedgerStorage
from pybkx.bookie import open_ledger_storage
from pybkx.errors import (
    LedgerFencedException,
    NoSuchEntryException,
    NoSuchLedgerExistsException,
)

ROUNDS = int(os.environ.get("PYBKX_CRASH_ROUNDS", "20"))
SEED = int(os.environ.get("PYBKX_CRASH_SEED", str(random.SystemRandom().randrange(1 << 30))))
LEDGERS = [1, 2, 3, (1 << 40) + 5]
MAX_PAYLOAD = 4096


def crash_config(root: Path) -> dict[str, Any]:
    """Small files, a small write cache and a fast checkpoint timer, so kills also land in
    rollovers, write-cache flushes and index merges (a merge every six flushes)."""
    return storage_config(
        root,
        journals=1,
        ledgers=2,
        journalMaxSizeMB=1,
        journalMaxBackups=1,
        logSizeLimit=1 * MIB,
        flushInterval=200,
        dbStorage_writeCacheMaxSizeMb=1,
    )


def run_child(spec: dict[str, Any], stderr_path: Path, marker: str, delay_s: float) -> list[str]:
    """Start the child, wait for ``marker``, sleep ``delay_s``, kill -9; return complete lines."""
    child = StorageChild(spec, stderr_path)
    try:
        child.wait_for(marker)
        time.sleep(delay_s)  # not a wait: the kill comes at this moment of the writes
        return child.kill()
    finally:
        child.close()


def resume_points(lines: list[str]) -> dict[int, int]:
    points = {}
    for line in lines:
        parts = line.split()
        if len(parts) == 3 and parts[0] == "RESUME":
            points[int(parts[1])] = int(parts[2])
    return points


def check_ledger(storage: LedgerStorage, ledger_id: int, acked: set[int]) -> list[str]:
    """Problems found in one ledger: lost acked entries, wrong bytes, impossible state."""
    try:
        last = storage.last_entry_id(ledger_id)
    except (NoSuchLedgerExistsException, NoSuchEntryException) as exc:
        return (
            [f"ledger {ledger_id}: {type(exc).__name__} but {len(acked)} entries acked"]
            if acked
            else []
        )
    problems = []
    if acked and last < max(acked):
        problems.append(f"ledger {ledger_id}: last_entry_id {last} < highest acked {max(acked)}")
    present: set[int] = set()
    wrong: list[int] = []
    entry_id = 0
    while entry_id <= last:
        try:
            chunk = storage.read_range(ledger_id, entry_id, 2048, 16 * MIB)
        except NoSuchEntryException:
            entry_id += 1  # a hole: allowed only where nothing was acknowledged
            continue
        for offset, data in enumerate(chunk):
            if data != payload(ledger_id, entry_id + offset, max_size=MAX_PAYLOAD):
                wrong.append(entry_id + offset)
        present.update(range(entry_id, entry_id + len(chunk)))
        entry_id += len(chunk)
    lost = sorted(acked - present)
    if lost:
        problems.append(f"ledger {ledger_id}: {len(lost)} acked entries lost, e.g. {lost[:10]}")
    if wrong:
        problems.append(f"ledger {ledger_id}: {len(wrong)} entries with wrong bytes: {wrong[:10]}")
    if last not in present:
        problems.append(f"ledger {ledger_id}: last_entry_id {last} is not readable")
    return problems


def crash_writer_spec(config: dict[str, Any], seed: int) -> dict[str, Any]:
    return {
        "config": config,
        "mode": "crash-writer",
        "ledgers": LEDGERS,
        "seed": seed,
        "max_size": MAX_PAYLOAD,
    }


@pytest.mark.parametrize("journal_direct_io", [True, False], ids=["direct", "page-cache"])
def test_acknowledged_entries_survive_repeated_kill_9(
    tmp_path: Path, journal_direct_io: bool
) -> None:
    """Kills land anywhere in a journal write: a direct write rewrites the partial last block
    (journalDirectIO, the default) and a page-cache write leaves it to writeback."""
    config = crash_config(tmp_path / "bookie") | {"journalDirectIO": journal_direct_io}
    rng = random.Random(SEED)
    acked: dict[int, set[int]] = {ledger: set() for ledger in LEDGERS}
    for round_no in range(ROUNDS):
        where = f"seed {SEED}, round {round_no}"
        lines = run_child(
            crash_writer_spec(config, SEED + round_no),
            tmp_path / f"child-{round_no}.stderr",
            "READY",
            rng.uniform(0.1, 1.0),
        )
        for ledger_id, start in resume_points(lines).items():
            assert start > max(acked[ledger_id], default=-1), (where, ledger_id, start)
        for ledger_id, ids in parse_acks(lines).items():
            acked[ledger_id] |= ids

        with open_ledger_storage(**config) as storage:
            problems = [
                p for ledger in LEDGERS for p in check_ledger(storage, ledger, acked[ledger])
            ]
        assert not problems, f"{where}: {problems}"

    assert all(acked[ledger] for ledger in LEDGERS), "some writer never got an acknowledgement"


def test_acknowledged_entries_survive_kill_9_during_index_flushes_and_merges(
    tmp_path: Path,
) -> None:
    """Index writes slowed down (segments and index.log), so kills land inside write-cache
    flushes and segment merges; an interrupted one leaves an orphan segment removed on open."""
    root = tmp_path / "bookie"
    config = storage_config(
        root,
        index=True,
        journalMaxSizeMB=1,
        logSizeLimit=1 * MIB,
        flushInterval=100,
        dbStorage_writeCacheMaxSizeMb=1,
    )
    index_dir = root / "index0" / "current"
    faults = [{"path_prefix": str(root / "index0"), "ops": ["write"], "delay_ms": 60}]
    rng = random.Random(SEED + 2)
    acked: dict[int, set[int]] = {ledger: set() for ledger in LEDGERS}
    orphans_removed = 0
    for round_no in range(max(ROUNDS // 2, 4)):
        where = f"seed {SEED}, round {round_no}"
        spec = crash_writer_spec(config, SEED + 200 + round_no) | {"faults": faults}
        lines = run_child(
            spec, tmp_path / f"child-{round_no}.stderr", "READY", rng.uniform(0.3, 1.5)
        )
        for ledger_id, ids in parse_acks(lines).items():
            acked[ledger_id] |= ids
        before = set(index_dir.glob("*.idx"))
        with open_ledger_storage(**config) as storage:
            after_open = set(index_dir.glob("*.idx"))
            orphans_removed += len(before - after_open)
            problems = [
                p for ledger in LEDGERS for p in check_ledger(storage, ledger, acked[ledger])
            ]
        assert not problems, f"{where}: {problems}"
    print(f"kills that left a half-written index segment: {orphans_removed}")
    assert all(acked[ledger] for ledger in LEDGERS), "some writer never got an acknowledgement"


def test_kill_9_during_garbage_collection_and_compaction_loses_no_live_entry(
    tmp_path: Path,
) -> None:
    """A child writes ledgers, deletes some, collects and compacts entry logs in a loop and is
    SIGKILLed at random moments; every acknowledged entry of a ledger not deleted reads back,
    and a deleted ledger stays deleted (BookKeeper's rule: a deletion acknowledged is final;
    one interrupted may or may not have happened)."""
    config = storage_config(
        tmp_path / "bookie",
        logSizeLimit=256 * 1024,
        flushInterval=100,
        dbStorage_writeCacheMaxSizeMb=1,
        compactionRateByBytes=0,
    )
    rng = random.Random(SEED + 3)
    acked: dict[int, set[int]] = {}
    deleted: set[int] = set()
    deleting: set[int] = set()  # killed during the deletion: either state is right
    for round_no in range(max(ROUNDS, 20)):
        spec = {
            "config": config,
            "mode": "churn",
            "seed": SEED + 300 + round_no,
            "first_ledger": 1 + round_no * 10_000,
        }
        lines = run_child(
            spec, tmp_path / f"churn-{round_no}.stderr", "READY", rng.uniform(0.1, 0.8)
        )
        for ledger_id, ids in parse_acks(lines).items():
            acked.setdefault(ledger_id, set()).update(ids)
        deleted |= {int(line.split()[1]) for line in lines if line.startswith("DELETED ")}
        deleting |= {int(line.split()[1]) for line in lines if line.startswith("DELETING ")}
        deleting -= deleted
        with open_ledger_storage(**config) as storage:
            present = set(storage.list_ledgers())
            assert not deleted & present, f"round {round_no}: deleted ledgers came back"
            problems = [
                p
                for ledger, ids in acked.items()
                if ledger not in deleted and (ledger in present or ledger not in deleting)
                for p in check_churned(storage, ledger, ids)
            ]
        assert not problems, f"seed {SEED}, round {round_no}: {problems[:5]}"
    assert sum(len(ids) for ids in acked.values()) > 0


def check_churned(storage: LedgerStorage, ledger_id: int, acked: set[int]) -> list[str]:
    problems = []
    for entry_id in sorted(acked):
        try:
            data = storage.read_entry(ledger_id, entry_id)
        except (NoSuchLedgerExistsException, NoSuchEntryException) as exc:
            problems.append(f"ledger {ledger_id} entry {entry_id}: {type(exc).__name__}")
            continue
        if data != payload(ledger_id, entry_id, max_size=8192):
            problems.append(f"ledger {ledger_id} entry {entry_id}: wrong bytes")
    return problems


def test_acknowledged_entries_survive_crashes_during_recovery_sessions(tmp_path: Path) -> None:
    """Kill after kill with no clean open in between: each child replays the last one's crash."""
    config = crash_config(tmp_path / "bookie")
    rng = random.Random(SEED + 1)
    acked: dict[int, set[int]] = {ledger: set() for ledger in LEDGERS}
    for round_no in range(6):
        lines = run_child(
            crash_writer_spec(config, SEED + 100 + round_no),
            tmp_path / f"child-{round_no}.stderr",
            "READY",
            rng.uniform(0.1, 0.6),
        )
        for ledger_id, start in resume_points(lines).items():
            highest = max(acked[ledger_id], default=-1)
            assert start > highest, (
                f"seed {SEED} round {round_no}: ledger {ledger_id} resumed at {start}"
            )
        for ledger_id, ids in parse_acks(lines).items():
            acked[ledger_id] |= ids

    with open_ledger_storage(**config) as storage:
        problems = [p for ledger in LEDGERS for p in check_ledger(storage, ledger, acked[ledger])]
    assert not problems, f"seed {SEED}: {problems}"


@pytest.mark.parametrize(
    ("checkpoint_before_delete", "delay_s"),
    [(False, 0.0), (True, 0.0), (False, 0.4), (True, 0.4)],
)
def test_deleted_ledger_stays_deleted_after_kill_9(
    tmp_path: Path, checkpoint_before_delete: bool, delay_s: float
) -> None:
    config = crash_config(tmp_path / "bookie")
    victim, keeper = 7, 8
    spec = {
        "config": config,
        "mode": "delete",
        "victim": victim,
        "keeper": keeper,
        "entries": 200,
        "checkpoint": checkpoint_before_delete,
        "seed": SEED,
    }
    lines = run_child(spec, tmp_path / "child.stderr", "DELETED", delay_s)
    acked = parse_acks(lines).get(keeper, set())
    assert acked

    for _ in range(2):  # after the crash replay, and again after a clean restart
        with open_ledger_storage(**config) as storage:
            assert storage.ledger_exists(victim) is False
            assert victim not in storage.list_ledgers()
            with pytest.raises(NoSuchLedgerExistsException):
                storage.read_entry(victim, 0)
            with pytest.raises(NoSuchLedgerExistsException):
                storage.last_entry_id(victim)
            assert check_ledger(storage, keeper, acked) == []


def test_fence_and_explicit_lac_survive_kill_9(tmp_path: Path) -> None:
    config = crash_config(tmp_path / "bookie")
    ledger_id = 9
    spec = {"config": config, "mode": "meta", "ledger": ledger_id, "lac": "lac-9"}
    run_child(spec, tmp_path / "child.stderr", "META", 0.0)

    with open_ledger_storage(**config) as storage:
        assert storage.read_master_key(ledger_id) == master_key(ledger_id)
        assert storage.is_fenced(ledger_id) is True
        assert storage.get_explicit_lac(ledger_id) == b"lac-9"
        assert storage.read_entry(ledger_id, 0) == payload(ledger_id, 0)
        with pytest.raises(LedgerFencedException):
            storage.add_entry(ledger_id, 1, b"late", master_key(ledger_id))
