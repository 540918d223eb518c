"""pybkx's speculative reads with a real Apache BookKeeper bookie as the replica that answers:
a ledger's entries on the Java bookie and, in the read plan, a bookie that takes connections and
never answers (as a SIGSTOPped one) before it in half the write sets. Single and batched reads
over V2 and single reads over V3 all return every entry: each request to the silent bookie is
joined by one to the Java bookie after ``speculativeReadTimeout``, the Java answer wins, and the
silent bookie is noted slow and read last from then on."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from pybkx._core import BookieClient, DigestManager, ReadPlan, client_metrics, master_key
from pybkx.config import ClientConfig

pytestmark = pytest.mark.interop

PASSWORD = b"speculative"
ENTRIES = 20


def speculative_reads() -> int:
    for metric in client_metrics():
        if metric.name == "bookkeeper_client_SPECULATIVE_READ_COUNT":
            assert isinstance(metric.value, int)
            return metric.value
    raise AssertionError("no bookkeeper_client_SPECULATIVE_READ_COUNT")


@pytest.fixture
def silent_bookie() -> Iterator[str]:
    """A listener that never accepts: connects complete into its backlog, requests get no
    answer, as with a paused bookie."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    host, port = listener.getsockname()
    try:
        yield f"{host}:{port}"
    finally:
        listener.close()


def payload(entry: int) -> bytes:
    return f"speculative {entry}".encode() * (1 + entry % 4)


@pytest.mark.parametrize(
    ("protocol", "batch"), [("V2", True), ("V2", False), ("V3", False)], ids=str
)
def test_a_java_replica_answers_what_a_silent_one_does_not(
    java_bookie: str, silent_bookie: str, protocol: str, batch: bool
) -> None:
    ledger = 610_000 + 10 * (protocol == "V3") + batch
    client = BookieClient(
        ClientConfig.of(
            useV2WireProtocol=protocol == "V2", speculativeReadTimeout=500, readEntryTimeoutSec=600
        )
    )
    try:
        digest = DigestManager(ledger, PASSWORD, "CRC32C")
        length = 0
        for entry in range(ENTRIES):
            length += len(payload(entry))
            body = digest.package(entry, entry - 1, length, payload(entry))
            client.add(java_bookie, ledger, entry, master_key(PASSWORD), body).result(30)
        # E=2 Qw=2: even entries try the silent bookie first, odd ones the Java bookie.
        plan = ReadPlan(client, ledger, 2, PASSWORD, "CRC32C", [(0, [silent_bookie, java_bookie])])
        speculated = speculative_reads()
        result = plan.read(0, ENTRIES - 1, batch=batch, window=4).result(60)
        assert [bytes(e) for e in result.entries] == [payload(e) for e in range(ENTRIES)]
        silent = client.bookie_health(silent_bookie)
        assert silent.slow_answers >= 1 and silent.pending_requests >= 1, silent
        assert client.bookie_health(java_bookie).slow_answers == 0
        assert speculative_reads() > speculated
        # Slow now, it is read last: nothing more is sent to it.
        pending = silent.pending_requests
        again = plan.read(0, ENTRIES - 1, batch=batch, window=4).result(60)
        assert len(again.entries) == ENTRIES
        assert client.bookie_health(silent_bookie).pending_requests == pending
    finally:
        client.close()
