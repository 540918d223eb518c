"""The client's per-bookie failure counts against a real Apache BookKeeper bookie: its expected
answers (no such entry or ledger, fenced) count as failures but not toward quarantine, as in
BookKeeper's client; an answer it does not expect (a wrong master key) counts toward both. Owns
the counting against Java's answers; quarantine itself is tested in
tests/client/test_bookie_health.py."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from pybkx import errors
from pybkx._core import FLAG_DO_FENCING, BookieClient, DigestManager, master_key
from pybkx.config import ClientConfig

pytestmark = pytest.mark.interop


@pytest.fixture(params=[True, False], ids=["V2", "V3"])
def client(request: pytest.FixtureRequest) -> Iterator[BookieClient]:
    client = BookieClient(ClientConfig.of(useV2WireProtocol=request.param))
    yield client
    client.close()


def test_java_bookie_answers_count_as_bookkeepers_client_counts_them(
    java_bookie: str, client: BookieClient, request: pytest.FixtureRequest
) -> None:
    # A ledger id of its own per protocol: the Java bookie is shared by the session.
    ledger = 310_000 if request.node.callspec.id == "V2" else 310_100
    key = master_key(b"")
    manager = DigestManager(ledger, b"", "CRC32")
    client.add(java_bookie, ledger, 0, key, manager.package(0, -1, 1, b"a")).result(timeout=30)
    assert client.failure_count(java_bookie) == 0
    with pytest.raises(errors.NoSuchEntryException):
        client.read(java_bookie, ledger, 1).result(timeout=30)
    with pytest.raises(errors.NoSuchLedgerExistsException):
        client.read(java_bookie, ledger + 10, 0).result(timeout=30)
    client.read(java_bookie, ledger, -1, flags=FLAG_DO_FENCING, master_key=key).result(timeout=30)
    with pytest.raises(errors.LedgerFencedException):
        client.add(java_bookie, ledger, 1, key, manager.package(1, 0, 2, b"b")).result(timeout=30)
    assert client.failure_count(java_bookie) == 3
    assert client.take_error_counts() == {}
    with pytest.raises(errors.UnauthorizedAccessException):
        client.add(java_bookie, ledger, 1, bytes(20), manager.package(1, 0, 2, b"b")).result(
            timeout=30
        )
    assert client.failure_count(java_bookie) == 4
    assert client.take_error_counts() == {java_bookie: 1}
    assert client.take_error_counts() == {}
