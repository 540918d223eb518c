"""Runs tests/interop/java's MetadataFormats (Apache BookKeeper's own metadata code) for the
metadata tests. Owns building and running that one Java program; it never decides what to expect."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

INTEROP = Path(__file__).resolve().parents[1] / "interop"
TIMEOUT_S = 300


def run_metadata_formats(*args: str) -> list[str]:
    """Output lines of ``MetadataFormats ARGS``; fails the test (with its stderr) on error."""
    if str(INTEROP) not in sys.path:
        sys.path.insert(0, str(INTEROP))
    import harness

    try:
        classpath = harness.java_classpath()
    except harness.HarnessError as exc:
        pytest.fail(str(exc), pytrace=False)
    argv = harness.java_argv(classpath, "pybkx.interop.MetadataFormats", *args)
    argv.insert(1, "-XX:TieredStopAtLevel=1")  # short-lived: start fast
    done = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    if done.returncode != 0:
        tail = "\n".join(done.stderr.splitlines()[-40:])
        pytest.fail(f"MetadataFormats {' '.join(args[:1])} exited {done.returncode}:\n{tail}")
    return done.stdout.splitlines()
