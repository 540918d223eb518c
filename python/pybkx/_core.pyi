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

class BookieServer:
    """A bookie's V2 wire-protocol server over a ``LedgerStorage``, on the extension's tokio
    runtime. Listens as soon as it is constructed.

    Raises OSError if the address cannot be bound, ValueError on bad limits.
    """

    def __init__(
        self,
        storage: LedgerStorage,
        host: str = "0.0.0.0",
        port: int = 3181,
        *,
        max_frame_size: int = 5 << 20,
        max_pending_adds: int = 10_000,
        max_pending_reads: int = 10_000,
        max_batch_read_size: int = 5 << 20,
        read_only: bool = False,
    ) -> None: ...
    @property
    def port(self) -> int:
        """The bound port (useful with ``port=0``)."""

    def set_read_only(self, read_only: bool) -> None:
        """In read-only mode normal adds get EREADONLY; reads and fencing still work."""

    def is_read_only(self) -> bool: ...
    def stop(self, drain_timeout_ms: int = 10_000) -> None:
        """Stop accepting, let in-flight requests finish (up to the timeout), close connections.
        Idempotent. The storage stays open: close it afterwards."""

    def stats(self) -> dict[str, int]:
        """Counters: connections, requests per operation, errors per result code, ..."""

class BookieFuture:
    """The pending result of one request to a bookie."""

    def result(self, timeout: float | None = None) -> Any:
        """Block (GIL released) until done; return the value or raise the ``pybkx.errors`` class
        for the bookie's result code (e.g. NoSuchEntryException for ENOENTRY), TimeoutException
        when the request timed out or ``timeout`` passed, BookieHandleNotAvailableException when
        the bookie cannot be reached."""

    def done(self) -> bool: ...

class BookieClient:
    """Pipelined V2 connections to bookies (one per bookie, reconnected on demand), on the
    extension's tokio runtime. Bookies are addressed as ``"host:port"``.
    """

    def __init__(
        self,
        *,
        add_entry_timeout_sec: float = 5.0,
        read_entry_timeout_sec: float = 5.0,
        connect_timeout_ms: int = 10_000,
        max_frame_size: int = 5 << 20,
    ) -> None: ...
    def add(
        self,
        bookie: str,
        ledger_id: int,
        entry_id: int,
        master_key: bytes,
        entry: bytes,
        flags: int = 0,
    ) -> BookieFuture:
        """Send ADD; ``entry`` is the packaged entry (see DigestManager). Result: None."""

    def read(
        self,
        bookie: str,
        ledger_id: int,
        entry_id: int,
        flags: int = 0,
        master_key: bytes | None = None,
    ) -> BookieFuture:
        """Send READ (``entry_id=-1``: last entry; ``flags=FLAG_DO_FENCING`` with ``master_key``
        fences). Result: the stored entry bytes."""

    def batch_read(
        self,
        bookie: str,
        ledger_id: int,
        start_entry_id: int,
        max_count: int,
        max_size: int,
        flags: int = 0,
        master_key: bytes | None = None,
    ) -> BookieFuture:
        """Send BATCH_READ_ENTRY (op 7) with the limits as given (``max_count <= 0``: no count
        limit; the bookie also caps ``max_size`` at its ``maxBatchReadSize``). Result: list of
        stored entry bytes: the first entry always, then as many as fit per BookKeeper's
        accounting."""

    def close(self) -> None:
        """Close all connections; pending requests fail. Idempotent."""

FLAG_NONE: int
FLAG_DO_FENCING: int
FLAG_RECOVERY_ADD: int
FLAG_HIGH_PRIORITY: int

def master_key(password: bytes) -> bytes:
    """BookKeeper's ledger master key: SHA-1("ledger" + password)."""

class DigestManager:
    """Packages and verifies entries as BookKeeper's DigestManager does.

    ``digest_type`` is "CRC32", "CRC32C", "HMAC" (alias "MAC") or "DUMMY"; ValueError otherwise.
    """

    def __init__(self, ledger_id: int, password: bytes, digest_type: str) -> None: ...
    def package(self, entry_id: int, last_add_confirmed: int, length: int, payload: bytes) -> bytes:
        """The entry as stored and sent: ledger id, entry id, LAC, length, digest, payload."""

    def verify(self, entry: bytes, entry_id: int | None = None) -> tuple[int, int, int, bytes]:
        """Check the digest (and, if given, the entry id); return (entry_id, lac, length, payload).

        Raises DigestMatchException."""

def run_load(
    bookie: str,
    workload: str,
    *,
    in_flight: int = 64,
    ledger_id: int = 1,
    ledgers: int = 1,
    count: int = 100_000,
    payload_size: int = 100,
    batch: int | None = None,
    connections: int = 1,
    rate: float | None = None,
) -> dict[str, Any]:
    """Benchmark load generator: drive one bookie over V2 with ``in_flight`` requests outstanding.

    ``workload="add"``: ``count`` adds of ``payload_size`` bytes (CRC32C, empty password) spread
    over ``ledgers`` ledgers from ``ledger_id``, entry ids from 0. ``workload="read"``: entries
    ``0..count`` of ``ledger_id`` by single READs, or BATCH_READ_ENTRY of ``batch`` entries.
    ``connections`` TCP connections (a ledger's adds share one; reads go round robin).
    ``rate``: requests per second, sent open loop (latency counts from each request's due
    time); None sends as fast as the window allows.
    Returns requests, entries, bytes, errors, seconds, p50_us, p99_us, p999_us.
    Raises ValueError (bad workload), BookieHandleNotAvailableException.
    """

def micro_kernel(kernel: str, payload_size: int, iterations: int) -> float:
    """Seconds ``iterations`` runs of a micro-benchmark kernel take, timed in Rust (GIL released;
    setup excluded). Kernels: see ``micro_kernels()``. Raises ValueError (unknown kernel)."""

def micro_kernels() -> list[tuple[str, str]]:
    """The micro-benchmark kernels: ``(name, what one iteration does)``."""

class AppendFuture:
    """The pending entry id of one append."""

    def result(self, timeout: float | None = None) -> int:
        """Block (GIL released) until the entry and all earlier ones are confirmed by Qa bookies;
        return its id. Raises LedgerFencedException, LedgerClosedException,
        UnauthorizedAccessException, the exception the control plane failed the writer with,
        TimeoutException when ``timeout`` passed."""

    def done(self) -> bool: ...

class LedgerWriter:
    """Quorum writes of one open ledger: each entry goes to its write set (round robin), appends
    complete in entry-id order once Qa bookies acknowledged, the LAC rides in every entry.
    Bookie failures are reported by ``next_failure``; the control plane answers with
    ``change_ensemble`` (after updating the metadata) or ``fail``.
    """

    def __init__(
        self,
        client: BookieClient,
        ledger_id: int,
        write_quorum_size: int,
        ack_quorum_size: int,
        password: bytes,
        digest_type: str,
        ensemble: list[str],
        *,
        next_entry_id: int = 0,
        length: int = 0,
        recovery: bool = False,
        throttle: int = 5000,
    ) -> None:
        """``ensemble``: bookie addresses. ``recovery``: send recovery adds (fenced ledgers).
        ``throttle``: most appends outstanding (BookKeeper's ``throttle``).
        Raises IncorrectParameterException, ValueError (digest type)."""

    def append(self, payload: bytes, entry_id: int | None = None) -> AppendFuture:
        """Blocks (GIL released) while ``throttle`` appends are outstanding. ``entry_id``, if
        given, must be the next id (recovery rewrites known ids)."""

    def append_many(self, payloads: list[bytes]) -> int:
        """Append pipelined; block until all are confirmed; return the last id."""

    def next_failure(self, timeout: float) -> tuple[int, str, str] | None:
        """The next failed bookie needing replacement: (ensemble index, address, error)."""

    def change_ensemble(self, first_entry_id: int, ensemble: list[str]) -> None:
        """Use ``ensemble`` from ``first_entry_id`` (= LAC + 1) and re-send pending entries to
        the replaced bookies. Raises WriteException if it does not replace the failed ones."""

    def fail(self, exception: str, message: str) -> None:
        """Fail pending and later appends with the ``pybkx.errors`` class named ``exception``."""

    def wait_drained(self, timeout: float | None = None) -> bool:
        """Wait until nothing is pending (or the writer failed); False on timeout."""

    def close(self) -> None:
        """Refuse further appends; pending ones still complete."""

    def check(self) -> None:
        """Raise the error that stopped the writer, if any."""

    @property
    def last_add_confirmed(self) -> int: ...
    @property
    def length(self) -> int: ...
    @property
    def next_entry_id(self) -> int: ...
    @property
    def ensemble(self) -> list[str]: ...

def read_entries(
    client: BookieClient,
    ledger_id: int,
    write_quorum_size: int,
    password: bytes,
    digest_type: str,
    segments: list[tuple[int, list[str]]],
    first: int,
    last: int,
    *,
    batch: bool = True,
    max_batch_bytes: int = 5 << 20,
    avoid: list[str] = ...,
    orders: list[list[list[int]]] = ...,
    flags: int = 0,
    master_key: bytes | None = None,
    window: int = 64,
) -> tuple[list[tuple[int, int, int, bytes]], bool]:
    """Read and verify entries ``first..last`` (segments: (first entry, bookie addresses)).

    Batched (BATCH_READ_ENTRY) where one bookie holds every entry of a segment (E == Qw) and
    ``batch``; otherwise single reads with ``window`` in flight; each entry from the first
    replica that returns a verified copy, trying replicas in ``orders[segment][entry % E]``
    (ensemble indexes; the placement policy's read order) when given, ``avoid`` last.
    Returns ``[(entry_id, lac, length, payload)]`` and
    whether batching still looks supported (False once every replica dropped the connection on a
    batch request, as a pre-BP-62 bookie does). Raises NoSuchEntryException (no replica has an
    entry), ReadException, DigestMatchException (every copy corrupt).
    """
