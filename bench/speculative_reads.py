"""Read latency while one of three replicas is paused (SIGSTOP) for 5 s in every 20 s, beside the
same reads with every replica healthy, in one run: speculative reads (``speculativeReadTimeout``)
and the read order by bookie health (``reorderReadSequenceEnabled``) on and off.

Owns this side-by-side measurement (a script, run by hand or by ``make bench-speculative``); must
never assert on timings. Three ``pybkx bookie`` processes of a sandbox on loopback; one closed
ledger E=3 Qw=3 Qa=2 of small entries, so every entry has the paused bookie as a replica and a
third of them have it first in their write set. Reads are open-loop: single-entry
``read_async`` calls issued at a fixed rate whatever the answers, each latency measured from when
its read was due, so a stalled read cannot hide the reads behind it. Each setting gets a fresh
client (no health figures carried over) and the same pause schedule: 15 s healthy, 5 s paused.

    python bench/speculative_reads.py [--seconds 100] [--rate 200] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import signal
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from pybkx.client import BookKeeper
from pybkx.tools.sandbox import Sandbox

ENTRIES = 5000
PAYLOAD = 100
CYCLE_S = 20.0
PAUSE_S = 5.0
SMALL_BOOKIE = {"journalPreAllocSizeMB": 1}
#: A read still unanswered this long after the run is counted at this latency (never the case
#: unless a setting loses reads: readEntryTimeoutSec is 5 s).
DRAIN_S = 30.0


@dataclass(frozen=True)
class Setting:
    name: str
    keys: dict[str, object]
    pause: bool = True


SETTINGS = [
    Setting("all replicas healthy (defaults)", {}, pause=False),
    Setting(
        "paused, no speculation, no reorder",
        {"speculativeReadTimeout": 0, "reorderReadSequenceEnabled": False},
    ),
    Setting(
        "paused, speculation 2000 ms (default), no reorder",
        {"reorderReadSequenceEnabled": False},
    ),
    Setting("paused, no speculation, reorder on", {"speculativeReadTimeout": 0}),
    Setting("paused, defaults (speculation 2000 ms, reorder on)", {}),
    Setting(
        "paused, speculation 2000 ms, readReorderThresholdPendingRequests=10",
        {"readReorderThresholdPendingRequests": 10},
    ),
    Setting("paused, speculation 1000 ms, reorder on", {"speculativeReadTimeout": 1000}),
    Setting("paused, speculation 50 ms, reorder on", {"speculativeReadTimeout": 50}),
]


@dataclass
class Latencies:
    """Read latencies in seconds, recorded from the client's completion threads."""

    values: list[float] = field(default_factory=list)
    failed: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, seconds: float, ok: bool) -> None:
        with self.lock:
            self.values.append(seconds)
            if not ok:
                self.failed += 1

    def summary(self) -> dict[str, float]:
        ordered = sorted(self.values)

        def at(q: float) -> float:
            return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000

        return {
            "reads": len(ordered),
            "failed": self.failed,
            "p50_ms": at(0.50),
            "p99_ms": at(0.99),
            "p999_ms": at(0.999),
            "max_ms": ordered[-1] * 1000,
        }


def pauser(pid: int, began: float, seconds: float, stop: threading.Event) -> None:
    """SIGSTOPs `pid` for PAUSE_S at the end of every CYCLE_S after `began`, until `seconds`
    passed or `stop` is set; always leaves it running."""
    cycle = 0
    try:
        while True:
            pause_at = began + cycle * CYCLE_S + CYCLE_S - PAUSE_S
            if pause_at + PAUSE_S > began + seconds or stop.wait(pause_at - time.perf_counter()):
                return
            os.kill(pid, signal.SIGSTOP)
            try:
                stop.wait(PAUSE_S)  # not a wait for a condition: the pause itself
            finally:
                os.kill(pid, signal.SIGCONT)
            cycle += 1
    finally:
        os.kill(pid, signal.SIGCONT)


def run(
    sandbox: Sandbox, ledger_id: int, paused: str, setting: Setting, seconds: float, rate: int
) -> dict[str, float]:
    """Open-loop single-entry reads at `rate` per second for `seconds` under `setting`."""
    latencies = Latencies()
    rng = random.Random(7)
    with BookKeeper(sandbox.metadata_uri, **setting.keys) as bk:
        rh = bk.open_ledger(ledger_id)
        rh.read(0, min(ENTRIES - 1, 99))  # connections up before the clock starts
        stop = threading.Event()
        began = time.perf_counter()
        pid = sandbox.pid(sandbox.bookie_addresses.index(paused))
        thread = None
        if setting.pause and pid is not None:
            thread = threading.Thread(target=pauser, args=(pid, began, seconds, stop))
            thread.start()
        outstanding = threading.Semaphore(0)
        issued = 0
        try:
            for k in range(int(seconds * rate)):
                due = began + k / rate
                delay = due - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)  # not a wait: the open-loop schedule
                entry = rng.randrange(ENTRIES)

                def done(future: object, due: float = due) -> None:
                    ok = getattr(future, "exception")() is None  # noqa: B009
                    latencies.record(time.perf_counter() - due, ok)
                    outstanding.release()

                rh.read_async(entry, entry).add_done_callback(done)
                issued += 1
        finally:
            stop.set()
            if thread is not None:
                thread.join()
        drain_until = time.perf_counter() + DRAIN_S
        for _ in range(issued):
            if not outstanding.acquire(timeout=max(0.0, drain_until - time.perf_counter())):
                break
        rh.close()
    return latencies.summary()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=100.0)
    parser.add_argument("--rate", type=int, default=200, help="reads issued per second")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument(
        "--only",
        default="",
        help="run only the settings whose name holds this text (the healthy one always runs)",
    )
    args = parser.parse_args()
    settings = [SETTINGS[0]] + [s for s in SETTINGS[1:] if args.only in s.name]
    results: dict[str, dict[str, float]] = {}
    with (
        tempfile.TemporaryDirectory(prefix="pybkx-speculative-") as directory,
        Sandbox(3, directory=Path(directory) / "sandbox", conf=SMALL_BOOKIE) as sandbox,
        BookKeeper(sandbox.metadata_uri) as writer,
    ):
        lh = writer.create_ledger(3, 3, 2)
        lh.append_many([b"x" * PAYLOAD] * ENTRIES)
        paused = writer.address_of(lh.metadata.ensembles[0][0])
        lh.close()
        for setting in settings:
            summary = run(sandbox, lh.ledger_id, paused, setting, args.seconds, args.rate)
            results[setting.name] = summary
            print(f"{setting.name}: {summary}", file=sys.stderr, flush=True)
    healthy_p99 = results[SETTINGS[0].name]["p99_ms"]
    print(f"\nRead latency, {args.rate} reads/s open loop for {args.seconds:g} s per setting, ")
    print(f"one of three replicas paused {PAUSE_S:g} s in every {CYCLE_S:g} s (single reads)\n")
    print("| setting | reads | p50 ms | p99 ms | p99.9 ms | max ms | p99 / healthy p99 |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, s in results.items():
        ratio = s["p99_ms"] / healthy_p99 if healthy_p99 > 0 else float("nan")
        print(
            f"| {name} | {s['reads']:,} | {s['p50_ms']:.2f} | {s['p99_ms']:.2f} | "
            f"{s['p999_ms']:.1f} | {s['max_ms']:.0f} | {ratio:.1f}x |"
        )
    if args.json is not None:
        args.json.write_text(
            json.dumps(
                {
                    "machine": platform.platform(),
                    "seconds": args.seconds,
                    "rate": args.rate,
                    "results": results,
                },
                indent=2,
            )
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
