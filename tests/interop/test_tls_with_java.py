"""Apache BookKeeper's own ledger client (4.17.3) over TLS to pybkx bookies: START_TLS on every
connection, V2 and V3 frames inside TLS, the bookies' stores in each format, a client
certificate required and refused, roles authorized and refused, and plaintext clients still
served beside TLS ones (BookKeeper's rollout behaviour while no authentication is required);
and pybkx's client over TLS to the real Java bookie.

Certificates and stores are made by the test (openssl, keytool); the cluster is a pybkx
Sandbox of 3 bookies in the session ZooKeeper; the Java side is java/.../LedgerClient.java.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import harness
import pytest
from support.certs import Issued, TestCA, need_tools
from support.sandboxes import metric_total
from support.sandboxes import sandboxes as sandboxes
from test_ledgers_with_java_client import Java

from pybkx import errors
from pybkx._core import BookieClient, DigestManager, master_key
from pybkx.client import BookKeeper
from pybkx.config import ClientConfig
from pybkx.config.tls import client_tls_material
from pybkx.tools.sandbox import Sandbox

pytestmark = pytest.mark.interop

TLS_FACTORY = "org.apache.bookkeeper.tls.TLSContextFactory"
ENTRIES = 20
PASSWORD_HEX = b"tls".hex()


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> TestCA:
    need_tools()
    return TestCA(tmp_path_factory.mktemp("ca"))


@pytest.fixture(scope="module")
def bookie_cert(ca: TestCA) -> Issued:
    return ca.issue("pybkx-bookie")


def bookie_tls(ca: TestCA, issued: Issued, kind: str, client_auth: bool = False) -> dict[str, Any]:
    store = {"PEM": issued.key_pem, "PKCS12": issued.pkcs12, "JKS": issued.jks}[kind]
    conf: dict[str, Any] = {
        "tlsProviderFactoryClass": TLS_FACTORY,
        "tlsKeyStoreType": kind,
        "tlsKeyStore": str(store),
        "tlsCertificatePath": str(issued.chain_pem),
        "tlsKeyStorePasswordPath": "" if kind == "PEM" else str(issued.password_file),
    }
    if client_auth:
        conf |= {
            "tlsClientAuthentication": "true",
            "tlsTrustStoreType": "PKCS12",
            "tlsTrustStore": str(ca.trust_store("PKCS12")),
            "tlsTrustStorePasswordPath": str(ca.password_file),
        }
    return conf


def java_tls(ca: TestCA, client: Issued | None = None) -> tuple[str, ...]:
    """BookKeeper client keys for TLS, trusting ``ca``; with ``client``, its JKS key store."""
    keys = [
        f"tlsProviderFactoryClass={TLS_FACTORY}",
        "tlsTrustStoreType=PEM",
        f"tlsTrustStore={ca.cert}",
    ]
    if client is not None:
        keys += [
            "tlsClientAuthentication=true",
            "tlsKeyStoreType=JKS",
            f"tlsKeyStore={client.jks}",
            f"tlsKeyStorePasswordPath={client.password_file}",
        ]
    return tuple(keys)


@pytest.fixture
def cluster_of(zookeeper_server: str, sandboxes: Any) -> Any:
    """Starts 3 pybkx bookies with ``conf`` in the session ZooKeeper, under a root of their own."""

    def start(conf: dict[str, Any]) -> Sandbox:
        uri = f"zk+hierarchical://{zookeeper_server}/tls-{uuid.uuid4().hex}/ledgers"
        return sandboxes({"zkTimeout": 2000, **conf}, zk_uri=uri)  # type: ignore[no-any-return]

    return start


def write_and_read(java: Java, writer: str = "w") -> list[dict[str, Any]]:
    payloads = [f"entry {i} over tls".encode().hex() for i in range(ENTRIES)]
    return java.run(
        [
            {
                "op": "create",
                "writer": writer,
                "ensemble": 3,
                "write_quorum": 2,
                "ack_quorum": 2,
                "digest": "CRC32C",
                "password_hex": PASSWORD_HEX,
            },
            {"op": "append", "writer": writer, "payloads_hex": payloads},
            {"op": "close", "writer": writer},
        ]
    )


@pytest.mark.parametrize(
    ("kind", "protocol"), [("PEM", "V2"), ("PKCS12", "V2"), ("JKS", "V2"), ("JKS", "V3")]
)
def test_java_client_writes_over_tls_and_pybkx_reads_in_plaintext(
    cluster_of: Any,
    java_classpath: str,
    tmp_path: Path,
    ca: TestCA,
    bookie_cert: Issued,
    kind: str,
    protocol: str,
) -> None:
    cluster = cluster_of(bookie_tls(ca, bookie_cert, kind))
    settings = (*java_tls(ca), f"useV2WireProtocol={'true' if protocol == 'V2' else 'false'}")
    created, appended, closed = write_and_read(Java(java_classpath, cluster, tmp_path, settings))
    assert "error" not in created and "error" not in closed, (created, appended, closed)
    assert closed["lac"] == ENTRIES - 1
    assert metric_total(cluster, "pybkx_server_tls_connections") >= 3, (
        "every bookie of the ensemble served the client in TLS"
    )
    # A plaintext client (pybkx's, without TLS keys) is still served by the same bookies.
    with BookKeeper(cluster.metadata_uri, zkTimeout=2000) as bk:
        handle = bk.open_ledger(created["ledger"], b"tls", recovery=False)
        got = [bytes(e) for e in handle.read(0, ENTRIES - 1)]
    assert got == [f"entry {i} over tls".encode() for i in range(ENTRIES)]


def test_a_required_client_certificate_admits_only_clients_of_the_trusted_ca(
    cluster_of: Any, java_classpath: str, tmp_path: Path, ca: TestCA, bookie_cert: Issued
) -> None:
    cluster = cluster_of(bookie_tls(ca, bookie_cert, "JKS", client_auth=True))
    trusted = Java(java_classpath, cluster, tmp_path, java_tls(ca, ca.issue("java-client")))
    created, _, closed = write_and_read(trusted)
    assert closed["lac"] == ENTRIES - 1, closed
    before = cluster.metadata_store.list_ledgers()
    stranger_cert = TestCA(tmp_path / "other-ca", name="other-ca").issue("stranger")
    for client in (None, stranger_cert):
        refused = Java(java_classpath, cluster, tmp_path, java_tls(ca, client))
        created, appended, _ = write_and_read(refused, writer="refused")
        # BookKeeper's client fails the writes (no bookie accepts its TLS): nothing is written.
        assert "error" in appended or "error" in created, (created, appended)
        if "ledger" in created:
            with BookKeeper(cluster.metadata_uri, zkTimeout=2000) as bk:
                handle = bk.open_ledger(created["ledger"], b"tls", recovery=True)
                assert handle.last_add_confirmed == -1
    assert set(before) <= set(cluster.metadata_store.list_ledgers())


def test_authorized_roles_admit_only_clients_whose_certificate_carries_one(
    cluster_of: Any, java_classpath: str, tmp_path: Path, ca: TestCA, bookie_cert: Issued
) -> None:
    """BookKeeper's BookieAuthZFactory on pybkx bookies: TLS becomes required (a plaintext
    client is answered EUA) and the client certificate's first role must be authorized."""
    conf = bookie_tls(ca, bookie_cert, "JKS", client_auth=True) | {
        "bookieAuthProviderFactoryClass": "org.apache.bookkeeper.tls.BookieAuthZFactory",
        "authorizedRoles": "writer,admin",
    }
    cluster = cluster_of(conf)
    writer = ca.issue("java-writer", ou="0:writer;1:cluster")
    created, _, closed = write_and_read(
        Java(java_classpath, cluster, tmp_path, java_tls(ca, writer))
    )
    assert closed["lac"] == ENTRIES - 1, closed
    reader = ca.issue("java-reader", ou="0:reader,writer")
    for settings in ((), java_tls(ca, reader)):
        refused = Java(java_classpath, cluster, tmp_path, settings)
        created, appended, _ = write_and_read(refused, writer="refused")
        assert "error" in appended or "error" in created, (created, appended)
        if "ledger" in created:
            with BookKeeper(cluster.metadata_uri, zkTimeout=2000) as bk:
                # Nothing of the refused writer's reached a bookie: its ledger is empty.
                assert bk.store.read_ledger_metadata(created["ledger"]).value.last_entry_id < 0


# --- the other way: pybkx's client over TLS to the Java bookie --------------------------------


@pytest.fixture(scope="module")
def java_tls_bookie(
    java_classpath: str,
    zookeeper: str,
    tmp_path_factory: pytest.TempPathFactory,
    ca: TestCA,
    bookie_cert: Issued,
) -> Iterator[str]:
    """A real Java bookie with TLS and client certificates required (PEM key, PEM trust)."""
    workdir = tmp_path_factory.mktemp("java-tls-bookie")
    overrides = (
        f"tlsProviderFactoryClass={TLS_FACTORY}",
        "tlsKeyStoreType=PEM",
        f"tlsKeyStore={bookie_cert.key_pem}",
        f"tlsCertificatePath={bookie_cert.chain_pem}",
        "tlsClientAuthentication=true",
        "tlsTrustStoreType=PEM",
        f"tlsTrustStore={ca.cert}",
    )
    process, address = harness.start_java_bookie(java_classpath, zookeeper, workdir, *overrides)
    yield address
    process.stop()


@pytest.mark.parametrize("v2", [True, False], ids=["V2", "V3"])
def test_pybkx_client_over_tls_to_the_java_bookie(
    java_tls_bookie: str, ca: TestCA, tmp_path: Path, v2: bool
) -> None:
    """pybkx's per-bookie client with a certificate from the trusted CA adds and reads on the
    Java bookie over TLS; without a certificate, or with one from another CA, nothing is
    written."""
    ledger = 71 if v2 else 72
    key = master_key(b"tls")
    entry = DigestManager(ledger, b"tls", "CRC32C").package(0, -1, 11, b"over tls, j")
    client_cert = ca.issue("pybkx-client")
    with_cert = ClientConfig.of(
        useV2WireProtocol=v2,
        **client_keys_for(ca, client_cert),
    )
    client = BookieClient(with_cert, client_tls_material(with_cert))
    try:
        client.add(java_tls_bookie, ledger, 0, key, entry).result()
        read = client.read(java_tls_bookie, ledger, 0).result()
        assert bytes(read).endswith(b"over tls, j")
    finally:
        client.close()
    stranger = TestCA(tmp_path / "other-ca", name="other-ca").issue("stranger")
    for cert in (None, stranger):
        config = ClientConfig.of(useV2WireProtocol=v2, **client_keys_for(ca, cert))
        refused = BookieClient(config, client_tls_material(config))
        try:
            with pytest.raises(errors.BKException):
                refused.add(java_tls_bookie, ledger + 10, 0, key, entry).result()
        finally:
            refused.close()


def client_keys_for(ca: TestCA, client: Issued | None) -> dict[str, Any]:
    keys: dict[str, Any] = {
        "tlsProviderFactoryClass": TLS_FACTORY,
        "clientTrustStoreType": "PEM",
        "clientTrustStore": str(ca.cert),
    }
    if client is not None:
        keys |= {
            "tlsClientAuthentication": True,
            "clientKeyStoreType": "PKCS12",
            "clientKeyStore": str(client.pkcs12),
            "clientKeyStorePasswordPath": str(client.password_file),
        }
    return keys
