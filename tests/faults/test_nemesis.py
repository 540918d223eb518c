"""Randomized fault schedules against real bookie processes and a real ZooKeeper, judged by the
history checker: nothing acknowledged lost, readers agree, no ack after a fence, LAC never back,
closed lengths right. Short runs here (the default test run); long ones with
``make faults LONG=1 DURATION=<s>`` (tests/faults/nemesis.py).

``PYBKX_NEMESIS_SECONDS`` changes the fault time of these runs (``PYBKX_NEMESIS_DISK_FULL_SECONDS``
that of the ``disk_full`` run, root only); ``PYBKX_NEMESIS_SEED`` fixes the seed (else a new one
each run, printed, so a failing schedule can be replayed).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from nemesis import RunResult, run
from netns import Network
from plan import NET_FAULTS, PROCESS_FAULTS, SPACE_FAULTS, ZK_FAULTS, RunConfig
from support.disks import tmpfs_unavailable

SECONDS = float(os.environ.get("PYBKX_NEMESIS_SECONDS", "75"))
DISK_FULL_SECONDS = float(os.environ.get("PYBKX_NEMESIS_DISK_FULL_SECONDS", "25"))


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
    problems = [p for r in result.disk_full for p in r.problems]
    assert not problems, f"seed {config.seed}: {problems}"
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


def test_every_disk_filled_to_100_percent_then_deletes_each_bookie_writable_again(
    tmp_path: Path,
) -> None:
    """Each bookie on a 48 MiB tmpfs of its own; a ``disk_full`` round 10 s in (every bookie's
    disk filled by a foreign file, read-only, ledgers deleted with the file still there), kills,
    pauses and disk errors around it: every bookie writable again by itself within the bound,
    the same process, and the history clean (nothing acknowledged lost)."""
    reason = tmpfs_unavailable(tmp_path / "probe")
    if reason is not None:
        pytest.skip(reason)
    kinds = (*SPACE_FAULTS, "kill", "pause", "disk_error")
    config = RunConfig(duration_s=DISK_FULL_SECONDS, seed=seed(), bookies=4, kinds=kinds)
    result = judged_run(config, tmp_path)
    assert result.faults["disk_full"] >= 1 and result.disk_full
    for round_ in result.disk_full:
        assert set(round_.read_only_s) == set(range(4)), round_
        assert set(round_.writable_again_s) == set(range(4)), round_
        assert round_.deleted >= 1, round_  # the ballast at least
        # The bookies came back because of the deletes: none was writable before them.
        assert not round_.writable_before_deletes, round_
