"""The storage demo: write entries from several threads, read them back, verify every byte, report.
It drives only LedgerStorage's public API; it must never touch the storage files or parse args."""

from __future__ import annotations

import hashlib
import random
import struct
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from pybkx import errors
from pybkx._core import LedgerStorage
from pybkx.bookie.storage import open_ledger_storage

# BookKeeper's master key for an empty password: SHA-1("ledger" + password).
MASTER_KEY = hashlib.sha1(b"ledger").digest()
FIRST_LEDGER_ID = 1
ADD_BATCH_ENTRIES = 256
READ_BATCH_ENTRIES = 1024
READ_BATCH_BYTES = 4 << 20
_PATTERN_BYTES = 1 << 16  # per-ledger random block that payloads are cut from
_ENTRY_HEADER = struct.Struct(">qq")  # ledger id, entry id: makes every payload unique


class StorageDemoError(Exception):
    """The demo found data that differs from what it wrote, or could not run."""


@dataclass(frozen=True)
class StorageDemoResult:
    entries: int
    payload_bytes: int
    write_s: float
    read_s: float
    stats: dict[str, int]


class Payloads:
    """Deterministic payload of (ledger, entry): verification needs no stored copy."""

    def __init__(self, size_bytes: int) -> None:
        if size_bytes < 1:
            raise ValueError("entry size must be at least 1 byte")
        self.size_bytes = size_bytes
        self._patterns: dict[int, bytes] = {}

    def pattern(self, ledger_id: int) -> bytes:
        block = self._patterns.get(ledger_id)
        if block is None:
            block = random.Random(ledger_id).randbytes(_PATTERN_BYTES + self.size_bytes)
            self._patterns[ledger_id] = block
        return block

    def __call__(self, ledger_id: int, entry_id: int) -> bytes:
        body = self.size_bytes - _ENTRY_HEADER.size
        head = _ENTRY_HEADER.pack(ledger_id, entry_id)
        if body <= 0:
            return head[: self.size_bytes]
        start = (entry_id * 7919) % _PATTERN_BYTES
        return head + self.pattern(ledger_id)[start : start + body]


def split_entries(entries: int, ledgers: int) -> dict[int, int]:
    """Entry count per ledger id: ``entries`` spread as evenly as possible over ``ledgers``."""
    base, extra = divmod(entries, ledgers)
    return {FIRST_LEDGER_ID + i: base + (1 if i < extra else 0) for i in range(ledgers)}


@contextmanager
def demo_directory(directory: Path | None) -> Iterator[Path]:
    """``directory`` (created; must be empty) or a temporary directory removed afterwards."""
    if directory is None:
        with tempfile.TemporaryDirectory(prefix="pybkx-demo-") as tmp:
            yield Path(tmp)
        return
    directory.mkdir(parents=True, exist_ok=True)
    if any(directory.iterdir()):
        raise StorageDemoError(f"{directory} is not empty; give an empty or new directory")
    yield directory


def open_storage(directory: Path) -> LedgerStorage:
    """BookKeeper defaults, except that the journal and ledger directories live in ``directory``."""
    return open_ledger_storage(
        journalDirectories=str(directory / "journal"),
        ledgerDirectories=str(directory / "ledgers"),
    )


def _write_ledger(storage: LedgerStorage, payloads: Payloads, ledger_id: int, count: int) -> None:
    for first in range(0, count, ADD_BATCH_ENTRIES):
        last = min(first + ADD_BATCH_ENTRIES, count)
        batch = [(entry_id, payloads(ledger_id, entry_id)) for entry_id in range(first, last)]
        storage.add_entries(ledger_id, batch, MASTER_KEY)


def _mismatch(ledger_id: int, entry_id: int, got: bytes, want: bytes) -> StorageDemoError:
    at = next((i for i, (a, b) in enumerate(zip(got, want, strict=False)) if a != b), None)
    where = f"first differing byte at {at}" if at is not None else "one is a prefix of the other"
    return StorageDemoError(
        f"ledger {ledger_id} entry {entry_id}: read {len(got)} bytes, wrote {len(want)}; {where}"
    )


def _read_ledger(storage: LedgerStorage, payloads: Payloads, ledger_id: int, count: int) -> None:
    next_id = 0
    while next_id < count:
        got = storage.read_range(ledger_id, next_id, READ_BATCH_ENTRIES, READ_BATCH_BYTES)
        if not got:
            raise StorageDemoError(
                f"ledger {ledger_id}: read_range from entry {next_id} returned nothing"
            )
        for data in got:
            if next_id >= count:
                raise StorageDemoError(
                    f"ledger {ledger_id}: entry {next_id} exists but was never written"
                )
            want = payloads(ledger_id, next_id)
            if data != want:
                raise _mismatch(ledger_id, next_id, data, want)
            next_id += 1


def _check_point_reads(
    storage: LedgerStorage, payloads: Payloads, ledger_id: int, count: int
) -> None:
    last = count - 1
    for entry_id, expected_id in ((0, 0), (last // 2, last // 2), (last, last), (-1, last)):
        data = storage.read_entry(ledger_id, entry_id)
        want = payloads(ledger_id, expected_id)
        if data != want:
            raise _mismatch(ledger_id, entry_id, data, want)
    if storage.last_entry_id(ledger_id) != last:
        raise StorageDemoError(
            f"ledger {ledger_id}: last_entry_id is {storage.last_entry_id(ledger_id)}, want {last}"
        )
    try:
        storage.read_entry(ledger_id, count)
    except errors.NoSuchEntryException:
        pass
    else:
        raise StorageDemoError(
            f"ledger {ledger_id}: entry {count} was never written but can be read"
        )


def _each_ledger(
    pool: ThreadPoolExecutor,
    job: Callable[[LedgerStorage, Payloads, int, int], None],
    storage: LedgerStorage,
    payloads: Payloads,
    counts: dict[int, int],
) -> float:
    """Run ``job`` for every ledger at once on ``pool``; the seconds until all ended. Raises
    what a job raises."""
    start = time.perf_counter()
    jobs = [pool.submit(job, storage, payloads, lid, n) for lid, n in counts.items()]
    for running in jobs:
        running.result()
    return time.perf_counter() - start


def _rate(count: float, seconds: float) -> float:
    return count / seconds if seconds > 0 else float("inf")


def run_storage_demo(
    entries: int = 100_000,
    size_bytes: int = 1024,
    writers: int = 4,
    directory: Path | None = None,
    report: Callable[[str], None] = print,
) -> StorageDemoResult:
    """Write ``entries`` entries of ``size_bytes`` over ``writers`` ledgers, one thread per ledger,
    read all back, verify, and report throughput and journal stats. Raises StorageDemoError on
    mismatch.
    """
    if writers < 1:
        raise StorageDemoError("need at least one writer")
    if entries < writers:
        raise StorageDemoError(
            f"need at least one entry per writer ({entries} entries, {writers} writers)"
        )
    payloads = Payloads(size_bytes)
    counts = split_entries(entries, writers)
    for ledger_id in counts:
        payloads.pattern(ledger_id)  # build the patterns outside the timed sections
    payload_bytes = entries * size_bytes

    with demo_directory(directory) as root:
        report(f"storage in {root}: {entries} entries x {size_bytes} B over {writers} ledgers")
        with (
            open_storage(root) as storage,
            ThreadPoolExecutor(max_workers=writers, thread_name_prefix="pybkx-demo") as pool,
        ):
            write_s = _each_ledger(pool, _write_ledger, storage, payloads, counts)
            report(
                f"write: {entries} entries in {write_s:.2f} s = "
                f"{_rate(entries, write_s):,.0f} entries/s, "
                f"{_rate(payload_bytes / 1e6, write_s):,.1f} MB/s "
                f"({writers} threads, batches of {ADD_BATCH_ENTRIES})"
            )

            read_s = _each_ledger(pool, _read_ledger, storage, payloads, counts)
            report(
                f"read:  {entries} entries in {read_s:.2f} s = "
                f"{_rate(entries, read_s):,.0f} entries/s, "
                f"{_rate(payload_bytes / 1e6, read_s):,.1f} MB/s "
                f"(read_range, up to {READ_BATCH_ENTRIES} entries per call); every byte verified"
            )

            for lid, n in counts.items():
                _check_point_reads(storage, payloads, lid, n)
            report(
                "read_entry: first, middle, last and -1 (last) entries match; past the end "
                "raises NoSuchEntryException"
            )

            stats = storage.stats()

        with open_storage(root) as storage:
            for lid, n in counts.items():
                data = storage.read_entry(lid, -1)
                if data != payloads(lid, n - 1):
                    raise _mismatch(lid, n - 1, data, payloads(lid, n - 1))
        report("reopen: the storage reopens and every ledger's last entry reads back intact")

        journal_entries = stats.get("pybkx_journal_entries", 0)
        journal_syncs = stats.get("pybkx_journal_syncs", 0)
        per_sync = f"{journal_entries / journal_syncs:,.1f}" if journal_syncs else "n/a"
        report(
            f"journal: {journal_entries} entries, {journal_syncs} fsyncs = "
            f"{per_sync} entries per fsync"
        )
        report("stats: " + ", ".join(f"{key}={value}" for key, value in sorted(stats.items())))

    return StorageDemoResult(entries, payload_bytes, write_s, read_s, stats)
