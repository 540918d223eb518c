"""Process liveness for the embedded store's ephemeral rows: a session file held with ``flock``
while its store lives, and the owner process's identity (pid, start time, boot id). It only
answers whether an owner lives; it never touches the database."""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Final

SESSION_NAME: Final = re.compile(r"[0-9a-f]{32}")


def _read_boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            return f.read().strip()
    except OSError:
        return ""


_BOOT_ID: Final = _read_boot_id()
_HAVE_PROC: Final = os.path.exists("/proc/self/stat")


def _proc_stat(pid: int) -> tuple[str, int] | None:
    """(state, start time in clock ticks since boot) of a process, None if there is none."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    # "pid (comm) state ppid ...": comm may hold spaces and parentheses; fields after it
    # start at field 3, so field 22 (starttime) is index 19.
    fields = raw.rpartition(b")")[2].split()
    try:
        return fields[0].decode("ascii", "replace"), int(fields[19])
    except (IndexError, ValueError):
        return None


@dataclass(frozen=True)
class Owner:
    """The process owning an ephemeral row."""

    pid: int
    start: int
    boot: str

    @classmethod
    def this_process(cls) -> Owner:
        pid = os.getpid()
        stat = _proc_stat(pid) if _HAVE_PROC else None
        return cls(pid, stat[1] if stat else 0, _BOOT_ID)

    def alive(self) -> bool:
        if self.boot != _BOOT_ID:
            return False
        if not _HAVE_PROC:
            try:
                os.kill(self.pid, 0)
            except ProcessLookupError:
                return False
            except PermissionError:
                return True
            return True
        stat = _proc_stat(self.pid)
        # A SIGKILLed child stays a zombie ("Z") until its parent reaps it: it is dead here.
        return stat is not None and stat[1] == self.start and stat[0] not in ("Z", "X")


def session_held(directory: Path, session: str) -> bool | None:
    """Whether some open store still holds the session's file: True, False, or None when it
    cannot be told (then the owner's pid decides alone)."""
    if not SESSION_NAME.fullmatch(session):
        return False
    return file_locked(directory / session)


def file_locked(path: Path | str) -> bool | None:
    """Whether some process holds a ``flock`` on ``path``: True, False (also when it is gone),
    or None when it cannot be told."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return None
    else:
        return False
    finally:
        os.close(fd)


def hold_session_file(directory: Path, session: str) -> int:
    """Create the session's file already locked (made under a temporary name, locked, then
    renamed), so it is never seen unheld while the session lives; returns its descriptor."""
    tmp = directory / f".{session}.tmp"
    fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.rename(tmp, directory / session)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return fd
