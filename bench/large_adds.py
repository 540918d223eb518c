"""Large adds, the pybkx bookie beside the Java bookie (issue 17's large-entry goal).
``make bench-large-adds`` or ``python -m bench.large_adds [--rounds N] [--size B] [--ledgers N]``.

Both bookies run with their journal and ledger directories on one disk and BookKeeper's
group-commit defaults (bench.compare's settings); the load generator is pybkx's Rust V2 client.
Both systems first take ``--warmup`` adds that are not counted (the Java bookie's JIT compiles
its hot paths, so its first runs are slower: docs/performance.md, "Large adds"). Each round
measures the disk's sequential write + fdatasync limit, then the adds on each system (order
alternating between rounds). Reported per system: MB/s of payload, CPU per entry, and the
share of the disk limit counting both writes of every byte (journal and entry log); ratios
are medians of the per-round pybkx/Java ratios. Never asserts on timings.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from bench import cli, machine
from bench.compare import Progress, Runner, cluster, order
from bench.compare_plan import DISK_CHUNKS, LABEL
from bench.compare_report import Results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.large_adds", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--size", type=int, default=16384, help="payload bytes per entry")
    parser.add_argument("--ledgers", type=int, default=16)
    parser.add_argument("--count", type=int, default=25_000, help="adds per run")
    parser.add_argument("--in-flight", type=int, default=1000)
    parser.add_argument(
        "--warmup",
        type=int,
        default=50_000,
        help="adds sent to each system before the rounds, not counted (the JVM's JIT warms up)",
    )
    parser.add_argument("--json", default=None, help="also write the figures to this file")
    args = parser.parse_args(argv)

    results = Results("", False, {}, {}, {})
    per_round: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory(prefix="pybkx-large-adds-") as tmp:
        root = Path(tmp)
        with Progress(args.rounds * 2) as progress, cluster(root, progress) as bookies:
            runner = Runner(bookies, results, progress)
            for b in bookies.values():
                if args.warmup:
                    runner.load(
                        b,
                        "add",
                        ledger_id=b.ledgers(args.ledgers),
                        ledgers=args.ledgers,
                        count=args.warmup,
                        payload_size=args.size,
                        in_flight=args.in_flight,
                    )
            for rnd in range(args.rounds):
                disk = max(
                    machine.disk_write_fdatasync(root, chunk, 1.0).mb_per_s for chunk in DISK_CHUNKS
                )
                figures = {"disk_mb_s": disk}
                for system in order(rnd):
                    b = bookies[system]
                    run = runner.measure(
                        rnd,
                        b,
                        "add",
                        args.size,
                        ledger_id=b.ledgers(args.ledgers),
                        ledgers=args.ledgers,
                        count=args.count,
                        payload_size=args.size,
                        in_flight=args.in_flight,
                        connections=1,
                    )
                    mb = run.bytes / run.seconds / 1e6 if run.seconds else 0.0
                    figures[f"{system}_mb_s"] = mb
                    figures[f"{system}_p99_ms"] = run.p99_us / 1000
                    figures[f"{system}_errors"] = run.errors
                    figures[f"{system}_cpu_us_per_entry"] = run.cpu_s_per_m
                per_round.append(figures)
                print(
                    f"round {rnd + 1}: disk {disk:.0f} MB/s; "
                    + "; ".join(
                        f"{LABEL[s]} {figures[f'{s}_mb_s']:.0f} MB/s "
                        f"({2 * figures[f'{s}_mb_s'] / disk:.0%} of disk counting both writes, "
                        f"{figures[f'{s}_cpu_us_per_entry']:.0f} us CPU/entry)"
                        for s in ("pybkx", "java")
                    ),
                    flush=True,
                )
    ratio = statistics.median(r["pybkx_mb_s"] / r["java_mb_s"] for r in per_round)
    share = statistics.median(2 * r["pybkx_mb_s"] / r["disk_mb_s"] for r in per_round)
    java_share = statistics.median(2 * r["java_mb_s"] / r["disk_mb_s"] for r in per_round)
    summary = {
        "size": args.size,
        "ledgers": args.ledgers,
        "rounds": per_round,
        "pybkx_over_java": round(ratio, 3),
        "pybkx_disk_share_both_writes": round(share, 3),
        "java_disk_share_both_writes": round(java_share, 3),
    }
    return cli.report_figures(summary, args.json)


if __name__ == "__main__":
    raise SystemExit(main())
