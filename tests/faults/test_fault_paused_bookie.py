"""Fault 4: E=3 Qw=3 Qa=2 on three bookies, one paused (SIGSTOP), no spare. The two healthy
bookies still make Qa, so appends go on (BookKeeper's ``delayEnsembleChange``); the client used
to "replace" the paused bookie with itself, stall every append and write identical ensemble
segments. An ensemble identical to the current one must never be written.

Owns the writer's behaviour with a paused bookie and no spare, against real bookie processes.
"""

from __future__ import annotations

import itertools
import os
import signal
import time
from pathlib import Path

import pybkx
from pybkx.tools.sandbox import Sandbox

SMALL_BOOKIE = {"journalPreAllocSizeMB": 1, "flushInterval": 0, "zkTimeout": 20000}
ADD_TIMEOUT_S = 1
APPEND_RESULT_TIMEOUT_S = 30.0
PAUSED_FOR_S = 4 * ADD_TIMEOUT_S


def test_a_paused_bookie_with_qa_still_met_does_not_stall_writes(tmp_path: Path) -> None:
    with (
        Sandbox(3, directory=tmp_path / "sandbox", conf=SMALL_BOOKIE) as sandbox,
        pybkx.BookKeeper(
            sandbox.metadata_uri, addEntryTimeoutSec=ADD_TIMEOUT_S, bookieReplacementTimeoutMs=2000
        ) as bk,
    ):
        lh = bk.create_ledger(
            ensemble_size=3, write_quorum_size=3, ack_quorum_size=2, password=b"pw"
        )
        written = [f"entry {e}".encode() for e in range(20)]
        lh.append_many(written)
        pid = sandbox.pid(2)
        assert pid is not None
        os.kill(pid, signal.SIGSTOP)
        try:
            # Past several add timeouts, every append completes with the two others.
            deadline = time.monotonic() + PAUSED_FOR_S
            while time.monotonic() < deadline:
                data = f"entry {len(written)}".encode()
                entry_id = lh.append_async(data).result(APPEND_RESULT_TIMEOUT_S)
                assert entry_id == len(written)
                written.append(data)
                time.sleep(0.01)  # not a wait: appends paced through the pause
        finally:
            os.kill(pid, signal.SIGCONT)
        lh.append(b"after")
        written.append(b"after")
        ensembles = list(lh.metadata.ensembles.values())
        lh.close()
        for older, newer in itertools.pairwise(ensembles):
            assert older != newer, f"a no-op ensemble change was written: {ensembles}"
        rh = bk.open_ledger(lh.ledger_id, b"pw")
        assert [bytes(e) for e in rh.read(0, len(written) - 1)] == written
        rh.close()
