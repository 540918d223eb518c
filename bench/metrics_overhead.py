"""What metrics cost: adds/s through a pybkx bookie with metrics on (BookKeeper's Prometheus
provider: every request, journal group and sync timed into histograms) beside the same bookie
with metrics off (BookKeeper's default NullStatsProvider), in the same run, rounds interleaved.

Owns this measurement (a script: ``make bench-metrics``); it never asserts on timings. Two
standalone bookie processes on loopback, one per setting, run one at a time; the same load
generator (``pybkx._core.run_load``, pipelined adds of 100 B) drives each. Two journal settings:
``journalSyncData=true`` (durable, bound by fdatasync) and ``false`` (bound by CPU, where
counting shows most).

    python bench/metrics_overhead.py [--entries 200000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "interop"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import harness

from bench.machine import cpu_seconds
from pybkx._core import run_load

IN_FLIGHT = 1000
PAYLOAD = 100
PROMETHEUS = "org.apache.bookkeeper.stats.prometheus.PrometheusMetricsProvider"


def start(workdir: Path, metrics: bool, sync: bool) -> tuple[harness.Process, str]:
    conf = f"journalSyncData={'true' if sync else 'false'}\n"
    if metrics:
        # /metrics itself is not scraped here: only the recording is measured.
        conf += f"statsProviderClass={PROMETHEUS}\nprometheusStatsHttpEnable=false\n"
    workdir.mkdir(parents=True, exist_ok=True)
    return harness.start_pybkx_bookie(workdir, conf)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    root = args.dir or Path(tempfile.mkdtemp(prefix="pybkx-metrics-bench-"))
    print(
        f"adds of {PAYLOAD} B, {IN_FLIGHT} in flight, {args.entries} per run, {args.rounds} rounds"
    )
    print(
        f"{'journalSyncData':>16} {'adds/s on':>11} {'adds/s off':>11} {'on/off':>7}"
        f" {'CPU us/add on':>14} {'off':>6} {'on/off':>7}"
    )
    for sync in (True, False):
        bookies = {}
        for metrics in (True, False):
            name = f"{'sync' if sync else 'nosync'}-{'on' if metrics else 'off'}"
            bookies[metrics] = start(root / name, metrics, sync)
        try:
            rates: dict[bool, list[float]] = {True: [], False: []}
            cpus: dict[bool, list[float]] = {True: [], False: []}
            ratios = []
            cpu_ratios = []
            ledger = 1
            for rnd in range(args.rounds):
                order = (True, False) if rnd % 2 == 0 else (False, True)
                got = {}
                cost = {}
                for metrics in order:
                    ledger += 1
                    pid = bookies[metrics][0].pid
                    cpu_before = cpu_seconds(pid)
                    report = run_load(
                        bookies[metrics][1],
                        "add",
                        count=args.entries,
                        payload_size=PAYLOAD,
                        in_flight=IN_FLIGHT,
                        ledger_id=ledger,
                    )
                    assert report["errors"] == 0, report
                    cost[metrics] = (cpu_seconds(pid) - cpu_before) * 1e6 / report["entries"]
                    got[metrics] = report["entries"] / report["seconds"]
                    rates[metrics].append(got[metrics])
                    cpus[metrics].append(cost[metrics])
                ratios.append(got[True] / got[False])
                cpu_ratios.append(cost[True] / cost[False])
            on, off = statistics.median(rates[True]), statistics.median(rates[False])
            con, coff = statistics.median(cpus[True]), statistics.median(cpus[False])
            # Other work on the machine only ever adds CPU time: the cheapest round of each is
            # the cleanest view of what an add costs.
            best_on, best_off = min(cpus[True]), min(cpus[False])
            print(
                f"{sync!s:>16} {on:>11,.0f} {off:>11,.0f} {statistics.median(ratios):>7.3f}"
                f" {con:>14.2f} {coff:>6.2f} {statistics.median(cpu_ratios):>7.3f}"
                f"   (adds/s ratios {', '.join(f'{r:.2f}' for r in ratios)};"
                f" CPU ratios {', '.join(f'{r:.2f}' for r in cpu_ratios)})"
            )
            print(
                f"{'':>16} cheapest round: CPU us/add {best_on:.3f} on, {best_off:.3f} off,"
                f" on/off {best_on / best_off:.3f}"
            )
        finally:
            for process, _ in bookies.values():
                process.stop()
    print(
        "on/off: the median of the per-round ratios (1.000 = no cost; rounds alternate order);"
        " CPU us/add: the bookie process's user+system CPU per add"
    )
    # The recording itself, timed alone (no other work in the loop).
    from pybkx._core import micro_kernel

    n = 2_000_000
    for kernel in ("histogram_record", "timing"):
        ns = min(micro_kernel(kernel, 100, n) for _ in range(5)) / n * 1e9
        print(f"{kernel}: {ns:.1f} ns")
    return 0


if __name__ == "__main__":
    sys.exit(main())
