"""pybkx: a replicated, durable log store that speaks Apache BookKeeper's protocol.

The public API, all importable from here:

- ``BookKeeper(metadata_service_uri=None, **conf)``: a client of one cluster; ``create_ledger``
  gives a ``LedgerHandle``, ``create_ledger_adv`` a ``LedgerHandleAdv`` (appends name their
  entry ids), ``open_ledger`` a ``ReadHandle``.
- ``LedgerHandle.append`` / ``append_async`` / ``append_many``; ``ReadHandle.read`` /
  ``read_async`` / ``batch_read`` / ``read_last_add_confirmed``; each returns or raises as its
  docstring says.
- ``Future``: what every ``*_async`` call returns: ``result(timeout)``, ``add_done_callback``,
  and ``await future`` in asyncio code.
- ``LedgerEntry`` (``ledger_id``, ``entry_id``, ``payload``), ``DigestType``, ``WriteFlag``
  (``create_ledger(write_flags={WriteFlag.DEFERRED_SYNC})``, then ``LedgerHandle.force``).
- ``errors``: one exception class per BookKeeper result code (``errors.BKException`` is the
  base); ``ClientConfig`` / ``ServerConfig`` / ``ConfigError``: configuration by BookKeeper's key
  names.

Importing this package starts no thread and opens no file or socket.
"""

import logging
from importlib.metadata import PackageNotFoundError, version

from pybkx import errors
from pybkx.client import (
    BookKeeper,
    Future,
    LedgerEntry,
    LedgerHandle,
    LedgerHandleAdv,
    ReadHandle,
    WriteFlag,
)
from pybkx.config import ClientConfig, ConfigError, ServerConfig
from pybkx.meta import DigestType

# A library logs; the application decides where records go (none printed by default).
logging.getLogger("pybkx").addHandler(logging.NullHandler())

try:
    __version__ = version("pybkx")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"

__all__ = [
    "BookKeeper",
    "ClientConfig",
    "ConfigError",
    "DigestType",
    "Future",
    "LedgerEntry",
    "LedgerHandle",
    "LedgerHandleAdv",
    "ReadHandle",
    "ServerConfig",
    "WriteFlag",
    "__version__",
    "errors",
]
