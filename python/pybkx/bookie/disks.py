"""The disk checker: every ``diskCheckInterval`` it reads the usage of the directories the
storage writes to, marks full ledger directories (they take no new entry log) and tells the
bookie whether it can still take adds. BookKeeper's LedgerDirsMonitor rules, with the journal
and index directories checked too. It decides; the bookie moves its mode and registration.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pybkx._core import LedgerStorage

__all__ = ["DirUsage", "DiskChecker", "DiskThresholds", "DiskVerdict", "evaluate"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class DirUsage:
    """One directory's file system as the storage reports it."""

    kind: str
    """``ledger``, ``index`` or ``journal``."""
    path: str
    total_bytes: int
    free_bytes: int

    @property
    def usage(self) -> float:
        """Used fraction of the file system (BookKeeper: 1 - usable / total)."""
        if self.total_bytes <= 0:
            return 1.0
        return 1.0 - self.free_bytes / self.total_bytes


@dataclass(frozen=True)
class DiskThresholds:
    """BookKeeper's disk keys, as fractions and bytes."""

    threshold: float = 0.95
    warn: float = 0.90
    lwm: float = 0.95
    min_usable_for_high_priority: int = 1 << 30
    any_disk_full: bool = False


@dataclass(frozen=True)
class DiskVerdict:
    """What one check found."""

    full: tuple[bool, ...]
    """Per ledger directory (in order): full, takes no new entry log."""
    other_full: tuple[bool, ...]
    """Per index and journal directory (in order): full."""
    writable: bool
    """The bookie can take adds."""
    high_priority_writes: bool
    """A read-only bookie can still take high-priority (recovery) adds."""
    almost_full: tuple[str, ...]
    """Directories past ``diskUsageWarnThreshold`` but not full."""
    ledger_pressure: int = 0
    """For the garbage collector: 2 when a ledger directory is full, 1 when one is past
    ``diskUsageWarnThreshold``, else 0."""

    @property
    def writable_dirs(self) -> int:
        return sum(1 for f in self.full if not f)


def evaluate(
    dirs: Sequence[DirUsage],
    was_full: Sequence[bool],
    limits: DiskThresholds,
) -> DiskVerdict:
    """The verdict for ``dirs`` (ledger directories first, then index and journal ones) given
    which of them were full at the last check (same order; missing: not full).

    Ledger directories follow BookKeeper: a writable one is full once its usage exceeds
    ``threshold``. A full one becomes writable again when its usage is at most ``threshold``
    while another ledger directory is writable; when none is, only once the usage of all of
    them together falls below ``lwm``. An index or journal directory (checked by pybkx only)
    is full past ``threshold`` and writable again below ``lwm``. The bookie is writable while
    some ledger directory is (every one with ``any_disk_full``) and no index or journal
    directory is full; a read-only bookie takes high-priority adds while some ledger directory
    has ``min_usable_for_high_priority`` bytes free.
    """
    before = list(was_full) + [False] * max(0, len(dirs) - len(was_full))
    ledger = [(i, d) for i, d in enumerate(dirs) if d.kind == "ledger"]
    others = [(i, d) for i, d in enumerate(dirs) if d.kind != "ledger"]
    full = {i: before[i] for i, _ in ledger}
    for i, d in ledger:
        if not full[i] and d.usage > limits.threshold:
            full[i] = True
    any_writable = any(not f for f in full.values())
    total = sum(d.total_bytes for _, d in ledger)
    free = sum(d.free_bytes for _, d in ledger)
    overall = 1.0 - free / total if total > 0 else 1.0
    if any_writable or overall < limits.lwm:
        for i, d in ledger:
            if full[i] and d.usage <= limits.threshold:
                full[i] = False
    other_full: list[bool] = []
    now_full = dict(full)
    for i, d in others:
        was = before[i]
        now_full[i] = d.usage >= limits.lwm if was else d.usage > limits.threshold
        other_full.append(now_full[i])
    ledger_full = [full[i] for i, _ in ledger]
    if limits.any_disk_full:
        ledger_ok = not any(ledger_full)
    else:
        ledger_ok = not all(ledger_full) if ledger_full else True
    writable = ledger_ok and not any(other_full)
    high_priority = writable or any(
        d.free_bytes >= limits.min_usable_for_high_priority for _, d in ledger
    )
    almost = tuple(d.path for i, d in enumerate(dirs) if d.usage > limits.warn and not now_full[i])
    if any(ledger_full):
        pressure = 2
    elif any(d.usage > limits.warn for _, d in ledger):
        pressure = 1
    else:
        pressure = 0
    return DiskVerdict(
        full=tuple(ledger_full),
        other_full=tuple(other_full),
        writable=writable,
        high_priority_writes=high_priority,
        almost_full=almost,
        ledger_pressure=pressure,
    )


class DiskChecker:
    """Checks the storage's directories every ``interval_ms`` on a daemon thread and hands each
    verdict to ``on_verdict`` (the bookie). ``check()`` runs one check now."""

    def __init__(
        self,
        storage: LedgerStorage,
        limits: DiskThresholds,
        interval_ms: int,
        on_verdict: Callable[[DiskVerdict], None],
    ) -> None:
        self._storage = storage
        self._limits = limits
        self._interval_s = interval_ms / 1000.0
        self._on_verdict = on_verdict
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._was_full: list[bool] = []
        self.last: DiskVerdict | None = None
        self.checks = 0

    def start(self) -> None:
        """Start the periodic checks (idempotent)."""
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="pybkx-disk-checker", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the checks; waits for a check in progress. Idempotent, never raises."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(10.0)

    def check(self) -> DiskVerdict:
        """Check now: mark full ledger directories in the storage, log what changed, return the
        verdict (``on_verdict`` is not called). Raises BookieException when a directory cannot
        be examined.

        The storage reports a space reserve given back while the disk was full as used, so the
        verdict never turns writable on the reserve's bytes; once the usage has fallen below the
        low-water mark the reserve is made again first, and the bookie stays read-only while it
        does not fit. A full journal or index directory counts as full pressure too (the reserve
        is given back for the checkpoints that free the journal)."""
        with self._lock:
            rows = self._storage.directory_usage()
            dirs = [DirUsage(r.kind, r.path, r.total_bytes, r.free_bytes) for r in rows]
            verdict = evaluate(dirs, self._was_full, self._limits)
            if verdict.writable and not self._storage.restore_space_reserve():
                verdict = dataclasses.replace(
                    verdict,
                    full=tuple(True for _ in verdict.full),
                    writable=False,
                    ledger_pressure=2,
                )
            self._log_changes(dirs, verdict)
            self._storage.set_full_ledger_dirs(list(verdict.full))
            pressure = 2 if any(verdict.other_full) else verdict.ledger_pressure
            self._storage.set_disk_pressure(pressure)
            self._was_full = list(verdict.full) + list(verdict.other_full)
            self.last = verdict
            self.checks += 1
            return verdict

    def _log_changes(self, dirs: Sequence[DirUsage], verdict: DiskVerdict) -> None:
        now = list(verdict.full) + list(verdict.other_full)
        for i, d in enumerate(dirs):
            was = self._was_full[i] if i < len(self._was_full) else False
            if now[i] and not was:
                logger.error(
                    "%s directory %s is full: usage %.3f > diskUsageThreshold %.3f",
                    d.kind,
                    d.path,
                    d.usage,
                    self._limits.threshold,
                )
            elif was and not now[i]:
                logger.warning(
                    "%s directory %s is writable again: usage %.3f", d.kind, d.path, d.usage
                )
        for path in verdict.almost_full:
            if self.last is None or path not in self.last.almost_full:
                logger.warning(
                    "directory %s is almost full (past diskUsageWarnThreshold %.3f)",
                    path,
                    self._limits.warn,
                )

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            try:
                verdict = self.check()
            except Exception as exc:  # a failed check must not end the checker
                logger.error("disk check failed: %s: %s", type(exc).__name__, exc)
                continue
            try:
                self._on_verdict(verdict)
            except Exception as exc:
                logger.error("acting on a disk check failed: %s: %s", type(exc).__name__, exc)
