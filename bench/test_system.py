"""System benchmarks: adds and reads through a pybkx bookie process on loopback, driven by the
Rust load generator (``pybkx._core.run_load``) from the test process.

Owns these measurements; it must never assert on timings beyond "no request failed". One call is
one whole run_load; ``extra_info`` carries entries/s and the latency percentiles of the run.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from pybkx._core import run_load

ADD_IN_FLIGHT = 256
READ_IN_FLIGHT = 64
READ_LEDGER = 5
READ_ENTRIES = 100_000
ADD_COUNTS = {100: 50_000, 1024: 30_000, 16384: 3_000}

_ledger_ids = itertools.count(1000, 100)


def record(benchmark: Any, reports: list[dict[str, Any]]) -> None:
    """Entries/s and latency of the median run into extra_info; fail on failed requests."""
    assert all(r["errors"] == 0 for r in reports), reports  # correctness, not timing
    median = sorted(reports, key=lambda r: r["entries"] / r["seconds"])[len(reports) // 2]
    benchmark.extra_info.update(
        {
            "entries_per_s": round(median["entries"] / median["seconds"]),
            "p50_us": median["p50_us"],
            "p99_us": median["p99_us"],
            "p999_us": median["p999_us"],
        }
    )


@pytest.mark.benchmark(group="system: adds through a bookie")
@pytest.mark.parametrize("ledgers", (1, 16))
@pytest.mark.parametrize("size", tuple(ADD_COUNTS))
def test_adds(benchmark, bookie: str, size: int, ledgers: int) -> None:  # type: ignore[no-untyped-def]
    reports: list[dict[str, Any]] = []

    def setup() -> tuple[tuple[Any, ...], dict[str, Any]]:
        return (), {"ledger_id": next(_ledger_ids)}

    def add(ledger_id: int) -> None:
        reports.append(
            run_load(
                bookie, "add", ledger_id=ledger_id, ledgers=ledgers, count=ADD_COUNTS[size],
                payload_size=size, in_flight=ADD_IN_FLIGHT,
            )
        )  # fmt: skip

    benchmark.pedantic(add, setup=setup, rounds=3)
    record(benchmark, reports)
    benchmark.extra_info["entries_per_call"] = ADD_COUNTS[size]


@pytest.fixture(scope="module")
def read_ledger(bookie: str) -> int:
    """A ledger of READ_ENTRIES 100 B entries, read once so they are cached."""
    for workload, kw in (("add", {"in_flight": ADD_IN_FLIGHT}), ("read", {"batch": 100})):
        report = run_load(bookie, workload, ledger_id=READ_LEDGER, count=READ_ENTRIES, **kw)
        assert report["errors"] == 0 and report["entries"] == READ_ENTRIES, report
    return READ_LEDGER


@pytest.mark.benchmark(group="system: reads from cache through a bookie")
@pytest.mark.parametrize("batch", [None, 100], ids=["single-READ", "BATCH_READ_ENTRY-100"])
def test_reads(benchmark, bookie: str, read_ledger: int, batch: int | None) -> None:  # type: ignore[no-untyped-def]
    reports: list[dict[str, Any]] = []

    def read() -> None:
        reports.append(
            run_load(
                bookie, "read", ledger_id=read_ledger, count=READ_ENTRIES, batch=batch,
                in_flight=READ_IN_FLIGHT,
            )
        )  # fmt: skip

    benchmark.pedantic(read, rounds=3)
    record(benchmark, reports)
    benchmark.extra_info["entries_per_call"] = READ_ENTRIES
