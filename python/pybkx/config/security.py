"""The authentication and authorization BookKeeper's provider keys ask for: which providers
pybkx serves (BookieAuthZFactory's roles; SASL DIGEST-MD5 from the JAAS file) and the refusal,
never the silent ignoring, of any other (fail closed: a bookie or client given one refuses to
start with a message naming the key). It reads configuration values and the JAAS file; it never
opens a connection.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from pybkx.config.jaas import BookieSasl, ClientSasl, bookie_sasl, client_sasl
from pybkx.config.values import ConfigError, InvalidValue, optional_str

if TYPE_CHECKING:
    from pybkx.config.client import ClientConfig
    from pybkx.config.server import ServerConfig

__all__ = [
    "AUTHZ_FACTORY",
    "SASL_BOOKIE_FACTORY",
    "SASL_CLIENT_FACTORY",
    "authorized_roles",
    "bookie_auth_provider",
    "bookie_sasl_policy",
    "client_auth_provider",
    "client_sasl_credentials",
]

AUTHZ_FACTORY: Final = "org.apache.bookkeeper.tls.BookieAuthZFactory"
"""BookKeeper's authorization by the role in a TLS client certificate (``authorizedRoles``)."""
SASL_BOOKIE_FACTORY: Final = "org.apache.bookkeeper.sasl.SASLBookieAuthProviderFactory"
"""BookKeeper's SASL authentication of clients (DIGEST-MD5 here; the JAAS file's users)."""
SASL_CLIENT_FACTORY: Final = "org.apache.bookkeeper.sasl.SASLClientProviderFactory"
"""BookKeeper's SASL authentication of a client to the bookies (DIGEST-MD5 here)."""

# Every key that asks for security is typed and its parser refuses what pybkx does not serve
# (never ignored): `tlsProviderFactoryClass` (pybkx.config.tls: TLSContextFactory),
# `bookieAuthProviderFactoryClass` (``bookie_auth_provider``: BookieAuthZFactory,
# SASLBookieAuthProviderFactory), `clientAuthProviderFactoryClass` (``client_auth_provider``:
# SASLClientProviderFactory); `zkEnableSecurity` (pybkx.config.zk_security) and
# `httpServerTlsEnable` (pybkx.config.server) are served.


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
