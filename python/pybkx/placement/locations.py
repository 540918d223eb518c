"""Where one location-aware policy's bookies are: the cluster's writable and read-only bookies,
the network topology of the writable ones, and the last location of every bookie seen, through
the policy's resolver; it follows joins, leaves and rack moves. It never chooses bookies.
"""

# Locking: the policy's ``lock`` guards this state and is held only for in-memory work; its
# ``change_lock`` serialises cluster and rack changes, whose name resolution (possibly a
# script) runs outside ``lock`` so reads and placements never wait on it. Every bookie ever
# seen keeps its last location in the history (bounded), so adherence of an ensemble holding a
# bookie that has since gone is judged by where that bookie was.

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Final

from pybkx.placement.dns import DefaultingResolver, host_of
from pybkx.placement.selection import Cell
from pybkx.placement.stats import PlacementStats
from pybkx.placement.topology import InvalidTopologyError, NetworkTopology

__all__ = ["MAX_HISTORY", "UNRESOLVED_RETRY_S", "BookieLocations"]

logger = logging.getLogger(__name__)

MAX_HISTORY: Final = 65_536
"""Bound on remembered locations of bookies no longer writable."""
UNRESOLVED_RETRY_S: Final = 30.0
"""Minimum time between attempts to resolve again the bookies left at the default location."""


class BookieLocations:
    """The bookies of one policy (``owner``, for log lines) and where they are. ``changed`` is
    called under ``lock`` after every change of membership or location; ``retry_unresolved``
    resolves again, at most every UNRESOLVED_RETRY_S, the bookies left at the default
    location (when a real resolver is configured)."""

    def __init__(
        self,
        owner: str,
        resolver: DefaultingResolver,
        topology: NetworkTopology,
        stats: PlacementStats,
        *,
        lock: threading.RLock,
        change_lock: threading.Lock,
        changed: Callable[[], None],
        retry_unresolved: bool,
    ) -> None:
        self._owner = owner
        self._resolver = resolver
        self.topology = topology
        self._stats = stats
        self._lock = lock
        self._change_lock = change_lock
        self._changed = changed
        self._retry_unresolved = retry_unresolved
        self.writable: frozenset[str] = frozenset()
        self.readonly: frozenset[str] = frozenset()
        self._history: dict[str, str] = {}
        self._cells: dict[str, Cell] = {}
        self._last_unresolved_retry = 0.0

    @property
    def default_location(self) -> str:
        return self._resolver.default_location

    # --- locations --------------------------------------------------------------------------

    def valid_location(self, name: str, location: str) -> str:
        """``location`` normalised, or the default location (counted and logged) when the
        topology cannot hold it."""
        try:
            return self.topology.validate(location)
        except InvalidTopologyError as exc:
            self._stats.inc("failed_to_resolve_network_location_count")
            logger.warning("%s: %s: %s; using %s", self._owner, name, exc, self.default_location)
            return self.default_location

    def _resolve(self, bookies: Sequence[str]) -> dict[str, str]:
        answers = self._resolver.resolve(list(bookies))
        return {b: self.valid_location(b, loc) for b, loc in zip(bookies, answers, strict=True)}

    def resolve_one(self, name: str) -> str:
        """Where the resolver puts ``name`` (a host or bookie id) now, not remembered."""
        return self.valid_location(name, self._resolver.resolve_one(name))

    def cell(self, location: str) -> Cell:
        """The cell of ``location`` (made once). Under ``lock``."""
        cell = self._cells.get(location)
        if cell is None:
            cell = self._cells[location] = Cell.of(location)
        return cell

    def last_seen(self, bookie: str) -> str | None:
        """Where ``bookie`` was last seen, None if never. Under ``lock``."""
        return self._history.get(bookie)

    def _remember(self, bookie: str, location: str) -> None:
        self._history.pop(bookie, None)
        self._history[bookie] = location
        while len(self._history) > MAX_HISTORY:
            del self._history[next(iter(self._history))]

    def locations(self, bookies: Sequence[str]) -> list[str]:
        """Where each of ``bookies`` is (or was last seen); those never seen are resolved now."""
        with self._lock:
            known = {b: self._history.get(b) for b in bookies}
        unknown = [b for b, loc in known.items() if loc is None]
        if unknown:
            resolved = self._resolve(unknown)
            with self._lock:
                for bookie, location in resolved.items():
                    known[bookie] = self._history.setdefault(bookie, location)
        out: list[str] = []
        for bookie in bookies:
            found = known[bookie]
            assert found is not None
            out.append(found)
        return out

    def writable_in_default_location(self) -> int:
        """Writable bookies whose location is unknown."""
        with self._lock:
            return len(self.topology.bookies_at(self.default_location))

    # --- membership -------------------------------------------------------------------------

    def cluster_changed(self, writable: Iterable[str], readonly: Iterable[str]) -> set[str]:
        """Take the current writable and read-only bookies (resolving those that joined);
        returns the bookies that were writable or read-only and are neither now."""
        writable_now = frozenset(writable)
        readonly_now = frozenset(readonly)
        with self._change_lock:
            with self._lock:
                joined = [b for b in writable_now if b not in self.writable]
                before = self.writable | self.readonly
                retry = self._unresolved_to_retry(writable_now)
            resolved = self._resolve(joined + retry) if joined or retry else {}
            with self._lock:
                for bookie in self.writable - writable_now:
                    self.topology.remove(bookie)
                    self._stats.inc("bookies_left")
                for bookie, location in resolved.items():
                    self.topology.add(bookie, location)
                    self._remember(bookie, location)
                self._stats.inc("bookies_joined", len(joined))
                self.writable = writable_now
                self.readonly = readonly_now
                self._changed()
        return set(before - writable_now - readonly_now)

    def _unresolved_to_retry(self, writable: frozenset[str]) -> list[str]:
        if not self._retry_unresolved:
            return []
        now = time.monotonic()
        if now - self._last_unresolved_retry < UNRESOLVED_RETRY_S:
            return []
        stuck = [
            b
            for b in self.topology.bookies_at(self.default_location)
            if b in writable and b in self.writable
        ]
        if stuck:
            self._last_unresolved_retry = now
        return stuck

    def racks_changed(self, bookies: Iterable[str] | None) -> None:
        """Resolve ``bookies`` (every bookie seen, when None) again and move those whose
        location changed. Names may be bookie ids or their host names."""
        with self._change_lock:
            with self._lock:
                seen = list(self._history)
            if bookies is None:
                affected = seen
            else:
                names = set(bookies)
                affected = [b for b in seen if b in names or host_of(b) in names]
            if not affected:
                return
            resolved = self._resolve(affected)
            with self._lock:
                for bookie, location in resolved.items():
                    self._remember(bookie, location)
                    if bookie in self.writable and self.topology.add(bookie, location):
                        logger.info("%s: bookie %s moved to %s", self._owner, bookie, location)
                self._changed()
