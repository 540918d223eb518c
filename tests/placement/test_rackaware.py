"""The rack-aware policy: write quorums over several racks, enforcement, replacements,
relocation, adherence, and locations that change while the client runs."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import pytest
from placement_helpers import bookie, cluster, make_policy

from pybkx import errors
from pybkx.config import ConfigError
from pybkx.placement import (
    FAIL,
    MEETS_STRICT,
    BKNotEnoughBookiesException,
    BookieInfo,
    PlacementStats,
    RackawareEnsemblePlacementPolicy,
    StaticDNSToSwitchMapping,
)
from pybkx.placement.selection import windows_containing

RACKS3 = cluster(["/r1"] * 3 + ["/r2"] * 3 + ["/r3"] * 3)


def racks_of(locations: dict[str, str], ensemble: list[str]) -> list[str]:
    return [locations[b] for b in ensemble]


def quorum_racks(locations: dict[str, str], ensemble: list[str], wq: int) -> list[set[str]]:
    n = len(ensemble)
    return [{locations[ensemble[(s + j) % n]] for j in range(wq)} for s in range(n)]


def test_every_write_quorum_spans_two_racks() -> None:
    policy = make_policy(RackawareEnsemblePlacementPolicy, RACKS3)
    for _ in range(50):
        result = policy.new_ensemble(5, 3, 2, None, set())
        assert result.adherence == MEETS_STRICT
        assert len(set(result.result)) == 5
        assert all(len(r) >= 2 for r in quorum_racks(RACKS3, result.result, 3))


def test_ensemble_spreads_over_as_many_racks_as_it_can() -> None:
    """BK#3720: with r1={a,b}, r2={c}, r3={d}, E=Qw=3 must use three racks."""
    locations = cluster(["/r1", "/r1", "/r2", "/r3"])
    policy = make_policy(RackawareEnsemblePlacementPolicy, locations)
    for _ in range(50):
        ensemble = policy.new_ensemble(3, 3, 2, None, set()).result
        assert set(racks_of(locations, ensemble)) == {"/r1", "/r2", "/r3"}


def test_enforced_placement_succeeds_whenever_possible() -> None:
    """BK#3722: r1={1,2}, r2={3}, r3={4}, enforced; without bookie 4 an ensemble exists."""
    locations = cluster(["/r1", "/r1", "/r2", "/r3"])
    conf = {"enforceMinNumRacksPerWriteQuorum": "true", "minNumRacksPerWriteQuorum": "2"}
    policy = make_policy(RackawareEnsemblePlacementPolicy, locations, conf)
    for _ in range(100):
        result = policy.new_ensemble(3, 3, 2, None, {bookie(3)})
        assert result.adherence == MEETS_STRICT
        assert len(set(racks_of(locations, result.result))) == 2


def test_enforced_single_rack_cannot_form_an_ensemble() -> None:
    locations = cluster(["/r1"] * 4)
    conf = {"enforceMinNumRacksPerWriteQuorum": True}
    policy = make_policy(RackawareEnsemblePlacementPolicy, locations, conf)
    with pytest.raises(BKNotEnoughBookiesException):
        policy.new_ensemble(3, 2, 2, None, set())
    with pytest.raises(errors.NotEnoughBookiesException):  # the same class under both names
        policy.new_ensemble(3, 2, 2, None, set())
    assert policy.new_ensemble(2, 1, 1, None, set()).adherence == MEETS_STRICT


def test_without_enforcement_a_single_rack_still_gives_an_ensemble_marked_fail() -> None:
    locations = cluster(["/r1"] * 4)
    policy = make_policy(RackawareEnsemblePlacementPolicy, locations)
    result = policy.new_ensemble(3, 2, 2, None, set())
    assert result.adherence == FAIL
    assert len(set(result.result)) == 3


def test_enforcement_never_uses_the_default_rack() -> None:
    locations = cluster(["/r1", "/r2", "/default-rack", "/default-rack"])
    conf = {"enforceMinNumRacksPerWriteQuorum": "true"}
    policy = make_policy(RackawareEnsemblePlacementPolicy, locations, conf)
    for _ in range(30):
        ensemble = policy.new_ensemble(2, 2, 2, None, set()).result
        assert "/default-rack" not in racks_of(locations, ensemble)
    with pytest.raises(BKNotEnoughBookiesException):
        policy.new_ensemble(3, 2, 2, None, set())
    assert policy.is_ensemble_adhering_to_placement_policy([bookie(0), bookie(2)], 2, 2) == FAIL


def test_excluded_readonly_and_dead_bookies_are_never_chosen() -> None:
    policy = make_policy(
        RackawareEnsemblePlacementPolicy,
        RACKS3,
        writable=[bookie(n) for n in range(9) if n != 8],
        readonly=[bookie(7)],
    )
    dead = policy.on_cluster_changed([bookie(n) for n in range(7)], [bookie(7)])
    assert dead == set()  # bookie 7 turned read-only; bookie 8 never registered
    for _ in range(50):
        ensemble = policy.new_ensemble(4, 2, 2, None, {bookie(0), bookie(3)}).result
        assert not set(ensemble) & {bookie(0), bookie(3), bookie(7), bookie(8)}


def test_cluster_change_reports_bookies_that_are_gone() -> None:
    policy = make_policy(RackawareEnsemblePlacementPolicy, RACKS3, writable=[bookie(0), bookie(1)])
    assert policy.on_cluster_changed([bookie(0)], [bookie(1)]) == set()  # read-only: not dead
    assert policy.on_cluster_changed([bookie(0)], []) == {bookie(1)}
    assert policy.on_cluster_changed([], []) == {bookie(0)}


def test_mixed_location_depths_are_all_usable() -> None:
    """BK#2490: a bookie without rack information next to /region/rack bookies still counts."""
    locations = cluster(["/region1/rack1", "/region1/rack2", "/default-rack"])
    policy = make_policy(RackawareEnsemblePlacementPolicy, locations)
    seen: set[str] = set()
    for _ in range(40):
        seen |= set(policy.new_ensemble(2, 2, 2, None, set()).result)
    assert seen == set(locations)


def test_rack_changes_apply_without_a_restart() -> None:
    """BK#2490: adding rack information to a running cluster takes effect at once."""
    locations = cluster(["/r1", "/r1", "/r1"])
    mapping = StaticDNSToSwitchMapping(locations)
    policy = RackawareEnsemblePlacementPolicy()
    policy.initialize({"ignoreLocalNodeInPlacementPolicy": True}, mapping)
    policy.on_cluster_changed(list(locations), [])
    assert policy.new_ensemble(2, 2, 2, None, set()).adherence == FAIL
    mapping.set(bookie(2), "/r2")
    assert policy.network_location(bookie(2)) == "/r2"
    for _ in range(20):
        result = policy.new_ensemble(2, 2, 2, None, set())
        assert result.adherence == MEETS_STRICT
        assert bookie(2) in result.result


def test_unresolved_bookies_are_resolved_again_later(monkeypatch: pytest.MonkeyPatch) -> None:
    import pybkx.placement.locations as aware

    monkeypatch.setattr(aware, "UNRESOLVED_RETRY_S", 0.0)
    mapping = StaticDNSToSwitchMapping({bookie(0): "/r1"})
    stats = PlacementStats()
    policy = RackawareEnsemblePlacementPolicy()
    policy.initialize({"ignoreLocalNodeInPlacementPolicy": True}, mapping, stats=stats)
    policy.on_cluster_changed([bookie(0), bookie(1)], [])
    assert policy.network_location(bookie(1)) == "/default-rack"
    assert policy.writable_bookies_in_default_location() == 1
    assert stats.get("failed_to_resolve_network_location_count") == 1
    mapping._table[bookie(1)] = "/r2"  # changed behind the policy's back, no notification
    policy.on_cluster_changed([bookie(0), bookie(1)], [])
    assert policy.network_location(bookie(1)) == "/r2"
    assert policy.writable_bookies_in_default_location() == 0


def test_first_bookie_comes_from_the_local_rack() -> None:
    mapping = StaticDNSToSwitchMapping({**RACKS3, "10.9.9.9": "/r2"})
    policy = RackawareEnsemblePlacementPolicy()
    policy.initialize({}, mapping, local_node="10.9.9.9")
    policy.on_cluster_changed(list(RACKS3), [])
    for _ in range(30):
        assert RACKS3[policy.new_ensemble(3, 2, 2, None, set()).result[0]] == "/r2"


def test_replacement_prefers_the_same_rack_and_changes_one_position() -> None:
    policy = make_policy(RackawareEnsemblePlacementPolicy, RACKS3)
    ensemble = [bookie(0), bookie(3), bookie(6)]  # r1, r2, r3
    for _ in range(30):
        result = policy.replace_bookie(3, 2, 2, None, ensemble, bookie(3), set())
        assert RACKS3[result.result] == "/r2"
        assert result.result not in ensemble
        assert result.adherence == MEETS_STRICT


def test_replacement_goes_elsewhere_when_its_rack_would_break_a_quorum() -> None:
    locations = cluster(["/r1", "/r1", "/r2", "/r3", "/r3"])
    policy = make_policy(RackawareEnsemblePlacementPolicy, locations)
    ensemble = [bookie(0), bookie(2), bookie(3)]  # r1 r2 r3, E=Qw=3
    result = policy.replace_bookie(3, 3, 2, None, ensemble, bookie(2), {bookie(1)})
    # r2 has no other bookie; r1's other bookie is excluded; only r3 remains.
    assert result.result == bookie(4)
    assert result.adherence == MEETS_STRICT


def test_enforced_replacement_refuses_a_placement_that_breaks_the_rule() -> None:
    locations = cluster(["/r1", "/r2", "/r2"])
    conf = {"enforceMinNumRacksPerWriteQuorum": True}
    policy = make_policy(RackawareEnsemblePlacementPolicy, locations, conf)
    with pytest.raises(BKNotEnoughBookiesException):
        policy.replace_bookie(2, 2, 2, None, [bookie(0), bookie(1)], bookie(0), set())


def test_replacing_a_bookie_not_in_the_ensemble_is_an_error() -> None:
    policy = make_policy(RackawareEnsemblePlacementPolicy, RACKS3)
    with pytest.raises(errors.IncorrectParameterException):
        policy.replace_bookie(2, 2, 2, None, [bookie(0), bookie(3)], bookie(5), set())


def test_adherence_of_a_gone_bookie_uses_its_last_location() -> None:
    policy = make_policy(RackawareEnsemblePlacementPolicy, RACKS3)
    ensemble = [bookie(0), bookie(3)]
    assert policy.is_ensemble_adhering_to_placement_policy(ensemble, 2, 2) == MEETS_STRICT
    policy.on_cluster_changed([bookie(n) for n in range(9) if n != 3], [])
    assert policy.is_ensemble_adhering_to_placement_policy(ensemble, 2, 2) == MEETS_STRICT
    assert policy.is_ensemble_adhering_to_placement_policy([bookie(0), bookie(1)], 2, 2) == FAIL
    assert policy.is_ensemble_adhering_to_placement_policy([bookie(0), bookie(0)], 2, 2) == FAIL
    assert policy.is_ensemble_adhering_to_placement_policy([], 2, 2) == FAIL


def test_acked_bookies_must_span_the_minimum_racks() -> None:
    policy = make_policy(RackawareEnsemblePlacementPolicy, RACKS3)
    assert policy.are_acked_bookies_adhering_to_placement_policy({bookie(0), bookie(3)}, 3, 2)
    assert not policy.are_acked_bookies_adhering_to_placement_policy({bookie(0), bookie(1)}, 3, 2)
    assert policy.are_acked_bookies_adhering_to_placement_policy({bookie(0)}, 1, 1)


def test_relocation_replaces_the_fewest_bookies() -> None:
    policy = make_policy(RackawareEnsemblePlacementPolicy, RACKS3)
    current = [bookie(0), bookie(1), bookie(2), bookie(3)]  # r1 r1 r1 r2; E=4, Qw=2
    result = policy.replace_to_adhere_placement_policy(4, 2, 2, set(), current)
    assert result.adherence == MEETS_STRICT
    changed = [i for i in range(4) if result.result[i] != current[i]]
    assert len(changed) == 1 and changed == [1]
    assert policy.is_ensemble_adhering_to_placement_policy(result.result, 2, 2) == MEETS_STRICT


def test_relocation_keeps_an_adhering_ensemble_and_gives_up_when_impossible() -> None:
    policy = make_policy(RackawareEnsemblePlacementPolicy, RACKS3)
    good = [bookie(0), bookie(3), bookie(6)]
    assert policy.replace_to_adhere_placement_policy(3, 2, 2, set(), good).result == good
    single = make_policy(RackawareEnsemblePlacementPolicy, cluster(["/r1"] * 5))
    result = single.replace_to_adhere_placement_policy(
        3, 2, 2, set(), [bookie(0), bookie(1), bookie(2)]
    )
    assert result.result == [] and result.adherence == FAIL


def test_relocation_always_replaces_bookies_that_cannot_take_writes() -> None:
    policy = make_policy(RackawareEnsemblePlacementPolicy, RACKS3, writable=RACKS3)
    policy.on_cluster_changed([bookie(n) for n in range(9) if n != 1], [])
    current = [bookie(0), bookie(1), bookie(2), bookie(3)]  # r1 r1(gone) r1 r2
    result = policy.replace_to_adhere_placement_policy(4, 2, 2, set(), current)
    assert result.adherence == MEETS_STRICT
    assert result.result[1] != bookie(1)
    assert sum(a != b for a, b in zip(result.result, current, strict=True)) == 1


def test_disk_weights_favour_bookies_with_free_space() -> None:
    locations = cluster(["/r1", "/r1", "/r2", "/r2"])
    policy = make_policy(
        RackawareEnsemblePlacementPolicy,
        locations,
        {"diskWeightBasedPlacementEnabled": "true", "bookieMaxMultipleForWeightBasedPlacement": 10},
    )
    policy._rng = random.Random(7)
    policy.update_bookie_info(
        {
            bookie(0): BookieInfo(100, 90),
            bookie(1): BookieInfo(100, 10),
            bookie(2): BookieInfo(100, 90),
            bookie(3): BookieInfo(100, 10),
        }
    )
    counts: Counter[str] = Counter()
    for _ in range(2000):
        counts.update(policy.new_ensemble(2, 2, 2, None, set()).result)
    assert counts[bookie(0)] > 3 * counts[bookie(1)]
    assert counts[bookie(2)] > 3 * counts[bookie(3)]


def test_enforcement_without_a_topology_is_a_configuration_error() -> None:
    with pytest.raises(ConfigError):
        RackawareEnsemblePlacementPolicy().initialize({"enforceMinNumRacksPerWriteQuorum": "true"})
    plain = RackawareEnsemblePlacementPolicy().initialize({})
    plain.on_cluster_changed([bookie(0), bookie(1)], [])
    assert plain.network_location(bookie(0)) == "/default-rack"


def test_windows_through_a_position_are_the_write_sets_holding_it() -> None:
    assert windows_containing(5, 3, 0) == ((3, 4, 0), (4, 0, 1), (0, 1, 2))
    assert windows_containing(3, 3, 1) == ((0, 1, 2),)


def test_a_rack_change_by_host_name_moves_the_bookie() -> None:
    locations = cluster(["/r1", "/r1"])
    mapping = StaticDNSToSwitchMapping(locations)
    policy = RackawareEnsemblePlacementPolicy()
    policy.initialize({"ignoreLocalNodeInPlacementPolicy": True}, mapping)
    policy.on_cluster_changed(list(locations), [])
    mapping.remove(bookie(1))
    assert policy.network_location(bookie(1)) == "/default-rack"
    mapping.set(bookie(1).split(":")[0], "/r7")  # keyed by host only
    assert policy.network_location(bookie(1)) == "/r7"
    assert policy.new_ensemble(2, 2, 2, None, set()).adherence == MEETS_STRICT


def test_refresh_rereads_a_script_topology(tmp_path: Path) -> None:
    answer = tmp_path / "rack"
    answer.write_text("/r1")
    script = tmp_path / "topology.sh"
    script.write_text(f'#!/bin/sh\nfor h in "$@"; do cat {answer}; echo; done\n')
    script.chmod(0o755)
    policy = RackawareEnsemblePlacementPolicy()
    policy.initialize(
        {"networkTopologyScriptFileName": str(script), "ignoreLocalNodeInPlacementPolicy": True}
    )
    policy.on_cluster_changed([bookie(0)], [])
    assert policy.network_location(bookie(0)) == "/r1"
    answer.write_text("/r2")
    assert policy.network_location(bookie(0)) == "/r1"  # cached
    policy.refresh_network_locations()
    assert policy.network_location(bookie(0)) == "/r2"
