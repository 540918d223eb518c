"""The identity a ZooKeeper session takes from a JAAS file (the one Java processes are given with
``-Djava.security.auth.login.config``), and the refusals when it cannot take one. File parsing
and settings only: the behaviour against a server is in test_zk_security.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from kazoo.security import CREATOR_ALL_ACL

from pybkx.config import ClientConfig, ConfigError, ServerConfig
from pybkx.config.jaas import JaasEntry, read_section
from pybkx.config.values import keyed_fields
from pybkx.config.zk_security import ZK_SECURITY_KEYS, ZkSecurityKeys
from pybkx.meta.zookeeper.auth import JAAS_ENV, zk_auth

DIGEST = "org.apache.zookeeper.server.auth.DigestLoginModule"

JAAS = f"""
/* The process's JAAS file: the bookie-client SASL section and ZooKeeper's. */
Bookie {{
   org.apache.bookkeeper.sasl.SaslServerCallbackHandler required
   user_admin="x";
}};
// ZooKeeper
Client {{
   {DIGEST} required
   username="bookkeeper"
   password="p\\"w;{{}}";
}};
Other{{ {DIGEST} required username=plain password=word; }};
"""


def test_a_section_is_read_with_comments_quotes_and_escapes(tmp_path: Path) -> None:
    path = tmp_path / "jaas.conf"
    path.write_text(JAAS)
    assert read_section(path, "Client") == [
        JaasEntry(DIGEST, "required", {"username": "bookkeeper", "password": 'p"w;{}'})
    ]
    assert read_section(path, "Other") == [
        JaasEntry(DIGEST, "required", {"username": "plain", "password": "word"})
    ]
    assert read_section(path, "client") is None  # section names are exact, as in Java


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("Client { x required a=b }; ", r"jaas\.conf:1: expected an option name, got '}'"),
        ("Client {\n x maybe a=b; };", "has flag 'maybe'"),
        ('Client {\n x required a="b; };', "unterminated quote"),
        ("Client { x required a=b;", "ends where"),
    ],
)
def test_a_malformed_file_is_refused_naming_where(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "jaas.conf"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message):
        read_section(path, "Client")


def test_the_identity_comes_from_the_client_section_and_the_acl_from_zk_enable_security(
    tmp_path: Path,
) -> None:
    path = tmp_path / "jaas.conf"
    path.write_text(JAAS)
    auth = zk_auth({"zkEnableSecurity": "true", "jaasConfigFile": str(path)}, environ={})
    assert auth.identities == ["sasl:bookkeeper"]
    options = auth.kazoo_options()
    assert options["default_acl"] == list(CREATOR_ALL_ACL)
    assert options["sasl_options"] == {
        "mechanism": "DIGEST-MD5",
        "username": "bookkeeper",
        "password": 'p"w;{}',
    }
    # Without zkEnableSecurity: the same login, BookKeeper's OPEN_ACL_UNSAFE (kazoo's default).
    open_acls = zk_auth({"jaasConfigFile": str(path)}, environ={}).kazoo_options()
    assert "default_acl" not in open_acls and "sasl_options" in open_acls
    # The section by zkSaslClientConfig, the file from the environment when the key is unset.
    other = zk_auth({"zkSaslClientConfig": "Other"}, environ={JAAS_ENV: str(path)})
    assert other.sasl_user == "plain"
    secret = tmp_path / "digest"
    secret.write_text("me:pw\n")
    digest = zk_auth({"zkDigestAuthPath": secret}, environ={})
    assert digest.kazoo_options() == {"auth_data": [("digest", "me:pw")]}
    assert "pw" not in repr(digest) and 'p\\"w' not in repr(auth)  # no secret in a log line


@pytest.mark.parametrize(
    ("section", "message"),
    [
        (
            "Client { com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true; };",
            "uses com.sun.security.auth.module.Krb5LoginModule: pybkx authenticates",
        ),
        (f'Client {{ {DIGEST} required username="u"; }};', "needs username and password"),
    ],
)
def test_a_client_section_pybkx_cannot_use_is_refused(
    tmp_path: Path, section: str, message: str
) -> None:
    """Never an unauthenticated session where the file asks for a login (fail closed)."""
    path = tmp_path / "jaas.conf"
    path.write_text(section)
    with pytest.raises(ConfigError, match=message):
        zk_auth({"jaasConfigFile": str(path)}, environ={})


@pytest.mark.parametrize("value", ["nopassword", ":pw", "user:", ""])
def test_a_malformed_digest_file_is_refused(tmp_path: Path, value: str) -> None:
    secret = tmp_path / "digest"
    secret.write_text(value)
    with pytest.raises(ConfigError, match=r"zkDigestAuthPath=.*must hold user:password"):
        zk_auth({"zkDigestAuthPath": str(secret)}, environ={})
    with pytest.raises(ConfigError, match=r"zkDigestAuthPath=.*cannot read"):
        zk_auth({"zkDigestAuthPath": str(tmp_path / "absent")}, environ={})


def test_a_missing_jaas_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read the JAAS file"):
        zk_auth({"jaasConfigFile": str(tmp_path / "absent.conf")}, environ={})


def test_both_configurations_type_the_keys_and_hand_them_to_the_store(tmp_path: Path) -> None:
    conf = tmp_path / "bk_server.conf"
    conf.write_text(
        "zkEnableSecurity=true\njaasConfigFile=/etc/bk/jaas.conf\nzkSaslClientConfig=ZkClient\n"
    )
    server = ServerConfig.from_file(conf)
    expected = {
        "zkEnableSecurity": True,
        "zkSaslClient": True,
        "jaasConfigFile": "/etc/bk/jaas.conf",
        "zkSaslClientConfig": "ZkClient",
    }
    assert server.zk_security_settings() == expected
    assert {k: server.client_settings()[k] for k in expected} == expected
    client = ClientConfig.of(
        zkEnableSecurity=True, zkDigestAuthPath="/etc/zk-digest", jaasConfigFile=tmp_path
    )
    settings = client.store_settings()
    assert settings["zkEnableSecurity"] is True
    assert settings["zkDigestAuthPath"] == "/etc/zk-digest"
    assert settings["jaasConfigFile"] == str(tmp_path)
    with pytest.raises(ConfigError, match="zkEnableSecurity"):
        ClientConfig.of(zkEnableSecurity="perhaps")


def test_the_key_list_is_the_mixins_keys() -> None:
    """The sandbox hands exactly these to its own store session."""
    assert set(ZK_SECURITY_KEYS) == set(keyed_fields(ZkSecurityKeys))
