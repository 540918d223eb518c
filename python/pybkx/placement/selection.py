"""Picking: a complete search assigning locations to positions under quorum rules, bookies.
It must never read configuration or cluster state; callers pass everything in."""

# The search works on locations ("cells"), not bookies: which bookie of a rack is used does not
# matter to any rule, only how many the rack can still supply. Rules see one write quorum (a
# window of Qw consecutive positions, wrapping) at a time and must be *necessary* conditions
# for a partial window and *exact* for a complete one; then a depth-first search that checks
# every window touching the position it fills is complete: it finds an assignment whenever
# one exists. Cells that no rule can tell apart (unused ones of equal capacity, per policy) are
# tried once per position, a counting bound (``spread_possible``) rejects impossible spreads
# before the search starts, and a budget bounds it anyway (a policy logs when it is reached).

from __future__ import annotations

import abc
import functools
import heapq
import random
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from pybkx.placement.base import (
    BookieInfo,
)
from pybkx.placement.topology import SEPARATOR, split_location

__all__ = [
    "DEFAULT_SEARCH_BUDGET",
    "Cell",
    "Durability",
    "MinDomains",
    "MinLocations",
    "SearchBudgetExceeded",
    "SearchState",
    "WindowRule",
    "ZoneSpread",
    "assign_cells",
    "disk_weights",
    "pick_bookies",
    "spread_possible",
    "window_starts",
    "windows_containing",
]


DEFAULT_SEARCH_BUDGET: Final = 200_000
"""Placements the search may try per call before giving up (never reached in practice)."""


@dataclass(frozen=True, slots=True, eq=False)
class Cell:
    """A location bookies sit at, split for the rules: ``domain`` is the first component
    (region or zone, as a path), ``subdomain`` the second (rack within a region, upgrade domain
    within a zone; ``""`` when absent). Cells are equal when their locations are."""

    location: str
    domain: str
    subdomain: str

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Cell) and other.location == self.location

    def __hash__(self) -> int:
        return hash(self.location)

    @classmethod
    def of(cls, location: str) -> Cell:
        parts = split_location(location)
        domain = SEPARATOR + parts[0] if parts else location
        subdomain = SEPARATOR + parts[1] if len(parts) > 1 else ""
        return cls(location, domain, subdomain)


class WindowRule(abc.ABC):
    """A condition on every write quorum. ``feasible`` gets a window whose unfilled positions
    are None: it must hold whenever the window can still be completed to satisfy the rule,
    and be exact for a complete window."""

    @abc.abstractmethod
    def feasible(self, window: Sequence[Cell | None]) -> bool:
        """Whether ``window`` (None: open position) can still be completed to satisfy the
        rule; exactly whether it does when no position is open."""

    def possible(
        self,
        ensemble_size: int,
        write_quorum: int,
        fixed: Sequence[Cell | None],
        capacity: Mapping[Cell, int],
    ) -> bool:
        """A necessary condition checked once before searching: False when no assignment
        can satisfy the rule in every write quorum (default: no such check)."""
        return True


def spread_possible(
    ensemble_size: int,
    write_quorum: int,
    need: int,
    fixed_counts: Mapping[str, int],
    capacity: Mapping[str, int],
) -> bool:
    """Whether a cyclic sequence of ``ensemble_size`` symbols can have ``need`` distinct ones in
    every window of ``write_quorum``, judging by counts only (a necessary condition).

    A symbol used c times is missing from at least max(0, E - c * Qw) windows (its c gaps hold
    the E - c other positions, and a gap of g positions holds g - Qw + 1 windows), while V
    symbols with ``need`` per window allow at most E * (V - need) missing (symbol, window)
    pairs. ``fixed_counts`` are uses already made; ``capacity`` how many more each symbol can
    take. The counts minimising the missing pairs are found greedily (each term is convex).
    """
    if need <= 1:
        return True
    symbols = set(fixed_counts) | {s for s, n in capacity.items() if n > 0}
    if len(symbols) >= ensemble_size:
        return True  # as many symbols as positions: the bound cannot fail
    counts = {s: fixed_counts.get(s, 0) for s in symbols}
    room = {s: capacity.get(s, 0) for s in symbols}
    open_slots = ensemble_size - sum(counts.values())
    if open_slots < 0 or sum(room.values()) < open_slots:
        return False
    # Each unit goes where it removes the most missing pairs: the least used symbol with room.
    heap = [(counts[s], s) for s in symbols if room[s] > 0]
    heapq.heapify(heap)
    for _ in range(open_slots):
        count, symbol = heapq.heappop(heap)
        counts[symbol] = count + 1
        room[symbol] -= 1
        if room[symbol] > 0:
            heapq.heappush(heap, (count + 1, symbol))
    missing = sum(max(0, ensemble_size - c * write_quorum) for c in counts.values())
    return missing <= ensemble_size * (len(symbols) - need)


@dataclass(frozen=True)
class MinLocations(WindowRule):
    """At least ``need`` distinct locations (racks) per write quorum."""

    need: int

    def feasible(self, window: Sequence[Cell | None]) -> bool:
        seen = {c.location for c in window if c is not None}
        open_slots = sum(1 for c in window if c is None)
        return len(seen) + open_slots >= self.need

    def possible(
        self,
        ensemble_size: int,
        write_quorum: int,
        fixed: Sequence[Cell | None],
        capacity: Mapping[Cell, int],
    ) -> bool:
        fixed_counts: dict[str, int] = {}
        for cell in fixed:
            if cell is not None:
                fixed_counts[cell.location] = fixed_counts.get(cell.location, 0) + 1
        room = {cell.location: n for cell, n in capacity.items()}
        return spread_possible(ensemble_size, write_quorum, self.need, fixed_counts, room)


@dataclass(frozen=True)
class MinDomains(WindowRule):
    """At least ``need`` distinct domains (regions or zones) per write quorum."""

    need: int

    def feasible(self, window: Sequence[Cell | None]) -> bool:
        seen = {c.domain for c in window if c is not None}
        open_slots = sum(1 for c in window if c is None)
        return len(seen) + open_slots >= self.need

    def possible(
        self,
        ensemble_size: int,
        write_quorum: int,
        fixed: Sequence[Cell | None],
        capacity: Mapping[Cell, int],
    ) -> bool:
        return _domains_possible(ensemble_size, write_quorum, self.need, fixed, capacity)


@dataclass(frozen=True)
class Durability(WindowRule):
    """Any ``ack_quorum`` bookies of a write quorum span at least ``min_domains`` domains: no
    ``min_domains - 1`` domains hold ``ack_quorum`` of its bookies. ``domains`` are the domains
    open slots can still draw from; the partial check spreads open slots over them as evenly
    as possible (water-filling), the most favourable completion for every top-k sum."""

    min_domains: int
    ack_quorum: int
    domains: frozenset[str]

    def feasible(self, window: Sequence[Cell | None]) -> bool:
        if self.min_domains <= 1:
            return True
        counts: dict[str, int] = {}
        open_slots = 0
        for cell in window:
            if cell is None:
                open_slots += 1
            else:
                counts[cell.domain] = counts.get(cell.domain, 0) + 1
        fillable = sorted(counts.get(d, 0) for d in self.domains)
        if open_slots and not fillable:
            return False
        for _ in range(open_slots):
            fillable[0] += 1
            fillable.sort()
        fixed = [n for d, n in counts.items() if d not in self.domains]
        top = sorted(fixed + fillable, reverse=True)[: self.min_domains - 1]
        return sum(top) <= self.ack_quorum - 1


@dataclass(frozen=True)
class ZoneSpread(WindowRule):
    """At least ``need`` zones per write quorum, a zone with several bookies in it spreads them
    over at least two upgrade domains (BookKeeper's zone-aware rule), and no bookie sits at
    ``unresolved`` (the default fault domain)."""

    need: int
    unresolved: str = ""

    def feasible(self, window: Sequence[Cell | None]) -> bool:
        zones: dict[str, set[str]] = {}
        counts: dict[str, int] = {}
        open_slots = 0
        for cell in window:
            if cell is None:
                open_slots += 1
                continue
            if cell.location == self.unresolved:
                return False
            zones.setdefault(cell.domain, set()).add(cell.subdomain)
            counts[cell.domain] = counts.get(cell.domain, 0) + 1
        lacking_ud = sum(1 for z, uds in zones.items() if counts[z] > 1 and len(uds) < 2)
        lacking_zones = max(0, self.need - len(zones))
        return lacking_ud + lacking_zones <= open_slots

    def possible(
        self,
        ensemble_size: int,
        write_quorum: int,
        fixed: Sequence[Cell | None],
        capacity: Mapping[Cell, int],
    ) -> bool:
        usable = {c: n for c, n in capacity.items() if c.location != self.unresolved}
        return _domains_possible(ensemble_size, write_quorum, self.need, fixed, usable)


def _domains_possible(
    ensemble_size: int,
    write_quorum: int,
    need: int,
    fixed: Sequence[Cell | None],
    capacity: Mapping[Cell, int],
) -> bool:
    fixed_counts: dict[str, int] = {}
    for cell in fixed:
        if cell is not None:
            fixed_counts[cell.domain] = fixed_counts.get(cell.domain, 0) + 1
    room: dict[str, int] = {}
    for cell, n in capacity.items():
        room[cell.domain] = room.get(cell.domain, 0) + n
    return spread_possible(ensemble_size, write_quorum, need, fixed_counts, room)


@dataclass
class SearchState:
    """The search's view, also given to the policy's ordering and symmetry functions."""

    ensemble_size: int
    write_quorum: int
    assignment: list[Cell | None]
    capacity: dict[Cell, int]
    cell_counts: dict[Cell, int] = field(default_factory=dict)
    domain_counts: dict[str, int] = field(default_factory=dict)
    open_positions: int = 0

    @classmethod
    def start(
        cls,
        ensemble_size: int,
        write_quorum: int,
        fixed: Sequence[Cell | None],
        capacity: Mapping[Cell, int],
    ) -> SearchState:
        """The state before the search: ``fixed`` placed (None: open), ``capacity`` left."""
        state = cls(ensemble_size, write_quorum, [None] * ensemble_size, dict(capacity))
        for position, cell in enumerate(fixed):
            if cell is None:
                state.open_positions += 1
            else:
                state.assignment[position] = cell
                state.cell_counts[cell] = state.cell_counts.get(cell, 0) + 1
                state.domain_counts[cell.domain] = state.domain_counts.get(cell.domain, 0) + 1
        return state

    def place(self, position: int, cell: Cell) -> None:
        self.assignment[position] = cell
        self.capacity[cell] -= 1
        self.cell_counts[cell] = self.cell_counts.get(cell, 0) + 1
        self.domain_counts[cell.domain] = self.domain_counts.get(cell.domain, 0) + 1
        self.open_positions -= 1

    def unplace(self, position: int, cell: Cell) -> None:
        self.assignment[position] = None
        self.capacity[cell] += 1
        self.cell_counts[cell] -= 1
        self.domain_counts[cell.domain] -= 1
        self.open_positions += 1

    def window(self, positions: Sequence[int]) -> list[Cell | None]:
        return [self.assignment[p] for p in positions]


class SearchBudgetExceeded(RuntimeError):
    """The search tried more placements than its budget allows."""


def window_starts(ensemble_size: int, write_quorum: int) -> range:
    """Start positions of the distinct write quorums (one when Qw == E)."""
    return range(1) if write_quorum >= ensemble_size else range(ensemble_size)


@functools.lru_cache(maxsize=4096)
def windows_containing(
    ensemble_size: int, write_quorum: int, position: int
) -> tuple[tuple[int, ...], ...]:
    """The write quorums (as position tuples) that contain ``position``."""
    if write_quorum >= ensemble_size:
        return (tuple(range(ensemble_size)),)
    return tuple(
        tuple((start + i) % ensemble_size for i in range(write_quorum))
        for start in (
            (position - offset) % ensemble_size for offset in range(write_quorum - 1, -1, -1)
        )
    )


Order = Callable[[SearchState, int], Iterable[Cell]]
SymmetryKey = Callable[[SearchState, Cell], Hashable]


def assign_cells(
    ensemble_size: int,
    write_quorum: int,
    fixed: Sequence[Cell | None],
    capacity: Mapping[Cell, int],
    rules: Sequence[WindowRule],
    order: Order,
    symmetry_key: SymmetryKey | None = None,
    budget: int = DEFAULT_SEARCH_BUDGET,
) -> list[Cell] | None:
    """A cell for every position that ``fixed`` leaves None, such that every write quorum
    touching an open position satisfies every rule; None if there is no such assignment.

    ``capacity`` is how many more bookies each cell can supply; ``order`` yields the cells to
    try at a position, best first (cells without capacity left are skipped; the first
    feasible one is taken, so the order carries the preferences);
    ``symmetry_key`` maps cells the rules cannot tell apart to one key (only the first of them
    is tried). Raises SearchBudgetExceeded after ``budget`` placements.
    """
    state = SearchState.start(ensemble_size, write_quorum, fixed, capacity)
    open_positions = [p for p in range(ensemble_size) if fixed[p] is None]
    if sum(state.capacity.values()) < len(open_positions):
        return None
    if not all(rule.possible(ensemble_size, write_quorum, fixed, capacity) for rule in rules):
        return None
    key_of: SymmetryKey = symmetry_key if symmetry_key is not None else (lambda _s, c: c)
    search = _DepthFirst(state, open_positions, rules, order, key_of, budget)
    if not search.fill(0):
        return None
    out: list[Cell] = []
    for cell in state.assignment:
        assert cell is not None
        out.append(cell)
    return out


class _DepthFirst:
    """The search of ``assign_cells``: the open positions filled in turn, each with the first
    cell of its order that keeps every rule feasible in every write quorum through it,
    backtracking when none does; a cell alike (by symmetry key) to one that failed at a
    position is not tried there again. Raises SearchBudgetExceeded after ``budget`` tries."""

    def __init__(
        self,
        state: SearchState,
        open_positions: Sequence[int],
        rules: Sequence[WindowRule],
        order: Order,
        key_of: SymmetryKey,
        budget: int,
    ) -> None:
        self.state = state
        self.open_positions = open_positions
        self.rules = rules
        self.order = order
        self.key_of = key_of
        self.budget = budget
        self.windows = {
            p: windows_containing(state.ensemble_size, state.write_quorum, p)
            for p in open_positions
        }
        self.tries = 0

    def fill(self, index: int) -> bool:
        """Fills the open positions from ``index`` on; False when they cannot be filled."""
        if index == len(self.open_positions):
            return True
        state = self.state
        position = self.open_positions[index]
        failed: set[Hashable] = set()
        for cell in self.order(state, position):
            if state.capacity.get(cell, 0) <= 0:
                continue
            if failed and self.key_of(state, cell) in failed:
                continue  # like a cell that already failed here
            self.tries += 1
            if self.tries > self.budget:
                raise SearchBudgetExceeded(f"more than {self.budget} placements tried")
            state.place(position, cell)
            if self._feasible(position) and self.fill(index + 1):
                return True
            state.unplace(position, cell)
            failed.add(self.key_of(state, cell))  # keys are only needed once something failed
        return False

    def _feasible(self, position: int) -> bool:
        """Whether every rule can still hold in every write quorum through ``position``."""
        return all(
            rule.feasible(self.state.window(window))
            for window in self.windows[position]
            for rule in self.rules
        )


def disk_weights(
    bookies: Iterable[str], info: Mapping[str, BookieInfo], max_multiple: int
) -> dict[str, float]:
    """Placement weights from free disk space, as BookKeeper computes them: a bookie's free
    space; the smallest non-zero value for bookies reporting none; capped at ``max_multiple``
    times the median (no cap when ``max_multiple`` <= 0); all 1.0 when nobody reports space."""
    names = list(bookies)
    raw = {b: max(0, info[b].weight) if b in info else 0 for b in names}
    values = sorted(raw.values())
    total = sum(values)
    if total == 0:
        return dict.fromkeys(names, 1.0)
    smallest = min(v for v in values if v > 0)
    mid = len(values) // 2
    median = values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2
    cap = max_multiple * median if max_multiple > 0 else 0.0
    weights: dict[str, float] = {}
    for bookie, value in raw.items():
        weight = float(value if value > 0 else smallest)
        if cap > 0 and weight > cap:
            weight = cap
        weights[bookie] = weight
    return weights


def pick_bookies(
    candidates: Sequence[str],
    count: int,
    weights: Mapping[str, float] | None,
    rng: random.Random,
) -> list[str]:
    """``count`` distinct bookies of ``candidates``: uniformly at random, or with probability
    proportional to ``weights`` (sampling without replacement). Raises ValueError when there
    are fewer than ``count``."""
    if count > len(candidates):
        raise ValueError(f"need {count} bookies, only {len(candidates)} candidates")
    if count == 0:
        return []
    if weights is None:
        return rng.sample(list(candidates), count)
    keyed = ((rng.expovariate(max(weights.get(b, 1.0), 1e-12)), b) for b in candidates)
    return [b for _, b in heapq.nsmallest(count, keyed)]
