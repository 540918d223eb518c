"""Security that BookKeeper's keys ask for and pybkx does not implement yet is refused, never
ignored: a bookie or a client given such a key refuses to start with one line naming the key,
instead of serving in plaintext or without authentication. Real bookie processes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support.bookies import assert_one_line_failure, needs_server, write_conf
from support.bookies import start_bookie as start_bookie
from support.ports import accepts_tcp, free_port

from pybkx.client import BookKeeper
from pybkx.config import ConfigError, ServerConfig

TLS_FACTORY = "org.apache.bookkeeper.tls.TLSContextFactory"
OTHER_AUTH_FACTORY = "com.example.OtherAuthProviderFactory"


@needs_server
@pytest.mark.parametrize(
    ("line", "asks"),
    [
        # TLSContextFactory is served (tests/security/); any other provider is refused.
        ("tlsProviderFactoryClass=com.example.OtherTLSFactory", "TLS"),
        # BookieAuthZFactory and SASL are served (tests/server/test_tls_start.py,
        # tests/client/test_sasl.py); any other provider is refused.
        (f"bookieAuthProviderFactoryClass={OTHER_AUTH_FACTORY}", "client authentication"),
    ],
)
def test_a_bookie_asked_for_security_it_lacks_refuses_to_start(
    tmp_path: Path, start_bookie: Any, line: str, asks: str
) -> None:
    port = free_port()
    conf = write_conf(tmp_path, port, line + "\n")
    bookie = start_bookie("--conf", str(conf))
    key = line.split("=", 1)[0]
    assert_one_line_failure(bookie, key, asks, "bk_server.conf:", "refuses to start")
    assert not accepts_tcp(port), "nothing may listen in plaintext"


def test_empty_or_false_security_keys_ask_for_nothing_as_in_bookkeeper(tmp_path: Path) -> None:
    conf = tmp_path / "bk_server.conf"
    conf.write_text(
        "tlsProviderFactoryClass=\nbookieAuthProviderFactoryClass=\nzkEnableSecurity=false\n"
        "httpServerTlsEnable=false\n"
    )
    config = ServerConfig.from_file(conf)
    assert config.tls_provider_factory_class is None
    assert config.bookie_auth_provider_factory_class is None
    assert not config.zk_enable_security and not config.http_server_tls_enable


@pytest.mark.parametrize(
    ("key", "value"),
    [
        # TLSContextFactory is served (tests/client/test_client_tls.py); another is refused.
        ("tlsProviderFactoryClass", "com.example.OtherTLSFactory"),
        # SASLClientProviderFactory is served (tests/client/test_sasl.py); another is refused.
        ("clientAuthProviderFactoryClass", OTHER_AUTH_FACTORY),
    ],
)
def test_a_client_asked_for_security_it_lacks_is_not_created(
    tmp_path: Path, key: str, value: object
) -> None:
    store = tmp_path / "metadata"
    with pytest.raises(ConfigError, match=f"{key}.*refuses to start"):
        BookKeeper(f"embedded://{store}", **{key: value})
    assert not store.exists(), "the client opened its metadata store before refusing"


def test_a_client_asked_for_tls_without_a_trust_store_is_not_created(tmp_path: Path) -> None:
    """A bookie's certificate is always verified: no trust store, no client."""
    store = tmp_path / "metadata"
    with pytest.raises(ConfigError, match="clientTrustStore"):
        BookKeeper(f"embedded://{store}", tlsProviderFactoryClass=TLS_FACTORY)
    assert not store.exists(), "the client opened its metadata store before refusing"
