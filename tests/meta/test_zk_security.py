"""``zkEnableSecurity`` on a real ZooKeeper that authenticates with SASL DIGEST-MD5: every znode
pybkx creates is creator-only (BookKeeper's ``CREATOR_ALL_ACL``), sessions log in from a JAAS
``Client`` section (or ZooKeeper's digest scheme), an unauthenticated or other session can
neither read, alter nor delete the metadata, and without an identity nothing starts."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from kazoo.security import ACL, Id
from support.bookies import assert_one_line_failure, needs_server, write_conf
from support.bookies import start_bookie as start_bookie
from support.ports import free_port
from support.sandboxes import StartSandbox
from support.sandboxes import sandboxes as sandboxes
from support.wait import wait_until
from support.zk_sasl import (
    SaslZooKeeper,
    client_jaas,
    kazoo_session,
    walk_acls,
)
from support.zk_sasl import sasl_zookeeper as sasl_zookeeper

from pybkx import errors
from pybkx.client import BookKeeper
from pybkx.config import ConfigError
from pybkx.meta import (
    BookieServiceInfo,
    Cookie,
    DigestType,
    LedgerMetadata,
    MetadataStore,
    open_metadata_store,
)
from pybkx.meta.zookeeper import ZooKeeperMetadataStore
from pybkx.meta.zookeeper.auth import JAAS_ENV

pytestmark = pytest.mark.integration

CREATOR_ONLY = [ACL(31, Id("sasl", "bookkeeper"))]
"""What ``CREATOR_ALL_ACL`` becomes for a session logged in as ``bookkeeper``."""
OPEN = [ACL(31, Id("world", "anyone"))]
BOOKIE = "127.0.0.1:3181"


def metadata() -> LedgerMetadata:
    return LedgerMetadata(
        ensemble_size=1,
        write_quorum_size=1,
        ack_quorum_size=1,
        ensembles={0: (BOOKIE,)},
        digest_type=DigestType.CRC32C,
        password=b"secret",
    )


@pytest.fixture
def top() -> str:
    """A fresh top znode of this test's own; its cluster is ``<top>/ledgers``."""
    return f"/sec-{uuid.uuid4().hex[:12]}"


def uri(zk: SaslZooKeeper, top: str) -> str:
    return f"zk+hierarchical://{zk.address}{top}/ledgers"


@pytest.fixture
def secure_store(sasl_zookeeper: SaslZooKeeper, top: str) -> Iterator[MetadataStore]:
    """A store of a new cluster with ``zkEnableSecurity``, logged in as ``bookkeeper``."""
    store = open_metadata_store(
        uri(sasl_zookeeper, top),
        zkEnableSecurity=True,
        jaasConfigFile=str(sasl_zookeeper.jaas["bookkeeper"]),
    )
    try:
        assert store.init_new_cluster()
        yield store
    finally:
        store.close()


def test_every_znode_a_secure_store_creates_is_creator_only(
    sasl_zookeeper: SaslZooKeeper, top: str, secure_store: MetadataStore
) -> None:
    store = secure_store
    ledger_id = store.generate_ledger_id()
    store.create_ledger_metadata(ledger_id, metadata())
    store.register_bookie(BOOKIE, False, BookieServiceInfo.for_address("127.0.0.1", 3181))
    store.register_bookie("127.0.0.1:3182", True, BookieServiceInfo.for_address("127.0.0.1", 3182))
    store.write_cookie(BOOKIE, Cookie(BOOKIE, ("/j",), ("/l",), store.instance_id()), None)
    store.mark_ledger_underreplicated(ledger_id, [BOOKIE])
    assert store.lock_underreplicated_ledger(ledger_id, "worker") is not None
    store.set_replication_enabled(False)
    store.set_lost_bookie_recovery_delay(30)
    store.set_check_ctime("placementpolicycheckctime", 1)
    leading, done = threading.Event(), threading.Event()

    def lead() -> None:
        leading.set()
        done.wait(30)

    election = store.auditor_election(BOOKIE)
    runner = threading.Thread(target=election.run, args=(lead,), daemon=True)
    runner.start()
    try:
        assert leading.wait(30), "the only candidate was not elected"
        with (
            store.lock("compaction", "holder"),
            kazoo_session(sasl_zookeeper.address, "bookkeeper") as zk,
        ):
            acls = walk_acls(zk, top)
    finally:
        done.set()
        election.cancel()
        runner.join(30)

    names = "\n".join(sorted(acls))
    for part in ("/available/", "/available/readonly/", "/cookies/", "/LAYOUT", "/INSTANCEID"):
        assert part in names, f"no znode {part} among:\n{names}"
    for part in ("/idgen", "/underreplication/ledgers/", "/underreplication/locks/", "/L0000"):
        assert part in names, f"no znode {part} among:\n{names}"
    for part in (
        "/locks/compaction/",
        "/underreplication/auditorelection/",
        "/underreplication/disable",
    ):
        assert part in names, f"no znode {part} among:\n{names}"
    not_creator_only = {path: acl for path, acl in acls.items() if acl != CREATOR_ONLY}
    assert not not_creator_only, f"znodes without creator-only ACLs: {not_creator_only}"


def test_an_unauthenticated_or_other_session_cannot_read_alter_or_delete_ledger_metadata(
    sasl_zookeeper: SaslZooKeeper, top: str, secure_store: MetadataStore
) -> None:
    ledger_id = secure_store.generate_ledger_id()
    written = secure_store.create_ledger_metadata(ledger_id, metadata())
    ledger = f"{top}/ledgers/00/0000/L{ledger_id:04d}"
    for user in (None, "intruder"):
        with kazoo_session(sasl_zookeeper.address, user) as zk:
            assert zk.exists(ledger) is not None  # exists needs no permission in ZooKeeper
            for attempt in (
                lambda: zk.get(ledger),
                lambda: zk.set(ledger, b"forged"),
                lambda: zk.delete(ledger),
                lambda: zk.get_children(f"{top}/ledgers"),
                lambda: zk.create(f"{top}/ledgers/00/0000/L9999", b"forged"),
            ):
                with pytest.raises(NoAuthError):
                    attempt()
    assert secure_store.read_ledger_metadata(ledger_id) == written

    # pybkx logged in as another identity: refused at the LAYOUT check, naming the cause.
    with pytest.raises(errors.ZKException, match=r"NoAuthError.*sasl:intruder"):
        open_metadata_store(
            uri(sasl_zookeeper, top),
            zkEnableSecurity=True,
            jaasConfigFile=str(sasl_zookeeper.jaas["intruder"]),
        )


def test_without_zk_enable_security_a_logged_in_store_creates_open_znodes(
    sasl_zookeeper: SaslZooKeeper, top: str
) -> None:
    """As BookKeeper: the JAAS identity is used either way; zkEnableSecurity only picks the
    ACLs (OPEN_ACL_UNSAFE when false)."""
    store = open_metadata_store(
        uri(sasl_zookeeper, top), jaasConfigFile=str(sasl_zookeeper.jaas["bookkeeper"])
    )
    try:
        store.init_new_cluster()
        store.create_ledger_metadata(store.generate_ledger_id(), metadata())
        with kazoo_session(sasl_zookeeper.address) as zk:
            acls = walk_acls(zk, f"{top}/ledgers")
    finally:
        store.close()
    assert acls and all(acl == OPEN for acl in acls.values()), acls


@pytest.mark.parametrize("case", ["no JAAS file", "no Client section", "zkSaslClient=false"])
def test_zk_enable_security_without_an_identity_is_refused_before_connecting(
    sasl_zookeeper: SaslZooKeeper, top: str, tmp_path: Path, case: str
) -> None:
    """Creator-only ACLs of a session with no identity would name nobody: fail closed."""
    conf: dict[str, object] = {"zkEnableSecurity": "true"}
    if case == "no Client section":
        conf["jaasConfigFile"] = str(client_jaas(tmp_path / "x.jaas", "bookkeeper", "pw", "Bk"))
    elif case == "zkSaslClient=false":
        conf |= {"jaasConfigFile": str(sasl_zookeeper.jaas["bookkeeper"]), "zkSaslClient": False}
    with pytest.raises(ConfigError, match="zkEnableSecurity=true needs an identity"):
        open_metadata_store(uri(sasl_zookeeper, top), **conf)
    with pytest.raises(ConfigError, match="zkEnableSecurity=true needs an identity"):
        BookKeeper(uri(sasl_zookeeper, top), **conf)
    with kazoo_session(sasl_zookeeper.address) as zk:
        assert zk.exists(top) is None, "something was created before the refusal"


@needs_server
def test_a_bookie_with_zk_enable_security_and_no_identity_refuses_to_start(
    sasl_zookeeper: SaslZooKeeper, top: str, tmp_path: Path, start_bookie: Any
) -> None:
    conf = write_conf(
        tmp_path,
        free_port(),
        f"metadataServiceUri={uri(sasl_zookeeper, top)}\nzkEnableSecurity=true\n",
    )
    bookie = start_bookie("--conf", str(conf))
    assert_one_line_failure(bookie, "zkEnableSecurity=true needs an identity", "bk_server.conf")


def test_a_wrong_password_fails_at_once_naming_the_login(
    sasl_zookeeper: SaslZooKeeper, top: str, tmp_path: Path
) -> None:
    jaas = client_jaas(tmp_path / "wrong.jaas", "bookkeeper", "not-the-password")
    with pytest.raises(errors.ZKException, match="refused the SASL login of bookkeeper"):
        open_metadata_store(uri(sasl_zookeeper, top), zkEnableSecurity=True, jaasConfigFile=jaas)


def test_the_digest_scheme_is_an_identity_of_its_own(
    sasl_zookeeper: SaslZooKeeper, top: str, tmp_path: Path
) -> None:
    """pybkx's ``zkDigestAuthPath``: the same user:password reads; the SASL identity does not."""
    secret = tmp_path / "zk-digest"
    secret.write_text("pybkx:digest-pw\n")
    conf = {"zkEnableSecurity": True, "zkDigestAuthPath": str(secret)}
    store = open_metadata_store(uri(sasl_zookeeper, top), **conf)
    try:
        store.init_new_cluster()
        ledger_id = store.generate_ledger_id()
        store.create_ledger_metadata(ledger_id, metadata())
        again = open_metadata_store(uri(sasl_zookeeper, top), **conf)
        try:
            assert again.read_ledger_metadata(ledger_id).value.ensemble_size == 1
        finally:
            again.close()
        with kazoo_session(sasl_zookeeper.address, "bookkeeper") as zk:
            ledger = f"{top}/ledgers/00/0000/L{ledger_id:04d}"
            with pytest.raises(NoAuthError):
                zk.get(ledger)
        with kazoo_session(sasl_zookeeper.address) as zk:
            zk.add_auth("digest", "pybkx:digest-pw")
            acl, _ = zk.get_acls(ledger)
    finally:
        store.close()
    assert len(acl) == 1 and acl[0].perms == 31 and acl[0].id.scheme == "digest"
    assert acl[0].id.id.startswith("pybkx:")


def test_a_secure_cluster_of_bookie_processes_writes_and_reads_ledgers(
    sasl_zookeeper: SaslZooKeeper, top: str, sandboxes: StartSandbox
) -> None:
    conf = {"zkEnableSecurity": "true", "jaasConfigFile": str(sasl_zookeeper.jaas["bookkeeper"])}
    cluster = sandboxes(conf, zk_uri=uri(sasl_zookeeper, top), bookies=2)
    with BookKeeper(cluster.metadata_uri, **conf) as bk:
        writer = bk.create_ledger(2, 2, 2, password=b"pw")
        for i in range(20):
            writer.append(b"entry-%d" % i)
        writer.close()
        reader = bk.open_ledger(writer.ledger_id, password=b"pw")
        assert [bytes(e.payload) for e in reader.read(0, 19)] == [
            b"entry-%d" % i for i in range(20)
        ]
        with kazoo_session(sasl_zookeeper.address, "bookkeeper") as zk:
            acls = walk_acls(zk, f"{top}/ledgers")
    registered = [p for p in acls if "/available/127.0.0.1:" in p]
    cookies = [p for p in acls if "/cookies/" in p]
    ledgers = [p for p in acls if re.fullmatch(r"L[0-9]{4}", p.rsplit("/", 1)[-1])]
    assert len(registered) == 2 and len(cookies) == 2 and len(ledgers) == 1, sorted(acls)
    not_creator_only = {path: acl for path, acl in acls.items() if acl != CREATOR_ONLY}
    assert not not_creator_only, f"znodes without creator-only ACLs: {not_creator_only}"
    with kazoo_session(sasl_zookeeper.address) as zk, pytest.raises(NoAuthError):
        zk.delete(ledgers[0])


def shell(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``pybkx shell ARGS`` in a process of its own, bounded in time."""
    environment = {k: v for k, v in os.environ.items() if k != JAAS_ENV} | (env or {})
    return subprocess.run(
        [sys.executable, "-m", "pybkx", "shell", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=environment,
        check=False,
    )


def test_the_shell_takes_the_identity_and_acls_from_the_bookie_configuration(
    sasl_zookeeper: SaslZooKeeper, top: str, tmp_path: Path
) -> None:
    """``--conf``: the shell is the bookie's configuration's client, as BookKeeper's shell; the
    JAAS file also comes from $PYBKX_JAAS_CONFIG. Without an identity: NoAuth, named."""
    conf = tmp_path / "bk_server.conf"
    conf.write_text(
        f"metadataServiceUri={uri(sasl_zookeeper, top)}\nzkEnableSecurity=true\n"
        f"jaasConfigFile={sasl_zookeeper.jaas['bookkeeper']}\n"
    )
    made = shell("initnewcluster", "--conf", str(conf))
    assert made.returncode == 0, made.stderr
    with kazoo_session(sasl_zookeeper.address, "bookkeeper") as zk:
        acls = walk_acls(zk, f"{top}/ledgers")
    assert len(acls) >= 5 and all(acl == CREATOR_ONLY for acl in acls.values()), acls

    assert shell("listbookies", "--conf", str(conf)).returncode == 0
    anonymous = shell("listbookies", "--uri", uri(sasl_zookeeper, top))
    assert anonymous.returncode != 0 and "NoAuthError" in anonymous.stderr, anonymous.stderr
    from_env = shell(
        "listbookies",
        "--uri",
        uri(sasl_zookeeper, top),
        env={JAAS_ENV: str(sasl_zookeeper.jaas["bookkeeper"])},
    )
    assert from_env.returncode == 0, from_env.stderr


def test_autorecovery_heals_a_secure_cluster_and_keeps_every_znode_creator_only(
    sasl_zookeeper: SaslZooKeeper, top: str, sandboxes: StartSandbox
) -> None:
    """The bookies' AutoRecovery (auditor, replication workers) opens its client from the
    bookie's configuration: same identity, same ACLs."""
    conf = {
        "zkEnableSecurity": "true",
        "jaasConfigFile": str(sasl_zookeeper.jaas["bookkeeper"]),
        "zkTimeout": 2000,
        "autoRecoveryDaemonEnabled": True,
        "rwRereplicateBackoffMs": 500,
    }
    cluster = sandboxes(conf, zk_uri=uri(sasl_zookeeper, top), bookies=4)
    with BookKeeper(cluster.metadata_uri, **conf) as bk:
        writer = bk.create_ledger(3, 2, 2, password=b"pw")
        for i in range(50):
            writer.append(b"entry-%d" % i)
        writer.close()
        lost = writer.metadata.ensembles[0][0]
        cluster.kill_bookie(cluster.bookie_addresses.index(bk.address_of(lost)))

        def healed() -> bool:
            ensembles = bk.store.read_ledger_metadata(writer.ledger_id).value.ensembles
            in_use = {b for ensemble in ensembles.values() for b in ensemble}
            return lost not in in_use and not bk.store.underreplicated_ledgers()

        wait_until(healed, "the ledger re-replicated off the killed bookie", timeout_s=90)
        reader = bk.open_ledger(writer.ledger_id, password=b"pw")
        assert [bytes(e.payload) for e in reader.read(0, 49)] == [
            b"entry-%d" % i for i in range(50)
        ]
        with kazoo_session(sasl_zookeeper.address, "bookkeeper") as zk:
            acls = walk_acls(zk, f"{top}/ledgers")
    assert any("/underreplication/auditorelection/" in path for path in acls), sorted(acls)
    not_creator_only = {path: acl for path, acl in acls.items() if acl != CREATOR_ONLY}
    assert not not_creator_only, f"znodes without creator-only ACLs: {not_creator_only}"


def test_after_the_session_expires_the_new_one_logs_in_and_registers_creator_only(
    sasl_zookeeper: SaslZooKeeper, top: str, secure_store: MetadataStore
) -> None:
    store = secure_store
    assert isinstance(store, ZooKeeperMetadataStore)
    store.register_bookie(BOOKIE, False, BookieServiceInfo.for_address("127.0.0.1", 3181))
    # Expire the session from outside: a second client joins it, then closes it.
    session_id, password = store._zk.client_id
    intruder = KazooClient(
        hosts=sasl_zookeeper.address, client_id=(session_id, password), timeout=5.0
    )
    intruder.start(timeout=10)
    intruder.stop()
    intruder.close()
    wait_until(
        lambda: store._zk.client_id not in (None, (session_id, password)),
        "on a new session",
        timeout_s=30,
    )
    wait_until(lambda: store.writable_bookies() == {BOOKIE}, "registered again", timeout_s=30)
    with kazoo_session(sasl_zookeeper.address, "bookkeeper") as zk:
        acl, stat = zk.get_acls(f"{top}/ledgers/available/{BOOKIE}")
    assert acl == CREATOR_ONLY
    assert stat.ephemeralOwner == store._zk.client_id[0]
