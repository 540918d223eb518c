"""What the scrubber costs and how fast it reads, in one run:

1. Client add p99 through a standalone pybkx bookie whose entry logs hold ``--megabytes`` of
   client entries (added through it first), with the background scrubber at its default rate
   (``scrubRateBytesPerSecond``, a run every second so it reads throughout) beside the same
   bookie with it off, rounds interleaved, the page cache dropped before each round so the
   scrub reads the disk. Adds are sent open loop at ``--rate`` per second (latency counted from
   each add's due time).
2. An unpaced scrub of the same logs (MiB/s of records read and checked) beside a plain
   sequential read of the same files, the page cache dropped before each.

Not a test (``make bench-scrub``): it never asserts on timings; it prints the figures and the
same-run ratios (p99 on/off, scrub/disk read).

    python bench/scrub.py [--megabytes 1024] [--rounds 3] [--rate 2000]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "interop"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import harness

from bench.cli import report_figures, work_dir
from bench.machine import MIB, disk_read_buffered, drop_cache
from pybkx._core import run_load
from pybkx.bookie import open_ledger_storage
from pybkx.config import ServerConfig

PAYLOAD = 4096
LEDGERS = 8
BOOKIE_CONF = "journalPreAllocSizeMB=16\n"


def prefill(workdir: Path, megabytes: int) -> None:
    """``megabytes`` of 4 KiB entries over LEDGERS ledgers, added through the bookie (packaged
    as a client sends them: header and CRC32C digest), its scrubber off."""
    process, address = harness.start_pybkx_bookie(
        workdir, BOOKIE_CONF + "scrubRateBytesPerSecond=0\n"
    )
    try:
        result = run_load(
            address,
            "add",
            in_flight=256,
            ledger_id=1,
            ledgers=LEDGERS,
            count=megabytes * MIB // PAYLOAD,
            payload_size=PAYLOAD,
        )
        if result["errors"]:
            raise RuntimeError(f"{result['errors']} adds failed while filling")
    finally:
        process.stop()


def storage_keys(data: Path) -> dict[str, Any]:
    return {
        "journalDirectories": str(data / "journal"),
        "ledgerDirectories": str(data / "ledgers"),
        "journalPreAllocSizeMB": 16,
        "scrubRateBytesPerSecond": 0,
    }


def unpaced_scrub_vs_disk(data: Path) -> dict[str, float]:
    """MiB/s of an unpaced scrub and of a plain sequential read of the same log files."""
    storage = open_ledger_storage(**storage_keys(data))
    try:
        drop_cache(data)
        started = time.perf_counter()
        report = storage.scrub(0)
        scrub_s = time.perf_counter() - started
    finally:
        storage.close()
    logs = sorted((data / "ledgers" / "current").glob("*.log"))
    drop_cache(data)
    started = time.perf_counter()
    read = sum(p.stat().st_size for p in logs if disk_read_buffered(p) > 0)
    disk_s = time.perf_counter() - started
    scrub_mib_s = report.bytes_scrubbed / MIB / scrub_s
    disk_mib_s = read / MIB / disk_s
    return {
        "scrub_entries_verified": report.entries_verified,
        "scrub_corrupt_entries": report.corrupt_entries,
        "scrub_mib": round(report.bytes_scrubbed / MIB, 1),
        "unpaced_scrub_mib_s": round(scrub_mib_s, 1),
        "sequential_read_mib_s": round(disk_mib_s, 1),
        "scrub_over_disk_read": round(scrub_mib_s / disk_mib_s, 3),
    }


def add_p99_us(workdir: Path, scrub: bool, ledger_id: int, args: argparse.Namespace) -> float:
    """Client add p99 (µs) of one round against the prefilled bookie."""
    default_rate = ServerConfig().scrub_rate_bytes_per_second
    conf = (
        BOOKIE_CONF
        + f"scrubIntervalSeconds=1\nscrubRateBytesPerSecond={default_rate if scrub else 0}\n"
    )
    process, address = harness.start_pybkx_bookie(workdir, conf)
    try:
        drop_cache(workdir / "pybkx-bookie" / "ledgers")
        time.sleep(1.5)  # not a wait for a condition: the first scrub run starts after 1 s
        result = run_load(
            address,
            "add",
            in_flight=256,
            ledger_id=ledger_id,
            count=args.adds,
            payload_size=1024,
            rate=args.rate,
        )
        if result["errors"]:
            raise RuntimeError(f"{result['errors']} adds failed")
        return float(result["p99_us"])
    finally:
        process.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rate", type=float, default=2000.0, help="adds per second")
    parser.add_argument("--adds", type=int, default=20_000)
    parser.add_argument("--dir", default=None)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    with work_dir(args.dir, "pybkx-scrub-") as base:
        data = base / "pybkx-bookie"
        prefill(base, args.megabytes)
        figures: dict[str, object] = {"megabytes": args.megabytes}
        figures.update(unpaced_scrub_vs_disk(data))
        p99: dict[bool, list[float]] = {True: [], False: []}
        ledger_id = 1000
        for _ in range(args.rounds):
            for scrub in (True, False):
                p99[scrub].append(add_p99_us(base, scrub, ledger_id, args))
                ledger_id += 1
        on, off = statistics.median(p99[True]), statistics.median(p99[False])
        figures.update(
            {
                "default_scrub_rate_bytes_s": ServerConfig().scrub_rate_bytes_per_second,
                "add_rate_per_s": args.rate,
                "add_p99_us_scrub_on": [round(v) for v in p99[True]],
                "add_p99_us_scrub_off": [round(v) for v in p99[False]],
                "add_p99_on_over_off": round(on / off, 3),
            }
        )
    return report_figures(figures, args.json)


if __name__ == "__main__":
    raise SystemExit(main())
