"""WriteFlag.DEFERRED_SYNC and ``force()`` with real bookie processes: adds acknowledged before
the bookies' sync leave the LAC where the last force put it; a forced ledger survives every
bookie being killed (-9) and restarted; a bookie failure fails a deferred-sync ledger instead of
changing its ensemble; the V2 protocol refuses the flag, as BookKeeper's client does."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from pybkx import WriteFlag, errors
from pybkx.client import BookKeeper
from pybkx.tools.sandbox import Sandbox

pytestmark = pytest.mark.integration

V3 = {
    "useV2WireProtocol": False,
    "addEntryTimeoutSec": 2,
    "readEntryTimeoutSec": 2,
    "zkTimeout": 2000,
}


def payloads(n: int, tag: str) -> list[bytes]:
    return [f"{tag}-{i}".encode() * (1 + i % 5) for i in range(n)]


@pytest.fixture
def sandbox(tmp_path: Path) -> Iterator[Sandbox]:
    with Sandbox(4, directory=tmp_path / "sandbox", conf={"zkTimeout": 2000}) as sandbox:
        yield sandbox


def test_forced_entries_survive_every_bookie_killed_and_restarted(sandbox: Sandbox) -> None:
    data = payloads(300, "forced")
    with BookKeeper(sandbox.metadata_uri, **V3) as bk:
        lh = bk.create_ledger(3, 3, 2, password=b"pw", write_flags={"DEFERRED_SYNC"})
        assert lh.write_flags == {WriteFlag.DEFERRED_SYNC}
        assert lh.append_many(data[:200]) == 199
        # BookKeeper's rule: acknowledged deferred-sync adds do not move the LAC; force does.
        assert lh.last_add_confirmed == -1
        assert lh.force() == 199
        assert lh.last_add_confirmed == 199
        lh.append_many(data[200:])
        assert lh.last_add_confirmed == 199
        assert lh.force_async().result(30) == 299
        ledger_id = lh.ledger_id
        ensemble = [
            sandbox.bookie_addresses.index(bk.address_of(b)) for b in lh.metadata.last_ensemble
        ]
    # Every copy is killed: what is read afterwards came from the bookies' disks.
    for index in ensemble:
        sandbox.kill_bookie(index)
    for index in ensemble:
        sandbox.restart_bookie(index)
    with BookKeeper(sandbox.metadata_uri, **V3) as reader:
        rh = reader.open_ledger(ledger_id, b"pw")
        assert rh.is_closed and rh.last_add_confirmed == 299
        assert [e.payload for e in rh] == data


def test_close_keeps_the_forced_entries_as_bookkeeper_does(sandbox: Sandbox) -> None:
    with BookKeeper(sandbox.metadata_uri, **V3) as bk:
        lh = bk.create_ledger(3, 2, 2, write_flags=[WriteFlag.DEFERRED_SYNC])
        assert lh.force() == -1  # nothing written yet: completes at once
        lh.append_many(payloads(10, "kept"))
        lh.force()
        lh.append_many(payloads(5, "unforced"))
        lh.close()  # at the LAC: the last forced entry
        assert lh.last_add_confirmed == 9
        assert [e.payload for e in bk.open_ledger(lh.ledger_id)] == payloads(10, "kept")
        with pytest.raises(errors.LedgerClosedException):
            lh.force()


def test_a_bookie_failure_fails_a_deferred_sync_ledger_without_an_ensemble_change(
    sandbox: Sandbox,
) -> None:
    with BookKeeper(sandbox.metadata_uri, **V3) as bk:
        lh = bk.create_ledger(3, 3, 3, write_flags={"DEFERRED_SYNC"})
        lh.append_many(payloads(20, "before"))
        assert lh.force() == 19
        ensemble = lh.metadata.last_ensemble
        sandbox.kill_bookie(sandbox.bookie_addresses.index(bk.address_of(ensemble[1])))
        with pytest.raises(errors.BKException, match="cannot change its ensemble"):
            lh.append(b"after")
        assert lh.metadata.last_ensemble == ensemble
        with pytest.raises(errors.BKException):
            lh.force()


def forces_counted() -> float:
    return REGISTRY.get_sample_value("bookkeeper_client_FORCE_count", {"success": "true"}) or 0.0


def test_a_normal_ledger_forces_too_and_its_lac_follows_its_adds(sandbox: Sandbox) -> None:
    with BookKeeper(sandbox.metadata_uri, **V3) as bk:
        lh = bk.create_ledger(3, 2, 2)
        lh.append_many(payloads(7, "plain"))
        assert lh.last_add_confirmed == 6
        before = forces_counted()
        assert lh.force() == 6
        assert forces_counted() == before + 1

        async def force_in_asyncio() -> int:
            lac: int = await lh.force_async()
            return lac

        assert asyncio.run(force_in_asyncio()) == 6


def test_deferred_sync_is_refused_over_v2_and_unknown_flags_are_refused(
    sandbox: Sandbox,
) -> None:
    with BookKeeper(sandbox.metadata_uri, zkTimeout=2000) as v2:
        assert v2.config.use_v2_wire_protocol
        before = v2.list_ledgers()
        with pytest.raises(errors.IncorrectParameterException, match="useV2WireProtocol=false"):
            v2.create_ledger(3, 2, 2, write_flags={WriteFlag.DEFERRED_SYNC})
        assert v2.list_ledgers() == before, "a refused create left a ledger behind"
        with pytest.raises(errors.IncorrectParameterException, match="unknown write flag"):
            v2.create_ledger(3, 2, 2, write_flags={"NO_SUCH_FLAG"})
        lh = v2.create_ledger(3, 2, 2)
        with pytest.raises(errors.IncorrectParameterException, match="useV2WireProtocol=false"):
            lh.force()
