"""The SASL keys and the JAAS login file: the file's syntax as Java reads it (sections, login
modules, flags, quoted options, comments), the bookie's users and the client's credentials
taken from the sections BookKeeper's keys name, and every way the settings cannot work refused
before anything starts (no file, no section, a Kerberos module, no user, a bad pattern, another
provider class)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support.bookies import assert_one_line_failure, needs_server, write_conf
from support.bookies import start_bookie as start_bookie
from support.jaas import SASL_BOOKIE_FACTORY, SASL_CLIENT_FACTORY, write_jaas
from support.ports import accepts_tcp, free_port

from pybkx.config import ClientConfig, ConfigError, ServerConfig
from pybkx.config.jaas import parse_jaas
from pybkx.config.security import bookie_sasl_policy, client_sasl_credentials

JAAS_KEY = "java.security.auth.login.config"


def test_the_jaas_syntax_as_java_reads_it() -> None:
    sections = parse_jaas(
        """
        // a comment
        Bookie {
          org.apache.zookeeper.server.auth.DigestLoginModule required
            user_admin="a \\"quoted\\" secret"   /* another comment */
            user_bookkeeper=plain;
        };
        "BookKeeper" { org.apache.zookeeper.server.auth.DigestLoginModule Required
            username="bookkeeper" password='pw'; };
        """
    )
    (bookie,) = sections["Bookie"]
    assert bookie.flag == "required"
    assert bookie.options == {"user_admin": 'a "quoted" secret', "user_bookkeeper": "plain"}
    assert sections["BookKeeper"][0].options == {"username": "bookkeeper", "password": "pw"}
    for bad in (
        "Bookie { m required x=1 ",
        "Bookie { m sometimes; };",
        "Bookie { m required x; };",
    ):
        with pytest.raises(ConfigError):
            parse_jaas(bad)


def test_users_credentials_and_section_names_come_from_bookkeepers_keys(tmp_path: Path) -> None:
    jaas = write_jaas(
        tmp_path / "jaas.conf",
        users={"bookkeeper-a": "x", "b": "y"},
        client=("bookkeeper-a", "x"),
        bookie_section="MyBookie",
        client_section="MyClient",
    )
    server = ServerConfig.of(
        bookieAuthProviderFactoryClass=SASL_BOOKIE_FACTORY,
        saslJaasBookieSectionName="MyBookie",
        **{JAAS_KEY: str(jaas)},
    )
    policy = bookie_sasl_policy(server)
    assert policy is not None
    assert policy.users == {"bookkeeper-a": "x", "b": "y"}
    assert policy.allowed_ids == ".*bookkeeper.*"  # BookKeeper's default
    assert "x" not in repr(policy)
    client = ClientConfig.of(
        clientAuthProviderFactoryClass=SASL_CLIENT_FACTORY,
        saslJaasClientSectionName="MyClient",
        **{JAAS_KEY: str(jaas)},
    )
    creds = client_sasl_credentials(client)
    assert creds is not None
    assert (creds.username, creds.password) == ("bookkeeper-a", "x")
    assert "x'" not in repr(creds)
    assert bookie_sasl_policy(ServerConfig.of()) is None
    assert client_sasl_credentials(ClientConfig.of()) is None


def test_settings_that_cannot_work_are_refused(tmp_path: Path) -> None:
    on = {"bookieAuthProviderFactoryClass": SASL_BOOKIE_FACTORY}
    with pytest.raises(ConfigError, match="jaasConfigFile"):
        bookie_sasl_policy(ServerConfig.of(**on))
    with pytest.raises(ConfigError, match="cannot read"):
        bookie_sasl_policy(ServerConfig.of(**on, **{JAAS_KEY: str(tmp_path / "missing")}))
    only_client = write_jaas(tmp_path / "client.conf", client=("u", "p"))
    with pytest.raises(ConfigError, match="no 'Bookie' section"):
        bookie_sasl_policy(ServerConfig.of(**on, **{JAAS_KEY: str(only_client)}))
    kerberos = tmp_path / "krb.conf"
    kerberos.write_text(
        "Bookie { com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true; };"
    )
    with pytest.raises(ConfigError, match="Kerberos"):
        bookie_sasl_policy(ServerConfig.of(**on, **{JAAS_KEY: str(kerberos)}))
    no_users = tmp_path / "nousers.conf"
    no_users.write_text("Bookie { org.apache.zookeeper.server.auth.DigestLoginModule required; };")
    with pytest.raises(ConfigError, match="no user"):
        bookie_sasl_policy(ServerConfig.of(**on, **{JAAS_KEY: str(no_users)}))
    with pytest.raises(ConfigError, match="saslJaasClientAllowedIds"):
        ServerConfig.of(saslJaasClientAllowedIds="(unclosed")
    client_on = {"clientAuthProviderFactoryClass": SASL_CLIENT_FACTORY}
    only_bookie = write_jaas(tmp_path / "bookie.conf", users={"u": "p"})
    with pytest.raises(ConfigError, match="no 'BookKeeper' section"):
        client_sasl_credentials(ClientConfig.of(**client_on, **{JAAS_KEY: str(only_bookie)}))


@needs_server
def test_a_bookie_whose_jaas_file_is_missing_does_not_start(
    tmp_path: Path, start_bookie: Any
) -> None:
    port = free_port()
    conf = write_conf(
        tmp_path,
        port,
        f"bookieAuthProviderFactoryClass={SASL_BOOKIE_FACTORY}\n{JAAS_KEY}={tmp_path / 'nope'}\n",
    )
    bookie = start_bookie("--conf", str(conf))
    assert_one_line_failure(bookie, JAAS_KEY, "cannot read the JAAS file")
    assert not accepts_tcp(port), "nothing may listen without its authentication"
