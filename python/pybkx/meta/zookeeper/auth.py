"""Who a ZooKeeper session authenticates as, and which ACL the znodes it creates get: BookKeeper's
``zkEnableSecurity`` (ZkUtils.getACLs: creator-only ``CREATOR_ALL_ACL`` when true, else
``OPEN_ACL_UNSAFE``). It reads settings and the JAAS file; it never opens a connection.

The identity, as a Java process finds it, is SASL DIGEST-MD5 with the ``username``/``password``
of ZooKeeper's DigestLoginModule in the JAAS file's ``Client`` section. A Java process takes
the file from ``-Djava.security.auth.login.config`` and the section from
``zookeeper.sasl.clientconfig``; pybkx takes them from ``jaasConfigFile`` (else
``$PYBKX_JAAS_CONFIG``) and ``zkSaslClientConfig``.
pybkx also offers ZooKeeper's ``digest`` scheme (``zkDigestAuthPath``: a file holding
``user:password``), an identity no Java BookKeeper process can take. A creator-only ACL made
by a session with no identity would name nobody (ZooKeeper answers InvalidACL), so with
``zkEnableSecurity`` and no identity the session is refused before it starts (fail closed).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from kazoo.security import CREATOR_ALL_ACL

from pybkx.config.jaas import DIGEST_LOGIN_MODULE, JAAS_ENV, JAAS_FILE_KEY, read_section
from pybkx.config.keystores import read_password
from pybkx.config.values import ConfigError, InvalidValue, boolean, optional_str
from pybkx.config.zk_security import optional_file

__all__ = [
    "DEFAULT_CLIENT_SECTION",
    "DIGEST_LOGIN_MODULE",
    "JAAS_ENV",
    "ZkAuth",
    "zk_auth",
]

log = logging.getLogger(__name__)

DEFAULT_CLIENT_SECTION: Final = "Client"
"""ZooKeeper's default for ``zookeeper.sasl.clientconfig``."""

# The keys this module reads from a store's settings.
ENABLE_KEY: Final = "zkEnableSecurity"
JAAS_KEY: Final = JAAS_FILE_KEY
SECTION_KEY: Final = "zkSaslClientConfig"
SASL_KEY: Final = "zkSaslClient"
DIGEST_KEY: Final = "zkDigestAuthPath"


@dataclass(frozen=True)
class ZkAuth:
    """A session's identity and ACL choice, ready for kazoo."""

    secure_acls: bool
    """``zkEnableSecurity``: every znode created gets ``CREATOR_ALL_ACL``."""
    sasl_user: str | None = None
    sasl_password: str | None = field(default=None, repr=False)
    sasl_source: str = ""
    """Where the SASL identity came from (``file [section]``), for messages."""
    digest: str | None = field(default=None, repr=False)
    """``user:password`` for ZooKeeper's digest scheme."""

    @property
    def identities(self) -> list[str]:
        """The ZooKeeper ids the session will hold (``sasl:user``, ``digest:user``)."""
        ids = []
        if self.sasl_user is not None:
            ids.append(f"sasl:{self.sasl_user}")
        if self.digest is not None:
            ids.append(f"digest:{self.digest.split(':', 1)[0]}")
        return ids

    def kazoo_options(self) -> dict[str, Any]:
        """KazooClient keyword arguments: ``default_acl`` (used by create, ensure_path and
        transactions alike), ``sasl_options``, ``auth_data``."""
        options: dict[str, Any] = {}
        if self.secure_acls:
            options["default_acl"] = list(CREATOR_ALL_ACL)
        if self.sasl_user is not None:
            options["sasl_options"] = {
                "mechanism": "DIGEST-MD5",
                "username": self.sasl_user,
                "password": self.sasl_password,
            }
        if self.digest is not None:
            options["auth_data"] = [("digest", self.digest)]
        return options


def _setting(conf: Mapping[str, object], key: str, parse: Any, default: Any) -> Any:
    """``conf[key]`` parsed, else ``default``; raises ConfigError naming the key."""
    if key not in conf:
        return default
    try:
        return parse(conf[key])
    except InvalidValue as exc:
        raise ConfigError(f"{key}={conf[key]!r}: {exc}") from None


def _digest(conf: Mapping[str, object]) -> str | None:
    """``user:password`` from the file ``zkDigestAuthPath`` names, None without the key."""
    path: str | None = _setting(conf, DIGEST_KEY, optional_file, None)
    if path is None:
        return None
    value = read_password(DIGEST_KEY, path)
    user, colon, password = value.partition(":")
    if not colon or not user.strip() or not password:
        raise ConfigError(
            f"{DIGEST_KEY}={path}: the file must hold user:password (ZooKeeper's digest "
            "scheme); it has no user or no password"
        )
    return value


def _sasl_identity(path: str, section: str) -> tuple[str, str] | None:
    """(username, password) from ``section`` of the JAAS file, None without that section.
    Raises ConfigError for a section pybkx cannot use: a Kerberos (GSSAPI) login, another
    module, or a DigestLoginModule without both options."""
    modules = read_section(path, section)
    if modules is None:
        return None
    where = f"the JAAS file {path} [{section}]"
    for module in modules:
        if module.module != DIGEST_LOGIN_MODULE:
            raise ConfigError(
                f"{where} uses {module.module}: pybkx authenticates to ZooKeeper with SASL "
                f"DIGEST-MD5 only ({DIGEST_LOGIN_MODULE} with username and password); it "
                "refuses rather than connect without the identity the section asks for"
            )
        user, password = module.options.get("username"), module.options.get("password")
        if not user or password is None:
            raise ConfigError(f"{where}: {DIGEST_LOGIN_MODULE} needs username and password")
        return user, password
    raise ConfigError(f"{where} has no login module")


def zk_auth(conf: Mapping[str, object], environ: Mapping[str, str] | None = None) -> ZkAuth:
    """The identity and ACL choice a session with the store settings ``conf`` uses:
    ``zkEnableSecurity`` (default false), ``jaasConfigFile`` (else ``$PYBKX_JAAS_CONFIG``),
    ``zkSaslClientConfig`` (default ``Client``), ``zkSaslClient`` (default true; false skips
    SASL as ZooKeeper's ``zookeeper.sasl.client``), ``zkDigestAuthPath`` (a file holding
    ``user:password``).

    As ZooKeeper's Java client, a JAAS file without the section means no SASL; a section
    present is used whether or not ``zkEnableSecurity`` is on (it only chooses the ACLs).
    Raises ConfigError for an unreadable JAAS file or unusable section, an unreadable or
    malformed ``zkDigestAuthPath`` file, or ``zkEnableSecurity`` without any identity.
    """
    env = os.environ if environ is None else environ
    secure: bool = _setting(conf, ENABLE_KEY, boolean, False)
    sasl_on: bool = _setting(conf, SASL_KEY, boolean, True)
    section: str = _setting(conf, SECTION_KEY, optional_str, None) or DEFAULT_CLIENT_SECTION
    path: str | None = _setting(conf, JAAS_KEY, optional_file, None) or env.get(JAAS_ENV) or None
    digest = _digest(conf)
    auth = ZkAuth(secure_acls=secure, digest=digest)
    if sasl_on and path is not None:
        identity = _sasl_identity(path, section)
        if identity is None:
            log.debug("the JAAS file %s has no [%s] section: no SASL to ZooKeeper", path, section)
        else:
            auth = ZkAuth(secure, identity[0], identity[1], f"{path} [{section}]", digest)
    if secure and not auth.identities:
        where = "no JAAS file" if path is None else f"the JAAS file {path} has no [{section}]"
        if path is not None and not sasl_on:
            where = f"{SASL_KEY}=false"
        raise ConfigError(
            f"{ENABLE_KEY}=true needs an identity for ZooKeeper ({where}): its creator-only "
            f"ACLs would name nobody. Give {JAAS_KEY} (or ${JAAS_ENV}) a JAAS file whose "
            f"[{section}] section has {DIGEST_LOGIN_MODULE} with username and password (the "
            f"same file as the Java processes' java.security.auth.login.config), or "
            f"{DIGEST_KEY} (a file holding user:password)"
        )
    return auth
