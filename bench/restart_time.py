"""Restart time of a bookie's ledger storage holding many entries.

Writes N entries (default 10 million, 100 B) through `LedgerStorage`, then measures how long
opening takes after a clean close (index loaded, nothing to replay) and after a crash (a child
process killed with SIGKILL after writing past its last checkpoint, so the journal is replayed).
Not a test (run it by hand or via `make bench`): it never asserts on timings.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from pybkx.bookie import open_ledger_storage

WRITER = r"""
import sys
from pybkx.bookie import open_ledger_storage
root, total, tail, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
s = open_ledger_storage(
    journalDirectories=root + "/j", ledgerDirectories=root + "/l", flushInterval=0
)
payload = b"x" * size
ledgers = 16
per_ledger = total // ledgers
batch = 4096
for ledger in range(ledgers):
    for first in range(0, per_ledger, batch):
        n = min(batch, per_ledger - first)
        s.add_entries(ledger, [(first + i, payload) for i in range(n)])
s.checkpoint()
# Entries after the last checkpoint live only in the journal until the next one.
s.add_entries(ledgers, [(i, payload) for i in range(tail)])
print("written", flush=True)
sys.stdin.read()
"""


def open_time(root: str) -> tuple[float, int]:
    start = time.perf_counter()
    storage = open_ledger_storage(
        journalDirectories=f"{root}/j", ledgerDirectories=f"{root}/l", flushInterval=0
    )
    elapsed = time.perf_counter() - start
    count = sum(storage.last_entry_id(ledger) + 1 for ledger in storage.list_ledgers())
    storage.close()
    return elapsed, count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--entries", type=int, default=10_000_000)
    parser.add_argument("--tail", type=int, default=1_000_000, help="entries after checkpoint")
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--dir", default=None)
    args = parser.parse_args()
    root = tempfile.mkdtemp(prefix="pybkx-restart-", dir=args.dir)
    try:
        start = time.perf_counter()
        child = subprocess.Popen(
            [sys.executable, "-c", WRITER, root, str(args.entries), str(args.tail), str(args.size)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert child.stdout is not None
        line = child.stdout.readline()
        if line.strip() != "written":
            raise SystemExit(f"writer failed: {line!r}")
        write_s = time.perf_counter() - start
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        crash_s, count = open_time(root)
        clean_s, _ = open_time(root)
        print(
            f"| entries | write s | open after kill -9 (replays {args.tail:,}) s | "
            "open after clean close s |"
        )
        print("|---|---|---|---|")
        print(f"| {count:,} | {write_s:.1f} | {crash_s:.2f} | {clean_s:.2f} |")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
