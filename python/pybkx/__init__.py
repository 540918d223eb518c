"""pybkx's public Python API: re-exports the Rust storage engine and the error hierarchy.
Only names are gathered here; it must never hold logic or start threads, files or sockets."""

from importlib.metadata import PackageNotFoundError, version

from pybkx import errors
from pybkx._core import (
    FLAG_DO_FENCING,
    FLAG_HIGH_PRIORITY,
    FLAG_NONE,
    FLAG_RECOVERY_ADD,
    BookieClient,
    BookieFuture,
    BookieServer,
    DigestManager,
    LedgerStorage,
    master_key,
    scan_journal,
)
from pybkx.config import ConfigError, ServerConfig

try:
    __version__ = version("pybkx")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"

__all__ = [
    "FLAG_DO_FENCING",
    "FLAG_HIGH_PRIORITY",
    "FLAG_NONE",
    "FLAG_RECOVERY_ADD",
    "BookieClient",
    "BookieFuture",
    "BookieServer",
    "ConfigError",
    "DigestManager",
    "LedgerStorage",
    "ServerConfig",
    "__version__",
    "errors",
    "master_key",
    "scan_journal",
]
