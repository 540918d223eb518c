"""Type stub for the Rust extension ``pybkx._core``.

Blocking calls release the GIL. Errors are raised as the ``pybkx.errors`` classes named below.
"""

from typing import Any

class LedgerStorage:
    """A bookie's ledger storage: journal + entry logs + index over the configured directories.

    Configuration is given as keyword arguments with Apache BookKeeper's key names, e.g.
    ``LedgerStorage(journalDirectories="/d/j", ledgerDirectories=["/d/l1", "/d/l2"],
    journalMaxGroupWaitMSec=2, logSizeLimit=64 << 20)``. Directory keys accept a list of paths
    or a comma-separated string. Unknown keys or bad values raise ``ValueError``.

    Opening replays the journal after the last checkpoint, so every acknowledged entry is
    readable again after a crash. A second ``LedgerStorage`` on the same directories raises
    ``pybkx.errors.BookieException`` (the directories are locked).
    """

    def __init__(self, **config: Any) -> None: ...
    def add_entry(
        self,
        ledger_id: int,
        entry_id: int,
        data: bytes,
        master_key: bytes = b"",
        recovery: bool = False,
    ) -> None:
        """Store one entry; returns once it is durable (journalled with the configured sync policy).

        Raises LedgerFencedException (fenced ledger, non-recovery add), UnauthorizedAccessException
        (master key differs from the ledger's), ValueError (negative ids), BookieException (closed),
        BookieIOException (the journal failed).
        """

    def add_entries(
        self,
        ledger_id: int,
        entries: list[tuple[int, bytes]],
        master_key: bytes = b"",
        recovery: bool = False,
    ) -> None:
        """Submit many ``(entry_id, data)`` adds at once (pipelined); returns when all are durable.

        Raises as ``add_entry``; on error some of the entries may have been stored.
        """

    def read_entry(self, ledger_id: int, entry_id: int) -> bytes:
        """Return the stored bytes of one entry; ``entry_id == -1`` returns the highest one.

        Raises NoSuchLedgerExistsException, NoSuchEntryException, BookieIOException (I/O error or
        corrupt record).
        """

    def read_range(
        self, ledger_id: int, first_entry_id: int, max_count: int, max_bytes: int
    ) -> list[bytes]:
        """Consecutive entries from ``first_entry_id``: at most ``max_count`` (<= 0: unbounded) and,
        after the first one (always returned), no more than ``max_bytes`` of entry data in total.
        Stops early at the first missing entry.

        Raises NoSuchLedgerExistsException / NoSuchEntryException if the first entry is missing.
        """

    def last_entry_id(self, ledger_id: int) -> int:
        """Highest stored entry id.

        Raises NoSuchLedgerExistsException, NoSuchEntryException (no entries).
        """

    def fence(self, ledger_id: int, master_key: bytes = b"") -> bool:
        """Fence the ledger (creating it with this key if unknown); returns once that is durable.

        Returns True if the ledger was already fenced. Raises UnauthorizedAccessException.
        """

    def is_fenced(self, ledger_id: int) -> bool:
        """Raises NoSuchLedgerExistsException."""

    def set_explicit_lac(self, ledger_id: int, lac: bytes, master_key: bytes = b"") -> None:
        """Store the ledger's explicit LAC blob durably.

        Raises UnauthorizedAccessException.
        """

    def get_explicit_lac(self, ledger_id: int) -> bytes | None:
        """Raises NoSuchLedgerExistsException."""

    def read_master_key(self, ledger_id: int) -> bytes:
        """Raises NoSuchLedgerExistsException."""

    def ledger_exists(self, ledger_id: int) -> bool: ...
    def list_ledgers(self) -> list[int]: ...
    def delete_ledger(self, ledger_id: int) -> None:
        """Delete the ledger and its index durably. Raises NoSuchLedgerExistsException."""

    def checkpoint(self) -> None:
        """Flush entry logs and index, record the journal mark, and remove covered journals."""

    def entry_log_ledgers(self) -> dict[int, dict[int, int]]:
        """Per entry log id: ``{ledger_id: bytes}`` (the ledgers map kept for garbage
        collection)."""

    def stats(self) -> dict[str, int]:
        """Counters: journal_entries, journal_records, journal_bytes, journal_groups,
        journal_syncs, journal_rollovers, entry_log_rollovers, checkpoints, ledgers."""

    def close(self) -> None:
        """Drain the journal, checkpoint, release the directories. Idempotent."""

    def __enter__(self) -> LedgerStorage: ...
    def __exit__(self, *exc: object) -> None: ...

def scan_journal(path: str) -> list[dict[str, Any]]:
    """Decode one journal file (like BookKeeper's ``readjournal``): a dict per valid record with
    ``offset``, ``size`` (bytes on disk, header included), ``kind`` ("entry", "key", "fence",
    "lac", "delete"), ``ledger_id`` and ``entry_id`` (None but for entries). Stops at the end of
    valid data; the last dict has ``kind == "end"``, its ``offset`` the end of valid data and
    ``reason`` why it stopped.
    """
