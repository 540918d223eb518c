"""Cold read of one ledger written interleaved with 100 others, beside the disk's own speed.

Writes 101 ledgers interleaved (entry i to ledger i % 101) through one `LedgerStorage`, closes
it, drops every file of the storage from the OS page cache (`posix_fadvise(DONTNEED)` on each,
so the code being timed is not paged out too), then reads one ledger back: by batch reads (as
the Spark reader and recovery do) and by single reads (read-ahead). The disk's sequential read
bandwidth is measured in the same rounds by reading one large entry log, equally cold, twice: as
an application reads a file (through the page cache, the kernel reading ahead) and as the device
serves it (``O_DIRECT``, 4 MiB requests, four at a time); the ratios are taken within each round
and their medians reported. With
``--journal-dir`` the journal goes to another directory (another device, or a tmpfs in a clearly
labelled run): BookKeeper's advice of a journal apart from the ledger directories.
Not a test: ``make bench-cold-read``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.machine import disk_read_direct, report_figures
from pybkx._core import fill_storage
from pybkx.bookie import open_ledger_storage

MIB = 1 << 20


def drop_cache(root: Path) -> None:
    """Evict the files under ``root`` from the page cache (written data is synced first)."""
    for path in root.rglob("*"):
        if path.is_file():
            try:
                fd = os.open(path, os.O_RDONLY)
            except FileNotFoundError:
                continue  # removed since listed (an open storage merges its index files)
            try:
                os.fsync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def disk_read_mb_s(path: Path) -> float:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        total = 0
        started = time.perf_counter()
        while chunk := os.read(fd, 4 * MIB):
            total += len(chunk)
        return total / MIB / (time.perf_counter() - started)
    finally:
        os.close(fd)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--ledgers", type=int, default=101)
    # 128 MB per ledger (13 GB in all): a read long enough to measure a bandwidth, not the
    # latency of its first requests.
    parser.add_argument("--entries-per-ledger", type=int, default=32000)
    parser.add_argument("--payload", type=int, default=4096)
    parser.add_argument("--target", type=int, default=51, help="the ledger read back")
    parser.add_argument("--dir", default=None)
    parser.add_argument("--journal-dir", default=None, help="journal apart (another device)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--write-cache-mb", type=int, default=None)
    parser.add_argument(
        "--buffered-reads",
        dest="direct_reads",
        action="store_false",
        help="entryLogDirectReads=false (reads through the page cache; direct is the default)",
    )
    parser.add_argument(
        "--read-ahead-threads",
        type=int,
        default=None,
        help="entryLogReadAheadThreads (default: the bookie's default)",
    )
    parser.add_argument(
        "--read-ahead-cache-mb",
        type=int,
        default=None,
        help="dbStorage_readAheadCacheMaxSizeMb (default: the bookie's default)",
    )
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)

    base = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="pybkx-cold-"))
    root = base / "cold"
    shutil.rmtree(root, ignore_errors=True)
    journal = Path(args.journal_dir) / "cold-journal" if args.journal_dir else root / "journal"
    shutil.rmtree(journal, ignore_errors=True)
    cfg: dict[str, Any] = {
        "journalDirectories": str(journal),
        "ledgerDirectories": str(root / "ledgers"),
        "journalPreAllocSizeMB": 64,
        # Journal files kept after checkpoints (journalMaxBackups of them) stay small, so that
        # the 13 GB fill fits a tmpfs journal.
        "journalMaxSizeMB": 256,
    }
    if args.write_cache_mb:
        cfg["dbStorage_writeCacheMaxSizeMb"] = args.write_cache_mb
    cfg["entryLogDirectReads"] = args.direct_reads
    if args.read_ahead_cache_mb is not None:
        cfg["dbStorage_readAheadCacheMaxSizeMb"] = args.read_ahead_cache_mb
    if args.read_ahead_threads is not None:
        cfg["entryLogReadAheadThreads"] = args.read_ahead_threads
    out: dict[str, Any] = {
        "ledgers": args.ledgers,
        "entries_per_ledger": args.entries_per_ledger,
        "payload": args.payload,
        "layout": f"journal apart, in {args.journal_dir}" if args.journal_dir else "one disk",
        "write_cache_mb": args.write_cache_mb or 64,
        "entry_log_direct_reads": args.direct_reads,
        "read_ahead_threads": cfg.get("entryLogReadAheadThreads", "default"),
        "read_ahead_cache_mb": cfg.get("dbStorage_readAheadCacheMaxSizeMb", "default"),
    }
    try:
        storage = open_ledger_storage(**cfg)
        total = args.ledgers * args.entries_per_ledger
        secs = fill_storage(storage, args.ledgers, total, args.payload)
        out["write_mb_s"] = round(total * args.payload / MIB / secs, 1)
        storage.close()
        logs = sorted((root / "ledgers").rglob("*.log"), key=lambda p: p.stat().st_size)
        ledger_bytes = args.entries_per_ledger * args.payload

        def read_ledger(mode: str) -> float:
            drop_cache(root)
            storage = open_ledger_storage(**cfg)
            drop_cache(root)
            started = time.perf_counter()
            read = 0
            if mode == "batch":
                entry = 0
                while entry < args.entries_per_ledger:
                    chunk = storage.read_range(args.target, entry, 256, 4 * MIB)
                    read += sum(len(c) for c in chunk)
                    entry += len(chunk)
            else:
                for entry in range(args.entries_per_ledger):
                    read += len(storage.read_entry(args.target, entry))
            elapsed = time.perf_counter() - started
            storage.close()
            assert read == ledger_bytes, (read, ledger_bytes)
            return ledger_bytes / MIB / elapsed

        def read_disk() -> float:
            drop_cache(root)
            return disk_read_mb_s(logs[-1])

        def read_disk_direct() -> float:
            drop_cache(root)
            return disk_read_direct(logs[-1])

        readers = {
            "disk": read_disk,
            "disk_direct": read_disk_direct,
            "batch": lambda: read_ledger("batch"),
            "single": lambda: read_ledger("single"),
        }

        # This machine's disk serves bursts far faster than it sustains (1 to 2.2 GB/s within
        # a minute): each round measures the disk and both reads back to back, in an order that
        # alternates, and the ratios are taken within a round.
        rounds = []
        for r in range(args.rounds):
            figures: dict[str, float] = {}
            order = list(readers) if r % 2 == 0 else list(reversed(readers))
            for what in order:
                figures[what] = readers[what]()
            rounds.append({k: round(v, 1) for k, v in figures.items()})
        out["rounds"] = rounds
        for what in readers:
            out[f"median_{what}_mb_s"] = round(statistics.median(f[what] for f in rounds), 1)
        for mode in ("batch", "single"):
            for disk in ("disk", "disk_direct"):
                out[f"{mode}_vs_{disk}"] = round(
                    statistics.median(f[mode] / f[disk] for f in rounds), 2
                )
    finally:
        if not args.dir:
            shutil.rmtree(base, ignore_errors=True)
        if args.journal_dir:
            shutil.rmtree(journal, ignore_errors=True)
    return report_figures(out, args.json)


if __name__ == "__main__":
    raise SystemExit(main())
