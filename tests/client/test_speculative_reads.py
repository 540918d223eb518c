"""Speculative reads and read order by bookie health, against real ``pybkx bookie`` processes:
one replica paused (SIGSTOP) while it holds a read, the next replica answers it
(``speculativeReadTimeout``), the paused one is noted slow and read last from then on; with
speculation off only the read timeout gets past it, and it is noted failed.

Owns the client's speculative-read and reorder behaviour seen from Python
(``BookieClient.bookie_health``, ``bookkeeper_client_SPECULATIVE_READ_COUNT``).
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

import pybkx
from pybkx._core import client_metrics
from pybkx.tools.sandbox import Sandbox

SMALL_BOOKIE = {"journalPreAllocSizeMB": 1, "flushInterval": 0}
PASSWORD = b"pw"
ENTRIES = 40


def speculative_reads() -> int:
    """The process's ``bookkeeper_client_SPECULATIVE_READ_COUNT``."""
    for metric in client_metrics():
        if metric.name == "bookkeeper_client_SPECULATIVE_READ_COUNT":
            assert isinstance(metric.value, int)
            return metric.value
    raise AssertionError("no bookkeeper_client_SPECULATIVE_READ_COUNT")


def payload(entry: int) -> bytes:
    return f"entry {entry}".encode() * (1 + entry % 5)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Sandbox, int, str]]:
    """Three bookies and a closed ledger E=Qw=3 on them: (sandbox, ledger id, the address of
    the bookie first in entry 0's write set)."""
    directory: Path = tmp_path_factory.mktemp("speculative") / "sandbox"
    with (
        Sandbox(3, directory=directory, conf=SMALL_BOOKIE) as sandbox,
        pybkx.BookKeeper(sandbox.metadata_uri) as bk,
    ):
        lh = bk.create_ledger(
            ensemble_size=3, write_quorum_size=3, ack_quorum_size=3, password=PASSWORD
        )
        lh.append_many([payload(e) for e in range(ENTRIES)])
        first = bk.address_of(lh.metadata.ensembles[0][0])
        lh.close()
        yield sandbox, lh.ledger_id, first


@contextmanager
def paused(sandbox: Sandbox, address: str) -> Iterator[None]:
    """The bookie at ``address`` stopped (SIGSTOP) inside the block, resumed after it."""
    pid = sandbox.pid(sandbox.bookie_addresses.index(address))
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def read_all(bk: pybkx.BookKeeper, ledger_id: int) -> None:
    rh = bk.open_ledger(ledger_id, PASSWORD)
    try:
        assert [bytes(e) for e in rh.read(0, ENTRIES - 1)] == [payload(e) for e in range(ENTRIES)]
    finally:
        rh.close()


@pytest.mark.parametrize(
    "keys",
    [
        pytest.param({"batchReadEnabled": True}, id="v2-batched"),
        pytest.param({"useV2WireProtocol": False}, id="v3-single"),
    ],
)
def test_a_paused_replica_is_joined_by_the_next_and_then_read_last(
    cluster: tuple[Sandbox, int, str], keys: dict[str, object]
) -> None:
    sandbox, ledger_id, first = cluster
    # The read timeout is far beyond the test's life: only a speculative request gets past the
    # paused bookie.
    # The waits grow (300 ms, then 600 ms), so a healthy replica slow on a loaded machine does not
    # make the second read reach the paused bookie, last by then.
    with pybkx.BookKeeper(
        sandbox.metadata_uri,
        speculativeReadTimeout=300,
        maxSpeculativeReadTimeout=10_000,
        readEntryTimeoutSec=600,
        **keys,
    ) as bk:
        speculated = speculative_reads()
        with paused(sandbox, first):
            read_all(bk, ledger_id)
            health = bk.bookies.bookie_health(first)
            # The paused bookie got the request and has not answered it; another replica did.
            assert health.pending_requests >= 1, health
            assert health.slow_answers >= 1, health
            assert health.failures == 0, health
            assert speculative_reads() > speculated
            # Slow now, it is read last: the next read sends it nothing.
            pending = health.pending_requests
            read_all(bk, ledger_id)
            assert bk.bookies.bookie_health(first).pending_requests == pending


def test_without_speculation_a_paused_replica_costs_a_timeout_and_is_then_read_last(
    cluster: tuple[Sandbox, int, str],
) -> None:
    sandbox, ledger_id, first = cluster
    with pybkx.BookKeeper(
        sandbox.metadata_uri, speculativeReadTimeout=0, readEntryTimeoutSec=1
    ) as bk:
        speculated = speculative_reads()
        with paused(sandbox, first):
            read_all(bk, ledger_id)
            health = bk.bookies.bookie_health(first)
            assert health.failures >= 1, health
            assert (health.slow_answers, health.pending_requests) == (0, 0), health
            read_all(bk, ledger_id)
            after = bk.bookies.bookie_health(first)
            assert (after.failures, after.pending_requests) == (health.failures, 0), after
        assert speculative_reads() == speculated


def test_speculative_read_keys_are_checked() -> None:
    with pytest.raises(pybkx.ConfigError):
        pybkx.ClientConfig.of(speculativeReadTimeoutBackoffMultiplier=0)
    with pytest.raises(pybkx.ConfigError):
        pybkx.ClientConfig.of(speculativeReadTimeout=-1)
    # The first and the longest waits follow speculativeReadTimeout unless set, as in BookKeeper.
    config = pybkx.ClientConfig.of(speculativeReadTimeout=300)
    assert (config.first_speculative_wait_ms, config.max_speculative_wait_ms) == (300, 300)
    config = pybkx.ClientConfig.of(speculativeReadTimeout=300, maxSpeculativeReadTimeout=900)
    assert (config.first_speculative_wait_ms, config.max_speculative_wait_ms) == (300, 900)
