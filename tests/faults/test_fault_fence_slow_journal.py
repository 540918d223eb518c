"""Found by the nemesis (a 20-minute run, seed 20261125): adds waiting in a slow journal when a
recovery fenced their ledger were acknowledged after the fence, while the recovery's fencing read
had been answered with what the bookie had applied when the read arrived: it closed the ledger
without them, and 71 acknowledged entries were lost. A fencing read now reads once the fence is
durable, which is after every add admitted before it (adds and fences of a ledger go through one
journal, in order), so the recovery sees every entry its writer can still get acknowledged."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.bookies import (
    LEDGER_ID,
    PASSWORD,
    REQUEST_TIMEOUT_S,
    add_entries,
    bookie_client,
    local_bookie,
)

import pybkx._core as core

pytestmark = [pytest.mark.faults, pytest.mark.integration]


def test_a_fencing_read_sees_the_adds_a_slow_journal_still_holds(tmp_path: Path) -> None:
    journal = tmp_path / "journal"
    bookie = local_bookie(tmp_path)
    bookie.start()
    fault = None
    try:
        address = f"127.0.0.1:{bookie.port}"
        with bookie_client() as client:
            add_entries(client, address, range(0, 1))[0].result(REQUEST_TIMEOUT_S)
            # The next journal write takes 2 s: entries 1..5 wait in the journal, unapplied.
            fault = core.inject_disk_fault(str(journal), ["write"], delay_ms=2000, times=1)
            pending = add_entries(client, address, range(1, 6))
            key = core.master_key(PASSWORD)
            last = client.read(address, LEDGER_ID, -1, core.FLAG_DO_FENCING, key)
            entry = last.result(REQUEST_TIMEOUT_S)
            for f in pending:  # admitted before the fence: acknowledged
                f.result(REQUEST_TIMEOUT_S)
            digest = core.DigestManager(LEDGER_ID, PASSWORD, "CRC32C")
            # The fencing read saw them all; it used to answer entry 0.
            assert digest.verify(entry).entry_id == 5
    finally:
        if fault is not None:
            core.remove_disk_fault(fault)
        bookie.stop()
