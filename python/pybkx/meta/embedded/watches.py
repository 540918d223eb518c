"""Watches in the embedded store: one polling thread per store that compares change stamps and
calls ledger and bookie watchers outside every lock."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable

from pybkx import errors
from pybkx.meta import serde
from pybkx.meta.embedded.registration import (
    EmbeddedRegistry,
)
from pybkx.meta.embedded.session import (
    SQL_IN_CHUNK,
    UNREADABLE,
    BookiesWatch,
    LedgerWatch,
)
from pybkx.meta.ledger_metadata import LedgerMetadata
from pybkx.meta.types import (
    BookiesWatcher,
    LedgerWatcher,
    Versioned,
)

logger = logging.getLogger(__name__)


class EmbeddedWatches(EmbeddedRegistry):
    """Ledger and bookie watches, and the thread that serves them."""

    def watch_ledger(self, ledger_id: int, watcher: LedgerWatcher) -> Callable[[], None]:
        """Call ``watcher(ledger_id, metadata or None)`` on the watch thread after every change
        (creation, write, deletion) that happens after this call; returns an idempotent
        unsubscribe. Changes closer together than the poll interval may be seen as one."""
        with self._txn(f"watch_ledger({ledger_id})") as c:
            row = c.execute(
                "SELECT mzxid FROM ledgers WHERE ledger_id = ?", (ledger_id,)
            ).fetchone()
        watch = LedgerWatch(ledger_id, watcher, None if row is None else int(row[0]))
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

    def watch_bookies(self, watcher: BookiesWatcher) -> Callable[[], None]:
        """Call ``watcher(writable, read_only)`` now, in the calling thread, then on the watch
        thread whenever either set changes (a registration, an unregistration, a read-only
        move, or an owner process dying); returns an idempotent unsubscribe."""
        sets = self._bookie_sets()
        watcher(*sets)
        watch = BookiesWatch(watcher, sets)
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

    def _ledger_changes(self, watches: list[LedgerWatch]) -> list[Callable[[], None]]:
        ids = sorted({w.ledger_id for w in watches})
        stamps: dict[int, int] = {}
        for i in range(0, len(ids), SQL_IN_CHUNK):
            chunk = ids[i : i + SQL_IN_CHUNK]
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
            if value is not UNREADABLE:
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
            return int(row[2]), UNREADABLE
        return int(row[2]), Versioned(metadata, int(row[1]))

    def _bookies_changes(
        self, watches: list[BookiesWatch], *, refresh: bool
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


def _ledger_call(watch: LedgerWatch, value: Versioned[LedgerMetadata] | None) -> Callable[[], None]:
    def call() -> None:
        if watch.active:
            watch.watcher(watch.ledger_id, value)

    return call


def _bookies_call(
    watch: BookiesWatch, sets: tuple[frozenset[str], frozenset[str]]
) -> Callable[[], None]:
    def call() -> None:
        if watch.active:
            watch.watcher(*sets)

    return call
