"""``pybkx shell`` run as an operator runs it: a process of its own, bounded in time, its output
read back (as JSON where the command has ``--json``). Owns no behaviour of pybkx."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

SHELL_TIMEOUT_S = 120.0
"""Bound on one command (the fault was a command that never returned)."""


def run_shell(command: str, uri: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``pybkx shell COMMAND --uri URI ARGS...``; its exit code and output, never raised."""
    return subprocess.run(
        [sys.executable, "-m", "pybkx", "shell", command, "--uri", uri, *args],
        capture_output=True,
        text=True,
        timeout=SHELL_TIMEOUT_S,
        check=False,
    )


def shell_json(command: str, uri: str, *args: str) -> tuple[int, dict[str, Any]]:
    """``run_shell`` with ``--json`` for a command that exits 0 (nothing found) or 1 (something
    found): its exit code and its report."""
    done = run_shell(command, uri, "--json", *args)
    assert done.returncode in (0, 1), done.stderr
    report: dict[str, Any] = json.loads(done.stdout)
    return done.returncode, report
