"""Read ordering: the order a read tries an entry's replicas in, and the slow-bookie record.
It must never choose bookies for writes."""

# The classes follow BookKeeper's RackawareEnsemblePlacementPolicyImpl (reference §6.4): healthy
# writable bookies first, then writable ones with failures (oldest failure first), remote-region
# ones (region-aware), read-only, slow (fewest pending requests first), and unavailable bookies
# last. Within a class the write-set order is kept unless random reordering is on. BookKeeper's
# own sort keeps write-set order inside every class (its stability bits outrank the failure
# and pending counts); the documented intent, implemented here, uses those counts.

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from enum import IntEnum
from typing import Final

from pybkx.placement.base import (
    BookiesHealthInfo,
)

__all__ = ["REMOTE_AFTER_LOCAL", "ReadClass", "SlowBookies", "reorder_read_sequence"]

REMOTE_AFTER_LOCAL: Final = 2
"""Region-aware reads put a remote-region bookie after every this many local ones."""

MAX_SLOW_BOOKIES: Final = 65_536
"""Bound on the slow-bookie record (the oldest entries go first beyond it)."""


class ReadClass(IntEnum):
    """Read preference classes, best first."""

    LOCAL = 1
    LOCAL_FAILED = 2
    REMOTE = 3
    REMOTE_FAILED = 4
    READ_ONLY = 5
    SLOW = 6
    UNAVAILABLE = 7


class SlowBookies:
    """Bookies recently slow to answer (``register``), each forgotten ``expiry_ms`` after its
    last registration. ``clock`` returns seconds (monotonic); tests may replace it."""

    def __init__(self, expiry_ms: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.expiry_ms = expiry_ms
        self.clock = clock
        self._lock = threading.Lock()
        self._until: dict[str, tuple[float, int]] = {}

    def register(self, bookie: str, entry_id: int) -> None:
        deadline = self.clock() + self.expiry_ms / 1000
        with self._lock:
            self._until.pop(bookie, None)
            self._until[bookie] = (deadline, entry_id)
            while len(self._until) > MAX_SLOW_BOOKIES:
                del self._until[next(iter(self._until))]

    def is_slow(self, bookie: str) -> bool:
        with self._lock:
            entry = self._until.get(bookie)
            if entry is None:
                return False
            if entry[0] <= self.clock():
                del self._until[bookie]
                return False
            return True

    def clear(self) -> None:
        with self._lock:
            self._until.clear()


def reorder_read_sequence(
    ensemble: Sequence[str],
    write_set: Sequence[int],
    *,
    writable: Collection[str],
    readonly: Collection[str],
    slow: SlowBookies,
    health: BookiesHealthInfo | None,
    threshold_pending: int = 0,
    randomize: bool = False,
    rng: random.Random | None = None,
    region_of: Callable[[str], str | None] | None = None,
    my_region: str | None = None,
) -> list[int]:
    """A permutation of ``write_set`` (indexes into ``ensemble``) in the order to read.

    ``threshold_pending`` > 0 first moves the bookie with the fewest pending requests to the
    front when the first one has at least that many more. With ``region_of`` and a known
    ``my_region``, bookies of other regions are "remote": after every REMOTE_AFTER_LOCAL local
    bookies one remote bookie is tried, so a read reaches another region early.
    Raises IndexError for an index outside the ensemble.
    """
    order = list(write_set)
    for index in order:
        if not 0 <= index < len(ensemble):
            raise IndexError(f"write set index {index} outside an ensemble of {len(ensemble)}")
    if threshold_pending > 0 and health is not None:
        _least_pending_first(order, ensemble, health, threshold_pending)

    def remote(bookie: str) -> bool:
        return region_of is not None and my_region is not None and region_of(bookie) != my_region

    keyed = [
        (_read_class(ensemble[index], writable, readonly, slow, health, remote), position, index)
        for position, index in enumerate(order)
    ]
    keyed.sort(key=lambda item: (item[0][0], item[0][1], item[1]))
    groups: dict[ReadClass, list[int]] = {}
    for (cls, _), _, index in keyed:
        groups.setdefault(cls, []).append(index)
    if randomize:
        chooser = rng if rng is not None else random.Random()
        for cls in (ReadClass.LOCAL, ReadClass.REMOTE, ReadClass.READ_ONLY, ReadClass.UNAVAILABLE):
            if cls in groups:
                chooser.shuffle(groups[cls])
    return _in_read_order(groups)


def _least_pending_first(
    order: list[int], ensemble: Sequence[str], health: BookiesHealthInfo, threshold: int
) -> None:
    """Moves the replica with the fewest pending requests to the front of ``order`` when the
    first one has at least ``threshold`` more."""
    if len(order) < 2:
        return
    pending = [health.get_bookie_pending_requests(ensemble[i]) for i in order]
    best = min(range(len(order)), key=lambda k: pending[k])
    if best > 0 and pending[0] >= pending[best] + threshold:
        order.insert(0, order.pop(best))


def _read_class(
    bookie: str,
    writable: Collection[str],
    readonly: Collection[str],
    slow: SlowBookies,
    health: BookiesHealthInfo | None,
    is_remote: Callable[[str], bool],
) -> tuple[ReadClass, int]:
    """The class of ``bookie`` and its rank within the class (lower first): the entry id it
    last failed, or its pending requests when slow. Only a writable bookie's region counts."""
    if bookie not in writable:
        if bookie in readonly:
            if slow.is_slow(bookie):
                return ReadClass.SLOW, _pending(health, bookie)
            return ReadClass.READ_ONLY, 0
        return ReadClass.UNAVAILABLE, 0
    failed = health.get_bookie_failure_history(bookie) if health is not None else -1
    remote = is_remote(bookie)
    if failed >= 0:
        return (ReadClass.REMOTE_FAILED if remote else ReadClass.LOCAL_FAILED), failed
    if slow.is_slow(bookie):
        return ReadClass.SLOW, _pending(health, bookie)
    return (ReadClass.REMOTE if remote else ReadClass.LOCAL), 0


def _in_read_order(groups: Mapping[ReadClass, list[int]]) -> list[int]:
    """The replicas of every class in the order to read: local ones with a remote one after
    every REMOTE_AFTER_LOCAL of them, then read-only, slow and unavailable ones."""
    local = groups.get(ReadClass.LOCAL, []) + groups.get(ReadClass.LOCAL_FAILED, [])
    remote = groups.get(ReadClass.REMOTE, []) + groups.get(ReadClass.REMOTE_FAILED, [])
    out: list[int] = []
    while local and remote:
        out.extend(local[:REMOTE_AFTER_LOCAL])
        del local[:REMOTE_AFTER_LOCAL]
        out.append(remote.pop(0))
    out.extend(local)
    out.extend(remote)
    for cls in (ReadClass.READ_ONLY, ReadClass.SLOW, ReadClass.UNAVAILABLE):
        out.extend(groups.get(cls, []))
    return out


def _pending(health: BookiesHealthInfo | None, bookie: str) -> int:
    return health.get_bookie_pending_requests(bookie) if health is not None else 0
