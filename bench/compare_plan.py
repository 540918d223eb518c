"""What the side-by-side of ``bench.compare`` runs: the two systems, the workloads (entry sizes,
ledger counts, batch size, the read ledger), the disk baseline's chunks, the journal settings
both bookies get, the Java bookie's JVM options, and the plan of one run (default or
``--quick``). Values only: it never starts a process or measures anything.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

SYSTEMS = ("pybkx", "java")
LABEL = {"pybkx": "pybkx", "java": "Java"}
SIZES = (100, 1024, 16384)
# Adds one at a time (one in flight): an add's latency at low load beside one fdatasync.
LOW_LOAD_SIZES = (100, 1024)
LEDGER_COUNTS = (1, 16)
BATCH = 100
READ_LEDGER = 7  # the ledger the read runs use; add runs use ids from 1000 up
READ_PAYLOAD = 100
# Bytes per fdatasync of the disk baseline: journalBufferedWritesThreshold (the largest group a
# journal writes at once) and a larger size, since both journals may cover several groups with
# one sync. The disk limit is the better of the two.
DISK_CHUNKS = (512 * 1024, 4 << 20)
SYNC_CHUNK = 4096

# The journal settings both bookies get: BookKeeper 4.17's defaults, written out.
GROUP_COMMIT = {
    "journalSyncData": "true",
    "journalMaxGroupWaitMSec": "2",
    "journalBufferedWritesThreshold": str(512 * 1024),
    "journalBufferedEntriesThreshold": "0",
    "journalFlushWhenQueueEmpty": "false",
    # Java: group the force-write thread's syncs; pybkx: adaptive group commit (docs/storage.md).
    "journalAdaptiveGroupWrites": "true",
    "journalWriteBufferSizeKB": "64",
    "journalPreAllocSizeMB": "16",
    "flushInterval": "10000",
}

# BookKeeper's bin/common.sh defaults (heap, direct memory, G1), GC threads left to the JVM.
JAVA_BOOKIE_JVM = [
    "-Xms1g",
    "-Xmx1g",
    "-XX:MaxDirectMemorySize=2g",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=10",
    "-XX:+ParallelRefProcEnabled",
    "-XX:+UnlockExperimentalVMOptions",
    "-XX:+DoEscapeAnalysis",
    "-XX:G1NewSizePercent=50",
    "-XX:+DisableExplicitGC",
    "-XX:-ResizePLAB",
]


@dataclass
class Plan:
    """How much each run does; ``--quick`` and the default differ only here."""

    rounds: int
    add_counts: dict[int, int]
    read_entries: int
    paced_seconds: float
    disk_seconds: float
    net_seconds: float
    in_flight: int
    read_in_flight: int
    connections: int
    low_load_count: int = 2_000


def make_plan(args: argparse.Namespace) -> Plan:
    if args.quick:
        plan = Plan(
            1, {100: 50_000, 1024: 50_000, 16384: 5_000}, 200_000, 2.0, 1.5, 0.5, 0, 0, 0, 500
        )
    else:
        plan = Plan(
            3, {100: 200_000, 1024: 200_000, 16384: 25_000}, 1_000_000, 6.0, 3.0, 1.0, 0, 0, 0
        )
    plan.rounds = args.rounds or plan.rounds
    plan.read_entries = args.read_entries or plan.read_entries
    plan.in_flight = args.in_flight
    plan.read_in_flight = args.read_in_flight
    plan.connections = args.connections
    return plan
