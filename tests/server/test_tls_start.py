"""TLS on the bookie port as BookKeeper's bookie serves it: a V3 START_TLS answered EOK in
plaintext, then the server side of the handshake on the same socket, then V2 (or V3) frames
inside TLS. The client here is Python's own ``ssl`` over a START_TLS packed by
``support.v3_wire``, against real ``pybkx bookie`` processes whose stores the tests made with
openssl and keytool: PEM, PKCS12 and JKS; client certificates required; enabled protocols;
stores reloaded when their files change; a store that cannot be read stops the start.
"""

from __future__ import annotations

import shutil
import socket
import ssl
import struct
from pathlib import Path
from typing import Any

import pytest
from support import v2_wire, v3_wire
from support.bookies import assert_one_line_failure, needs_server, write_conf
from support.bookies import start_bookie as start_bookie
from support.certs import Issued, TestCA, need_tools
from support.ports import accepts_tcp, free_port
from support.wait import wait_until

pytestmark = [pytest.mark.integration, needs_server]

TLS_FACTORY = "org.apache.bookkeeper.tls.TLSContextFactory"
STATUS_EOK, STATUS_EBADREQ = 0, 404  # V3 StatusCode EOK, EBADREQ


# --- the client side, by hand ------------------------------------------------------------------


def _start_tls_frame(txn: int) -> bytes:
    """A V3 Request: header {version 3, operation START_TLS, txnId}, an empty StartTLSRequest
    (field 106)."""
    return v3_wire.request(v3_wire.START_TLS, txn, 106)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("the bookie closed the connection")
        data += chunk
    return data


def _recv_frame(sock: socket.socket) -> bytes:
    (length,) = struct.unpack(">i", _recv_exact(sock, 4))
    return struct.pack(">i", length) + _recv_exact(sock, length)


def _v3_status(frame: bytes) -> int:
    """The ``status`` (field 2) of a V3 Response frame."""
    status = v3_wire.parse(frame[4:]).get(2)
    assert status, f"no status in {frame!r}"
    return int(status[0])


def start_tls(port: int) -> tuple[socket.socket, int]:
    """A connection that sent START_TLS, and the status the bookie answered (in plaintext)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=15)
    sock.sendall(_start_tls_frame(txn=7))
    return sock, _v3_status(_recv_frame(sock))


def client_context(ca: TestCA, client: Issued | None = None, **limits: Any) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(cafile=str(ca.cert))
    if client is not None:
        ctx.load_cert_chain(str(client.chain_pem), str(client.key_pem))
    for name, value in limits.items():
        setattr(ctx, name, value)
    return ctx


def handshake(port: int, ctx: ssl.SSLContext) -> ssl.SSLSocket:
    """START_TLS, EOK, then the TLS handshake on the same socket."""
    sock, status = start_tls(port)
    assert status == STATUS_EOK
    return ctx.wrap_socket(sock, server_hostname="localhost")


def add_and_read_back(sock: socket.socket, ledger: int) -> None:
    """A V2 add and a read of it, on ``sock``."""
    sock.sendall(v2_wire.add_request(ledger, 0, b"inside tls"))
    added = v2_wire.parse_response(_recv_frame(sock))
    assert (added.op, added.rc) == (v2_wire.OP_ADD, 0)
    sock.sendall(v2_wire.read_request(ledger, 0))
    read = v2_wire.parse_response(_recv_frame(sock))
    assert read.rc == 0 and read.body.endswith(b"inside tls")


def common_name(sock: ssl.SSLSocket) -> str:
    cert = sock.getpeercert()
    assert cert is not None
    return next(value for rdn in cert["subject"] for key, value in rdn if key == "commonName")


# --- fixtures ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> TestCA:
    need_tools()
    return TestCA(tmp_path_factory.mktemp("ca"))


@pytest.fixture(scope="module")
def issued(ca: TestCA) -> Issued:
    return ca.issue("bookie-1")


def tls_keys(issued: Issued, kind: str) -> str:
    store = {"PEM": issued.key_pem, "PKCS12": issued.pkcs12, "JKS": issued.jks}[kind]
    lines = [
        f"tlsProviderFactoryClass={TLS_FACTORY}",
        f"tlsKeyStoreType={kind}",
        f"tlsKeyStore={store}",
        f"tlsCertificatePath={issued.chain_pem}",
    ]
    if kind != "PEM":
        lines.append(f"tlsKeyStorePasswordPath={issued.password_file}")
    return "\n".join(lines) + "\n"


def run_bookie(tmp_path: Path, start_bookie: Any, extra: str) -> int:
    port = free_port()
    bookie = start_bookie("--conf", str(write_conf(tmp_path, port, extra)))
    bookie.wait_listening(port)
    return port


# --- tests ------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["PEM", "PKCS12", "JKS"])
def test_start_tls_then_requests_inside_tls(
    tmp_path: Path, start_bookie: Any, ca: TestCA, issued: Issued, kind: str
) -> None:
    port = run_bookie(tmp_path, start_bookie, tls_keys(issued, kind))
    with handshake(port, client_context(ca)) as tls:
        assert common_name(tls) == "bookie-1"
        # A second START_TLS inside TLS is refused (before any V2 frame: after one, the
        # connection reads V2 for good, as the Java bookie's does).
        tls.sendall(_start_tls_frame(txn=8))
        assert _v3_status(_recv_frame(tls)) == STATUS_EBADREQ
        add_and_read_back(tls, ledger=1)


def test_plaintext_clients_are_still_served_without_an_auth_provider(
    tmp_path: Path, start_bookie: Any, issued: Issued
) -> None:
    """BookKeeper's rollout behaviour: TLS is offered, not required, until authentication is."""
    port = run_bookie(tmp_path, start_bookie, tls_keys(issued, "PEM"))
    with socket.create_connection(("127.0.0.1", port), timeout=15) as plain:
        add_and_read_back(plain, ledger=2)


def test_a_bookie_without_tls_refuses_start_tls(tmp_path: Path, start_bookie: Any) -> None:
    port = run_bookie(tmp_path, start_bookie, "")
    sock, status = start_tls(port)
    with sock:
        assert status == STATUS_EBADREQ
        add_and_read_back(sock, ledger=3)  # the connection stays usable in plaintext


def test_a_required_client_certificate_must_chain_to_the_trust_store(
    tmp_path: Path, start_bookie: Any, ca: TestCA, issued: Issued
) -> None:
    extra = tls_keys(issued, "JKS") + (
        f"tlsClientAuthentication=true\ntlsTrustStoreType=JKS\n"
        f"tlsTrustStore={ca.trust_store('JKS')}\ntlsTrustStorePasswordPath={ca.password_file}\n"
    )
    port = run_bookie(tmp_path, start_bookie, extra)
    with handshake(port, client_context(ca, ca.issue("client-1"))) as tls:
        add_and_read_back(tls, ledger=4)
    stranger = TestCA(tmp_path / "other-ca", name="other-ca").issue("client-2")
    expired = ca.issue("client-expired", days=-1)
    for client in (None, stranger, expired):
        # TLS 1.3 reports a refused client certificate after the handshake: at the first read.
        with (
            pytest.raises((ssl.SSLError, ConnectionError)),
            handshake(port, client_context(ca, client)) as tls,
        ):
            add_and_read_back(tls, ledger=5)
    with handshake(port, client_context(ca, ca.issue("client-3"))) as tls:
        tls.sendall(v2_wire.read_request(5, 0))
        assert v2_wire.parse_response(_recv_frame(tls)).rc != 0, "a refused client wrote"


def test_enabled_protocols_are_enforced(
    tmp_path: Path, start_bookie: Any, ca: TestCA, issued: Issued
) -> None:
    port = run_bookie(
        tmp_path, start_bookie, tls_keys(issued, "PEM") + "tlsEnabledProtocols=TLSv1.3\n"
    )
    old = client_context(ca, maximum_version=ssl.TLSVersion.TLSv1_2)
    with pytest.raises(ssl.SSLError):
        handshake(port, old).close()
    with handshake(port, client_context(ca)) as tls:
        assert tls.version() == "TLSv1.3"


def test_changed_store_files_are_reloaded_for_new_handshakes(
    tmp_path: Path, start_bookie: Any, ca: TestCA
) -> None:
    first, second = ca.issue("bookie-old"), ca.issue("bookie-new")
    key, chain = tmp_path / "key.pem", tmp_path / "chain.pem"
    shutil.copy(first.key_pem, key)
    shutil.copy(first.chain_pem, chain)
    port = run_bookie(
        tmp_path,
        start_bookie,
        f"tlsProviderFactoryClass={TLS_FACTORY}\ntlsKeyStoreType=PEM\ntlsKeyStore={key}\n"
        f"tlsCertificatePath={chain}\ntlsCertFilesRefreshDurationSeconds=1\n",
    )
    with handshake(port, client_context(ca)) as tls:
        assert common_name(tls) == "bookie-old"
    shutil.copy(second.key_pem, key)
    shutil.copy(second.chain_pem, chain)

    def serves_the_new_certificate() -> bool:
        with handshake(port, client_context(ca)) as tls:
            return common_name(tls) == "bookie-new"

    wait_until(serves_the_new_certificate, "the bookie to serve the reloaded certificate")


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        ("password", "tlsKeyStore="),
        ("missing", "tlsKeyStore="),
        ("protocol", "tlsEnabledProtocols"),
    ],
)
def test_a_store_that_cannot_be_used_stops_the_start(
    tmp_path: Path, start_bookie: Any, issued: Issued, change: str, fragment: str
) -> None:
    extra = tls_keys(issued, "JKS")
    if change == "password":
        wrong = tmp_path / "wrong-password"
        wrong.write_text("not-it\n")
        extra = extra.replace(str(issued.password_file), str(wrong))
    elif change == "missing":
        extra = extra.replace(str(issued.jks), str(tmp_path / "absent.jks"))
    else:
        extra += "tlsEnabledProtocols=SSLv3\n"
    port = free_port()
    bookie = start_bookie("--conf", str(write_conf(tmp_path, port, extra)))
    assert_one_line_failure(bookie, fragment)
    assert not accepts_tcp(port), "nothing may listen when TLS cannot be served"


# --- authorization: BookKeeper's BookieAuthZFactory -------------------------------------------

AUTHZ_FACTORY = "org.apache.bookkeeper.tls.BookieAuthZFactory"
EUA_V2, EUA_V3, EIO_V3 = 102, 502, 501  # BookieProtocol.EUA; V3 StatusCode EUA, EIO


def authz_keys(ca: TestCA, issued: Issued, roles: str) -> str:
    return tls_keys(issued, "PEM") + (
        f"tlsClientAuthentication=true\ntlsTrustStoreType=PEM\ntlsTrustStore={ca.cert}\n"
        f"bookieAuthProviderFactoryClass={AUTHZ_FACTORY}\nauthorizedRoles={roles}\n"
    )


def test_without_an_authorized_role_a_connection_is_answered_as_bookkeeper_answers(
    tmp_path: Path, start_bookie: Any, ca: TestCA, issued: Issued
) -> None:
    port = run_bookie(tmp_path, start_bookie, authz_keys(ca, issued, "writer,admin"))
    # Plaintext: V2 ADD and READ get EUA, and nothing is written.
    with socket.create_connection(("127.0.0.1", port), timeout=15) as plain:
        plain.sendall(v2_wire.add_request(11, 0, b"not allowed"))
        assert v2_wire.parse_response(_recv_frame(plain)).rc == EUA_V2
        plain.sendall(v2_wire.read_request(11, 0))
        assert v2_wire.parse_response(_recv_frame(plain)).rc == EUA_V2
        # Any other V2 request closes the connection.
        plain.sendall(v2_wire.batch_request(11, 0, 1, 10, 1 << 20))
        with pytest.raises(ConnectionError):
            _recv_frame(plain)
    # V3 requests get EUA (GET_BOOKIE_INFO, field 107 of the request).
    with socket.create_connection(("127.0.0.1", port), timeout=15) as plain:
        plain.sendall(v3_wire.request(8, txn=3, body_field=107))
        assert _v3_status(_recv_frame(plain)) == EUA_V3
    # TLS with a certificate whose first role is not authorized: EIO for the START_TLS, then
    # EUA; the role compared is the first one only.
    for ou in ("0:reader,writer", None):
        client = ca.issue(f"client-{ou or 'no-ou'}".replace(":", "-").replace(",", "-"), ou=ou)
        with handshake(port, client_context(ca, client)) as tls:
            assert _v3_status(_recv_frame(tls)) == EIO_V3
            tls.sendall(v2_wire.add_request(11, 0, b"not allowed"))
            assert v2_wire.parse_response(_recv_frame(tls)).rc == EUA_V2
    # An authorized role: served.
    with handshake(port, client_context(ca, ca.issue("writer-1", ou="0:admin;1:cluster"))) as tls:
        add_and_read_back(tls, ledger=12)
        tls.sendall(v2_wire.read_request(11, 0))
        assert v2_wire.parse_response(_recv_frame(tls)).rc != 0, "a refused client wrote"


def test_authorization_without_roles_stops_the_start(
    tmp_path: Path, start_bookie: Any, ca: TestCA, issued: Issued
) -> None:
    port = free_port()
    extra = authz_keys(ca, issued, "")
    bookie = start_bookie("--conf", str(write_conf(tmp_path, port, extra)))
    assert_one_line_failure(bookie, "authorizedRoles")
    assert not accepts_tcp(port)
