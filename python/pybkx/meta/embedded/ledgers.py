"""The cluster identity and ledger metadata in the embedded store: the instance id, the ledger
id counter and ledger records with znode-like versions. It never calls a watcher (the watch
thread does)."""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Iterator

from pybkx import errors
from pybkx.meta import serde
from pybkx.meta.embedded.session import (
    LIST_PAGE_SIZE,
    MAX_LEDGER_ID,
    EmbeddedSession,
    check_ledger_id,
)
from pybkx.meta.ledger_metadata import LedgerMetadata
from pybkx.meta.types import (
    Versioned,
)


class EmbeddedLedgers(EmbeddedSession):
    """Cluster identity, ledger ids and ledger metadata."""

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
        check_ledger_id(ledger_id)
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
        check_ledger_id(ledger_id)
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
        check_ledger_id(ledger_id)
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
        check_ledger_id(ledger_id)
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
                        (after, LIST_PAGE_SIZE),
                    )
                ]
            yield from page
            if len(page) < LIST_PAGE_SIZE:
                return
            after = page[-1]
