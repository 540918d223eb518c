"""Test helpers for the storage engine: deterministic payloads, files, crash children.

Owns only test utilities shared by the storage tests and ``storage_child.py``; must never import
pytest. The configuration of a test storage is ``support/storage.py``'s.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Any

MIB = 1 << 20
CHILD_SCRIPT = Path(__file__).with_name("storage_child.py")
CHILD_READY_TIMEOUT_S = 60.0


def payload(
    ledger_id: int,
    entry_id: int,
    *,
    generation: int = 0,
    min_size: int = 1,
    max_size: int = 4096,
) -> bytes:
    """Deterministic entry bytes for ``(ledger, entry, generation)``; length in [min, max]."""
    seed = hashlib.blake2b(f"{ledger_id}:{entry_id}:{generation}".encode(), digest_size=64).digest()
    size = min_size + int.from_bytes(seed[:4], "little") % (max_size - min_size + 1)
    return (seed * (size // len(seed) + 1))[:size]


def master_key(ledger_id: int) -> bytes:
    return f"key-{ledger_id}".encode()


def _dir_list(value: str | list[str]) -> list[Path]:
    if isinstance(value, str):
        return [Path(p) for p in value.split(",") if p]
    return [Path(p) for p in value]


def journal_dirs(config: dict[str, Any]) -> list[Path]:
    return _dir_list(config["journalDirectories"])


def ledger_dirs(config: dict[str, Any]) -> list[Path]:
    return _dir_list(config["ledgerDirectories"])


def _files_by_hex_id(directory: Path, suffix: str) -> list[Path]:
    current = directory / "current"
    if not current.is_dir():
        return []
    found = []
    for p in current.glob(f"*{suffix}"):
        try:
            found.append((int(p.stem, 16), p))
        except ValueError:  # index.log and other non-hex names
            continue
    return [p for _, p in sorted(found)]


def journal_files(directory: Path) -> list[Path]:
    """``<journalDir>/current/<hex id>.txn`` files, oldest first."""
    return _files_by_hex_id(directory, ".txn")


def entry_log_files(directory: Path) -> list[Path]:
    """``<ledgerDir>/current/<hex id>.log`` entry logs, oldest first (not ``index.log``)."""
    return _files_by_hex_id(directory, ".log")


def parse_acks(lines: Iterable[str]) -> dict[int, set[int]]:
    """``ACK <ledger> <entry>`` lines -> {ledger: {entry, ...}}."""
    acked: dict[int, set[int]] = {}
    for line in lines:
        parts = line.split()
        if len(parts) == 3 and parts[0] == "ACK":
            acked.setdefault(int(parts[1]), set()).add(int(parts[2]))
    return acked


class ChildFailed(AssertionError):
    """The child process exited on its own or never reported what we waited for."""


class StorageChild:
    """``storage_child.py`` running in its own process; only complete stdout lines are kept."""

    def __init__(self, spec: dict[str, Any], stderr_path: Path) -> None:
        self._stderr_path = stderr_path
        self._stderr: IO[bytes] = stderr_path.open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, str(CHILD_SCRIPT), json.dumps(spec)],
            stdout=subprocess.PIPE,
            stderr=self._stderr,
        )
        self._lines: list[str] = []
        self._eof = False
        self._cond = threading.Condition()
        self._pump_thread = threading.Thread(target=self._pump, daemon=True)
        self._pump_thread.start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            if not raw.endswith(b"\n"):
                break  # the child died mid-line: a torn line is not an acknowledgement
            with self._cond:
                self._lines.append(raw.decode().rstrip("\n"))
                self._cond.notify_all()
        with self._cond:
            self._eof = True
            self._cond.notify_all()

    def stderr_text(self) -> str:
        self._stderr.flush()
        return self._stderr_path.read_text(errors="replace")[-4000:]

    def wait_for(self, token: str, timeout_s: float = CHILD_READY_TIMEOUT_S) -> str:
        """Block until a stdout line starting with ``token`` arrives; return that line."""
        deadline = time.monotonic() + timeout_s
        seen = 0
        with self._cond:
            while True:
                for line in self._lines[seen:]:
                    if line.startswith(token):
                        return line
                seen = len(self._lines)
                if self._eof:
                    self.proc.wait()
                    raise ChildFailed(
                        f"child exited ({self.proc.returncode}) before {token!r}:\n"
                        f"{self.stderr_text()}"
                    )
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise ChildFailed(f"no {token!r} from child in {timeout_s}s")
                self._cond.wait(remaining)

    def kill(self) -> list[str]:
        """SIGKILL the child and return its complete stdout lines.

        Raises ChildFailed if the child had already exited by itself (a crash of its own).
        """
        self.proc.kill()
        self.proc.wait()
        self._pump_thread.join(timeout=30)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        stderr = self.stderr_text()
        self._stderr.close()
        if self.proc.returncode != -9:
            raise ChildFailed(f"child exited on its own ({self.proc.returncode}):\n{stderr}")
        with self._cond:
            return list(self._lines)

    def close(self) -> None:
        """Best-effort cleanup for tests that failed half-way."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        with contextlib.suppress(Exception):
            self._stderr.close()
