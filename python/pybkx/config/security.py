"""Security that BookKeeper's keys ask for and pybkx does not implement yet: refused, never
ignored. A bookie or client given one of these keys refuses to start with a message naming the
key, instead of carrying on in plaintext or without authentication (fail closed). It only reads
configuration values; it never opens a file or a connection.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Final

from pybkx.config.jaas import BookieSasl, ClientSasl, bookie_sasl, client_sasl
from pybkx.config.values import ConfigError, InvalidValue, KeyedConfig, optional_str

if TYPE_CHECKING:
    from pybkx.config.client import ClientConfig
    from pybkx.config.server import ServerConfig

__all__ = [
    "AUTHZ_FACTORY",
    "BOOKIE_SECURITY_KEYS",
    "CLIENT_SECURITY_KEYS",
    "SASL_BOOKIE_FACTORY",
    "SASL_CLIENT_FACTORY",
    "authorized_roles",
    "bookie_auth_provider",
    "bookie_sasl_policy",
    "client_auth_provider",
    "client_sasl_credentials",
    "refuse_unsupported_security",
]

AUTHZ_FACTORY: Final = "org.apache.bookkeeper.tls.BookieAuthZFactory"
"""BookKeeper's authorization by the role in a TLS client certificate (``authorizedRoles``)."""
SASL_BOOKIE_FACTORY: Final = "org.apache.bookkeeper.sasl.SASLBookieAuthProviderFactory"
"""BookKeeper's SASL authentication of clients (DIGEST-MD5 here; the JAAS file's users)."""
SASL_CLIENT_FACTORY: Final = "org.apache.bookkeeper.sasl.SASLClientProviderFactory"
"""BookKeeper's SASL authentication of a client to the bookies (DIGEST-MD5 here)."""

# key -> what setting it asks for. A class key asks when it names any class; a boolean key when
# it is true.
_ASKS: dict[str, str] = {
    "tlsProviderFactoryClass": "TLS",
    "bookieAuthProviderFactoryClass": "client authentication",
    "clientAuthProviderFactoryClass": "authentication to the bookies",
    "zkEnableSecurity": "ZooKeeper ACLs and authentication",
    "httpServerTlsEnable": "TLS on the admin HTTP server",
}
_BOOLEAN_KEYS = frozenset({"zkEnableSecurity", "httpServerTlsEnable"})

# The bookie's `tlsProviderFactoryClass` is a typed key (pybkx.config.tls): TLSContextFactory
# turns TLS on, any other class is refused by its parser.
# `bookieAuthProviderFactoryClass` is typed too (``bookie_auth_provider``): BookieAuthZFactory
# and SASLBookieAuthProviderFactory are served, other providers are refused by the parser.
BOOKIE_SECURITY_KEYS: tuple[str, ...] = (
    "zkEnableSecurity",
    "httpServerTlsEnable",
)
# The client's `tlsProviderFactoryClass` is typed (pybkx.config.client): TLSContextFactory turns
# TLS on, any other class is refused by its parser.
# `clientAuthProviderFactoryClass` is typed (``client_auth_provider``): SASLClientProviderFactory
# is served, any other class is refused by its parser.
CLIENT_SECURITY_KEYS: tuple[str, ...] = ("zkEnableSecurity",)


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
    """``bookieAuthProviderFactoryClass``: unset or blank (every client served), BookKeeper's
    BookieAuthZFactory or SASLBookieAuthProviderFactory; any other provider (a custom class)
    is refused, never ignored."""
    text = optional_str(value)
    if text is None or text in (AUTHZ_FACTORY, SASL_BOOKIE_FACTORY):
        return text
    raise InvalidValue(
        f"{text!r} asks for client authentication, which pybkx does not implement yet (only "
        f"{AUTHZ_FACTORY} and {SASL_BOOKIE_FACTORY} are): the bookie refuses to start rather "
        "than run without it"
    )


def client_auth_provider(value: object) -> str | None:
    """``clientAuthProviderFactoryClass``: unset or blank (no authentication) or BookKeeper's
    SASLClientProviderFactory; any other provider is refused, never ignored."""
    text = optional_str(value)
    if text is None or text == SASL_CLIENT_FACTORY:
        return text
    raise InvalidValue(
        f"{text!r} asks for authentication to the bookies, which pybkx does not implement yet "
        f"(only {SASL_CLIENT_FACTORY} is): the client refuses to start rather than run "
        "without it"
    )


def bookie_sasl_policy(config: ServerConfig) -> BookieSasl | None:
    """With SASLBookieAuthProviderFactory: the users of the JAAS file's
    ``saslJaasBookieSectionName`` section and ``saslJaasClientAllowedIds``; else None. Raises
    ConfigError for a missing or unusable JAAS file or section (BookKeeper does not start
    then either)."""
    if config.bookie_auth_provider_factory_class != SASL_BOOKIE_FACTORY:
        return None
    return bookie_sasl(
        config.jaas_config_file,
        config.sasl_jaas_bookie_section_name,
        config.sasl_jaas_client_allowed_ids,
    )


def client_sasl_credentials(config: ClientConfig) -> ClientSasl | None:
    """With SASLClientProviderFactory: the username and password of the JAAS file's
    ``saslJaasClientSectionName`` section; else None. Raises ConfigError for a missing or
    unusable JAAS file or section (the client is not created: it never connects
    unauthenticated)."""
    if config.client_auth_provider_factory_class != SASL_CLIENT_FACTORY:
        return None
    return client_sasl(config.jaas_config_file, config.sasl_jaas_client_section_name)


def authorized_roles(config: ServerConfig) -> tuple[str, ...] | None:
    """The roles a client certificate must carry when BookieAuthZFactory is on, else None.
    Raises ConfigError when it is on without roles, as BookKeeper refuses to start then."""
    if config.bookie_auth_provider_factory_class != AUTHZ_FACTORY:
        return None
    if not config.authorized_roles or any(not role for role in config.authorized_roles):
        raise ConfigError(
            f"bookieAuthProviderFactoryClass={AUTHZ_FACTORY} needs authorizedRoles: the roles "
            "(from a client certificate's OU, 0:role1,role2) that may use the bookie"
        )
    return config.authorized_roles
