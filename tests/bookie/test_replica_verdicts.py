"""The cross-replica check's decisions without bookies: which bookies hold which entries of a
segment (whole or striped), which copy of an entry is the odd one out (a majority, a copy the
others lack, no majority), which segments a bookie's cycle checks (those it heads), and that a
majority copy failing its client digest is never written. Replicas held in memory here; the
real bookies are tests/recovery/test_cross_replica.py's."""

from __future__ import annotations

import hashlib

from pybkx._core import DigestManager
from pybkx.bookie.cross_replica import _shown
from pybkx.bookie.replica_check import RangeDigest, _verdicts, check_ledger, write_set_ranges
from pybkx.meta import LedgerMetadata
from pybkx.meta.ledger_metadata import LedgerState

BOOKIES = ("a:1", "b:1", "c:1", "d:1")


def metadata(e: int, qw: int) -> LedgerMetadata:
    return LedgerMetadata(
        e, qw, qw, {0: BOOKIES[:e]}, state=LedgerState.CLOSED, last_entry_id=9, length=100
    )


def test_a_whole_segment_is_one_range_and_a_striped_one_a_range_per_write_set_start() -> None:
    whole = metadata(3, 3)
    assert list(write_set_ranges(whole, 0, 9, whole.ensembles[0])) == [(0, 1, BOOKIES[:3])]
    striped = metadata(4, 2)
    assert list(write_set_ranges(striped, 0, 9, striped.ensembles[0])) == [
        (0, 4, ("a:1", "b:1")),
        (1, 4, ("b:1", "c:1")),
        (2, 4, ("c:1", "d:1")),
        (3, 4, ("d:1", "a:1")),
    ]
    # A segment shorter than the ensemble has fewer write-set starts.
    assert [r[0] for r in write_set_ranges(striped, 8, 9, striped.ensembles[0])] == [8, 9]


def test_the_odd_copy_out_is_named_against_a_majority() -> None:
    assert _verdicts({"a": "x", "b": "x", "c": "x"}) == []
    assert _verdicts({"a": "x", "b": "y", "c": "x"}) == [("b", "differs", "x")]
    assert _verdicts({"a": "x", "b": None, "c": "x"}) == [("b", "missing", "x")]
    assert _verdicts({"a": None, "b": None, "c": "x"}) == [
        ("a", "missing", "x"),
        ("b", "missing", "x"),
    ]
    assert _verdicts({"a": None, "b": None}) == []


def test_copies_without_a_majority_are_named_but_given_no_good_copy() -> None:
    assert _verdicts({"a": "x", "b": "y"}) == [("a", "no-majority", ""), ("b", "no-majority", "")]
    assert _verdicts({"a": "x", "b": "y", "c": "z"}) == [
        ("a", "no-majority", ""),
        ("b", "no-majority", ""),
        ("c", "no-majority", ""),
    ]
    assert _verdicts({"a": "x", "b": "y", "c": None}) == [
        ("a", "no-majority", ""),
        ("b", "no-majority", ""),
    ]


class StoredReplicas:
    """Replicas held in memory, digests made as a bookie makes them; records the writes."""

    def __init__(self, md: LedgerMetadata) -> None:
        self.md = md
        self.held: dict[str, dict[int, bytes]] = {}
        self.writes: list[tuple[str, int]] = []
        digest = DigestManager(1, md.password, md.digest_type.name)
        for first, ensemble in md.ensembles.items():
            for entry in range(first, md.last_entry_id + 1):
                if md.ensemble_for(entry) != ensemble:
                    continue
                packaged = digest.package(entry, entry - 1, 0, f"entry {entry}".encode())
                for index in md.write_set(entry):
                    self.held.setdefault(ensemble[index], {})[entry] = packaged

    def digest(
        self, bookie: str, ledger_id: int, first: int, last: int, stride: int, listed: bool
    ) -> RangeDigest:
        mine = self.held.get(bookie, {})
        entries = [(e, mine[e]) for e in range(first, last + 1, stride) if e in mine]
        outer = hashlib.sha1()
        for e, data in entries:
            outer.update(e.to_bytes(8, "big") + hashlib.sha1(data).digest())
        listing = {e: hashlib.sha1(d).hexdigest() for e, d in entries} if listed else None
        return RangeDigest(
            len(entries), sum(len(d) for _, d in entries), 0, outer.hexdigest(), listing
        )

    def read(self, bookie: str, ledger_id: int, entry_id: int) -> bytes:
        return self.held[bookie][entry_id]

    def write(
        self, bookie: str, ledger_id: int, entry_id: int, data: bytes, md: LedgerMetadata
    ) -> None:
        self.held.setdefault(bookie, {})[entry_id] = data
        self.writes.append((bookie, entry_id))


def test_each_segment_is_checked_by_the_bookie_heading_it() -> None:
    md = LedgerMetadata(
        3,
        3,
        3,
        {0: ("a:1", "b:1", "c:1"), 10: ("d:1", "b:1", "c:1")},
        password=b"pw",
        state=LedgerState.CLOSED,
        last_entry_id=19,
        length=200,
    )
    replicas = StoredReplicas(md)
    good = replicas.held["b:1"][15]
    replicas.held["c:1"][15] = DigestManager(1, b"pw", "CRC32C").package(15, 14, 0, b"forged")
    assert check_ledger(replicas, 1, md, repair=True, first_bookie="a:1").findings == []
    done = check_ledger(replicas, 1, md, repair=True, first_bookie="d:1")
    assert [(f.bookie, f.kind, f.entries, f.repaired) for f in done.findings] == [
        ("c:1", "differs", (15,), (15,))
    ]
    assert replicas.writes == [("c:1", 15)] and replicas.held["c:1"][15] == good
    assert (done.ranges, done.entries) == (1, 30)
    # A copy failing its client digest is never the source of a rewrite.
    replicas.held["b:1"][3] = replicas.held["c:1"][3] = b"not an entry"
    done = check_ledger(replicas, 1, md, repair=True)
    (finding,) = done.findings
    assert (finding.bookie, finding.entries, finding.repaired) == ("a:1", (3,), ())
    assert "fails its client digest" in finding.detail, finding.detail


def test_the_checkers_status_shows_a_bounded_part_of_a_large_run() -> None:
    run = {
        "findings": [{"bookie": "a:1", "entries": list(range(150)), "repaired": []}] * 150,
        "differing": 150 * 150,
    }
    shown = _shown(run)
    findings = shown["findings"]
    assert isinstance(findings, list) and len(findings) == 100
    assert findings[0]["entries"] == list(range(100)) and findings[0]["entriesCount"] == 150
    assert (shown["findingsCount"], shown["differing"]) == (150, 150 * 150)
