"""The cluster demo (the README's main job): a local sandbox, one replicated ledger written while a
bookie is killed, recovered by a second client, read back and verified. It only drives the
public client and sandbox APIs; it must never touch bookie files or the metadata directly."""

from __future__ import annotations

import hashlib
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pybkx import errors
from pybkx.client import BookKeeper, Future, LedgerHandle, ReadHandle
from pybkx.tools.sandbox import Sandbox

CLIENT_CONF = {"addEntryTimeoutSec": 5, "readEntryTimeoutSec": 5}
APPEND_WINDOW = 1000
READ_BATCH_ENTRIES = 1000


class DemoError(Exception):
    """The demo found data that differs from what it wrote, or could not run."""


@dataclass(frozen=True)
class DemoResult:
    entries: int
    payload_bytes: int
    write_s: float
    recover_s: float
    read_s: float
    ensembles: int


def payload(entry_id: int, size_bytes: int) -> bytes:
    """Deterministic payload of an entry: verification needs no stored copy."""
    seed = hashlib.blake2b(entry_id.to_bytes(8, "big"), digest_size=16).digest()
    return (seed * (size_bytes // 16 + 1))[:size_bytes]


def run_demo(
    entries: int = 100_000,
    size_bytes: int = 100,
    bookies: int = 3,
    zk_uri: str | None = None,
    directory: Path | None = None,
    report: Callable[[str], None] = print,
) -> DemoResult:
    """Write ``entries`` entries to an E=3/Qw=2/Qa=2 ledger on a ``bookies``-bookie sandbox,
    SIGKILL one bookie of the ensemble a third of the way in (it restarts a second later, as a
    supervisor would), let a second client open the ledger with recovery, and read everything
    back with batch reads. Raises DemoError on any mismatch, BKException on failures."""
    if bookies < 3:
        raise DemoError("the demo needs at least 3 bookies")
    with Sandbox(bookies, zk_uri=zk_uri, directory=directory) as sandbox:
        report(f"sandbox: {bookies} bookies {sandbox.bookie_addresses}")
        report(f"metadata: {sandbox.metadata_uri}")
        with BookKeeper(sandbox.metadata_uri, **CLIENT_CONF) as writer_bk:
            lh = writer_bk.create_ledger(3, 2, 2, digest_type="CRC32C")
            report(f"ledger {lh.ledger_id}: ensemble {list(lh.metadata.last_ensemble)}")
            write_s = _write_through_a_crash(sandbox, lh, entries, size_bytes, report)
            ensembles = len(lh.metadata.ensembles)
            # The writer stops here without closing, as if its process died.
            with BookKeeper(sandbox.metadata_uri, **CLIENT_CONF) as reader_bk:
                rh, recover_s = _recover(reader_bk, lh, entries, report)
                read_s = _read_back(rh, entries, size_bytes, report)
    return DemoResult(entries, entries * size_bytes, write_s, recover_s, read_s, ensembles)


def _write_through_a_crash(
    sandbox: Sandbox,
    lh: LedgerHandle,
    entries: int,
    size_bytes: int,
    report: Callable[[str], None],
) -> float:
    """Append ``entries`` entries, APPEND_WINDOW in flight, while the ensemble's second bookie
    is killed a third of the way in and restarted a second later; the seconds it took."""
    victim = sandbox.bookie_addresses.index(lh.metadata.last_ensemble[1])
    kill_at = entries // 3

    def crash_and_restart() -> None:
        sandbox.kill_bookie(victim)
        report(f"killed bookie {sandbox.bookie_addresses[victim]} (SIGKILL)")
        time.sleep(1.0)
        sandbox.restart_bookie(victim)
        report(f"restarted bookie {sandbox.bookie_addresses[victim]}")

    crasher = threading.Thread(target=crash_and_restart)
    start = time.perf_counter()
    futures: deque[Future] = deque()
    for e in range(entries):
        if e == kill_at:
            crasher.start()
        futures.append(lh.append_async(payload(e, size_bytes)))
        if len(futures) >= APPEND_WINDOW:
            futures.popleft().result()
    for future in futures:
        future.result()
    write_s = time.perf_counter() - start
    crasher.join()
    report(
        f"write: {entries:,} entries in {write_s:.2f} s = {entries / write_s:,.0f} "
        f"entries/s ({len(lh.metadata.ensembles)} ensembles: {list(lh.metadata.ensembles)})"
    )
    return write_s


def _recover(
    reader_bk: BookKeeper, lh: LedgerHandle, entries: int, report: Callable[[str], None]
) -> tuple[ReadHandle, float]:
    """Open the ledger with recovery from a second client and check that the writer is fenced
    and that every entry survived; the handle and the seconds recovery took. Raises
    DemoError."""
    start = time.perf_counter()
    rh = reader_bk.open_ledger(lh.ledger_id, recovery=True)
    recover_s = time.perf_counter() - start
    report(
        f"recovery by a second client: {rh.metadata.state.name}, "
        f"last entry {rh.last_add_confirmed}, {rh.length:,} bytes, {recover_s:.2f} s"
    )
    try:
        lh.append(b"late write")
        raise DemoError("the old writer could still append after recovery")
    except errors.LedgerFencedException:
        report("old writer fenced: its next append raised LedgerFencedException")
    if rh.last_add_confirmed != entries - 1:
        raise DemoError(f"recovered {rh.last_add_confirmed + 1} entries, wrote {entries}")
    return rh, recover_s


def _read_back(
    rh: ReadHandle, entries: int, size_bytes: int, report: Callable[[str], None]
) -> float:
    """Batch-read every entry and compare it with what was written; the seconds it took.
    Raises DemoError at the first difference."""
    start = time.perf_counter()
    next_id = 0
    while next_id < entries:
        for entry in rh.batch_read(next_id, READ_BATCH_ENTRIES, 4 << 20):
            if entry.entry_id != next_id:
                raise DemoError(f"expected entry {next_id}, got {entry.entry_id}")
            if entry.payload != payload(next_id, size_bytes):
                raise DemoError(f"entry {next_id} differs from what was written")
            next_id += 1
    read_s = time.perf_counter() - start
    report(
        f"read: {entries:,} entries with batch reads in {read_s:.2f} s = "
        f"{entries / read_s:,.0f} entries/s; every byte verified"
    )
    return read_s
