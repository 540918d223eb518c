"""The keys of a ZooKeeper session's security, common to a bookie's and a client's configuration:
BookKeeper's ``zkEnableSecurity`` (AbstractConfiguration) and pybkx's keys for the identity a
Java process takes from JVM system properties. It only types values; the metadata store reads
the JAAS file and decides (pybkx.meta.zookeeper.auth).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Final

from pybkx.config.values import boolean, optional_str, setting

__all__ = ["ZK_SECURITY_KEYS", "ZkSecurityKeys", "optional_file"]

ZK_SECURITY_KEYS: Final = (
    "zkEnableSecurity",
    "jaasConfigFile",
    "zkSaslClientConfig",
    "zkSaslClient",
    "zkDigestAuthPath",
)
"""Every key of ``ZkSecurityKeys``, as spelt in a configuration."""


def optional_file(value: object) -> str | None:
    """A file name (a string or a path object); blank means unset."""
    return optional_str(os.fspath(value) if isinstance(value, os.PathLike) else value)


@dataclass(frozen=True)
class ZkSecurityKeys:
    """A base of ``ServerConfig`` and ``ClientConfig``."""

    zk_enable_security: bool = setting("zkEnableSecurity", False, boolean)
    """Every znode this process creates gets ZooKeeper's creator-only ACL (BookKeeper's
    ``CREATOR_ALL_ACL``); needs an identity (JAAS ``Client`` section or ``zkDigestAuthPath``)."""
    jaas_config_file: str | None = setting("jaasConfigFile", None, optional_file)
    """pybkx's: the JAAS file a JVM is given as ``java.security.auth.login.config`` (that name is
    taken as this key's other spelling); unset: ``$PYBKX_JAAS_CONFIG``. One file for every
    section: ZooKeeper's ``Client`` login and BookKeeper's SASL sections."""
    zk_sasl_client_config: str | None = setting("zkSaslClientConfig", None, optional_str)
    """pybkx's: the JAAS section for ZooKeeper, ZooKeeper's ``zookeeper.sasl.clientconfig``
    (unset: ``Client``, its default)."""
    zk_sasl_client: bool = setting("zkSaslClient", True, boolean)
    """pybkx's: false skips SASL to ZooKeeper, as ZooKeeper's ``zookeeper.sasl.client``."""
    zk_digest_auth_path: str | None = setting("zkDigestAuthPath", None, optional_file)
    """pybkx's: a file holding ``user:password`` for ZooKeeper's digest scheme (an identity Java
    BookKeeper cannot take: a cluster shared with Java processes uses the JAAS file). A file,
    as BookKeeper's ``*PasswordPath`` keys, so the secret is in no configuration listing."""

    def zk_security_settings(self) -> dict[str, object]:
        """The metadata store's settings for these keys (only those set or on)."""
        out: dict[str, object] = {
            "zkEnableSecurity": self.zk_enable_security,
            "zkSaslClient": self.zk_sasl_client,
        }
        optional = {
            "jaasConfigFile": self.jaas_config_file,
            "zkSaslClientConfig": self.zk_sasl_client_config,
            "zkDigestAuthPath": self.zk_digest_auth_path,
        }
        out |= {key: value for key, value in optional.items() if value is not None}
        return out
