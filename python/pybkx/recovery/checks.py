"""What the auditor's periodic checks look at in one ledger, as BookKeeper's: the fragments a
bookie should hold but cannot give (``LedgerChecker``: read the first and last entry each
bookie of a segment stores, and a percentage of the others), the entries each bookie says it
holds (GET_LIST_OF_ENTRIES_OF_LEDGER, the replicas check) and the segments whose ensemble does
not adhere to the placement policy. Each returns findings; it never marks a ledger (the
auditor does)."""

from __future__ import annotations

import bisect
import logging
import random
from collections import Counter
from collections.abc import Callable, Collection
from dataclasses import dataclass, field

from pybkx import errors
from pybkx._core import BookieClient, Future
from pybkx.meta import LedgerMetadata
from pybkx.placement import EnsemblePlacementPolicy, PlacementPolicyAdherence
from pybkx.recovery.fragments import Fragment

__all__ = [
    "ReplicasFinding",
    "check_ledger",
    "check_replicas",
    "closed_segments",
    "merge_fragments",
    "missing_fragments",
    "not_adhering_segments",
]

logger = logging.getLogger(__name__)

AddressOf = Callable[[str], str]

#: Answers of a bookie that mean "I do not hold it" (the others: it could not answer).
_ABSENT = (errors.NoSuchEntryException, errors.NoSuchLedgerExistsException)


def closed_segments(md: LedgerMetadata) -> list[tuple[int, int, tuple[str, ...]]]:
    """``(first, last, ensemble)`` of every segment whose end is known: all of a closed
    ledger's, the ones before the last of an open ledger's (``last`` may be ``first - 1``)."""
    starts = list(md.ensembles)
    segments = []
    for n, (first, ensemble) in enumerate(md.ensembles.items()):
        if n + 1 < len(starts):
            last = starts[n + 1] - 1
        elif md.is_closed:
            last = md.last_entry_id
        else:
            continue
        segments.append((first, max(last, first - 1), ensemble))
    return segments


def _stored(md: LedgerMetadata, index: int, first: int, last: int) -> tuple[int, int] | None:
    """The first and last entry of ``first..last`` whose write set holds ``index``."""
    lo = next(
        (
            e
            for e in range(first, min(last, first + md.ensemble_size - 1) + 1)
            if index in md.write_set(e)
        ),
        None,
    )
    if lo is None:
        return None
    hi = next(
        e
        for e in range(last, max(first, last - md.ensemble_size + 1) - 1, -1)
        if index in md.write_set(e)
    )
    return lo, hi


def _sample(md: LedgerMetadata, index: int, lo: int, hi: int, percentage: int) -> list[int]:
    """First, last, and ``percentage`` % of the entries between that ``index`` stores."""
    chosen = {lo, hi}
    count = (hi - lo + 1) * percentage // 100
    if count > 0:
        step = max(1, (hi - lo + 1) // count)
        for start in range(lo, hi + 1, step):
            entry = random.randrange(start, min(hi, start + step - 1) + 1)
            if index in md.write_set(entry):
                chosen.add(entry)
    return sorted(chosen)


def check_ledger(
    client: BookieClient,
    address_of: AddressOf,
    registered: Collection[str],
    ledger_id: int,
    md: LedgerMetadata,
    percentage: int = 0,
) -> list[Fragment]:
    """The fragments of the ledger's ended segments some bookie cannot give: per segment,
    the ensemble indexes whose bookie is not registered or failed to read an entry it should
    store (its first and last one in the segment, and ``percentage`` % of the others). Any
    failed read counts, as in BookKeeper's LedgerChecker. Never raises for a bookie's answer."""
    reads: list[tuple[int, int, Future]] = []
    bad: dict[int, set[int]] = {}
    segments = closed_segments(md)
    for first, last, ensemble in segments:
        for index, bookie in enumerate(ensemble):
            stored = _stored(md, index, first, last) if last >= first else None
            if bookie not in registered:
                if stored is not None:
                    bad.setdefault(first, set()).add(index)
                continue
            if stored is None:
                continue
            try:
                address = address_of(bookie)
            except errors.BKException:
                bad.setdefault(first, set()).add(index)
                continue
            for entry in _sample(md, index, *stored, percentage):
                reads.append((first, index, client.read(address, ledger_id, entry)))
    for first, index, future in reads:
        try:
            future.result()
        except errors.BKException as exc:
            logger.debug("ledger %d: segment %d index %d: %r", ledger_id, first, index, exc)
            bad.setdefault(first, set()).add(index)
    return [
        Fragment(ledger_id, first, last, ensemble, tuple(sorted(bad[first])))
        for first, last, ensemble in segments
        if first in bad
    ]


@dataclass
class ReplicasFinding:
    """What the replicas check found in one ledger: per bookie, the entries it should hold
    and does not (``missing``), the bookies that could not say (``unavailable``), and the
    fewest copies any entry has (``least_copies``; Qw when nothing is missing)."""

    ledger_id: int
    write_quorum: int
    ack_quorum: int
    missing: dict[str, list[int]] = field(default_factory=dict)
    unavailable: set[str] = field(default_factory=set)
    least_copies: int = 0


def check_replicas(
    client: BookieClient,
    address_of: AddressOf,
    registered: Collection[str],
    ledger_id: int,
    md: LedgerMetadata,
) -> ReplicasFinding:
    """Ask every registered bookie of the ledger's ended segments which entries it holds
    (``client`` must speak V3) and compare with the entries its write sets give it. A bookie
    that is not registered or cannot answer is ``unavailable`` (the bookie check's business),
    not missing entries."""
    finding = ReplicasFinding(
        ledger_id, md.write_quorum_size, md.ack_quorum_size, least_copies=md.write_quorum_size
    )
    segments = closed_segments(md)
    asked = _ask_entries(client, address_of, registered, segments, finding)
    held = _held_runs(asked, finding)
    lacking: Counter[int] = Counter()
    for first, last, ensemble in segments:
        for entry in range(first, last + 1):
            for index in md.write_set(entry):
                bookie = ensemble[index]
                if bookie in held and not _holds(held[bookie], entry):
                    finding.missing.setdefault(bookie, []).append(entry)
                    lacking[entry] += 1
    if lacking:
        finding.least_copies = md.write_quorum_size - max(lacking.values())
    return finding


_Runs = tuple[list[int], list[int]]
"""The entries a bookie holds: the starts and the ends of its runs, ascending."""


def _ask_entries(
    client: BookieClient,
    address_of: AddressOf,
    registered: Collection[str],
    segments: list[tuple[int, int, tuple[str, ...]]],
    finding: ReplicasFinding,
) -> dict[str, Future]:
    """Ask each registered bookie of ``segments`` once for the ledger's entries it holds; the
    others are ``unavailable``."""
    asked: dict[str, Future] = {}
    for _, _, ensemble in segments:
        for bookie in ensemble:
            if bookie in asked or bookie in finding.unavailable:
                continue
            if bookie not in registered:
                finding.unavailable.add(bookie)
                continue
            try:
                asked[bookie] = client.get_list_of_entries(address_of(bookie), finding.ledger_id)
            except errors.BKException:
                finding.unavailable.add(bookie)
    return asked


def _held_runs(asked: dict[str, Future], finding: ReplicasFinding) -> dict[str, _Runs]:
    """The answers: per bookie, the runs of entries it holds (none when it does not know the
    ledger); a bookie that failed to answer is ``unavailable``."""
    held: dict[str, _Runs] = {}
    for bookie, future in asked.items():
        try:
            runs: list[tuple[int, int]] = future.result()
        except errors.NoSuchLedgerExistsException:
            runs = []
        except errors.BKException as exc:
            logger.warning(
                "replicas check: %s cannot list ledger %d: %r", bookie, finding.ledger_id, exc
            )
            finding.unavailable.add(bookie)
            continue
        held[bookie] = ([r[0] for r in runs], [r[1] for r in runs])
    return held


def _holds(runs: _Runs, entry: int) -> bool:
    starts, ends = runs
    at = bisect.bisect_right(starts, entry) - 1
    return at >= 0 and ends[at] >= entry


def missing_fragments(md: LedgerMetadata, finding: ReplicasFinding) -> list[Fragment]:
    """The fragments of the ended segments holding an entry a bookie of ``finding`` misses,
    with the indexes of those bookies."""
    found = []
    for first, last, ensemble in closed_segments(md):
        lost = tuple(
            i
            for i, bookie in enumerate(ensemble)
            if any(first <= e <= last for e in finding.missing.get(bookie, ()))
        )
        if lost:
            found.append(Fragment(finding.ledger_id, first, last, ensemble, lost))
    return found


def merge_fragments(*groups: list[Fragment]) -> list[Fragment]:
    """One fragment per segment, with the union of the groups' lost indexes."""
    merged: dict[int, Fragment] = {}
    for group in groups:
        for f in group:
            known = merged.get(f.first)
            lost = f.lost if known is None else tuple(sorted(set(known.lost) | set(f.lost)))
            merged[f.first] = Fragment(f.ledger_id, f.first, f.last, f.ensemble, lost)
    return [merged[first] for first in sorted(merged)]


def not_adhering_segments(
    policy: EnsemblePlacementPolicy, md: LedgerMetadata
) -> dict[int, PlacementPolicyAdherence]:
    """The segments (by first entry) whose ensemble only softly adheres or fails to adhere to
    ``policy`` for the ledger's quorums."""
    found: dict[int, PlacementPolicyAdherence] = {}
    for first, ensemble in md.ensembles.items():
        verdict = policy.is_ensemble_adhering_to_placement_policy(
            list(ensemble), md.write_quorum_size, md.ack_quorum_size
        )
        if verdict != PlacementPolicyAdherence.MEETS_STRICT:
            found[first] = verdict
    return found
