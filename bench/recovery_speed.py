"""Healing a lost bookie (``pybkx shell recover``'s engine) beside the disk's own sequential
write limit, in the same run.

Owns this measurement (a script, run by hand or by `make bench-recovery`); must never assert on
timings. A sandbox of `--bookies` pybkx bookie processes on loopback, its directories under
`--dir` (default: a temporary directory on the same disk as /tmp); `--ledgers` closed ledgers
(E=3, Qw=2, Qa=2) of `--entry-size` byte entries, `--megabytes` in all, written first; then the
bookie named in the most ensembles is SIGKILLed for good and `recover_bookies` heals its
ledgers, while a client makes synchronous 1 KiB adds to another ledger: their p99 latency during
the healing beside the 3 s before it. The disk limit is measured in the same directory right
before: half of `--megabytes` written in 1 MiB blocks and fdatasync'ed once (what a journal and
an entry log each must write).

    python bench/recovery_speed.py [--megabytes 512] [--entry-size 65536] [--ledgers 64]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import platform
import sys
import tempfile
import threading
import time
from pathlib import Path

from pybkx.client import BookKeeper
from pybkx.recovery import RecoveryOptions, recover_bookies
from pybkx.tools.sandbox import Sandbox

MB = 1_000_000


def disk_write_rate(directory: Path, nbytes: int) -> float:
    """Bytes/s of a sequential write of ``nbytes`` with one fdatasync at the end."""
    path = directory / "disk-probe"
    block = os.urandom(1 << 20)
    started = time.monotonic()
    with open(path, "wb", buffering=0) as f:
        for _ in range(max(1, nbytes >> 20)):
            f.write(block)
        os.fdatasync(f.fileno())
    seconds = time.monotonic() - started
    path.unlink()
    return nbytes / seconds


class AddLatencyProbe:
    """Synchronous 1 KiB appends in a thread, each latency kept: what a client sees."""

    def __init__(self, bk: BookKeeper) -> None:
        self.handle = bk.create_ledger(2, 2, 2)
        self.samples: list[float] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        body = b"p" * 1024
        while not self.stop.is_set():
            started = time.monotonic()
            self.handle.append(body)
            self.samples.append(time.monotonic() - started)

    def window(self, seconds: float | None = None, until: threading.Event | None = None) -> float:
        """p99 (ms) of the adds made during the next ``seconds`` or until ``until`` is set."""
        first = len(self.samples)
        if until is not None:
            until.wait()
        else:
            time.sleep(seconds or 0)
        got = sorted(self.samples[first:])
        return 1000 * got[int(0.99 * (len(got) - 1))] if got else float("nan")


def fill(bk: BookKeeper, ledgers: int, total: int, entry_size: int) -> list[int]:
    body = os.urandom(entry_size)
    per_ledger = max(1, total // ledgers // entry_size)
    ids = []
    for _ in range(ledgers):
        lh = bk.create_ledger(3, 2, 2)
        for first in range(0, per_ledger, 256):
            lh.append_many([body] * min(256, per_ledger - first))
        lh.close()
        ids.append(lh.ledger_id)
    return ids


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bookies", type=int, default=5)
    parser.add_argument("--megabytes", type=int, default=512)
    parser.add_argument("--entry-size", type=int, default=64 << 10)
    parser.add_argument("--ledgers", type=int, default=64)
    parser.add_argument("--rate-mb", type=float, default=None, help="replicationRateByBytes")
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="pybkx-bench-recovery-", dir=args.dir))
    total = args.megabytes * MB
    with (
        Sandbox(args.bookies, directory=base / "sandbox") as sandbox,
        BookKeeper(sandbox.metadata_uri) as bk,
    ):
        started = time.monotonic()
        ids = fill(bk, args.ledgers, total, args.entry_size)
        write_s = time.monotonic() - started
        counts = collections.Counter(
            b for i in ids for b in bk.store.read_ledger_metadata(i).value.last_ensemble
        )
        victim = counts.most_common(1)[0][0]
        disk = disk_write_rate(base, total // 2)
        lost = sandbox.bookie_addresses.index(bk.address_of(victim))
        sandbox.kill_bookie(lost)
        sandbox.wait_unregistered([lost])
        probe = AddLatencyProbe(bk)
        probe.thread.start()
        p99_before = probe.window(seconds=3.0)
        finished = threading.Event()
        during: list[float] = []
        watcher = threading.Thread(target=lambda: during.append(probe.window(until=finished)))
        watcher.start()
        rate = int(args.rate_mb * MB) if args.rate_mb else None
        report = recover_bookies(bk, [victim], RecoveryOptions(rate_bytes_per_s=rate))
        finished.set()
        watcher.join()
        probe.stop.set()
        probe.thread.join()
    healed = report.bytes_copied / report.seconds if report.seconds else 0.0
    result = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
        "bookies": args.bookies,
        "ledgers": len(ids),
        "ledgers_on_lost_bookie": len(report.affected),
        "entry_size": args.entry_size,
        "written_mb": round(total / MB),
        "write_mb_s": round(total / MB / write_s, 1),
        "disk_seq_write_mb_s": round(disk / MB, 1),
        "healed_ledgers": len(report.healed),
        "healed_mb": round(report.bytes_copied / MB, 1),
        "heal_seconds": round(report.seconds, 2),
        "heal_mb_s": round(healed / MB, 1),
        "heal_of_disk_limit": round(healed / disk, 3),
        "client_add_p99_ms_before": round(p99_before, 2),
        "client_add_p99_ms_during": round(during[0], 2),
        "p99_during_over_before": round(during[0] / p99_before, 2),
        "rate_limit_mb_s": args.rate_mb,
        "ok": report.ok,
    }
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
