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
Not a test (``make bench-cold-read``): it never asserts on timings.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.cli import report_figures, work_dir
from bench.machine import MIB, disk_read_buffered, disk_read_direct, drop_cache
from pybkx._core import fill_storage
from pybkx.bookie import open_ledger_storage


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    with work_dir(args.dir, "pybkx-cold-") as base:
        root = base / "cold"
        shutil.rmtree(root, ignore_errors=True)
        journal = Path(args.journal_dir) / "cold-journal" if args.journal_dir else root / "journal"
        shutil.rmtree(journal, ignore_errors=True)
        cfg = _storage_config(args, root, journal)
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
            out |= _read_rounds(args, cfg, root)
        finally:
            if args.journal_dir:
                shutil.rmtree(journal, ignore_errors=True)
    return report_figures(out, args.json)


def _parser() -> argparse.ArgumentParser:
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
    return parser


def _storage_config(args: argparse.Namespace, root: Path, journal: Path) -> dict[str, Any]:
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
    return cfg


def _read_ledger_mb_s(
    args: argparse.Namespace, cfg: dict[str, Any], root: Path, mode: str
) -> float:
    """MiB/s of the target ledger read back cold through a reopened storage, by ``batch``
    reads or by single reads."""
    ledger_bytes = args.entries_per_ledger * args.payload
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


def _read_rounds(args: argparse.Namespace, cfg: dict[str, Any], root: Path) -> dict[str, Any]:
    """The ledger's reads and the disk's, ``args.rounds`` times: each round's figures, their
    medians, and the medians of the ratios within a round."""
    logs = sorted((root / "ledgers").rglob("*.log"), key=lambda p: p.stat().st_size)

    def cold(read: Callable[[Path], float]) -> Callable[[], float]:
        def measure() -> float:
            drop_cache(root)
            return read(logs[-1])

        return measure

    readers: dict[str, Callable[[], float]] = {
        "disk": cold(disk_read_buffered),
        "disk_direct": cold(disk_read_direct),
        "batch": lambda: _read_ledger_mb_s(args, cfg, root, "batch"),
        "single": lambda: _read_ledger_mb_s(args, cfg, root, "single"),
    }
    # This machine's disk serves bursts far faster than it sustains (docs/performance.md,
    # "Storage at scale", what the disk's sequential speed is): each round measures the disk
    # and both reads back to back, in an order that alternates, and the ratios are taken
    # within a round.
    rounds = []
    for r in range(args.rounds):
        figures: dict[str, float] = {}
        order = list(readers) if r % 2 == 0 else list(reversed(readers))
        for what in order:
            figures[what] = readers[what]()
        rounds.append({k: round(v, 1) for k, v in figures.items()})
    out: dict[str, Any] = {"rounds": rounds}
    for what in readers:
        out[f"median_{what}_mb_s"] = round(statistics.median(f[what] for f in rounds), 1)
    for mode in ("batch", "single"):
        for disk in ("disk", "disk_direct"):
            out[f"{mode}_vs_{disk}"] = round(
                statistics.median(f[mode] / f[disk] for f in rounds), 2
            )
    return out


if __name__ == "__main__":
    raise SystemExit(main())
