"""Key and trust stores as BookKeeper's TLSContextFactory reads them: PEM (a PKCS#8 key file and
a certificate chain file), PKCS12 and JKS (a file of type JKS may hold PKCS12, as Java reads it
since 9), with the password read from a file. It turns them into DER bytes for the Rust TLS
engine; it never opens a connection and never keeps a password.

Every failure is a ConfigError naming the key and the file, so a bookie with a missing store or
a bad password stops at start with one clear line.
"""

from __future__ import annotations

import hashlib
import hmac
import struct
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.serialization import pkcs12

from pybkx.config.values import ConfigError

__all__ = ["STORE_TYPES", "KeyMaterial", "load_key_store", "load_trust_store", "read_password"]

STORE_TYPES = ("PEM", "PKCS12", "JKS")

_JKS_MAGIC = 0xFEEDFEED
_JKS_PRIVATE_KEY, _JKS_TRUSTED_CERT = 1, 2
# The OID of Sun's own key protection ("JKS key protector"), 1.3.6.1.4.1.42.2.17.1.1, in DER.
_JKS_KEY_PROTECTOR_OID = bytes.fromhex("060a2b060104012a02110101")
_SHA1_LEN = 20


@dataclass(frozen=True)
class KeyMaterial:
    """A private key (PKCS#8 DER, unencrypted) and its certificate chain (DER, leaf first)."""

    key_der: bytes
    chain_der: tuple[bytes, ...]


def read_password(key: str, path: str | None) -> str:
    """The password in the file ``path`` names (BookKeeper's ``*PasswordPath`` keys: the file's
    UTF-8 text, surrounding white space dropped); "" without a path or for an empty file.
    Raises ConfigError when the file cannot be read."""
    if not path:
        return ""
    try:
        return Path(path).read_bytes().decode("utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{key}={path}: cannot read the password file: {exc}") from None


def _read(key: str, path: str | None) -> bytes:
    if not path:
        raise ConfigError(f"{key} is required for TLS and is not set")
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"{key}={path}: cannot read: {exc.strerror or exc}") from None


def _check_type(key: str, store_type: str) -> str:
    upper = store_type.strip().upper()
    if upper not in STORE_TYPES:
        raise ConfigError(f"{key}={store_type}: expected one of {', '.join(STORE_TYPES)}")
    return upper


def load_key_store(
    store_type: str,
    path: str | None,
    password: str,
    *,
    certificate_path: str | None,
    names: tuple[str, str, str] = ("tlsKeyStoreType", "tlsKeyStore", "tlsCertificatePath"),
) -> KeyMaterial:
    """The key and chain of a key store. PEM: ``path`` is the key (PKCS#8 or PKCS#1, encrypted
    with ``password`` if it is set) and ``certificate_path`` the chain; PKCS12 and JKS: ``path``
    holds both. ``names`` are the configuration keys to name in errors (type, store,
    certificate). Raises ConfigError (missing file, bad password, no key in the store)."""
    type_key, store_key, cert_key = names
    kind = _check_type(type_key, store_type)
    data = _read(store_key, path)
    if kind == "PEM":
        key_der = _pem_key(store_key, path, data, password)
        chain = _pem_certificates(cert_key, certificate_path, _read(cert_key, certificate_path))
        return KeyMaterial(key_der, chain)
    if _is_jks(data):
        return _jks_key(store_key, path, data, password)
    return _pkcs12_key(store_key, path, data, password)


def load_trust_store(
    store_type: str,
    path: str | None,
    password: str,
    *,
    names: tuple[str, str] = ("tlsTrustStoreType", "tlsTrustStore"),
) -> tuple[bytes, ...]:
    """The trusted certificates (DER) of a trust store: PEM (a file of certificates), PKCS12 or
    JKS (their certificate entries). Raises ConfigError (missing file, bad password, no
    certificate)."""
    type_key, store_key = names
    kind = _check_type(type_key, store_type)
    data = _read(store_key, path)
    if kind == "PEM":
        return _pem_certificates(store_key, path, data)
    if _is_jks(data):
        certs = _jks_entries(store_key, path, data, password)[1]
    else:
        certs = _pkcs12_certificates(store_key, path, data, password)
    if not certs:
        raise ConfigError(f"{store_key}={path}: holds no certificate")
    return certs


# --- PEM --------------------------------------------------------------------------------------


def _pem_key(key: str, path: str | None, data: bytes, password: str) -> bytes:
    try:
        private = serialization.load_pem_private_key(data, password.encode() if password else None)
    except (ValueError, TypeError) as exc:
        raise ConfigError(
            f"{key}={path}: not a usable PEM private key (or a bad password): {exc}"
        ) from None
    return private.private_bytes(
        serialization.Encoding.DER,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _pem_certificates(key: str, path: str | None, data: bytes) -> tuple[bytes, ...]:
    try:
        certs = x509.load_pem_x509_certificates(data)
    except ValueError as exc:
        raise ConfigError(f"{key}={path}: no PEM certificate in it: {exc}") from None
    return tuple(c.public_bytes(serialization.Encoding.DER) for c in certs)


# --- PKCS12 -----------------------------------------------------------------------------------


def _load_pkcs12(
    key: str, path: str | None, data: bytes, password: str
) -> pkcs12.PKCS12KeyAndCertificates:
    try:
        return pkcs12.load_pkcs12(data, password.encode() if password else None)
    except ValueError as exc:
        raise ConfigError(
            f"{key}={path}: cannot open it as PKCS12 (a bad password, or not a key store): {exc}"
        ) from None


def _pkcs12_key(key: str, path: str | None, data: bytes, password: str) -> KeyMaterial:
    store = _load_pkcs12(key, path, data, password)
    if store.key is None or store.cert is None:
        raise ConfigError(f"{key}={path}: holds no private key with its certificate")
    key_der = store.key.private_bytes(
        serialization.Encoding.DER,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    chain = [store.cert.certificate] + [c.certificate for c in store.additional_certs]
    return KeyMaterial(key_der, tuple(c.public_bytes(serialization.Encoding.DER) for c in chain))


def _pkcs12_certificates(
    key: str, path: str | None, data: bytes, password: str
) -> tuple[bytes, ...]:
    store = _load_pkcs12(key, path, data, password)
    certs = ([store.cert] if store.cert is not None else []) + list(store.additional_certs)
    return tuple(c.certificate.public_bytes(serialization.Encoding.DER) for c in certs)


# --- JKS (Java's own format: documented by its reader, sun.security.provider.JavaKeyStore) -----


def _is_jks(data: bytes) -> bool:
    return len(data) >= 4 and struct.unpack(">I", data[:4])[0] == _JKS_MAGIC


class _Cursor:
    """Reads JKS's big-endian fields; a short file is a ConfigError."""

    def __init__(self, data: bytes, what: str) -> None:
        self.data, self.at, self.what = data, 0, what

    def take(self, n: int) -> bytes:
        if n < 0 or self.at + n > len(self.data):
            raise ConfigError(f"{self.what}: a truncated or damaged JKS file")
        out = self.data[self.at : self.at + n]
        self.at += n
        return out

    def u16(self) -> int:
        return int(struct.unpack(">H", self.take(2))[0])

    def u32(self) -> int:
        return int(struct.unpack(">I", self.take(4))[0])

    def utf(self) -> str:
        return self.take(self.u16()).decode("utf-8", errors="replace")

    def blob(self) -> bytes:
        return self.take(self.u32())


def _jks_entries(
    key: str, path: str | None, data: bytes, password: str
) -> tuple[list[tuple[bytes, tuple[bytes, ...]]], tuple[bytes, ...]]:
    """(private key entries as (protected key, chain), trusted certificates) of a JKS file,
    its integrity hash checked against ``password``."""
    what = f"{key}={path}"
    body, digest = data[:-_SHA1_LEN], data[-_SHA1_LEN:]
    secret = password.encode("utf-16-be")
    expected = hashlib.sha1(secret + b"Mighty Aphrodite" + body).digest()
    if len(data) < 12 + _SHA1_LEN or not hmac.compare_digest(expected, digest):
        raise ConfigError(
            f"{what}: the JKS integrity check failed: a bad password, or a damaged file"
        )
    cur = _Cursor(body, what)
    cur.take(4)
    version = cur.u32()
    if version not in (1, 2):
        raise ConfigError(f"{what}: JKS version {version} is not supported")
    keys: list[tuple[bytes, tuple[bytes, ...]]] = []
    trusted: list[bytes] = []
    for _ in range(cur.u32()):
        tag = cur.u32()
        cur.utf()  # alias
        cur.take(8)  # creation date
        if tag == _JKS_PRIVATE_KEY:
            protected = cur.blob()
            chain = tuple(_jks_certificate(cur, version) for _ in range(cur.u32()))
            keys.append((protected, chain))
        elif tag == _JKS_TRUSTED_CERT:
            trusted.append(_jks_certificate(cur, version))
        else:
            raise ConfigError(f"{what}: JKS entry of unknown kind {tag}")
    return keys, tuple(trusted)


def _jks_certificate(cur: _Cursor, version: int) -> bytes:
    if version == 2:
        cur.utf()  # the certificate type, "X.509"
    return cur.blob()


def _jks_key(key: str, path: str | None, data: bytes, password: str) -> KeyMaterial:
    keys, _ = _jks_entries(key, path, data, password)
    if not keys:
        raise ConfigError(f"{key}={path}: holds no private key entry")
    protected, chain = keys[0]
    return KeyMaterial(_jks_unprotect(f"{key}={path}", protected, password), chain)


def _jks_unprotect(what: str, protected: bytes, password: str) -> bytes:
    """The PKCS#8 key inside JKS's key protection: salt, key XOR a SHA-1 key stream of password
    and salt, then SHA-1(password + key) as the check."""
    encrypted = _encrypted_data(what, protected)
    if len(encrypted) < 2 * _SHA1_LEN:
        raise ConfigError(f"{what}: a damaged protected key")
    salt, body, check = (
        encrypted[:_SHA1_LEN],
        encrypted[_SHA1_LEN:-_SHA1_LEN],
        encrypted[-_SHA1_LEN:],
    )
    secret = password.encode("utf-16-be")
    stream = bytearray()
    block = salt
    while len(stream) < len(body):
        block = hashlib.sha1(secret + block).digest()
        stream += block
    plain = bytes(a ^ b for a, b in zip(body, stream, strict=False))
    if not hmac.compare_digest(hashlib.sha1(secret + plain).digest(), check):
        raise ConfigError(f"{what}: the key's password is wrong")
    return plain


def _der_length(data: bytes, at: int) -> tuple[int, int]:
    """(length, offset of the content) of the DER element whose length octets start at ``at``."""
    first = data[at]
    if first < 0x80:
        return first, at + 1
    n = first & 0x7F
    return int.from_bytes(data[at + 1 : at + 1 + n], "big"), at + 1 + n


def _encrypted_data(what: str, info: bytes) -> bytes:
    """The octet string of an EncryptedPrivateKeyInfo whose algorithm is JKS's key protector:
    SEQUENCE { SEQUENCE { OID, [NULL] }, OCTET STRING }."""
    try:
        if info[0] != 0x30:
            raise IndexError
        _, at = _der_length(info, 1)
        if info[at] != 0x30:
            raise IndexError
        alg_len, alg_at = _der_length(info, at + 1)
        if not info[alg_at:].startswith(_JKS_KEY_PROTECTOR_OID):
            raise ConfigError(f"{what}: the key is protected by an algorithm JKS readers lack")
        at = alg_at + alg_len
        if info[at] != 0x04:
            raise IndexError
        length, start = _der_length(info, at + 1)
        return info[start : start + length]
    except IndexError:
        raise ConfigError(f"{what}: a damaged protected key") from None
