"""Storage at scale: many entries indexed with bounded memory, restart time, index lookups.

Fills one `LedgerStorage` from Rust (`pybkx._core.fill_storage`, feature ``bench``) with N small
entries written interleaved over many ledgers, as a busy bookie receives them; then reports the
process's resident memory (the storage is the process: no server), the on-disk index size, the
time to reopen after a clean close and after a crash (a child SIGKILLed after the fill, so the
journal since the last checkpoint is replayed), and index lookups per second from cached blocks
(a hot range) and over the whole key space (mostly block-cache misses served from the OS page
cache). Not a test (`make bench-storage-scale ENTRIES=200000000`): it never asserts on timings.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.cli import report_figures, work_dir
from pybkx._core import fill_storage, index_lookups
from pybkx.bookie import open_ledger_storage

CHILD = r"""
import sys
from pybkx._core import fill_storage
from pybkx.bookie import open_ledger_storage
root, ledgers, entries, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
s = open_ledger_storage(**__import__("json").loads(sys.argv[5]))
fill_storage(s, ledgers, entries, size)
print("filled", flush=True)
sys.stdin.read()
"""


def config(root: Path, cache_mb: int) -> dict[str, Any]:
    return {
        "journalDirectories": str(root / "journal"),
        "ledgerDirectories": str(root / "ledgers"),
        "journalPreAllocSizeMB": 64,
        "journalSyncData": True,
        "dbStorage_rocksDB_blockCacheSize": cache_mb << 20,
    }


def status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def dir_bytes(path: Path, suffix: str) -> int:
    return sum(p.stat().st_size for p in path.rglob(f"*{suffix}"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--entries", type=int, default=20_000_000)
    parser.add_argument("--ledgers", type=int, default=1000)
    parser.add_argument("--payload", type=int, default=16)
    parser.add_argument("--block-cache-mb", type=int, default=128)
    parser.add_argument("--crash-entries", type=int, default=2_000_000)
    parser.add_argument("--lookups", type=int, default=2_000_000)
    parser.add_argument("--dir", default=None, help="where to write (default: a temp dir)")
    parser.add_argument("--json", default=None, help="write the figures here too")
    args = parser.parse_args(argv)

    out: dict[str, Any] = {"entries": args.entries, "ledgers": args.ledgers}
    with work_dir(args.dir, "pybkx-scale-") as base:
        root = base / "scale"
        shutil.rmtree(root, ignore_errors=True)
        cfg = config(root, args.block_cache_mb)
        out |= fill(cfg, root, args)
        out |= lookups(cfg, args)
        out["reopen_after_kill9_s"] = reopen_after_kill(cfg, root, args)
    return report_figures(out, args.json)


def fill(cfg: dict[str, Any], root: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Fill the storage, close it cleanly: the fill's rate, the memory it took, the journal and
    index it left."""
    out: dict[str, Any] = {}
    storage = open_ledger_storage(**cfg)
    seconds = fill_storage(storage, args.ledgers, args.entries, args.payload)
    out["fill_entries_per_s"] = round(args.entries / seconds)
    out["rss_after_fill_mib"] = status_kib("VmRSS") // 1024
    out["peak_rss_mib"] = status_kib("VmHWM") // 1024
    # Bounded by the timed checkpoints (journalMaxBackups files behind the last one), however
    # long the fill ran.
    out["journal_bytes_after_fill"] = dir_bytes(root / "journal", ".txn")
    storage.checkpoint()
    time.sleep(2)  # let background merges settle
    storage.close()
    out["index_bytes"] = dir_bytes(root, ".idx")
    out["index_bytes_per_entry"] = round(out["index_bytes"] / args.entries, 2)
    out["entry_log_bytes"] = dir_bytes(root, ".log")
    return out


def lookups(cfg: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """Reopen after the clean close: how long it took, and index lookups per second in a hot
    range and over every ledger."""
    out: dict[str, Any] = {}
    started = time.perf_counter()
    storage = open_ledger_storage(**cfg)
    out["reopen_clean_s"] = round(time.perf_counter() - started, 3)
    per_ledger = args.entries // args.ledgers
    hot_span = max(1, min(per_ledger, 2000))
    index_lookups(storage, 100, hot_span, 200_000)  # warm the hot range's blocks
    hot = index_lookups(storage, 100, hot_span, args.lookups)
    out["lookups_hot_per_s"] = round(args.lookups / hot.seconds)
    assert hot.found == args.lookups, (hot.found, args.lookups)
    uniform = index_lookups(storage, args.ledgers, per_ledger, args.lookups // 4)
    out["lookups_uniform_per_s"] = round(args.lookups // 4 / uniform.seconds)
    assert uniform.found == args.lookups // 4, (uniform.found, args.lookups // 4)
    out["rss_after_lookups_mib"] = status_kib("VmRSS") // 1024
    storage.close()
    return out


def reopen_after_kill(cfg: dict[str, Any], root: Path, args: argparse.Namespace) -> float:
    """Seconds to reopen after a crash: a child adds more (entries past the last checkpoint)
    and is SIGKILLed, so the reopen replays the journal."""
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            CHILD,
            str(root),
            str(args.ledgers + 1000),
            str(args.crash_entries),
            str(args.payload),
            json.dumps(cfg),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    line = child.stdout.readline()
    assert line.strip() == "filled", line
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    started = time.perf_counter()
    storage = open_ledger_storage(**cfg)
    reopened_s = round(time.perf_counter() - started, 3)
    storage.close()
    return reopened_s


if __name__ == "__main__":
    raise SystemExit(main())
