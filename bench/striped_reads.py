"""Reading a striped ledger (E=3, Qw=2) beside a ledger one bookie holds whole (E=3, Qw=3), in
the same run: iteration (``for entry in handle.entries()``) and ``batch_read`` loops; and the
striped ledger with single reads only (``batchReadEnabled=false``, how it was read before
striped batch reads).

Owns this side-by-side measurement (a script, run by hand or by `make bench-striped`); must never
assert on timings. Three ``pybkx bookie`` processes of a sandbox on loopback; both ledgers hold the
same N entries of 100 B, written first (the entries then sit in the page cache). Each read kind
runs `--rounds` times, alternating the ledgers, and the best round of each counts, so a noisy
neighbour on the machine hurts all sides alike.

    python bench/striped_reads.py [--entries 200000] [--rounds 3] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path

from pybkx.client import BookKeeper, ReadHandle
from pybkx.tools.sandbox import Sandbox

PAYLOAD = 100
WRITE_CHUNK = 10_000
BATCH_COUNT = 10_000
BATCH_SIZE = 5 << 20
STRIPED, WHOLE, SINGLES = "striped E=3 Qw=2", "whole E=3 Qw=3", "striped, single reads"
LEDGERS = {STRIPED: (3, 2, 2), WHOLE: (3, 3, 2)}


def write(bk: BookKeeper, quorums: tuple[int, int, int], entries: int) -> int:
    """A closed ledger of `entries` entries of PAYLOAD bytes; its id."""
    lh = bk.create_ledger(*quorums)
    body = b"x" * PAYLOAD
    for first in range(0, entries, WRITE_CHUNK):
        lh.append_many([body] * min(WRITE_CHUNK, entries - first))
    lh.close()
    return lh.ledger_id


def iterate(rh: ReadHandle) -> int:
    n = 0
    for entry in rh.entries():
        n += len(entry.payload)
    return n // PAYLOAD


def batch_reads(rh: ReadHandle) -> int:
    n, start, lac = 0, 0, rh.last_add_confirmed
    while start <= lac:
        got = rh.batch_read(start, BATCH_COUNT, BATCH_SIZE)
        n += len(got)
        start = got[-1].entry_id + 1
    return n


KINDS: dict[str, Callable[[ReadHandle], int]] = {
    "iteration (entries())": iterate,
    f"batch_read({BATCH_COUNT:,}, 5 MiB)": batch_reads,
}


def timed(read: Callable[[ReadHandle], int], rh: ReadHandle, entries: int) -> float:
    """Entries per second of one full read of the ledger."""
    began = time.perf_counter()
    got = read(rh)
    seconds = time.perf_counter() - began
    if got != entries:
        raise SystemExit(f"read {got} entries, expected {entries}")
    return entries / seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args()
    best: dict[str, dict[str, float]] = {kind: {} for kind in KINDS}
    with (
        Sandbox(3) as sandbox,
        BookKeeper(sandbox.metadata_uri) as bk,
        BookKeeper(sandbox.metadata_uri, batchReadEnabled=False) as singles,
    ):
        ids = {name: write(bk, q, args.entries) for name, q in LEDGERS.items()}
        handles = {name: bk.open_ledger(ledger_id) for name, ledger_id in ids.items()}
        handles[SINGLES] = singles.open_ledger(ids[STRIPED])
        for _ in range(args.rounds):
            for kind, read in KINDS.items():
                for name, rh in handles.items():
                    rate = timed(read, rh, args.entries)
                    best[kind][name] = max(best[kind].get(name, 0.0), rate)
    print(f"# Striped vs whole-ledger reads ({args.entries:,} entries of {PAYLOAD} B)\n")
    print(
        f"{platform.node()}: {platform.machine()}, Python {platform.python_version()}; "
        f"3 sandbox bookies on loopback; best of {args.rounds} rounds, ledgers alternating.\n"
    )
    print(
        f"| read | {STRIPED} entries/s | {WHOLE} entries/s | striped/whole "
        f"| {SINGLES} entries/s | striped/single reads |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for kind, by in best.items():
        print(
            f"| {kind} | {by[STRIPED]:,.0f} | {by[WHOLE]:,.0f} | {by[STRIPED] / by[WHOLE]:.2f} "
            f"| {by[SINGLES]:,.0f} | {by[STRIPED] / by[SINGLES]:.1f} |"
        )
    if args.json is not None:
        args.json.write_text(json.dumps({"entries": args.entries, "best": best}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
