"""A ZooKeeper that authenticates clients with SASL DIGEST-MD5 (ZooKeeper's DigestLoginModule
with two users) for the ``zkEnableSecurity`` tests, the JAAS ``Client`` files of its users, and
kazoo sessions as one of them or as nobody. Owns the server's set-up and these files only."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.security import ACL

from support.zookeeper import run_zookeeper

__all__ = ["SaslZooKeeper", "kazoo_session", "sasl_zookeeper", "walk_acls"]

DIGEST_LOGIN_MODULE = "org.apache.zookeeper.server.auth.DigestLoginModule"
USERS = {"bookkeeper": "bk-s3cret", "intruder": "0ther-pw"}
"""The server's users and their passwords: the cluster's identity and another one."""


def client_jaas(path: Path, user: str, password: str, section: str = "Client") -> Path:
    """Write a JAAS file whose ``section`` logs ``user`` in to ZooKeeper, as a Java process's
    ``-Djava.security.auth.login.config`` file does."""
    path.write_text(
        "// ZooKeeper identity of the process\n"
        f"{section} {{\n"
        f"  {DIGEST_LOGIN_MODULE} required\n"
        f'  username="{user}"\n'
        f'  password="{password}";\n'
        "};\n"
    )
    return path


@dataclass(frozen=True)
class SaslZooKeeper:
    """The server's ``host:port`` and the JAAS ``Client`` file of each user."""

    address: str
    jaas: dict[str, Path]

    def jvm_option(self, user: str = "bookkeeper") -> str:
        """The JVM flag that makes a Java process log in as ``user``."""
        return f"-Djava.security.auth.login.config={self.jaas[user]}"


@pytest.fixture(scope="session")
def sasl_zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SaslZooKeeper]:
    """One SASL ZooKeeper for the session (unauthenticated sessions are still allowed, as
    ZooKeeper's default: the tests show what ACLs keep from them)."""
    workdir = tmp_path_factory.mktemp("zookeeper-sasl")
    server_jaas = workdir / "server.jaas"
    server_jaas.write_text(
        "Server {\n"
        f"  {DIGEST_LOGIN_MODULE} required\n"
        + "".join(f'  user_{user}="{password}"\n' for user, password in USERS.items())
        + ";\n};\n"
    )
    jaas = {user: client_jaas(workdir / f"{user}.jaas", user, pw) for user, pw in USERS.items()}
    with run_zookeeper(
        workdir,
        config_lines=["authProvider.1=org.apache.zookeeper.server.auth.SASLAuthenticationProvider"],
        jvm_options=[f"-Djava.security.auth.login.config={server_jaas}"],
    ) as (address, _process):
        yield SaslZooKeeper(address, jaas)


@contextlib.contextmanager
def kazoo_session(address: str, user: str | None = None) -> Iterator[KazooClient]:
    """A kazoo session logged in as ``user`` (SASL DIGEST-MD5), or unauthenticated."""
    sasl = None
    if user is not None:
        sasl = {"mechanism": "DIGEST-MD5", "username": user, "password": USERS[user]}
    client = KazooClient(hosts=address, timeout=10.0, sasl_options=sasl)
    client.start(timeout=30.0)
    try:
        yield client
    finally:
        client.stop()
        client.close()


def walk_acls(client: KazooClient, root: str) -> dict[str, list[ACL]]:
    """The ACL of ``root`` and of every znode below it (the session must be allowed to read)."""
    acls: dict[str, list[ACL]] = {}
    pending = [root]
    while pending:
        path = pending.pop()
        acls[path], _ = client.get_acls(path)
        pending += [f"{path}/{child}" for child in client.get_children(path)]
    return acls
