"""Adds with demotion running beside adds without it, same run, rounds interleaved.

Two-tier storage (directories on this machine's disk; quotas make the top tier small). With
demotion: the top tier's quota (``--quota-mb``) is a fraction of what the run writes and its
watermarks are 0.6/0.3, so the mover copies cold logs down the whole time, paced to
``--rate-mb`` MiB/s (``tieredStorageMoveRateByBytes``). Without: the same layout with a high
watermark of 1.0 (never passed) and a quota the run does not fill. Writers add ``--entry-kb``
KiB entries, one blocking add at a time per thread (``--writers`` threads, one ledger each),
for ``--seconds`` per round. Reported per mode: adds per second, add latency p50/p99 (ms),
MiB moved between tiers; and the ratios with/without. Not a test (``make bench-tiers``): it
never asserts on timings.
"""

from __future__ import annotations

import argparse
import shutil
import threading
import time
from pathlib import Path
from typing import Any

from bench.cli import report_figures, work_dir
from pybkx.bookie import open_ledger_storage

MIB = 1 << 20


def one_round(root: Path, demote: bool, args: argparse.Namespace) -> dict[str, float]:
    shutil.rmtree(root, ignore_errors=True)
    quota = args.quota_mb * MIB if demote else 64 * args.quota_mb * MIB
    storage = open_ledger_storage(
        journalDirectories=str(root / "journal"),
        indexDirectories=str(root / "index"),
        tieredStorageLevels=2,
        tieredStorageLevel0Dirs=str(root / "top"),
        tieredStorageLevel0DirsQuota=str(quota),
        tieredStorageLevel0HighWatermark=0.6 if demote else 1.0,
        tieredStorageLevel0LowWatermark=0.3,
        tieredStorageLevel1Dirs=str(root / "low"),
        entryLogReviewerClass="AcceptingReviewer",
        tieredStorageMoveRateByBytes=args.rate_mb * MIB,
        logSizeLimit=args.log_mb * MIB,
        journalPreAllocSizeMB=16,
    )
    payload = b"t" * (args.entry_kb * 1024)
    latencies: list[list[float]] = [[] for _ in range(args.writers)]
    stop = threading.Event()

    def writer(i: int) -> None:
        ledger, entry, key = i + 1, 0, b"k"
        out = latencies[i]
        while not stop.is_set():
            started = time.perf_counter()
            storage.add_entry(ledger, entry, payload, key)
            out.append(time.perf_counter() - started)
            entry += 1

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(args.writers)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    time.sleep(args.seconds)
    stop.set()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - started
    metrics = {m[0]: m for m in storage_metrics(storage)}
    storage.close()
    all_lat = sorted(x for lat in latencies for x in lat)
    moved = metrics.get("pybkx_tier_moved_bytes", ("", 0.0))[1]
    shutil.rmtree(root, ignore_errors=True)
    return {
        "adds_per_s": len(all_lat) / elapsed,
        "p50_ms": all_lat[len(all_lat) // 2] * 1000,
        "p99_ms": all_lat[int(len(all_lat) * 0.99)] * 1000,
        "moved_mb": moved / MIB,
    }


def storage_metrics(storage: Any) -> list[tuple[str, float]]:
    """(name, value) of the storage's counters and gauges."""
    out = []
    for metric in storage.metrics():
        if isinstance(metric.value, int | float):
            out.append((metric.name, float(metric.value)))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--entry-kb", type=int, default=4)
    parser.add_argument("--quota-mb", type=int, default=64)
    parser.add_argument("--log-mb", type=int, default=8)
    parser.add_argument("--rate-mb", type=int, default=32)
    parser.add_argument("--dir", default=None)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    runs: dict[bool, list[dict[str, float]]] = {True: [], False: []}
    with work_dir(args.dir, "pybkx-tiers-") as base:
        for _ in range(args.rounds):
            for demote in (False, True):
                runs[demote].append(one_round(base / "tiers", demote, args))
    out: dict[str, Any] = {}
    for demote, name in ((False, "without"), (True, "with")):
        rounds = runs[demote]
        for key in ("adds_per_s", "p50_ms", "p99_ms", "moved_mb"):
            out[f"{name}_{key}"] = round(sum(r[key] for r in rounds) / len(rounds), 2)
    out["throughput_with_vs_without"] = round(out["with_adds_per_s"] / out["without_adds_per_s"], 2)
    out["p99_with_vs_without"] = round(out["with_p99_ms"] / out["without_p99_ms"], 2)
    return report_figures(out, args.json)


if __name__ == "__main__":
    raise SystemExit(main())
