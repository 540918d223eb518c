"""The Python client against what the bookie can do, in one run: ``python -m bench.client_targets``
(``make bench-client``). One pybkx bookie (group commit as in ``bench.compare``) is driven in
alternating rounds by the Rust load generator and by the Python client, so each ratio compares
figures taken minutes apart on the same machine.

Owns the client's speed targets and their report; it must never assert on timings, and it sends
traffic only to the bookie it started on loopback.

- appends: ``append_many``, ``append_async`` (futures, a window of 1000) and asyncio
  (``gather`` of 1000 at a time) on an E=Qw=Qa=1 ledger, against the load generator's adds of
  the same payloads with 1000 in flight (the bookie's capacity). Target: >= 80%.
- a single-entry read: ``ReadHandle.read(i, i)`` per call, against the load generator's READ
  round trip with one in flight; the difference is the Python side's overhead. Target: <= 50 us.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from collections import deque
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import machine
from bench.compare_plan import GROUP_COMMIT
from pybkx import _core
from pybkx.client import BookKeeper, Future, LedgerHandle
from pybkx.tools.sandbox import Sandbox

RESULTS = Path(__file__).resolve().parent / "results"
PAYLOAD = b"x" * 100
#: Ledger ids for the load generator, far above the ids the metadata store hands out.
LOADGEN_LEDGER = 1 << 40
IN_FLIGHT = 1000
#: Entries per ``append_many_async`` call in the asyncio batch case.
ASYNC_BATCH = 5000


@dataclass
class Rounds:
    """Per case: one figure per round."""

    values: dict[str, list[float]] = field(default_factory=dict)

    def add(self, case: str, value: float) -> None:
        self.values.setdefault(case, []).append(value)

    def median(self, case: str) -> float:
        return statistics.median(self.values[case])

    def ratio(self, a: str, b: str) -> float:
        """Median of the per-round ratios a / b."""
        return statistics.median(x / y for x, y in zip(self.values[a], self.values[b], strict=True))

    def difference(self, a: str, b: str) -> float:
        """Median of the per-round differences a - b."""
        return statistics.median(x - y for x, y in zip(self.values[a], self.values[b], strict=True))


def timed(fn: Any, *args: Any) -> float:
    started = time.perf_counter()
    fn(*args)
    return time.perf_counter() - started


def append_async_window(lh: LedgerHandle, count: int) -> None:
    window: deque[Future] = deque()
    for _ in range(count):
        window.append(lh.append_async(PAYLOAD))
        if len(window) >= IN_FLIGHT:
            window.popleft().result()
    for future in window:
        future.result()


def append_asyncio(lh: LedgerHandle, count: int) -> None:
    async def main() -> None:
        for start in range(0, count, IN_FLIGHT):
            n = min(IN_FLIGHT, count - start)
            await asyncio.gather(*(lh.append_async(PAYLOAD) for _ in range(n)))

    asyncio.run(main())


def append_asyncio_batches(lh: LedgerHandle, count: int) -> None:
    async def main() -> None:
        for start in range(0, count, ASYNC_BATCH):
            await lh.append_many_async([PAYLOAD] * min(ASYNC_BATCH, count - start))

    asyncio.run(main())


def one_round(
    bk: BookKeeper, address: str, rnd: int, count: int, reads: int, rounds: Rounds
) -> None:
    ledger = LOADGEN_LEDGER + rnd * 2
    report = _core.run_load(
        address,
        "add",
        ledger_id=ledger,
        count=count,
        payload_size=len(PAYLOAD),
        in_flight=IN_FLIGHT,
    )
    rounds.add("loadgen adds/s", report["entries"] / report["seconds"])

    lh = bk.create_ledger(1, 1, 1)
    rounds.add("append_many/s", count / timed(lh.append_many, [PAYLOAD] * count))
    rounds.add("append_async/s", count / timed(append_async_window, lh, count))
    rounds.add("asyncio gather/s", count / timed(append_asyncio, lh, count))
    rounds.add("asyncio append_many_async/s", count / timed(append_asyncio_batches, lh, count))

    report = _core.run_load(
        address, "read", ledger_id=ledger, count=reads, payload_size=len(PAYLOAD), in_flight=1
    )
    rounds.add("loadgen read us", report["seconds"] / report["entries"] * 1e6)
    started = time.perf_counter()
    for i in range(reads):
        lh.read(i, i)
    rounds.add("read(i, i) us", (time.perf_counter() - started) / reads * 1e6)
    started = time.perf_counter()
    for i in range(reads):
        lh.read_async(i, i).result()
    rounds.add("read_async(i, i) us", (time.perf_counter() - started) / reads * 1e6)
    lh.close()


def render(rounds: Rounds, meta: dict[str, Any]) -> str:
    capacity = rounds.median("loadgen adds/s")
    lines = [
        "# The Python client against the bookie's capacity",
        "",
        f"{meta['date']}, {meta['machine']}; {meta['rounds']} rounds of {meta['count']:,} "
        f"appends of {len(PAYLOAD)} B and {meta['reads']:,} single-entry reads, one pybkx bookie "
        "(group commit), E=Qw=Qa=1. Medians over rounds; ratios are medians of per-round ratios.",
        "",
        "| appends | entries/s | of the load generator's | target |",
        "|---|---:|---:|---|",
        f"| load generator (Rust, {IN_FLIGHT} in flight) | {capacity:,.0f} | 100% | |",
    ]
    for case in (
        "append_many/s",
        "append_async/s",
        "asyncio gather/s",
        "asyncio append_many_async/s",
    ):
        share = rounds.ratio(case, "loadgen adds/s")
        verdict = "met" if share >= 0.8 else "missed"
        lines.append(
            f"| `{case[:-2]}` | {rounds.median(case):,.0f} | {share:.0%} | >= 80%: {verdict} |"
        )
    wire = rounds.median("loadgen read us")
    lines += [
        "",
        "| single-entry read | us per call | over the wire round trip | target |",
        "|---|---:|---:|---|",
        f"| load generator (Rust, 1 in flight) | {wire:.1f} | | |",
    ]
    for case in ("read(i, i) us", "read_async(i, i) us"):
        over = rounds.difference(case, "loadgen read us")
        verdict = "met" if over <= 50 else "missed"
        lines.append(
            f"| `{case[:-3]}` | {rounds.median(case):.1f} | +{over:.1f} | <= 50 us: {verdict} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--count", type=int, default=200_000, help="appends per case and round")
    parser.add_argument("--reads", type=int, default=5_000, help="single reads per round")
    parser.add_argument("--out", type=Path, default=RESULTS / "client")
    args = parser.parse_args(argv)
    rounds = Rounds()
    with tempfile.TemporaryDirectory(prefix="pybkx-bench-client-") as tmp:
        with Sandbox(1, directory=Path(tmp) / "sandbox", conf=GROUP_COMMIT) as sandbox:
            address = sandbox.bookie_addresses[0]
            with BookKeeper(sandbox.metadata_uri) as bk:
                for rnd in range(args.rounds):
                    one_round(bk, address, rnd, args.count, args.reads, rounds)
                    print(f"round {rnd + 1}/{args.rounds} done", flush=True)
        described = machine.describe(Path(tmp))
    meta = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{described['cpu']}, {described['disk']}",
        "rounds": args.rounds,
        "count": args.count,
        "reads": args.reads,
    }
    report = render(rounds, meta)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".md").write_text(report)
    args.out.with_suffix(".json").write_text(
        json.dumps({"meta": meta, "rounds": rounds.values}, indent=2) + "\n"
    )
    print(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
