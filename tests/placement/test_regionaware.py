"""The region-aware policy: equal shares per region, durability across regions, runtime
features, real adherence verdicts (BK#1898) and local-region-first reads."""

from __future__ import annotations

from collections import Counter

import pytest
from placement_helpers import bookie, cluster, make_policy

from pybkx import errors
from pybkx.placement import (
    FAIL,
    MEETS_SOFT,
    MEETS_STRICT,
    PlacementStats,
    RegionAwareEnsemblePlacementPolicy,
    SettableFeatureProvider,
    StaticBookiesHealthInfo,
    StaticDNSToSwitchMapping,
)

# 3 regions x 2 racks x 2 bookies: bookie n is in region n // 4 + 1, rack n // 2 % 2 + 1.
THREE = cluster(f"/R{n // 4 + 1}/rack{n // 2 % 2 + 1}" for n in range(12))
LOCAL = "10.200.0.1"


def region(locations: dict[str, str], b: str) -> str:
    return locations[b].split("/")[1]


def local_policy(
    locations: dict[str, str], local_region: str, **conf: object
) -> RegionAwareEnsemblePlacementPolicy:
    mapping = StaticDNSToSwitchMapping({**locations, LOCAL: f"/{local_region}/rack1"})
    policy = RegionAwareEnsemblePlacementPolicy()
    policy.initialize(conf, mapping, local_node=LOCAL)
    policy.on_cluster_changed(list(locations), [])
    return policy


def test_ensemble_is_shared_equally_between_regions() -> None:
    policy = make_policy(RegionAwareEnsemblePlacementPolicy, THREE)
    for _ in range(30):
        result = policy.new_ensemble(6, 3, 2, None, set())
        assert Counter(region(THREE, b) for b in result.result) == {"R1": 2, "R2": 2, "R3": 2}
        assert result.adherence == MEETS_STRICT


def test_the_local_region_comes_first_and_takes_the_larger_share() -> None:
    policy = local_policy(THREE, "R2")
    for _ in range(30):
        result = policy.new_ensemble(5, 2, 2, None, set())
        assert region(THREE, result.result[0]) == "R2"
        assert Counter(region(THREE, b) for b in result.result)["R2"] == 2
        assert result.adherence == MEETS_STRICT


def test_remainders_rotate_between_the_other_regions() -> None:
    policy = make_policy(RegionAwareEnsemblePlacementPolicy, THREE)
    extra: Counter[str] = Counter()
    for _ in range(30):
        counts = Counter(region(THREE, b) for b in policy.new_ensemble(4, 2, 2, None, set()).result)
        extra.update(r for r, n in counts.items() if n == 2)
    assert set(extra) == {"R1", "R2", "R3"}


def test_a_region_short_of_bookies_gives_its_share_to_the_others() -> None:
    locations = cluster(["/R1/a", "/R2/a", "/R2/b", "/R2/c", "/R3/a", "/R3/b", "/R3/c"])
    policy = make_policy(RegionAwareEnsemblePlacementPolicy, locations)
    counts = Counter(region(locations, b) for b in policy.new_ensemble(6, 3, 2, None, set()).result)
    assert counts == {"R1": 1, "R2": 3, "R3": 2} or counts == {"R1": 1, "R2": 2, "R3": 3}


def test_declared_regions_enforce_durability_in_every_write_quorum() -> None:
    conf = {"reppRegionsToWrite": "R1;R2;R3", "reppMinimumRegionsForDurability": "2"}
    two = {b: loc for b, loc in THREE.items() if not loc.startswith("/R3")}
    policy = make_policy(RegionAwareEnsemblePlacementPolicy, two, conf)
    for _ in range(30):
        result = policy.new_ensemble(4, 3, 3, None, set())
        assert result.adherence == MEETS_STRICT
        ensemble = result.result
        for start in range(4):
            quorum = [ensemble[(start + j) % 4] for j in range(3)]
            assert max(Counter(region(two, b) for b in quorum).values()) <= 2


def test_durability_rejects_quorums_that_cannot_meet_it() -> None:
    conf = {"reppRegionsToWrite": "R1;R2;R3"}
    policy = make_policy(RegionAwareEnsemblePlacementPolicy, THREE, conf)
    with pytest.raises(errors.IncorrectParameterException):
        policy.new_ensemble(3, 3, 2, None, set())  # Qa must exceed Qw - Qw // 2 = 2
    with pytest.raises(errors.IncorrectParameterException):
        policy.new_ensemble(3, 1, 1, None, set())  # Qa below the 2 regions


def test_durability_needs_the_regions_to_exist() -> None:
    conf = {"reppRegionsToWrite": "R1;R2"}
    only_r1 = {b: loc for b, loc in THREE.items() if loc.startswith("/R1")}
    policy = make_policy(RegionAwareEnsemblePlacementPolicy, only_r1, conf)
    with pytest.raises(errors.NotEnoughBookiesException):
        policy.new_ensemble(3, 3, 3, None, set())


def test_a_feature_relaxes_durability_at_runtime() -> None:
    conf = {"reppRegionsToWrite": "R1;R2"}
    only_r1 = {b: loc for b, loc in THREE.items() if loc.startswith("/R1")}
    features = SettableFeatureProvider()
    policy = make_policy(
        RegionAwareEnsemblePlacementPolicy, only_r1, conf, feature_provider=features
    )
    features.set("repp_disable_durability_enforcement", True)
    result = policy.new_ensemble(3, 3, 3, None, set())
    assert {region(only_r1, b) for b in result.result} == {"R1"}
    features.set("repp_disable_durability_enforcement", False)
    assert policy.is_ensemble_adhering_to_placement_policy(result.result, 3, 3) == FAIL


def test_a_feature_disallows_a_region_at_runtime() -> None:
    features = SettableFeatureProvider()
    conf = {"reppDisallowBookiePlacementInRegionFeatureName": "disallow"}
    policy = make_policy(RegionAwareEnsemblePlacementPolicy, THREE, conf, feature_provider=features)
    features.scope("R2").get_feature("disallow").set(True)
    for _ in range(20):
        ensemble = policy.new_ensemble(4, 2, 2, None, set()).result
        assert "R2" not in {region(THREE, b) for b in ensemble}
    assert policy.available_regions() == ["/R1", "/R3"]
    features.set("R2.disallow", False)
    seen = set()
    for _ in range(20):
        seen |= {region(THREE, b) for b in policy.new_ensemble(4, 2, 2, None, set()).result}
    assert "R2" in seen


def test_adherence_is_really_checked() -> None:
    """BK#1898: BookKeeper's region-aware policy calls every ensemble MEETS_STRICT."""
    policy = make_policy(RegionAwareEnsemblePlacementPolicy, THREE)
    same_region = [bookie(0), bookie(2), bookie(1)]  # R1 rack1, R1 rack2, R1 rack1
    assert policy.is_ensemble_adhering_to_placement_policy(same_region, 3, 2) == MEETS_SOFT
    assert policy.is_ensemble_adhering_to_placement_policy(same_region[:2], 2, 2) == MEETS_SOFT
    assert policy.is_ensemble_adhering_to_placement_policy([bookie(0), bookie(1)], 2, 2) == FAIL
    spread = [bookie(0), bookie(4), bookie(8)]
    assert policy.is_ensemble_adhering_to_placement_policy(spread, 3, 2) == MEETS_STRICT
    durable = make_policy(
        RegionAwareEnsemblePlacementPolicy, THREE, {"reppRegionsToWrite": "R1;R2"}
    )
    assert durable.is_ensemble_adhering_to_placement_policy(same_region, 3, 3) == FAIL
    assert durable.is_ensemble_adhering_to_placement_policy(
        [bookie(0), bookie(2), bookie(4)], 3, 3
    ) in (MEETS_SOFT, MEETS_STRICT)


def test_acked_bookies_must_reach_the_durability_regions() -> None:
    durable = make_policy(
        RegionAwareEnsemblePlacementPolicy, THREE, {"reppRegionsToWrite": "R1;R2"}
    )
    assert not durable.are_acked_bookies_adhering_to_placement_policy([bookie(0), bookie(2)], 3, 2)
    assert durable.are_acked_bookies_adhering_to_placement_policy([bookie(0), bookie(4)], 3, 2)


def test_unknown_regions_never_count_for_durability() -> None:
    locations = {**THREE, bookie(50): "/default-region/default-rack"}
    conf = {"reppRegionsToWrite": "R1;R2"}
    policy = make_policy(RegionAwareEnsemblePlacementPolicy, locations, conf)
    for _ in range(30):
        assert bookie(50) not in policy.new_ensemble(4, 3, 3, None, set()).result


def test_locations_without_a_region_go_to_the_default_region() -> None:
    stats = PlacementStats()
    locations = {**THREE, bookie(60): "/rack-only"}
    policy = make_policy(RegionAwareEnsemblePlacementPolicy, locations, stats=stats)
    assert policy.network_location(bookie(60)) == "/default-region/default-rack"
    assert stats.get("failed_to_resolve_network_location_count") == 1


def test_replacement_stays_in_the_rack_then_the_region() -> None:
    policy = make_policy(RegionAwareEnsemblePlacementPolicy, THREE)
    ensemble = [bookie(0), bookie(4), bookie(8)]
    assert (
        THREE[policy.replace_bookie(3, 3, 2, None, ensemble, bookie(4), set()).result]
        == (THREE[bookie(4)])
    )
    result = policy.replace_bookie(3, 3, 2, None, ensemble, bookie(4), {bookie(5)})
    assert region(THREE, result.result) == "R2"
    assert result.adherence == MEETS_STRICT


def test_reads_go_local_first_with_a_remote_bookie_after_every_two_local() -> None:
    locations = cluster(["/R1/a", "/R1/b", "/R1/c", "/R1/d", "/R1/e", "/R2/a", "/R3/a"])
    policy = local_policy(locations, "R1")
    ensemble = [bookie(5), bookie(0), bookie(6), bookie(1), bookie(2), bookie(3), bookie(4)]
    order = policy.reorder_read_sequence(ensemble, None, list(range(7)))
    regions = [region(locations, ensemble[i]) for i in order]
    assert regions == ["R1", "R1", "R2", "R1", "R1", "R3", "R1"]
    assert sorted(order) == list(range(7))


def test_reads_fall_back_to_rack_order_when_the_local_region_is_unknown() -> None:
    locations = cluster(["/R2/a", "/R1/a", "/R1/b"])
    policy = make_policy(RegionAwareEnsemblePlacementPolicy, locations)
    assert policy.reorder_read_sequence(list(locations), None, [0, 1, 2]) == [0, 1, 2]


def test_failed_local_bookies_still_precede_remote_ones() -> None:
    locations = cluster(["/R2/a", "/R1/a", "/R1/b"])
    policy = local_policy(locations, "R1")
    health = StaticBookiesHealthInfo({bookie(1): 7}, {})
    assert policy.reorder_read_sequence(list(locations), health, [0, 1, 2]) == [2, 1, 0]
