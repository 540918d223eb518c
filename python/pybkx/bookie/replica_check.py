"""The cross-replica check (a bookie's, and ``pybkx shell crossreplicacheck``'s): for a closed
ledger's fragments, asks every bookie of each write set for its digest of the entries it
should hold (``GET /api/v1/bookie/ledger_digest``), compares them, and when replicas disagree
finds the differing entries (each bookie's per-entry digests) and rewrites the odd one out's
copy from a replica of the majority, as a recovery add, once the copy's client digest checks.
Two replicas holding different bytes have no majority: reported, never repaired. It never
changes the ledger's metadata and never decides which ledgers to check (its callers do).
"""

from __future__ import annotations

import hashlib
import logging
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Protocol

from pybkx import errors
from pybkx._core import DigestManager
from pybkx.meta import LedgerMetadata

__all__ = [
    "LEDGER_DIGEST_PATH",
    "MAX_LISTED_ENTRIES",
    "LedgerCheck",
    "RangeDigest",
    "ReplicaFinding",
    "Replicas",
    "check_ledger",
    "digest_path",
    "write_set_ranges",
]

logger = logging.getLogger(__name__)

LEDGER_DIGEST_PATH = "/api/v1/bookie/ledger_digest"
"""The bookie admin endpoint answering a replica's digest of a ledger's entry range."""

#: Entries one per-entry listing may cover (the endpoint refuses more); also the most entries
#: one compared range holds, so a listing is never cut.
MAX_LISTED_ENTRIES = 10_000
#: Bytes of entries one compared range aims at (from the ledger's mean entry size), so a pace
#: is kept range by range and a disagreement is narrowed to few entries.
RANGE_TARGET_BYTES = 4 << 20


@dataclass(frozen=True)
class RangeDigest:
    """What one replica holds of a ledger's entry range, as its bookie answers."""

    entries: int
    bytes: int
    unreadable: int
    digest: str
    """Hex SHA-1 over each held entry's id and SHA-1."""
    listed: dict[int, str] | None = None
    """Entry id -> hex SHA-1 of its stored bytes, when a listing was asked for."""


class Replicas(Protocol):
    """How the check reaches the replicas: their digests, their entries, recovery adds."""

    def digest(
        self, bookie: str, ledger_id: int, first: int, last: int, stride: int, listed: bool
    ) -> RangeDigest:
        """``bookie``'s digest of entries ``first, first + stride, ..`` up to ``last``. Raises
        OSError when the bookie cannot be asked."""
        ...

    def read(self, bookie: str, ledger_id: int, entry_id: int) -> bytes:
        """The entry as ``bookie`` stores it. Raises BKException, TimeoutError."""
        ...

    def write(
        self, bookie: str, ledger_id: int, entry_id: int, data: bytes, md: LedgerMetadata
    ) -> None:
        """Store ``data`` on ``bookie`` as a recovery add. Raises BKException, TimeoutError."""
        ...


@dataclass(frozen=True)
class ReplicaFinding:
    """One bookie's copies of a fragment's entries that disagree with the other replicas."""

    ledger_id: int
    bookie: str
    kind: str
    """``differs`` (other bytes than the majority), ``missing`` (the others hold it),
    ``no-majority`` (replicas hold different bytes and none has a majority)."""
    entries: tuple[int, ...]
    repaired: tuple[int, ...] = ()
    """The entries rewritten from ``source``."""
    source: str = ""
    detail: str = ""

    def as_json(self) -> dict[str, object]:
        return {
            "ledgerId": self.ledger_id,
            "bookie": self.bookie,
            "kind": self.kind,
            "entries": list(self.entries),
            "repaired": list(self.repaired),
            "source": self.source,
            "detail": self.detail,
        }


@dataclass
class LedgerCheck:
    """What the check of one ledger (or several) found and did."""

    ranges: int = 0
    """Write-set ranges whose digests were compared."""
    entries: int = 0
    """Entry copies compared (every replica's)."""
    bytes: int = 0
    """Bytes the replicas hashed to answer."""
    findings: list[ReplicaFinding] = field(default_factory=list)
    not_asked: dict[str, str] = field(default_factory=dict)
    """Bookie -> why its digest could not be had (its copies were not compared)."""

    @property
    def differing(self) -> int:
        return sum(len(f.entries) for f in self.findings)

    @property
    def repaired(self) -> int:
        return sum(len(f.repaired) for f in self.findings)

    @property
    def unrepaired(self) -> int:
        return self.differing - self.repaired

    def add(self, other: LedgerCheck) -> None:
        self.ranges += other.ranges
        self.entries += other.entries
        self.bytes += other.bytes
        self.findings += other.findings
        for bookie, why in other.not_asked.items():
            self.not_asked.setdefault(bookie, why)

    def as_json(self) -> dict[str, object]:
        return {
            "ranges": self.ranges,
            "entries": self.entries,
            "bytes": self.bytes,
            "differing": self.differing,
            "repaired": self.repaired,
            "findings": [f.as_json() for f in self.findings],
            "notAsked": dict(sorted(self.not_asked.items())),
        }


def digest_path(ledger_id: int, first: int, last: int, stride: int, listed: bool) -> str:
    """The endpoint's path and query for one digest."""
    query = f"ledger_id={ledger_id}&first={first}&last={last}&stride={stride}"
    return f"{LEDGER_DIGEST_PATH}?{query}{'&entries=true' if listed else ''}"


def write_set_ranges(
    md: LedgerMetadata, first: int, last: int, ensemble: tuple[str, ...]
) -> Iterator[tuple[int, int, tuple[str, ...]]]:
    """``(start, stride, bookies)`` for each group of a segment's entries stored on the same
    bookies: the whole segment when E == Qw, else the entries ``start, start + E, ..`` of each
    write-set start, on the bookies ``LedgerMetadata.write_set`` gives them."""
    size = md.ensemble_size
    if md.write_quorum_size == size:
        yield first, 1, tuple(ensemble[i] for i in md.write_set(first))
        return
    for start in range(first, min(last, first + size - 1) + 1):
        yield start, size, tuple(ensemble[i] for i in md.write_set(start))


Pace = Callable[[int], bool]
"""Called with the most bytes one replica read for a range; False: stop the check now."""


def check_ledger(
    replicas: Replicas,
    ledger_id: int,
    md: LedgerMetadata,
    *,
    repair: bool,
    first_bookie: str | None = None,
    pace: Pace | None = None,
) -> LedgerCheck:
    """Compare the replicas of every fragment of the closed ledger ``md`` (only the fragments
    whose ensemble starts with ``first_bookie``, when given) and, when ``repair``, rewrite the
    odd ones out. Raises ValueError for an open ledger."""
    if not md.is_closed:
        raise ValueError(f"ledger {ledger_id} is not closed: its replicas may still change")
    done = LedgerCheck()
    _check_ranges(replicas, ledger_id, md, done, repair, first_bookie, pace)
    done.findings = _merged(done.findings)
    return done


def _check_ranges(
    replicas: Replicas,
    ledger_id: int,
    md: LedgerMetadata,
    done: LedgerCheck,
    repair: bool,
    first_bookie: str | None,
    pace: Pace | None,
) -> None:
    mean_entry = max(1, md.length // max(1, md.last_entry_id + 1))
    per_range = max(1, min(MAX_LISTED_ENTRIES, RANGE_TARGET_BYTES // mean_entry))
    for seg_first, seg_last, ensemble in _segments(md):
        if seg_last < seg_first or (first_bookie is not None and ensemble[0] != first_bookie):
            continue
        for start, stride, bookies in write_set_ranges(md, seg_first, seg_last, ensemble):
            for lo in range(start, seg_last + 1, per_range * stride):
                hi = min(seg_last, lo + (per_range - 1) * stride)
                read = _RangeCheck(replicas, ledger_id, md, bookies, (lo, hi, stride)).run(
                    done, repair
                )
                if pace is not None and not pace(read):
                    return


def _segments(md: LedgerMetadata) -> Iterator[tuple[int, int, tuple[str, ...]]]:
    """``(first, last, ensemble)`` of each segment of a closed ledger (``last`` may be
    ``first - 1``: an empty segment)."""
    starts = [*md.ensembles, md.last_entry_id + 1]
    for (first, ensemble), after in zip(md.ensembles.items(), starts[1:], strict=True):
        yield first, max(first - 1, after - 1), ensemble


def _merged(findings: list[ReplicaFinding]) -> list[ReplicaFinding]:
    """One finding per bookie and kind of a ledger (its ranges' findings joined)."""
    joined: dict[tuple[str, str], ReplicaFinding] = {}
    for f in findings:
        known = joined.get((f.bookie, f.kind))
        if known is None:
            joined[(f.bookie, f.kind)] = f
            continue
        sources = sorted({*known.source.split(","), *f.source.split(",")} - {""})
        joined[(f.bookie, f.kind)] = ReplicaFinding(
            f.ledger_id,
            f.bookie,
            f.kind,
            known.entries + f.entries,
            known.repaired + f.repaired,
            ",".join(sources),
            "; ".join(dict.fromkeys(d for d in (known.detail, f.detail) if d)),
        )
    return [joined[key] for key in sorted(joined)]


class _RangeCheck:
    """One range of one write set: digests compared, then entries when they differ."""

    def __init__(
        self,
        replicas: Replicas,
        ledger_id: int,
        md: LedgerMetadata,
        bookies: tuple[str, ...],
        span: tuple[int, int, int],
    ) -> None:
        self._replicas = replicas
        self._ledger = ledger_id
        self._md = md
        self._bookies = bookies
        self._span = span

    def _ask(self, done: LedgerCheck, listed: bool) -> dict[str, RangeDigest]:
        lo, hi, stride = self._span
        answers: dict[str, RangeDigest] = {}
        for bookie in self._bookies:
            try:
                answers[bookie] = self._replicas.digest(
                    bookie, self._ledger, lo, hi, stride, listed
                )
            except OSError as exc:
                done.not_asked.setdefault(bookie, str(exc))
        return answers

    def run(self, done: LedgerCheck, repair: bool) -> int:
        """Compare, repair when asked; returns the most bytes one replica read."""
        answers = self._ask(done, listed=False)
        done.ranges += 1
        done.entries += sum(a.entries for a in answers.values())
        done.bytes += sum(a.bytes for a in answers.values())
        read = max((a.bytes for a in answers.values()), default=0)
        if len(answers) < 2 or len({(a.entries, a.digest) for a in answers.values()}) == 1:
            return read
        listings = self._ask(done, listed=True)
        if len(listings) < 2:
            return read
        lo, hi, stride = self._span
        odd: dict[tuple[str, str], list[tuple[int, str]]] = {}
        for entry in range(lo, hi + 1, stride):
            copies = {b: (d.listed or {}).get(entry) for b, d in listings.items()}
            for bookie, kind, good in _verdicts(copies):
                odd.setdefault((bookie, kind), []).append((entry, good))
        for (bookie, kind), entries in sorted(odd.items()):
            done.findings.append(self._settle(bookie, kind, entries, listings, repair))
        return read

    def _settle(
        self,
        bookie: str,
        kind: str,
        entries: list[tuple[int, str]],
        listings: dict[str, RangeDigest],
        repair: bool,
    ) -> ReplicaFinding:
        ids = tuple(e for e, _ in entries)
        if kind == "no-majority":
            return ReplicaFinding(
                self._ledger,
                bookie,
                kind,
                ids,
                detail=f"{len(listings)} replicas hold different bytes and none has a majority: "
                "which copy is right cannot be told, so none is rewritten",
            )
        if not repair:
            return ReplicaFinding(self._ledger, bookie, kind, ids, detail="not repaired (asked)")
        repaired: list[int] = []
        sources: set[str] = set()
        failures: list[str] = []
        for entry, good in entries:
            holders = [b for b, d in listings.items() if (d.listed or {}).get(entry) == good]
            source, why = self._rewrite(bookie, entry, good, holders)
            if source:
                repaired.append(entry)
                sources.add(source)
            else:
                failures.append(f"{entry}: {why}")
        detail = "" if not failures else "not repaired: " + "; ".join(failures[:5])
        return ReplicaFinding(
            self._ledger, bookie, kind, ids, tuple(repaired), ",".join(sorted(sources)), detail
        )

    def _rewrite(self, bookie: str, entry: int, good: str, holders: list[str]) -> tuple[str, str]:
        """Copy ``entry`` from a holder of the majority copy to ``bookie``; the holder used, or
        "" and why none could give it."""
        md = self._md
        digest = DigestManager(self._ledger, md.password, md.digest_type.name)
        why = "no replica holds the majority copy"
        for holder in holders:
            try:
                data = self._replicas.read(holder, self._ledger, entry)
                if hashlib.sha1(data).hexdigest() != good:
                    why = f"{holder} now holds other bytes"
                    continue
                digest.verify(data, entry)
                self._replicas.write(bookie, self._ledger, entry, data, md)
            except errors.DigestMatchException as exc:
                why = (
                    f"the majority copy on {holder} fails its client digest ({exc}): the "
                    "majority may be the damaged one, nothing written"
                )
                continue
            except (errors.BKException, TimeoutError) as exc:
                why = f"{holder}: {type(exc).__name__}: {exc}"
                continue
            return holder, ""
        return "", why


def _verdicts(copies: dict[str, str | None]) -> list[tuple[str, str, str]]:
    """``(bookie, kind, good copy)`` for each replica of one entry that is the odd one out
    (``copies``: bookie -> SHA-1 of its copy, None when it lacks the entry)."""
    held = Counter(h for h in copies.values() if h is not None)
    if not held or (len(held) == 1 and all(copies.values())):
        return []  # nobody holds it (not ours to say), or every replica agrees
    (good, votes), *rest = held.most_common()
    if votes * 2 > len(copies) or not rest:
        # A majority, or one copy the others merely lack.
        return [
            (bookie, "missing" if h is None else "differs", good)
            for bookie, h in sorted(copies.items())
            if h != good
        ]
    return [(bookie, "no-majority", "") for bookie, h in sorted(copies.items()) if h is not None]
