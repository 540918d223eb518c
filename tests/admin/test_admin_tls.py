"""The admin API over TLS (BookKeeper's ``httpServerTlsEnable`` and its key and trust stores)
and basic auth on its write endpoints (pybkx's ``httpServerBasicAuthPath``): https answers a
client that trusts the bookie's CA and nobody else, plain http gets nothing, a trust store makes
client certificates compulsory, an unusable store or user file stops the bookie. Real bookie
processes; certificates made by openssl and keytool."""

from __future__ import annotations

import base64
import socket
import ssl
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from http.client import HTTPException
from pathlib import Path
from typing import Any

import pytest
from admin_helpers import http
from support.bookies import assert_one_line_failure, needs_server, write_conf
from support.bookies import start_bookie as start_bookie
from support.certs import Issued, TestCA, need_tools
from support.ports import free_port
from support.wait import wait_until

from pybkx.admin.tls import admin_tls_context
from pybkx.config import ServerConfig
from pybkx.tools.admin_http import CA_FILE_ENV, admin_ssl_context
from pybkx.tools.bookies import admin_url, fetch_json
from pybkx.tools.sandbox import Sandbox

pytestmark = [pytest.mark.integration, needs_server]

TOKEN = "a-bearer-token"
USER, PASSWORD = "operator", "pass:word with spaces"


@dataclass(frozen=True)
class Pki:
    ca: TestCA
    server: Issued
    client: Issued
    stranger_ca: TestCA
    stranger: Issued


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    need_tools()
    root = tmp_path_factory.mktemp("pki")
    ca = TestCA(root / "ca")
    stranger_ca = TestCA(root / "stranger", name="another-ca", password="its-own-password")
    return Pki(
        ca,
        ca.issue("admin-server"),
        ca.issue("admin-client"),
        stranger_ca,
        stranger_ca.issue("stranger"),
    )


def tls_conf(pki: Pki, store: str = "jks", **extra: object) -> dict[str, object]:
    keystore = pki.server.jks if store == "jks" else pki.server.pkcs12
    return {
        "httpServerTlsEnable": "true",
        "httpServerKeyStorePath": str(keystore),
        "httpServerKeyStorePassword": pki.server.password,
        **extra,
    }


@pytest.fixture(scope="module")
def https_only(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    """TLS with a JKS key store and no trust store; writes need the token or basic auth."""
    root = tmp_path_factory.mktemp("https")
    (root / "token").write_text(TOKEN + "\n")
    (root / "users").write_text(f"# admin users\n\n{USER}:{PASSWORD}\nother:secret\n")
    conf = tls_conf(
        pki,
        httpServerAuthTokenPath=str(root / "token"),
        httpServerBasicAuthPath=str(root / "users"),
    )
    with Sandbox(1, directory=root / "sandbox", conf=conf) as sb:
        yield sb


@pytest.fixture(scope="module")
def mutual(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    """TLS with a PKCS12 key store and a JKS trust store holding the CA: client certificates
    are required. The trust store's password is wrong and the key store's opens it: BookKeeper
    opens it with the key store's password whatever httpServerTrustStorePassword says."""
    root = tmp_path_factory.mktemp("mutual")
    conf = tls_conf(
        pki,
        "pkcs12",
        httpServerTrustStorePath=str(pki.ca.trust_store("JKS")),
        httpServerTrustStorePassword="not-its-password",
    )
    with Sandbox(1, directory=root / "sandbox", conf=conf) as sb:
        yield sb


def trusting(pki: Pki, client: Issued | None = None) -> ssl.SSLContext:
    if client is None:
        return admin_ssl_context(str(pki.ca.cert))
    return admin_ssl_context(str(pki.ca.cert), str(client.cert_pem), str(client.key_pem))


def basic(user: str, password: str) -> dict[str, str]:
    encoded = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"Authorization": f"Basic {encoded}"}


def refused(url: str, context: ssl.SSLContext | None) -> BaseException:
    """The error of a request the server must not answer."""
    target = f"{url}/api/v1/bookie/info"
    with pytest.raises((urllib.error.URLError, HTTPException, OSError)) as caught:
        urllib.request.urlopen(target, timeout=30, context=context).close()
    return caught.value


def test_https_serves_reads_and_authenticated_writes(https_only: Sandbox, pki: Pki) -> None:
    url = https_only.admin_urls[0]
    assert url.startswith("https://")
    context = trusting(pki)
    info = http("GET", f"{url}/api/v1/bookie/info", context=context)
    assert info.status == 200 and "freeSpace" in info.json()
    with urllib.request.urlopen(f"{url}/heartbeat", timeout=30, context=context) as response:
        assert response.read().strip() == b"OK"
        assert response.headers["Server"] == "pybkx"  # as under waitress: no versions
    gc = f"{url}/api/v1/bookie/gc"
    assert http("GET", gc, context=context).json() == {"is_in_force_gc": "false"}
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    assert http("PUT", gc, b"{}", headers=bearer, context=context).status == 200
    ok = http("PUT", gc, b"{}", headers=basic(USER, PASSWORD), context=context)
    assert ok.status == 200, ok.text
    assert http("PUT", gc, b"{}", headers=basic("other", "secret"), context=context).status == 200


def test_basic_auth_refuses_wrong_users_and_passwords(https_only: Sandbox, pki: Pki) -> None:
    gc = f"{https_only.admin_urls[0]}/api/v1/bookie/gc"
    context = trusting(pki)
    for headers in (
        {},
        basic(USER, "wrong"),
        basic("nobody", PASSWORD),
        basic(USER, ""),
        {"Authorization": "Basic not-base64!"},
        {"Authorization": f"Basic {base64.b64encode(USER.encode()).decode()}"},
    ):
        reply = http("POST", gc, b"{}", headers=headers, context=context)
        assert reply.status == 401, (headers, reply.text)
        assert "Basic" in reply.json()["error"] and "Bearer" in reply.json()["error"]


def test_plain_http_to_the_tls_port_gets_no_answer(https_only: Sandbox) -> None:
    url = https_only.admin_urls[0].replace("https://", "http://")
    refused(url, None)


def test_a_client_that_does_not_trust_the_ca_refuses_the_server(
    https_only: Sandbox, pki: Pki
) -> None:
    error = refused(https_only.admin_urls[0], admin_ssl_context(str(pki.stranger_ca.cert)))
    reason = getattr(error, "reason", error)
    assert isinstance(reason, ssl.SSLCertVerificationError), repr(error)


def test_pybkx_tools_find_and_speak_https(
    https_only: Sandbox, pki: Pki, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bookie publishes its admin endpoint as https; the shell's helpers use the CA that
    PYBKX_ADMIN_CA_FILE names."""
    base = admin_url(https_only.metadata_store, https_only.bookie_addresses[0])
    assert base == https_only.admin_urls[0]
    monkeypatch.setenv(CA_FILE_ENV, str(pki.ca.cert))
    marks = fetch_json(base, "/api/v1/bookie/last_log_mark")
    assert isinstance(marks, dict) and marks
    monkeypatch.setenv(CA_FILE_ENV, str(pki.stranger_ca.cert))
    with pytest.raises(OSError, match="CERTIFICATE_VERIFY_FAILED"):
        fetch_json(base, "/api/v1/bookie/last_log_mark")


def test_a_body_over_the_limit_is_refused_before_it_is_read(https_only: Sandbox, pki: Pki) -> None:
    host, port = https_only.admin_urls[0].removeprefix("https://").split(":")
    context = trusting(pki)
    with (
        socket.create_connection((host, int(port)), timeout=30) as raw,
        context.wrap_socket(raw, server_hostname=host) as sock,
    ):
        # Announce 2 MiB (httpServerMaxRequestBytes is 1 MiB) and send none of it.
        sock.sendall(
            b"PUT /api/v1/bookie/state/readonly HTTP/1.1\r\nHost: x\r\n"
            b"Authorization: Bearer " + TOKEN.encode() + b"\r\n"
            b"Content-Type: application/json\r\nContent-Length: 2097152\r\n\r\n"
        )
        status_line = sock.makefile("rb").readline()
    assert status_line.split()[1] == b"413", status_line


def test_connections_over_the_limit_are_closed_until_one_ends(pki: Pki, tmp_path: Path) -> None:
    conf = tls_conf(pki, httpServerMaxConnections=1)
    with Sandbox(1, directory=tmp_path / "sandbox", conf=conf) as sb:
        url = sb.admin_urls[0]
        host, port = url.removeprefix("https://").split(":")
        context = trusting(pki)
        with socket.create_connection((host, int(port)), timeout=30):
            # This connection says nothing and holds the only slot: the next is closed.
            refused(url, context)
        wait_until(
            lambda: http("GET", f"{url}/api/v1/bookie/info", context=context).status == 200,
            "a request served once the silent connection closed",
            timeout_s=30,
            ignoring=(urllib.error.URLError, HTTPException, OSError),
        )


def test_a_trust_store_with_a_password_of_its_own_opens_with_it(pki: Pki, tmp_path: Path) -> None:
    conf = tls_conf(
        pki,
        httpServerTrustStorePath=str(pki.stranger_ca.trust_store("PKCS12")),
        httpServerTrustStorePassword=pki.stranger_ca.password,
    )
    with Sandbox(1, directory=tmp_path / "sandbox", conf=conf) as sb:
        info = f"{sb.admin_urls[0]}/api/v1/bookie/info"
        assert http("GET", info, context=trusting(pki, pki.stranger)).status == 200
        refused(sb.admin_urls[0], trusting(pki, pki.client))  # not signed by the stranger CA


def test_a_trust_store_makes_client_certificates_compulsory(mutual: Sandbox, pki: Pki) -> None:
    url = mutual.admin_urls[0]
    refused(url, trusting(pki))  # no certificate
    refused(url, trusting(pki, pki.stranger))  # one the trust store did not sign
    info = http("GET", f"{url}/api/v1/bookie/info", context=trusting(pki, pki.client))
    assert info.status == 200 and "freeSpace" in info.json()
    # No token and no users: writes are open, as in BookKeeper.
    gc = f"{url}/api/v1/bookie/gc"
    assert http("PUT", gc, b"{}", context=trusting(pki, pki.client)).status == 200


@pytest.mark.parametrize(
    ("change", "key"),
    [
        ({"httpServerKeyStorePassword": "wrong"}, "httpServerKeyStorePath"),
        ({"httpServerKeyStorePath": "/nonexistent/keystore.jks"}, "httpServerKeyStorePath"),
        ({"httpServerKeyStorePath": ""}, "httpServerKeyStorePath is required"),
        # A trust store neither its password nor the key store's opens.
        ({"httpServerTrustStorePassword": "wrong"}, "httpServerTrustStorePath"),
        ({}, "httpServerTrustStorePath"),
    ],
)
def test_an_unusable_store_stops_the_bookie(
    tmp_path: Path, start_bookie: Any, pki: Pki, change: dict[str, str], key: str
) -> None:
    conf = tls_conf(pki, **change)
    if key == "httpServerTrustStorePath":
        conf["httpServerTrustStorePath"] = str(pki.stranger_ca.trust_store("JKS"))
    port = free_port()
    extra = f"httpServerEnabled=true\nhttpServerPort={port}\n"
    extra += "".join(f"{k}={v}\n" for k, v in conf.items())
    bookie = start_bookie("--conf", str(write_conf(tmp_path, free_port(), extra)))
    assert_one_line_failure(bookie, key)


@pytest.mark.parametrize("content", ["", "# only a comment\n", "no-colon\n", ":password\n", None])
def test_an_unusable_user_file_stops_the_bookie(
    tmp_path: Path, start_bookie: Any, content: str | None
) -> None:
    users = tmp_path / "users"
    if content is not None:
        users.write_text(content)
    extra = (
        f"httpServerEnabled=true\nhttpServerPort={free_port()}\nhttpServerBasicAuthPath={users}\n"
    )
    bookie = start_bookie("--conf", str(write_conf(tmp_path, free_port(), extra)))
    assert_one_line_failure(bookie, "httpServerBasicAuthPath")


def test_the_key_never_stays_on_disk_and_a_trust_store_asks_for_certificates(
    pki: Pki, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Python's ssl reads the key from a file: the private directory it went to is gone once
    the context is built."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    alone = admin_tls_context(ServerConfig.of(**tls_conf(pki)))
    assert alone is not None and alone.verify_mode == ssl.CERT_NONE
    trust = str(pki.ca.trust_store("PKCS12"))
    mutual = admin_tls_context(
        ServerConfig.of(**tls_conf(pki, "pkcs12", httpServerTrustStorePath=trust))
    )
    assert mutual is not None and mutual.verify_mode == ssl.CERT_REQUIRED
    assert list(tmp_path.iterdir()) == []
    assert admin_tls_context(ServerConfig()) is None
