"""``zkEnableSecurity`` shared with the real Apache BookKeeper 4.17.3 on a ZooKeeper that
authenticates with SASL DIGEST-MD5: pybkx bookies and a Java bookie register side by side, the
Java ledger client reads a ledger pybkx wrote (across pybkx and Java bookies) and pybkx reads one
the Java client wrote, every znode either side made is creator-only for the one identity both
take from the same JAAS ``Client`` section; a Java client without it cannot open the cluster.

The Java side is java/.../LedgerClient.java and JavaBookie.java, given the JAAS file with
``-Djava.security.auth.login.config`` as BookKeeper's launch scripts would."""

from __future__ import annotations

import hashlib
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from harness import HarnessError, Process, java_argv, start_java_bookie
from kazoo.exceptions import NoAuthError
from kazoo.security import ACL, Id
from support.wait import wait_until
from support.zk_sasl import SaslZooKeeper, kazoo_session, walk_acls
from support.zk_sasl import sasl_zookeeper as sasl_zookeeper

from pybkx.client import BookKeeper
from pybkx.tools.sandbox import Sandbox

pytestmark = pytest.mark.interop

JAVA_TIMEOUT_S = 120
CREATOR_ONLY = [ACL(31, Id("sasl", "bookkeeper"))]
PASSWORD = b"shared-secret"
TOP = "/zk-security-interop"


@pytest.fixture(scope="module")
def cluster(
    java_classpath: str, sasl_zookeeper: SaslZooKeeper, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Sandbox, Process]]:
    """Two pybkx bookies and a Java bookie with ``zkEnableSecurity``, all logged in as
    ``bookkeeper``, under ``/zk-security-interop/ledgers`` (made by pybkx)."""
    workdir = tmp_path_factory.mktemp("zk-security-interop")
    conf = {"zkEnableSecurity": "true", "jaasConfigFile": str(sasl_zookeeper.jaas["bookkeeper"])}
    sandbox = Sandbox(
        2,
        zk_uri=f"zk+hierarchical://{sasl_zookeeper.address}{TOP}/ledgers",
        directory=workdir / "sandbox",
        conf=conf,
    )
    sandbox.start()
    try:
        java_dir = workdir / "java"
        java_dir.mkdir()
        try:
            java, _address = start_java_bookie(
                java_classpath,
                sasl_zookeeper.address + TOP,
                java_dir,
                "zkEnableSecurity=true",
                jvm_options=[sasl_zookeeper.jvm_option("bookkeeper")],
            )
        except HarnessError as exc:
            pytest.fail(str(exc), pytrace=False)
        try:
            yield sandbox, java
        finally:
            java.stop()
    finally:
        sandbox.stop()


def run_ledger_client(
    classpath: str,
    uri: str,
    ops: list[dict[str, Any]],
    log: Path,
    jvm_options: list[str],
    *settings: str,
) -> subprocess.CompletedProcess[bytes]:
    """BookKeeper's ledger client running ``ops`` (one JSON line each) on ``uri``."""
    script = log.with_suffix(".jsonl")
    script.write_text("".join(json.dumps(op) + "\n" for op in ops))
    argv = java_argv(
        classpath,
        "pybkx.interop.LedgerClient",
        uri,
        str(script),
        *settings,
        heap="384m",
        jvm_options=["-XX:TieredStopAtLevel=1", *jvm_options],
    )
    with log.open("wb") as stderr:
        return subprocess.run(
            argv, stdout=subprocess.PIPE, stderr=stderr, timeout=JAVA_TIMEOUT_S, check=False
        )


def results(done: subprocess.CompletedProcess[bytes], log: Path, count: int) -> list[Any]:
    out = [json.loads(line) for line in done.stdout.decode().splitlines() if line]
    if done.returncode != 0 or len(out) != count or any("error" in r for r in out):
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-40:])
        pytest.fail(f"LedgerClient: exit {done.returncode}, {out}; log {log}:\n{tail}")
    return out


def test_a_java_bookie_registers_beside_pybkx_bookies_under_the_same_identity(
    sasl_zookeeper: SaslZooKeeper, cluster: tuple[Sandbox, Process]
) -> None:
    sandbox, _java = cluster
    with kazoo_session(sasl_zookeeper.address, "bookkeeper") as zk:
        acls = walk_acls(zk, f"{TOP}/ledgers")
    registered = [p for p in acls if p.startswith(f"{TOP}/ledgers/available/127.0.0.1:")]
    cookies = [p for p in acls if p.startswith(f"{TOP}/ledgers/cookies/")]
    assert len(registered) == 3 and len(cookies) == 3, sorted(acls)
    assert all(acls[p] == CREATOR_ONLY for p in registered + cookies), {
        p: acls[p] for p in registered + cookies
    }
    assert len(sandbox.metadata_store.writable_bookies()) == 3


def test_the_java_client_reads_what_pybkx_wrote_and_pybkx_reads_what_java_wrote(
    java_classpath: str,
    sasl_zookeeper: SaslZooKeeper,
    cluster: tuple[Sandbox, Process],
    tmp_path: Path,
) -> None:
    sandbox, _java = cluster
    conf = {"zkEnableSecurity": "true", "jaasConfigFile": str(sasl_zookeeper.jaas["bookkeeper"])}
    payloads = [b"pybkx-%d" % i * (i + 1) for i in range(12)]
    with BookKeeper(sandbox.metadata_uri, **conf) as bk:
        writer = bk.create_ledger(3, 3, 2, password=PASSWORD)  # the Java bookie among them
        for payload in payloads:
            writer.append(payload)
        writer.close()
        pybkx_ledger = writer.ledger_id

        log = tmp_path / "java-client.log"
        java_payloads = [b"java-%d" % i for i in range(7)]
        ops: list[dict[str, Any]] = [
            {"op": "open", "ledger": pybkx_ledger, "password_hex": PASSWORD.hex(),
             "digest": "CRC32C", "recovery": False},
            {"op": "read", "ledger": pybkx_ledger, "first": 0, "last": len(payloads) - 1},
            {"op": "create", "writer": "w", "ensemble": 3, "write_quorum": 2, "ack_quorum": 2,
             "digest": "CRC32C", "password_hex": PASSWORD.hex()},
            {"op": "append", "writer": "w", "payloads_hex": [p.hex() for p in java_payloads]},
            {"op": "close", "writer": "w"},
        ]  # fmt: skip
        done = run_ledger_client(
            java_classpath,
            sandbox.metadata_uri,
            ops,
            log,
            [sasl_zookeeper.jvm_option("bookkeeper")],
            "zkEnableSecurity=true",
        )
        _open, read, created, _append, _close = results(done, log, len(ops))
        assert [e["sha256"] for e in read["entries"]] == [
            hashlib.sha256(p).hexdigest() for p in payloads
        ]
        java_ledger = created["ledger"]
        reader = bk.open_ledger(java_ledger, password=PASSWORD)
        assert [bytes(e.payload) for e in reader.read(0, len(java_payloads) - 1)] == java_payloads

    with kazoo_session(sasl_zookeeper.address, "bookkeeper") as zk:
        acls = walk_acls(zk, f"{TOP}/ledgers")
    ledgers = {
        int(path.rsplit("/L", 1)[1]): acl
        for path, acl in acls.items()
        if "/L" in path and path.rsplit("/L", 1)[1].isdigit()
    }
    assert ledgers[pybkx_ledger] == ledgers[java_ledger] == CREATOR_ONLY, ledgers
    with kazoo_session(sasl_zookeeper.address) as zk:
        path = next(p for p in acls if p.endswith(f"/L{java_ledger:04d}"))
        with pytest.raises(NoAuthError):
            zk.delete(path)


def test_a_java_client_without_the_identity_cannot_open_the_cluster(
    java_classpath: str, cluster: tuple[Sandbox, Process], tmp_path: Path
) -> None:
    """Its ZooKeeper session has no login: NoAuth on the bookie list, no ledger read. (The
    client's constructor throws, but its ZooKeeper threads keep the JVM alive: it is stopped
    once the refusal is logged.)"""
    sandbox, _java = cluster
    log = tmp_path / "java-client-anonymous.log"
    script = tmp_path / "java-client-anonymous.jsonl"
    script.write_text(json.dumps({"op": "metadata", "ledger": 0}) + "\n")
    argv = java_argv(
        java_classpath, "pybkx.interop.LedgerClient", sandbox.metadata_uri, str(script)
    )
    with log.open("wb") as stderr:
        client = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=stderr)
    try:
        wait_until(
            lambda: client.poll() is not None or "NoAuthException" in log.read_text("latin-1"),
            "the Java client refused by ZooKeeper",
            timeout_s=JAVA_TIMEOUT_S,
        )
    finally:
        client.kill()
        stdout, _ = client.communicate(timeout=JAVA_TIMEOUT_S)
    assert "NoAuthException" in log.read_text("latin-1")
    assert not stdout.strip(), f"the Java client answered: {stdout!r}"
