"""AutoRecovery beside a bookie (``autoRecoveryDaemonEnabled=true``) or on its own
(``pybkx autorecovery``): settings from a bookie's configuration, a client of its cluster. It
starts and stops AutoRecovery; it never audits or copies itself (``auditor``, ``auto``)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Protocol

from pybkx.client import BookKeeper
from pybkx.config import ServerConfig
from pybkx.recovery.auditor import AuditorSettings
from pybkx.recovery.auto import AutoRecovery, AutoRecoverySettings

if TYPE_CHECKING:
    from pybkx._core import Metric

__all__ = ["AutoRecoveryService", "open_autorecovery", "settings_from", "stop_autorecovery"]

logger = logging.getLogger(__name__)


class _Bookie(Protocol):
    config: ServerConfig

    @property
    def bookie_id(self) -> str: ...


def settings_from(config: ServerConfig) -> AutoRecoverySettings:
    """BookKeeper's AutoRecovery keys of ``config``."""
    rate = config.replication_rate_by_bytes
    return AutoRecoverySettings(
        lost_bookie_recovery_delay_s=config.lost_bookie_recovery_delay_s,
        open_ledger_grace_s=config.open_ledger_rereplication_grace_period_ms / 1000,
        backoff_s=config.rw_rereplicate_backoff_ms / 1000,
        rate_bytes_per_s=rate if rate > 0 else None,
        auditor=AuditorSettings(
            bookie_check_s=config.auditor_periodic_bookie_check_interval_s,
            all_ledgers_check_s=config.auditor_periodic_check_interval_s,
            placement_check_s=config.auditor_periodic_placement_policy_check_interval_s,
            replicas_check_s=config.auditor_replicas_check_interval_s,
            verification_percentage=config.auditor_ledger_verification_percentage,
        ),
    )


def open_autorecovery(config: ServerConfig, node_id: str) -> AutoRecovery:
    """A client of ``config``'s cluster and AutoRecovery on it, started; ``close`` it with
    ``stop_autorecovery``. Raises ValueError (no metadataServiceUri), MetaStoreException."""
    uri = config.metadata_uri()
    if uri is None:
        raise ValueError(f"{config.source} names no metadataServiceUri or zkServers")
    bk = BookKeeper(uri, **config.client_settings())
    try:
        auto = AutoRecovery(bk, node_id, settings_from(config))
        auto.start()
    except BaseException:
        bk.close()
        raise
    return auto


def stop_autorecovery(auto: AutoRecovery) -> None:
    """Stop AutoRecovery and close its client. Never raises."""
    try:
        auto.stop()
    finally:
        auto.bk.close()


class AutoRecoveryService:
    """The bookie service that runs AutoRecovery in the bookie's process."""

    name = "autorecovery"

    def __init__(self) -> None:
        self._auto: AutoRecovery | None = None

    def start(self, bookie: _Bookie) -> None:
        """Start the auditor elector and the replication worker as ``bookie``'s id. Raises
        MetaStoreException, ValueError."""
        self._auto = open_autorecovery(bookie.config, bookie.bookie_id)

    def metrics(self) -> list[Metric]:
        """The auditor's and worker's stats (none before start)."""
        auto = self._auto
        return auto.metrics() if auto is not None else []

    def stop(self) -> None:
        auto, self._auto = self._auto, None
        if auto is not None:
            try:
                stop_autorecovery(auto)
            except Exception as exc:  # stopping must not fail the bookie's shutdown
                logger.warning("stopping AutoRecovery: %r", exc)
