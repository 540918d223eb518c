"""A checker over a recorded history of ledger operations, Jepsen style: it knows nothing of how
the history was made (nemesis runs, hand-written cases) and judges only what clients saw.

A history is a list of events (dicts, one JSON object per line in a file), each with ``type``,
``ledger`` and ``t`` (seconds, one clock for the whole run):

- ``append``: ``status`` "ok" (acknowledged, with ``entry``), "fail" (the client was told it
  failed) or "unknown" (no answer); ``hash`` and ``size`` of the payload; ``sent`` when the add
  was sent (``t`` is when its outcome was known).
- ``read``: ``reader``, ``entries`` ([[entry id, hash, size], ...] in the order returned) and
  ``final`` (True for the verification read after the run: it must hold every acknowledged
  entry).
- ``fence``: a recovery that fenced and closed the ledger completed at ``t``.
- ``lac``: ``observer`` saw the ledger's last add confirmed ``lac``.
- ``close``: the ledger's metadata seen closed with ``last_entry`` and ``length`` (bytes).
- ``delete``: the ledger was deleted (no final read is expected after it; the one before
  counts).

Rules (each broken one is a Violation naming the smallest slice of events that shows it):
1. ``lost``: an acknowledged entry is missing from a final read, read back with another payload,
   or beyond a closed ledger's last entry.
2. ``diverged``: two reads disagree on an entry id's payload, or a read is not a prefix (ids not
   0, 1, 2, ... from where it started).
3. ``ack_after_fence``: an append sent after a fence of its ledger completed was acknowledged.
4. ``lac_backwards``: one observer saw a ledger's LAC go down.
5. ``bad_length``: a closed ledger's length is not the sum of its entries' sizes up to its last
   entry, or two closes disagree.
"""

from __future__ import annotations

import itertools
import json
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["CheckResult", "Violation", "check", "load_history"]

Event = dict[str, Any]


@dataclass(frozen=True)
class Violation:
    """One broken rule: its kind, the ledger, what is wrong and the events that show it."""

    kind: str
    ledger: int
    message: str
    events: tuple[Event, ...]

    def __str__(self) -> str:
        lines = [f"{self.kind} (ledger {self.ledger}): {self.message}"]
        lines += [f"    {json.dumps(e, sort_keys=True)}" for e in self.events]
        return "\n".join(lines)


@dataclass
class CheckResult:
    """The violations found and what was checked (counts by event type)."""

    violations: list[Violation] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    acknowledged: int = 0

    @property
    def ok(self) -> bool:
        return not self.violations

    def by_kind(self) -> dict[str, int]:
        out: dict[str, int] = defaultdict(int)
        for v in self.violations:
            out[v.kind] += 1
        return dict(out)

    def report(self, limit: int = 10) -> str:
        head = (
            f"{self.acknowledged} acknowledged appends, events {dict(sorted(self.counts.items()))}"
            f", violations {self.by_kind() or 'none'}"
        )
        return "\n".join([head] + [str(v) for v in self.violations[:limit]])


def load_history(path: Path) -> list[Event]:
    """Events from a JSON-lines file (a torn last line, from a killed recorder, is skipped)."""
    events = []
    for line in path.read_text().splitlines():
        try:
            events.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return events


def check(history: Iterable[Event]) -> CheckResult:
    """Every rule over ``history``; the result lists violations in rule order."""
    events = sorted(history, key=lambda e: float(e.get("t", 0.0)))
    result = CheckResult()
    per_ledger: dict[int, list[Event]] = defaultdict(list)
    for e in events:
        result.counts[e["type"]] = result.counts.get(e["type"], 0) + 1
        per_ledger[int(e["ledger"])].append(e)
    for ledger, ledger_events in sorted(per_ledger.items()):
        result.acknowledged += sum(1 for e in ledger_events if _acked(e))
        result.violations += _check_ledger(ledger, ledger_events)
    return result


def _acked(e: Event) -> bool:
    return e["type"] == "append" and e.get("status") == "ok"


@dataclass(frozen=True)
class _Ledger:
    """One ledger's events in time order, and the kinds most rules look at."""

    ledger: int
    events: Sequence[Event]
    acks: list[Event]
    reads: list[Event]
    closes: list[Event]

    @classmethod
    def of(cls, ledger: int, events: Sequence[Event]) -> _Ledger:
        return cls(
            ledger,
            events,
            acks=[e for e in events if _acked(e)],
            reads=[e for e in events if e["type"] == "read"],
            closes=[e for e in events if e["type"] == "close"],
        )


def _check_ledger(ledger: int, events: Sequence[Event]) -> list[Violation]:
    """Every rule over one ledger's events, in rule order."""
    history = _Ledger.of(ledger, events)
    return [violation for rule in _RULES for violation in rule(history)]


def _reads_diverge(h: _Ledger) -> list[Violation]:
    """2. Reads are prefixes of one sequence: each read contiguous, and all agreeing on every
    entry's payload (in the order of the reads)."""
    out = []
    seen: dict[int, tuple[str, Event]] = {}
    for r in h.reads:
        out += _gap_in(h.ledger, r)
        for entry, digest, *_ in r["entries"]:
            first = seen.setdefault(int(entry), (str(digest), r))
            if first[0] != str(digest):
                out.append(
                    Violation(
                        "diverged",
                        h.ledger,
                        f"entry {entry} read as {first[0]} and as {digest}",
                        (first[1], r),
                    )
                )
    return out


def _gap_in(ledger: int, r: Event) -> list[Violation]:
    """The first gap in one read's entry ids, if any."""
    ids = [int(x[0]) for x in r["entries"]]
    if not ids or ids == list(range(ids[0], ids[0] + len(ids))):
        return []
    gap = next(i for i, (a, b) in enumerate(itertools.pairwise(ids)) if b != a + 1)
    return [
        Violation(
            "diverged",
            ledger,
            f"read by {r.get('reader')} is not contiguous: entry {ids[gap]} then {ids[gap + 1]}",
            (r,),
        )
    ]


# 1. Nothing acknowledged lost: read back as acknowledged, in every final read (it reads to the
# end), and not beyond where the ledger was closed.


def _acks_read_differently(h: _Ledger) -> list[Violation]:
    read_as: dict[int, list[tuple[str, Event]]] = defaultdict(list)
    for r in h.reads:
        for entry, digest, *_ in r["entries"]:
            read_as[int(entry)].append((str(digest), r))
    out = []
    for a in h.acks:
        other = [(d, r) for d, r in read_as.get(int(a["entry"]), []) if d != str(a["hash"])]
        if other:
            digest, r = other[0]
            out.append(
                Violation(
                    "lost",
                    h.ledger,
                    f"entry {a['entry']} acknowledged as {a['hash']}, read as {digest}",
                    (a, r),
                )
            )
    return out


def _acks_missing_from_final_reads(h: _Ledger) -> list[Violation]:
    out = []
    for r in (r for r in h.reads if r.get("final")):
        held = {int(x[0]) for x in r["entries"]}
        out += [
            Violation(
                "lost",
                h.ledger,
                f"acknowledged entry {a['entry']} missing from the final read",
                (a, r),
            )
            for a in h.acks
            if int(a["entry"]) not in held
        ]
    return out


def _acks_beyond_close(h: _Ledger) -> list[Violation]:
    out = []
    for c in h.closes:
        beyond = [a for a in h.acks if int(a["entry"]) > int(c["last_entry"])]
        if beyond:
            a = max(beyond, key=lambda x: int(x["entry"]))
            out.append(
                Violation(
                    "lost",
                    h.ledger,
                    f"closed at last entry {c['last_entry']}, but entry {a['entry']} was "
                    f"acknowledged ({len(beyond)} beyond it)",
                    (a, c),
                )
            )
    return out


def _acks_after_fence(h: _Ledger) -> list[Violation]:
    """3. No acknowledgement of an add sent after a fence completed."""
    fences = [e for e in h.events if e["type"] == "fence"]
    if not fences:
        return []
    fence = min(fences, key=lambda f: float(f["t"]))
    late = [a for a in h.acks if float(a.get("sent", a["t"])) > float(fence["t"])]
    if not late:
        return []
    a = min(late, key=lambda x: float(x.get("sent", x["t"])))
    return [
        Violation(
            "ack_after_fence",
            h.ledger,
            f"entry {a['entry']} sent at {a.get('sent')} after the fence at "
            f"{fence['t']} was acknowledged ({len(late)} such)",
            (fence, a),
        )
    ]


def _lac_backwards(h: _Ledger) -> list[Violation]:
    """4. LAC never goes backwards for one observer."""
    out = []
    last: dict[str, Event] = {}
    for e in (e for e in h.events if e["type"] == "lac"):
        who = str(e.get("observer"))
        prev = last.get(who)
        if prev is not None and int(e["lac"]) < int(prev["lac"]):
            out.append(
                Violation(
                    "lac_backwards",
                    h.ledger,
                    f"{who} saw LAC {prev['lac']} then {e['lac']}",
                    (prev, e),
                )
            )
        if prev is None or int(e["lac"]) >= int(prev["lac"]):
            last[who] = e
    return out


# 5. Closed length: the sum of the sizes of entries 0..last entry; closes agree.


def _lengths_not_the_sum_of_sizes(h: _Ledger) -> list[Violation]:
    sizes: dict[int, int] = {}
    for a in h.acks:
        sizes.setdefault(int(a["entry"]), int(a["size"]))
    for r in h.reads:
        for x in r["entries"]:
            if len(x) > 2:
                sizes.setdefault(int(x[0]), int(x[2]))
    out = []
    for c in h.closes:
        last_entry = int(c["last_entry"])
        if any(i not in sizes for i in range(last_entry + 1)):
            continue  # an entry's size is unknown: nothing to compare
        want = sum(sizes[i] for i in range(last_entry + 1))
        if int(c["length"]) != want:
            out.append(
                Violation(
                    "bad_length",
                    h.ledger,
                    f"closed length {c['length']} but entries 0..{last_entry} hold {want} bytes",
                    (c,),
                )
            )
    return out


def _closes_disagree(h: _Ledger) -> list[Violation]:
    return [
        Violation(
            "bad_length",
            h.ledger,
            f"closed as ({a['last_entry']}, {a['length']}) and as "
            f"({b['last_entry']}, {b['length']})",
            (a, b),
        )
        for a, b in itertools.pairwise(h.closes)
        if (int(a["last_entry"]), int(a["length"])) != (int(b["last_entry"]), int(b["length"]))
    ]


_RULES: tuple[Callable[[_Ledger], list[Violation]], ...] = (
    _reads_diverge,
    _acks_read_differently,
    _acks_missing_from_final_reads,
    _acks_beyond_close,
    _acks_after_fence,
    _lac_backwards,
    _lengths_not_the_sum_of_sizes,
    _closes_disagree,
)
