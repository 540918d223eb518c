"""The admin HTTP server's TLS context from BookKeeper's ``httpServer*`` keys: the key store
(``httpServerKeyStorePath``/``httpServerKeyStorePassword``) and, when given, the trust store
that client certificates must chain to (``httpServerTrustStorePath``/``…Password``). It builds
an ``ssl.SSLContext`` once at start; it never serves a connection.

BookKeeper (VertxHttpServer) reads both stores as Java's JKS type, which also opens PKCS12
files, so pybkx takes either, told apart by their bytes. Python's ``ssl`` loads a private key
only from a file: the key and chain go to PEM files created 0600 in a private (0700) temporary
directory, which is removed as soon as the context holds them.
"""

from __future__ import annotations

import os
import shutil
import ssl
import tempfile
from pathlib import Path

from cryptography.hazmat.primitives import serialization

from pybkx.config import ConfigError, ServerConfig
from pybkx.config.keystores import KeyMaterial, load_key_store, load_trust_store

__all__ = ["admin_tls_context"]

# BookKeeper reads both stores as JKS; pybkx's JKS reader opens PKCS12 files too, as Java does.
_STORE_TYPE = "JKS"


def admin_tls_context(config: ServerConfig) -> ssl.SSLContext | None:
    """The server context ``config`` asks for (None when ``httpServerTlsEnable`` is false).

    With a trust store every client must present a certificate it signed, as BookKeeper
    requires; without one no client certificate is asked for (BookKeeper would ask for one that
    no client could present, its trust store being empty). Raises ConfigError naming the key of
    a missing store, a wrong password or a store without a key.
    """
    if not config.http_server_tls_enable:
        return None
    key_password = config.http_server_key_store_password
    try:
        material = load_key_store(
            _STORE_TYPE,
            config.http_server_key_store_path,
            key_password,
            certificate_path=None,
            names=("httpServerTlsEnable", "httpServerKeyStorePath", "httpServerKeyStorePath"),
        )
    except ConfigError as exc:
        raise ConfigError(f"{exc} (its password is httpServerKeyStorePassword)") from None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    _load_key(context, material)
    if config.http_server_trust_store_path:
        context.load_verify_locations(cadata=b"".join(_trusted(config)))
        context.verify_mode = ssl.CERT_REQUIRED
    return context


def _trusted(config: ServerConfig) -> tuple[bytes, ...]:
    """The trust store's certificates (DER). BookKeeper 4.17.3's getter for the trust store's
    password returns the key store's, so the store BookKeeper opens is the one the key store's
    password opens; pybkx tries ``httpServerTrustStorePassword`` first (when set), then that.
    Raises ConfigError naming the store when neither opens it."""
    passwords = [config.http_server_trust_store_password, config.http_server_key_store_password]
    tried = list(dict.fromkeys(p for p in passwords if p)) or [""]
    failure = ""
    for password in tried:
        try:
            return load_trust_store(
                _STORE_TYPE,
                config.http_server_trust_store_path,
                password,
                names=("httpServerTlsEnable", "httpServerTrustStorePath"),
            )
        except ConfigError as exc:
            failure = str(exc)
    raise ConfigError(
        f"{failure} (tried httpServerTrustStorePassword, then httpServerKeyStorePassword, as "
        "BookKeeper opens it)"
    )


def _load_key(context: ssl.SSLContext, material: KeyMaterial) -> None:
    """Loads the key and chain through files only this process can read, removed at once."""
    key = serialization.load_der_private_key(material.key_der, password=None)
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    chain_pem = "".join(ssl.DER_cert_to_PEM_cert(der) for der in material.chain_der).encode()
    private_dir = Path(tempfile.mkdtemp(prefix="pybkx-admin-tls-"))  # mode 0700
    try:
        key_file, chain_file = private_dir / "key.pem", private_dir / "chain.pem"
        _write_private(key_file, key_pem)
        _write_private(chain_file, chain_pem)
        try:
            context.load_cert_chain(chain_file, key_file)
        except ssl.SSLError as exc:
            raise ConfigError(
                f"httpServerKeyStorePath: its key and certificate do not go together: {exc}"
            ) from None
    finally:
        shutil.rmtree(private_dir, ignore_errors=True)


def _write_private(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
