"""Type stub for the Rust extension ``pybkx._core``.

Blocking calls release the GIL and wake every 100 ms to let Ctrl-C (KeyboardInterrupt)
through. Errors are raised as the ``pybkx.errors`` classes named below (imported once by the
extension; ``_error_classes()`` lists them). Asynchronous operations return ``Future``.
"""

from collections.abc import Callable, Generator, Sequence
from typing import Any, Literal, Protocol

class _Buffer(Protocol):
    def __buffer__(self, flags: int, /) -> memoryview: ...

Buffer = bytes | bytearray | memoryview | _Buffer

class HistogramSnapshot:
    """A histogram read out at once."""

    buckets: list[tuple[int | None, int]]
    """``(inclusive upper bound, count)`` per bucket, ascending, None for +Inf. A log-linear
    histogram lists only buckets holding values; one with fixed bounds lists them all."""
    count: int
    sum: int

MetricValue = int | float | HistogramSnapshot | dict[str, HistogramSnapshot]
"""A number (counter, gauge; the core gives ints), a snapshot (histogram) or
``{"true": ok, "false": failed}`` (summary, by outcome)."""

class Metric:
    """One metric read out (Python code makes its own too, e.g. a bookie's gauges)."""

    name: str
    kind: str
    """"counter", "gauge", "summary" or "histogram"."""
    unit: str
    """"us" (latency in microseconds), "bytes", "count" (or another, for a metric made in
    Python, e.g. "percent")."""
    labels: dict[str, str]
    value: MetricValue

    def __init__(
        self, name: str, kind: str, unit: str, labels: dict[str, str], value: MetricValue
    ) -> None: ...

class _StorageConfig(Protocol):
    """What ``LedgerStorage`` reads: the storage attributes of ``pybkx.config.ServerConfig``."""

    @property
    def journal_directories(self) -> tuple[str, ...]: ...
    @property
    def ledger_directories(self) -> tuple[str, ...]: ...
    @property
    def index_directories(self) -> tuple[str, ...] | None: ...

class Future:
    """The pending result of an operation: ``concurrent.futures``-like, and awaitable.

    Done-callbacks run on pybkx's callback thread (or at once, in the caller, if already done);
    ``await future`` resolves an asyncio future of the running loop. Operations already sent to
    bookies cannot be cancelled: ``cancel()`` returns False.
    """

    def result(self, timeout: float | None = None) -> Any:
        """The result, waiting up to ``timeout`` seconds (None: for ever). Raises the
        operation's exception, or ``pybkx.errors.TimeoutException`` (a TimeoutError) when the
        wait ends first, KeyboardInterrupt on Ctrl-C."""

    def exception(self, timeout: float | None = None) -> BaseException | None: ...
    def done(self) -> bool: ...
    def running(self) -> bool: ...
    def cancel(self) -> bool: ...
    def cancelled(self) -> bool: ...
    def add_done_callback(self, fn: Callable[[Future], object]) -> None: ...
    def __await__(self) -> Generator[Any, None, Any]: ...

class GcReport:
    """What one entry-log garbage collection did (``LedgerStorage.gc_entry_logs``)."""

    @property
    def logs_removed(self) -> int:
        """Entry logs removed: every ledger in them was deleted."""

    @property
    def bytes_freed(self) -> int:
        """Their bytes."""

class CompactionReport:
    """What one compaction did (``LedgerStorage.compact``)."""

    @property
    def logs_compacted(self) -> int:
        """Entry logs rewritten and removed."""

    @property
    def bytes_moved(self) -> int:
        """Live bytes written again."""

    @property
    def bytes_freed(self) -> int:
        """Bytes of the removed logs."""

class CollectReport:
    """What one collection asked for at once did (``LedgerStorage.collect``)."""

    @property
    def gc(self) -> GcReport:
        """The garbage collection."""

    @property
    def compaction(self) -> CompactionReport | None:
        """The compaction asked for, None if none was."""

class MoveReport:
    """What one tier pass did (``LedgerStorage.move_entry_logs``)."""

    @property
    def demoted(self) -> int:
        """Entry logs moved down a tier."""

    @property
    def promoted(self) -> int:
        """Entry logs moved up a tier."""

    @property
    def bytes(self) -> int:
        """Bytes moved."""

class ScrubFinding:
    """A damaged entry the scrubber found."""

    @property
    def ledger_id(self) -> int: ...
    @property
    def entry_id(self) -> int: ...
    @property
    def check(self) -> str:
        """Which check failed: "record_crc" (the entry log record's framing or CRC32C),
        "record_ids" (the record names another entry), "missing" (the index points past the end
        of the log: a truncated file) or "digest" (the entry's header names another entry)."""

    @property
    def entry_log(self) -> str:
        """The entry log's file name (``<hex id>.log``)."""

    @property
    def offset(self) -> int:
        """The record's offset in it."""

class ScrubReport:
    """What one scrub run did (``LedgerStorage.scrub``)."""

    @property
    def logs_scrubbed(self) -> int: ...
    @property
    def logs_skipped(self) -> int:
        """Logs a move, compaction or garbage collection held: the next run takes them."""

    @property
    def bytes_scrubbed(self) -> int:
        """Bytes of records read back."""

    @property
    def entries_verified(self) -> int:
        """Entries whose record, ids and (where it needs no key) digest checked."""

    @property
    def digest_unverified(self) -> int:
        """Of those, entries whose digest is neither CRC32C nor CRC32 (MAC and DUMMY ledgers)."""

    @property
    def corrupt_entries(self) -> int: ...
    @property
    def complete(self) -> bool:
        """False when a close stopped the run early."""

    @property
    def findings(self) -> list[ScrubFinding]:
        """The damaged entries (at most 4096)."""

class DirectoryUsage:
    """One directory the storage writes to, as the disk checker sees it."""

    @property
    def kind(self) -> str:
        """ "ledger", "index" or "journal"."""

    @property
    def path(self) -> str: ...
    @property
    def total_bytes(self) -> int:
        """Capacity: the file system's, or a tier's quota."""

    @property
    def free_bytes(self) -> int:
        """Bytes available (within a quota, at most the file system's free bytes)."""

    @property
    def full(self) -> bool:
        """A ledger directory marked full by the disk checker."""

class JournalMark:
    """A position in a journal directory (BookKeeper's log mark)."""

    @property
    def file_id(self) -> int:
        """The journal file (``<file_id in hex>.txn``)."""

    @property
    def offset(self) -> int: ...

class LedgerStorage:
    """A bookie's ledger storage: journal + entry logs + index over the configured directories.

    ``config`` is a ``pybkx.config.ServerConfig`` (its storage attributes are read;
    ``pybkx.bookie.open_ledger_storage(**keys)`` builds one from BookKeeper keys). Values the
    storage cannot work with raise ``ValueError``.

    Opening replays the journal after the last checkpoint, so every acknowledged entry is
    readable again after a crash. A second ``LedgerStorage`` on the same directories raises
    ``pybkx.errors.BookieException`` (the directories are locked).
    """

    def __init__(self, config: _StorageConfig) -> None: ...
    def add_entry(
        self,
        ledger_id: int,
        entry_id: int,
        data: Buffer,
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
        entries: Sequence[tuple[int, Buffer]],
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
        """Flush the write cache to the entry logs and index (sorted by ledger), sync them,
        record the journal marks, and remove covered journals. Raises BookieIOException."""

    def compact(self, threshold: float) -> CompactionReport:
        """Compact the sealed entry logs whose live share of bytes is at most ``threshold``
        (their live entries are written again, the logs removed). Raises BookieIOException."""

    def collect(self, compaction: Literal["major", "minor"] | None = None) -> CollectReport:
        """Run the storage's lifecycle now: remove the entry logs whose ledgers are all deleted,
        then, with ``compaction`` "major" or "minor", compact at ``majorCompactionThreshold`` or
        ``minorCompactionThreshold`` (it also runs by itself, every ``gcWaitTime`` and
        compaction interval). Raises ValueError (another ``compaction``), BookieIOException."""

    def set_disk_pressure(self, level: int) -> None:
        """How full the ledger directories are (0 normal, 1 one is past the warn threshold, 2
        one is full): compaction is suspended accordingly, or forced with
        ``isForceGCAllowWhenNoSpace``. Never raises."""

    def move_entry_logs(self) -> MoveReport:
        """Run one tier pass now (the lifecycle also runs them by itself): tiers past their high
        watermark have their coldest entry logs moved down a tier until below their low
        watermark; logs read below the top tier move up with ``tieredStoragePromoteOnRead``.
        Raises BookieIOException."""

    def entry_log_dirs(self) -> dict[int, str]:
        """Entry log id -> the ledger directory (``current/``) holding it. Never raises."""

    def gc_entry_logs(self) -> GcReport:
        """Remove the entry logs none of whose ledgers exists any more. Raises
        BookieIOException."""

    def scrub(self, rate_bytes_per_second: int = 0) -> ScrubReport:
        """Read every entry log back now and check each indexed entry (record CRC32C, ids, the
        CRC32C/CRC32 client digest), at ``rate_bytes_per_second`` (0: unpaced), on this thread
        (the GIL released); waits for a run in progress first. Damaged entries are logged once
        and queued for ``take_scrub_findings``. Raises BookieIOException (a log unreadable as a
        file), BookieException once the storage is closed."""

    def take_scrub_findings(self) -> list[ScrubFinding]:
        """The damaged entries found and not taken yet (taking them, at most 4096). Never
        raises."""

    def scrub_repaired(self, ledger_id: int, entry_id: int) -> None:
        """The entry was rewritten from another replica: reads serve it again. Raises
        ValueError for a negative id."""

    def replica_digest(
        self,
        ledger_id: int,
        first_entry_id: int,
        last_entry_id: int,
        stride: int = 1,
        list: bool = False,
    ) -> tuple[int, int, int, bytes, list[tuple[int, bytes]]]:
        """What this storage holds of the ledger in entries ``first, first + stride, ...`` up to
        ``last`` (the cross-replica check's digest): ``(entries, bytes, unreadable, digest,
        listed)``, ``digest`` a SHA-1 over each held entry's id (8 bytes, big-endian) and the
        SHA-1 of its stored bytes, ``listed`` each entry's ``(id, SHA-1)`` when ``list``. An
        entry whose record cannot be read counts in ``unreadable`` and nowhere else; an unknown
        ledger holds nothing.

        Raises ValueError (negative ids, a stride below 1, ``last`` before ``first``),
        BookieException (closed), BookieIOException (the index cannot be read).
        """

    def scrub_status(self) -> tuple[ScrubReport | None, int, int]:
        """(the last finished run or None, bytes the current run read, bytes it covers). Never
        raises."""

    def directory_usage(self) -> list[DirectoryUsage]:
        """Every directory written to: ledger directories (``current/``, in order), the index
        directory if separate, then the journal directories. Raises BookieException (a
        directory cannot be examined)."""

    def set_full_ledger_dirs(self, full: list[bool]) -> None:
        """Mark ledger directories full (one flag each, in order): they take no new entry log
        while another directory can."""

    def restore_space_reserve(self) -> bool:
        """Make the space reserves (``diskReservedSpaceMB``) given back while the disk was full
        again: True once every one is held, False while one does not fit yet (ENOSPC). A
        reserve that fails otherwise is logged and stays counted as used. Never raises."""

    def space_reserve(self) -> list[tuple[str, int, bool]]:
        """Every space reserve file: its path, its size in bytes, whether it is held now."""

    def journal_marks(self) -> list[JournalMark]:
        """Per journal directory, the position up to which its records are durable and applied
        (BookKeeper's last log mark)."""

    def entry_log_ledgers(self) -> dict[int, dict[int, int]]:
        """Per entry log id: ``{ledger_id: bytes}`` (the ledgers map kept for garbage
        collection)."""

    def stats(self) -> dict[str, int]:
        """Counters and gauges of ``metrics()`` by name (journals added up)."""

    def metrics(self) -> list[Metric]:
        """Every metric of the storage and its journals (``journalIndex`` label), read now:
        BookKeeper's ``bookie_*`` and ``bookie_journal_*`` names, pybkx's ``pybkx_*``."""

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
    """A bookie's wire-protocol server over a ``LedgerStorage``, on the extension's tokio
    runtime. Listens as soon as it is constructed, on ``host:port`` (0: a free port) with the
    limits of ``config`` (a ``pybkx.config.ServerConfig``: frame size, in-flight requests per
    connection, response buffer water marks, batch-read size, forced read-only).

    Given ``tls`` (a ``pybkx.config.tls.ServerTlsMaterial``), it answers START_TLS as
    BookKeeper's bookie does: EOK in plaintext, then the TLS handshake on the same socket.
    Given ``authorized_roles`` (BookKeeper's BookieAuthZFactory), a connection is served only
    once its TLS client certificate's first role is one of them; before that ADD and READ get
    EUA and other requests close the connection (V2) or get EUA (V3).
    Given ``sasl`` (a ``pybkx.config.jaas.BookieSasl``: users and the allowed-ids pattern,
    BookKeeper's SASLBookieAuthProviderFactory), a connection is served only once its SASL
    DIGEST-MD5 exchange (AUTH messages of the plugin ``sasl``) succeeded; a failed exchange is
    answered EUA (V3) and the connection closes.

    Raises OSError if the address cannot be bound, ValueError on limits that cannot work, TLS
    material that cannot be used or an allowed-ids pattern that does not compile.
    """

    def __init__(
        self,
        storage: LedgerStorage,
        config: object,
        host: str,
        port: int,
        tls: object = None,
        authorized_roles: list[str] | tuple[str, ...] | None = None,
        sasl: object = None,
    ) -> None: ...
    def reload_tls(self, tls: object) -> None:
        """Replace the TLS material (a ``pybkx.config.tls.ServerTlsMaterial``) for the
        handshakes that start from now on. Raises ValueError if it cannot be used (the current
        material stays) or the server was started without TLS."""

    @property
    def port(self) -> int:
        """The bound port (useful with ``port=0``)."""

    def set_read_only(self, read_only: bool) -> None:
        """In read-only mode normal adds get EREADONLY; reads and fencing still work."""

    def is_read_only(self) -> bool: ...
    def set_high_priority_writes(self, available: bool) -> None:
        """Whether a read-only server still takes high-priority (recovery) adds; default True."""

    def high_priority_writes(self) -> bool: ...
    def stop(self, drain_timeout_ms: int = 10_000) -> None:
        """Stop accepting, let in-flight requests finish (up to the timeout), close connections.
        Idempotent. The storage stays open: close it afterwards."""

    def stats(self) -> dict[str, int]:
        """Counters and gauges of ``metrics()`` by name."""

    def metrics(self) -> list[Metric]:
        """Every metric of the server, read now: BookKeeper's ``bookkeeper_server_*`` request
        stats, BP-62's batch-read histograms, pybkx's ``pybkx_server_*`` (connections,
        protocol errors, response bytes queued, pauses)."""

class BookieClient:
    """Pipelined V2 (or, with ``useV2WireProtocol=false``, V3) connections to bookies
    (one per bookie, reconnected on demand), on the extension's tokio runtime, configured by
    ``config`` (a ``pybkx.config.ClientConfig``: timeouts, frame size, queued-bytes bound,
    protocol). Bookies are addressed as ``"host:port"``.
    Requests over the frame limit fail at once (IncorrectParameterException); when a
    connection has ``clientWriteBufferHighWaterMark`` bytes queued, senders wait (up to the
    request's timeout, then TimeoutException).
    Given ``tls`` (a ``pybkx.config.tls.ClientTlsMaterial``) every connection sends START_TLS
    and runs TLS before any request, never plaintext; a bookie that refuses it, a failed
    handshake or none within ``startTLSTimeoutSecs`` fail the requests with SecurityException.
    Given ``sasl`` (a ``pybkx.config.jaas.ClientSasl``) every connection runs the SASL
    DIGEST-MD5 exchange (after TLS, within ``clientConnectTimeoutMillis``) before any request;
    refused credentials, or no answer in time, fail the requests with
    UnauthorizedAccessException naming the bookie.
    Raises ValueError for settings or TLS material that cannot be used, and when ``config``
    sets ``tlsProviderFactoryClass`` but ``tls`` is None, or ``clientAuthProviderFactoryClass``
    but ``sasl`` is None (never plaintext or unauthenticated where security was asked for).
    """

    def __init__(self, config: object, tls: object = None, sasl: object = None) -> None: ...
    def add(
        self,
        bookie: str,
        ledger_id: int,
        entry_id: int,
        master_key: bytes,
        entry: Buffer,
        flags: int = 0,
    ) -> Future:
        """Send ADD; ``entry`` is the packaged entry (see DigestManager). Result: None."""

    def read(
        self,
        bookie: str,
        ledger_id: int,
        entry_id: int,
        flags: int = 0,
        master_key: bytes | None = None,
    ) -> Future:
        """Send READ (``entry_id=-1``: last entry; ``flags=FLAG_DO_FENCING`` with ``master_key``
        fences). Result: the stored entry bytes. Errors: the ``pybkx.errors`` class of the
        bookie's status (NoSuchEntryException for ENOENTRY, ...), TimeoutException,
        BookieHandleNotAvailableException (cannot connect)."""

    def batch_read(
        self,
        bookie: str,
        ledger_id: int,
        start_entry_id: int,
        max_count: int,
        max_size: int,
        flags: int = 0,
        master_key: bytes | None = None,
        *,
        stride: int | None = None,
    ) -> Future:
        """Send BATCH_READ_ENTRY (op 7) with the limits as given (``max_count <= 0``: no count
        limit; the bookie also caps ``max_size`` at its ``maxBatchReadSize``). Result: list of
        stored entry bytes: the first entry always, then as many as fit per BookKeeper's
        accounting. With ``stride`` (pybkx's ``FLAG_STRIDED_READ`` extension) a pybkx bookie
        returns entries ``start, start + stride, ...``; a Java bookie ignores it and returns
        consecutive entries."""

    def long_poll_lac(
        self, bookie: str, ledger_id: int, previous_lac: int, timeout_ms: int
    ) -> Future:
        """A V3 long-poll READ with entry piggy-back: answered once the bookie's LAC for the
        ledger passes ``previous_lac``, or after ``timeout_ms``. Result: a ``LongPollResult``.
        Raises IncorrectParameterException for a V2 client (a Java bookie would read the rest of
        a V2 connection as V3)."""

    # The V3-only operations below raise IncorrectParameterException at once for a V2 client
    # (useV2WireProtocol=true). Their futures fail with the bookie's status as its exception
    # (e.g. NoSuchLedgerExistsException, BookieHandleNotAvailableException), or a timeout.
    def read_lac(self, bookie: str, ledger_id: int) -> Future:
        """V3 READ_LAC. Result: a ``ReadLacResult``."""

    def write_lac(
        self, bookie: str, ledger_id: int, lac: int, master_key: bytes, body: bytes
    ) -> Future:
        """V3 WRITE_LAC: the bookie keeps ``body`` (the digest-packaged LAC) as the ledger's
        explicit LAC. Result: None. A fenced ledger fails with LedgerFencedException."""

    def get_bookie_info(self, bookie: str) -> Future:
        """V3 GET_BOOKIE_INFO. Result: a ``BookieInfo``."""

    def force_ledger(self, bookie: str, ledger_id: int) -> Future:
        """V3 FORCE_LEDGER: the ledger's entries so far made durable. Result: None."""

    def get_list_of_entries(self, bookie: str, ledger_id: int) -> Future:
        """V3 GET_LIST_OF_ENTRIES_OF_LEDGER. Result: the entries the bookie holds, as
        ascending inclusive runs ``[(first, last), ...]``."""

    def take_error_counts(self) -> dict[str, int]:
        """Each bookie address's failed requests since the last call that BookKeeper's client
        counts toward quarantine (timeouts, answers other than no such entry/ledger, fenced,
        read-only; not a refused connection), reset to 0; bookies with none left out."""

    def failure_count(self, bookie: str) -> int:
        """Every failed request to the bookie address (any cause but a request too large to
        send or a closed client) since this client started; never reset."""

    def close(self) -> None:
        """Close all connections; pending requests fail. Idempotent."""

    def bookie_health(self, bookie: str) -> BookieHealth:
        """The client's figures of ``bookie`` (``"host:port"``) now, as reads order replicas by
        them (``reorderReadSequenceEnabled``): all zero / None for a bookie never asked.
        Read-only; never raises."""

class BookieHealth:
    """What ``BookieClient.bookie_health`` gives: one bookie as this client saw it."""

    pending_requests: int
    """Requests sent to it and not completed yet (adds and reads)."""
    ms_since_failure: int | None
    """Milliseconds since it last failed a request (timed out, lost its connection, answered
    EIO or sent a copy that failed its digest check); None: never."""
    ms_since_slow: int | None
    """Milliseconds since a read of it needed a speculative request (``speculativeReadTimeout``)
    that another replica answered first; None: never."""
    failures: int
    """Failures since the client started."""
    slow_answers: int
    """Slow answers since the client started."""

class LongPollResult:
    """What ``BookieClient.long_poll_lac`` gives."""

    lac: int
    """The bookie's LAC for the ledger."""
    next_entry: bytes | None
    """The stored bytes of the entry after the asked LAC, when the LAC passed it and the bookie
    holds it."""

class ReadLacResult:
    """What ``BookieClient.read_lac`` gives."""

    lac_body: bytes | None
    """The explicit LAC, digest-packaged as the writer sent it with ``write_lac``."""
    last_entry: bytes | None
    """The stored bytes of the bookie's last entry of the ledger."""

class BookieInfo:
    """What ``BookieClient.get_bookie_info`` gives, in bytes."""

    total_disk_capacity: int
    free_disk_space: int

FLAG_NONE: int
FLAG_DO_FENCING: int
FLAG_RECOVERY_ADD: int
FLAG_HIGH_PRIORITY: int
FLAG_STRIDED_READ: int
MAX_READ_ENTRIES: int

def master_key(password: bytes) -> bytes:
    """BookKeeper's ledger master key: SHA-1("ledger" + password)."""

class DigestManager:
    """Packages and verifies entries as BookKeeper's DigestManager does.

    ``digest_type`` is "CRC32", "CRC32C", "HMAC" (alias "MAC") or "DUMMY"; ValueError otherwise.
    """

    def __init__(self, ledger_id: int, password: bytes, digest_type: str) -> None: ...
    def package(self, entry_id: int, last_add_confirmed: int, length: int, payload: bytes) -> bytes:
        """The entry as stored and sent: ledger id, entry id, LAC, length, digest, payload."""

    def verify(self, entry: bytes, entry_id: int | None = None) -> VerifiedEntry:
        """Check the digest (and, if given, the entry id); return what the entry holds.

        Raises DigestMatchException."""

    def package_lac(self, lac: int) -> bytes:
        """A WRITE_LAC body: ledger id and ``lac`` followed by their digest (BookKeeper's
        ``computeDigestAndPackageForSendingLac``)."""

    def verify_lac(self, body: bytes) -> int:
        """The LAC an explicit-LAC body holds, once its digest and ledger id check.

        Raises DigestMatchException."""

class VerifiedEntry:
    """A stored entry whose digest (and id, if asked) checked out."""

    entry_id: int
    last_add_confirmed: int
    """The LAC its writer piggy-backed in it."""
    ledger_length: int
    """The ledger's length in bytes up to and including this entry."""
    payload: bytes

def check_quorums(ensemble_size: int, write_quorum_size: int, ack_quorum_size: int) -> None:
    """Raise IncorrectParameterException unless E >= Qw >= Qa >= 1 (negative sizes too)."""

class LedgerEntry:
    """One entry read from a ledger. Its payload stays in the buffer the bookie's reply arrived
    in: ``memoryview(entry)`` (or ``numpy.frombuffer(entry)``, ``pyarrow.py_buffer(entry)``)
    reads it without a copy; ``payload`` / ``bytes(entry)`` make one ``bytes`` on first use."""

    ledger_id: int
    entry_id: int
    last_add_confirmed: int
    """The LAC the writer piggy-backed in this entry."""
    ledger_length: int
    """The ledger's length in bytes up to and including this entry."""

    def packaged(self, digest: DigestManager) -> bytes:
        """This entry packaged again by ``digest`` as its writer sent it (its entry id, LAC and
        length, the digest, the payload copied once from the read's buffer): what a recovery
        copy adds. Raises ValueError if ``digest`` is for another ledger."""

    def __init__(
        self,
        ledger_id: int,
        entry_id: int,
        payload: Buffer | bytes | bytearray | memoryview,
        last_add_confirmed: int = -1,
        ledger_length: int = 0,
    ) -> None: ...
    @property
    def payload(self) -> bytes:
        """The payload as ``bytes`` (made once, then kept)."""

    def __bytes__(self) -> bytes: ...
    def __len__(self) -> int:
        """The payload's length in bytes."""

    def __buffer__(self, flags: int, /) -> memoryview: ...
    def __release_buffer__(self, view: memoryview, /) -> None: ...

class SharedBuffer:
    """Bytes held by Rust, readable through the buffer protocol without a copy (read-only):
    ``memoryview(buf)``, ``pyarrow.py_buffer(buf)``."""

    def __len__(self) -> int: ...
    def __buffer__(self, flags: int, /) -> memoryview: ...
    def __release_buffer__(self, view: memoryview, /) -> None: ...

class BookieFailure:
    """A bookie of a writer's ensemble that failed an add."""

    ledger_id: int
    writer_id: int
    """Which ``LedgerWriter`` (its ``writer_id``)."""
    index: int
    """The failed bookie's position in the writer's ensemble."""
    bookie: str
    """Its address."""
    error: str

class FailureQueue:
    """Bookie failures of all the writers of one client, in the order they happened."""

    def __init__(self) -> None: ...
    def next(self, timeout: float | None = None) -> BookieFailure | None:
        """The next failure, waiting up to ``timeout`` seconds; None if none came or the queue
        is closed."""

    def close(self) -> None:
        """Wake waiting ``next`` calls (they return None)."""

class LedgerWriter:
    """Quorum writes of one open ledger: each entry goes to its write set (round robin), appends
    complete in entry-id order once Qa bookies acknowledged, the LAC rides in every entry.
    Bookie failures go to ``failures`` (tagged with ``writer_id``); the control plane answers
    with ``change_ensemble`` (after updating the metadata) or ``fail``.
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
        failures: FailureQueue,
        *,
        next_entry_id: int = 0,
        length: int = 0,
        recovery: bool = False,
        throttle: int = 5000,
        adv: bool = False,
        explicit_lac_interval_ms: int = 0,
    ) -> None:
        """``ensemble``: bookie addresses. ``recovery``: send recovery adds (fenced ledgers).
        ``throttle``: most appends outstanding (BookKeeper's ``throttle``). ``adv``: appends
        name their entry ids (``append_adv``; ``append`` refuses). ``explicit_lac_interval_ms``
        > 0: send WRITE_LAC to the ensemble at that interval when the LAC got past what the
        last add carried (BookKeeper's ``explicitLacInterval``; V3 clients only).
        Raises IncorrectParameterException (quorums; explicit LAC on a V2 client), ValueError
        (digest type)."""

    @property
    def writer_id(self) -> int: ...
    @property
    def max_payload(self) -> int:
        """The largest payload one append may carry (the frame limit minus headers)."""

    def append(self, payload: Buffer, entry_id: int | None = None) -> Future:
        """Start an append; the future gives its entry id. Waits (GIL released, interruptible)
        while ``throttle`` appends are outstanding. ``entry_id``, if given, must be the next id
        (recovery rewrites known ids). A payload over ``max_payload`` fails the future with
        IncorrectParameterException and the ledger goes on."""

    def append_many(self, payloads: Sequence[Buffer]) -> int:
        """Append pipelined; wait until all are confirmed; return the last id."""

    def append_adv(self, entry_id: int, payload: Buffer) -> Future:
        """Start an append of entry ``entry_id`` (an adv writer only); the future gives the id
        once it and every lower id are confirmed. Waits while ``throttle`` appends are
        outstanding. An id at or below the LAC or already pending fails the future with
        DuplicateEntryIdException."""

    def begin_change(self) -> int:
        """Freeze the LAC for an ensemble change (appends stop completing) and return LAC + 1,
        where the new segment must start; ``change_ensemble`` or ``cancel_change`` ends it."""

    def cancel_change(self) -> None:
        """End a change begun with ``begin_change`` without a new ensemble."""

    def change_ensemble(self, first_entry_id: int, ensemble: list[str]) -> None:
        """Use ``ensemble`` from ``first_entry_id`` (= LAC + 1) and re-send pending entries to
        the replaced bookies. Raises IncorrectParameterException for an ensemble that cannot be
        used, the writer's error if it already failed."""

    def fail(self, exception: BaseException) -> None:
        """Fail pending and later appends with ``exception``'s class and message."""

    def when_drained(self) -> Future:
        """Done once nothing is pending (or the writer failed)."""

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
    def enable_deferred_sync(self) -> None:
        """Make every later add carry BookKeeper's ``WriteFlag.DEFERRED_SYNC`` (bookies answer
        before their sync; the LAC advances only by ``force``). Before the first append.
        Raises IncorrectParameterException over V2 (``useV2WireProtocol=true``) or after an
        append."""

    @property
    def deferred_sync(self) -> bool: ...
    def force(self) -> Future:
        """FORCE_LEDGER to every bookie of the ensemble; the future gives the LAC confirmed
        (the last entry acknowledged in order when the force began), or raises the first
        bookie's error, LedgerClosedException, IncorrectParameterException over V2."""

class ReadPlan:
    """How to read one version of a ledger's metadata, checked once: ``segments`` are
    ``(first entry, bookie addresses)`` starting at 0; ``orders[segment][entry % E]`` the
    ensemble indexes to try (the placement policy's read order; empty: the write set's order).
    Raises IncorrectParameterException for a plan that cannot be read, ValueError (digest).
    """

    def __init__(
        self,
        client: BookieClient,
        ledger_id: int,
        write_quorum_size: int,
        password: bytes,
        digest_type: str,
        segments: list[tuple[int, list[str]]],
        *,
        orders: list[list[list[int]]] = ...,
        max_batch_bytes: int = 5 << 20,
    ) -> None: ...
    def verify(self, entry: bytes, entry_id: int | None = None) -> VerifiedEntry:
        """What an entry a bookie stored holds, its digest checked (and its id, if given);
        raises DigestMatchException."""

    def read(
        self,
        first: int,
        last: int,
        *,
        batch: bool = True,
        avoid: list[str] = ...,
        flags: int = 0,
        master_key: bytes | None = None,
        window: int = 64,
        held_by: list[int] = ...,
    ) -> Future:
        """Read and verify entries ``first..last`` (with ``held_by``, only those whose write set
        holds one of those ensemble positions); the future gives a ``ReadResult``.

        With ``batch``: BATCH_READ_ENTRY where one bookie holds every entry of a segment
        (E == Qw), strided batch reads per write-set start where entries are striped (E > Qw;
        runs of up to Qw entries from bookies that ignore strides); otherwise, and for whatever
        those miss, single reads with ``window`` in flight; each entry from the first replica
        that returns a verified copy, ``avoid`` last. Its ``batch_ok`` is False once the bookies
        dropped the connection on every batch request (a pre-BP-62 bookie). Raises at
        once IncorrectParameterException for a bad range (more than MAX_READ_ENTRIES entries
        too); through the future IncorrectParameterException (a ``held_by`` position outside
        the ledger's ensembles), NoSuchEntryException (no replica has an entry), ReadException,
        DigestMatchException (every copy corrupt, naming the bookies).
        """

    def read_columns(
        self,
        first: int,
        last: int,
        *,
        batch: bool = True,
        avoid: list[str] = ...,
        window: int = 64,
    ) -> Future:
        """``read`` packed as columns: the future gives a ``ColumnsResult``. Raises as
        ``read``, and through the future IncorrectParameterException when the payloads exceed
        2 GiB.
        """

class ReadResult:
    """What ``ReadPlan.read`` gives."""

    entries: list[LedgerEntry]
    """The verified entries, in order."""
    batch_ok: bool
    """False once the bookies dropped the connection on every batch request (a pre-BP-62
    bookie): read without batches from then on."""

class ColumnsResult:
    """What ``ReadPlan.read_columns`` gives: the entries as columns, ``SharedBuffer``s in
    Arrow's ``int64`` and ``binary`` layouts (little-endian i64 ids, i32 offsets, payloads back
    to back)."""

    rows: int
    entry_ids: SharedBuffer
    offsets: SharedBuffer
    payloads: SharedBuffer
    batch_ok: bool
    """As ``ReadResult.batch_ok``."""

def inject_disk_fault(
    path_prefix: str,
    ops: list[str],
    *,
    errno: int | None = None,
    delay_ms: int | None = None,
    times: int | None = None,
) -> int:
    """Test hook: make the storage's file calls ``ops`` ("create", "open", "write", "read",
    "sync", "allocate", "truncate", "remove", "rename", "lock") on paths under ``path_prefix``
    fail with ``errno`` or take ``delay_ms`` longer, for ``times`` calls (None: until removed).
    Process-wide. Returns the fault's id. Raises ValueError."""

def remove_disk_fault(fault_id: int) -> None: ...
def clear_disk_faults() -> None: ...
def _error_classes() -> list[type[BaseException]]: ...
def set_log_level(level: int) -> None:
    """Forward Rust log records at this ``logging`` level and above (default: PYBKX_LOG or
    WARNING)."""

def set_metrics_enabled(enabled: bool) -> None:
    """Switch histogram and timing collection on or off for this process (BookKeeper's
    ``enableStatistics``); plain counters keep counting."""

def metrics_enabled() -> bool: ...
def client_metrics() -> list[Metric]:
    """The metrics of every client of this process: ``bookkeeper_client_ADD_ENTRY``,
    ``bookkeeper_client_READ_ENTRY`` (summaries), ``bookkeeper_client_NUM_PENDING_ADD``,
    ``bookkeeper_client_SPECULATIVE_READ_COUNT`` (read requests also sent to the next replica
    because the one asked had not answered within ``speculativeReadTimeout``)."""

# Benchmark tools: present in development builds (cargo feature "bench").

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
    v3: bool = False,
    tls: object = None,
) -> dict[str, Any]:
    """Benchmark load generator: drive one bookie over V2 (V3 with ``v3=True``) with
    ``in_flight`` requests outstanding; inside TLS (START_TLS first) given ``tls``, a
    ``pybkx.config.tls.ClientTlsMaterial``.

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

def micro_kernels() -> dict[str, str]:
    """The micro-benchmark kernels: name -> what one iteration does."""

def fill_storage(storage: LedgerStorage, ledgers: int, entries: int, payload_size: int) -> float:
    """Benchmark (feature ``bench``): add ``entries`` entries of ``payload_size`` bytes from Rust,
    entry ``i`` to ledger ``i % ledgers + 1`` as its entry ``i // ledgers``; seconds until all
    are durable. Raises ValueError when an add fails."""

class IndexLookups:
    """What ``index_lookups`` gives."""

    seconds: float
    found: int

def index_lookups(storage: LedgerStorage, ledgers: int, span: int, count: int) -> IndexLookups:
    """Benchmark (feature ``bench``): ``count`` index lookups (no entry data read) of random
    entries ``0..span`` of ledgers ``1..=ledgers``."""
