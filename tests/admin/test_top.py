"""``pybkx top`` as a person sees it: run in a real terminal (a tmux pane) against a cluster
taking writes, its screen read back with ``tmux capture-pane``. Owns this check only."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import threading
import uuid

import pytest
from support.wait import wait_until

import pybkx
from pybkx.tools.sandbox import Sandbox

pytestmark = pytest.mark.skipif(
    shutil.which("tmux") is None, reason="tmux is installed by `make deps` (APT_PACKAGES)"
)


def tmux(*args: str) -> str:
    done = subprocess.run(["tmux", *args], capture_output=True, text=True, timeout=30, check=True)
    return done.stdout


def test_top_shows_every_bookie_live_with_its_adds(cluster: Sandbox) -> None:
    session = f"pybkx-top-{uuid.uuid4().hex[:8]}"
    command = (
        # The terminal decides the width, as for a person: not the test run's COLUMNS.
        f"env -u COLUMNS -u LINES {sys.executable} -m pybkx top --uri {cluster.metadata_uri} "
        "--interval 0.5 "
        "--iterations 60; sleep 30"
    )
    stop = threading.Event()

    def write() -> None:
        with pybkx.BookKeeper(cluster.metadata_uri) as bk:
            lh = bk.create_ledger(3, 3, 2)
            while not stop.is_set():
                lh.append_many([b"t" * 100] * 200)
            lh.close()

    writer = threading.Thread(target=write)
    writer.start()
    tmux("new-session", "-d", "-s", session, "-x", "220", "-y", "30", command)
    try:
        screen = wait_until(
            lambda: tmux("capture-pane", "-p", "-t", session),
            "`pybkx top` showing adds on all three bookies",
            timeout_s=30,
            interval_s=0.5,
            accept=_every_bookie_adds,
        )
    finally:
        stop.set()
        writer.join(60)
        subprocess.run(["tmux", "kill-session", "-t", session], check=False, timeout=30)
    assert "cluster adds/s:" in screen and "bookies: 3 writable, 0 read-only" in screen, screen
    for bookie in cluster.bookie_addresses:
        assert bookie in screen, screen


def _every_bookie_adds(screen: str) -> bool:
    """Three bookie rows on the screen, each with adds/s above 0."""
    rows = [line for line in screen.splitlines() if "writable" in line and "│" in line]
    return len(rows) == 3 and all(_adds(line) > 0 for line in rows)


def _adds(row: str) -> float:
    """The adds/s column of a bookie's row (0 when not known yet)."""
    cells = [c.strip() for c in row.split("│")[1:-1]]
    value = cells[2].replace(",", "")
    return float(value) if re.fullmatch(r"[0-9.]+", value) else 0.0
