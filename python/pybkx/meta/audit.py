"""BookKeeper's ``triggeraudit`` (``BookKeeperAdmin.triggerAudit``) on the metadata store: the
lost-bookie delay is stored again with the value it has, which wakes the elected auditor to
audit lost bookies at once. Used by the shell and the admin API; the auditor is
``pybkx.recovery.auditor``. It only rewrites that value; it never audits anything itself."""

from __future__ import annotations

import logging

from pybkx import errors
from pybkx.meta.underreplication import UnderReplication

__all__ = ["AuditUnavailable", "trigger_audit"]

logger = logging.getLogger(__name__)


class AuditUnavailable(errors.ReplicationException):
    """The audit cannot be triggered: AutoRecovery is disabled, or no auditor is elected
    (BookKeeper's ``ReplicationException.UnavailableException``)."""


def trigger_audit(store: UnderReplication) -> int:
    """Store the lost-bookie delay's own value again (0 when never set); returns it. Raises
    AuditUnavailable (AutoRecovery disabled, or no auditor elected), MetaStoreException."""
    if not store.replication_enabled():
        raise AuditUnavailable("AutoRecovery is disabled, so the audit was not triggered")
    if store.auditor_election("triggeraudit").leader() is None:
        raise AuditUnavailable("no auditor is elected, so the audit was not triggered")
    delay = store.lost_bookie_recovery_delay() or 0
    store.set_lost_bookie_recovery_delay(delay)
    logger.info("lostBookieRecoveryDelay stored again (%d s) to trigger the audit", delay)
    return delay
