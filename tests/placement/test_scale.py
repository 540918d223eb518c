"""Placement over a large cluster (1,000 bookies, 100 racks, 5 regions): valid, verdicts as the
brute-force checker computes them, fast; and safe to call from many threads at once."""

from __future__ import annotations

import threading
import time

import placement_brute as brute
from hypothesis import given, settings
from hypothesis import strategies as st
from placement_helpers import PROFILE, bookie, cluster, make_policy

from pybkx import errors
from pybkx.placement import (
    MEETS_STRICT,
    RackawareEnsemblePlacementPolicy,
    RegionAwareEnsemblePlacementPolicy,
    ZoneawareEnsemblePlacementPolicy,
)

settings.load_profile(PROFILE)

BIG = cluster(f"/region{n // 200}/rack{n // 10}" for n in range(1000))
ZONES = cluster(f"/zone{n // 200}/ud{n // 10 % 20}" for n in range(1000))
RACK = make_policy(RackawareEnsemblePlacementPolicy, BIG)
REGION = make_policy(RegionAwareEnsemblePlacementPolicy, BIG)
ZONE = make_policy(ZoneawareEnsemblePlacementPolicy, ZONES)
SLOW_CALL_S = 2.0


@settings(max_examples=40)
@given(
    st.integers(1, 9).flatmap(lambda e: st.tuples(st.just(e), st.integers(1, e))),
    st.sets(st.integers(0, 999), max_size=400),
)
def test_large_clusters_place_valid_strict_ensembles_quickly(
    sizes: tuple[int, int], excluded: set[int]
) -> None:
    e, w = sizes
    exclude = {bookie(n) for n in excluded}
    start = time.monotonic()
    rack = RACK.new_ensemble(e, w, 1, None, exclude)
    region = REGION.new_ensemble(e, w, 1, None, exclude)
    assert time.monotonic() - start < SLOW_CALL_S
    for result in (rack, region):
        assert len(set(result.result)) == e and not set(result.result) & exclude
    assert rack.adherence == MEETS_STRICT  # 100 racks: always possible
    assert rack.adherence == brute.RackRules().verdict(BIG, rack.result, w, 1)
    assert region.adherence == brute.RegionRules(2, False, 0, 5).verdict(BIG, region.result, w, 1)
    if (w <= 5 and e % w == 0) or w == 1 or (e <= 5):
        assert region.adherence == MEETS_STRICT


@settings(max_examples=20)
@given(st.sampled_from([(3, 3), (6, 3), (9, 3), (8, 4), (4, 4)]), st.sets(st.integers(0, 999)))
def test_zone_aware_scales(sizes: tuple[int, int], excluded: set[int]) -> None:
    e, w = sizes
    exclude = {bookie(n) for n in excluded}
    start = time.monotonic()
    result = ZONE.new_ensemble(e, w, 2, None, exclude)
    assert time.monotonic() - start < SLOW_CALL_S
    assert result.adherence == brute.ZoneRules().verdict(ZONES, result.result, w, 2)
    assert result.adherence == MEETS_STRICT


def test_impossible_requests_fail_fast() -> None:
    one_region = {b: loc for b, loc in BIG.items() if loc.startswith("/region0/")}
    durable = make_policy(
        RegionAwareEnsemblePlacementPolicy, one_region, {"reppRegionsToWrite": "region0;region1"}
    )
    enforced = make_policy(
        RackawareEnsemblePlacementPolicy,
        cluster(["/r1"] * 50 + ["/r2"]),
        {"enforceMinNumRacksPerWriteQuorum": True, "minNumRacksPerWriteQuorum": 2},
    )
    start = time.monotonic()
    for call in (
        lambda: durable.new_ensemble(9, 3, 3, None, set()),
        lambda: enforced.new_ensemble(9, 2, 2, None, set()),
    ):
        try:
            call()
        except errors.NotEnoughBookiesException:
            continue
        raise AssertionError("an impossible placement succeeded")
    assert time.monotonic() - start < SLOW_CALL_S


def test_concurrent_placements_and_cluster_changes() -> None:
    policy = make_policy(RackawareEnsemblePlacementPolicy, BIG)
    everyone = list(BIG)
    failures: list[BaseException] = []
    stop = threading.Event()

    def churn() -> None:
        n = 0
        while not stop.is_set():
            n += 1
            policy.on_cluster_changed(everyone[n % 100 :], everyone[: n % 100])

    def place() -> None:
        try:
            for _ in range(200):
                result = policy.new_ensemble(5, 3, 2, None, set())
                assert len(set(result.result)) == 5
                assert result.adherence == MEETS_STRICT
                order = policy.reorder_read_sequence(result.result, None, [0, 1, 2])
                assert sorted(order) == [0, 1, 2]
        except BaseException as exc:  # reported below, in the test's thread
            failures.append(exc)

    changer = threading.Thread(target=churn)
    workers = [threading.Thread(target=place) for _ in range(4)]
    changer.start()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    stop.set()
    changer.join()
    assert not failures, failures[0]
