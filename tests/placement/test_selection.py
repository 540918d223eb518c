"""The search's building blocks, checked exhaustively on small inputs: partial-window rules
never reject a window that can still be completed, the counting pre-check never rejects a
possible placement, and weights follow BookKeeper's disk-space model."""

from __future__ import annotations

import itertools
import random

import pytest

from pybkx.placement import BookieInfo
from pybkx.placement.selection import (
    Cell,
    Durability,
    MinDomains,
    MinLocations,
    SearchBudgetExceeded,
    WindowRule,
    ZoneSpread,
    assign_cells,
    disk_weights,
    pick_bookies,
    spread_possible,
)

CELLS = [Cell.of(loc) for loc in ("/a/x", "/a/y", "/b/x", "/b/y", "/c/x", "/default/d")]
RULES: list[WindowRule] = [
    MinLocations(2),
    MinLocations(3),
    MinDomains(2),
    MinDomains(3),
    Durability(2, 2, frozenset({"/a", "/b", "/c"})),
    Durability(2, 3, frozenset({"/a", "/b"})),
    Durability(3, 3, frozenset({"/a", "/b", "/c"})),
    ZoneSpread(2, "/default/d"),
    ZoneSpread(3),
]


def _domains_of(rule: WindowRule) -> list[Cell]:
    if isinstance(rule, Durability):
        return [c for c in CELLS if c.domain in rule.domains]
    return CELLS


@pytest.mark.parametrize("rule", RULES, ids=repr)
def test_partial_windows_are_rejected_only_when_no_completion_exists(rule: WindowRule) -> None:
    usable = _domains_of(rule)
    for size in (2, 3, 4):
        for window in itertools.product([None, *CELLS], repeat=size):
            open_positions = [i for i, c in enumerate(window) if c is None]
            completions = itertools.product(usable, repeat=len(open_positions))
            completable = False
            for filling in completions:
                full = list(window)
                for position, cell in zip(open_positions, filling, strict=True):
                    full[position] = cell
                if rule.feasible(full):
                    completable = True
                    break
            if completable:
                assert rule.feasible(window), (rule, window)


def _exists(ensemble: int, quorum: int, need: int, capacity: dict[str, int]) -> bool:
    symbols = sorted(capacity)
    for sequence in itertools.product(symbols, repeat=ensemble):
        if any(sequence.count(s) > capacity[s] for s in symbols):
            continue
        windows = [{sequence[(i + j) % ensemble] for j in range(quorum)} for i in range(ensemble)]
        if all(len(w) >= need for w in windows):
            return True
    return False


def test_the_counting_bound_never_rejects_a_possible_sequence() -> None:
    rnd = random.Random(5)
    checked = 0
    for _ in range(400):
        ensemble = rnd.randint(1, 7)
        quorum = rnd.randint(1, ensemble)
        need = rnd.randint(1, quorum)
        capacity = {s: rnd.randint(0, 4) for s in "abcd"[: rnd.randint(1, 4)]}
        if not spread_possible(ensemble, quorum, need, {}, capacity):
            assert not _exists(ensemble, quorum, need, capacity), (
                ensemble,
                quorum,
                need,
                capacity,
            )
            checked += 1
    assert checked > 20  # the bound does reject things


def test_the_counting_bound_rejects_the_cyclic_impossibilities() -> None:
    five = dict.fromkeys("abcde", 100)
    assert not spread_possible(9, 8, 5, {}, five)  # each region twice: 10 > 9 positions
    assert spread_possible(10, 6, 5, {}, five)  # abcdeabcde
    assert not spread_possible(8, 3, 3, {}, dict.fromkeys("abc", 100))  # needs period 3


def test_search_finds_an_assignment_when_one_exists() -> None:
    cells = [Cell.of("/r1"), Cell.of("/r2")]

    def order(state: object, position: int) -> list[Cell]:
        return cells

    found = assign_cells(4, 2, [None] * 4, dict.fromkeys(cells, 2), [MinLocations(2)], order)
    assert found is not None
    assert all(found[i] != found[(i + 1) % 4] for i in range(4))
    assert assign_cells(3, 2, [None] * 3, dict.fromkeys(cells, 3), [MinLocations(2)], order) is None


def test_disk_weights_follow_bookkeepers_model() -> None:
    info = {"a": BookieInfo(0, 100), "b": BookieInfo(0, 10), "c": BookieInfo(0, 0)}
    weights = disk_weights(["a", "b", "c", "d"], info, max_multiple=3)
    # median of (0, 0, 10, 100) is 5: cap 15; zero-space bookies get the smallest weight, 10
    assert weights == {"a": 15.0, "b": 10.0, "c": 10.0, "d": 10.0}
    assert disk_weights(["a", "b"], {}, 3) == {"a": 1.0, "b": 1.0}


def test_weighted_picks_are_distinct_and_prefer_heavy_bookies() -> None:
    rnd = random.Random(1)
    first = [pick_bookies(["a", "b"], 1, {"a": 9.0, "b": 1.0}, rnd)[0] for _ in range(2000)]
    assert 0.85 < first.count("a") / 2000 < 0.95
    both = pick_bookies(["a", "b", "c"], 3, {"a": 1.0, "b": 1.0, "c": 1.0}, rnd)
    assert sorted(both) == ["a", "b", "c"]
    with pytest.raises(ValueError):
        pick_bookies(["a"], 2, None, rnd)


def test_the_search_budget_bounds_the_work() -> None:
    cells = [Cell.of(f"/r{n}") for n in range(3)]

    def order(state: object, position: int) -> list[Cell]:
        return cells

    # Five positions over three racks of two, neighbours on different racks: solvable, but it
    # takes six placements (one rejected), more than a budget of two allows.
    with pytest.raises(SearchBudgetExceeded):
        assign_cells(5, 2, [None] * 5, dict.fromkeys(cells, 2), [MinLocations(2)], order, budget=2)
