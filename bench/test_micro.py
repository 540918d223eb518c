"""Micro benchmarks: V2 frame encode/decode and CRC32C (Rust loops, one Python call per
OPS_PER_CALL operations), entry packaging through the DigestManager binding, journal append
through LedgerStorage, index lookup through read_entry.

Owns these measurements; it must never assert on timings. Each benchmark says in its
``extra_info`` what one call includes (PyO3 call, bytes allocation, GIL release).
"""

from __future__ import annotations

import itertools
import random
from pathlib import Path

import pytest

from bench.conftest import (
    FILLED_ENTRIES_PER_LEDGER,
    FILLED_LEDGERS,
    storage_config,
)
from pybkx._core import DigestManager, LedgerStorage, micro_kernel, micro_kernels
from pybkx.bookie import open_ledger_storage

OPS_PER_CALL = 1000
SIZES = (100, 1024, 16384)
KERNELS = list(micro_kernels())


@pytest.mark.benchmark(group="micro: codec and digest (Rust loop, per 1000 ops)")
@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("kernel", KERNELS)
def test_codec_kernel(benchmark, kernel: str, size: int) -> None:  # type: ignore[no-untyped-def]
    """One call runs the kernel OPS_PER_CALL times in Rust; the Python call is paid once."""
    timings: list[float] = []

    def call() -> None:
        timings.append(micro_kernel(kernel, size, OPS_PER_CALL))

    benchmark.pedantic(call, rounds=200, warmup_rounds=5)
    inner = sorted(timings)[len(timings) // 2]
    benchmark.extra_info.update(
        {
            "ops_per_call": OPS_PER_CALL,
            "ns_per_op_rust_timed_median": round(inner / OPS_PER_CALL * 1e9, 1),
            "what": micro_kernels()[kernel],
        }
    )


@pytest.mark.benchmark(group="micro: CRC32C entry packaging through the binding")
@pytest.mark.parametrize("size", SIZES)
def test_package_crc32c_binding(benchmark, size: int) -> None:  # type: ignore[no-untyped-def]
    """DigestManager.package per call: PyO3 call + CRC32C + a new bytes object."""
    digest = DigestManager(1, b"", "CRC32C")
    payload = b"p" * size
    benchmark(digest.package, 1, 0, size, payload)
    benchmark.extra_info["includes"] = "PyO3 call, CRC32C, allocation of the returned bytes"


@pytest.mark.benchmark(group="micro: CRC32C entry verification through the binding")
@pytest.mark.parametrize("size", SIZES)
def test_verify_crc32c_binding(benchmark, size: int) -> None:  # type: ignore[no-untyped-def]
    digest = DigestManager(1, b"", "CRC32C")
    entry = digest.package(1, 0, size, b"p" * size)
    benchmark(digest.verify, entry, 1)
    benchmark.extra_info["includes"] = "PyO3 call, CRC32C, a tuple and the payload bytes"


@pytest.mark.benchmark(group="micro: journal append via LedgerStorage.add_entries(1000)")
@pytest.mark.parametrize("sync", [False, True], ids=["cpu-path", "fsync"])
@pytest.mark.parametrize("size", (100, 1024))
def test_journal_append(benchmark, tmp_path: Path, size: int, sync: bool) -> None:  # type: ignore[no-untyped-def]
    """1000 adds per call through the journal (group commit) into entry log and index.

    ``cpu-path``: ``journalSyncData=false`` and ``journalFlushWhenQueueEmpty=true`` (no fsync,
    no group wait). ``fsync``: the bookie defaults, so a call also waits for the group wait
    (2 ms) when its 1000 entries stay under the 512 KiB group threshold, and for fdatasync."""
    extra = {} if sync else {"journalSyncData": False, "journalFlushWhenQueueEmpty": True}
    storage = open_ledger_storage(**storage_config(tmp_path, **extra))
    payload = b"j" * size
    next_entry = itertools.count(0, 1000)

    def append() -> None:
        first = next(next_entry)
        storage.add_entries(1, [(first + i, payload) for i in range(1000)])

    try:
        benchmark.pedantic(append, rounds=30, warmup_rounds=2)
    finally:
        storage.close()
    benchmark.extra_info["entries_per_call"] = 1000
    benchmark.extra_info["includes"] = "building the Python list, PyO3 call, GIL released wait"


@pytest.mark.benchmark(group="micro: one durable add via LedgerStorage.add_entry")
def test_single_durable_add(benchmark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """One add at a time: the journal's group wait plus one fdatasync per add."""
    storage = open_ledger_storage(**storage_config(tmp_path))
    entry_ids = itertools.count()
    payload = b"s" * 100
    try:
        benchmark.pedantic(
            lambda: storage.add_entry(1, next(entry_ids), payload), rounds=100, warmup_rounds=2
        )
    finally:
        storage.close()


@pytest.mark.benchmark(group="micro: index lookup via LedgerStorage.read_entry")
def test_index_lookup_read_entry(benchmark, filled_storage: LedgerStorage) -> None:  # type: ignore[no-untyped-def]
    """A random (ledger, entry) among 160,000 cached entries: index lookup + positional read."""
    rng = random.Random(6)
    keys = [
        (rng.randint(1, FILLED_LEDGERS), rng.randrange(FILLED_ENTRIES_PER_LEDGER))
        for _ in range(4096)
    ]
    cycle = itertools.cycle(keys)

    def lookup() -> bytes:
        ledger, entry = next(cycle)
        return filled_storage.read_entry(ledger, entry)

    benchmark(lookup)
    benchmark.extra_info["includes"] = "PyO3 call, index lookup, pread from page cache, bytes"


@pytest.mark.benchmark(group="micro: range read via LedgerStorage.read_range(100)")
def test_range_read(benchmark, filled_storage: LedgerStorage) -> None:  # type: ignore[no-untyped-def]
    """100 consecutive entries per call, as BATCH_READ_ENTRY(100) reads them."""
    rng = random.Random(7)
    starts = itertools.cycle(
        [
            (rng.randint(1, FILLED_LEDGERS), rng.randrange(FILLED_ENTRIES_PER_LEDGER - 100))
            for _ in range(1024)
        ]
    )

    def read() -> list[bytes]:
        ledger, first = next(starts)
        return filled_storage.read_range(ledger, first, 100, 1 << 20)

    benchmark(read)
    benchmark.extra_info["entries_per_call"] = 100
