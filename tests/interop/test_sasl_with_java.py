"""SASL DIGEST-MD5 with Apache BookKeeper 4.17.3 itself, both ways, with BookKeeper's keys and a
JAAS file as its MD5 tests write one (ZooKeeper's DigestLoginModule; the JVMs are given it as
the system property ``java.security.auth.login.config``, pybkx as the key of that name):

* BookKeeper's own ledger client (SASLClientProviderFactory) writes to pybkx bookies
  (SASLBookieAuthProviderFactory) over V2 and V3, and pybkx's client reads the entries back
  with its own credentials; a Java client with a wrong password, or without credentials, writes
  nothing.
* pybkx's client adds and reads on a real Java bookie that requires SASL, over V2 and V3; with
  a wrong password it fails with UnauthorizedAccessException (the Java bookie never answers a
  refused exchange: the client gives up after ``clientConnectTimeoutMillis``) and nothing is
  written.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import harness
import pytest
from support.certs import TestCA, need_tools
from support.jaas import SASL_BOOKIE_FACTORY, SASL_CLIENT_FACTORY, write_jaas
from support.sandboxes import metric_total
from support.sandboxes import sandboxes as sandboxes
from test_ledgers_with_java_client import Java

from pybkx import errors
from pybkx._core import BookieClient, DigestManager, master_key
from pybkx.client import BookKeeper
from pybkx.config import ClientConfig
from pybkx.config.security import client_sasl_credentials
from pybkx.config.tls import client_tls_material

pytestmark = pytest.mark.interop

JAAS_KEY = "java.security.auth.login.config"
USERS = {"bookkeeper-app": "s3cret"}
ENTRIES = 10
PASSWORD_HEX = b"sasl".hex()
TLS_FACTORY = "org.apache.bookkeeper.tls.TLSContextFactory"


def java_client_jaas(tmp_path: Path, password: str) -> dict[str, str]:
    jaas = write_jaas(
        tmp_path / f"java-client-{password}.conf", client=("bookkeeper-app", password)
    )
    return {JAAS_KEY: str(jaas)}


def write(java: Java) -> list[dict[str, Any]]:
    payloads = [f"sasl entry {i}".encode().hex() for i in range(ENTRIES)]
    return java.run(
        [
            {
                "op": "create",
                "writer": "w",
                "ensemble": 3,
                "write_quorum": 2,
                "ack_quorum": 2,
                "digest": "CRC32C",
                "password_hex": PASSWORD_HEX,
            },
            {"op": "append", "writer": "w", "payloads_hex": payloads},
            {"op": "close", "writer": "w"},
        ]
    )


@pytest.mark.parametrize("protocol", ["V2", "V3"])
def test_java_client_authenticates_to_pybkx_bookies(
    zookeeper_server: str, sandboxes: Any, java_classpath: str, tmp_path: Path, protocol: str
) -> None:
    jaas = write_jaas(
        tmp_path / "bookie-jaas.conf", users=USERS, client=("bookkeeper-app", "s3cret")
    )
    uri = f"zk+hierarchical://{zookeeper_server}/sasl-{uuid.uuid4().hex}/ledgers"
    cluster = sandboxes(
        {
            "zkTimeout": 2000,
            "bookieAuthProviderFactoryClass": SASL_BOOKIE_FACTORY,
            JAAS_KEY: str(jaas),
        },
        zk_uri=uri,
    )
    settings = (
        f"clientAuthProviderFactoryClass={SASL_CLIENT_FACTORY}",
        f"useV2WireProtocol={'true' if protocol == 'V2' else 'false'}",
    )
    good = Java(java_classpath, cluster, tmp_path, settings, java_client_jaas(tmp_path, "s3cret"))
    created, appended, closed = write(good)
    assert "error" not in appended and closed.get("lac") == ENTRIES - 1, (created, appended, closed)
    assert metric_total(cluster, "pybkx_server_authentication_failures") == 0
    # pybkx's client, with the same JAAS file's client section, reads what Java wrote.
    keys = {"clientAuthProviderFactoryClass": SASL_CLIENT_FACTORY, JAAS_KEY: str(jaas)}
    with BookKeeper(cluster.metadata_uri, zkTimeout=2000, **keys) as bk:
        handle = bk.open_ledger(created["ledger"], b"sasl", recovery=False)
        got = [bytes(e) for e in handle.read(0, ENTRIES - 1)]
    assert got == [f"sasl entry {i}".encode() for i in range(ENTRIES)]

    wrong = Java(java_classpath, cluster, tmp_path, settings, java_client_jaas(tmp_path, "nope"))
    anonymous = Java(java_classpath, cluster, tmp_path, settings[1:])
    for refused in (wrong, anonymous):
        created, appended, _ = write(refused)
        assert "error" in appended or "error" in created, (created, appended)
        if "ledger" in created:
            with BookKeeper(cluster.metadata_uri, zkTimeout=2000, **keys) as bk:
                handle = bk.open_ledger(created["ledger"], b"sasl", recovery=True)
                assert handle.last_add_confirmed == -1, "a refused client wrote an entry"
    assert metric_total(cluster, "pybkx_server_authentication_failures") >= 1


# --- the other way: pybkx's client to a Java bookie that requires SASL ------------------------


@pytest.fixture(scope="module")
def java_sasl_bookie(
    java_classpath: str, zookeeper: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    workdir = tmp_path_factory.mktemp("java-sasl-bookie")
    jaas = write_jaas(workdir / "jaas.conf", users=USERS)
    root = harness.fresh_zookeeper_root(zookeeper, "sasl-java")
    process, address = harness.start_java_bookie(
        java_classpath,
        zookeeper + root,
        workdir,
        f"bookieAuthProviderFactoryClass={SASL_BOOKIE_FACTORY}",
        system_properties={JAAS_KEY: str(jaas)},
    )
    yield address
    process.stop()


def sasl_client(tmp_path: Path, password: str, v2: bool) -> BookieClient:
    jaas = write_jaas(tmp_path / f"client-{password}.conf", client=("bookkeeper-app", password))
    config = ClientConfig.of(
        useV2WireProtocol=v2,
        clientConnectTimeoutMillis=3000,
        clientAuthProviderFactoryClass=SASL_CLIENT_FACTORY,
        **{JAAS_KEY: str(jaas)},
    )
    return BookieClient(config, None, client_sasl_credentials(config))


@pytest.mark.parametrize("v2", [True, False], ids=["V2", "V3"])
def test_pybkx_client_authenticates_to_the_java_bookie(
    java_sasl_bookie: str, tmp_path: Path, v2: bool
) -> None:
    ledger = 81 if v2 else 82
    key = master_key(b"sasl")

    def entry_of(ledger_id: int) -> bytes:
        # A V2 add names its ledger and entry in the packaged entry itself.
        return DigestManager(ledger_id, b"sasl", "CRC32C").package(0, -1, 11, b"sasl, java!")

    client = sasl_client(tmp_path, "s3cret", v2)
    try:
        client.add(java_sasl_bookie, ledger, 0, key, entry_of(ledger)).result()
        assert bytes(client.read(java_sasl_bookie, ledger, 0).result()).endswith(b"sasl, java!")
    finally:
        client.close()
    refused = sasl_client(tmp_path, "nope", v2)
    try:
        with pytest.raises(errors.UnauthorizedAccessException, match=java_sasl_bookie):
            refused.add(java_sasl_bookie, ledger + 10, 0, key, entry_of(ledger + 10)).result()
    finally:
        refused.close()
    # Without credentials the Java bookie answers the add itself EUA.
    anonymous = BookieClient(ClientConfig.of(useV2WireProtocol=v2))
    try:
        with pytest.raises(errors.UnauthorizedAccessException, match=java_sasl_bookie):
            anonymous.add(java_sasl_bookie, ledger + 20, 0, key, entry_of(ledger + 20)).result()
    finally:
        anonymous.close()
    # Nothing of the refused clients reached the bookie.
    reader = sasl_client(tmp_path, "s3cret", v2)
    try:
        for refused_ledger in (ledger + 10, ledger + 20):
            with pytest.raises((errors.NoSuchLedgerExistsException, errors.NoSuchEntryException)):
                reader.read(java_sasl_bookie, refused_ledger, 0).result()
    finally:
        reader.close()


@pytest.mark.parametrize("protocol", ["V2", "V3"])
def test_java_client_authenticates_inside_tls(
    zookeeper_server: str, sandboxes: Any, java_classpath: str, tmp_path: Path, protocol: str
) -> None:
    """SASL and TLS together: BookKeeper's client sends its first AUTH right behind START_TLS,
    before the answer; the pybkx bookie serves it after the handshake, inside TLS, as
    BookKeeper's bookie does, and the exchange goes on inside TLS."""
    need_tools()
    ca = TestCA(tmp_path / "ca")
    issued = ca.issue("bookie")
    jaas = write_jaas(tmp_path / "bookie-jaas.conf", users=USERS)
    uri = f"zk+hierarchical://{zookeeper_server}/sasl-{uuid.uuid4().hex}/ledgers"
    cluster = sandboxes(
        {
            "zkTimeout": 2000,
            "bookieAuthProviderFactoryClass": SASL_BOOKIE_FACTORY,
            JAAS_KEY: str(jaas),
            "tlsProviderFactoryClass": TLS_FACTORY,
            "tlsKeyStoreType": "PKCS12",
            "tlsKeyStore": str(issued.pkcs12),
            "tlsKeyStorePasswordPath": str(issued.password_file),
        },
        zk_uri=uri,
    )
    settings = (
        f"clientAuthProviderFactoryClass={SASL_CLIENT_FACTORY}",
        f"tlsProviderFactoryClass={TLS_FACTORY}",
        "tlsTrustStoreType=PEM",
        f"tlsTrustStore={ca.cert}",
        f"useV2WireProtocol={'true' if protocol == 'V2' else 'false'}",
    )
    good = Java(java_classpath, cluster, tmp_path, settings, java_client_jaas(tmp_path, "s3cret"))
    created, appended, closed = write(good)
    assert closed.get("lac") == ENTRIES - 1, (created, appended, closed)
    assert metric_total(cluster, "pybkx_server_tls_connections") >= 3
    assert metric_total(cluster, "pybkx_server_authentication_failures") == 0
    wrong = Java(java_classpath, cluster, tmp_path, settings, java_client_jaas(tmp_path, "nope"))
    created, appended, _ = write(wrong)
    assert "error" in appended or "error" in created, (created, appended)


def test_pybkx_client_authenticates_inside_tls_to_the_java_bookie(
    java_classpath: str, zookeeper: str, tmp_path: Path
) -> None:
    """A Java bookie with TLS and SASL answers START_TLS a second time (EIO) once the handshake
    is done, the connection not being authenticated yet; BookKeeper's client drops that
    answer and authenticates inside TLS, and so does pybkx's, over V2 and V3."""
    need_tools()
    ca = TestCA(tmp_path / "ca")
    issued = ca.issue("java-bookie")
    jaas = write_jaas(tmp_path / "jaas.conf", users=USERS, client=("bookkeeper-app", "s3cret"))
    root = harness.fresh_zookeeper_root(zookeeper, "sasl-tls-java")
    process, bookie = harness.start_java_bookie(
        java_classpath,
        zookeeper + root,
        tmp_path,
        f"bookieAuthProviderFactoryClass={SASL_BOOKIE_FACTORY}",
        f"tlsProviderFactoryClass={TLS_FACTORY}",
        "tlsKeyStoreType=PEM",
        f"tlsKeyStore={issued.key_pem}",
        f"tlsCertificatePath={issued.chain_pem}",
        system_properties={JAAS_KEY: str(jaas)},
    )
    try:
        for ledger, v2 in ((91, True), (92, False)):
            config = ClientConfig.of(
                useV2WireProtocol=v2,
                clientAuthProviderFactoryClass=SASL_CLIENT_FACTORY,
                tlsProviderFactoryClass=TLS_FACTORY,
                clientTrustStoreType="PEM",
                clientTrustStore=str(ca.cert),
                **{JAAS_KEY: str(jaas)},
            )
            client = BookieClient(
                config, client_tls_material(config), client_sasl_credentials(config)
            )
            key = master_key(b"sasl")
            entry = DigestManager(ledger, b"sasl", "CRC32C").package(0, -1, 9, b"tls+sasl!")
            try:
                client.add(bookie, ledger, 0, key, entry).result()
                assert bytes(client.read(bookie, ledger, 0).result()).endswith(b"tls+sasl!")
            finally:
                client.close()
    finally:
        process.stop()
