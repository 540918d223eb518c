"""pybkx's per-bookie client (``BookieClient``, ``DigestManager``, ``master_key``), over V2 and
over V3 (``useV2WireProtocol=false``), against a real Apache BookKeeper bookie: the script of
test_v2_against_java_bookie.py, with the same expected results (errors arrive as
``pybkx.errors`` classes; their code is compared)."""

from __future__ import annotations

from collections.abc import Iterator

import interop_scenario
import pytest
from interop_scenario import (
    PASSWORDS,
    check,
    master_key,
    package,
    run_with_pybkx_client,
    scenario,
)

from pybkx import _core, errors
from pybkx._core import FLAG_DO_FENCING, BookieClient, DigestManager
from pybkx._core import master_key as pybkx_master_key
from pybkx.config import ClientConfig

pytestmark = pytest.mark.interop

DIGESTS = ["CRC32", "CRC32C", "HMAC"]


@pytest.fixture(scope="module")
def client() -> Iterator[BookieClient]:
    client = BookieClient(ClientConfig())
    yield client
    client.close()


@pytest.mark.parametrize("protocol", ["V2", "V3"])
@pytest.mark.parametrize("digest", DIGESTS)
def test_pybkx_client_script(digest: str, protocol: str, java_bookie: str) -> None:
    # Ledger ids of their own: the Java bookie is shared with test_v2_against_java_bookie.py.
    base = 100_000 + 1000 * DIGESTS.index(digest) + (500_000 if protocol == "V3" else 0)
    steps = scenario(digest, base=base)
    client = BookieClient(ClientConfig.of(useV2WireProtocol=protocol == "V2"))
    batch_client = BookieClient(ClientConfig())
    try:
        problems = check(steps, run_with_pybkx_client(client, java_bookie, steps, batch_client))
    finally:
        client.close()
        batch_client.close()
    if problems:
        pytest.fail(f"pybkx client, {protocol}, {digest}:\n" + "\n".join(problems), pytrace=False)


@pytest.mark.parametrize("digest", DIGESTS)
def test_digest_manager_reads_java_stored_entries(
    digest: str, java_bookie: str, client: BookieClient
) -> None:
    """Entries a Java bookie returns verify with pybkx's DigestManager; the packaging and keys
    agree with the independent computation the script's expectations use."""
    ledger, password = 200_000 + DIGESTS.index(digest), PASSWORDS[digest]
    assert pybkx_master_key(password) == master_key(password)
    manager = DigestManager(ledger, password, digest)
    length = 0
    for entry_id, payload in enumerate([b"alpha", b"", b"\x00" * 40_000]):
        length += len(payload)
        entry = manager.package(entry_id, entry_id - 1, length, payload)
        assert entry == package(ledger, entry_id, entry_id - 1, length, payload, digest, password)
        client.add(java_bookie, ledger, entry_id, master_key(password), entry).result(timeout=30)
        stored = client.read(java_bookie, ledger, entry_id).result(timeout=30)
        verified = manager.verify(stored, entry_id)
        assert (verified.entry_id, verified.last_add_confirmed) == (entry_id, entry_id - 1)
        assert (verified.ledger_length, verified.payload) == (length, payload)
    last = manager.verify(client.read(java_bookie, ledger, -1).result(timeout=30))
    assert (last.entry_id, last.last_add_confirmed, last.ledger_length) == (2, 1, length)
    assert last.payload == b"\x00" * 40_000
    with pytest.raises(errors.DigestMatchException):
        manager.verify(stored[:-1] + bytes([stored[-1] ^ 1]), 2)
    with pytest.raises(errors.DigestMatchException):
        DigestManager(ledger + 1, password, digest).verify(stored, 2)  # another ledger's entry


def test_errors_are_pybkx_exceptions(java_bookie: str, client: BookieClient) -> None:
    """Each bookie error surfaces as its own pybkx.errors class from ``result()``."""
    ledger, key = 300_000, master_key(b"")
    manager = DigestManager(ledger, b"", "CRC32")
    client.add(java_bookie, ledger, 0, key, manager.package(0, -1, 1, b"a")).result(timeout=30)
    with pytest.raises(errors.NoSuchEntryException):
        client.read(java_bookie, ledger, 1).result(timeout=30)
    with pytest.raises(errors.NoSuchLedgerExistsException):
        client.read(java_bookie, ledger + 1, 0).result(timeout=30)
    with pytest.raises(errors.UnauthorizedAccessException):
        client.add(java_bookie, ledger, 1, bytes(20), manager.package(1, 0, 2, b"b")).result(
            timeout=30
        )
    client.read(java_bookie, ledger, -1, flags=FLAG_DO_FENCING, master_key=key).result(timeout=30)
    with pytest.raises(errors.LedgerFencedException):
        client.add(java_bookie, ledger, 1, key, manager.package(1, 0, 2, b"b")).result(timeout=30)


def test_flag_values_match_the_script() -> None:
    for name in ("FLAG_DO_FENCING", "FLAG_RECOVERY_ADD", "FLAG_HIGH_PRIORITY"):
        assert getattr(_core, name) == getattr(interop_scenario, name), name
    assert _core.FLAG_NONE == 0
