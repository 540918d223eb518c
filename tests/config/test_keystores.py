"""Key and trust stores read as BookKeeper's TLSContextFactory reads them (``pybkx.config.
keystores``), from files the real tools wrote: openssl's PEM and PKCS12, the JDK keytool's JKS
and PKCS12 trust stores. One key, three formats, the same bytes out; a bad password or a missing
file is one clear ConfigError naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from support.certs import Issued, TestCA, need_tools

from pybkx.config import ConfigError
from pybkx.config.keystores import load_key_store, load_trust_store, read_password


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> TestCA:
    need_tools()
    return TestCA(tmp_path_factory.mktemp("ca"))


@pytest.fixture(scope="module")
def bookie(ca: TestCA) -> Issued:
    return ca.issue("bookie-1", ou="0:bookie;1:cluster")


def _der_key(issued: Issued) -> bytes:
    key = serialization.load_pem_private_key(issued.key_pem.read_bytes(), None)
    return key.private_bytes(
        serialization.Encoding.DER, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _der_cert(pem: Path) -> bytes:
    return x509.load_pem_x509_certificate(pem.read_bytes()).public_bytes(serialization.Encoding.DER)


def test_the_password_file_is_read_as_bookkeeper_reads_it(tmp_path: Path) -> None:
    path = tmp_path / "pw"
    path.write_text("  secret\n")
    assert read_password("tlsKeyStorePasswordPath", str(path)) == "secret"
    assert read_password("tlsKeyStorePasswordPath", None) == ""
    with pytest.raises(ConfigError, match=r"tlsKeyStorePasswordPath=.*cannot read"):
        read_password("tlsKeyStorePasswordPath", str(tmp_path / "missing"))


@pytest.mark.parametrize("kind", ["PEM", "PEM-encrypted", "PKCS12", "JKS", "JKS-named-PKCS12"])
def test_one_key_reads_the_same_from_every_format(bookie: Issued, kind: str) -> None:
    store_type, store, password = {
        "PEM": ("PEM", bookie.key_pem, ""),
        "PEM-encrypted": ("PEM", bookie.encrypted_key_pem, bookie.password),
        "PKCS12": ("PKCS12", bookie.pkcs12, bookie.password),
        "JKS": ("JKS", bookie.jks, bookie.password),
        # Java reads a PKCS12 file whatever type it is named as; so does pybkx.
        "JKS-named-PKCS12": ("JKS", bookie.pkcs12, bookie.password),
    }[kind]
    material = load_key_store(
        store_type, str(store), password, certificate_path=str(bookie.chain_pem)
    )
    assert material.key_der == _der_key(bookie)
    assert material.chain_der[0] == _der_cert(bookie.cert_pem)
    assert len(material.chain_der) == 2  # the CA came along in every format


@pytest.mark.parametrize("kind", ["PKCS12", "JKS", "PEM-encrypted"])
def test_a_bad_password_stops_with_the_key_named(bookie: Issued, kind: str) -> None:
    store_type, store = {
        "PKCS12": ("PKCS12", bookie.pkcs12),
        "JKS": ("JKS", bookie.jks),
        "PEM-encrypted": ("PEM", bookie.encrypted_key_pem),
    }[kind]
    with pytest.raises(ConfigError, match=r"tlsKeyStore=.*(password|PKCS12)"):
        load_key_store(store_type, str(store), "wrong", certificate_path=str(bookie.chain_pem))


def test_missing_files_and_types_are_named(bookie: Issued, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"tlsKeyStore=.*cannot read"):
        load_key_store("JKS", str(tmp_path / "none.jks"), "x", certificate_path=None)
    with pytest.raises(ConfigError, match="tlsKeyStore is required"):
        load_key_store("PEM", None, "", certificate_path=str(bookie.chain_pem))
    with pytest.raises(ConfigError, match="tlsCertificatePath is required"):
        load_key_store("PEM", str(bookie.key_pem), "", certificate_path=None)
    with pytest.raises(ConfigError, match="tlsKeyStoreType=BKS: expected one of PEM, PKCS12, JKS"):
        load_key_store("BKS", str(bookie.key_pem), "", certificate_path=None)
    damaged = tmp_path / "damaged.jks"
    damaged.write_bytes(bookie.jks.read_bytes()[:-30] + b"\0" * 30)
    with pytest.raises(ConfigError, match="integrity check failed"):
        load_key_store("JKS", str(damaged), bookie.password, certificate_path=None)


@pytest.mark.parametrize("kind", ["PEM", "PKCS12", "JKS"])
def test_trust_stores_give_the_ca(ca: TestCA, kind: str) -> None:
    certs = load_trust_store(kind, str(ca.trust_store(kind)), ca.password)
    assert certs == (_der_cert(ca.cert),)


def test_a_key_store_is_no_trust_store_without_certificates(tmp_path: Path) -> None:
    empty = tmp_path / "empty.pem"
    empty.write_text("")
    with pytest.raises(ConfigError, match=r"tlsTrustStore=.*no PEM certificate"):
        load_trust_store("PEM", str(empty), "")
