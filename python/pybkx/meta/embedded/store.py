"""The embedded metadata store: ledgers, registrations, cookies, locks in one local directory.
It is for the processes of one machine only; it composes one module per job."""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import threading

from pybkx import errors
from pybkx.meta.embedded.ledgers import (
    EmbeddedLedgers,
)
from pybkx.meta.embedded.underreplication import EmbeddedUnderReplication
from pybkx.meta.embedded.watches import (
    EmbeddedWatches,
)
from pybkx.meta.store import MetadataStore

logger = logging.getLogger(__name__)

# Layout of ``embedded:///dir``:
#
#   dir/metadata.db    SQLite in WAL mode (synchronous=FULL: a committed ledger creation or
#                      close survives power loss, like a ZooKeeper write). Tables: ``ledgers``
#                      (ledger metadata V3 bytes, exactly as the ZooKeeper backend stores them),
#                      ``bookies`` (registrations), ``cookies``, ``meta`` (instance id, schema
#                      version, the AutoRecovery switch and delay), ``underreplicated``
#                      (AutoRecovery's markers) and ``counters`` (the next ledger id, the
#                      change counter ``zxid``).
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


__all__ = ["EmbeddedMetadataStore"]


class EmbeddedMetadataStore(
    EmbeddedLedgers, EmbeddedWatches, EmbeddedUnderReplication, MetadataStore
):
    """The metadata store of ``embedded:///abs/dir``: SQLite (WAL) plus lock files there.

    Several processes of one machine may open the same directory at once; each store object is
    one session (its registrations vanish on ``close()`` or when its process dies). Conf keys:
    ``embeddedPollIntervalMs`` (watch polling, default 50) and ``embeddedBusyTimeoutMs`` (wait
    for another writer, default 10000); other keys are ignored. Raises ValueError for a URI that
    is not ``embedded:///abs/dir``, MetaStoreException if the directory or db cannot be opened.
    Every method raises MetaStoreException when SQLite fails (one line: the directory, the
    operation and SQLite's message), and ClientClosedException after ``close()``.
    """

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
