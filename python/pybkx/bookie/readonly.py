"""The bookie's read-only state machine: whether normal adds are taken, who may move that (an
operator, the disk checker, ``forceReadOnlyBookie``, ``readOnlyModeEnabled``), and the
registration and ``BOOKIE_STATUS`` that follow every move. It never stops the bookie (a halt is
handed to the lifecycle) and never reads the disks (the disk checker does)."""

# The states, as BookKeeper's state manager has them:
#   writable            adds taken; the registration is under available/.
#   read-only (manual)  an operator's choice (or forceReadOnlyBookie, or a persisted manual
#                       state): only an operator turns it back (never with forceReadOnlyBookie).
#   read-only (disks)   the disk checker found every ledger directory full: the checker turns it
#                       back once they have room; an operator may too.
# The moves:
#   operator   set(read_only): refused leaving with forceReadOnlyBookie, entering with
#              readOnlyModeEnabled=false; a registration that cannot move undoes the move.
#   disks full writable -> read-only (disks); with readOnlyModeEnabled=false a halt instead.
#   room again read-only (disks) -> writable.
# The server's mode is the state (the Rust server refuses adds by it); this class keeps only who
# set it, moves the registration after it (retried at the next disk check when the store
# failed) and persists it with persistBookieStatusEnabled.

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable

from pybkx._core import BookieServer
from pybkx.bookie.disks import DiskVerdict
from pybkx.bookie.events import log_event
from pybkx.bookie.exceptions import BookieError
from pybkx.bookie.registration import Registration, StartWait
from pybkx.bookie.status import read_status, write_status
from pybkx.config import ServerConfig

__all__ = ["ReadOnlyMode"]

logger = logging.getLogger(__name__)


class ReadOnlyMode:
    """The read-only state of one running bookie: its ``server``'s mode, the ``registration``
    showing it (None when standalone), ``on_halt(reason)`` asked when the disks are full and
    the bookie may not go read-only. Thread-safe: moves are serialised with each other and with
    ``close()``."""

    def __init__(
        self,
        config: ServerConfig,
        server: BookieServer,
        bookie_id: str,
        registration: Registration | None,
        on_halt: Callable[[str], None],
    ) -> None:
        self._config = config
        self._server: BookieServer | None = server
        self._bookie_id = bookie_id
        self._registration = registration
        self._on_halt = on_halt
        # The server's mode and the registration move together, never beside a stop.
        self._lock = threading.Lock()
        # Read-only because the disk checker found the disks full (it alone turns it back).
        self._by_disks = False

    # --- the start: before the bookie serves

    def enter_if_disks_full(self, first: DiskVerdict | None) -> None:
        """Start read-only when the first disk check (None: it failed) found the disks full.
        Raises BookieError when ``readOnlyModeEnabled=false`` forbids it (the bookie must then
        not start)."""
        if first is None or first.writable:
            return
        if not self._config.read_only_mode_enabled:
            raise BookieError(
                "no writable ledger directory (disks past diskUsageThreshold) and "
                "readOnlyModeEnabled=false"
            )
        with self._lock:
            server = self._running()
            server.set_read_only(True)
            server.set_high_priority_writes(first.high_priority_writes)
            self._by_disks = True
        log_event(logger, logging.WARNING, "disks full: starting read-only")

    def restore_persisted(self) -> None:
        """With ``persistBookieStatusEnabled``, start read-only when the persisted state says so
        (as BookKeeper's state manager; ``forceReadOnlyBookie`` already decided otherwise). A
        state the disk checker set may be undone by it once the disks have room; an operator's
        stays until an operator changes it."""
        config = self._config
        if not config.persist_bookie_status_enabled or config.force_read_only_bookie:
            return
        saved = read_status(config.ledger_directories)
        if saved is None or not saved.read_only or not config.read_only_mode_enabled:
            return
        with self._lock:
            self._running().set_read_only(True)
            self._by_disks = not saved.manual
        log_event(
            logger,
            logging.WARNING,
            "starting read-only as persisted in BOOKIE_STATUS",
            set_by="operator" if saved.manual else "disk checker",
        )

    def register(self, wait: StartWait) -> None:
        """Make the registration (if any), showing the current mode, within ``wait``. Raises
        BookieError, StartInterrupted."""
        with self._lock:
            server = self._running()
            if self._registration is not None:
                self._registration.register(server.is_read_only(), wait)

    # --- the moves

    def set(self, read_only: bool) -> None:
        """An operator's move: enter (True) or leave (False) read-only mode, the registration
        following. Idempotent. Raises BookieError if the bookie is not running, when leaving is
        forbidden by ``forceReadOnlyBookie``, when entering is forbidden by
        ``readOnlyModeEnabled=false``, or when the registration cannot be moved (the server's
        mode is then restored)."""
        with self._lock:
            server = self._running()
            if server.is_read_only() == read_only:
                return
            if not read_only and self._config.force_read_only_bookie:
                raise BookieError("forceReadOnlyBookie=true: the bookie stays read-only")
            if read_only and not self._config.read_only_mode_enabled:
                raise BookieError("readOnlyModeEnabled=false: the bookie cannot go read-only")
            server.set_read_only(read_only)
            registration = self._registration
            if registration is not None and registration.registered:
                try:
                    registration.register(read_only)
                except BookieError:
                    server.set_read_only(not read_only)
                    raise
            self._by_disks = False  # an operator's choice: the disk checker keeps it
            self._persist(read_only, manual=True)
            log_event(
                logger,
                logging.INFO,
                "bookie is read-only" if read_only else "bookie is writable",
                bookie_id=self._bookie_id,
            )

    def on_disk_verdict(self, verdict: DiskVerdict) -> None:
        """The disk checker's move (on its thread): read-only when the disks are full (or a halt,
        with ``readOnlyModeEnabled=false``), writable again when they have room and the checker
        was what made the bookie read-only. A registration that could not be moved is moved at
        a later check. Never raises."""
        halt = ""
        with self._lock:
            server = self._server
            if server is None:
                return
            server.set_high_priority_writes(verdict.high_priority_writes)
            read_only = server.is_read_only()
            if not verdict.writable and not read_only:
                halt = self._disks_full(server, verdict)
            elif (
                verdict.writable
                and read_only
                and self._by_disks
                and not self._config.force_read_only_bookie
            ):
                self._disks_have_room(server, verdict)
            if not halt:
                self._registration_follows(server)
        if halt:
            self._on_halt(halt)

    def close(self) -> None:
        """The bookie stops: wait for a move in progress; none is made after. Idempotent."""
        with self._lock:
            self._server = None

    # --- helpers (under the lock)

    def _running(self) -> BookieServer:
        if self._server is None:
            raise BookieError("the bookie is not running")
        return self._server

    def _disks_full(self, server: BookieServer, verdict: DiskVerdict) -> str:
        """Writable -> read-only (disks); the halt's reason instead when the bookie may not go
        read-only ("" otherwise)."""
        if not self._config.read_only_mode_enabled:
            return "every ledger directory is full and readOnlyModeEnabled=false: shutting down"
        server.set_read_only(True)
        self._by_disks = True
        self._persist(True, manual=False)
        log_event(
            logger,
            logging.WARNING,
            "disks full: bookie is read-only",
            bookie_id=self._bookie_id,
            writable_dirs=verdict.writable_dirs,
            high_priority_writes=verdict.high_priority_writes,
        )
        return ""

    def _disks_have_room(self, server: BookieServer, verdict: DiskVerdict) -> None:
        """Read-only (disks) -> writable."""
        server.set_read_only(False)
        self._by_disks = False
        self._persist(False, manual=False)
        log_event(
            logger,
            logging.INFO,
            "disks have room again: bookie is writable",
            bookie_id=self._bookie_id,
            writable_dirs=verdict.writable_dirs,
        )

    def _registration_follows(self, server: BookieServer) -> None:
        """Move the registration to the server's mode if it shows another (a failed move is
        logged and retried at the next check)."""
        registration = self._registration
        wanted = server.is_read_only()
        if (
            registration is not None
            and registration.registered
            and registration.shows_read_only != wanted
        ):
            with contextlib.suppress(BookieError):
                registration.register(wanted)

    def _persist(self, read_only: bool, manual: bool) -> None:
        """Record a change of state with ``persistBookieStatusEnabled`` (best effort, logged)."""
        if self._config.persist_bookie_status_enabled:
            write_status(self._config.ledger_directories, read_only, manual)
