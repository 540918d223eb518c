"""The bookie's serving parts, the Rust ledger storage and server: opened, listened on, stopped
and closed, each failure one line for the operator. It never decides when (the life cycle in
``process.py`` does) and never cuts the storage's closing checkpoint short."""

from __future__ import annotations

import logging
import socket

from pybkx import errors
from pybkx._core import BookieServer, LedgerStorage
from pybkx.bookie.events import log_event
from pybkx.bookie.exceptions import BookieError
from pybkx.config import ServerConfig
from pybkx.config.jaas import BookieSasl
from pybkx.config.tls import ServerTlsMaterial

__all__ = [
    "close_storage",
    "close_storage_after_failure",
    "counters",
    "free_port",
    "open_storage",
    "start_server",
    "stop_server",
]

logger = logging.getLogger(__name__)


def counters(source: BookieServer | LedgerStorage) -> dict[str, int]:
    """Counters for a log line; never fails (a closed object may refuse)."""
    try:
        return dict(source.stats())
    except Exception:
        return {}


def free_port(host: str) -> int:
    """A port free on ``host`` right now (for ``bookiePort=0``: the bookie id needs the port
    before the server starts). Raises BookieError."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((host, 0))
            port: int = sock.getsockname()[1]
            return port
    except OSError as exc:
        raise BookieError(f"cannot listen on {host}:0: {exc.strerror or exc}") from None


def open_storage(config: ServerConfig) -> LedgerStorage:
    """Open the ledger storage (replaying its journal). Raises BookieError."""
    log_event(
        logger,
        logging.INFO,
        "opening ledger storage",
        journal_dirs=config.journal_directories,
        ledger_dirs=config.ledger_directories,
        index_dirs=config.index_directories or "(ledger dirs)",
    )
    try:
        return LedgerStorage(config)
    except errors.BookieException as exc:  # directories locked, storage closed, corrupt
        raise BookieError(f"cannot open ledger storage: {exc}") from None
    except (OSError, ValueError, errors.BKException) as exc:
        raise BookieError(f"cannot open ledger storage: {type(exc).__name__}: {exc}") from None


def start_server(
    storage: LedgerStorage,
    config: ServerConfig,
    host: str,
    port: int,
    tls: ServerTlsMaterial | None = None,
    authorized_roles: tuple[str, ...] | None = None,
    sasl: BookieSasl | None = None,
) -> BookieServer:
    """Listen on ``host:port`` (answering START_TLS with ``tls``, serving only clients whose
    certificate's role is in ``authorized_roles`` when given, or that authenticated by SASL
    with ``sasl``); closes ``storage`` and raises BookieError on failure."""
    try:
        return BookieServer(storage, config, host, port, tls, authorized_roles, sasl)
    except Exception as exc:
        close_storage_after_failure(storage)
        if isinstance(exc, OSError):
            reason = exc.strerror or str(exc)
            raise BookieError(f"cannot listen on {host}:{port}: {reason}") from None
        raise BookieError(
            f"cannot start the bookie server on {host}:{port}: {type(exc).__name__}: {exc}"
        ) from None


def stop_server(server: BookieServer, drain_ms: int) -> None:
    """Stop serving, letting in-flight requests finish for at most ``drain_ms``. Never raises:
    the storage must still be closed."""
    log_event(logger, logging.INFO, "stopping server", drain_timeout_ms=drain_ms)
    try:
        server.stop(drain_ms)
    except Exception as exc:
        log_event(logger, logging.ERROR, "server stop failed", error=f"{type(exc).__name__}: {exc}")
    else:
        log_event(logger, logging.INFO, "server stopped", **counters(server))


def close_storage(storage: LedgerStorage) -> None:
    """Close the storage (it checkpoints), never cut short. Raises BookieError."""
    before = counters(storage)
    try:
        storage.close()
    except Exception as exc:
        raise BookieError(
            f"cannot close ledger storage cleanly: {type(exc).__name__}: {exc}"
        ) from None
    log_event(logger, logging.INFO, "ledger storage closed (checkpointed)", **before)


def close_storage_after_failure(storage: LedgerStorage) -> None:
    """Close after a failed start; a failure is logged, never raised."""
    try:
        storage.close()
    except Exception as exc:
        log_event(
            logger, logging.ERROR, "closing storage failed", error=f"{type(exc).__name__}: {exc}"
        )
