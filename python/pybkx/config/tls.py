"""BookKeeper's TLS keys (``tlsProviderFactoryClass``, ``tlsKeyStore*``, ``tlsTrustStore*``,
``tlsCertificatePath``, ``tlsClientAuthentication``, ``tlsEnabledProtocols``,
``tlsEnabledCipherSuites``, ``tlsCertFilesRefreshDurationSeconds``): their value parsers, and
the bookie's TLS material read from its stores, ready for the Rust server. It reads the store
files; it never opens a connection.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from pybkx.config.keystores import STORE_TYPES, load_key_store, load_trust_store, read_password
from pybkx.config.values import ConfigError, InvalidValue, boolean, optional_str, setting

if TYPE_CHECKING:
    from pybkx.config.client import ClientConfig
    from pybkx.config.server import ServerConfig

__all__ = [
    "TLS_CONTEXT_FACTORY",
    "ClientTlsMaterial",
    "ServerTlsMaterial",
    "TlsKeys",
    "client_tls_material",
    "file_stamps",
    "names",
    "server_tls_material",
    "store_type",
    "tls_provider",
    "tls_provider_factory",
]

TLS_CONTEXT_FACTORY: Final = "org.apache.bookkeeper.tls.TLSContextFactory"
"""BookKeeper's TLS provider factory, the one ``tlsProviderFactoryClass`` may name."""

_PROVIDERS: Final = ("OpenSSL", "JDK")


def tls_provider_factory(value: object) -> str | None:
    """``tlsProviderFactoryClass``: unset or blank (no TLS) or BookKeeper's TLSContextFactory;
    any other class is refused, never ignored (security asked for must not silently vanish)."""
    text = optional_str(value)
    if text is None or text == TLS_CONTEXT_FACTORY:
        return text
    raise InvalidValue(
        f"only {TLS_CONTEXT_FACTORY} is supported, got {text!r}: pybkx refuses to start "
        "rather than run without the TLS that was asked for"
    )


def tls_provider(value: object) -> str:
    """``tlsProvider``: OpenSSL or JDK, as BookKeeper accepts them (both mean rustls here)."""
    text = optional_str(value) or "OpenSSL"
    for name in _PROVIDERS:
        if text.lower() == name.lower():
            return name
    raise InvalidValue(f"expected OpenSSL or JDK, got {text!r}")


def store_type(value: object) -> str:
    """A store type: PEM, PKCS12 or JKS (BookKeeper's default JKS)."""
    text = (optional_str(value) or "JKS").upper()
    if text not in STORE_TYPES:
        raise InvalidValue(f"expected one of {', '.join(STORE_TYPES)}, got {value!r}")
    return text


def names(value: object) -> tuple[str, ...]:
    """A comma-separated list of names (protocols, cipher suites); blank: none."""
    if value is None:
        return ()
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list | tuple):
        raise InvalidValue(f"expected comma-separated names, got {value!r}")
    return tuple(str(item).strip() for item in items if str(item).strip())


@dataclass(frozen=True)
class TlsKeys:
    """BookKeeper's TLS keys common to a bookie's and a client's configuration (its
    AbstractConfiguration's), with its defaults: a base of ``ServerConfig`` and
    ``ClientConfig``."""

    tls_provider_factory_class: str | None = setting(
        "tlsProviderFactoryClass", None, tls_provider_factory
    )
    """``org.apache.bookkeeper.tls.TLSContextFactory`` turns TLS on; unset: plaintext."""
    tls_provider: str = setting("tlsProvider", "OpenSSL", tls_provider)
    """OpenSSL or JDK; accepted for compatibility, both served by rustls."""
    tls_client_authentication: bool = setting("tlsClientAuthentication", False, boolean)
    """A bookie requires a client certificate chaining to ``tlsTrustStore``; a client presents
    its own (``clientKeyStore``, else ``tlsKeyStore``)."""
    tls_key_store_type: str = setting("tlsKeyStoreType", "JKS", store_type)
    tls_key_store: str | None = setting("tlsKeyStore", None, optional_str)
    """The key store (PKCS12, JKS) or, for PEM, the PKCS#8 key file."""
    tls_key_store_password_path: str | None = setting("tlsKeyStorePasswordPath", None, optional_str)
    tls_trust_store_type: str = setting("tlsTrustStoreType", "JKS", store_type)
    tls_trust_store: str | None = setting("tlsTrustStore", None, optional_str)
    tls_trust_store_password_path: str | None = setting(
        "tlsTrustStorePasswordPath", None, optional_str
    )
    tls_certificate_path: str | None = setting("tlsCertificatePath", None, optional_str)
    """For a PEM key store: the certificate chain file."""
    tls_enabled_protocols: tuple[str, ...] = setting("tlsEnabledProtocols", (), names)
    tls_enabled_cipher_suites: tuple[str, ...] = setting("tlsEnabledCipherSuites", (), names)


@dataclass(frozen=True)
class ServerTlsMaterial:
    """The bookie's TLS, read from its stores: its chain and key (DER), the roots a client
    certificate must chain to (None: no client certificate asked), the enabled protocols and
    suites, and the files whose change reloads it."""

    chain: tuple[bytes, ...]
    key: bytes
    client_roots: tuple[bytes, ...] | None
    protocols: tuple[str, ...]
    cipher_suites: tuple[str, ...]
    files: tuple[str, ...]

    def stamps(self) -> tuple[float | None, ...]:
        """The modification times of ``files`` now (None: unreadable)."""
        return file_stamps(self.files)


def file_stamps(files: tuple[str, ...]) -> tuple[float | None, ...]:
    """The modification time of each file now (None: unreadable)."""
    out: list[float | None] = []
    for path in files:
        try:
            out.append(os.stat(path).st_mtime)
        except OSError:
            out.append(None)
    return tuple(out)


def server_tls_material(config: ServerConfig) -> ServerTlsMaterial | None:
    """The bookie's TLS material when ``tlsProviderFactoryClass`` asks for TLS, else None.
    Raises ConfigError naming the key for a missing store, a bad password or a store without
    a key (the bookie then does not start)."""
    if config.tls_provider_factory_class is None:
        return None
    password = read_password("tlsKeyStorePasswordPath", config.tls_key_store_password_path)
    material = load_key_store(
        config.tls_key_store_type,
        config.tls_key_store,
        password,
        certificate_path=config.tls_certificate_path,
    )
    roots: tuple[bytes, ...] | None = None
    if config.tls_client_authentication:
        if not config.tls_trust_store:
            raise ConfigError(
                "tlsClientAuthentication=true needs tlsTrustStore: the certificates a client's "
                "certificate must chain to"
            )
        roots = load_trust_store(
            config.tls_trust_store_type,
            config.tls_trust_store,
            read_password("tlsTrustStorePasswordPath", config.tls_trust_store_password_path),
        )
    files = (
        config.tls_key_store,
        config.tls_key_store_password_path,
        config.tls_certificate_path,
        config.tls_trust_store if roots is not None else None,
        config.tls_trust_store_password_path if roots is not None else None,
    )
    return ServerTlsMaterial(
        chain=material.chain_der,
        key=material.key_der,
        client_roots=roots,
        protocols=config.tls_enabled_protocols,
        cipher_suites=config.tls_enabled_cipher_suites,
        files=tuple(f for f in files if f),
    )


@dataclass(frozen=True)
class ClientTlsMaterial:
    """A client's TLS, read from its stores: the roots a bookie's chain must reach, its own
    chain and key when it authenticates (None otherwise), host-name checks, protocols and
    suites."""

    roots: tuple[bytes, ...]
    identity: tuple[tuple[bytes, ...], bytes] | None
    verify_hostname: bool
    protocols: tuple[str, ...]
    cipher_suites: tuple[str, ...]


def client_tls_material(config: ClientConfig) -> ClientTlsMaterial | None:
    """The client's TLS material when ``tlsProviderFactoryClass`` asks for TLS, else None.
    BookKeeper's ``client*`` store keys win over the ``tls*`` ones. Raises ConfigError naming
    the key for a missing trust store (a bookie's chain is always verified), a missing key
    store with ``tlsClientAuthentication``, a bad password or an unreadable file."""
    if config.tls_provider_factory_class is None:
        return None
    trust_keys = ("clientTrustStoreType", "clientTrustStore")
    trust_path = config.client_trust_store or config.tls_trust_store
    if not trust_path:
        raise ConfigError(
            "tlsProviderFactoryClass needs clientTrustStore (or tlsTrustStore): the CA "
            "certificates a bookie's certificate must chain to"
        )
    roots = load_trust_store(
        config.client_trust_store_type or config.tls_trust_store_type,
        trust_path,
        read_password(
            "clientTrustStorePasswordPath",
            config.client_trust_store_password_path or config.tls_trust_store_password_path,
        ),
        names=trust_keys,
    )
    identity = None
    if config.tls_client_authentication:
        material = load_key_store(
            config.client_key_store_type or config.tls_key_store_type,
            config.client_key_store or config.tls_key_store,
            read_password(
                "clientKeyStorePasswordPath",
                config.client_key_store_password_path or config.tls_key_store_password_path,
            ),
            certificate_path=config.tls_certificate_path,
            names=("clientKeyStoreType", "clientKeyStore", "tlsCertificatePath"),
        )
        identity = (material.chain_der, material.key_der)
    return ClientTlsMaterial(
        roots=roots,
        identity=identity,
        verify_hostname=config.tls_hostname_verification_enabled,
        protocols=config.tls_enabled_protocols,
        cipher_suites=config.tls_enabled_cipher_suites,
    )
