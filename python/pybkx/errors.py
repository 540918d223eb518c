"""Exception hierarchy: one class per Apache BookKeeper client result code, plus bookie failures.
Holds names, codes and lookups only; it must never import the extension or perform any I/O."""

# Class names and ``Code`` values follow BookKeeper's ``client.api.BKException.Code`` (identical
# in release 4.17.4 and master), so ``NoSuchLedgerExistsException.code == -7`` as in Java. The
# legacy Java classes carry a ``BK`` prefix (``BKNoSuchLedgerExistsException``); here the bare
# code name is the class name. The Rust extension imports the classes it raises once, by name
# (``pybkx._core._error_classes()`` lists them), so renaming one is an API change.

from __future__ import annotations

from collections.abc import Mapping
from enum import IntEnum
from types import MappingProxyType
from typing import Final

__all__ = [
    "AddEntryQuorumTimeoutException",
    "BKException",
    "BKNotEnoughBookiesException",
    "BookieException",
    "BookieHandleNotAvailableException",
    "BookieIOException",
    "ClientClosedException",
    "Code",
    "CookieNotFoundException",
    "DataUnknownException",
    "DigestMatchException",
    "DigestNotInitializedException",
    "DuplicateEntryIdException",
    "IllegalOpException",
    "IncorrectParameterException",
    "InterruptedException",
    "InvalidCookieException",
    "LedgerClosedException",
    "LedgerExistException",
    "LedgerFencedException",
    "LedgerIdOverflowException",
    "LedgerRecoveryException",
    "MetaStoreException",
    "MetadataSerializationException",
    "MetadataVersionException",
    "NoBookieAvailableException",
    "NoSuchEntryException",
    "NoSuchLedgerExistsException",
    "NoSuchLedgerExistsOnMetadataServerException",
    "NotEnoughBookiesException",
    "ObjectStorageException",
    "OffloadInProgressException",
    "ProtocolVersionException",
    "QuorumException",
    "ReadException",
    "ReplicationException",
    "SecurityException",
    "TimeoutException",
    "TooManyRequestsException",
    "UnauthorizedAccessException",
    "UnclosedFragmentException",
    "UnexpectedConditionException",
    "WriteException",
    "WriteOnReadOnlyBookieException",
    "ZKException",
    "code_to_exception",
    "exception_class",
]


class Code(IntEnum):
    """BookKeeper client result codes (``BKException.Code``), by their Java names."""

    UNINITIALIZED = 1
    OK = 0
    ReadException = -1
    QuorumException = -2
    NoBookieAvailableException = -3
    DigestNotInitializedException = -4
    DigestMatchException = -5
    NotEnoughBookiesException = -6
    NoSuchLedgerExistsException = -7
    BookieHandleNotAvailableException = -8
    ZKException = -9
    LedgerRecoveryException = -10
    LedgerClosedException = -11
    WriteException = -12
    NoSuchEntryException = -13
    IncorrectParameterException = -14
    InterruptedException = -15
    ProtocolVersionException = -16
    MetadataVersionException = -17
    MetaStoreException = -18
    ClientClosedException = -19
    LedgerExistException = -20
    AddEntryQuorumTimeoutException = -21
    DuplicateEntryIdException = -22
    TimeoutException = -23
    SecurityException = -24
    NoSuchLedgerExistsOnMetadataServerException = -25
    IllegalOpException = -100
    LedgerFencedException = -101
    UnauthorizedAccessException = -102
    UnclosedFragmentException = -103
    WriteOnReadOnlyBookieException = -104
    TooManyRequestsException = -105
    LedgerIdOverflowException = -106
    MetadataSerializationException = -107
    DataUnknownException = -108
    ReplicationException = -200
    UnexpectedConditionException = -999


class BKException(Exception):
    """Base of every pybkx error; ``code`` is the BookKeeper client result code.

    Without arguments the message is the first paragraph of the class docstring.
    """

    code: int = Code.UnexpectedConditionException

    def __init__(self, *args: object) -> None:
        if not args:
            doc = type(self).__doc__ or type(self).__name__
            args = (" ".join(doc.strip().split("\n\n")[0].split()),)
        super().__init__(*args)


# --- client result codes --------------------------------------------------------------------


class ReadException(BKException):
    """A read failed on a bookie (default for read errors without a more specific code)."""

    code = Code.ReadException


class QuorumException(BKException):
    """The quorum sizes do not fit the ensemble size (reserved by BookKeeper)."""

    code = Code.QuorumException


class NoBookieAvailableException(BKException):
    """No bookie is available (reserved by BookKeeper; Java's ``BKBookieException``)."""

    code = Code.NoBookieAvailableException


class DigestNotInitializedException(BKException):
    """The digest engine of a ledger handle was not initialised."""

    code = Code.DigestNotInitializedException


class DigestMatchException(BKException):
    """An entry read back does not match its digest (corruption, or the wrong password)."""

    code = Code.DigestMatchException


class NotEnoughBookiesException(BKException):
    """Too few writable bookies are available to form or repair an ensemble."""

    code = Code.NotEnoughBookiesException


BKNotEnoughBookiesException = NotEnoughBookiesException
"""BookKeeper's legacy Java name for NotEnoughBookiesException (the same class, so catching
either name catches both)."""


class NoSuchLedgerExistsException(BKException):
    """The ledger is unknown to the bookie or storage asked (bookie status ENOLEDGER)."""

    code = Code.NoSuchLedgerExistsException


class BookieHandleNotAvailableException(BKException):
    """No connection to the bookie could be obtained for the request."""

    code = Code.BookieHandleNotAvailableException


class LedgerRecoveryException(BKException):
    """Recovering (fencing and closing) a ledger failed."""

    code = Code.LedgerRecoveryException


class LedgerClosedException(BKException):
    """A write was attempted on a closed ledger handle."""

    code = Code.LedgerClosedException


class WriteException(BKException):
    """A write failed on a bookie (default for add errors without a more specific code)."""

    code = Code.WriteException


class NoSuchEntryException(BKException):
    """The entry is not stored, or the ledger holds no entry yet (bookie status ENOENTRY)."""

    code = Code.NoSuchEntryException


class IncorrectParameterException(BKException):
    """A parameter is invalid; the operation was not attempted."""

    code = Code.IncorrectParameterException


class InterruptedException(BKException):
    """A blocking operation was interrupted while waiting."""

    code = Code.InterruptedException


class ProtocolVersionException(BKException):
    """The bookie refused the request's protocol version (bookie status EBADVERSION)."""

    code = Code.ProtocolVersionException


class MetadataVersionException(BKException):
    """A metadata compare-and-set lost: the stored version differs from the expected one."""

    code = Code.MetadataVersionException


class MetaStoreException(BKException):
    """An operation of the metadata store failed (ZKException when it is ZooKeeper)."""

    code = Code.MetaStoreException


class ZKException(MetaStoreException):
    """A ZooKeeper operation of the metadata store failed."""

    code = Code.ZKException


class ClientClosedException(BKException):
    """The client was used after it was closed."""

    code = Code.ClientClosedException


class LedgerExistException(BKException):
    """A ledger with the requested id already exists."""

    code = Code.LedgerExistException


class AddEntryQuorumTimeoutException(BKException):
    """An add did not reach its ack quorum within the add-entry quorum timeout."""

    code = Code.AddEntryQuorumTimeoutException


class DuplicateEntryIdException(BKException):
    """An entry id was added twice through an advanced (caller-chosen id) ledger handle."""

    code = Code.DuplicateEntryIdException


class TimeoutException(BKException, TimeoutError):
    """A bookie request timed out (also a ``TimeoutError``, as ``Future.result`` raises)."""

    code = Code.TimeoutException


class SecurityException(BKException):
    """A secure (TLS) connection to a bookie could not be established."""

    code = Code.SecurityException


class NoSuchLedgerExistsOnMetadataServerException(BKException):
    """The ledger has no metadata in the metadata store."""

    code = Code.NoSuchLedgerExistsOnMetadataServerException


class IllegalOpException(BKException):
    """The operation is not allowed here (e.g. unsupported by the protocol in use)."""

    code = Code.IllegalOpException


class LedgerFencedException(BKException):
    """A normal (non-recovery) add reached a fenced ledger (bookie status EFENCED)."""

    code = Code.LedgerFencedException


class UnauthorizedAccessException(BKException):
    """The master key differs from the ledger's, or auth is incomplete (bookie status EUA)."""

    code = Code.UnauthorizedAccessException


class UnclosedFragmentException(BKException):
    """Replication was asked to copy a fragment of a ledger that is not closed."""

    code = Code.UnclosedFragmentException


class WriteOnReadOnlyBookieException(BKException):
    """An add reached a read-only bookie (bookie status EREADONLY)."""

    code = Code.WriteOnReadOnlyBookieException


class TooManyRequestsException(BKException):
    """The bookie rejected the request: its queues are full (bookie status ETOOMANYREQUESTS)."""

    code = Code.TooManyRequestsException


class LedgerIdOverflowException(BKException):
    """The ledger id generator ran past the largest ledger id."""

    code = Code.LedgerIdOverflowException


class MetadataSerializationException(BKException):
    """Ledger metadata could not be serialised or parsed."""

    code = Code.MetadataSerializationException


class DataUnknownException(BKException):
    """The ledger's data is in limbo on the bookie (bookie status EUNKNOWNLEDGERSTATE)."""

    code = Code.DataUnknownException


class ReplicationException(BKException):
    """A step of the re-replication pipeline failed."""

    code = Code.ReplicationException


class UnexpectedConditionException(BKException):
    """An unexpected condition; also the code of any error that is not a BKException."""

    code = Code.UnexpectedConditionException


# --- bookie-side failures (BookKeeper's server-side BookieException family) -----------------


class BookieException(BKException):
    """The bookie itself failed: directories locked by another process, storage closed,
    or files found corrupt when opening.

    Not a client result code: ``code`` stays UnexpectedConditionException, and a bookie
    answers the request with an error status instead.
    """


class BookieIOException(BookieException):
    """An I/O error, or a record failing its checksum, on a storage read or write path
    (a bookie answers EIO; clients see ReadException or WriteException).
    """


class CookieNotFoundException(BookieException):
    """No cookie is stored for the bookie (in the metadata store or in a directory)."""


class InvalidCookieException(BookieException):
    """A bookie's cookie does not match its configuration or the cluster (other directories,
    another instance id): starting would risk serving the wrong data."""


# --- the object-storage cold tier (pybkx's own; no BookKeeper result code) --------------------


class ObjectStorageException(BKException):
    """The object store refused a request or did not answer in time (the endpoint, bucket or
    credentials are wrong, or the server is down); nothing was recorded in the metadata."""


class OffloadInProgressException(BKException):
    """Another offloader holds the ledger's offload claim (recorded in its metadata) and its
    claim has not timed out: it alone writes the ledger's object."""


# --- lookups --------------------------------------------------------------------------------

_BY_CODE: Final[Mapping[int, type[BKException]]] = MappingProxyType(
    {
        cls.code: cls
        for cls in (
            ReadException,
            QuorumException,
            NoBookieAvailableException,
            DigestNotInitializedException,
            DigestMatchException,
            NotEnoughBookiesException,
            NoSuchLedgerExistsException,
            BookieHandleNotAvailableException,
            ZKException,
            LedgerRecoveryException,
            LedgerClosedException,
            WriteException,
            NoSuchEntryException,
            IncorrectParameterException,
            InterruptedException,
            ProtocolVersionException,
            MetadataVersionException,
            MetaStoreException,
            ClientClosedException,
            LedgerExistException,
            AddEntryQuorumTimeoutException,
            DuplicateEntryIdException,
            TimeoutException,
            SecurityException,
            NoSuchLedgerExistsOnMetadataServerException,
            IllegalOpException,
            LedgerFencedException,
            UnauthorizedAccessException,
            UnclosedFragmentException,
            WriteOnReadOnlyBookieException,
            TooManyRequestsException,
            LedgerIdOverflowException,
            MetadataSerializationException,
            DataUnknownException,
            ReplicationException,
            UnexpectedConditionException,
        )
    }
)


def exception_class(code: int) -> type[BKException]:
    """The exception class of a client result code (UnexpectedConditionException if unknown).

    Raises ValueError for ``Code.OK`` and ``Code.UNINITIALIZED``, which are not errors.
    """
    if code in (Code.OK, Code.UNINITIALIZED):
        raise ValueError(f"result code {code} is not an error")
    return _BY_CODE.get(code, UnexpectedConditionException)


def code_to_exception(code: int, message: str | None = None) -> BKException:
    """A new exception instance for a client result code (see ``exception_class``)."""
    cls = exception_class(code)
    return cls() if message is None else cls(message)
