"""The pybkx client over the V3 protocol (``useV2WireProtocol=false``) with real bookie
processes: ledgers written and read, an ensemble change after a bookie is killed, recovery of a
ledger left open, and V2 and V3 clients on the same bookies reading each other's ledgers."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pybkx import errors
from pybkx.client import BookKeeper
from pybkx.tools.sandbox import Sandbox

pytestmark = pytest.mark.integration

FAST = {"addEntryTimeoutSec": 2, "readEntryTimeoutSec": 2, "zkTimeout": 2000}


def payloads(n: int, tag: str) -> list[bytes]:
    return [f"{tag}-{i}".encode() * (1 + i % 7) for i in range(n)]


@pytest.fixture
def sandbox(tmp_path: Path) -> Iterator[Sandbox]:
    with Sandbox(4, directory=tmp_path / "sandbox", conf={"zkTimeout": 2000}) as sandbox:
        yield sandbox


def test_a_v3_client_writes_reads_changes_ensembles_and_recovers(sandbox: Sandbox) -> None:
    with BookKeeper(sandbox.metadata_uri, useV2WireProtocol=False, **FAST) as v3:
        assert not v3.config.use_v2_wire_protocol
        lh = v3.create_ledger(3, 2, 2, password=b"pw")
        data = payloads(600, "v3")
        lh.append_many(data[:300])
        victim = lh.metadata.last_ensemble[0]
        sandbox.kill_bookie(sandbox.bookie_addresses.index(v3.address_of(victim)))
        lh.append_many(data[300:])  # the killed bookie is replaced (ensemble change)
        assert victim not in lh.metadata.last_ensemble
        assert [e.payload for e in lh.read(0, 599)] == data
        with pytest.raises(errors.IncorrectParameterException, match="V2 request"):
            v3.bookies.batch_read(
                v3.address_of(lh.metadata.last_ensemble[0]), lh.ledger_id, 0, 10, 1 << 20
            ).result(5)
        # Another V3 client recovers the ledger left open: the writer is fenced.
        with BookKeeper(sandbox.metadata_uri, useV2WireProtocol=False, **FAST) as other:
            rh = other.open_ledger(lh.ledger_id, b"pw")
            assert rh.is_closed and rh.last_add_confirmed == 599
            assert [e.payload for e in rh] == data
        with pytest.raises((errors.LedgerFencedException, errors.LedgerClosedException)):
            lh.append(b"late")


def test_v2_and_v3_clients_share_bookies(sandbox: Sandbox) -> None:
    with (
        BookKeeper(sandbox.metadata_uri, useV2WireProtocol=False, **FAST) as v3,
        BookKeeper(sandbox.metadata_uri, **FAST) as v2,
    ):
        written_v3 = v3.create_ledger(3, 3, 2, password=b"a")
        written_v3.append_many(payloads(200, "three"))
        written_v3.close()
        written_v2 = v2.create_ledger(3, 3, 2, password=b"b")
        written_v2.append_many(payloads(200, "two"))
        written_v2.close()
        assert [e.payload for e in v2.open_ledger(written_v3.ledger_id, b"a")] == payloads(
            200, "three"
        )
        assert [e.payload for e in v3.open_ledger(written_v2.ledger_id, b"b")] == payloads(
            200, "two"
        )


@pytest.mark.parametrize("v2", [False, True], ids=["V3 long poll", "V2 polling"])
def test_a_reader_waits_for_the_lac_to_pass(sandbox: Sandbox, v2: bool) -> None:
    with (
        BookKeeper(sandbox.metadata_uri, **FAST) as writer_bk,
        BookKeeper(sandbox.metadata_uri, useV2WireProtocol=v2, **FAST) as reader_bk,
    ):
        lh = writer_bk.create_ledger(3, 2, 2, password=b"pw")
        lh.append_many(payloads(10, "tail"))
        lh.append(b"confirms entry 9")
        rh = reader_bk.open_ledger(lh.ledger_id, b"pw", recovery=False)
        assert rh.read_last_add_confirmed() == 9
        # Nothing new: the wait ends with the timeout and the LAC unchanged.
        started = time.monotonic()
        assert rh.wait_for_last_add_confirmed(9, 0.3) == 9
        assert time.monotonic() - started >= 0.25
        # An add during the wait ends it well before the timeout.
        timer = threading.Timer(0.3, lambda: lh.append(b"one more"))
        timer.start()
        started = time.monotonic()
        lac = rh.wait_for_last_add_confirmed(9, 20.0)
        timer.join()
        assert lac == 10 and time.monotonic() - started < 10
        assert rh.last_add_confirmed == 10 and rh.length > 0
        assert asyncio.run(rh.wait_for_last_add_confirmed_async(0, 1.0)) == 10
        with pytest.raises(errors.IncorrectParameterException):
            rh.wait_for_last_add_confirmed(10, -1)
        lh.close()
        assert rh.wait_for_last_add_confirmed(10, 5.0) >= 10
