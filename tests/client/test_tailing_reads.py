"""The tailing reads of ``ReadHandle`` against real ``pybkx bookie`` processes, V2 and V3:
``read_last_add_confirmed_and_entry`` (BookKeeper's ``readLastAddConfirmedAndEntry``: an entry
already confirmed at once, one past the LAC once an add confirms it, nothing past a closed
ledger's end), its speculative long-poll reads past a paused replica (V3), and
``read_unconfirmed_async``.

Owns the tailing-read API's behaviour; the LAC wait itself is ``test_client_v3``'s.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
from collections.abc import Iterator

import pytest

from pybkx import errors
from pybkx.client import BookKeeper
from pybkx.tools.sandbox import Sandbox

pytestmark = pytest.mark.integration

FAST = {"addEntryTimeoutSec": 2, "readEntryTimeoutSec": 2, "zkTimeout": 2000}
PROTOCOLS = [pytest.param(False, id="V3 long poll"), pytest.param(True, id="V2 polling")]


def payload(entry: int) -> bytes:
    return f"tail-{entry}".encode() * (1 + entry % 5)


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    directory = tmp_path_factory.mktemp("tailing") / "sandbox"
    with Sandbox(3, directory=directory, conf={"zkTimeout": 2000}) as sandbox:
        yield sandbox


@pytest.mark.parametrize("v2", PROTOCOLS)
def test_the_tailing_read_returns_confirmed_entries_and_waits_for_the_next(
    sandbox: Sandbox, v2: bool
) -> None:
    with (
        BookKeeper(sandbox.metadata_uri, **FAST) as writer_bk,
        BookKeeper(sandbox.metadata_uri, useV2WireProtocol=v2, **FAST) as reader_bk,
    ):
        lh = writer_bk.create_ledger(3, 2, 2, password=b"pw")
        # Appended together, entries carry an old LAC; the one appended after confirms 0..9.
        lh.append_many([payload(e) for e in range(10)])
        lh.append(payload(10))
        rh = reader_bk.open_ledger(lh.ledger_id, b"pw", recovery=False)
        # Confirmed on the bookies though not known here yet: the LAC and the entry.
        lac, entry = rh.read_last_add_confirmed_and_entry(5, 5.0)
        assert entry is not None and (entry.entry_id, bytes(entry)) == (5, payload(5))
        assert lac >= 5 and rh.last_add_confirmed >= 5
        # At or below the LAC known: read at once.
        lac, entry = rh.read_last_add_confirmed_and_entry(2, 0.0)
        assert entry is not None and bytes(entry) == payload(2)
        # Written but not confirmed, and nothing comes: no entry when the wait ends.
        lac, entry = rh.read_last_add_confirmed_and_entry(10, 0.3)
        assert (lac, entry) == (9, None)
        # An add during the wait confirms entry 10: it comes with the LAC.
        timer = threading.Timer(0.2, lambda: lh.append(payload(11)))
        timer.start()
        lac, entry = rh.read_last_add_confirmed_and_entry(10, 20.0)
        timer.join()
        assert entry is not None and (entry.entry_id, bytes(entry)) == (10, payload(10))
        assert lac == 10 and rh.last_add_confirmed == 10
        lac, entry = asyncio.run(rh.read_last_add_confirmed_and_entry_async(3, 1.0, True))
        assert entry is not None and bytes(entry) == payload(3)
        # Unconfirmed entries on request, whatever the LAC.
        unconfirmed = asyncio.run(rh.read_unconfirmed_async(11, 11))
        assert [bytes(e) for e in unconfirmed] == [payload(11)]
        with pytest.raises(errors.IncorrectParameterException):
            rh.read_last_add_confirmed_and_entry(-1, 1.0)
        with pytest.raises(errors.IncorrectParameterException):
            rh.read_last_add_confirmed_and_entry(1, -1.0)
        lh.close()
        closed = reader_bk.open_ledger(lh.ledger_id, b"pw")
        assert closed.read_last_add_confirmed_and_entry(12, 5.0) == (11, None)


def test_parallel_long_poll_reads_ask_every_replica_at_once(sandbox: Sandbox) -> None:
    with (
        BookKeeper(sandbox.metadata_uri, **FAST) as writer_bk,
        BookKeeper(sandbox.metadata_uri, useV2WireProtocol=False, **FAST) as reader_bk,
    ):
        lh = writer_bk.create_ledger(3, 3, 2, password=b"pw")
        lh.append_many([payload(e) for e in range(3)])
        lh.append(payload(3))
        rh = reader_bk.open_ledger(lh.ledger_id, b"pw", recovery=False)
        lac, entry = rh.read_last_add_confirmed_and_entry(1, 5.0, parallel=True)
        assert entry is not None and bytes(entry) == payload(1) and lac == 2
        lh.close()


def test_a_long_poll_read_past_a_paused_replica_goes_to_the_next(sandbox: Sandbox) -> None:
    """V3: the first replica of the entry is paused (SIGSTOP) and never answers; after
    ``firstSpeculativeReadLACTimeout`` the next one is asked and answers."""
    with (
        BookKeeper(sandbox.metadata_uri, **FAST) as writer_bk,
        BookKeeper(
            sandbox.metadata_uri,
            useV2WireProtocol=False,
            firstSpeculativeReadLACTimeout=100,
            readEntryTimeoutSec=5,
        ) as reader_bk,
    ):
        lh = writer_bk.create_ledger(3, 3, 3, password=b"pw")
        lh.append_many([payload(e) for e in range(7)])
        lh.append(payload(7))
        rh = reader_bk.open_ledger(lh.ledger_id, b"pw", recovery=False)
        # Entry 5's write set starts at ensemble position 2.
        first = reader_bk.address_of(lh.metadata.last_ensemble[lh.metadata.write_set(5)[0]])
        pid = sandbox.pid(sandbox.bookie_addresses.index(first))
        assert pid is not None
        os.kill(pid, signal.SIGSTOP)
        try:
            lac, entry = rh.read_last_add_confirmed_and_entry(5, 20.0)
        finally:
            os.kill(pid, signal.SIGCONT)
        assert entry is not None and (entry.entry_id, bytes(entry)) == (5, payload(5))
        assert lac == 6
        lh.close()
