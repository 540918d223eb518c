"""The zone-aware policy: desired and minimum zones per write quorum, upgrade domains, strict
placement's parameter rules, and adherence as BookKeeper defines it."""

from __future__ import annotations

import pytest
from placement_helpers import bookie, cluster, make_policy

from pybkx import errors
from pybkx.config import ConfigError
from pybkx.placement import (
    FAIL,
    MEETS_SOFT,
    MEETS_STRICT,
    ZoneawareEnsemblePlacementPolicy,
)

# 4 zones x 2 upgrade domains x 2 bookies: bookie n in zone n // 4, ud n // 2 % 2.
FOUR = cluster(f"/z{n // 4}/ud{n // 2 % 2}" for n in range(16))


def zones(locations: dict[str, str], bookies: list[str]) -> list[str]:
    return [locations[b].split("/")[1] for b in bookies]


def test_write_quorums_span_the_desired_zones() -> None:
    policy = make_policy(ZoneawareEnsemblePlacementPolicy, FOUR)
    for _ in range(30):
        result = policy.new_ensemble(6, 3, 2, None, set())
        assert result.adherence == MEETS_STRICT
        ensemble = result.result
        for start in range(6):
            quorum = [ensemble[(start + j) % 6] for j in range(3)]
            assert len(set(zones(FOUR, quorum))) == 3


def test_strict_placement_rejects_sizes_it_cannot_keep() -> None:
    policy = make_policy(ZoneawareEnsemblePlacementPolicy, FOUR)
    with pytest.raises(errors.IncorrectParameterException):
        policy.new_ensemble(5, 3, 2, None, set())  # E not a multiple of Qw
    with pytest.raises(errors.IncorrectParameterException):
        policy.new_ensemble(4, 2, 2, None, set())  # Qw <= minNumZonesPerWriteQuorum


def test_two_zones_meet_the_minimum_with_distinct_upgrade_domains() -> None:
    two = {b: loc for b, loc in FOUR.items() if loc.startswith(("/z0", "/z1"))}
    policy = make_policy(ZoneawareEnsemblePlacementPolicy, two)
    for _ in range(30):
        result = policy.new_ensemble(3, 3, 2, None, set())
        assert result.adherence == MEETS_SOFT
        locations = [two[b] for b in result.result]
        zone_of = [loc.split("/")[1] for loc in locations]
        doubled = next(z for z in zone_of if zone_of.count(z) == 2)
        assert len({loc for loc in locations if loc.split("/")[1] == doubled}) == 2


def test_one_zone_is_not_enough_under_strict_placement() -> None:
    one = {b: loc for b, loc in FOUR.items() if loc.startswith("/z0")}
    policy = make_policy(ZoneawareEnsemblePlacementPolicy, one)
    with pytest.raises(errors.NotEnoughBookiesException):
        policy.new_ensemble(3, 3, 2, None, set())
    loose = make_policy(
        ZoneawareEnsemblePlacementPolicy, one, {"enforceStrictZoneawarePlacement": False}
    )
    result = loose.new_ensemble(3, 3, 2, None, set())
    assert result.adherence == FAIL and len(set(result.result)) == 3


def test_the_default_fault_domain_is_never_used_under_strict_placement() -> None:
    locations = {**FOUR, bookie(90): "/default-zone/default-upgradedomain"}
    policy = make_policy(ZoneawareEnsemblePlacementPolicy, locations)
    for _ in range(30):
        assert bookie(90) not in policy.new_ensemble(6, 3, 2, None, set()).result
    assert (
        policy.is_ensemble_adhering_to_placement_policy([bookie(0), bookie(4), bookie(90)], 3, 2)
        == FAIL
    )


def test_locations_must_have_exactly_two_levels() -> None:
    locations = {**FOUR, bookie(91): "/z9/ud1/extra", bookie(92): "/z9"}
    policy = make_policy(ZoneawareEnsemblePlacementPolicy, locations)
    assert policy.network_location(bookie(91)) == "/default-zone/default-upgradedomain"
    assert policy.network_location(bookie(92)) == "/default-zone/default-upgradedomain"


def test_adherence_follows_bookkeepers_zone_rules() -> None:
    policy = make_policy(ZoneawareEnsemblePlacementPolicy, FOUR)
    z0u0, z0u0b, z0u1 = bookie(0), bookie(1), bookie(2)
    z1, z2, z3 = bookie(4), bookie(8), bookie(12)
    check = policy.is_ensemble_adhering_to_placement_policy
    assert check([z0u0, z1, z2], 3, 2) == MEETS_STRICT
    assert check([z0u0, z0u1, z1], 3, 2) == MEETS_SOFT  # two zones, two upgrade domains
    assert check([z0u0, z0u0b, z1], 3, 2) == FAIL  # one zone twice on one upgrade domain
    assert check([z0u0, z1, z2, z3], 3, 2) == FAIL  # E not a multiple of Qw
    assert check([z0u0, z1], 2, 2) == FAIL  # Qw <= minNumZones


def test_acked_bookies_need_the_minimum_zones_and_the_ack_quorum() -> None:
    policy = make_policy(ZoneawareEnsemblePlacementPolicy, FOUR)
    assert policy.are_acked_bookies_adhering_to_placement_policy([bookie(0), bookie(4)], 3, 2)
    assert not policy.are_acked_bookies_adhering_to_placement_policy([bookie(0), bookie(2)], 3, 2)
    assert not policy.are_acked_bookies_adhering_to_placement_policy([bookie(0)], 3, 2)


def test_replacement_restores_the_zone_spread() -> None:
    policy = make_policy(ZoneawareEnsemblePlacementPolicy, FOUR)
    ensemble = [bookie(0), bookie(4), bookie(8)]
    result = policy.replace_bookie(3, 3, 2, None, ensemble, bookie(8), set())
    assert zones(FOUR, [result.result])[0] in {"z2", "z3"}
    assert result.adherence == MEETS_STRICT


def test_relocation_fixes_upgrade_domains_with_one_change() -> None:
    policy = make_policy(ZoneawareEnsemblePlacementPolicy, FOUR)
    current = [bookie(0), bookie(1), bookie(4)]  # z0/ud0 twice: FAIL
    result = policy.replace_to_adhere_placement_policy(3, 3, 2, set(), current)
    assert result.adherence == MEETS_STRICT
    assert sum(a != b for a, b in zip(result.result, current, strict=True)) == 1


def test_minimum_zones_cannot_exceed_the_desired_zones() -> None:
    with pytest.raises(ConfigError):
        ZoneawareEnsemblePlacementPolicy().initialize(
            {"minNumZonesPerWriteQuorum": 4, "desiredNumZonesPerWriteQuorum": 3}
        )
