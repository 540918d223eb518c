"""The embedded metadata store: ledgers, registrations, cookies, locks in one local directory.
It is for the processes of one machine only; it must never call a watcher under a db lock."""

# Layout of ``embedded:///dir``:
#
#   dir/metadata.db    SQLite in WAL mode (synchronous=FULL: a committed ledger creation or
#                      close survives power loss, like a ZooKeeper write). Tables: ``ledgers``
#                      (ledger metadata V3 bytes, exactly as the ZooKeeper backend stores them),
#                      ``bookies`` (registrations), ``cookies``, ``meta`` (instance id, schema
#                      version) and ``counters`` (the next ledger id, the change counter ``zxid``).
#   dir/locks/         one file per lock or election name, held with ``flock``.
#   dir/sessions/      one file per session that registered a bookie, held with ``flock``
#                      while the store is open.
#   dir/init.lock      serialises schema creation between processes opening a new directory.
#
# Versions are znode-like: a row is created at version 0 and every write adds 1. Every write
# that a watcher could see also bumps ``zxid`` and stamps the row with it (``mzxid``), so the
# watch thread polls one row and compares stamps, and a delete-then-create is still a change.
#
# Ephemerality: a registration row names its session (one per store object) and the owner
# process (pid, start time from /proc/<pid>/stat field 22, boot id). It is live while the
# session file is locked (the kernel drops the lock when the store closes or its process
# dies, even by SIGKILL) and the owner process runs (not a zombie, not from another boot).
# Dead rows are absent to every reader and deleted lazily; ``close()`` deletes its own. This
# only works for processes of one machine in one pid namespace (one host or one container).
#
# Writers of one process queue in a FIFO gate before SQLite's write lock; writers of
# different processes meet in SQLite's busy handler (``embeddedBusyTimeoutMs``).
#
# Ledger ids come from a counter in the db starting at 0, like the sequential znodes of
# BookKeeper's ZkLedgerIdGenerator; it only grows, also across ``format()``, so an id is never
# handed out twice by one directory.

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import logging
import os
import random
import re
import sqlite3
import threading
import time
import uuid
import weakref
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Final

from pybkx import errors
from pybkx.meta import serde
from pybkx.meta.base import (
    BookieServiceInfo,
    BookiesWatcher,
    Cookie,
    Election,
    LedgerWatcher,
    MetadataStore,
    Versioned,
    check_bookie_id,
    check_name,
)
from pybkx.meta.ledger_metadata import LedgerMetadata

__all__ = [
    "DEFAULT_BUSY_TIMEOUT_MS",
    "DEFAULT_POLL_INTERVAL_MS",
    "FIRST_LEDGER_ID",
    "MAX_LEDGER_ID",
    "EmbeddedMetadataStore",
]

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
_SESSION_NAME: Final = re.compile(r"[0-9a-f]{32}")
_STALE_TMP_S: Final = 3600.0
_SWEEP_LIMIT: Final = 10_000
_MAX_IDLE_CONNECTIONS: Final = 4
_LIST_PAGE_SIZE: Final = 1000
_SQL_IN_CHUNK: Final = 500  # well under SQLite's limit of bound parameters
_LOCK_BACKOFF_MIN_S: Final = 0.002
_LOCK_BACKOFF_MAX_S: Final = 0.05
_HOLDER_READ_ATTEMPTS: Final = 20

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
CREATE TABLE IF NOT EXISTS cookies (
    bookie_id TEXT PRIMARY KEY,
    data BLOB NOT NULL,
    version INTEGER NOT NULL
);
INSERT OR IGNORE INTO counters (name, value) VALUES ('zxid', 0);
INSERT OR IGNORE INTO counters (name, value) VALUES ('next_ledger_id', 0);
INSERT OR IGNORE INTO meta (key, value) VALUES ('schema_version', '1');
"""


# --- process liveness -------------------------------------------------------------------------


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
class _Owner:
    """The process owning an ephemeral row."""

    pid: int
    start: int
    boot: str

    @classmethod
    def this_process(cls) -> _Owner:
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


def _session_held(directory: Path, session: str) -> bool | None:
    """Whether some open store still holds the session's file: True, False, or None when it
    cannot be told (then the owner's pid decides alone)."""
    if not _SESSION_NAME.fullmatch(session):
        return False
    try:
        fd = os.open(directory / session, os.O_RDONLY)
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


def _hold_session_file(directory: Path, session: str) -> int:
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


class _FairLock:
    """A first-come first-served mutex. A plain Lock lets a thread that releases it take it back
    at once, so one busy writer could starve the others until their timeout."""

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._held = False
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


# --- the store --------------------------------------------------------------------------------


@dataclass(eq=False)
class _Registration:
    bookie_id: str
    read_only: bool
    session: str
    owner: _Owner


@dataclass(eq=False)
class _LedgerWatch:
    ledger_id: int
    watcher: LedgerWatcher
    last_mzxid: int | None  # the state the watcher knows; None: no such ledger
    active: bool = True


_UNREADABLE: Final[Versioned[LedgerMetadata]] = Versioned(
    LedgerMetadata(1, 1, 1, {0: ("unreadable:0",)}), -1
)
"""Marks a ledger state the watch thread could not parse (never given to a watcher)."""


@dataclass(eq=False)
class _BookiesWatch:
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


def _check_ledger_id(ledger_id: int) -> None:
    if not 0 <= ledger_id <= MAX_LEDGER_ID:
        raise errors.IncorrectParameterException(f"ledger id {ledger_id} out of 0..2^63-1")


# The same names as the ZooKeeper backend accepts, so a setup moves between backends unchanged.


class EmbeddedMetadataStore(MetadataStore):
    """The metadata store of ``embedded:///abs/dir``: SQLite (WAL) plus lock files there.

    Several processes of one machine may open the same directory at once; each store object is
    one session (its registrations vanish on ``close()`` or when its process dies). Conf keys:
    ``embeddedPollIntervalMs`` (watch polling, default 50) and ``embeddedBusyTimeoutMs`` (wait
    for another writer, default 10000); other keys are ignored. Raises ValueError for a URI that
    is not ``embedded:///abs/dir``, MetaStoreException if the directory or db cannot be opened.
    Every method raises MetaStoreException when SQLite fails (one line: the directory, the
    operation and SQLite's message), and ClientClosedException after ``close()``.
    """

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
        self._owner = _Owner.this_process()
        self._closing = False
        self._closed = False
        self._idle: list[sqlite3.Connection] = []
        self._held: set[_HeldFlock] = set()
        self._elections: weakref.WeakSet[_FlockElection] = weakref.WeakSet()
        self._ledger_watches: list[_LedgerWatch] = []
        self._bookies_watches: list[_BookiesWatch] = []
        self._rescan = True
        self._stop = threading.Event()
        self._poller: threading.Thread | None = None
        # Only the watch thread touches these.
        self._seen_zxid = -1
        self._seen_registrations: list[_Registration] = []
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
        self._owner = _Owner.this_process()
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
                    time.sleep(_LOCK_BACKOFF_MIN_S)
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
                    if _SESSION_NAME.fullmatch(name):
                        stale = _session_held(self._session_dir, name) is False
                    else:  # a creator died between creating and renaming
                        stale = name.endswith(".tmp") and now - entry.stat().st_mtime > _STALE_TMP_S
                    if stale:
                        with contextlib.suppress(FileNotFoundError):
                            os.unlink(entry.path)
        except OSError as exc:
            logger.debug("sweeping %s: %s", self._session_dir, exc)

    def _hold_session(self) -> tuple[str, _Owner]:
        """This store's session id and owner, its session file held (created on first use)."""
        with self._lock:
            self._check_fork()
            if self._session_fd is None:
                if self._closing:
                    raise self._closed_error()
                try:
                    self._session_fd = _hold_session_file(self._session_dir, self._session)
                except OSError as exc:
                    raise errors.MetaStoreException(
                        f"cannot create a session file in {self._session_dir}: "
                        f"{exc.strerror or exc}"
                    ) from None
            return self._session, self._owner

    # --- cluster ------------------------------------------------------------------------------

    def init_new_cluster(self) -> bool:
        """Create the instance id (a uuid4 string) if absent; True if this call created it."""
        with self._txn("init_new_cluster", write=True) as c:
            if c.execute("SELECT 1 FROM meta WHERE key = 'instance_id'").fetchone():
                return False
            c.execute(
                "INSERT INTO meta (key, value) VALUES ('instance_id', ?)", (str(uuid.uuid4()),)
            )
            return True

    def is_initialized(self) -> bool:
        with self._txn("is_initialized") as c:
            return c.execute("SELECT 1 FROM meta WHERE key = 'instance_id'").fetchone() is not None

    def instance_id(self) -> str:
        """The cluster's instance id. Raises MetaStoreException if not initialised."""
        with self._txn("instance_id") as c:
            row = c.execute("SELECT value FROM meta WHERE key = 'instance_id'").fetchone()
        if row is None:
            raise errors.MetaStoreException(
                f"the cluster in {self.uri} is not initialised (no instance id): "
                "run init_new_cluster (pybkx shell initnewcluster) first"
            )
        return str(row[0])

    def format(self) -> None:
        """Delete every ledger, registration (live ones too) and cookie, and give the cluster a
        new instance id. The ledger id counter keeps counting: ids are never reused."""
        with self._txn("format", write=True) as c:
            c.execute("DELETE FROM ledgers")
            c.execute("DELETE FROM bookies")
            c.execute("DELETE FROM cookies")
            c.execute(
                "INSERT OR REPLACE INTO meta (key, value) VALUES ('instance_id', ?)",
                (str(uuid.uuid4()),),
            )
            self._bump_zxid(c)

    # --- ledgers ------------------------------------------------------------------------------

    def generate_ledger_id(self) -> int:
        """The next value of the directory's ledger id counter (0, 1, 2, ...: never reused, also
        after deletes and ``format``). Raises LedgerIdOverflowException once it reaches
        MAX_LEDGER_ID."""
        with self._txn("generate_ledger_id", write=True) as c:
            row = c.execute("SELECT value FROM counters WHERE name = 'next_ledger_id'").fetchone()
            ledger_id = int(row[0])
            if ledger_id >= MAX_LEDGER_ID:
                raise errors.LedgerIdOverflowException(
                    f"the ledger id counter of {self.uri} is exhausted ({ledger_id})"
                )
            c.execute(
                "UPDATE counters SET value = ? WHERE name = 'next_ledger_id'", (ledger_id + 1,)
            )
            return ledger_id

    def create_ledger_metadata(
        self, ledger_id: int, metadata: LedgerMetadata
    ) -> Versioned[LedgerMetadata]:
        """Store a new ledger's metadata at version 0. Format 3 metadata gets a random creator
        token (``c_token``), as the ZooKeeper backend gives it. Raises LedgerExistException,
        IncorrectParameterException for an id outside 0..2^63-1, MetadataSerializationException.
        """
        _check_ledger_id(ledger_id)
        if metadata.metadata_format_version > 2:
            metadata = metadata.replace(c_token=random.randrange(1, MAX_LEDGER_ID))
        data = serde.serialize_ledger_metadata(metadata)
        with self._txn(f"create_ledger_metadata({ledger_id})", write=True) as c:
            if c.execute("SELECT 1 FROM ledgers WHERE ledger_id = ?", (ledger_id,)).fetchone():
                raise errors.LedgerExistException(f"ledger {ledger_id} already exists")
            zxid = self._bump_zxid(c)
            c.execute(
                "INSERT INTO ledgers (ledger_id, data, version, ctime_ms, mzxid) "
                "VALUES (?, ?, 0, ?, ?)",
                (ledger_id, data, int(time.time() * 1000), zxid),
            )
        return Versioned(metadata, 0)

    def read_ledger_metadata(self, ledger_id: int) -> Versioned[LedgerMetadata]:
        """Raises NoSuchLedgerExistsOnMetadataServerException, MetadataSerializationException,
        IncorrectParameterException."""
        _check_ledger_id(ledger_id)
        with self._txn(f"read_ledger_metadata({ledger_id})") as c:
            row = c.execute(
                "SELECT data, version FROM ledgers WHERE ledger_id = ?", (ledger_id,)
            ).fetchone()
        if row is None:
            raise errors.NoSuchLedgerExistsOnMetadataServerException(
                f"ledger {ledger_id} has no metadata in {self.uri}"
            )
        return Versioned(serde.parse_ledger_metadata(bytes(row[0])), int(row[1]))

    def write_ledger_metadata(
        self, ledger_id: int, metadata: LedgerMetadata, expected_version: int
    ) -> Versioned[LedgerMetadata]:
        """Compare-and-set: store ``metadata`` if the stored version is ``expected_version``;
        the result carries the next version. Raises MetadataVersionException,
        NoSuchLedgerExistsOnMetadataServerException, IncorrectParameterException."""
        _check_ledger_id(ledger_id)
        data = serde.serialize_ledger_metadata(metadata)
        with self._txn(f"write_ledger_metadata({ledger_id})", write=True) as c:
            row = c.execute(
                "SELECT version FROM ledgers WHERE ledger_id = ?", (ledger_id,)
            ).fetchone()
            if row is None:
                raise errors.NoSuchLedgerExistsOnMetadataServerException(
                    f"ledger {ledger_id} has no metadata in {self.uri}"
                )
            if int(row[0]) != expected_version:
                raise errors.MetadataVersionException(
                    f"ledger {ledger_id} metadata is at version {row[0]}, not {expected_version}"
                )
            zxid = self._bump_zxid(c)
            c.execute(
                "UPDATE ledgers SET data = ?, version = version + 1, mzxid = ? WHERE ledger_id = ?",
                (data, zxid, ledger_id),
            )
        return Versioned(metadata, expected_version + 1)

    def remove_ledger_metadata(self, ledger_id: int, expected_version: int | None = None) -> None:
        """Delete the ledger's metadata, only at ``expected_version`` if given. Raises
        NoSuchLedgerExistsOnMetadataServerException, MetadataVersionException,
        IncorrectParameterException."""
        _check_ledger_id(ledger_id)
        with self._txn(f"remove_ledger_metadata({ledger_id})", write=True) as c:
            row = c.execute(
                "SELECT version FROM ledgers WHERE ledger_id = ?", (ledger_id,)
            ).fetchone()
            if row is None:
                raise errors.NoSuchLedgerExistsOnMetadataServerException(
                    f"ledger {ledger_id} has no metadata in {self.uri}"
                )
            if expected_version is not None and int(row[0]) != expected_version:
                raise errors.MetadataVersionException(
                    f"ledger {ledger_id} metadata is at version {row[0]}, not {expected_version}"
                )
            self._bump_zxid(c)
            c.execute("DELETE FROM ledgers WHERE ledger_id = ?", (ledger_id,))

    def list_ledgers(self) -> Iterator[int]:
        """Every ledger id, ascending, read in pages (a ledger created or deleted while iterating
        may or may not appear)."""
        after = -1
        while True:
            with self._txn("list_ledgers") as c:
                page = [
                    int(r[0])
                    for r in c.execute(
                        "SELECT ledger_id FROM ledgers WHERE ledger_id > ? "
                        "ORDER BY ledger_id LIMIT ?",
                        (after, _LIST_PAGE_SIZE),
                    )
                ]
            yield from page
            if len(page) < _LIST_PAGE_SIZE:
                return
            after = page[-1]

    def watch_ledger(self, ledger_id: int, watcher: LedgerWatcher) -> Callable[[], None]:
        """Call ``watcher(ledger_id, metadata or None)`` on the watch thread after every change
        (creation, write, deletion) that happens after this call; returns an idempotent
        unsubscribe. Changes closer together than the poll interval may be seen as one."""
        with self._txn(f"watch_ledger({ledger_id})") as c:
            row = c.execute(
                "SELECT mzxid FROM ledgers WHERE ledger_id = ?", (ledger_id,)
            ).fetchone()
        watch = _LedgerWatch(ledger_id, watcher, None if row is None else int(row[0]))
        with self._lock:
            self._ledger_watches.append(watch)
            self._rescan = True
            self._start_poller()

        def unsubscribe() -> None:
            with self._lock:
                watch.active = False
                with contextlib.suppress(ValueError):
                    self._ledger_watches.remove(watch)

        return unsubscribe

    # --- bookies ------------------------------------------------------------------------------

    def _is_live(self, reg: _Registration, cache: dict[str, bool]) -> bool:
        """A registration lives while its session's store is open (it holds the session file)
        and its owner process runs; either alone would do but for corner cases: a store closed
        without deleting its rows (db busy), or a forked child holding the file after its
        parent died."""
        if reg.session == self._session:
            return True
        alive = cache.get(reg.session)
        if alive is None:
            held = _session_held(self._session_dir, reg.session)
            alive = cache[reg.session] = held is not False and reg.owner.alive()
        return alive

    def _read_registrations(self, c: sqlite3.Connection) -> list[_Registration]:
        return [
            _Registration(str(r[0]), bool(r[1]), str(r[2]), _Owner(int(r[3]), int(r[4]), r[5]))
            for r in c.execute(
                "SELECT bookie_id, read_only, session, owner_pid, owner_start, owner_boot "
                "FROM bookies"
            )
        ]

    def _drop_dead(self, dead: list[_Registration]) -> None:
        """Delete registrations whose owner died (they are already absent to every reader, so
        no change is announced). Best effort: a failure is left for the next reader."""
        try:
            with self._txn("removing dead registrations", write=True) as c:
                c.executemany(
                    "DELETE FROM bookies WHERE bookie_id = ? AND session = ?",
                    [(r.bookie_id, r.session) for r in dead],
                )
        except errors.MetaStoreException as exc:
            logger.debug("%s", exc)
        for session in {r.session for r in dead}:
            if _session_held(self._session_dir, session) is False:
                with contextlib.suppress(OSError):
                    os.unlink(self._session_dir / session)

    def _live_sets(
        self, regs: list[_Registration]
    ) -> tuple[tuple[frozenset[str], frozenset[str]], list[_Registration]]:
        """(writable ids, read-only ids) of the live registrations, and the dead ones."""
        cache: dict[str, bool] = {}
        writable: set[str] = set()
        readonly: set[str] = set()
        dead: list[_Registration] = []
        for reg in regs:
            if not self._is_live(reg, cache):
                dead.append(reg)
            elif reg.read_only:
                readonly.add(reg.bookie_id)
            else:
                writable.add(reg.bookie_id)
        return (frozenset(writable), frozenset(readonly)), dead

    def _bookie_sets(self) -> tuple[frozenset[str], frozenset[str]]:
        with self._txn("listing bookies") as c:
            regs = self._read_registrations(c)
        sets, dead = self._live_sets(regs)
        if dead:
            self._drop_dead(dead)
        return sets

    def register_bookie(self, bookie_id: str, read_only: bool, info: BookieServiceInfo) -> None:
        """Register ``bookie_id`` for this store's session, as writable or read-only (one
        transaction replaces the other registration). Gone on ``close()`` or when this process
        dies. Raises MetaStoreException if another live session holds the registration,
        IncorrectParameterException for an id ZooKeeper would refuse."""
        check_bookie_id(bookie_id)
        data = serde.serialize_bookie_service_info(info)
        session, owner = self._hold_session()
        with self._txn(f"register_bookie({bookie_id})", write=True) as c:
            row = c.execute(
                "SELECT read_only, session, owner_pid, owner_start, owner_boot FROM bookies "
                "WHERE bookie_id = ?",
                (bookie_id,),
            ).fetchone()
            if row is not None and row[1] != session:
                holder = _Owner(int(row[2]), int(row[3]), str(row[4]))
                if self._is_live(_Registration(bookie_id, bool(row[0]), row[1], holder), {}):
                    raise errors.MetaStoreException(
                        f"bookie {bookie_id} is already registered in {self.uri} by another "
                        f"live session (pid {holder.pid})"
                    )
            zxid = self._bump_zxid(c)
            c.execute(
                "INSERT OR REPLACE INTO bookies (bookie_id, read_only, info, session, owner_pid,"
                " owner_start, owner_boot, mzxid) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    bookie_id,
                    int(read_only),
                    data,
                    session,
                    owner.pid,
                    owner.start,
                    owner.boot,
                    zxid,
                ),
            )

    def unregister_bookie(self, bookie_id: str) -> None:
        """Remove the bookie's registration (whichever session holds it), if any."""
        with self._txn(f"unregister_bookie({bookie_id})", write=True) as c:
            gone = c.execute("DELETE FROM bookies WHERE bookie_id = ?", (bookie_id,)).rowcount
            if gone:
                self._bump_zxid(c)

    def writable_bookies(self) -> frozenset[str]:
        """Ids of the live writable registrations."""
        return self._bookie_sets()[0]

    def readonly_bookies(self) -> frozenset[str]:
        """Ids of the live read-only registrations."""
        return self._bookie_sets()[1]

    def bookie_service_info(self, bookie_id: str) -> BookieServiceInfo:
        """The service info of a live registration (writable or read-only). Raises
        BookieHandleNotAvailableException if the bookie is not registered."""
        with self._txn(f"bookie_service_info({bookie_id})") as c:
            row = c.execute(
                "SELECT info, session, owner_pid, owner_start, owner_boot, read_only FROM bookies "
                "WHERE bookie_id = ?",
                (bookie_id,),
            ).fetchone()
        if row is not None:
            reg = _Registration(
                bookie_id, bool(row[5]), str(row[1]), _Owner(int(row[2]), int(row[3]), row[4])
            )
            if self._is_live(reg, {}):
                return serde.parse_bookie_service_info(bytes(row[0]), bookie_id)
            self._drop_dead([reg])
        raise errors.BookieHandleNotAvailableException(
            f"bookie {bookie_id} is not registered in {self.uri}"
        )

    def watch_bookies(self, watcher: BookiesWatcher) -> Callable[[], None]:
        """Call ``watcher(writable, read_only)`` now, in the calling thread, then on the watch
        thread whenever either set changes (a registration, an unregistration, a read-only
        move, or an owner process dying); returns an idempotent unsubscribe."""
        sets = self._bookie_sets()
        watcher(*sets)
        watch = _BookiesWatch(watcher, sets)
        with self._lock:
            self._bookies_watches.append(watch)
            self._rescan = True
            self._start_poller()

        def unsubscribe() -> None:
            with self._lock:
                watch.active = False
                with contextlib.suppress(ValueError):
                    self._bookies_watches.remove(watch)

        return unsubscribe

    # --- cookies ------------------------------------------------------------------------------

    def read_cookie(self, bookie_id: str) -> Versioned[Cookie]:
        """Raises CookieNotFoundException."""
        with self._txn(f"read_cookie({bookie_id})") as c:
            row = c.execute(
                "SELECT data, version FROM cookies WHERE bookie_id = ?", (bookie_id,)
            ).fetchone()
        if row is None:
            raise errors.CookieNotFoundException(f"no cookie for bookie {bookie_id} in {self.uri}")
        return Versioned(serde.parse_cookie(bytes(row[0])), int(row[1]))

    def write_cookie(
        self, bookie_id: str, cookie: Cookie, expected_version: int | None
    ) -> Versioned[Cookie]:
        """Create (``expected_version`` None) or compare-and-set update. Raises
        MetadataVersionException if creating an existing cookie or the version differs,
        CookieNotFoundException if updating a missing one, IncorrectParameterException for an id
        ZooKeeper would refuse."""
        check_bookie_id(bookie_id)
        data = serde.serialize_cookie(cookie)
        with self._txn(f"write_cookie({bookie_id})", write=True) as c:
            row = c.execute(
                "SELECT version FROM cookies WHERE bookie_id = ?", (bookie_id,)
            ).fetchone()
            if expected_version is None:
                if row is not None:
                    raise errors.MetadataVersionException(
                        f"bookie {bookie_id} already has a cookie (version {row[0]})"
                    )
                c.execute(
                    "INSERT INTO cookies (bookie_id, data, version) VALUES (?, ?, 0)",
                    (bookie_id, data),
                )
                return Versioned(cookie, 0)
            if row is None:
                raise errors.CookieNotFoundException(
                    f"no cookie for bookie {bookie_id} in {self.uri}"
                )
            if int(row[0]) != expected_version:
                raise errors.MetadataVersionException(
                    f"the cookie of bookie {bookie_id} is at version {row[0]}, "
                    f"not {expected_version}"
                )
            c.execute(
                "UPDATE cookies SET data = ?, version = version + 1 WHERE bookie_id = ?",
                (data, bookie_id),
            )
            return Versioned(cookie, expected_version + 1)

    def remove_cookie(self, bookie_id: str, expected_version: int) -> None:
        """Raises CookieNotFoundException, MetadataVersionException."""
        with self._txn(f"remove_cookie({bookie_id})", write=True) as c:
            row = c.execute(
                "SELECT version FROM cookies WHERE bookie_id = ?", (bookie_id,)
            ).fetchone()
            if row is None:
                raise errors.CookieNotFoundException(
                    f"no cookie for bookie {bookie_id} in {self.uri}"
                )
            if int(row[0]) != expected_version:
                raise errors.MetadataVersionException(
                    f"the cookie of bookie {bookie_id} is at version {row[0]}, "
                    f"not {expected_version}"
                )
            c.execute("DELETE FROM cookies WHERE bookie_id = ?", (bookie_id,))

    def all_bookies(self) -> frozenset[str]:
        """Bookies that ever joined: the ids holding cookies."""
        with self._txn("all_bookies") as c:
            return frozenset(str(r[0]) for r in c.execute("SELECT bookie_id FROM cookies"))

    # --- coordination -------------------------------------------------------------------------

    def _closing_now(self) -> bool:
        return self._closing

    def _lock_path(self, kind: str, name: str) -> Path:
        check_name(name, kind)
        if len(name) > 200:  # stay well inside NAME_MAX
            name = hashlib.sha256(name.encode()).hexdigest()
        return self._lock_dir / f"{kind}-{name}"

    def _flock(
        self, path: Path, identifier: str, timeout: float | None, cancelled: threading.Event | None
    ) -> _HeldFlock | None:
        """Hold ``path`` exclusively (a new open file description, so threads of one process
        exclude each other too) and publish ``identifier`` in it. None if ``cancelled`` is set
        first or the store closes while an election waits. Raises TimeoutException,
        ClientClosedException, MetaStoreException."""
        deadline = None if timeout is None else time.monotonic() + max(timeout, 0.0)
        backoff = _LOCK_BACKOFF_MIN_S
        while True:
            if cancelled is not None and cancelled.is_set():
                return None
            if self._closing:
                if cancelled is not None:
                    return None
                raise self._closed_error()
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as exc:
                raise errors.MetaStoreException(
                    f"cannot open lock file {path}: {exc.strerror or exc}"
                ) from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                os.close(fd)
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise errors.MetaStoreException(
                        f"cannot lock {path}: {exc.strerror or exc}"
                    ) from None
            else:
                held = _HeldFlock(self, fd)
                try:
                    payload = (identifier + "\n").encode()
                    os.ftruncate(fd, 0)
                    os.pwrite(fd, payload, 0)
                except OSError as exc:
                    held.release()
                    raise errors.MetaStoreException(
                        f"cannot write the holder into {path}: {exc.strerror or exc}"
                    ) from None
                with self._lock:
                    closing = self._closing_now()  # (a call: mypy keeps the loop's narrowing)
                    if not closing:
                        self._held.add(held)
                if closing:  # close() has already released what it knew of
                    held.release()
                    if cancelled is not None:
                        return None
                    raise self._closed_error()
                return held
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                raise errors.TimeoutException(
                    f"lock {path.name} in {self.uri} not acquired within {timeout} s "
                    f"(held by {self._holder(path) or 'another process'})"
                )
            pause = backoff if deadline is None else min(backoff, deadline - now)
            time.sleep(max(pause, 0.0))
            backoff = min(backoff * 2, _LOCK_BACKOFF_MAX_S)

    def _holder(self, path: Path) -> str | None:
        """The identifier published by the holder of ``path``, None if nobody holds it."""
        for _ in range(_HOLDER_READ_ATTEMPTS):
            try:
                fd = os.open(path, os.O_RDONLY)
            except FileNotFoundError:
                return None
            except OSError as exc:
                raise errors.MetaStoreException(
                    f"cannot open lock file {path}: {exc.strerror or exc}"
                ) from None
            try:
                try:
                    fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                except OSError:
                    pass  # held by someone: read what they published
                else:
                    return None  # nobody holds it (a dead holder's text may linger)
                data = os.pread(fd, 4096, 0)
            finally:
                os.close(fd)
            if data.endswith(b"\n"):
                return data[:-1].decode(errors="replace")
            time.sleep(_LOCK_BACKOFF_MIN_S)  # the holder is between acquiring and publishing
        return None

    def lock(
        self, name: str, identifier: str, timeout: float | None = None
    ) -> AbstractContextManager[None]:
        """An exclusive lock named ``name`` among every process and thread using this directory,
        taken on ``with`` entry (waiting at most ``timeout`` seconds, forever if None) and
        released on exit, on ``close()`` or when the holder dies. Not reentrant. Raises
        IncorrectParameterException for a name outside [a-zA-Z0-9._-]; on entry
        TimeoutException, ClientClosedException, MetaStoreException."""
        return _FlockLock(self, self._lock_path("lock", name), identifier, timeout)

    def election(self, name: str, identifier: str) -> Election:
        """A leader election: the leader holds the election's lock file (separate from
        ``lock(name)``); ``leader()`` reads the identifier the holder wrote into it. Raises
        IncorrectParameterException for a name outside [a-zA-Z0-9._-]."""
        election = _FlockElection(self, self._lock_path("election", name), identifier)
        with self._lock:
            self._elections.add(election)
        return election

    # --- watch thread -------------------------------------------------------------------------

    def _start_poller(self) -> None:
        """Start the watch thread if it is not running; called under ``_lock``."""
        self._check_fork()
        if self._poller is None and not self._closing:
            self._poller = threading.Thread(
                target=self._poll_loop,
                name=f"pybkx-embedded-watch-{self._session[:8]}",
                daemon=True,
            )
            self._poller.start()

    def _poll_loop(self) -> None:
        stop = self._stop
        while not stop.wait(self._poll_interval_s):
            try:
                self._poll_once()
            except errors.BKException as exc:
                if self._closing:
                    return
                if str(exc) != self._last_poll_error:  # say it once, not every tick
                    logger.warning("metadata watch poll failed: %s", exc)
                    self._last_poll_error = str(exc)
            except Exception:
                logger.exception("metadata watch poll failed")
            else:
                self._last_poll_error = ""

    def _poll_once(self) -> None:
        """Find what changed for each watcher and tell it, outside every lock."""
        with self._lock:
            ledger_watches = list(self._ledger_watches)
            bookies_watches = list(self._bookies_watches)
            rescan, self._rescan = self._rescan, False
        if not ledger_watches and not bookies_watches:
            return
        calls: list[Callable[[], None]] = []
        try:
            with self._txn("watch poll") as c:
                row = c.execute("SELECT value FROM counters WHERE name = 'zxid'").fetchone()
            zxid = int(row[0])
            changed = rescan or zxid != self._seen_zxid
            if ledger_watches and changed:
                calls += self._ledger_changes(ledger_watches)
            if bookies_watches:
                calls += self._bookies_changes(bookies_watches, refresh=changed)
        except BaseException:
            with self._lock:
                self._rescan = True  # look at everything again next time
            raise
        self._seen_zxid = zxid
        for call in calls:
            try:
                call()
            except Exception:
                logger.exception("metadata watcher failed")

    def _ledger_changes(self, watches: list[_LedgerWatch]) -> list[Callable[[], None]]:
        ids = sorted({w.ledger_id for w in watches})
        stamps: dict[int, int] = {}
        for i in range(0, len(ids), _SQL_IN_CHUNK):
            chunk = ids[i : i + _SQL_IN_CHUNK]
            marks = ",".join("?" * len(chunk))
            with self._txn("watch poll") as c:
                stamps.update(
                    (int(r[0]), int(r[1]))
                    for r in c.execute(
                        f"SELECT ledger_id, mzxid FROM ledgers WHERE ledger_id IN ({marks})",
                        chunk,
                    )
                )
        stale = [w for w in watches if stamps.get(w.ledger_id) != w.last_mzxid]
        calls: list[Callable[[], None]] = []
        values: dict[int, tuple[int | None, Versioned[LedgerMetadata] | None]] = {}
        for watch in stale:
            if watch.ledger_id not in values:
                values[watch.ledger_id] = self._ledger_now(watch.ledger_id)
            mzxid, value = values[watch.ledger_id]
            if mzxid == watch.last_mzxid:
                continue
            watch.last_mzxid = mzxid
            if value is not _UNREADABLE:
                calls.append(_ledger_call(watch, value))
        return calls

    def _ledger_now(self, ledger_id: int) -> tuple[int | None, Versioned[LedgerMetadata] | None]:
        """(stamp, value) of a ledger now; a value that does not parse is logged and reported
        as unchanged (the stamp moves on, so it is not retried every tick)."""
        with self._txn("watch poll") as c:
            row = c.execute(
                "SELECT data, version, mzxid FROM ledgers WHERE ledger_id = ?", (ledger_id,)
            ).fetchone()
        if row is None:
            return None, None
        try:
            metadata = serde.parse_ledger_metadata(bytes(row[0]))
        except errors.MetadataSerializationException as exc:
            logger.warning("watch of ledger %d: version %d unreadable: %s", ledger_id, row[1], exc)
            return int(row[2]), _UNREADABLE
        return int(row[2]), Versioned(metadata, int(row[1]))

    def _bookies_changes(
        self, watches: list[_BookiesWatch], *, refresh: bool
    ) -> list[Callable[[], None]]:
        if refresh:
            with self._txn("watch poll") as c:
                self._seen_registrations = self._read_registrations(c)
        sets, dead = self._live_sets(self._seen_registrations)
        if dead:
            gone = set(map(id, dead))
            self._seen_registrations = [r for r in self._seen_registrations if id(r) not in gone]
            self._drop_dead(dead)
        calls: list[Callable[[], None]] = []
        for watch in watches:
            if watch.last != sets:
                watch.last = sets
                calls.append(_bookies_call(watch, sets))
        return calls

    # --- closing ------------------------------------------------------------------------------

    def close(self) -> None:
        """End the session: delete its registrations, release its locks, cancel its elections,
        stop the watch thread. Idempotent; never raises for a failing db (it logs)."""
        with self._lock:
            if self._closing:
                return
            self._check_fork()
            self._closing = True
            poller, held, elections = self._poller, list(self._held), list(self._elections)
            session = self._session
        self._stop.set()
        for election in elections:
            election.cancel()
        if poller is not None and poller is not threading.current_thread():
            poller.join(timeout=max(5.0, 10 * self._poll_interval_s))
        try:
            with self._txn("close", write=True) as c:
                gone = c.execute("DELETE FROM bookies WHERE session = ?", (session,)).rowcount
                if gone:
                    self._bump_zxid(c)
        except errors.MetaStoreException as exc:
            # Harmless: with the session file released below, the rows are dead to everyone.
            logger.warning("closing %s: %s", self.uri, exc)
        with self._lock:
            session_fd, self._session_fd = self._session_fd, None
        if session_fd is not None:
            with contextlib.suppress(OSError):
                os.unlink(self._session_dir / session)
            os.close(session_fd)
        for h in held:
            h.release()
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
            self._ledger_watches.clear()
            self._bookies_watches.clear()
        for conn in idle:
            with contextlib.suppress(sqlite3.Error):
                conn.close()


def _ledger_call(
    watch: _LedgerWatch, value: Versioned[LedgerMetadata] | None
) -> Callable[[], None]:
    def call() -> None:
        if watch.active:
            watch.watcher(watch.ledger_id, value)

    return call


def _bookies_call(
    watch: _BookiesWatch, sets: tuple[frozenset[str], frozenset[str]]
) -> Callable[[], None]:
    def call() -> None:
        if watch.active:
            watch.watcher(*sets)

    return call


# --- locks and elections ----------------------------------------------------------------------


class _HeldFlock:
    """One held lock file descriptor; ``release`` is idempotent and thread-safe."""

    def __init__(self, store: EmbeddedMetadataStore, fd: int) -> None:
        self._store = store
        self._fd: int | None = fd
        self._pid = os.getpid()
        self._guard = threading.Lock()

    def release(self) -> None:
        with self._guard:
            fd, self._fd = self._fd, None
        if fd is None:
            return
        with self._store._lock:
            self._store._held.discard(self)
        forked = os.getpid() != self._pid
        try:
            if not forked:  # a forked child shares the parent's lock: leave it to the parent
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, 0)  # nobody is the holder any more
                fcntl.flock(fd, fcntl.LOCK_UN)
        except OSError:
            pass
        finally:
            os.close(fd)


class _FlockLock(AbstractContextManager[None]):
    """``store.lock(...)``: acquired on ``with`` entry, released on exit."""

    def __init__(
        self, store: EmbeddedMetadataStore, path: Path, identifier: str, timeout: float | None
    ) -> None:
        self._store = store
        self._path = path
        self._identifier = identifier
        self._timeout = timeout
        self._held: _HeldFlock | None = None

    def __enter__(self) -> None:
        if self._held is not None:
            raise errors.IllegalOpException(f"lock {self._path.name} is already held here")
        self._held = self._store._flock(self._path, self._identifier, self._timeout, None)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        held, self._held = self._held, None
        if held is not None:
            held.release()


class _FlockElection(Election):
    """An election whose leader is the holder of one lock file."""

    def __init__(self, store: EmbeddedMetadataStore, path: Path, identifier: str) -> None:
        self._store = store
        self._path = path
        self._identifier = identifier
        self._cancelled = threading.Event()

    def run(self, on_elected: Callable[[], None]) -> None:
        """Block until elected, call ``on_elected``, then give up leadership. Returns without
        calling it once ``cancel()`` is called or the store closes; ``cancel()`` does not
        interrupt a running ``on_elected``. Raises MetaStoreException."""
        held = self._store._flock(self._path, self._identifier, None, self._cancelled)
        if held is None:
            return
        try:
            on_elected()
        finally:
            held.release()

    def leader(self) -> str | None:
        """The leader's identifier, None if nobody leads."""
        return self._store._holder(self._path)

    def cancel(self) -> None:
        """Stop contending for good (a waiting ``run`` returns soon)."""
        self._cancelled.set()
