"""new_ensemble (E=5, Qw=3, Qa=2) over 1,000 bookies in 100 racks and 5 regions: pybkx's
rack- and region-aware policies beside Apache BookKeeper's, in the same run.

Owns this side-by-side measurement (a script, run by hand); must never assert
on timings. Bookie n sits at /region{n // 200}/rack{n // 10}; the client's own location is
unknown (no local-node preference), as for a client outside the cluster. Each side times single
calls after a warm-up: pybkx in this process (time.perf_counter_ns), Java in one JVM
(System.nanoTime, java/.../PlacementCompare.java, after a JIT warm-up). The Java side needs JDK 17
and Maven; without them it is reported as skipped.

    python bench/placement_bench.py [--runs 5000] [--java-runs 50000]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "interop"))

import harness

from pybkx.placement import (
    MEETS_STRICT,
    RackawareEnsemblePlacementPolicy,
    RegionAwareEnsemblePlacementPolicy,
    StaticDNSToSwitchMapping,
    TopologyAwarePolicy,
)

BOOKIES = 1_000
RACKS = 100
REGIONS = 5
ENSEMBLE, WRITE_QUORUM, ACK_QUORUM = 5, 3, 2


def topology() -> dict[str, str]:
    """Bookie id -> location: 10 bookies per rack, 20 racks per region."""
    per_rack = BOOKIES // RACKS
    per_region = RACKS // REGIONS
    return {
        f"10.{n // 256 // 256}.{n // 256 % 256}.{n % 256}:3181": (
            f"/region{n // per_rack // per_region}/rack{n // per_rack}"
        )
        for n in range(BOOKIES)
    }


def measure_pybkx(
    cls: type[TopologyAwarePolicy], locations: dict[str, str], warmup: int, runs: int
) -> dict[str, Any]:
    policy = cls()
    policy.initialize(
        {"ignoreLocalNodeInPlacementPolicy": "true"}, StaticDNSToSwitchMapping(locations)
    )
    policy.on_cluster_changed(list(locations), [])
    for _ in range(warmup):
        policy.new_ensemble(ENSEMBLE, WRITE_QUORUM, ACK_QUORUM, None, ())
    samples: list[float] = []
    strict = 0
    for _ in range(runs):
        start = time.perf_counter_ns()
        result = policy.new_ensemble(ENSEMBLE, WRITE_QUORUM, ACK_QUORUM, None, ())
        samples.append((time.perf_counter_ns() - start) / 1000)
        strict += result.adherence == MEETS_STRICT
    samples.sort()
    return {
        "median_us": statistics.median(samples),
        "p99_us": samples[min(len(samples) - 1, int(len(samples) * 0.99))],
        "runs": runs,
        "strict": strict,
    }


def measure_java(
    classpath: str, kind: str, locations: dict[str, str], warmup: int, runs: int, workdir: Path
) -> dict[str, Any]:
    spec = {
        "policy": kind,
        "conf": {},
        "locations": locations,
        "writable": list(locations),
        "readonly": [],
        "bench": {
            "warmup": warmup,
            "runs": runs,
            "e": ENSEMBLE,
            "wq": WRITE_QUORUM,
            "aq": ACK_QUORUM,
        },
    }
    script = workdir / f"bench-{kind}.json"
    script.write_text(json.dumps(spec))
    argv = harness.java_argv(
        classpath, "pybkx.interop.PlacementCompare", "bench", str(script), heap="512m"
    )
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False)
    if done.returncode != 0:
        raise harness.HarnessError(
            f"PlacementCompare bench exited {done.returncode}: {done.stderr}"
        )
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5_000, help="timed pybkx calls per policy")
    parser.add_argument("--java-runs", type=int, default=50_000, help="timed Java calls")
    args = parser.parse_args()
    locations = topology()
    policies: dict[str, type[TopologyAwarePolicy]] = {
        "rack": RackawareEnsemblePlacementPolicy,
        "region": RegionAwareEnsemblePlacementPolicy,
    }
    results: dict[str, dict[str, Any]] = {}
    for kind, cls in policies.items():
        results[kind] = {"pybkx": measure_pybkx(cls, locations, args.runs // 5, args.runs)}
    java_note = ""
    try:
        classpath = harness.java_classpath()
        with tempfile.TemporaryDirectory(prefix="pybkx-placement-bench-") as tmp:
            for kind in policies:
                results[kind]["java"] = measure_java(
                    classpath, kind, locations, args.java_runs, args.java_runs, Path(tmp)
                )
    except harness.HarnessError as exc:
        java_note = f"Java side skipped: {str(exc).splitlines()[0]}"

    print(
        f"# new_ensemble E={ENSEMBLE} Qw={WRITE_QUORUM} Qa={ACK_QUORUM}: {BOOKIES:,} bookies, "
        f"{RACKS} racks, {REGIONS} regions\n"
    )
    print(
        f"{platform.node()}: {platform.machine()}, Python {platform.python_version()}; "
        f"pybkx {args.runs:,} timed calls per policy, Java {args.java_runs:,} after as many "
        "warm-up calls.\n"
    )
    print(
        "| policy | pybkx median µs | pybkx p99 µs | Java median µs | Java p99 µs "
        "| MEETS_STRICT pybkx / Java |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for kind, by in results.items():
        ours = by["pybkx"]
        java = by.get("java")
        java_cells = (
            f"{java['median_us']:.1f} | {java['p99_us']:.1f}" if java else "skipped | skipped"
        )
        strict = f"{ours['strict'] / ours['runs']:.0%}" + (
            f" / {java['strict'] / java['runs']:.0%}" if java else ""
        )
        print(
            f"| {kind}-aware | {ours['median_us']:.1f} | {ours['p99_us']:.1f} | {java_cells} "
            f"| {strict} |"
        )
    if java_note:
        print(f"\n{java_note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
