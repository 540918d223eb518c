"""The embedded store's session: its directory, SQLite connections and short transactions (a
fair queue of writers per process), schema creation, fork safety and the session file. Every
concern of the store builds on it; it must never call a watcher under a db lock."""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import sqlite3
import threading
import time
import uuid
import weakref
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Protocol

from pybkx import errors
from pybkx.meta.embedded.liveness import (
    SESSION_NAME,
    Owner,
    file_locked,
    hold_session_file,
    session_held,
)
from pybkx.meta.ledger_metadata import LedgerMetadata
from pybkx.meta.types import (
    BookiesWatcher,
    LedgerWatcher,
    Versioned,
)

logger = logging.getLogger(__name__)

DEFAULT_POLL_INTERVAL_MS: Final = 50
"""How often the watch thread looks for changes (conf ``embeddedPollIntervalMs``)."""

DEFAULT_BUSY_TIMEOUT_MS: Final = 10_000
"""How long a statement waits for another connection's write lock (conf
``embeddedBusyTimeoutMs``) before failing with MetaStoreException."""

FIRST_LEDGER_ID: Final = 0
"""The first id ``generate_ledger_id`` hands out in a new directory."""

MAX_LEDGER_ID: Final = 2**63 - 1
"""Ids are signed 64-bit: ``0..MAX_LEDGER_ID``; the counter hands out ids below it."""

_SCHEMA_VERSION: Final = "1"
_DB_NAME: Final = "metadata.db"
_LOCK_DIR: Final = "locks"
_SESSION_DIR: Final = "sessions"
_STALE_TMP_S: Final = 3600.0
_SWEEP_LIMIT: Final = 10_000
_MAX_IDLE_CONNECTIONS: Final = 4
LIST_PAGE_SIZE: Final = 1000
SQL_IN_CHUNK: Final = 500  # well under SQLite's limit of bound parameters
LOCK_BACKOFF_MIN_S: Final = 0.002
LOCK_BACKOFF_MAX_S: Final = 0.05
HOLDER_READ_ATTEMPTS: Final = 20

_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS ledgers (
    ledger_id INTEGER PRIMARY KEY,
    data BLOB NOT NULL,
    version INTEGER NOT NULL,
    ctime_ms INTEGER NOT NULL,
    mzxid INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS bookies (
    bookie_id TEXT PRIMARY KEY,
    read_only INTEGER NOT NULL,
    info BLOB NOT NULL,
    session TEXT NOT NULL,
    owner_pid INTEGER NOT NULL,
    owner_start INTEGER NOT NULL,
    owner_boot TEXT NOT NULL,
    mzxid INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS underreplicated (
    ledger_id INTEGER PRIMARY KEY,
    replicas TEXT NOT NULL,
    ctime_ms INTEGER NOT NULL,
    version INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS cookies (
    bookie_id TEXT PRIMARY KEY,
    data BLOB NOT NULL,
    version INTEGER NOT NULL
);
INSERT OR IGNORE INTO counters (name, value) VALUES ('zxid', 0);
INSERT OR IGNORE INTO counters (name, value) VALUES ('next_ledger_id', 0);
INSERT OR IGNORE INTO meta (key, value) VALUES ('schema_version', '1');
"""


class _FairLock:
    """A first-come first-served mutex. A plain Lock lets a thread that releases it take it back
    at once, so one busy writer could starve the others until their timeout."""

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._held = False
        # Bounded by the threads of this process: each waits in at most one acquire at a time.
        self._waiters: deque[threading.Lock] = deque()

    def acquire(self, timeout: float) -> bool:
        with self._mutex:
            if not self._held:
                self._held = True
                return True
            waiter = threading.Lock()
            waiter.acquire()
            self._waiters.append(waiter)
        if waiter.acquire(timeout=timeout):
            return True  # handed over by release()
        with self._mutex:
            if waiter in self._waiters:
                self._waiters.remove(waiter)
                return False
        return True  # handed over just as the wait timed out: ours all the same

    def release(self) -> None:
        with self._mutex:
            if self._waiters:
                self._waiters.popleft().release()  # ownership passes on; _held stays True
            else:
                self._held = False


_WRITE_GATES: dict[str, _FairLock] = {}
_WRITE_GATES_LOCK = threading.Lock()


def _write_gate(db_path: Path) -> _FairLock:
    """The process-wide queue of writers to one db: threads take turns in order instead of
    polling SQLite's busy handler (which sleeps up to 100 ms between tries and is unfair)."""
    with _WRITE_GATES_LOCK:
        return _WRITE_GATES.setdefault(str(db_path.resolve()), _FairLock())


def _forget_write_gates_in_child() -> None:
    # A gate held by a parent thread at fork time would never be released in the child.
    global _WRITE_GATES_LOCK
    _WRITE_GATES_LOCK = threading.Lock()
    _WRITE_GATES.clear()


os.register_at_fork(after_in_child=_forget_write_gates_in_child)


@dataclass(eq=False)
class Registration:
    bookie_id: str
    read_only: bool
    session: str
    owner: Owner


@dataclass(eq=False)
class LedgerWatch:
    ledger_id: int
    watcher: LedgerWatcher
    last_mzxid: int | None  # the state the watcher knows; None: no such ledger
    active: bool = True


UNREADABLE: Final[Versioned[LedgerMetadata]] = Versioned(
    LedgerMetadata(1, 1, 1, {0: ("unreadable:0",)}), -1
)
"""Marks a ledger state the watch thread could not parse (never given to a watcher)."""


@dataclass(eq=False)
class BookiesWatch:
    watcher: BookiesWatcher
    last: tuple[frozenset[str], frozenset[str]]
    active: bool = True


def _directory_from_uri(uri: str) -> Path:
    scheme, sep, rest = uri.partition("://")
    if scheme.lower() != "embedded" or not sep:
        raise ValueError(f"not an embedded metadata URI: {uri!r}; use embedded:///abs/dir")
    if not rest.startswith("/"):
        raise ValueError(
            f"the embedded metadata URI {uri!r} must name an absolute directory: "
            "embedded:///abs/dir"
        )
    return Path(os.path.normpath(rest))


def _conf_ms(conf: dict[str, Any], key: str, default: int) -> float:
    value = conf.get(key, default)
    try:
        ms = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"invalid {key}: {value!r} (milliseconds)") from None
    if ms <= 0:
        raise ValueError(f"invalid {key}: {value!r} (must be > 0 ms)")
    return ms


def check_ledger_id(ledger_id: int) -> None:
    if not 0 <= ledger_id <= MAX_LEDGER_ID:
        raise errors.IncorrectParameterException(f"ledger id {ledger_id} out of 0..2^63-1")


# The same names as the ZooKeeper backend accepts, so a setup moves between backends unchanged.


class Releasable(Protocol):
    """A held lock file the session releases when it closes (``locks.HeldFlock``)."""

    def release(self) -> None: ...


class Cancellable(Protocol):
    """An election the session cancels when it closes (``locks.FlockElection``)."""

    def cancel(self) -> None: ...


class EmbeddedSession:
    """What every part of the embedded store shares: directory, connections, session."""

    uri: str

    def __init__(self, uri: str, **conf: Any) -> None:
        self.uri = uri
        self.directory = _directory_from_uri(uri)
        self._poll_interval_s = _conf_ms(conf, "embeddedPollIntervalMs", DEFAULT_POLL_INTERVAL_MS)
        self._poll_interval_s /= 1000
        self._busy_timeout_s = _conf_ms(conf, "embeddedBusyTimeoutMs", DEFAULT_BUSY_TIMEOUT_MS)
        self._busy_timeout_s /= 1000
        self._db_path = self.directory / _DB_NAME
        self._lock_dir = self.directory / _LOCK_DIR
        self._session_dir = self.directory / _SESSION_DIR

        self._lock = threading.Lock()  # guards everything below that changes after __init__
        self._pid = os.getpid()
        self._session = uuid.uuid4().hex
        self._session_fd: int | None = None  # held from the first registration on
        self._owner = Owner.this_process()
        self._closing = False
        self._closed = False
        self._idle: list[sqlite3.Connection] = []
        self._held: set[Releasable] = set()
        self._elections: weakref.WeakSet[Cancellable] = weakref.WeakSet()
        self._ledger_watches: list[LedgerWatch] = []
        self._bookies_watches: list[BookiesWatch] = []
        self._rescan = True
        self._stop = threading.Event()
        self._poller: threading.Thread | None = None
        # Only the watch thread touches these.
        self._seen_zxid = -1
        self._seen_registrations: list[Registration] = []
        self._last_poll_error = ""

        try:
            self._lock_dir.mkdir(parents=True, exist_ok=True)
            self._session_dir.mkdir(exist_ok=True)
        except OSError as exc:
            raise errors.MetaStoreException(
                f"cannot create the embedded metadata directory {self.directory}: "
                f"{exc.strerror or exc}"
            ) from None
        self._write_gate = _write_gate(self._db_path)
        self._create_schema()
        self._sweep_session_files()

    def __repr__(self) -> str:
        return f"EmbeddedMetadataStore({self.uri!r})"

    # --- connections and transactions ---------------------------------------------------------

    def _closed_error(self) -> errors.ClientClosedException:
        return errors.ClientClosedException(f"metadata store {self.uri} is closed")

    def _failure(self, what: str, exc: BaseException) -> errors.BKException:
        if self._closed:
            return self._closed_error()
        text = " ".join(str(exc).split()) or type(exc).__name__
        return errors.MetaStoreException(
            f"embedded metadata store {self.directory}: {what} failed: {text}"
        )

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(
            self._db_path,
            timeout=self._busy_timeout_s,
            isolation_level=None,  # autocommit; transactions are explicit BEGIN ... COMMIT
            check_same_thread=False,  # pooled: one thread at a time, close() from any thread
        )
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout_s * 1000)}")
            conn.execute("PRAGMA synchronous = FULL")
        except BaseException:
            conn.close()
            raise
        return conn

    def _check_fork(self) -> None:
        """In a forked child, forget the parent's connections, locks, watches and session (the
        parent keeps them); called under ``_lock``."""
        if os.getpid() == self._pid:
            return
        self._pid = os.getpid()
        self._session = uuid.uuid4().hex
        self._owner = Owner.this_process()
        if self._session_fd is not None:
            # Closing our copy leaves the parent's lock alone (it holds the same file open).
            os.close(self._session_fd)
            self._session_fd = None
        self._write_gate = _write_gate(self._db_path)
        self._idle = []  # never close them here: they belong to the parent
        self._held = set()
        self._elections = weakref.WeakSet()
        self._ledger_watches = []
        self._bookies_watches = []
        self._poller = None
        self._stop = threading.Event()

    def _acquire_connection(self, what: str) -> sqlite3.Connection:
        with self._lock:
            if self._closed:
                raise self._closed_error()
            self._check_fork()
            if self._idle:
                return self._idle.pop()
        try:
            return self._connect()
        except sqlite3.Error as exc:
            raise self._failure(what, exc) from exc

    def _release_connection(self, conn: sqlite3.Connection) -> None:
        with self._lock:
            if (
                not self._closed
                and not conn.in_transaction
                and len(self._idle) < _MAX_IDLE_CONNECTIONS
            ):
                self._idle.append(conn)
                return
        with contextlib.suppress(sqlite3.Error):
            conn.close()

    @contextlib.contextmanager
    def _txn(self, what: str, *, write: bool = False) -> Iterator[sqlite3.Connection]:
        """One short transaction; write transactions take the write lock up front (BEGIN
        IMMEDIATE) so they wait in the busy handler instead of failing on upgrade."""
        gate = self._write_gate if write else None
        if gate is not None and not gate.acquire(self._busy_timeout_s):
            raise errors.MetaStoreException(
                f"embedded metadata store {self.directory}: {what} failed: other threads kept "
                f"the db busy for {self._busy_timeout_s:g} s"
            )
        try:
            conn = self._acquire_connection(what)
            try:
                try:
                    conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
                    yield conn
                    conn.execute("COMMIT")
                except sqlite3.Error as exc:
                    raise self._failure(what, exc) from exc
                finally:
                    if conn.in_transaction:
                        with contextlib.suppress(sqlite3.Error):
                            conn.execute("ROLLBACK")
            finally:
                self._release_connection(conn)
        finally:
            if gate is not None:
                gate.release()

    @staticmethod
    def _bump_zxid(conn: sqlite3.Connection) -> int:
        conn.execute("UPDATE counters SET value = value + 1 WHERE name = 'zxid'")
        row = conn.execute("SELECT value FROM counters WHERE name = 'zxid'").fetchone()
        return int(row[0])

    def _create_schema(self) -> None:
        # Switching to WAL needs the db to itself: serialise first opens across processes.
        try:
            fd = os.open(self.directory / "init.lock", os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise errors.MetaStoreException(
                f"cannot open {self.directory / 'init.lock'}: {exc.strerror or exc}"
            ) from None
        try:
            deadline = time.monotonic() + self._busy_timeout_s
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise errors.MetaStoreException(
                            f"embedded metadata store {self.directory}: another process kept "
                            f"init.lock for {self._busy_timeout_s:g} s"
                        ) from None
                    time.sleep(LOCK_BACKOFF_MIN_S)
            conn = self._connect()
            try:
                mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
                if str(mode).lower() != "wal":
                    raise sqlite3.OperationalError(f"journal_mode is {mode}, WAL unavailable")
                # executescript commits a pending transaction first: BEGIN inside the script.
                conn.executescript("BEGIN IMMEDIATE;" + _SCHEMA)
                row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
                if row[0] != _SCHEMA_VERSION:
                    raise sqlite3.DatabaseError(
                        f"schema version {row[0]} is not {_SCHEMA_VERSION} (a newer pybkx?)"
                    )
                if conn.in_transaction:
                    conn.execute("COMMIT")
            finally:
                if conn.in_transaction:
                    with contextlib.suppress(sqlite3.Error):
                        conn.execute("ROLLBACK")
                conn.close()
        except sqlite3.Error as exc:
            raise self._failure(f"opening {self._db_path}", exc) from exc
        finally:
            os.close(fd)  # releases the flock

    def _sweep_session_files(self) -> None:
        """Delete the files of ended sessions (their processes died without closing)."""
        now = time.time()
        try:
            with os.scandir(self._session_dir) as entries:
                for _, entry in zip(range(_SWEEP_LIMIT), entries, strict=False):
                    name = entry.name
                    if SESSION_NAME.fullmatch(name):
                        stale = session_held(self._session_dir, name) is False
                    else:
                        # A creator died between creating and renaming. Its lock says it
                        # lives (taken right after creating), so a wall-clock jump that makes
                        # the file look old cannot remove it under a live creator.
                        stale = (
                            name.endswith(".tmp")
                            and now - entry.stat().st_mtime > _STALE_TMP_S
                            and file_locked(entry.path) is False
                        )
                    if stale:
                        with contextlib.suppress(FileNotFoundError):
                            os.unlink(entry.path)
        except OSError as exc:
            logger.debug("sweeping %s: %s", self._session_dir, exc)

    def _hold_session(self) -> tuple[str, Owner]:
        """This store's session id and owner, its session file held (created on first use)."""
        with self._lock:
            self._check_fork()
            if self._session_fd is None:
                if self._closing:
                    raise self._closed_error()
                try:
                    self._session_fd = hold_session_file(self._session_dir, self._session)
                except OSError as exc:
                    raise errors.MetaStoreException(
                        f"cannot create a session file in {self._session_dir}: "
                        f"{exc.strerror or exc}"
                    ) from None
            return self._session, self._owner
