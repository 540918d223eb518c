"""Helpers of the recovery tests: deterministic payloads, ledgers placed on a bookie, and the
check that every entry is on every bookie of its write set, byte-identical."""

from __future__ import annotations

from pybkx._core import BookieClient, DigestManager
from pybkx.client import BookKeeper, LedgerHandle
from pybkx.config import ClientConfig
from pybkx.config.tls import client_tls_material
from pybkx.meta import LedgerMetadata

FAST = {"addEntryTimeoutSec": 2, "readEntryTimeoutSec": 2, "zkTimeout": 2000}


def payload(ledger_id: int, entry_id: int) -> bytes:
    return f"{ledger_id}:{entry_id}:".encode() + bytes([entry_id % 251]) * (entry_id % 700)


def create_on(
    bk: BookKeeper, quorums: tuple[int, int, int], wanted: set[str], count: int
) -> LedgerHandle:
    """A ledger whose ensemble holds exactly len(wanted & ensemble) == 1 of ``wanted`` if
    ``len(wanted) > 1``, else holds it; written with ``count`` entries."""
    for _ in range(40):
        lh = bk.create_ledger(*quorums, password=b"pw")
        held = wanted & set(lh.metadata.last_ensemble)
        if (len(wanted) == 1 and held) or (len(wanted) > 1 and len(held) == 1):
            lh.append_many([payload(lh.ledger_id, e) for e in range(count)])
            return lh
        lh.close()
        bk.delete_ledger(lh.ledger_id)
    raise AssertionError(f"the placement never chose {wanted} as asked")


def assert_replicated(
    bk: BookKeeper, ledger_id: int, dead: set[str], config: ClientConfig | None = None
) -> LedgerMetadata:
    """Every entry on every bookie of its write set, the copies byte-identical and valid (read
    by a bookie client with ``config``: a cluster's TLS settings, say)."""
    md = bk.store.read_ledger_metadata(ledger_id).value
    assert md.is_closed
    assert not dead & {b for ens in md.ensembles.values() for b in ens}
    digest = DigestManager(ledger_id, b"pw", md.digest_type.name)
    config = config or ClientConfig()
    raw = BookieClient(config, client_tls_material(config))
    try:
        for entry_id in range(md.last_entry_id + 1):
            ensemble = md.ensemble_for(entry_id)
            copies = {
                raw.read(bk.address_of(ensemble[i]), ledger_id, entry_id).result()
                for i in md.write_set(entry_id)
            }
            assert len(copies) == 1, f"entry {entry_id}: replicas differ"
            (copy,) = copies
            assert digest.verify(copy, entry_id).payload == payload(ledger_id, entry_id)
    finally:
        raw.close()
    return md
