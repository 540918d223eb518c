"""Small disks for the tests: a tmpfs of a given size (root only) and a filler file that leaves
a given number of bytes free on it.

Owns mounting, unmounting and filling those file systems; must never start a bookie.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


@contextlib.contextmanager
def small_tmpfs(path: Path, size_mib: int) -> Iterator[Path]:
    """A tmpfs of ``size_mib`` mounted at ``path`` (root only; the test is skipped otherwise)."""
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_mib}m", "tmpfs", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True, check=False)


def fill(path: Path, leave_free: int) -> Path:
    """A filler file that leaves about ``leave_free`` bytes free on ``path``'s file system."""
    st_ = os.statvfs(path)
    free = st_.f_bavail * st_.f_frsize
    filler = path / "filler"
    with filler.open("wb") as f:
        f.write(b"\0" * max(0, free - leave_free))
    return filler
