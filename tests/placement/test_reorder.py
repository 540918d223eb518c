"""Read ordering classes, slow bookies, pending-request threshold and random reordering."""

from __future__ import annotations

import random

from placement_helpers import bookie

from pybkx.placement import SlowBookies, StaticBookiesHealthInfo, reorder_read_sequence

E = [bookie(n) for n in range(6)]


def order(write_set: list[int], **kwargs: object) -> list[int]:
    options: dict[str, object] = {
        "writable": set(E[:4]),
        "readonly": {E[4]},
        "slow": SlowBookies(60_000),
        "health": None,
    }
    options.update(kwargs)
    return reorder_read_sequence(E, write_set, **options)  # type: ignore[arg-type]


def test_healthy_write_sets_keep_their_order() -> None:
    assert order([2, 0, 1]) == [2, 0, 1]


def test_classes_go_writable_failed_readonly_slow_gone() -> None:
    slow = SlowBookies(60_000)
    slow.register(E[3], 12)
    health = StaticBookiesHealthInfo({E[1]: 5}, {})
    assert order([5, 4, 3, 1, 0], slow=slow, health=health) == [0, 1, 4, 3, 5]


def test_slow_marks_expire() -> None:
    now = [100.0]
    slow = SlowBookies(1_000, clock=lambda: now[0])
    slow.register(E[0], 1)
    assert order([0, 1], slow=slow) == [1, 0]
    now[0] += 2
    assert order([0, 1], slow=slow) == [0, 1]


def test_slow_readonly_and_slow_writable_sort_by_pending_requests() -> None:
    slow = SlowBookies(60_000)
    for b in (E[0], E[1], E[4]):
        slow.register(b, 1)
    health = StaticBookiesHealthInfo({}, {E[0]: 9, E[1]: 3, E[4]: 5})
    assert order([0, 1, 4, 2], slow=slow, health=health) == [2, 1, 4, 0]


def test_pending_threshold_moves_the_least_loaded_bookie_first() -> None:
    health = StaticBookiesHealthInfo({}, {E[0]: 20, E[1]: 15, E[2]: 2})
    assert order([0, 1, 2], health=health, threshold_pending=10) == [2, 0, 1]
    assert order([0, 1, 2], health=health, threshold_pending=30) == [0, 1, 2]


def test_random_reordering_shuffles_within_a_class_only() -> None:
    results = {
        tuple(order([5, 0, 1, 2, 4], randomize=True, rng=random.Random(seed))) for seed in range(30)
    }
    assert len(results) > 1
    for result in results:
        assert set(result[:3]) == {0, 1, 2} and result[3:] == (4, 5)
