"""Adv ledgers (BookKeeper's ``createLedgerAdv``) with real bookie processes: caller-chosen
ledger and entry ids, out-of-order adds acknowledged in id order, gaps that hold the LAC back,
BookKeeper's errors for duplicate, negative and id-less adds, and recovery by another client
of an adv ledger left open (closing at the first gap)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import pytest
from support.wait import wait_until

from pybkx import errors
from pybkx.client import BookKeeper
from pybkx.client.adv_handle import LedgerHandleAdv
from pybkx.tools.sandbox import Sandbox

pytestmark = pytest.mark.integration

FAST = {"addEntryTimeoutSec": 2, "readEntryTimeoutSec": 2, "zkTimeout": 2000}


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    directory = tmp_path_factory.mktemp("adv") / "sandbox"
    with Sandbox(3, directory=directory, conf={"zkTimeout": 2000}) as sandbox:
        yield sandbox


@pytest.fixture(params=[True, False], ids=["V2", "V3"])
def bk(sandbox: Sandbox, request: pytest.FixtureRequest) -> Iterator[BookKeeper]:
    with BookKeeper(sandbox.metadata_uri, useV2WireProtocol=request.param, **FAST) as client:
        yield client


def test_out_of_order_adds_complete_in_entry_id_order(bk: BookKeeper) -> None:
    lh = bk.create_ledger_adv(3, 2, 2, password=b"pw")
    assert isinstance(lh, LedgerHandleAdv)
    completed: list[int] = []
    lock = threading.Lock()

    def note(future: object) -> None:
        with lock:
            completed.append(future.result())  # type: ignore[attr-defined]

    futures = {}
    for entry_id in (2, 0, 4, 3):  # entry 1 not yet: a gap
        futures[entry_id] = lh.append_async(entry_id, f"entry-{entry_id}".encode())
        futures[entry_id].add_done_callback(note)
    assert futures[0].result(10) == 0
    # Entries 2..4 reach the bookies, yet must not complete while entry 1 is missing.
    wait_until(
        lambda: [e.entry_id for e in lh.read_unconfirmed(2, 4)] == [2, 3, 4],
        "entries 2..4 stored on the bookies",
        ignoring=(errors.BKException,),
    )
    assert lh.last_add_confirmed == 0
    assert not any(futures[i].done() for i in (2, 3, 4))
    futures[1] = lh.append_async(1, b"entry-1")
    futures[1].add_done_callback(note)
    assert [futures[i].result(10) for i in (1, 2, 3, 4)] == [1, 2, 3, 4]
    wait_until(lambda: len(completed) == 5, "every completion callback ran")
    assert completed == [0, 1, 2, 3, 4]
    assert lh.last_add_confirmed == 4
    lh.close()
    rh = bk.open_ledger(lh.ledger_id, b"pw")
    assert rh.is_closed and rh.last_add_confirmed == 4
    assert [e.payload for e in rh] == [f"entry-{i}".encode() for i in range(5)]


def test_bookkeepers_errors_for_bad_entry_ids(bk: BookKeeper) -> None:
    lh = bk.create_ledger_adv(3, 3, 2, password=b"pw")
    assert lh.append(0, b"zero") == 0
    with pytest.raises(errors.DuplicateEntryIdException):
        lh.append(0, b"again")  # at the LAC
    with pytest.raises(errors.DuplicateEntryIdException):
        lh.append(-1, b"negative")  # below the initial LAC, as BookKeeper answers
    pending = lh.append_async(5, b"five")  # waits for 1..4
    with pytest.raises(errors.DuplicateEntryIdException):
        lh.append_async(5, b"five again").result(10)
    with pytest.raises(errors.IllegalOpException):
        lh.append(b"no id")  # type: ignore[arg-type]
    with pytest.raises(errors.IllegalOpException):
        lh.append_many([b"a", b"b"])
    for i in range(1, 5):
        assert lh.append(i, b"x") == i
    assert pending.result(10) == 5
    lh.close()
    assert bk.open_ledger(lh.ledger_id, b"pw").last_add_confirmed == 5


def test_a_caller_chosen_ledger_id(bk: BookKeeper) -> None:
    chosen = 7_000_000 + (0 if bk.config.use_v2_wire_protocol else 1)
    lh = bk.create_ledger_adv(3, 2, 2, password=b"pw", ledger_id=chosen)
    assert lh.ledger_id == chosen
    assert lh.append(0, b"a") == 0
    lh.close()
    with pytest.raises(errors.LedgerExistException):
        bk.create_ledger_adv(3, 2, 2, password=b"pw", ledger_id=chosen)
    with pytest.raises(errors.IncorrectParameterException):
        bk.create_ledger_adv(3, 2, 2, password=b"pw", ledger_id=-5)
    assert [e.payload for e in bk.open_ledger(chosen, b"pw")] == [b"a"]


def test_recovery_of_an_open_adv_ledger_closes_at_the_first_gap(
    sandbox: Sandbox, bk: BookKeeper
) -> None:
    lh = bk.create_ledger_adv(3, 3, 2, password=b"pw")
    for entry_id in (3, 1, 0, 2, 4):
        lh.append_async(entry_id, f"e{entry_id}".encode())
    wait_until(lambda: lh.last_add_confirmed == 4, "entries 0..4 confirmed")
    stuck = lh.append_async(6, b"e6")  # entry 5 never comes
    wait_until(
        lambda: [e.entry_id for e in lh.read_unconfirmed(6, 6)] == [6],
        "entry 6 stored on the bookies",
        ignoring=(errors.BKException,),
    )
    with BookKeeper(sandbox.metadata_uri, **FAST) as other:
        rh = other.open_ledger(lh.ledger_id, b"pw")  # recovery: fence, read on, close
        assert rh.is_closed and rh.last_add_confirmed == 4
        assert [e.payload for e in rh] == [f"e{i}".encode() for i in range(5)]
    # The old writer is fenced: its next add fails, and so does the one stuck behind the gap.
    with pytest.raises((errors.LedgerFencedException, errors.LedgerClosedException)):
        lh.append(5, b"e5")
    with pytest.raises((errors.LedgerFencedException, errors.LedgerClosedException)):
        stuck.result(10)


def test_adv_ledgers_from_asyncio(sandbox: Sandbox) -> None:
    async def scenario() -> list[bytes]:
        with BookKeeper(sandbox.metadata_uri, **FAST) as client:
            lh = await client.create_ledger_adv_async(3, 2, 2, password=b"pw")
            ids = await asyncio.gather(
                *(lh.append_async(i, f"a{i}".encode()) for i in reversed(range(20)))
            )
            assert list(ids) == list(reversed(range(20)))
            await lh.close_async()
            rh = await client.open_ledger_async(lh.ledger_id, b"pw")
            return [e.payload for e in rh]

    assert asyncio.run(scenario()) == [f"a{i}".encode() for i in range(20)]
