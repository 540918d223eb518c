"""Randomized fault schedules against real bookie processes and a real ZooKeeper, judged by the
history checker: nothing acknowledged lost, readers agree, no ack after a fence, LAC never back,
closed lengths right. Short runs here (the default test run); long ones with
``make faults LONG=1 DURATION=<s>`` (tests/faults/nemesis.py).

``PYBKX_NEMESIS_SECONDS`` changes the fault time of these runs; ``PYBKX_NEMESIS_SEED`` fixes the
seed (else a new one each run, printed, so a failing schedule can be replayed).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from nemesis import RunResult, run
from netns import Network
from plan import NET_FAULTS, PROCESS_FAULTS, ZK_FAULTS, RunConfig

SECONDS = float(os.environ.get("PYBKX_NEMESIS_SECONDS", "75"))


def seed() -> int:
    return int(os.environ.get("PYBKX_NEMESIS_SEED", str(time.time_ns() % 2**31)))


def judged_run(config: RunConfig, tmp_path: Path) -> RunResult:
    """Runs a schedule and asserts what every run must hold: no violation, entries
    acknowledged, every ledger verified and every process stopped at the end."""
    result = run(config, tmp_path / "run")
    print(f"seed {config.seed}: {result.summary()}")
    for note in result.notes:
        print(f"note: {note}")
    assert result.result.ok, f"seed {config.seed}\n{result.result.report()}"
    assert result.result.acknowledged > 0
    assert not [n for n in result.notes if "not verified" in n or "still running" in n]
    return result


def test_processes_zookeeper_and_disks_under_random_faults(tmp_path: Path) -> None:
    config = RunConfig(duration_s=SECONDS, seed=seed(), bookies=5, kinds=PROCESS_FAULTS + ZK_FAULTS)
    result = judged_run(config, tmp_path)
    assert sum(result.faults.values()) > 0


def test_network_partitions_between_namespaces(tmp_path: Path) -> None:
    reason = Network.unavailable()
    if reason is not None:
        pytest.skip(reason)
    kinds = ("kill", "pause", *NET_FAULTS)
    config = RunConfig(
        duration_s=max(20.0, SECONDS * 0.6), seed=seed(), bookies=5, kinds=kinds, net=True
    )
    result = judged_run(config, tmp_path)
    assert sum(result.faults[k] for k in NET_FAULTS) > 0  # the schedule picks which
