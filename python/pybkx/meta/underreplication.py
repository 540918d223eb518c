"""The under-replication part of the metadata contract (AutoRecovery's shared state, as
BookKeeper's ``LedgerUnderreplicationManager``): one marker per under-replicated ledger with
the bookies it misses, a lock per marker held by the worker copying it (gone with its holder),
the cluster-wide switch and lost-bookie delay, the auditor's check stamps, and the auditor
election. Abstract methods only."""

from __future__ import annotations

import abc
from collections.abc import Collection

from pybkx.meta.coordination import Election

#: The auditor's periodic checks whose last completion is stamped in the store, by BookKeeper's
#: node names (``<root>/underreplication/<name>``).
CHECK_STAMPS = ("checkallledgersctime", "placementpolicycheckctime", "replicascheckctime")


class UnderReplication(abc.ABC):
    """Markers, their locks, the replication switch, the auditor election."""

    @abc.abstractmethod
    def mark_ledger_underreplicated(self, ledger_id: int, missing: Collection[str]) -> None:
        """Create the ledger's marker, or add ``missing`` bookies to an existing one."""

    @abc.abstractmethod
    def underreplicated_ledgers(self) -> dict[int, list[str]]:
        """Every marker: ledger id -> missing bookies."""

    @abc.abstractmethod
    def lock_underreplicated_ledger(self, ledger_id: int, holder: str) -> int | None:
        """Take the marker's lock for ``holder`` (released when the holder's session ends);
        the marker's version, or None when the marker is gone or another holds its lock."""

    @abc.abstractmethod
    def lock_ledger_against_replication(self, ledger_id: int, holder: str) -> bool:
        """Take the ledger's replication lock whether or not it has a marker (BookKeeper's
        ``acquireUnderreplicatedLedger`` as its garbage collector uses it): while held, no
        worker starts copying the ledger. False when someone else holds it. Released by
        ``release_underreplicated_ledger`` or with this session."""

    @abc.abstractmethod
    def release_underreplicated_ledger(self, ledger_id: int) -> None:
        """Release a lock this session holds (the marker stays). Idempotent."""

    @abc.abstractmethod
    def mark_ledger_replicated(self, ledger_id: int, version: int) -> bool:
        """Delete the marker if it is still at ``version`` (a re-mark meanwhile keeps it) and
        release its lock. True when the marker was deleted."""

    @abc.abstractmethod
    def replication_enabled(self) -> bool:
        """False while an operator disabled AutoRecovery (BookKeeper's ``disable`` node)."""

    @abc.abstractmethod
    def set_replication_enabled(self, enabled: bool) -> None: ...

    @abc.abstractmethod
    def lost_bookie_recovery_delay(self) -> int | None:
        """Seconds the auditor waits before auditing one lost bookie; None when never set."""

    @abc.abstractmethod
    def set_lost_bookie_recovery_delay(self, seconds: int) -> None:
        """Store the delay. Storing the value already there still counts as a change (see
        ``lost_bookie_recovery_delay_version``): BookKeeper's ``triggeraudit`` does that."""

    @abc.abstractmethod
    def lost_bookie_recovery_delay_version(self) -> int | None:
        """How many times the delay was stored (a ZooKeeper node's version), None when never:
        the auditor watches it to notice a re-store of the same value."""

    @abc.abstractmethod
    def check_ctime(self, name: str) -> int | None:
        """When the auditor last completed the check ``name`` (one of ``CHECK_STAMPS``), in
        milliseconds since the epoch; None when never. Raises ValueError for another name."""

    @abc.abstractmethod
    def set_check_ctime(self, name: str, ctime_ms: int) -> None:
        """Stamp the check ``name`` (one of ``CHECK_STAMPS``) as completed at ``ctime_ms``."""

    @abc.abstractmethod
    def auditor_election(self, bookie_id: str) -> Election:
        """The election of the cluster's one auditor, contending as ``bookie_id``."""
