"""Add throughput of pybkx._core.LedgerStorage against the disk's own fdatasync limit.

Owns the storage write benchmark (a script, run by hand); must never assert on timings.

    python bench/storage_throughput.py [--seconds 3] [--dir PATH]

For 1 and 8 writer threads (each on its own ledger) x 100 B and 1 KiB payloads x three modes:
  sync       one add in flight per writer (``add_entry``)
  pipelined  each writer submits ``add_entries`` batches of 64 and waits for each batch
  stream     each writer submits batches of 4096: the journal queue never drains, as in a
             bookie serving many pipelining clients
with ``journalSyncData=True`` and BookKeeper's group-commit defaults. Each run prints entries/s,
MB/s (payload) and the journal's entries per fsync (from ``stats()`` deltas). Beside it, the same
process measures the disk: one thread writing the same bytes (payload + the 25 B journal record
overhead per entry) to a file in the same directory with ``os.write`` + ``os.fdatasync`` at the
engine's cadence (its entries per fsync). Engine and disk alternate in slices so that drift of a
shared disk hits both; the table shows medians and the median of the paired ratios. One extra run
shows sync x 1 writer with ``journalFlushWhenQueueEmpty=True``.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pybkx._core import LedgerStorage
from pybkx.bookie import open_ledger_storage

RECORD_OVERHEAD_BYTES = 25  # journal record: length, crc32c, kind, ledger id, entry id
BATCHES = {"pipelined": 64, "stream": 4096}
PREALLOC_BYTES = 16 << 20  # journalPreAllocSizeMB default: the baseline grows its file likewise
SLICES = 3  # engine and disk alternate this many times per configuration


@dataclass
class EngineRun:
    writers: int
    size_bytes: int
    mode: str
    extra: dict[str, Any]
    entries: int = 0
    elapsed_s: float = 0.0
    stats_delta: dict[str, int] = field(default_factory=dict)
    call_latencies_s: list[float] = field(default_factory=list)

    @property
    def entries_per_s(self) -> float:
        return self.entries / self.elapsed_s if self.elapsed_s else 0.0

    @property
    def mb_per_s(self) -> float:
        return self.entries_per_s * self.size_bytes / 1e6

    @property
    def entries_per_sync(self) -> float:
        syncs = self.stats_delta.get("pybkx_journal_syncs", 0)
        journalled = self.stats_delta.get("pybkx_journal_entries", self.entries)
        return journalled / syncs if syncs else float("nan")

    def latency_us(self, q: float) -> float:
        if not self.call_latencies_s:
            return float("nan")
        ordered = sorted(self.call_latencies_s)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1e6


def stats_delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {k: after[k] - before.get(k, 0) for k in after}


def run_engine(
    root: Path, writers: int, size_bytes: int, mode: str, seconds: float, extra: dict[str, Any]
) -> EngineRun:
    run = EngineRun(writers, size_bytes, mode, extra)
    workdir = Path(tempfile.mkdtemp(prefix="engine-", dir=root))
    config: dict[str, Any] = {
        "journalDirectories": [str(workdir / "journal")],
        "ledgerDirectories": [str(workdir / "ledgers")],
        "journalSyncData": True,
        **extra,
    }
    for key in ("journalDirectories", "ledgerDirectories"):
        Path(config[key][0]).mkdir(parents=True)

    storage = open_ledger_storage(**config)
    try:
        Writers(storage, writers, size_bytes, mode).measure(run, seconds)
    finally:
        storage.close()
        shutil.rmtree(workdir, ignore_errors=True)
    return run


class Writers:
    """The writer threads of one engine run, each adding to a ledger of its own in ``mode``
    until stopped, every call's latency kept."""

    def __init__(self, storage: LedgerStorage, writers: int, size_bytes: int, mode: str) -> None:
        self._storage = storage
        self._size_bytes = size_bytes
        self._mode = mode
        self._start = threading.Barrier(writers + 1)
        self._stop = threading.Event()
        self._counts = [0] * writers
        self._latencies: list[list[float]] = [[] for _ in range(writers)]
        self._errors: list[BaseException] = []

    def measure(self, run: EngineRun, seconds: float) -> None:
        """Start the writers, let them write for ``seconds`` (their warm-up add not counted),
        stop them and fill ``run``. Raises what a writer raised."""
        threads = [
            threading.Thread(target=self._write, args=(i,)) for i in range(len(self._counts))
        ]
        for t in threads:
            t.start()
        try:
            self._start.wait()
        except threading.BrokenBarrierError:
            for t in threads:
                t.join()
            raise self._errors[0] from None
        before = self._storage.stats()
        t0 = time.perf_counter()
        time.sleep(seconds)
        self._stop.set()
        for t in threads:
            t.join()
        run.elapsed_s = time.perf_counter() - t0
        run.stats_delta = stats_delta(before, self._storage.stats())
        if self._errors:
            raise self._errors[0]
        run.entries = sum(self._counts)
        run.call_latencies_s = [x for lat in self._latencies for x in lat]

    def _write(self, index: int) -> None:
        storage = self._storage
        ledger_id = index + 1
        key = f"bench-{ledger_id}".encode()
        data = os.urandom(self._size_bytes)
        entry_id = 0
        lat = self._latencies[index]
        try:
            storage.add_entry(ledger_id, entry_id, data, key)  # create the ledger, warm up
            entry_id += 1
            self._start.wait()
            while not self._stop.is_set():
                t0 = time.perf_counter()
                if self._mode in BATCHES:
                    n = BATCHES[self._mode]
                    batch = [(e, data) for e in range(entry_id, entry_id + n)]
                    storage.add_entries(ledger_id, batch, key)
                    entry_id += n
                else:
                    storage.add_entry(ledger_id, entry_id, data, key)
                    entry_id += 1
                lat.append(time.perf_counter() - t0)
        except BaseException as exc:
            self._errors.append(exc)
            self._start.abort()
        finally:
            self._counts[index] = entry_id - 1  # the warm-up entry is not measured


def disk_slice(root: Path, size_bytes: int, entries_per_sync: float, seconds: float) -> float:
    """Entries/s of a plain write + fdatasync loop with the engine's entries per sync."""
    record = os.urandom(size_bytes + RECORD_OVERHEAD_BYTES)
    per_sync = max(entries_per_sync, 1.0) if entries_per_sync == entries_per_sync else 1.0
    group = record * (int(per_sync) + 1)
    path = root / "disk-baseline.dat"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        allocated = 0
        written = 0
        entries = 0
        carry = 0.0
        t0 = time.perf_counter()
        deadline = t0 + seconds
        while time.perf_counter() < deadline:
            carry += per_sync
            k = int(carry)
            carry -= k
            chunk = group[: k * len(record)]
            if written + len(chunk) > allocated:
                os.posix_fallocate(fd, allocated, PREALLOC_BYTES)
                allocated += PREALLOC_BYTES
            written += os.write(fd, chunk)
            os.fdatasync(fd)
            entries += k
        return entries / (time.perf_counter() - t0)
    finally:
        os.close(fd)
        path.unlink(missing_ok=True)


def fmt(x: float, digits: int = 0) -> str:
    if x != x:  # NaN
        return "-"
    return f"{x:,.{digits}f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="length of each measurement")
    parser.add_argument(
        "--dir", type=Path, default=None, help="where to write (default: a tmp dir)"
    )
    args = parser.parse_args(argv)

    parent = args.dir or Path(tempfile.gettempdir())
    parent.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="pybkx-bench-", dir=parent))

    plan: list[tuple[int, int, str, dict[str, Any]]] = [
        (writers, size, mode, {})
        for size in (100, 1024)
        for writers in (1, 8)
        for mode in ("sync", "pipelined", "stream")
    ]
    plan.insert(1, (1, 100, "sync", {"journalFlushWhenQueueEmpty": True}))

    print(f"# pybkx LedgerStorage add throughput ({args.seconds:g} s per measurement)\n")
    print(
        f"dir `{root}`, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"journalSyncData=True, record overhead for the disk baseline {RECORD_OVERHEAD_BYTES} B\n"
    )
    print(
        "| writers | payload | mode | entries/s | MB/s | entries/fsync | fsyncs/s "
        "| call p50 µs | call p99 µs | disk entries/s | engine/disk |"
    )
    print("|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    stats_keys: list[str] = []
    try:
        for writers, size, mode, extra in plan:
            slice_s = args.seconds / SLICES
            runs: list[EngineRun] = []
            disks: list[float] = []
            for _ in range(SLICES):
                run = run_engine(root, writers, size, mode, slice_s, extra)
                runs.append(run)
                disks.append(disk_slice(root, size, run.entries_per_sync, slice_s))
            stats_keys = sorted(runs[0].stats_delta)
            ratios = [r.entries_per_s / d for r, d in zip(runs, disks, strict=True) if d]
            run = sorted(runs, key=lambda r: r.entries_per_s)[len(runs) // 2]
            disk = statistics.median(disks)
            ratio = statistics.median(ratios) if ratios else float("nan")
            label = mode + (" +flushWhenQueueEmpty" if extra else "")
            syncs_per_s = run.stats_delta.get("pybkx_journal_syncs", 0) / run.elapsed_s
            print(
                f"| {writers} | {size} B | {label} | {fmt(run.entries_per_s)} "
                f"| {fmt(run.mb_per_s, 2)} | {fmt(run.entries_per_sync, 1)} | {fmt(syncs_per_s)} "
                f"| {fmt(run.latency_us(0.5))} | {fmt(run.latency_us(0.99))} "
                f"| {fmt(disk)} | {fmt(ratio, 2)} |",
                flush=True,
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(
        "\nMB/s counts payload bytes. "
        "entries/fsync = Δpybkx_journal_entries / Δpybkx_journal_syncs. "
        "disk entries/s: one thread, os.write + os.fdatasync of (payload + "
        f"{RECORD_OVERHEAD_BYTES} B) x entries/fsync into a file grown by fallocate in "
        f"{PREALLOC_BYTES >> 20} MiB steps. A call is one add_entry or one add_entries batch; "
        f"p50/p99 over all calls of all writers. Engine and disk alternate in {SLICES} slices "
        "per row; entries/s is the median engine slice, disk the median disk slice, "
        "engine/disk the median of the paired ratios."
    )
    print(f"\nstats() keys: {', '.join(stats_keys)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
