"""The embedded metadata backend: SQLite plus lock files in one directory, for the processes
of one machine. ``store`` composes the session, ledgers, registration, watches and locks; this
package file only names them."""

from pybkx.meta.embedded.session import (
    DEFAULT_BUSY_TIMEOUT_MS,
    DEFAULT_POLL_INTERVAL_MS,
    FIRST_LEDGER_ID,
    MAX_LEDGER_ID,
)
from pybkx.meta.embedded.store import EmbeddedMetadataStore

__all__ = [
    "DEFAULT_BUSY_TIMEOUT_MS",
    "DEFAULT_POLL_INTERVAL_MS",
    "FIRST_LEDGER_ID",
    "MAX_LEDGER_ID",
    "EmbeddedMetadataStore",
]
