"""Under-replication in the embedded store: markers in the ``underreplicated`` table (version
per row, as a znode's), their locks as lock files (``flock``: gone with the holder), the switch
and the delay in ``meta``, the auditor election as an election lock file. It stores and reads
them; it never decides what is under-replicated (the auditor does)."""

from __future__ import annotations

import json
import time
from collections.abc import Collection

from pybkx import errors
from pybkx.meta.coordination import Election
from pybkx.meta.embedded.locks import EmbeddedCoordination, HeldFlock
from pybkx.meta.underreplication import CHECK_STAMPS

__all__ = ["EmbeddedUnderReplication"]

_DISABLED = "replication_disabled"
_DELAY = "lost_bookie_recovery_delay"
_DELAY_VERSION = "lost_bookie_recovery_delay_version"


class EmbeddedUnderReplication(EmbeddedCoordination):
    """Markers, their locks, the switch, the delay and the auditor election."""

    _marker_locks: dict[int, HeldFlock]

    def _locks_of_markers(self) -> dict[int, HeldFlock]:
        with self._lock:
            if not hasattr(self, "_marker_locks"):
                self._marker_locks = {}
            return self._marker_locks

    def mark_ledger_underreplicated(self, ledger_id: int, missing: Collection[str]) -> None:
        with self._txn("mark under-replicated", write=True) as conn:
            row = conn.execute(
                "SELECT replicas FROM underreplicated WHERE ledger_id = ?", (ledger_id,)
            ).fetchone()
            if row is None:
                conn.execute(
                    "INSERT INTO underreplicated (ledger_id, replicas, ctime_ms, version) "
                    "VALUES (?, ?, ?, 0)",
                    (ledger_id, json.dumps(sorted(set(missing))), int(time.time() * 1000)),
                )
                return
            known: list[str] = json.loads(row[0])
            merged = known + [b for b in sorted(set(missing)) if b not in known]
            if merged != known:
                conn.execute(
                    "UPDATE underreplicated SET replicas = ?, version = version + 1 "
                    "WHERE ledger_id = ?",
                    (json.dumps(merged), ledger_id),
                )

    def underreplicated_ledgers(self) -> dict[int, list[str]]:
        with self._txn("list under-replicated") as conn:
            rows = conn.execute(
                "SELECT ledger_id, replicas FROM underreplicated ORDER BY ledger_id"
            ).fetchall()
        return {int(ledger_id): list(json.loads(replicas)) for ledger_id, replicas in rows}

    def _marker_version(self, ledger_id: int) -> int | None:
        with self._txn("read marker") as conn:
            row = conn.execute(
                "SELECT version FROM underreplicated WHERE ledger_id = ?", (ledger_id,)
            ).fetchone()
        return None if row is None else int(row[0])

    def lock_underreplicated_ledger(self, ledger_id: int, holder: str) -> int | None:
        if not self.lock_ledger_against_replication(ledger_id, holder):
            return None
        version = self._marker_version(ledger_id)
        if version is None:
            self.release_underreplicated_ledger(ledger_id)
        return version

    def lock_ledger_against_replication(self, ledger_id: int, holder: str) -> bool:
        locks = self._locks_of_markers()
        with self._lock:
            if ledger_id in locks:
                return False
        try:
            held = self._flock(self._lock_path("underreplicated", str(ledger_id)), holder, 0, None)
        except errors.TimeoutException:
            return False
        if held is None:
            return False
        with self._lock:
            locks[ledger_id] = held
        return True

    def release_underreplicated_ledger(self, ledger_id: int) -> None:
        locks = self._locks_of_markers()
        with self._lock:
            held = locks.pop(ledger_id, None)
        if held is not None:
            held.release()

    def mark_ledger_replicated(self, ledger_id: int, version: int) -> bool:
        try:
            with self._txn("mark replicated", write=True) as conn:
                deleted = conn.execute(
                    "DELETE FROM underreplicated WHERE ledger_id = ? AND version = ?",
                    (ledger_id, version),
                ).rowcount
        finally:
            self.release_underreplicated_ledger(ledger_id)
        return bool(deleted)

    def replication_enabled(self) -> bool:
        return self._meta_value(_DISABLED) is None

    def set_replication_enabled(self, enabled: bool) -> None:
        self._set_meta_value(_DISABLED, None if enabled else "1")

    def lost_bookie_recovery_delay(self) -> int | None:
        value = self._meta_value(_DELAY)
        return None if value is None else int(value)

    def set_lost_bookie_recovery_delay(self, seconds: int) -> None:
        with self._txn("write the delay", write=True) as conn:
            row = conn.execute("SELECT value FROM meta WHERE key = ?", (_DELAY_VERSION,)).fetchone()
            version = 1 if row is None else int(row[0]) + 1
            for key, value in ((_DELAY, str(int(seconds))), (_DELAY_VERSION, str(version))):
                conn.execute(
                    "INSERT INTO meta (key, value) VALUES (?, ?) "
                    "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                    (key, value),
                )

    def lost_bookie_recovery_delay_version(self) -> int | None:
        value = self._meta_value(_DELAY_VERSION)
        return None if value is None else int(value)

    def check_ctime(self, name: str) -> int | None:
        if name not in CHECK_STAMPS:
            raise ValueError(f"no check stamp called {name!r}")
        value = self._meta_value(name)
        return None if value is None else int(value)

    def set_check_ctime(self, name: str, ctime_ms: int) -> None:
        if name not in CHECK_STAMPS:
            raise ValueError(f"no check stamp called {name!r}")
        self._set_meta_value(name, str(int(ctime_ms)))

    def auditor_election(self, bookie_id: str) -> Election:
        return self.election("auditor", bookie_id)

    def _meta_value(self, key: str) -> str | None:
        with self._txn(f"read {key}") as conn:
            row = conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def _set_meta_value(self, key: str, value: str | None) -> None:
        with self._txn(f"write {key}", write=True) as conn:
            if value is None:
                conn.execute("DELETE FROM meta WHERE key = ?", (key,))
            else:
                conn.execute(
                    "INSERT INTO meta (key, value) VALUES (?, ?) "
                    "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                    (key, value),
                )
