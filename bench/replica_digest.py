"""What a replica's digest costs, in one run: a storage holding ``--megabytes`` of 4 KiB
entries in one ledger (checkpointed: read from the entry logs, page cache warm), digested over
the whole range by the storage (``LedgerStorage.replica_digest``: read and SHA-1 in Rust, no
payload handed to Python) beside the same digest made in Python (``read_range`` in 4 MiB runs,
each entry copied into a ``bytes`` and hashed with ``hashlib.sha1``), rounds interleaved.

Not a test (``make bench-replica-digest``): it never asserts on timings; it prints MiB/s of
each and the same-run ratio (Rust / Python).

    python bench/replica_digest.py [--megabytes 256] [--rounds 3]
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.cli import report_figures, work_dir
from bench.machine import MIB
from pybkx._core import LedgerStorage
from pybkx.bookie import open_ledger_storage

PAYLOAD = 4096
LEDGER = 1
BATCH = 1000


def fill(storage: LedgerStorage, entries: int) -> None:
    body = bytes(range(256)) * (PAYLOAD // 256)
    for first in range(0, entries, BATCH):
        batch = [(e, body) for e in range(first, min(entries, first + BATCH))]
        storage.add_entries(LEDGER, batch, master_key=b"k")
    storage.checkpoint()


def digest_in_rust(storage: LedgerStorage, entries: int) -> bytes:
    return storage.replica_digest(LEDGER, 0, entries - 1)[3]


def digest_in_python(storage: LedgerStorage, entries: int) -> bytes:
    outer = hashlib.sha1()
    entry = 0
    while entry < entries:
        run = storage.read_range(LEDGER, entry, entries - entry, 4 * MIB)
        for data in run:
            outer.update(entry.to_bytes(8, "big"))
            outer.update(hashlib.sha1(data).digest())
            entry += 1
    return outer.digest()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--megabytes", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dir", help="work directory (default: a temporary one)")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()
    entries = args.megabytes * MIB // PAYLOAD
    rates: dict[str, list[float]] = {"rust": [], "python": []}
    with work_dir(args.dir, "pybkx-replica-digest-") as root:
        (root / "journal").mkdir(exist_ok=True)
        (root / "ledgers").mkdir(exist_ok=True)
        storage = open_ledger_storage(
            journalDirectories=[str(root / "journal")],
            ledgerDirectories=[str(root / "ledgers")],
            scrubRateBytesPerSecond=0,
        )
        try:
            fill(storage, entries)
            digests = set()
            for _ in range(args.rounds):
                for name, digest in (("rust", digest_in_rust), ("python", digest_in_python)):
                    start = time.perf_counter()
                    digests.add(digest(storage, entries))
                    rates[name].append(args.megabytes / (time.perf_counter() - start))
        finally:
            storage.close()
    if len(digests) != 1:
        raise SystemExit("the two digests differ: the bench computes different things")
    rust, python = (statistics.median(rates[k]) for k in ("rust", "python"))
    figures = {
        "megabytes": args.megabytes,
        "entry_bytes": PAYLOAD,
        "rust_mib_s": [round(r, 1) for r in rates["rust"]],
        "python_mib_s": [round(r, 1) for r in rates["python"]],
        "rust_over_python_medians": round(rust / python, 2),
    }
    return report_figures(figures, args.json)


if __name__ == "__main__":
    sys.exit(main())
