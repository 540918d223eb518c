"""Garbage collection and compaction of entry logs, timed, beside the disk's write limit.

1. 10,000 ledgers (10 entries of 1 KiB each) written, checkpointed, all deleted: the deletions'
   time and one `gc_entry_logs()` pass (logs removed, bytes freed, seconds).
2. 101 ledgers of 4 KiB entries written interleaved (``--megabytes``), 70 of them deleted, then
   a major compaction (threshold 0.8, unpaced): live MB rewritten per second and logs scanned
   per second, beside the disk's sequential write + fdatasync speed measured in the same run.
Not a test (``make bench-gc``): it never asserts on timings.
"""

from __future__ import annotations

import argparse
import shutil
import time
from pathlib import Path
from typing import Any

from bench.cli import report_figures, work_dir
from bench.machine import MIB, disk_write_synced_once
from pybkx._core import fill_storage
from pybkx.bookie import open_ledger_storage

DISK_PROBE_MB = 256


def disk_write_mb_s(directory: Path) -> float:
    """MiB/s of DISK_PROBE_MB written in 4 MiB writes and synced once."""
    return DISK_PROBE_MB / disk_write_synced_once(directory, DISK_PROBE_MB * MIB, 4 * MIB)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--ledgers", type=int, default=10_000)
    parser.add_argument("--megabytes", type=int, default=1024)
    parser.add_argument("--dir", default=None)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    out: dict[str, Any] = {}
    with work_dir(args.dir, "pybkx-gc-") as base:
        root = base / "gc"
        shutil.rmtree(root, ignore_errors=True)
        cfg = {
            "journalDirectories": str(root / "journal"),
            "ledgerDirectories": str(root / "ledgers"),
            "journalPreAllocSizeMB": 64,
            "logSizeLimit": 64 * MIB,
            "gcWaitTime": 0,
            "majorCompactionInterval": 0,
            "minorCompactionInterval": 0,
            "compactionRateByBytes": 0,
        }
        storage = open_ledger_storage(**cfg)
        payload = b"g" * 1024
        for ledger in range(1, args.ledgers + 1):
            storage.add_entries(ledger, [(e, payload) for e in range(10)], b"k")
        storage.checkpoint()
        started = time.perf_counter()
        for ledger in range(1, args.ledgers + 1):
            storage.delete_ledger(ledger)
        out["delete_10k_ledgers_s"] = round(time.perf_counter() - started, 3)
        storage.checkpoint()
        started = time.perf_counter()
        gc = storage.gc_entry_logs()
        out["gc_s"] = round(time.perf_counter() - started, 3)
        out["gc_logs_removed"] = gc.logs_removed
        out["gc_freed_mb"] = round(gc.bytes_freed / MIB, 1)
        storage.close()
        shutil.rmtree(root)

        storage = open_ledger_storage(**cfg)
        entries = args.megabytes * MIB // 4096
        fill_storage(storage, 101, entries, 4096)
        for ledger in range(1, 71):
            storage.delete_ledger(ledger)
        storage.checkpoint()
        scanned = sum(p.stat().st_size for p in (root / "ledgers").rglob("*.log"))
        started = time.perf_counter()
        compaction = storage.compact(0.8)
        secs = time.perf_counter() - started
        storage.close()
        out["compaction_logs"] = compaction.logs_compacted
        out["compaction_s"] = round(secs, 2)
        out["compaction_moved_mb_s"] = round(compaction.bytes_moved / MIB / secs, 1)
        out["compaction_scanned_mb_s"] = round(scanned / MIB / secs, 1)
        out["compaction_freed_mb"] = round(compaction.bytes_freed / MIB, 1)
        out["disk_write_mb_s"] = round(disk_write_mb_s(root), 1)
        out["moved_vs_disk_write"] = round(out["compaction_moved_mb_s"] / out["disk_write_mb_s"], 2)
    return report_figures(out, args.json)


if __name__ == "__main__":
    raise SystemExit(main())
