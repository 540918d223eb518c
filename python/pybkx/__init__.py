"""pybkx's public Python API: re-exports the Rust storage engine and the error hierarchy.
Only names are gathered here; it must never hold logic or start threads, files or sockets."""

from importlib.metadata import PackageNotFoundError, version

from pybkx import errors
from pybkx._core import LedgerStorage, scan_journal

try:
    __version__ = version("pybkx")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"

__all__ = ["LedgerStorage", "__version__", "errors", "scan_journal"]
