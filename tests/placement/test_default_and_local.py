"""The default (random, optionally disk-weighted) and local-bookie policies."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from placement_helpers import bookie

from pybkx import errors
from pybkx.placement import (
    FAIL,
    MEETS_STRICT,
    BookieInfo,
    DefaultEnsemblePlacementPolicy,
    LocalBookieEnsemblePlacementPolicy,
    StaticBookiesHealthInfo,
)

BOOKIES = [bookie(n) for n in range(6)]


def default_policy(**conf: object) -> DefaultEnsemblePlacementPolicy:
    policy = DefaultEnsemblePlacementPolicy().initialize(conf)
    policy.on_cluster_changed(BOOKIES[:5], [BOOKIES[5]])
    return policy


def test_default_policy_picks_distinct_writable_bookies_outside_exclusions() -> None:
    policy = default_policy()
    for _ in range(50):
        result = policy.new_ensemble(3, 2, 2, None, {BOOKIES[0]})
        assert result.adherence == MEETS_STRICT
        assert len(set(result.result)) == 3
        assert not set(result.result) & {BOOKIES[0], BOOKIES[5]}
    with pytest.raises(errors.NotEnoughBookiesException):
        policy.new_ensemble(5, 2, 2, None, {BOOKIES[0]})


def test_default_replacement_changes_one_bookie() -> None:
    policy = default_policy()
    ensemble = BOOKIES[:3]
    result = policy.replace_bookie(3, 2, 2, None, ensemble, BOOKIES[1], set())
    assert result.result in BOOKIES[3:5]
    with pytest.raises(errors.NotEnoughBookiesException):
        policy.replace_bookie(3, 2, 2, None, ensemble, BOOKIES[1], set(BOOKIES[3:5]))


def test_default_adherence_only_needs_distinct_bookies() -> None:
    policy = default_policy()
    assert policy.is_ensemble_adhering_to_placement_policy(BOOKIES[:3], 2, 2) == MEETS_STRICT
    assert policy.is_ensemble_adhering_to_placement_policy(BOOKIES[:1] * 2, 2, 2) == FAIL
    fixed = policy.replace_to_adhere_placement_policy(
        3, 2, 2, set(), [BOOKIES[0]] * 2 + [BOOKIES[1]]
    )
    assert fixed.adherence == MEETS_STRICT
    assert fixed.result[0] == BOOKIES[0] and fixed.result[2] == BOOKIES[1]
    assert fixed.result[1] not in (BOOKIES[0], BOOKIES[1])


def test_default_disk_weighting_caps_the_largest_bookies() -> None:
    policy = default_policy(diskWeightBasedPlacementEnabled=True)
    policy._rng = random.Random(3)
    policy.update_bookie_info(
        {b: BookieInfo(1000, 1000 if b == BOOKIES[0] else 10) for b in BOOKIES[:5]}
    )
    counts: Counter[str] = Counter()
    for _ in range(3000):
        counts.update(policy.new_ensemble(1, 1, 1, None, set()).result)
    # 1000 vs 10 free, but capped at 3x the median (10): about 30 / (30 + 4 * 10) = 43 %.
    assert 0.35 < counts[BOOKIES[0]] / 3000 < 0.52


def test_default_reads_avoid_unavailable_bookies() -> None:
    policy = default_policy()
    ensemble = [bookie(9), BOOKIES[5], BOOKIES[0]]  # gone, read-only, writable
    assert policy.reorder_read_sequence(ensemble, None, [0, 1, 2]) == [2, 1, 0]
    assert policy.reorder_read_lac_sequence(ensemble, None, [0, 1]) == [1, 0, 2]


def test_local_policy_places_only_the_local_bookie() -> None:
    policy = LocalBookieEnsemblePlacementPolicy().initialize({"bookieId": "bk-local:3181"})
    assert policy.new_ensemble(1, 1, 1, None, set()).result == ["bk-local:3181"]
    with pytest.raises(errors.IncorrectParameterException):
        policy.new_ensemble(2, 2, 2, None, set())
    with pytest.raises(errors.NotEnoughBookiesException):
        policy.new_ensemble(1, 1, 1, None, {"bk-local:3181"})
    with pytest.raises(errors.NotEnoughBookiesException):
        policy.replace_bookie(1, 1, 1, None, ["bk-local:3181"], "bk-local:3181", set())
    policy.on_cluster_changed(["other:3181"], [])
    with pytest.raises(errors.NotEnoughBookiesException):
        policy.new_ensemble(1, 1, 1, None, set())
    policy.on_cluster_changed(["bk-local:3181"], [])
    assert policy.is_ensemble_adhering_to_placement_policy(["bk-local:3181"], 1, 1) == MEETS_STRICT
    assert policy.is_ensemble_adhering_to_placement_policy(["other:3181"], 1, 1) == FAIL
    moved = policy.replace_to_adhere_placement_policy(1, 1, 1, set(), ["other:3181"])
    assert moved.result == ["bk-local:3181"]


def test_local_policy_derives_the_id_like_a_bookie() -> None:
    policy = LocalBookieEnsemblePlacementPolicy().initialize(
        {"advertisedAddress": "bookie-7.example", "bookiePort": "4181"}
    )
    assert policy.bookie_id == "bookie-7.example:4181"


def test_sticky_reads_start_anywhere_then_move_on() -> None:
    class Md:
        ensemble_size = 4

    policy = default_policy()
    assert 0 <= policy.get_sticky_read_bookie_index(Md()) < 4
    assert policy.get_sticky_read_bookie_index(Md(), 3) == 0
    assert policy.get_sticky_read_bookie_index(Md(), 1) == 2


def test_health_failures_order_reads_oldest_failure_first() -> None:
    policy = default_policy()
    health = StaticBookiesHealthInfo({BOOKIES[0]: 50, BOOKIES[1]: 10}, {})
    assert policy.reorder_read_sequence(BOOKIES[:3], health, [0, 1, 2]) == [2, 1, 0]
