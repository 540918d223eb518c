"""Explicit LAC (BookKeeper's ``explicitLacInterval``, WRITE_LAC and READ_LAC) with real bookie
processes: a writer that appends and goes idle lets readers on another client see its last
entry when the flush is on, and leaves them one short (the LAC its last entry carried) when it
is off, as BookKeeper documents; a long-poll reader wakes on the explicit LAC."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from prometheus_client import REGISTRY
from support.wait import wait_until

from pybkx import errors
from pybkx.client import BookKeeper
from pybkx.tools.sandbox import Sandbox

pytestmark = pytest.mark.integration

FAST = {"addEntryTimeoutSec": 2, "readEntryTimeoutSec": 2, "zkTimeout": 2000}
V3 = {"useV2WireProtocol": False, **FAST}
N = 10


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    directory = tmp_path_factory.mktemp("explicit-lac") / "sandbox"
    with Sandbox(3, directory=directory, conf={"zkTimeout": 2000}) as sandbox:
        yield sandbox


def metric(name: str) -> float:
    """The sum of a client metric's samples named ``name`` in the process's registry."""
    return sum(
        sample.value
        for family in REGISTRY.collect()
        for sample in family.samples
        if sample.name == name and sample.labels.get("success", "true") == "true"
    )


def test_an_idle_writers_last_entry_reaches_readers_with_explicit_lac(sandbox: Sandbox) -> None:
    flushes = metric("bookkeeper_client_WRITE_LAC_count")
    lac_reads = metric("bookkeeper_client_READ_LAC_count")
    with (
        BookKeeper(sandbox.metadata_uri, explicitLacInterval=100, **V3) as writer_bk,
        BookKeeper(sandbox.metadata_uri, **V3) as reader_bk,
    ):
        lh = writer_bk.create_ledger(3, 2, 2, password=b"pw")
        assert lh.append_many([f"e{i}".encode() for i in range(N)]) == N - 1
        # The writer is idle from here: only the flush can tell the bookies about entry N-1.
        rh = reader_bk.open_ledger(lh.ledger_id, b"pw", recovery=False)
        wait_until(lambda: rh.read_explicit_lac() == N - 1, "the explicit LAC reaches N-1")
        assert rh.read_last_add_confirmed() == N - 1  # V3: READ_LAC, as BookKeeper's
        assert [e.payload for e in rh.read(0, N - 1)] == [f"e{i}".encode() for i in range(N)]
        lh.close()
        assert reader_bk.open_ledger(lh.ledger_id, b"pw").last_add_confirmed == N - 1
    # The flush's WRITE_LACs (counted as bookies answer) and the reads, under BookKeeper's names.
    wait_until(
        lambda: metric("bookkeeper_client_WRITE_LAC_count") - flushes >= 1,
        "a WRITE_LAC answered and counted",
    )
    assert metric("bookkeeper_client_READ_LAC_count") - lac_reads >= 2


def test_without_explicit_lac_readers_see_one_entry_less(sandbox: Sandbox) -> None:
    with (
        BookKeeper(sandbox.metadata_uri, **V3) as writer_bk,
        BookKeeper(sandbox.metadata_uri, **V3) as reader_bk,
    ):
        assert writer_bk.config.explicit_lac_interval_ms == 0  # BookKeeper's default: off
        lh = writer_bk.create_ledger(3, 3, 3, password=b"pw")
        for i in range(N):  # one at a time: entry i is sent after i-1 completed, carrying it
            assert lh.append(b"x") == i
        rh = reader_bk.open_ledger(lh.ledger_id, b"pw", recovery=False)
        # Every bookie holds entry N-1 (Qa = Qw = E), which carries LAC N-2: nothing says more.
        assert rh.read_explicit_lac() == N - 2
        assert rh.read_last_add_confirmed() == N - 2
        with pytest.raises(errors.ReadException):
            rh.read(N - 1, N - 1)
        lh.close()


def test_a_long_poll_reader_wakes_on_the_explicit_lac(sandbox: Sandbox) -> None:
    with (
        BookKeeper(sandbox.metadata_uri, explicitLacInterval=100, **V3) as writer_bk,
        BookKeeper(sandbox.metadata_uri, **V3) as reader_bk,
    ):
        lh = writer_bk.create_ledger(3, 3, 2, password=b"pw")
        lh.append_many([b"y"] * N)
        rh = reader_bk.open_ledger(lh.ledger_id, b"pw", recovery=False)
        # The bookies raise the LAC they report for long polls with the explicit LAC, as
        # BookKeeper's bookie does; the timeout bounds the test, it is not what ends it.
        assert rh.wait_for_last_add_confirmed(N - 2, timeout=20) == N - 1
        lh.close()


def test_a_v2_client_leaves_explicit_lac_off_and_says_so(
    sandbox: Sandbox, caplog: pytest.LogCaptureFixture
) -> None:
    with (
        caplog.at_level(logging.WARNING, logger="pybkx"),
        BookKeeper(sandbox.metadata_uri, explicitLacInterval=100, **FAST) as v2,
    ):
        lh = v2.create_ledger(3, 2, 2)
        lh.append(b"a")  # appends work; no WRITE_LAC goes out on the V2 connections
        with pytest.raises(errors.IncorrectParameterException, match="V3"):
            lh.read_explicit_lac()
        lh.close()
    assert any("explicitLacInterval=100 is off" in r.getMessage() for r in caplog.records)
