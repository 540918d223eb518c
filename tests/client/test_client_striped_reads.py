"""Batched reads of striped ledgers (E > Qw) against real bookie processes (a sandbox): every
entry in order through ``batch_read``, iteration and ``read_arrow``, across segments with
different ensembles, with a bookie killed, and with corrupt copies.

Owns the striped read path end to end; how it falls back on bookies without batch reads or
without strides is tests/client/test_client_batch_fallback.py's, the Java bookie is tests/interop's.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from pybkx import errors
from pybkx._core import FLAG_RECOVERY_ADD, BookieClient, DigestManager, master_key
from pybkx.client import BookKeeper, LedgerHandle
from pybkx.config import ClientConfig
from pybkx.tools.sandbox import Sandbox

pytestmark = pytest.mark.integration

FAST = {"addEntryTimeoutSec": 2, "readEntryTimeoutSec": 2, "bookieReplacementTimeoutMs": 15_000}
ENTRIES = 3000


def payload(ledger_id: int, entry_id: int) -> bytes:
    rng = random.Random(ledger_id * 1_000_003 + entry_id)
    return f"{ledger_id}:{entry_id}:".encode() + rng.randbytes(rng.randint(0, 300))


def payloads(ledger_id: int, first: int, last: int) -> list[bytes]:
    return [payload(ledger_id, e) for e in range(first, last + 1)]


@pytest.fixture(scope="module")
def six(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    """Six bookie processes; tests here never stop them."""
    directory = tmp_path_factory.mktemp("striped") / "sandbox"
    with Sandbox(6, directory=directory, conf={"zkTimeout": 2000}) as sandbox:
        yield sandbox


def client(sandbox: Sandbox) -> BookKeeper:
    return BookKeeper(sandbox.metadata_uri, zkTimeout=2000, **FAST)


def write(bk: BookKeeper, quorums: tuple[int, int, int], count: int) -> LedgerHandle:
    lh = bk.create_ledger(*quorums, password=b"pw")
    lh.append_many(payloads(lh.ledger_id, 0, count - 1))
    return lh


@pytest.mark.parametrize(
    "quorums", [(3, 2, 2), (5, 2, 2), (5, 3, 2), (4, 2, 1)], ids=["3-2", "5-2", "5-3", "4-2"]
)
def test_striped_batch_reads_return_every_entry_in_order(
    six: Sandbox, quorums: tuple[int, int, int]
) -> None:
    with client(six) as bk:
        lh = write(bk, quorums, ENTRIES)
        lh.close()
        rh = bk.open_ledger(lh.ledger_id, password=b"pw")
        want = payloads(lh.ledger_id, 0, ENTRIES - 1)
        assert [e.payload for e in rh.batch_read(0, ENTRIES, 1 << 30)] == want
        got = rh.batch_read(17, 1000, 1 << 30)
        assert [e.entry_id for e in got] == list(range(17, 1017))
        assert [e.payload for e in got] == want[17:1017]
        # A loose size limit: the first entry always, then while the payloads fit.
        small = rh.batch_read(3, ENTRIES, 2000)
        sizes = [len(p) for p in want[3:]]
        assert [e.entry_id for e in small] == list(range(3, 3 + len(small)))
        assert sum(sizes[: len(small)]) <= 2000 or len(small) == 1
        assert sum(sizes[: len(small) + 1]) > 2000
        assert [e.payload for e in rh] == want
        some = rh.entries(1, ENTRIES - 2, batch_entries=333, read_ahead=1)
        assert [e.payload for e in some] == want[1:-1]
        batch = rh.read_arrow(0, ENTRIES - 1)
        assert batch.column("payload").to_pylist() == want


def test_segments_with_different_ensembles_and_a_killed_bookie(tmp_path: Path) -> None:
    with Sandbox(4, directory=tmp_path / "sandbox", conf={"zkTimeout": 2000}) as sandbox:
        with client(sandbox) as bk:
            lh = write(bk, (3, 2, 2), 1500)
            victim = sandbox.bookie_addresses.index(lh.metadata.last_ensemble[1])
            sandbox.kill_bookie(victim)
            lh.append_many(payloads(lh.ledger_id, 1500, 2999))
            lh.close()
            ensembles = lh.metadata.ensembles
            assert len(ensembles) == 2
            want = payloads(lh.ledger_id, 0, 2999)
        # A new client, the bookie still down: the first segment's reads from it fail over.
        with client(sandbox) as bk:
            rh = bk.open_ledger(lh.ledger_id, password=b"pw")
            assert [e.payload for e in rh.batch_read(0, 3000, 1 << 30)] == want
            assert [e.payload for e in rh.entries(1000, 2500)] == want[1000:2501]
        sandbox.restart_bookie(victim)
        with client(sandbox) as bk:
            rh = bk.open_ledger(lh.ledger_id, password=b"pw")
            assert [e.payload for e in rh] == want
            assert [e.entry_id for e in rh.batch_read(1400, 200, 1 << 30)] == list(
                range(1400, 1600)
            )


def corrupt(bk: BookKeeper, lh: LedgerHandle, entry_id: int, position: int) -> None:
    """Replace the copy of ``entry_id`` on the bookie at ``position`` of its write set with one
    whose digest is wrong (a recovery add replaces the stored entry; bookies do not check)."""
    md = lh.metadata
    bookie = bk.address_of(md.ensemble_for(entry_id)[md.write_set(entry_id)[position]])
    good = DigestManager(lh.ledger_id, b"pw", md.digest_type.name).package(
        entry_id, entry_id - 1, 0, payload(lh.ledger_id, entry_id)
    )
    bad = good[:-1] + bytes([good[-1] ^ 0xFF])
    raw = BookieClient(ClientConfig())
    try:
        raw.add(bookie, lh.ledger_id, entry_id, master_key(b"pw"), bad, FLAG_RECOVERY_ADD).result()
    finally:
        raw.close()


def test_corrupt_copies_are_read_from_another_replica(six: Sandbox) -> None:
    with client(six) as bk:
        lh = write(bk, (3, 2, 2), 600)
        lh.close()
        for entry_id, position in ((5, 0), (6, 1), (7, 0), (300, 1), (599, 0)):
            corrupt(bk, lh, entry_id, position)
        rh = bk.open_ledger(lh.ledger_id, password=b"pw")
        want = payloads(lh.ledger_id, 0, 599)
        assert [e.payload for e in rh.batch_read(0, 600, 1 << 30)] == want
        assert [e.payload for e in rh] == want
        # Every copy of 400 corrupt: the read fails with the digest error, naming the entry.
        corrupt(bk, lh, 400, 0)
        corrupt(bk, lh, 400, 1)
        assert [e.payload for e in rh.batch_read(0, 400, 1 << 30)] == want[:400]
        with pytest.raises(errors.DigestMatchException, match="entry 400"):
            rh.batch_read(0, 600, 1 << 30)
        with pytest.raises(errors.DigestMatchException):
            list(rh.entries(350, 450))
