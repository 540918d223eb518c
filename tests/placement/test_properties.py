"""Property tests over random topologies, sizes and exclusions, checked against the brute-force
checker in brute.py: placements are valid and as good as any possible, replacements change one
position, reads are permutations, relocations change as few bookies as possible, and adherence
verdicts agree with the definitions. ``PYBKX_PLACEMENT_PROFILE=heavy`` runs many more cases."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import placement_brute as brute
from hypothesis import given, settings
from hypothesis import strategies as st
from placement_helpers import PROFILE, cluster, make_policy

from pybkx import errors
from pybkx.placement import (
    RackawareEnsemblePlacementPolicy,
    RegionAwareEnsemblePlacementPolicy,
    SlowBookies,
    StaticBookiesHealthInfo,
    TopologyAwarePolicy,
    ZoneawareEnsemblePlacementPolicy,
    reorder_read_sequence,
)

settings.load_profile(PROFILE)


@dataclass
class Case:
    """A cluster, a policy configuration and a request against it."""

    kind: str
    locations: dict[str, str]
    conf: dict[str, Any]
    writable: list[str]
    readonly: list[str]
    exclude: set[str]
    ensemble_size: int
    write_quorum: int
    ack_quorum: int
    seed: int = 0

    def policy(self) -> TopologyAwarePolicy:
        cls = {
            "rack": RackawareEnsemblePlacementPolicy,
            "region": RegionAwareEnsemblePlacementPolicy,
            "zone": ZoneawareEnsemblePlacementPolicy,
        }[self.kind]
        # Register everyone once so gone bookies have a last known location, then the state.
        policy = make_policy(cls, self.locations, self.conf)
        policy.on_cluster_changed(self.writable, self.readonly)
        policy._rng.seed(self.seed)  # the policy's choices are random: make a case repeatable
        return policy

    def durability(self) -> int:
        if self.kind != "region" or not self.conf.get("reppRegionsToWrite"):
            return 0
        return int(self.conf.get("reppMinimumRegionsForDurability", 2))

    def enforced(self) -> bool:
        if self.kind == "zone":
            return bool(self.conf.get("enforceStrictZoneawarePlacement", True))
        return bool(self.conf.get("enforceMinNumRacksPerWriteQuorum", False))

    def unusable(self) -> set[str]:
        """Locations the policy must never place new bookies at."""
        if self.kind == "rack" and self.enforced():
            return {brute.DEFAULT_RACK}
        if self.kind == "region" and (self.enforced() or self.durability() > 1):
            return {brute.DEFAULT_REGION_RACK}
        if self.kind == "zone" and self.enforced():
            return {brute.DEFAULT_ZONE_UD}
        return set()

    def rules(self) -> brute.Rules:
        if self.kind == "rack":
            return brute.RackRules(int(self.conf["minNumRacksPerWriteQuorum"]), self.enforced())
        if self.kind == "zone":
            return brute.ZoneRules(
                int(self.conf["minNumZonesPerWriteQuorum"]),
                int(self.conf["desiredNumZonesPerWriteQuorum"]),
            )
        regions = {
            brute.parts(self.locations[b])[0]
            for b in self.writable
            if self.locations[b] not in self.unusable()
        }
        return brute.RegionRules(
            int(self.conf["minNumRacksPerWriteQuorum"]),
            self.enforced(),
            self.durability(),
            len(regions),
        )

    def eligible(self, also_excluded: Sequence[str] = ()) -> list[str]:
        banned = self.exclude | set(also_excluded)
        return [
            b for b in self.writable if b not in banned and self.locations[b] not in self.unusable()
        ]


def _membership(draw: st.DrawFn, bookies: list[str]) -> tuple[list[str], list[str], set[str]]:
    readonly = draw(st.sets(st.sampled_from(bookies), max_size=2))
    dead = draw(st.sets(st.sampled_from(bookies), max_size=2))
    writable = [b for b in bookies if b not in readonly and b not in dead]
    exclude = draw(st.sets(st.sampled_from(bookies), max_size=3))
    return writable, sorted(readonly - dead), exclude


def _sizes(draw: st.DrawFn, most: int) -> tuple[int, int, int]:
    ensemble = draw(st.integers(1, most))
    write = draw(st.integers(1, ensemble))
    return ensemble, write, draw(st.integers(1, write))


@st.composite
def rack_cases(draw: st.DrawFn) -> Case:
    racks = draw(st.lists(st.integers(0, 3), min_size=1, max_size=4))
    names = draw(st.sampled_from([["/r{}"], ["/zone1/r{}"], ["/r{}", "/reg/r{}"]]))
    locations = [names[r % len(names)].format(r) for r, n in enumerate(racks) for _ in range(n)]
    locations += ["/default-rack"] * draw(st.integers(0, 2))
    locations = locations or ["/r0"]
    conf = {
        "minNumRacksPerWriteQuorum": draw(st.integers(1, 4)),
        "enforceMinNumRacksPerWriteQuorum": draw(st.booleans()),
    }
    placed = cluster(locations)
    writable, readonly, exclude = _membership(draw, list(placed))
    sizes = _sizes(draw, 5)
    return Case(
        "rack", placed, conf, writable, readonly, exclude, *sizes, draw(st.integers(0, 2**32))
    )


@st.composite
def region_cases(draw: st.DrawFn) -> Case:
    regions = draw(st.lists(st.lists(st.integers(1, 2), min_size=1, max_size=2), max_size=3))
    locations = [
        f"/R{g}/rack{r}"
        for g, racks in enumerate(regions)
        for r, n in enumerate(racks)
        for _ in range(n)
    ]
    locations += ["/default-region/default-rack"] * draw(st.integers(0, 1))
    locations = locations or ["/R0/rack0"]
    conf: dict[str, Any] = {
        "minNumRacksPerWriteQuorum": draw(st.integers(1, 3)),
        "enforceMinNumRacksPerWriteQuorum": draw(st.booleans()),
    }
    if draw(st.booleans()):
        conf["reppRegionsToWrite"] = "R0;R1;R2"
        conf["reppMinimumRegionsForDurability"] = draw(st.integers(1, 3))
    placed = cluster(locations)
    writable, readonly, exclude = _membership(draw, list(placed))
    sizes = _sizes(draw, 5)
    return Case(
        "region", placed, conf, writable, readonly, exclude, *sizes, draw(st.integers(0, 2**32))
    )


@st.composite
def zone_cases(draw: st.DrawFn) -> Case:
    zones = draw(st.lists(st.lists(st.integers(0, 2), min_size=1, max_size=2), max_size=4))
    locations = [
        f"/z{z}/ud{u}" for z, uds in enumerate(zones) for u, n in enumerate(uds) for _ in range(n)
    ]
    locations += ["/default-zone/default-upgradedomain"] * draw(st.integers(0, 1))
    locations = locations or ["/z0/ud0"]
    minimum = draw(st.integers(1, 3))
    conf = {
        "minNumZonesPerWriteQuorum": minimum,
        "desiredNumZonesPerWriteQuorum": draw(st.integers(minimum, 4)),
        "enforceStrictZoneawarePlacement": draw(st.booleans()),
    }
    placed = cluster(locations)
    writable, readonly, exclude = _membership(draw, list(placed))
    sizes = _sizes(draw, 5)
    return Case(
        "zone", placed, conf, writable, readonly, exclude, *sizes, draw(st.integers(0, 2**32))
    )


any_case = st.one_of(rack_cases(), region_cases(), zone_cases())


def _invalid_request(case: Case) -> bool:
    e, w, a = case.ensemble_size, case.write_quorum, case.ack_quorum
    if case.kind == "zone" and case.enforced():
        return e % w != 0 or w <= int(case.conf["minNumZonesPerWriteQuorum"])
    d = case.durability()
    return d > 0 and (a < d or a <= w - w // d)


def _may_refuse(case: Case, eligible: list[str]) -> bool:
    """Whether NotEnoughBookiesException is the right answer for a new ensemble."""
    e, w, a = case.ensemble_size, case.write_quorum, case.ack_quorum
    best = brute.best_ensemble(case.rules(), case.locations, eligible, e, w, a)
    if best is None:
        return True
    if best != brute.FAIL:
        return False
    if case.kind == "region" and not case.enforced():
        # Only durability is enforced: refusing is right when no ensemble meets it alone.
        durable = brute.RegionRules(1, False, case.durability(), 0)
        return brute.best_ensemble(durable, case.locations, eligible, e, w, a) == brute.FAIL
    return case.enforced() or case.durability() > 1


@given(any_case)
def test_new_ensembles_are_valid_and_as_good_as_any(case: Case) -> None:
    policy = case.policy()
    eligible = case.eligible()
    e, w, a = case.ensemble_size, case.write_quorum, case.ack_quorum
    try:
        result = policy.new_ensemble(e, w, a, None, case.exclude)
    except errors.IncorrectParameterException:
        assert _invalid_request(case)
        return
    except errors.NotEnoughBookiesException:
        assert not _invalid_request(case)
        assert _may_refuse(case, eligible)
        return
    assert not _invalid_request(case)
    ensemble = result.result
    assert len(ensemble) == e and len(set(ensemble)) == e
    assert set(ensemble) <= set(eligible)  # never excluded, dead, read-only or unusable
    verdict = case.rules().verdict(case.locations, ensemble, w, a)
    assert result.adherence == verdict
    assert policy.is_ensemble_adhering_to_placement_policy(ensemble, w, a) == verdict
    best = brute.best_ensemble(case.rules(), case.locations, eligible, e, w, a)
    assert verdict == best  # the search is complete: nothing better exists


@given(any_case, st.data())
def test_replacement_changes_one_position_for_the_best_bookie(case: Case, data: Any) -> None:
    e, w, a = case.ensemble_size, case.write_quorum, case.ack_quorum
    known = list(case.locations)
    if len(known) < e:
        return
    ensemble = data.draw(st.permutations(known).map(lambda p: p[:e]))
    index = data.draw(st.integers(0, e - 1))
    policy = case.policy()
    candidates = case.eligible(also_excluded=ensemble)
    best = brute.best_replacement(case.rules(), case.locations, ensemble, index, candidates, w, a)
    try:
        result = policy.replace_bookie(e, w, a, None, ensemble, ensemble[index], case.exclude)
    except errors.NotEnoughBookiesException:
        assert best is None or (best == brute.FAIL and (case.enforced() or case.durability() > 1))
        return
    assert result.result in candidates
    changed = list(ensemble)
    changed[index] = result.result
    verdict = case.rules().verdict(case.locations, changed, w, a)
    assert result.adherence == verdict
    assert verdict == best


@given(any_case, st.data())
def test_read_order_is_a_permutation_of_the_write_set(case: Case, data: Any) -> None:
    known = list(case.locations)
    ensemble = data.draw(st.lists(st.sampled_from(known), min_size=1, max_size=6))
    size = len(ensemble)
    write_set = data.draw(st.permutations(range(size)).map(lambda p: list(p)[: max(1, size // 2)]))
    failures = data.draw(st.dictionaries(st.sampled_from(known), st.integers(-1, 50)))
    pending = data.draw(st.dictionaries(st.sampled_from(known), st.integers(0, 50)))
    health = StaticBookiesHealthInfo(failures, pending)
    policy = case.policy()
    for slow in data.draw(st.sets(st.sampled_from(known))):
        policy.register_slow_bookie(slow, 1)
    order = policy.reorder_read_sequence(ensemble, health, write_set)
    assert sorted(order) == sorted(write_set)
    lac = policy.reorder_read_lac_sequence(ensemble, health, write_set)
    assert sorted(lac) == list(range(size)) and lac[: len(order)] == order
    plain = reorder_read_sequence(
        ensemble,
        write_set,
        writable=set(case.writable),
        readonly=set(case.readonly),
        slow=SlowBookies(1000),
        health=health,
        randomize=True,
        threshold_pending=data.draw(st.integers(0, 5)),
    )
    assert sorted(plain) == sorted(write_set)


@given(any_case, st.data())
def test_adherence_and_acked_verdicts_agree_with_brute_force(case: Case, data: Any) -> None:
    known = list(case.locations)
    ensemble = data.draw(st.lists(st.sampled_from(known), min_size=1, max_size=6))
    w = data.draw(st.integers(1, len(ensemble)))
    a = data.draw(st.integers(1, w))
    policy = case.policy()
    rules = case.rules()
    assert policy.is_ensemble_adhering_to_placement_policy(ensemble, w, a) == rules.verdict(
        case.locations, ensemble, w, a
    )
    acked = data.draw(st.sets(st.sampled_from(known), min_size=1, max_size=4))
    assert policy.are_acked_bookies_adhering_to_placement_policy(acked, w, a) == rules.acked(
        case.locations, acked, w, a
    )


@given(any_case, st.data())
def test_relocation_replaces_no_more_bookies_than_needed(case: Case, data: Any) -> None:
    e, w, a = case.ensemble_size, case.write_quorum, case.ack_quorum
    known = list(case.locations)
    ensemble = data.draw(st.lists(st.sampled_from(known), min_size=e, max_size=e))
    policy = case.policy()
    rules = case.rules()
    before = rules.verdict(case.locations, ensemble, w, a)
    result = policy.replace_to_adhere_placement_policy(e, w, a, case.exclude, ensemble)
    if before != brute.FAIL:
        assert result.result == ensemble and result.adherence == before
        return
    forced = {
        i
        for i, b in enumerate(ensemble)
        if b in case.exclude or b not in case.writable or b in ensemble[:i]
    }
    candidates = [b for b in case.writable if b not in case.exclude]
    fewest = brute.min_relocation(rules, case.locations, ensemble, forced, candidates, w, a)
    if fewest is None:
        assert result.result == [] and result.adherence == brute.FAIL
        return
    assert result.adherence != brute.FAIL
    assert result.adherence == rules.verdict(case.locations, result.result, w, a)
    changed = {i for i in range(e) if result.result[i] != ensemble[i]}
    assert forced <= changed
    assert len(changed) == fewest
    assert all(result.result[i] in candidates for i in changed)
