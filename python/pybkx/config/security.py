"""Security that BookKeeper's keys ask for and pybkx does not implement yet: refused, never
ignored. A bookie or client given one of these keys refuses to start with a message naming the
key, instead of carrying on in plaintext or without authentication (fail closed). It only reads
configuration values; it never opens a file or a connection.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Final

from pybkx.config.values import ConfigError, InvalidValue, KeyedConfig, optional_str

if TYPE_CHECKING:
    from pybkx.config.server import ServerConfig

__all__ = [
    "AUTHZ_FACTORY",
    "BOOKIE_SECURITY_KEYS",
    "CLIENT_SECURITY_KEYS",
    "authorized_roles",
    "bookie_auth_provider",
    "refuse_unsupported_security",
]

AUTHZ_FACTORY: Final = "org.apache.bookkeeper.tls.BookieAuthZFactory"
"""BookKeeper's authorization by the role in a TLS client certificate (``authorizedRoles``)."""

# key -> what setting it asks for. A class key asks when it names any class; a boolean key when
# it is true.
_ASKS: dict[str, str] = {
    "tlsProviderFactoryClass": "TLS",
    "bookieAuthProviderFactoryClass": "client authentication",
    "clientAuthProviderFactoryClass": "authentication to the bookies",
}
# Every boolean security key is implemented now (zkEnableSecurity, httpServerTlsEnable).
_BOOLEAN_KEYS: frozenset[str] = frozenset()

# The bookie's `tlsProviderFactoryClass` is a typed key (pybkx.config.tls): TLSContextFactory
# turns TLS on, any other class is refused by its parser.
# `bookieAuthProviderFactoryClass` is typed too (``bookie_auth_provider``): BookieAuthZFactory
# is served, other providers are refused by the parser.
# `zkEnableSecurity` is typed (pybkx.config.zk_security): creator-only ACLs, and the metadata
# store refuses to open without an identity for ZooKeeper. `httpServerTlsEnable` is typed
# (pybkx.config.server): the admin server serves TLS.
BOOKIE_SECURITY_KEYS: tuple[str, ...] = ()
# The client's `tlsProviderFactoryClass` is typed (pybkx.config.client): TLSContextFactory turns
# TLS on, any other class is refused by its parser.
CLIENT_SECURITY_KEYS: tuple[str, ...] = ("clientAuthProviderFactoryClass",)


def _asks(key: str, value: object) -> bool:
    text = str(value).strip()
    if key in _BOOLEAN_KEYS:
        return value is True or text.lower() == "true"
    return value is not None and text != ""


def refuse_unsupported_security(config: KeyedConfig, keys: Iterable[str], what: str) -> None:
    """Raises ConfigError naming the first of ``keys`` that ``config`` sets to ask for security
    pybkx does not implement; ``what`` names the refused thing ("the bookie", "the client").
    An empty class name or a false flag asks for nothing, as in BookKeeper."""
    for key in keys:
        if key in config.extra and _asks(key, config.extra[key]):
            raise ConfigError(
                f"{key}={config.extra[key]} ({config.origin(key)}) asks for {_ASKS[key]}, "
                f"which pybkx does not implement yet: {what} refuses to start rather than run "
                f"without it (remove the key to run without {_ASKS[key]})"
            )


def bookie_auth_provider(value: object) -> str | None:
    """``bookieAuthProviderFactoryClass``: unset or blank (every client served) or BookKeeper's
    BookieAuthZFactory; any other provider (SASL, a custom class) is refused, never ignored."""
    text = optional_str(value)
    if text is None or text == AUTHZ_FACTORY:
        return text
    raise InvalidValue(
        f"{text!r} asks for client authentication, which pybkx does not implement yet (only "
        f"{AUTHZ_FACTORY} is): the bookie refuses to start rather than run without it"
    )


def authorized_roles(config: ServerConfig) -> tuple[str, ...] | None:
    """The roles a client certificate must carry when BookieAuthZFactory is on, else None.
    Raises ConfigError when it is on without roles, as BookKeeper refuses to start then."""
    if config.bookie_auth_provider_factory_class is None:
        return None
    if not config.authorized_roles or any(not role for role in config.authorized_roles):
        raise ConfigError(
            f"bookieAuthProviderFactoryClass={AUTHZ_FACTORY} needs authorizedRoles: the roles "
            "(from a client certificate's OU, 0:role1,role2) that may use the bookie"
        )
    return config.authorized_roles
