"""Recovery of a lost bookie's data: the ledgers' fragments that named it are copied from the
surviving replicas onto other bookies, and their ensembles rewritten. ``recover_bookies`` is
BookKeeper's manual recovery (``bookkeeper shell recover``); AutoRecovery (``auto``) drives the
same fragment copy. It works through the client and the metadata store; it never reads or
writes a bookie's files."""

from pybkx.recovery.bookies import (
    RecoveryOptions,
    RecoveryReport,
    affected_ledgers,
    recover_bookies,
)
from pybkx.recovery.fragments import Fragment, fragments_on

__all__ = [
    "Fragment",
    "RecoveryOptions",
    "RecoveryReport",
    "affected_ledgers",
    "fragments_on",
    "recover_bookies",
]
