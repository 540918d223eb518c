"""The bookie control plane: opens the ledger storage, starts the Rust server, stops both on signal.
It decides, logs and reports; it must never read or write entries, frames or storage files."""

from __future__ import annotations

import ipaddress
import logging
import signal
import socket
import threading
from types import FrameType, TracebackType

from pybkx import errors
from pybkx._core import BookieServer, LedgerStorage
from pybkx.config import ConfigError, ServerConfig

__all__ = ["DRAIN_TIMEOUT_MS", "Bookie", "BookieError", "bookie_address"]

logger = logging.getLogger(__name__)

DRAIN_TIMEOUT_MS = 10_000
"""How long a stopping bookie lets in-flight requests finish before closing connections."""

_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
_SIGNAL_POLL_S = 0.5


class BookieError(Exception):
    """The bookie could not start or stop cleanly; the message is one line for the operator."""


def _event(level: int, event: str, /, **fields: object) -> None:
    """Log ``event key=value ...``; the fields also ride on the record as ``record.fields``."""

    def text(value: object) -> str:
        if isinstance(value, list | tuple):
            return ",".join(str(v) for v in value)
        s = str(value)
        return repr(s) if not s or any(c.isspace() for c in s) else s

    pairs = "".join(f" {key}={text(value)}" for key, value in fields.items())
    logger.log(level, "%s%s", event, pairs, extra={"event": event, "fields": fields})


def _stats(source: BookieServer | LedgerStorage) -> dict[str, int]:
    """Counters for a log line; never fails (a closed object may refuse)."""
    try:
        return dict(source.stats())
    except Exception:
        return {}


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def bookie_address(config: ServerConfig, port: int) -> str:
    """The ``host:port`` this bookie is known by, following BookKeeper's rule.

    ``advertisedAddress`` if set; else the address of ``listeningInterface``; else the local host
    name's address. A loopback address is refused unless ``allowLoopback`` when the bookie is meant
    to join a cluster (a metadata service is configured), because every such bookie would claim
    the same identity; a standalone bookie may use one. Raises ConfigError.
    """
    if config.advertised_address is not None:
        return f"{config.advertised_address}:{port}"
    registering = config.metadata_uri() is not None
    if config.listening_interface is not None:
        host = config.listening_address()
        what = f"listeningInterface {config.listening_interface}"
    else:
        host = socket.gethostname()
        what = f"the local host name {host}"
    try:
        address = socket.gethostbyname(host)
    except OSError as exc:
        if registering:
            raise ConfigError(
                f"cannot resolve {what} to an address for the bookie id: {exc}; "
                "set advertisedAddress"
            ) from None
        address = host
    if registering and _is_loopback(address) and not config.allow_loopback:
        raise ConfigError(
            f"invalid allowLoopback in {config.source}: the bookie address {address}:{port} "
            f"(from {what}) is a loopback address; set allowLoopback=true, listeningInterface "
            "or advertisedAddress"
        )
    return f"{address}:{port}"


class Bookie:
    """A bookie process: ledger storage plus the V2 server over it, stopped on SIGTERM/SIGINT.

    ``run()`` is the whole life of ``pybkx bookie``; ``start()``/``stop()`` (or ``with``) drive it
    step by step. Registration with a metadata service arrives with the metadata work: with
    ``metadataServiceUri`` set the bookie says so and serves standalone.
    """

    def __init__(self, config: ServerConfig, *, drain_timeout_ms: int = DRAIN_TIMEOUT_MS) -> None:
        self.config = config
        self.drain_timeout_ms = drain_timeout_ms
        self._storage: LedgerStorage | None = None
        self._server: BookieServer | None = None
        self._bookie_id: str | None = None

    # --- state

    @property
    def running(self) -> bool:
        return self._server is not None

    @property
    def storage(self) -> LedgerStorage:
        if self._storage is None:
            raise BookieError("the bookie is not running")
        return self._storage

    @property
    def server(self) -> BookieServer:
        if self._server is None:
            raise BookieError("the bookie is not running")
        return self._server

    @property
    def port(self) -> int:
        """The bound port (differs from ``bookiePort`` only for port 0)."""
        return self.server.port

    @property
    def bookie_id(self) -> str:
        if self._bookie_id is None:
            raise BookieError("the bookie is not running")
        return self._bookie_id

    # --- life cycle

    def start(self) -> None:
        """Open the storage (replaying its journal) and start serving. Raises BookieError."""
        if self._server is not None:
            raise BookieError("the bookie is already running")
        config = self.config
        try:
            server_kwargs = config.server_kwargs()
            bookie_address(config, config.bookie_port)  # refuse a bad identity before any I/O
        except ConfigError as exc:
            raise BookieError(str(exc)) from None
        self._note_what_is_not_implemented()

        storage_kwargs = config.storage_kwargs()
        _event(
            logging.INFO,
            "opening ledger storage",
            journal_dirs=config.journal_directories,
            ledger_dirs=config.ledger_directories,
            index_dirs=config.index_directories or "(ledger dirs)",
        )
        try:
            storage = LedgerStorage(**storage_kwargs)
        except errors.BookieException as exc:  # directories locked, storage closed, corrupt
            raise BookieError(f"cannot open ledger storage: {exc}") from None
        except (OSError, ValueError, errors.BKException) as exc:
            raise BookieError(f"cannot open ledger storage: {type(exc).__name__}: {exc}") from None

        host, port = server_kwargs["host"], server_kwargs["port"]
        try:
            server = BookieServer(storage, **server_kwargs)
        except Exception as exc:
            self._close_storage_after_failure(storage)
            if isinstance(exc, OSError):
                reason = exc.strerror or str(exc)
                raise BookieError(f"cannot listen on {host}:{port}: {reason}") from None
            raise BookieError(
                f"cannot start the bookie server on {host}:{port}: {type(exc).__name__}: {exc}"
            ) from None

        self._storage, self._server = storage, server
        try:
            self._bookie_id = config.bookie_id or bookie_address(config, server.port)
        except ConfigError:  # resolution changed since the check above; keep serving
            self._bookie_id = f"{host}:{server.port}"
        _event(
            logging.INFO,
            "bookie serving",
            bookie_id=self._bookie_id,
            listen=f"{host}:{server.port}",
            read_only=server.is_read_only(),
            ledgers=_stats(storage).get("ledgers", "?"),
            max_frame_size=server_kwargs["max_frame_size"],
            max_pending_adds=server_kwargs["max_pending_adds"],
            max_pending_reads=server_kwargs["max_pending_reads"],
            max_batch_read_size=server_kwargs["max_batch_read_size"],
            metadata=config.metadata_uri() or "(standalone)",
            config=config.source,
        )

    def stop(self) -> None:
        """Stop serving (draining in-flight requests), then close the storage, which checkpoints.

        Idempotent. Raises BookieError if the storage could not be closed cleanly.
        """
        server, storage = self._server, self._storage
        self._server = self._storage = None
        if server is not None:
            _event(logging.INFO, "stopping server", drain_timeout_ms=self.drain_timeout_ms)
            try:
                server.stop(self.drain_timeout_ms)
            except Exception as exc:  # the storage must still be closed
                _event(logging.ERROR, "server stop failed", error=f"{type(exc).__name__}: {exc}")
            else:
                _event(logging.INFO, "server stopped", **_stats(server))
        if storage is not None:
            counters = _stats(storage)
            try:
                storage.close()
            except Exception as exc:
                raise BookieError(
                    f"cannot close ledger storage cleanly: {type(exc).__name__}: {exc}"
                ) from None
            _event(logging.INFO, "ledger storage closed (checkpointed)", **counters)

    def run(self) -> int:
        """Start, serve until SIGTERM or SIGINT, stop; return the exit code (0).

        Must run in the main thread (signal handlers). Raises BookieError on a failed start or
        stop; a signal that arrives during the start stops the bookie right after it.
        """
        stop_requested = threading.Event()
        received: list[str] = []

        def on_signal(signum: int, frame: FrameType | None) -> None:
            name = signal.Signals(signum).name
            if stop_requested.is_set():
                _event(logging.WARNING, "already stopping", signal=name)
                return
            received.append(name)
            stop_requested.set()

        previous = {sig: signal.signal(sig, on_signal) for sig in _STOP_SIGNALS}
        try:
            self.start()
            while not stop_requested.wait(_SIGNAL_POLL_S):
                pass
            _event(logging.INFO, "stop requested", signal=received[0])
        finally:
            try:
                self.stop()
            finally:
                for sig, handler in previous.items():
                    signal.signal(sig, handler)
        _event(logging.INFO, "bookie stopped", bookie_id=self._bookie_id)
        return 0

    def __enter__(self) -> Bookie:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # --- helpers

    def _note_what_is_not_implemented(self) -> None:
        config = self.config
        uri = config.metadata_uri()
        if uri is not None:
            via = "metadataServiceUri" if config.metadata_service_uri else "zkServers (legacy)"
            _event(
                logging.WARNING,
                "metadata service configured but not used yet: registration, cookies and "
                "read-only announcements arrive with the metadata work; serving standalone",
                metadata=uri,
                key=via,
            )
        if config.http_server_enabled:
            _event(
                logging.WARNING,
                "httpServerEnabled=true accepted, but the HTTP admin server is not implemented yet",
            )

    @staticmethod
    def _close_storage_after_failure(storage: LedgerStorage) -> None:
        try:
            storage.close()
        except Exception as exc:
            _event(logging.ERROR, "closing storage failed", error=f"{type(exc).__name__}: {exc}")
