"""The V3 (protobuf) protocol beside V2 on the same bookies, in one run: a pybkx bookie and the
real Apache BookKeeper 4.17 bookie, each driven by pybkx's load generator once over V2 and once
over V3 (``run_load(..., v3=True)``). ``make bench-v3`` or ``python -m bench.v3_wire``.

Owns this comparison (it never asserts on timings; traffic only to the processes it starts on
loopback). Per round, system and protocol (orders alternating between rounds): pipelined adds of
100 B over 16 ledgers, and single reads of one cached ledger. Figures are medians over rounds;
ratios are medians of per-round ratios. Results go to bench/results/v3.md and v3.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import machine
from bench.compare import Progress, cluster
from bench.compare_plan import SYSTEMS
from bench.compare_report import RESULTS
from pybkx._core import run_load

PROTOCOLS = ("V2", "V3")
READ_LEDGER = 7
ADD_LEDGERS = 16


def measure(address: str, kind: str, protocol: str, count: int, first_ledger: int) -> float:
    """Entries per second of one run."""
    v3 = protocol == "V3"
    if kind == "adds":
        report = run_load(
            address,
            "add",
            ledger_id=first_ledger,
            ledgers=ADD_LEDGERS,
            count=count,
            payload_size=100,
            in_flight=1000,
            v3=v3,
        )
    else:
        report = run_load(
            address,
            "read",
            ledger_id=READ_LEDGER,
            count=count,
            payload_size=100,
            in_flight=256,
            v3=v3,
        )
    if report["errors"]:
        raise RuntimeError(f"{kind} over {protocol} on {address}: {report['errors']} errors")
    return float(report["entries"]) / float(report["seconds"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.v3_wire", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--count", type=int, default=200_000, help="adds and reads per run")
    args = parser.parse_args(argv)
    rates: dict[tuple[str, str, str], list[float]] = {}
    ratios: dict[tuple[str, str], list[float]] = {}
    steps = 2 + args.rounds * len(SYSTEMS) * len(PROTOCOLS) * 2
    with (
        tempfile.TemporaryDirectory(prefix="pybkx-bench-v3-") as tmp,
        Progress(steps) as progress,
        cluster(Path(tmp), progress) as bookies,
    ):
        for system, bookie in bookies.items():
            progress.describe(f"writing the read ledger on {system}")
            run_load(
                bookie.address,
                "add",
                ledger_id=READ_LEDGER,
                count=args.count,
                payload_size=100,
                in_flight=1000,
            )
            progress.advance()
        next_ledger = 1000
        for rnd in range(args.rounds):
            systems = SYSTEMS if rnd % 2 == 0 else tuple(reversed(SYSTEMS))
            protocols = PROTOCOLS if rnd % 2 == 0 else tuple(reversed(PROTOCOLS))
            for system in systems:
                address = bookies[system].address
                got: dict[tuple[str, str], float] = {}
                for protocol in protocols:
                    for kind in ("adds", "reads"):
                        progress.describe(f"round {rnd + 1}: {system} {kind} over {protocol}")
                        machine.wait_quiet([b.pid for b in bookies.values()])
                        rate = measure(address, kind, protocol, args.count, next_ledger)
                        next_ledger += ADD_LEDGERS
                        rates.setdefault((system, kind, protocol), []).append(rate)
                        got[kind, protocol] = rate
                        progress.advance()
                for kind in ("adds", "reads"):
                    ratios.setdefault((system, kind), []).append(got[kind, "V3"] / got[kind, "V2"])
    rows = []
    for system in SYSTEMS:
        for kind in ("adds", "reads"):
            v2 = statistics.median(rates[system, kind, "V2"])
            v3 = statistics.median(rates[system, kind, "V3"])
            rows.append(
                {
                    "system": system,
                    "kind": kind,
                    "v2_per_s": round(v2),
                    "v3_per_s": round(v3),
                    "v3_over_v2": round(statistics.median(ratios[system, kind]), 3),
                }
            )
    result: dict[str, Any] = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine.describe(RESULTS),
        "rounds": args.rounds,
        "count": args.count,
        "rows": rows,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "v3.json").write_text(json.dumps(result, indent=2) + "\n")
    lines = [
        "# V3 beside V2 on the same bookies, one run",
        "",
        f"{result['date']}; {args.rounds} rounds of {args.count:,} pipelined 100 B adds over "
        f"{ADD_LEDGERS} ledgers (1000 in flight) and {args.count:,} single reads (256 in flight)"
        " per system and protocol; pybkx's load generator.",
        "",
        "| bookie | operation | V2 entries/s | V3 entries/s | V3 / V2 |",
        "|---|---|---:|---:|---:|",
    ]
    lines += [
        f"| {r['system']} | {r['kind']} | {r['v2_per_s']:,} | {r['v3_per_s']:,} "
        f"| {r['v3_over_v2']} |"
        for r in rows
    ]
    (RESULTS / "v3.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
