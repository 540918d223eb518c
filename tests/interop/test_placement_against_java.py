"""pybkx's placement policies beside Apache BookKeeper's own (Maven Central, run through
java/.../PlacementCompare.java) on the same random topologies.

Compared: adherence verdicts of random ensembles and of each side's new ensembles, and the
acked-bookies check, for the rack-aware and zone-aware policies; pybkx's new ensembles must be
at least as good as BookKeeper's. The region-aware policy is compared only to show BookKeeper's
known gap (BK#1898: it calls every ensemble MEETS_STRICT), which pybkx does not share.

Topologies keep every location at one depth and queries use writable bookies only: BookKeeper
drops bookies of another depth (BK#2490) and ignores non-writable ones when counting racks,
both deliberate differences documented in docs/placement.md.
"""

from __future__ import annotations

import json
import random
import subprocess
from pathlib import Path
from typing import Any

import pytest

from pybkx import errors
from pybkx.placement import (
    RackawareEnsemblePlacementPolicy,
    RegionAwareEnsemblePlacementPolicy,
    StaticDNSToSwitchMapping,
    TopologyAwarePolicy,
    ZoneawareEnsemblePlacementPolicy,
)

pytestmark = pytest.mark.interop

CASES = 150
NEW_PER_CASE = 4
QUERIES_PER_CASE = 12
RANK = {"FAIL": 1, "MEETS_SOFT": 3, "MEETS_STRICT": 5}
POLICIES: dict[str, type[TopologyAwarePolicy]] = {
    "rack": RackawareEnsemblePlacementPolicy,
    "region": RegionAwareEnsemblePlacementPolicy,
    "zone": ZoneawareEnsemblePlacementPolicy,
}


def _bookie(n: int) -> str:
    return f"10.1.{n // 256}.{n % 256}:3181"


def _topology(kind: str, rnd: random.Random) -> dict[str, str]:
    locations: list[str] = []
    if kind == "rack":
        for rack in range(rnd.randint(1, 6)):
            locations += [f"/rack{rack}"] * rnd.randint(1, 4)
        locations += ["/default-rack"] * rnd.choice([0, 0, 1, 2])
    elif kind == "zone":
        for zone in range(rnd.randint(1, 5)):
            for ud in range(rnd.randint(1, 3)):
                locations += [f"/zone{zone}/ud{ud}"] * rnd.randint(1, 3)
        locations += ["/default-zone/default-upgradedomain"] * rnd.choice([0, 0, 1])
    else:
        for region in range(rnd.randint(1, 4)):
            for rack in range(rnd.randint(1, 3)):
                locations += [f"/R{region}/rack{rack}"] * rnd.randint(1, 3)
    return {_bookie(n): location for n, location in enumerate(locations)}


def _conf(kind: str, rnd: random.Random) -> dict[str, str]:
    if kind == "rack":
        return {
            "minNumRacksPerWriteQuorum": str(rnd.randint(1, 4)),
            "enforceMinNumRacksPerWriteQuorum": rnd.choice(["true", "false"]),
        }
    if kind == "zone":
        minimum = rnd.randint(1, 3)
        return {
            "minNumZonesPerWriteQuorum": str(minimum),
            "desiredNumZonesPerWriteQuorum": str(rnd.randint(minimum, 4)),
            "enforceStrictZoneawarePlacement": rnd.choice(["true", "false"]),
        }
    return {}


def _sizes(kind: str, rnd: random.Random) -> tuple[int, int, int]:
    if kind == "zone" and rnd.random() < 0.7:
        write = rnd.randint(2, 4)
        ensemble = write * rnd.randint(1, 2)
    else:
        ensemble = rnd.randint(1, 6)
        write = rnd.randint(1, ensemble)
    return ensemble, write, rnd.randint(1, write)


def _ours(case: dict[str, Any]) -> TopologyAwarePolicy:
    policy = POLICIES[case["policy"]]()
    conf = {"ignoreLocalNodeInPlacementPolicy": "true", **case["conf"]}
    policy.initialize(conf, StaticDNSToSwitchMapping(case["locations"]))
    policy.on_cluster_changed(case["writable"], case["readonly"])
    return policy


def _cases(seed: int) -> list[dict[str, Any]]:
    rnd = random.Random(seed)
    cases: list[dict[str, Any]] = []
    for n in range(CASES):
        kind = ("rack", "zone", "region")[n % 3]
        locations = _topology(kind, rnd)
        bookies = sorted(locations)
        readonly = rnd.sample(bookies, k=min(len(bookies) - 1, rnd.choice([0, 0, 1])))
        writable = [b for b in bookies if b not in readonly]
        e, w, a = _sizes(kind, rnd)
        case: dict[str, Any] = {
            "policy": kind,
            "conf": _conf(kind, rnd),
            "locations": locations,
            "writable": writable,
            "readonly": readonly,
            "adherence": [],
            "acked": [],
            "new": {"count": NEW_PER_CASE, "e": e, "wq": w, "aq": a},
        }
        for _ in range(QUERIES_PER_CASE):
            size = rnd.randint(1, min(6, len(writable)))
            ensemble = rnd.sample(writable, size)
            wq = rnd.randint(1, size)
            case["adherence"].append({"ensemble": ensemble, "wq": wq, "aq": rnd.randint(1, wq)})
            acked = rnd.sample(writable, rnd.randint(1, min(4, len(writable))))
            case["acked"].append({"bookies": acked, "wq": wq, "aq": rnd.randint(1, wq)})
        ours = _ours(case)
        case["ours_new"] = []
        for _ in range(NEW_PER_CASE):
            try:
                result = ours.new_ensemble(e, w, a, None, set())
            except (errors.NotEnoughBookiesException, errors.IncorrectParameterException) as exc:
                case["ours_new"].append({"error": type(exc).__name__})
                continue
            case["ours_new"].append({"ensemble": result.result, "adherence": result.adherence.name})
            case["adherence"].append({"ensemble": result.result, "wq": w, "aq": a})
        cases.append(case)
    return cases


def _run_java(classpath: str, workdir: Path, cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    import harness

    script = workdir / "placement-cases.json"
    script.write_text(json.dumps(cases))
    argv = harness.java_argv(
        classpath, "pybkx.interop.PlacementCompare", "compare", str(script), heap="256m"
    )
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    if done.returncode != 0:
        pytest.fail(f"PlacementCompare exited {done.returncode}:\n{done.stderr[-4000:]}")
    return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def compared(java_classpath: str, interop_dir: Path) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    cases = _cases(seed=20_240_517)
    answers = _run_java(java_classpath, interop_dir, cases)
    assert len(answers) == len(cases)
    return list(zip(cases, answers, strict=True))


def _check(kind: str, pairs: list[tuple[dict[str, Any], dict[str, Any]]]) -> list[str]:
    mismatches: list[str] = []
    for case, java in (p for p in pairs if p[0]["policy"] == kind):
        ours = _ours(case)
        for query, verdict in zip(case["adherence"], java["adherence"], strict=True):
            mine = ours.is_ensemble_adhering_to_placement_policy(
                query["ensemble"], query["wq"], query["aq"]
            ).name
            if mine != verdict:
                mismatches.append(f"{case['conf']} {query}: pybkx {mine}, BookKeeper {verdict}")
        for query, verdict in zip(case["acked"], java["acked"], strict=True):
            mine_acked = ours.are_acked_bookies_adhering_to_placement_policy(
                query["bookies"], query["wq"], query["aq"]
            )
            if mine_acked != verdict:
                mismatches.append(f"acked {query}: pybkx {mine_acked}, BookKeeper {verdict}")
        for theirs in java["new"]:
            if "ensemble" not in theirs:
                continue
            request = case["new"]
            mine = ours.is_ensemble_adhering_to_placement_policy(
                theirs["ensemble"], request["wq"], request["aq"]
            ).name
            if mine != theirs["check"]:
                mismatches.append(
                    f"BookKeeper's ensemble {theirs['ensemble']}: pybkx {mine}, "
                    f"BookKeeper {theirs['check']}"
                )
    return mismatches


@pytest.mark.parametrize("kind", ["rack", "zone"])
def test_adherence_verdicts_match_bookkeeper(
    kind: str, compared: list[tuple[dict[str, Any], dict[str, Any]]]
) -> None:
    mismatches = _check(kind, compared)
    assert not mismatches, "\n".join(mismatches[:20])


@pytest.mark.parametrize("kind", ["rack", "zone"])
def test_new_ensembles_are_at_least_as_good_as_bookkeepers(
    kind: str, compared: list[tuple[dict[str, Any], dict[str, Any]]]
) -> None:
    worse: list[str] = []
    for case, java in (p for p in compared if p[0]["policy"] == kind):
        theirs = [RANK[n["check"]] for n in java["new"] if "ensemble" in n]
        mine = [RANK[n["adherence"]] for n in case["ours_new"] if "ensemble" in n]
        if theirs and not mine:
            # BookKeeper placed where pybkx refused: only right if BookKeeper's result fails.
            if max(theirs) > RANK["FAIL"] or (
                case["policy"] == "rack"
                and (case["conf"]["enforceMinNumRacksPerWriteQuorum"] == "false")
            ):
                worse.append(f"{case['conf']} {case['new']}: pybkx refused, BookKeeper {theirs}")
        elif theirs and min(mine) < max(theirs):
            worse.append(f"{case['conf']} {case['new']}: pybkx {mine}, BookKeeper {theirs}")
    assert not worse, "\n".join(worse[:20])


def test_bookkeeper_region_aware_adherence_is_always_strict_and_pybkx_is_not(
    compared: list[tuple[dict[str, Any], dict[str, Any]]],
) -> None:
    """BK#1898, documented: BookKeeper's region-aware check does not look at the ensemble."""
    java_verdicts = set()
    single_region_quorums = 0
    for case, java in (p for p in compared if p[0]["policy"] == "region"):
        java_verdicts |= set(java["adherence"])
        ours = _ours(case)
        regions = {
            loc.split("/")[1] for b, loc in case["locations"].items() if b in case["writable"]
        }
        for query in case["adherence"]:
            ensemble, wq = query["ensemble"], query["wq"]
            spans = [
                {
                    case["locations"][ensemble[(s + j) % len(ensemble)]].split("/")[1]
                    for j in range(wq)
                }
                for s in range(len(ensemble))
            ]
            if len(regions) > 1 and wq > 1 and any(len(span) == 1 for span in spans):
                single_region_quorums += 1
                verdict = ours.is_ensemble_adhering_to_placement_policy(ensemble, wq, query["aq"])
                assert verdict.name != "MEETS_STRICT", (query, verdict)
    assert java_verdicts == {"MEETS_STRICT"}
    assert single_region_quorums > 0
