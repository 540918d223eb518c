"""The candidate locations of a placement search, in the order one position tries them: the
cluster's writable bookies by location, grouped (by domain when domains rank locations) with
their weights, and per position the policy's rank first, ties drawn at random in proportion to
weight. It never judges a placement (the rules do) and never reads configuration or the
cluster (the policy hands both in).
"""

from __future__ import annotations

import bisect
import itertools
import random
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from pybkx.placement.selection import Cell, SearchState

__all__ = ["CandidateIndex", "CandidateOrder", "CellKey", "DomainKey", "PlacementHint"]


@dataclass(frozen=True)
class PlacementHint:
    """Preferences for one search: ``local`` is the client's location (preferred for the first
    position of a new ensemble), ``replaced`` the location of the bookie being replaced."""

    first_position: int | None = None
    local: Cell | None = None
    replaced: Cell | None = None


CellKey = Callable[
    [SearchState, int, Cell | None, PlacementHint], tuple[tuple[int, ...], tuple[int, ...]]
]
"""The policy's rank of a cell for a position, as (before-domain, after-domain) parts; None
stands for any location unused so far and not in the hint."""

DomainKey = Callable[[SearchState, int, str, PlacementHint], tuple[int, ...]]
"""The policy's rank of a domain's locations for a position."""


@dataclass
class _Group:
    """Candidate locations ranked alike unless special: weights and their running sums."""

    cells: list[Cell]
    weights: list[float]
    cumulative: list[float]


@dataclass
class CandidateIndex:
    """The current cluster's bookies by location, how many each location holds, its locations
    by domain, and the locations grouped for drawing (one group per domain when domains rank
    locations, else one)."""

    pool: dict[Cell, tuple[str, ...]]
    capacity: dict[Cell, int]
    by_domain: dict[str, list[Cell]]
    groups: dict[str, _Group]

    @classmethod
    def of(
        cls,
        pool: dict[Cell, tuple[str, ...]],
        weights: Mapping[str, float] | None,
        group_by_domain: bool,
    ) -> CandidateIndex:
        """The index of ``pool``; a location weighs the sum of its bookies' ``weights`` (None:
        how many bookies it holds)."""
        by_domain: dict[str, list[Cell]] = {}
        for cell in pool:
            by_domain.setdefault(cell.domain, []).append(cell)
        members = by_domain if group_by_domain else {"": list(pool)}
        groups: dict[str, _Group] = {}
        for domain, cells in members.items():
            cell_weights = [
                (sum(weights.get(b, 1.0) for b in pool[c]) if weights else float(len(pool[c])))
                for c in cells
            ]
            groups[domain] = _Group(cells, cell_weights, list(itertools.accumulate(cell_weights)))
        capacity = {cell: len(bookies) for cell, bookies in pool.items()}
        return cls(pool, capacity, by_domain, groups)


class CandidateOrder:
    """The order a search tries locations in at one position (an ``Order`` of
    ``assign_cells``): the special locations (already used, the replaced bookie's, the client's
    for the first position) one by one, and every group of plain ones, ranked by the policy's
    (before-domain, domain, after-domain) key; equal keys in random order, and within a group
    of plain locations a draw by weight. ``domain_key`` None: domains do not rank locations."""

    def __init__(
        self,
        groups: Mapping[str, _Group],
        cell_key: CellKey,
        domain_key: DomainKey | None,
        hint: PlacementHint,
        rng: random.Random,
    ) -> None:
        self._groups = groups
        self._cell_key = cell_key
        self._domain_key = domain_key
        self._hint = hint
        self._rng = rng

    def __call__(self, state: SearchState, position: int) -> Iterator[Cell]:
        special = self._special(state, position)
        domain_keys: dict[str, tuple[int, ...]] = {}

        def domain_key(domain: str) -> tuple[int, ...]:
            if self._domain_key is None:
                return ()
            key = domain_keys.get(domain)
            if key is None:
                key = domain_keys[domain] = self._domain_key(state, position, domain, self._hint)
            return key

        rng = self._rng
        entries: list[tuple[Hashable, float, Cell | list[_Group]]] = []
        for cell in special:
            before, after = self._cell_key(state, position, cell, self._hint)
            entries.append(((before, domain_key(cell.domain), after), rng.random(), cell))
        before, after = self._cell_key(state, position, None, self._hint)
        plain: dict[Hashable, list[_Group]] = {}
        for domain, group in self._groups.items():
            plain.setdefault((before, domain_key(domain), after), []).append(group)
        for key, members in plain.items():
            entries.append((key, rng.random(), members))
        entries.sort(key=lambda entry: (entry[0], entry[1]))
        for _, _, item in entries:
            if isinstance(item, Cell):
                yield item
            else:
                yield from _weighted_order(item, special, state.capacity, rng)

    def _special(self, state: SearchState, position: int) -> set[Cell]:
        """The locations ranked one by one at ``position``: those used so far, the replaced
        bookie's and (for the first position) the client's, while they have bookies left."""
        special = {cell for cell, n in state.cell_counts.items() if n > 0}
        if self._hint.replaced is not None:
            special.add(self._hint.replaced)
        if self._hint.local is not None and position == self._hint.first_position:
            special.add(self._hint.local)
        return {cell for cell in special if state.capacity.get(cell, 0) > 0}


def _weighted_order(
    groups: Sequence[_Group], skip: set[Cell], capacity: Mapping[Cell, int], rng: random.Random
) -> Iterator[Cell]:
    """The cells of ``groups`` that have capacity and are not in ``skip``, in random order, each
    next one drawn with probability proportional to its weight among those left. The first
    draw is a few bisections; the full order is only computed if the caller asks for more."""
    total = sum(group.cumulative[-1] for group in groups if group.cumulative)
    first: Cell | None = None
    for _ in range(8 if total > 0 else 0):
        point = rng.random() * total
        for group in groups:
            if not group.cumulative:
                continue
            if point < group.cumulative[-1] or group is groups[-1]:
                index = min(bisect.bisect_right(group.cumulative, point), len(group.cells) - 1)
                cell = group.cells[index]
                if cell not in skip and capacity.get(cell, 0) > 0:
                    first = cell
                break
            point -= group.cumulative[-1]
        if first is not None:
            yield first
            break
    rest = [
        (rng.expovariate(max(weight, 1e-12)), n, cell)
        for group in groups
        for n, (cell, weight) in enumerate(zip(group.cells, group.weights, strict=True))
        if cell is not first and cell not in skip and capacity.get(cell, 0) > 0
    ]
    rest.sort(key=lambda item: (item[0], item[1]))
    for _, _, cell in rest:
        yield cell
