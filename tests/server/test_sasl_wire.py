"""The bookie's side of SASL DIGEST-MD5 byte by byte over raw V2 frames, against a client side
written here from RFC 2831 with hashlib (independent of the Rust mechanism): the challenge
BookKeeper's JDK mechanism sends (realm ``bookkeeper``, ``qop="auth"``, md5-sess), the
``rspauth`` that proves the bookie knows the password, requests answered EUA before and served
after; a wrong password, an id ``saslJaasClientAllowedIds`` refuses and another plugin's AUTH
close the connection, as BookKeeper's AuthHandler does on the V2 path."""

from __future__ import annotations

import hashlib
import re
import secrets
from collections.abc import Iterator

import pytest
from support.v2_wire import (
    EOK,
    EUA,
    OP_AUTH,
    Conn,
    add_request,
    auth_request,
    crc32_entry,
    decode_auth_message,
)

from pybkx._core import BookieServer, LedgerStorage
from pybkx.config import ServerConfig
from pybkx.config.jaas import BookieSasl

USERS = {"bookkeeper-app": "s3cret", "intruder": "let-me-in"}
URI = "bookkeeper/bookkeeper"


@pytest.fixture
def sasl_server(storage: LedgerStorage) -> Iterator[BookieServer]:
    server = BookieServer(
        storage,
        ServerConfig.of(),
        "127.0.0.1",
        0,
        sasl=BookieSasl(dict(USERS), ".*bookkeeper.*"),
    )
    yield server
    server.stop()


def directives(token: bytes) -> dict[str, str]:
    return {
        m.group(1): m.group(2) if m.group(2) is not None else m.group(3)
        for m in re.finditer(rb'([\w-]+)=(?:"((?:[^"\\]|\\.)*)"|([^,]*))'.decode(), token.decode())
    }


def md5(data: bytes) -> bytes:
    return hashlib.md5(data).digest()


def digest(user: str, password: str, c: dict[str, str], cnonce: str, a2: str) -> str:
    """RFC 2831 2.1.2.1 with md5-sess, qop=auth, authzid = user."""
    inner = md5(f"{user}:{c['realm']}:{password}".encode())
    ha1 = md5(inner + f":{c['nonce']}:{cnonce}:{user}".encode()).hex()
    ha2 = md5(f"{a2}{URI}".encode()).hex()
    return md5(f"{ha1}:{c['nonce']}:00000001:{cnonce}:auth:{ha2}".encode()).hex()


def auth_payload(conn: Conn, token: bytes) -> bytes:
    resp = conn.call(auth_request("sasl", token))
    assert resp.op == OP_AUTH
    fields = decode_auth_message(resp.body)
    assert fields[1] == b"sasl"
    return fields.get(2, b"")


def authenticate(conn: Conn, user: str, password: str) -> bool:
    """Runs the exchange; True when the bookie's rspauth proves it knows the password."""
    challenge = directives(auth_payload(conn, b""))
    assert challenge["realm"] == "bookkeeper"
    assert challenge["qop"] == "auth"
    assert challenge["algorithm"] == "md5-sess"
    assert challenge["charset"] == "utf-8"
    cnonce = secrets.token_hex(16)
    response = (
        f'charset=utf-8,username="{user}",realm="bookkeeper",nonce="{challenge["nonce"]}",'
        f'nc=00000001,cnonce="{cnonce}",digest-uri="{URI}",maxbuf=65536,'
        f"response={digest(user, password, challenge, cnonce, 'AUTHENTICATE:')},qop=auth,"
        f'authzid="{user}"'
    )
    final = directives(auth_payload(conn, response.encode()))
    return final["rspauth"] == digest(user, password, challenge, cnonce, ":")


def add(conn: Conn, entry: int) -> int:
    data = crc32_entry(7, entry, b"sasl")
    return conn.call(add_request(7, entry, entry_bytes=data)).rc


def test_an_exchange_written_from_the_rfc_is_accepted(sasl_server: BookieServer) -> None:
    with Conn(sasl_server.port) as conn:
        assert add(conn, 0) == EUA  # not authenticated yet
        assert authenticate(conn, "bookkeeper-app", "s3cret")
        assert add(conn, 0) == EOK
        # A challenge's nonce is never reused: a second connection gets another one.
        with Conn(sasl_server.port) as other:
            first = directives(auth_payload(other, b""))["nonce"]
        with Conn(sasl_server.port) as other:
            assert directives(auth_payload(other, b""))["nonce"] != first


@pytest.mark.parametrize(
    ("user", "password"),
    [("bookkeeper-app", "wrong"), ("bookkeeper-nobody", "s3cret"), ("intruder", "let-me-in")],
    ids=["wrong-password", "unknown-user", "id-not-allowed"],
)
def test_a_refused_exchange_closes_the_connection(
    sasl_server: BookieServer, user: str, password: str
) -> None:
    with Conn(sasl_server.port) as conn:
        with pytest.raises(EOFError):
            authenticate(conn, user, password)
        assert conn.wait_closed() == b""


def test_another_plugins_auth_closes_the_connection(sasl_server: BookieServer) -> None:
    with Conn(sasl_server.port) as conn:
        conn.send(auth_request("AuthDisabledPlugin", b""))
        assert conn.wait_closed() == b""
