"""Small disks for the tests: a tmpfs of a given size (root only), a filler file that leaves a
given number of bytes free on it, and a filler that takes every last byte.

Owns mounting, unmounting and filling those file systems; must never start a bookie.
"""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

FILLER = "filler"
"""The name of the foreign file ``fill`` and ``fill_up`` write at a file system's root."""


def mount_tmpfs(path: Path, size_mib: int) -> str | None:
    """Mounts a tmpfs of ``size_mib`` at ``path`` (made if missing); None once mounted, else
    why it cannot be (not root, or ``mount`` refused)."""
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        return "mounting a small tmpfs needs root"
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_mib}m", "tmpfs", str(path)],
        capture_output=True,
        text=True,
        check=False,
        timeout=30,
    )
    if mounted.returncode != 0:
        return f"cannot mount a tmpfs here: {mounted.stderr.strip()}"
    return None


def unmount(path: Path) -> None:
    """Detaches the file system mounted at ``path`` (lazily: a process still holding a file
    there keeps it until it lets go)."""
    subprocess.run(["umount", "-l", str(path)], capture_output=True, check=False, timeout=30)


def tmpfs_unavailable(scratch: Path) -> str | None:
    """Why no small tmpfs can be mounted here (a 1 MiB one is tried at ``scratch``), or None."""
    reason = mount_tmpfs(scratch, 1)
    if reason is None:
        unmount(scratch)
    return reason


@contextlib.contextmanager
def small_tmpfs(path: Path, size_mib: int) -> Iterator[Path]:
    """A tmpfs of ``size_mib`` mounted at ``path`` (root only; the test is skipped otherwise)."""
    reason = mount_tmpfs(path, size_mib)
    if reason is not None:
        pytest.skip(reason)
    try:
        yield path
    finally:
        unmount(path)


def fill(path: Path, leave_free: int) -> Path:
    """A filler file that leaves about ``leave_free`` bytes free on ``path``'s file system."""
    st_ = os.statvfs(path)
    free = st_.f_bavail * st_.f_frsize
    filler = path / FILLER
    with filler.open("wb") as f:
        f.write(b"\0" * max(0, free - leave_free))
    return filler


def fill_up(path: Path) -> Path:
    """A filler file that takes every free byte of ``path``'s file system. A process writing
    there at the same moment may take the last blocks first (ENOSPC here), which leaves the
    file system just as full."""
    try:
        return fill(path, 0)
    except OSError as exc:
        if exc.errno != errno.ENOSPC:
            raise
    return path / FILLER
