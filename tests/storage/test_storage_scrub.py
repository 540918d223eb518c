"""The storage's scrubber through the binding: bit flips and a truncated entry log injected
into the files of a closed storage are found (each damaged entry reported once, never served),
a paced scrub reads at most its rate over a measured window, and an unpaced one reads every
log whole.

Owns the scrubber's checks and pacing; the repair from another replica is
tests/bookie/test_scrub_repair.py's."""

from __future__ import annotations

import itertools
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from storage_helpers import MIB, entry_log_files, ledger_dirs
from support.storage import OpenStorage
from support.wait import wait_until

from pybkx import errors
from pybkx._core import DigestManager, LedgerStorage

LEDGER = 5
PASSWORD = b""
KEY = b"key-5"


def packaged(entry_id: int, size: int) -> bytes:
    """The entry as a client sends it: header, CRC32C digest, payload."""
    body = bytes([entry_id % 251]) * size
    return DigestManager(LEDGER, PASSWORD, "CRC32C").package(entry_id, entry_id - 1, 0, body)


def fill(storage: LedgerStorage, entries: int, size: int) -> None:
    for e in range(entries):
        storage.add_entry(LEDGER, e, packaged(e, size), master_key=KEY)
    storage.checkpoint()


def flip_bit(path: Path, offset: int) -> None:
    with path.open("r+b") as f:
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ 0x01]))


def metric(storage: LedgerStorage, name: str) -> int:
    return sum(m.value for m in storage.metrics() if m.name == name and isinstance(m.value, int))


def test_an_unpaced_scrub_reads_every_log_whole_and_finds_nothing_on_healthy_logs(
    config: dict[str, Any], open_storage: OpenStorage
) -> None:
    storage = open_storage(config, logSizeLimit=1 * MIB)
    fill(storage, 600, 8000)
    report = storage.scrub(0)
    assert report.complete and report.corrupt_entries == 0
    assert report.entries_verified == 600
    assert report.digest_unverified == 0
    logs_bytes = sum(p.stat().st_size for d in ledger_dirs(config) for p in entry_log_files(d))
    # Every record is read: all but the logs' headers and ledgers maps.
    assert report.bytes_scrubbed >= 600 * 8000
    assert report.bytes_scrubbed >= 0.95 * logs_bytes, (report.bytes_scrubbed, logs_bytes)
    assert metric(storage, "pybkx_scrub_entries_verified") == 600
    assert metric(storage, "pybkx_scrub_bytes") == report.bytes_scrubbed


def test_bit_flips_and_a_truncated_log_are_found_reported_once_and_never_served(
    config: dict[str, Any], open_storage: OpenStorage
) -> None:
    storage = open_storage(config, logSizeLimit=1 * MIB)
    fill(storage, 600, 8000)
    storage.close()
    # Injected while no storage has the files open: a running bookie's own writes and
    # checkpoints would race the injection (tests/bookie/test_scrub_repair.py injects under a
    # stopped bookie likewise).
    logs = sorted(p for d in ledger_dirs(config) for p in entry_log_files(d))
    assert len(logs) >= 3, logs
    for offset in (100_000, 300_000, 500_000):
        flip_bit(logs[0], offset)
    with logs[1].open("r+b") as f:
        f.truncate(logs[1].stat().st_size // 2)

    storage = open_storage(config, logSizeLimit=1 * MIB)
    report = storage.scrub(0)
    checks = {f.check for f in report.findings}
    assert "missing" in checks, report
    assert checks & {"record_crc", "record_ids"}, report
    assert report.corrupt_entries == len(report.findings) >= 4
    assert {f.entry_log for f in report.findings} == {logs[0].name, logs[1].name}
    assert report.entries_verified + report.corrupt_entries == 600
    assert metric(storage, "pybkx_scrub_corrupt_entries") == report.corrupt_entries
    # Queued once for the bookie, whatever the runs that find them again.
    storage.scrub(0)
    pending = storage.take_scrub_findings()
    assert sorted((f.ledger_id, f.entry_id) for f in pending) == sorted(
        (f.ledger_id, f.entry_id) for f in report.findings
    )
    for f in report.findings:
        with pytest.raises((errors.BookieIOException, errors.BookieException)):
            storage.read_entry(f.ledger_id, f.entry_id)
    # A repair (the bookie's recovery add) makes the entry whole again.
    damaged = report.findings[0]
    storage.add_entry(
        LEDGER, damaged.entry_id, packaged(damaged.entry_id, 8000), master_key=KEY, recovery=True
    )
    storage.scrub_repaired(LEDGER, damaged.entry_id)
    assert storage.read_entry(LEDGER, damaged.entry_id) == packaged(damaged.entry_id, 8000)


def test_a_paced_scrub_reads_at_most_its_rate_over_a_measured_window(
    config: dict[str, Any], open_storage: OpenStorage
) -> None:
    storage = open_storage(config, logSizeLimit=1 * MIB)
    fill(storage, 500, 8000)  # about 4 MB
    rate = 2 * MIB
    burst = rate // 4  # one read: a quarter of a second at the rate
    done = threading.Event()
    reports: list[Any] = []

    def run() -> None:
        reports.append(storage.scrub(rate))
        done.set()

    thread = threading.Thread(target=run)
    started = time.monotonic()
    thread.start()
    # Samples of the run's progress against the clock: a count over each window.
    # (clock before, bytes read, clock after): a window spans from the earlier sample's first
    # clock to the later one's second, so it holds every byte the two counts differ by.
    samples: list[tuple[float, int, float]] = []
    while not done.wait(0.05):  # not a wait for a condition: the sampling period
        before = time.monotonic()
        read = storage.scrub_status()[1]
        samples.append((before, read, time.monotonic()))
    thread.join()
    elapsed = time.monotonic() - started
    total = reports[0].bytes_scrubbed
    assert total >= 500 * 8000
    assert total <= rate * elapsed + burst + 9000, (total, elapsed)
    for (t0, b0, _), (_, b1, t1) in itertools.pairwise(samples):
        window = t1 - t0
        assert b1 - b0 <= rate * window + burst + 9000, (b1 - b0, window)


def test_the_background_scrubber_runs_every_interval_at_its_rate(
    config: dict[str, Any], open_storage: OpenStorage
) -> None:
    storage = open_storage(
        config, logSizeLimit=1 * MIB, scrubRateBytesPerSecond=8 * MIB, scrubIntervalSeconds=1
    )
    fill(storage, 200, 8000)
    runs = metric(storage, "pybkx_scrub_runs")
    verified = metric(storage, "pybkx_scrub_entries_verified")
    # Two more runs: at least one started after the entries were indexed, and read them all.
    wait_until(
        lambda: metric(storage, "pybkx_scrub_runs") >= runs + 2,
        "two more background scrub runs",
        timeout_s=30,
    )
    assert metric(storage, "pybkx_scrub_entries_verified") - verified >= 200
    assert metric(storage, "pybkx_scrub_corrupt_entries") == 0


@pytest.mark.parametrize(("digest_type", "unverified"), [("CRC32", 0), ("HMAC", 50), ("DUMMY", 50)])
def test_entries_of_every_digest_type_pass_and_keyed_ones_are_counted_unverified(
    config: dict[str, Any], open_storage: OpenStorage, digest_type: str, unverified: int
) -> None:
    storage = open_storage(config)
    dm = DigestManager(LEDGER, b"password", digest_type)
    for e in range(50):
        storage.add_entry(LEDGER, e, dm.package(e, e - 1, 0, b"x" * 3000), master_key=KEY)
    storage.checkpoint()
    report = storage.scrub(0)
    # The bookie holds no key for a MAC (it derives from the password), and DUMMY has no
    # digest: their records are still checked, and they are never reported damaged.
    assert report.corrupt_entries == 0, report
    assert report.entries_verified == 50
    assert report.digest_unverified == unverified
