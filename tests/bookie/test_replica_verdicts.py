"""The cross-replica check's decisions without bookies: which bookies hold which entries of a
segment (whole or striped), and which copy of an entry is the odd one out (a majority, a copy
the others lack, no majority)."""

from __future__ import annotations

from pybkx.bookie.replica_check import _verdicts, write_set_ranges
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
