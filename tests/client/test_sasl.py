"""SASL DIGEST-MD5 between the pybkx client and real pybkx bookies, with BookKeeper's keys
(``bookieAuthProviderFactoryClass=...SASLBookieAuthProviderFactory``,
``clientAuthProviderFactoryClass=...SASLClientProviderFactory``, the JAAS file's sections,
``saslJaasClientAllowedIds``): the right password writes and reads over V2 and V3, with TLS or
without; a wrong password, an unknown user, an id the bookies do not allow and a client
without credentials fail at once with UnauthorizedAccessException naming the bookie, and
nothing is written."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support.bookies import needs_server
from support.certs import TestCA, need_tools
from support.jaas import SASL_BOOKIE_FACTORY, SASL_CLIENT_FACTORY, write_jaas
from support.sandboxes import metric_total
from support.sandboxes import sandboxes as sandboxes

from pybkx import errors
from pybkx.client import BookKeeper
from pybkx.config import ServerConfig

pytestmark = [pytest.mark.integration, needs_server]

JAAS_KEY = "java.security.auth.login.config"
USERS = {"bookkeeper-app": "s3cret", "intruder": "let-me-in"}


def bookie_keys(tmp_path: Path, **extra: Any) -> dict[str, Any]:
    jaas = write_jaas(tmp_path / "bookie-jaas.conf", users=USERS)
    return {"bookieAuthProviderFactoryClass": SASL_BOOKIE_FACTORY, JAAS_KEY: str(jaas), **extra}


def client_keys(tmp_path: Path, user: str, password: str, **extra: Any) -> dict[str, Any]:
    jaas = write_jaas(tmp_path / f"client-{user}-{password}.conf", client=(user, password))
    return {
        "clientAuthProviderFactoryClass": SASL_CLIENT_FACTORY,
        JAAS_KEY: str(jaas),
        "zkTimeout": 2000,
        **extra,
    }


def write_and_read(bk: BookKeeper) -> None:
    with bk.create_ledger(3, 2, 2, password=b"sasl") as handle:
        for i in range(10):
            handle.append(f"sasl entry {i}".encode())
        ledger = handle.ledger_id
    reopened = bk.open_ledger(ledger, b"sasl")
    assert [bytes(e) for e in reopened.read(0, 9)] == [
        f"sasl entry {i}".encode() for i in range(10)
    ]


@pytest.mark.parametrize("v2", [True, False], ids=["V2", "V3"])
def test_the_right_password_writes_and_reads(sandboxes: Any, tmp_path: Path, v2: bool) -> None:
    cluster = sandboxes(bookie_keys(tmp_path))
    keys = client_keys(tmp_path, "bookkeeper-app", "s3cret", useV2WireProtocol=v2)
    with BookKeeper(cluster.metadata_uri, **keys) as bk:
        write_and_read(bk)
    assert metric_total(cluster, "pybkx_server_auth_requests") >= 2
    assert metric_total(cluster, "pybkx_server_authentication_failures") == 0


@pytest.mark.parametrize("v2", [True, False], ids=["V2", "V3"])
def test_refused_credentials_fail_fast_and_write_nothing(
    sandboxes: Any, tmp_path: Path, v2: bool
) -> None:
    cluster = sandboxes(bookie_keys(tmp_path))
    address = cluster.bookie_addresses[0]
    refused: list[dict[str, Any]] = [
        client_keys(tmp_path, "bookkeeper-app", "wrong", useV2WireProtocol=v2),
        client_keys(tmp_path, "bookkeeper-nobody", "s3cret", useV2WireProtocol=v2),
        # A known user and the right password, but saslJaasClientAllowedIds (BookKeeper's
        # default, .*bookkeeper.*) does not admit the id.
        client_keys(tmp_path, "intruder", "let-me-in", useV2WireProtocol=v2),
        # No credentials at all: the bookie answers the requests themselves EUA.
        {"zkTimeout": 2000, "useV2WireProtocol": v2},
    ]
    for keys in refused:
        with BookKeeper(cluster.metadata_uri, **keys) as bk:
            with pytest.raises(errors.UnauthorizedAccessException, match=address):
                bk.bookies.read(address, 1, 0).result()
            handle = bk.create_ledger(3, 2, 2)
            with pytest.raises(errors.UnauthorizedAccessException):
                handle.append(b"must not be written")
            assert handle.last_add_confirmed == -1
    assert metric_total(cluster, "pybkx_server_authentication_failures") >= 3
    # Nothing went to the bookies: an authenticated client finds no entry of those ledgers.
    with BookKeeper(
        cluster.metadata_uri, **client_keys(tmp_path, "bookkeeper-app", "s3cret")
    ) as bk:
        for ledger in bk.list_ledgers():
            assert bk.open_ledger(ledger, b"").last_add_confirmed == -1


def test_the_allowed_ids_pattern_decides_who_may_connect(sandboxes: Any, tmp_path: Path) -> None:
    cluster = sandboxes(bookie_keys(tmp_path, saslJaasClientAllowedIds="intruder|other"))
    with BookKeeper(cluster.metadata_uri, **client_keys(tmp_path, "intruder", "let-me-in")) as bk:
        write_and_read(bk)
    keys = client_keys(tmp_path, "bookkeeper-app", "s3cret")
    with (
        BookKeeper(cluster.metadata_uri, **keys) as bk,
        pytest.raises(errors.UnauthorizedAccessException),
    ):
        bk.bookies.read(cluster.bookie_addresses[0], 1, 0).result()


def test_sasl_inside_tls(sandboxes: Any, tmp_path: Path) -> None:
    """START_TLS first, then the SASL exchange inside TLS, then the requests."""
    need_tools()
    ca = TestCA(tmp_path / "ca")
    issued = ca.issue("bookie")
    tls_bookie = {
        "tlsProviderFactoryClass": "org.apache.bookkeeper.tls.TLSContextFactory",
        "tlsKeyStoreType": "PKCS12",
        "tlsKeyStore": str(issued.pkcs12),
        "tlsKeyStorePasswordPath": str(issued.password_file),
    }
    cluster = sandboxes(bookie_keys(tmp_path, **tls_bookie))
    tls_client = {
        "tlsProviderFactoryClass": "org.apache.bookkeeper.tls.TLSContextFactory",
        "clientTrustStoreType": "PEM",
        "clientTrustStore": str(ca.cert),
    }
    for v2 in (True, False):
        keys = client_keys(tmp_path, "bookkeeper-app", "s3cret", useV2WireProtocol=v2)
        with BookKeeper(cluster.metadata_uri, **keys, **tls_client) as bk:
            write_and_read(bk)
        keys = client_keys(tmp_path, "bookkeeper-app", "wrong", useV2WireProtocol=v2)
        with (
            BookKeeper(cluster.metadata_uri, **keys, **tls_client) as bk,
            pytest.raises(errors.UnauthorizedAccessException),
        ):
            bk.bookies.read(cluster.bookie_addresses[0], 1, 0).result()
    assert metric_total(cluster, "pybkx_server_tls_connections") >= 3


def test_the_shell_authenticates_with_the_bookies_configuration(
    sandboxes: Any, tmp_path: Path
) -> None:
    """As BookKeeper's shell builds its client configuration from the bookie's (as AutoRecovery
    and the admin API do): `pybkx shell simpletest --conf` of a bookie whose configuration
    names the client provider and a JAAS file with a client section passes; without the
    configuration the shell's client has no credentials and is refused."""
    jaas = write_jaas(tmp_path / "jaas.conf", users=USERS, client=("bookkeeper-app", "s3cret"))
    cluster = sandboxes(
        {
            "bookieAuthProviderFactoryClass": SASL_BOOKIE_FACTORY,
            "clientAuthProviderFactoryClass": SASL_CLIENT_FACTORY,
            JAAS_KEY: str(jaas),
        }
    )
    conf = cluster.directory / "bookie-0" / "bk_server.conf"
    settings = ServerConfig.from_file(conf, lenient=True).client_settings()
    assert settings["clientAuthProviderFactoryClass"] == SASL_CLIENT_FACTORY
    assert settings["jaasConfigFile"] == str(jaas)  # the Java property name is its alias
    pybkx = [sys.executable, "-m", "pybkx", "shell", "simpletest", "--numEntries", "5"]
    ok = subprocess.run([*pybkx, "--conf", str(conf)], capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr
    refused = subprocess.run(
        [*pybkx, "--uri", cluster.metadata_uri], capture_output=True, text=True, timeout=120
    )
    assert refused.returncode != 0
