"""The pybkx client over TLS to real pybkx bookies, with BookKeeper's client keys: START_TLS on
every connection (V2 and V3), never plaintext; the bookie's chain verified; a client
certificate whose role the bookies authorize; ledger recovery (fencing reads) over TLS; and the
failures BookKeeper's client reports: SecurityException from a bookie without TLS or with a
certificate from another CA, UnauthorizedAccessException from a bookie that requires an
authorized role the client lacks."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support.bookies import needs_server
from support.certs import TLS_FACTORY, TestCA, bookie_keys, client_keys, need_tools
from support.sandboxes import metric_total
from support.sandboxes import sandboxes as sandboxes

from pybkx import errors
from pybkx._core import BookieClient
from pybkx.client import BookKeeper
from pybkx.config import ClientConfig, ServerConfig
from pybkx.config.tls import client_tls_material

pytestmark = [pytest.mark.integration, needs_server]


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> TestCA:
    need_tools()
    return TestCA(tmp_path_factory.mktemp("ca"))


def write(bk: BookKeeper, entries: int = 10) -> int:
    with bk.create_ledger(3, 2, 2, password=b"tls") as handle:
        for i in range(entries):
            handle.append(f"tls entry {i}".encode())
        return handle.ledger_id


@pytest.mark.parametrize("v2", [True, False], ids=["V2", "V3"])
def test_ledgers_written_and_read_over_tls(sandboxes: Any, ca: TestCA, v2: bool) -> None:
    cluster = sandboxes(bookie_keys(ca, ca.issue("bookie")))
    with BookKeeper(cluster.metadata_uri, **client_keys(ca, useV2WireProtocol=v2)) as bk:
        ledger = write(bk)
        handle = bk.open_ledger(ledger, b"tls")
        assert [bytes(e) for e in handle.read(0, 9)] == [
            f"tls entry {i}".encode() for i in range(10)
        ]
    assert metric_total(cluster, "pybkx_server_tls_connections") >= 3


def test_a_tls_client_refuses_plaintext_foreign_and_expired_certificates(
    sandboxes: Any, ca: TestCA, tmp_path: Path
) -> None:
    """As BookKeeper's client: a bookie whose TLS fails (no TLS, a certificate from another CA,
    an expired one) is a failed bookie (SecurityException on its requests, then an ensemble
    change that finds no bookie): nothing is written, never in plaintext."""
    other = TestCA(tmp_path / "other-ca", name="other-ca")
    plain = sandboxes({}, name="plain")
    foreign = sandboxes(bookie_keys(other, other.issue("bookie")), name="foreign")
    expired = sandboxes(bookie_keys(ca, ca.issue("old-bookie", days=-1)), name="expired")
    for cluster, why in (
        (plain, "START_TLS with EBADREQ"),
        (foreign, "UnknownIssuer"),
        (expired, "Expired"),
    ):
        with BookKeeper(cluster.metadata_uri, **client_keys(ca)) as bk:
            address = cluster.bookie_addresses[0]
            with pytest.raises(errors.SecurityException, match=why):
                bk.bookies.read(address, 1, 0).result()
            handle = bk.create_ledger(3, 2, 2)
            with pytest.raises(errors.BKException):
                handle.append(b"must not go out")
            assert handle.last_add_confirmed == -1


def test_roles_the_bookies_authorize_and_recovery_over_tls(sandboxes: Any, ca: TestCA) -> None:
    cluster = sandboxes(bookie_keys(ca, ca.issue("bookie"), roles="writer"))
    writer = ca.issue("pybkx-writer", ou="0:writer;1:cluster")
    with BookKeeper(cluster.metadata_uri, **client_keys(ca, writer)) as bk:
        ledger = write(bk)
        # Recovery (fencing reads, recovery adds) over TLS: an open ledger recovered by another
        # client of the same role.
        open_handle = bk.create_ledger(3, 2, 2, password=b"tls")
        for i in range(5):
            open_handle.append(b"open %d" % i)
        with BookKeeper(cluster.metadata_uri, **client_keys(ca, writer)) as other:
            recovered = other.open_ledger(open_handle.ledger_id, b"tls")
            assert recovered.is_closed and recovered.last_add_confirmed == 4
            assert len(other.open_ledger(ledger, b"tls").read(0, 9)) == 10
    reader = ca.issue("pybkx-reader", ou="0:reader")
    for keys in (client_keys(ca, reader), {"zkTimeout": 2000}):
        with BookKeeper(cluster.metadata_uri, **keys) as bk:
            handle = bk.create_ledger(3, 2, 2)
            with pytest.raises(errors.BKException):
                handle.append(b"not authorized")


def test_the_shell_uses_the_bookies_tls_from_its_configuration(sandboxes: Any, ca: TestCA) -> None:
    """As BookKeeper's shell takes its client settings from the bookie's configuration (as
    AutoRecovery and the admin API do, through the same ``client_settings``): on a cluster that
    requires TLS and roles, `pybkx shell simpletest --conf` of a bookie whose certificate
    carries an authorized role passes; without the configuration the shell's plaintext client
    is refused."""
    bookie = ca.issue("bookie-with-role", ou="0:bookie")
    cluster = sandboxes(bookie_keys(ca, bookie, roles="writer,bookie"))
    conf = cluster.directory / "bookie-0" / "bk_server.conf"
    settings = ServerConfig.from_file(conf, lenient=True).client_settings()
    assert settings["tlsProviderFactoryClass"] == TLS_FACTORY
    pybkx = [sys.executable, "-m", "pybkx", "shell"]
    ok = subprocess.run(
        [*pybkx, "simpletest", "--conf", str(conf), "--numEntries", "5"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ok.returncode == 0, ok.stderr
    refused = subprocess.run(
        [*pybkx, "simpletest", "--uri", cluster.metadata_uri, "--numEntries", "5"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert refused.returncode != 0


def test_a_bookie_client_asked_for_tls_without_its_material_is_refused(ca: TestCA) -> None:
    """The binding fails closed: a configuration that asks for TLS never yields plaintext
    connections because its material was left out."""
    config = ClientConfig.of(**client_keys(ca))
    with pytest.raises(ValueError, match="tlsProviderFactoryClass"):
        BookieClient(config)
    BookieClient(config, client_tls_material(config)).close()
