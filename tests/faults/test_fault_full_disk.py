"""Fault 2: a full disk. Journal and ledgers on a small file system that fills up: adds must not
hang, the client must fail an append clearly when no writable bookie can take it (not replace
the bookie with itself again and again), nothing acknowledged is lost, and once space returns
the same bookie process takes appends, ``close()`` and ``open_ledger`` again.

Also a disk filled to 100% by a foreign file and then freed by ledger deletes: the space
reserve lets the bookie checkpoint and collect, and it is writable again by itself.

Owns the storage's failure path under ENOSPC (through the filesystem seam) and the whole
cluster's behaviour on a really full tmpfs (root only; skipped clearly otherwise).
"""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.disks import fill, small_tmpfs
from support.wait import wait_until

import pybkx
from pybkx import errors
from pybkx._core import inject_disk_fault, remove_disk_fault
from pybkx.bookie.storage import open_ledger_storage
from pybkx.meta import MetadataStore, open_metadata_store
from pybkx.tools.sandbox import Sandbox

KEY = b"key"
RESULT_TIMEOUT_S = 60.0
"""Bound on every wait: the fault was an append that never returned."""


@contextlib.contextmanager
def cluster(
    bookies: int, *, directory: Path, conf: dict[str, Any]
) -> Iterator[tuple[Sandbox, pybkx.BookKeeper, MetadataStore]]:
    """A sandbox of ``bookies`` with ``conf``, a client that gives up on a bookie fast, and
    the cluster's metadata store."""
    with (
        Sandbox(bookies, directory=directory, conf=conf) as sandbox,
        pybkx.BookKeeper(
            sandbox.metadata_uri, addEntryTimeoutSec=2, bookieReplacementTimeoutMs=3000
        ) as bk,
        open_metadata_store(sandbox.metadata_uri) as store,
    ):
        yield sandbox, bk, store


# --- the storage under injected ENOSPC (any user) --------------------------------------------


def test_a_journal_write_failing_with_enospc_is_held_and_retried_once_space_returns(
    tmp_path: Path,
) -> None:
    """Through the page cache (journalDirectIO=false) the journal thread writes each group and
    holds one whose write failed until it can write it again."""
    keys = {
        "journalDirectories": str(tmp_path / "journal"),
        "ledgerDirectories": str(tmp_path / "ledgers"),
        "journalPreAllocSizeMB": 0,
        "journalDirectIO": False,
        "flushInterval": 0,
    }
    storage = open_ledger_storage(**keys)
    storage.add_entry(1, 0, b"before", KEY)
    fault = inject_disk_fault(str(tmp_path / "journal"), ["write"], errno=errno.ENOSPC)
    outcome: dict[str, object] = {}

    def add() -> None:
        try:
            storage.add_entry(1, 1, b"held", KEY)
            outcome["ok"] = True
        except Exception as exc:
            outcome["error"] = exc

    try:
        adder = threading.Thread(target=add)
        adder.start()
        time.sleep(1.0)  # not a wait: the add is held a second while the fault lasts
        # Not acknowledged while it is not durable, and not failed either: it is retried.
        assert adder.is_alive() and not outcome
        # Meanwhile new requests are refused at once, naming the cause.
        with pytest.raises(errors.BookieException, match="No space left on device"):
            storage.add_entry(1, 2, b"refused", KEY)
    finally:
        remove_disk_fault(fault)
    adder.join(RESULT_TIMEOUT_S)
    assert outcome == {"ok": True}
    storage.add_entry(1, 2, b"after", KEY)
    stats = storage.stats()
    assert stats["pybkx_journal_failures"] >= 1 and stats["pybkx_journal_recoveries"] >= 1
    storage.close()
    reopened = open_ledger_storage(**keys)  # the journal replays cleanly: no torn record
    try:
        assert [reopened.read_entry(1, e) for e in range(3)] == [b"before", b"held", b"after"]
    finally:
        reopened.close()


@pytest.mark.parametrize(
    ("journal_direct_io", "op", "err", "message"),
    [
        (True, "sync", errno.EIO, "Input/output error"),
        (False, "sync", errno.EIO, "Input/output error"),
        # With journalDirectIO (the default) the sync thread writes the group before it syncs
        # it, and a failed write is a failed sync.
        (True, "write", errno.ENOSPC, "No space left on device"),
    ],
    ids=["sync-direct", "sync-page-cache", "write-direct"],
)
def test_a_failed_journal_sync_is_never_acknowledged_and_the_journal_moves_on(
    tmp_path: Path, journal_direct_io: bool, op: str, err: int, message: str
) -> None:
    keys = {
        "journalDirectories": str(tmp_path / "journal"),
        "ledgerDirectories": str(tmp_path / "ledgers"),
        "journalPreAllocSizeMB": 0,
        "journalDirectIO": journal_direct_io,
        "flushInterval": 0,
    }
    storage = open_ledger_storage(**keys)
    storage.add_entry(1, 0, b"before", KEY)
    fault = inject_disk_fault(str(tmp_path / "journal"), [op], errno=err, times=1)
    try:
        with pytest.raises(errors.BookieException, match=message):
            storage.add_entry(1, 1, b"unsynced", KEY)
    finally:
        remove_disk_fault(fault)

    # A new journal file takes the next writes (at most a retry interval later).
    def added_after() -> bool:
        storage.add_entry(1, 2, b"after", KEY)
        return True

    wait_until(
        added_after,
        "a new journal file taking adds",
        timeout_s=RESULT_TIMEOUT_S,
        ignoring=(errors.BookieException,),
    )
    storage.close()
    reopened = open_ledger_storage(**keys)
    try:
        assert reopened.read_entry(1, 0) == b"before"
        assert reopened.read_entry(1, 2) == b"after"
    finally:
        reopened.close()


# --- a cluster on a really full file system (root) -------------------------------------------


def test_a_full_disk_fails_appends_clearly_and_the_bookie_recovers_without_restart(
    tmp_path: Path,
) -> None:
    with small_tmpfs(tmp_path / "disk", 16) as disk:
        conf = {
            "journalDirectories": str(disk / "journal"),
            "ledgerDirectories": str(disk / "ledgers"),
            "journalPreAllocSizeMB": 1,
            "logSizeLimit": 4 << 20,
            "flushInterval": 1000,
            "diskCheckInterval": 500,
        }
        with cluster(1, directory=tmp_path / "sandbox", conf=conf) as (sandbox, bk, store):
            pid = sandbox.pid(0)
            bookie = next(iter(store.writable_bookies()))
            lh = bk.create_ledger(
                ensemble_size=1, write_quorum_size=1, ack_quorum_size=1, password=b"pw"
            )
            data = os.urandom(64 << 10)
            acked: list[int] = []
            started = time.monotonic()
            with pytest.raises(errors.NotEnoughBookiesException) as failed:
                while time.monotonic() - started < RESULT_TIMEOUT_S:
                    acked.append(lh.append_async(data).result(RESULT_TIMEOUT_S))
            message = str(failed.value)
            # The error names the bookie, what it answered, and that it is read-only now.
            assert bookie in message and "no writable bookie" in message, message
            assert "EIO" in message or "EREADONLY" in message or "read-only" in message, message
            assert len(acked) > 10
            wait_until(
                lambda: bookie in store.readonly_bookies(), "registered read-only", timeout_s=10
            )

            # Space returns: the file system is grown, as the probe did.
            subprocess.run(["mount", "-o", "remount,size=64m", str(disk)], check=True)
            wait_until(
                lambda: bookie in store.writable_bookies(),
                "registered writable again",
                timeout_s=10,
            )
            lh.close()  # does not hang
            assert lh.last_add_confirmed == acked[-1]
            rh = bk.open_ledger(lh.ledger_id, b"pw")
            assert rh.last_add_confirmed == acked[-1]
            for first in range(0, len(acked), 32):  # nothing acknowledged was lost
                last = min(first + 31, acked[-1])
                assert all(bytes(e) == data for e in rh.read(first, last))
            rh.close()
            # The client learns of the registration by its watch: allow it a moment.
            again = wait_until(
                lambda: bk.create_ledger(
                    ensemble_size=1, write_quorum_size=1, ack_quorum_size=1, password=b"pw"
                ),
                "a ledger created on the bookie writable again",
                timeout_s=10,
                interval_s=0.1,
                ignoring=(errors.NotEnoughBookiesException,),
                accept=lambda _handle: True,  # a new ledger's handle is falsy (no entries)
            )
            fresh = [os.urandom(64 << 10) for _ in range(20)]
            assert again.append_many(fresh) == 19
            again.close()
            rh = bk.open_ledger(again.ledger_id, b"pw")  # written after the failure: intact
            assert [bytes(e) for e in rh.read(0, 19)] == fresh
            rh.close()
            assert sandbox.pid(0) == pid  # the same bookie process throughout


# --- a disk filled to 100% by a foreign file, then ledgers deleted (root) -------------------

WRITABLE_AGAIN_S = 60.0
"""Bound on a bookie's return to writable after the deletes (the probe measured 1.5 s)."""
FULL_DISK_CONF: dict[str, object] = {
    "journalPreAllocSizeMB": 1,
    "logSizeLimit": 4 << 20,
    "flushInterval": 1000,
    "diskCheckInterval": 500,
    "gcWaitTime": 1000,
    "journalMaxSizeMB": 4,
}
"""Small logs and journal files and fast checks, so that a 48 MiB disk holds several of each."""


def _write_ledgers(bk: pybkx.BookKeeper, count: int, ensemble: int) -> tuple[list[int], bytes]:
    """``count`` closed ledgers of 5 MiB each (80 entries of 64 KiB) on ``ensemble`` bookies."""
    data = os.urandom(64 << 10)
    ids = []
    for _ in range(count):
        lh = bk.create_ledger(ensemble, ensemble, ensemble, password=b"pw")
        assert lh.append_many([data] * 80) == 79
        lh.close()
        ids.append(lh.ledger_id)
    return ids, data


def _all_read_back(bk: pybkx.BookKeeper, ledger_id: int, data: bytes) -> None:
    rh = bk.open_ledger(ledger_id, b"pw")
    try:
        assert rh.last_add_confirmed == 79
        for first in range(0, 80, 16):
            assert all(bytes(e) == data for e in rh.read(first, first + 15))
    finally:
        rh.close()


def _fill_up(disk: Path) -> None:
    """Fill ``disk`` to 100% with a foreign file; a bookie writing at the same moment may take
    the last blocks first (ENOSPC here), which leaves it just as full."""
    try:
        fill(disk, 0)
    except OSError as exc:
        if exc.errno != errno.ENOSPC:
            raise


def _entry_logs(ledgers_dir: Path) -> list[Path]:
    return sorted((ledgers_dir / "current").glob("*.log"))


def _assert_no_empty_log_pile(ledgers_dir: Path) -> None:
    """A failed checkpoint used to leave a new empty entry log each ``flushInterval``."""
    logs = _entry_logs(ledgers_dir)
    assert not [p.name for p in logs if p.stat().st_size == 0], logs
    # 20 MiB of data in logs of 4 MiB, plus the active and a compaction's log.
    assert len(logs) <= 8, [p.name for p in logs]


def test_a_disk_filled_by_a_foreign_file_is_writable_again_after_deletes(tmp_path: Path) -> None:
    """The lead's scenario: one bookie, journal and ledgers on a 48 MiB disk; 4 ledgers of
    5 MiB; a foreign file fills the disk to 100%; 3 ledgers deleted. The bookie turns
    read-only, gives its space reserve back, and is writable again by itself (no restart);
    every entry of the kept ledger reads back, no empty entry logs pile up, and it stops
    cleanly."""
    with small_tmpfs(tmp_path / "disk", 48) as disk:
        conf = {
            **FULL_DISK_CONF,
            "journalDirectories": str(disk / "journal"),
            "ledgerDirectories": str(disk / "ledgers"),
        }
        with cluster(1, directory=tmp_path / "sandbox", conf=conf) as (sandbox, bk, store):
            pid = sandbox.pid(0)
            bookie = next(iter(store.writable_bookies()))
            assert (disk / "ledgers" / "pybkx-space-reserve").stat().st_size > 0
            ids, data = _write_ledgers(bk, 4, 1)
            _fill_up(disk)
            wait_until(
                lambda: bookie in store.readonly_bookies(), "read-only on a full disk", timeout_s=20
            )
            time.sleep(3.0)  # not a wait: the disk stays full over several failed checkpoints
            _assert_no_empty_log_pile(disk / "ledgers")
            for ledger_id in ids[:3]:
                bk.delete_ledger(ledger_id)
            wait_until(
                lambda: bookie in store.writable_bookies(),
                "writable again after the deletes, without a restart",
                timeout_s=WRITABLE_AGAIN_S,
            )
            assert (disk / "ledgers" / "pybkx-space-reserve").exists(), "the reserve is remade"
            _all_read_back(bk, ids[3], data)
            _assert_no_empty_log_pile(disk / "ledgers")
            assert sandbox.pid(0) == pid  # the same bookie process throughout
            assert sandbox.stop_bookie(0) == 0
            log = sandbox.log_path(0).read_text()
            assert "cannot close ledger storage cleanly" not in log


def test_a_full_disk_whose_logs_mix_deleted_and_live_ledgers_is_freed_by_compaction(
    tmp_path: Path,
) -> None:
    """Every entry log holds all four ledgers (written round-robin over several flushes) and a
    checkpoint has let the journal go: deleting 3 ledgers frees few whole logs, not enough to
    get under the low-water mark, so only the compaction the full disk runs within the reserve
    (isForceGCAllowWhenNoSpace false) gives the space back; the bookie is writable again by
    itself and the kept ledger reads back."""
    with small_tmpfs(tmp_path / "disk", 48) as disk:
        conf = {
            **FULL_DISK_CONF,
            "journalMaxBackups": 0,
            # Below the removal of a whole log's worth: only compaction brings the disk there.
            "diskUsageLwmThreshold": 0.8,
            "journalDirectories": str(disk / "journal"),
            "ledgerDirectories": str(disk / "ledgers"),
        }
        with cluster(1, directory=tmp_path / "sandbox", conf=conf) as (sandbox, bk, store):
            bookie = next(iter(store.writable_bookies()))
            data = os.urandom(64 << 10)
            handles = [bk.create_ledger(1, 1, 1, password=b"pw") for _ in range(4)]
            for _ in range(8):
                for lh in handles:
                    lh.append_many([data] * 10)
                time.sleep(0.4)  # not a wait: spreads the writes over several flushes
            for lh in handles:
                lh.close()
            ids = [lh.ledger_id for lh in handles]
            time.sleep(2.5)  # not a wait: a checkpoint covers the journal before the fill
            _fill_up(disk)
            wait_until(
                lambda: bookie in store.readonly_bookies(), "read-only on a full disk", timeout_s=20
            )
            for ledger_id in ids[:3]:
                bk.delete_ledger(ledger_id)
            wait_until(
                lambda: bookie in store.writable_bookies(),
                "writable again after the deletes, without a restart",
                timeout_s=WRITABLE_AGAIN_S,
            )
            _all_read_back(bk, ids[3], data)
            _assert_no_empty_log_pile(disk / "ledgers")
            wait_until(
                lambda: "reclaim on a full disk" in sandbox.log_path(0).read_text(),
                "the reclaiming compaction logged",
                timeout_s=10,
            )


def test_three_full_disks_are_all_writable_again_after_deletes(tmp_path: Path) -> None:
    """Three bookies, each on its own 48 MiB disk, every ledger on all three; every disk
    filled to 100% by a foreign file; 3 of 4 ledgers deleted. Each bookie is writable again
    without a restart and the kept ledger reads back whole."""
    root = tmp_path / "sandbox"
    with contextlib.ExitStack() as disks:
        mounted = []
        for i in range(3):
            disk = disks.enter_context(small_tmpfs(tmp_path / f"disk-{i}", 48))
            slot = root / f"bookie-{i}"
            slot.mkdir(parents=True)
            # The sandbox puts each bookie's directories in its slot: there, on its own disk.
            for name in ("journal", "ledgers"):
                (disk / name).mkdir()
                (slot / name).symlink_to(disk / name)
            mounted.append(disk)
        with cluster(3, directory=root, conf=FULL_DISK_CONF) as (sandbox, bk, store):
            bookies = set(store.writable_bookies())
            assert len(bookies) == 3
            pids = [sandbox.pid(i) for i in range(3)]
            ids, data = _write_ledgers(bk, 4, 3)
            for disk in mounted:
                _fill_up(disk)
            wait_until(
                lambda: bookies <= set(store.readonly_bookies()),
                "all three read-only on full disks",
                timeout_s=20,
            )
            for ledger_id in ids[:3]:
                bk.delete_ledger(ledger_id)
            wait_until(
                lambda: bookies <= set(store.writable_bookies()),
                "all three writable again after the deletes, without a restart",
                timeout_s=WRITABLE_AGAIN_S,
            )
            _all_read_back(bk, ids[3], data)
            for disk in mounted:
                _assert_no_empty_log_pile(disk / "ledgers")
            assert [sandbox.pid(i) for i in range(3)] == pids
