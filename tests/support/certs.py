"""Certificates and stores made by the tests with the real tools (``openssl``, the JDK's
``keytool``): a CA, keys and certificates it signs (with BookKeeper's role subject when asked),
and the same key as PEM, PKCS12 and JKS stores, so that what Java writes is what pybkx reads."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

__all__ = ["Issued", "TestCA", "bookie_keys", "client_keys", "need_tools"]

TLS_FACTORY = "org.apache.bookkeeper.tls.TLSContextFactory"
AUTHZ_FACTORY = "org.apache.bookkeeper.tls.BookieAuthZFactory"


def need_tools() -> None:
    """Skip the test unless ``openssl`` and ``keytool`` exist."""
    for tool in ("openssl", "keytool"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed")


def _run(*args: str | Path) -> None:
    subprocess.run([str(a) for a in args], check=True, capture_output=True, timeout=120)


@dataclass(frozen=True)
class Issued:
    """One key with its certificate in every store format; every store's password is in
    ``password_file``."""

    key_pem: Path
    """PKCS#8, unencrypted."""
    encrypted_key_pem: Path
    """PKCS#8, encrypted with the password."""
    cert_pem: Path
    chain_pem: Path
    """The certificate, then the CA's."""
    pkcs12: Path
    jks: Path
    password_file: Path
    password: str


class TestCA:
    """A certificate authority in ``root`` that issues certificates."""

    __test__ = False  # not a test class, whatever its name

    def __init__(self, root: Path, name: str = "pybkx-test-ca", password: str = "changeit") -> None:
        self.root = root
        self.password = password
        root.mkdir(parents=True, exist_ok=True)
        self.key = root / f"{name}.key"
        self.cert = root / f"{name}.pem"
        _run("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "30",
             "-subj", f"/CN={name}", "-keyout", self.key, "-out", self.cert)  # fmt: skip
        self.password_file = root / "password"
        self.password_file.write_text(password + "\n")

    def trust_store(self, kind: str) -> Path:
        """The CA's certificate as a trust store: ``PEM``, ``PKCS12`` or ``JKS`` (keytool)."""
        if kind == "PEM":
            return self.cert
        path = self.root / f"trust.{kind.lower()}"
        if not path.exists():
            _run("keytool", "-importcert", "-noprompt", "-alias", "ca", "-file", self.cert,
                 "-keystore", path, "-storetype", kind, "-storepass", self.password)  # fmt: skip
        return path

    def issue(self, name: str, *, ou: str | None = None, days: int = 30) -> Issued:
        """A key and a certificate for ``name`` (CN and subjectAltName DNS/IP 127.0.0.1,
        localhost), ``ou`` as the subject's organisational unit (BookKeeper's roles)."""
        d = self.root / name
        d.mkdir(parents=True, exist_ok=True)
        key, csr, cert = d / "key.pem", d / "req.csr", d / "cert.pem"
        subject = f"/CN={name}" + (f"/OU={ou}" if ou else "")
        _run("openssl", "req", "-newkey", "rsa:2048", "-nodes", "-subj", subject,
             "-keyout", key, "-out", csr)  # fmt: skip
        ext = d / "ext.cnf"
        ext.write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
        _run("openssl", "x509", "-req", "-in", csr, "-CA", self.cert, "-CAkey", self.key,
             "-CAcreateserial", "-days", str(days), "-out", cert, "-extfile", ext)  # fmt: skip
        chain = d / "chain.pem"
        chain.write_text(cert.read_text() + self.cert.read_text())
        encrypted = d / "key.enc.pem"
        _run("openssl", "pkcs8", "-topk8", "-in", key, "-out", encrypted,
             "-passout", f"pass:{self.password}")  # fmt: skip
        p12 = d / "keystore.p12"
        _run("openssl", "pkcs12", "-export", "-in", cert, "-inkey", key, "-certfile", self.cert,
             "-name", name, "-out", p12, "-passout", f"pass:{self.password}")  # fmt: skip
        jks = d / "keystore.jks"
        _run("keytool", "-importkeystore", "-noprompt", "-srckeystore", p12,
             "-srcstoretype", "PKCS12", "-srcstorepass", self.password, "-destkeystore", jks,
             "-deststoretype", "JKS", "-deststorepass", self.password,
             "-destkeypass", self.password)  # fmt: skip
        return Issued(
            key_pem=key,
            encrypted_key_pem=encrypted,
            cert_pem=cert,
            chain_pem=chain,
            pkcs12=p12,
            jks=jks,
            password_file=self.password_file,
            password=self.password,
        )


def bookie_keys(ca: TestCA, issued: Issued, *, roles: str | None = None) -> dict[str, Any]:
    """A bookie's TLS settings (a PKCS12 key store); with ``roles``, client certificates of
    ``ca`` are required and BookieAuthZFactory admits those carrying one of ``roles``."""
    keys: dict[str, Any] = {
        "tlsProviderFactoryClass": TLS_FACTORY,
        "tlsKeyStoreType": "PKCS12",
        "tlsKeyStore": str(issued.pkcs12),
        "tlsKeyStorePasswordPath": str(issued.password_file),
    }
    if roles is not None:
        keys |= {
            "tlsClientAuthentication": "true",
            "tlsTrustStoreType": "PEM",
            "tlsTrustStore": str(ca.cert),
            "bookieAuthProviderFactoryClass": AUTHZ_FACTORY,
            "authorizedRoles": roles,
        }
    return keys


def client_keys(ca: TestCA, client: Issued | None = None, **extra: Any) -> dict[str, Any]:
    """A client's TLS settings trusting ``ca`` (JKS stores), presenting ``client``'s
    certificate when given; ``extra`` settings added."""
    keys: dict[str, Any] = {
        "tlsProviderFactoryClass": TLS_FACTORY,
        "clientTrustStoreType": "JKS",
        "clientTrustStore": str(ca.trust_store("JKS")),
        "clientTrustStorePasswordPath": str(ca.password_file),
        "zkTimeout": 2000,
        **extra,
    }
    if client is not None:
        keys |= {
            "tlsClientAuthentication": True,
            "clientKeyStoreType": "JKS",
            "clientKeyStore": str(client.jks),
            "clientKeyStorePasswordPath": str(client.password_file),
        }
    return keys
