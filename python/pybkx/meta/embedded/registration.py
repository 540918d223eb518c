"""Bookie registrations and cookies in the embedded store: ephemeral rows tied to a live session
and owner process, read-only moves, service info. It stores what a bookie says; it never
decides which mode a bookie is in."""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3

from pybkx import errors
from pybkx.meta import serde
from pybkx.meta.embedded.liveness import (
    Owner,
    session_held,
)
from pybkx.meta.embedded.session import (
    EmbeddedSession,
    Registration,
)
from pybkx.meta.types import (
    BookieServiceInfo,
    Cookie,
    Versioned,
    check_bookie_id,
)

logger = logging.getLogger(__name__)


class EmbeddedRegistry(EmbeddedSession):
    """Registrations (with their liveness) and cookies."""

    # --- bookies ------------------------------------------------------------------------------

    def _is_live(self, reg: Registration, cache: dict[str, bool]) -> bool:
        """A registration lives while its session's store is open (it holds the session file)
        and its owner process runs; either alone would do but for corner cases: a store closed
        without deleting its rows (db busy), or a forked child holding the file after its
        parent died."""
        if reg.session == self._session:
            return True
        alive = cache.get(reg.session)
        if alive is None:
            held = session_held(self._session_dir, reg.session)
            alive = cache[reg.session] = held is not False and reg.owner.alive()
        return alive

    def _read_registrations(self, c: sqlite3.Connection) -> list[Registration]:
        return [
            Registration(str(r[0]), bool(r[1]), str(r[2]), Owner(int(r[3]), int(r[4]), r[5]))
            for r in c.execute(
                "SELECT bookie_id, read_only, session, owner_pid, owner_start, owner_boot "
                "FROM bookies"
            )
        ]

    def _drop_dead(self, dead: list[Registration]) -> None:
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
            if session_held(self._session_dir, session) is False:
                with contextlib.suppress(OSError):
                    os.unlink(self._session_dir / session)

    def _live_sets(
        self, regs: list[Registration]
    ) -> tuple[tuple[frozenset[str], frozenset[str]], list[Registration]]:
        """(writable ids, read-only ids) of the live registrations, and the dead ones."""
        cache: dict[str, bool] = {}
        writable: set[str] = set()
        readonly: set[str] = set()
        dead: list[Registration] = []
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
                holder = Owner(int(row[2]), int(row[3]), str(row[4]))
                if self._is_live(Registration(bookie_id, bool(row[0]), row[1], holder), {}):
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
            reg = Registration(
                bookie_id, bool(row[5]), str(row[1]), Owner(int(row[2]), int(row[3]), row[4])
            )
            if self._is_live(reg, {}):
                return serde.parse_bookie_service_info(bytes(row[0]), bookie_id)
            self._drop_dead([reg])
        raise errors.BookieHandleNotAvailableException(
            f"bookie {bookie_id} is not registered in {self.uri}"
        )

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
