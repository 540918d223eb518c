"""The admin HTTP server's TLS keys mean the same on the real Java bookie (4.17.3, Vert.x) and
on pybkx's: one configuration given to both, the same clients served and refused. A trust store
makes client certificates compulsory, and it opens with the key store's password whatever
``httpServerTrustStorePassword`` says (BookKeeper's getter returns the key store's).
Certificates made by openssl and keytool."""

from __future__ import annotations

import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator
from http.client import HTTPException
from pathlib import Path

import harness
import pytest
from support.certs import Issued, TestCA, need_tools

from pybkx.tools.admin_http import admin_ssl_context

pytestmark = pytest.mark.interop


def get_status(url: str, context: ssl.SSLContext) -> int | str:
    """The status of ``GET url``, or the name of the error that stopped it."""
    try:
        with urllib.request.urlopen(url, timeout=30, context=context) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except (urllib.error.URLError, HTTPException, OSError) as exc:
        return type(getattr(exc, "reason", exc)).__name__


def tls_keys(server: Issued, ca: TestCA, trust_store: bool = True) -> list[str]:
    keys = [
        "httpServerEnabled=true",
        "httpServerTlsEnable=true",
        f"httpServerKeyStorePath={server.jks}",
        f"httpServerKeyStorePassword={server.password}",
    ]
    if trust_store:
        keys += [
            f"httpServerTrustStorePath={ca.trust_store('JKS')}",
            "httpServerTrustStorePassword=not-its-password",
        ]
    return keys


def start_java(
    java_classpath: str, zookeeper: str, workdir: Path, keys: list[str]
) -> tuple[harness.Process, str]:
    """A Java bookie with its Vert.x admin server and ``keys``; its https heartbeat URL once
    the port accepts connections (whether it serves a client is the test's question)."""
    port = harness.free_port()
    root = harness.fresh_zookeeper_root(zookeeper, "admin-tls-java")
    process, _ = harness.start_java_bookie(
        java_classpath,
        zookeeper + root,
        workdir,
        *keys,
        f"httpServerPort={port}",
        "httpServerClass=org.apache.bookkeeper.http.vertx.VertxHttpServer",
    )
    harness.wait_until(process, lambda: harness.accepts(port), "its admin port open")
    return process, f"https://127.0.0.1:{port}/heartbeat"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> tuple[TestCA, Issued, Issued]:
    need_tools()
    ca = TestCA(tmp_path_factory.mktemp("ca"))
    return ca, ca.issue("admin-server"), ca.issue("admin-client")


def _answers(url: str, context: ssl.SSLContext) -> bool:
    return get_status(url, context) == 200


@pytest.fixture
def java_https(
    java_classpath: str,
    zookeeper: str,
    tmp_path: Path,
    pki: tuple[TestCA, Issued, Issued],
) -> Iterator[str]:
    ca, server, client = pki
    process, url = start_java(java_classpath, zookeeper, tmp_path, tls_keys(server, ca))
    try:
        context = admin_ssl_context(str(ca.cert), str(client.cert_pem), str(client.key_pem))
        harness.wait_until(process, lambda: _answers(url, context), "serving HTTPS")
        yield url
    finally:
        process.stop()


@pytest.fixture
def pybkx_https(tmp_path: Path, pki: tuple[TestCA, Issued, Issued]) -> Iterator[str]:
    ca, server, client = pki
    port = harness.free_port()
    extra = "".join(f"{key}\n" for key in tls_keys(server, ca)) + f"httpServerPort={port}\n"
    process, _ = harness.start_pybkx_bookie(tmp_path, extra)
    try:
        url = f"https://127.0.0.1:{port}/heartbeat"
        context = admin_ssl_context(str(ca.cert), str(client.cert_pem), str(client.key_pem))
        harness.wait_until(process, lambda: _answers(url, context), "serving HTTPS")
        yield url
    finally:
        process.stop()


def outcomes(url: str, pki: tuple[TestCA, Issued, Issued]) -> dict[str, int | str]:
    ca, _, client = pki
    with_cert = admin_ssl_context(str(ca.cert), str(client.cert_pem), str(client.key_pem))
    return {
        "client certificate": get_status(url, with_cert),
        "no client certificate": get_status(url, admin_ssl_context(str(ca.cert))),
        "plain http": get_status(url.replace("https:", "http:"), with_cert),
    }


def test_the_same_keys_serve_and_refuse_the_same_clients(
    java_https: str, pybkx_https: str, pki: tuple[TestCA, Issued, Issued]
) -> None:
    java, ours = outcomes(java_https, pki), outcomes(pybkx_https, pki)
    assert java["client certificate"] == ours["client certificate"] == 200, (java, ours)
    for refused in ("no client certificate", "plain http"):
        assert java[refused] != 200 and ours[refused] != 200, (java, ours)


def test_without_a_trust_store_java_serves_nobody_and_pybkx_serves_tls_alone(
    java_classpath: str,
    zookeeper: str,
    tmp_path: Path,
    pki: tuple[TestCA, Issued, Issued],
) -> None:
    """pybkx's departure, shown: BookKeeper still requires a client certificate and trusts none,
    so no client is served; pybkx serves TLS with the server authenticated alone."""
    ca, server, _ = pki
    for side in ("java", "pybkx"):
        (tmp_path / side).mkdir()
    process, java_url = start_java(
        java_classpath, zookeeper, tmp_path / "java", tls_keys(server, ca, trust_store=False)
    )
    try:
        java = outcomes(java_url, pki)
    finally:
        process.stop()
    assert java["client certificate"] != 200 and java["no client certificate"] != 200, java
    port = harness.free_port()
    extra = "".join(f"{key}\n" for key in tls_keys(server, ca, trust_store=False))
    ours_process, _ = harness.start_pybkx_bookie(
        tmp_path / "pybkx", extra + f"httpServerPort={port}\n"
    )
    try:
        url = f"https://127.0.0.1:{port}/heartbeat"
        context = admin_ssl_context(str(ca.cert))
        harness.wait_until(ours_process, lambda: _answers(url, context), "serving HTTPS")
    finally:
        ours_process.stop()
