"""A bookie joins a cluster: cookie checks, registration, read-only moves, and the shell commands.

Owns what a bookie process leaves in the metadata store and in its directories' cookies; must
never write a cookie or registration itself (only the bookie and the shell do).
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from support.bookies import BookieProcess, assert_one_line_failure
from support.ports import free_port
from support.wait import wait_until

from pybkx import errors
from pybkx.bookie import Bookie, BookieError
from pybkx.config import ServerConfig
from pybkx.meta import BookieServiceInfo, MetadataStore, open_metadata_store

pytestmark = pytest.mark.integration

PYBKX = [sys.executable, "-m", "pybkx"]
START_TIMEOUT_S = 20.0
ZK_TIMEOUT_MS = 2000
"""The bookies' ZooKeeper session timeout: a SIGKILLed bookie's registration lasts this long."""


# --- helpers ---------------------------------------------------------------------------------


class Node:
    """One bookie's configuration: a port, directories under ``root``, the cluster's URI."""

    def __init__(self, root: Path, uri: str) -> None:
        self.root = root
        self.uri = uri
        self.port = free_port()
        self.journal = root / "journal"
        self.ledgers = root / "ledgers"
        root.mkdir(parents=True, exist_ok=True)

    @property
    def bookie_id(self) -> str:
        return f"127.0.0.1:{self.port}"

    def conf(self, **extra: object) -> Path:
        settings: dict[str, object] = {
            "bookiePort": self.port,
            "listeningInterface": "127.0.0.1",
            "allowLoopback": "true",
            "journalDirectories": self.journal,
            "ledgerDirectories": self.ledgers,
            "metadataServiceUri": self.uri,
            "zkTimeout": ZK_TIMEOUT_MS,
            "journalPreAllocSizeMB": 1,
            "flushInterval": 0,
            **extra,
        }
        path = self.root / "bk_server.conf"
        path.write_text("".join(f"{k}={v}\n" for k, v in settings.items() if v is not None))
        return path

    def config(self, **extra: object) -> ServerConfig:
        return ServerConfig.from_file(self.conf(**extra))


Start = Callable[..., BookieProcess]


@pytest.fixture(params=["embedded", "zookeeper"])
def cluster_uri(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """An empty cluster of each backend (ZooKeeper: a fresh root on the session server)."""
    if request.param == "zookeeper":
        server = request.getfixturevalue("zookeeper_server")
        return f"zk+hierarchical://{server}/t{uuid.uuid4().hex[:12]}/ledgers"
    return f"embedded://{tmp_path / 'metadata'}"


@pytest.fixture
def embedded_uri(tmp_path: Path) -> str:
    return f"embedded://{tmp_path / 'metadata'}"


@pytest.fixture
def store_of() -> Iterator[Callable[[str], MetadataStore]]:
    """``store_of(uri)``: the test's own session on a cluster (closed at teardown)."""
    opened: list[MetadataStore] = []

    def _open(uri: str) -> MetadataStore:
        store = open_metadata_store(uri, zkTimeout=ZK_TIMEOUT_MS)
        opened.append(store)
        return store

    yield _open
    for store in opened:
        store.close()


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Start]:
    """``start(node, *flags, initialise=True, **conf)``: a ``pybkx bookie`` process, killed at
    teardown. Like an operator (and the sandbox), it initialises the node's cluster first unless
    told not to: a bookie never initialises one itself."""
    started: list[BookieProcess] = []

    def _start(node: Node, *flags: str, initialise: bool = True, **conf: object) -> BookieProcess:
        if initialise:
            with open_metadata_store(node.uri, zkTimeout=ZK_TIMEOUT_MS) as store:
                store.init_new_cluster()
        args = ["--conf", str(node.conf(**conf)), *flags]
        bookie = BookieProcess(args, tmp_path, f"bookie{len(started)}")
        started.append(bookie)
        return bookie

    yield _start
    for bookie in started:
        bookie.close()


def wait_registered(
    store: MetadataStore, bookie: BookieProcess, bookie_id: str, *, ro: bool
) -> None:
    def registered() -> bool:
        if bookie.proc.poll() is not None:
            pytest.fail(f"bookie exited ({bookie.proc.returncode}):\n{bookie.stderr()}")
        return bookie_id in (store.readonly_bookies() if ro else store.writable_bookies())

    wait_until(registered, f"{bookie_id} registered (read-only={ro})", timeout_s=START_TIMEOUT_S)


def ran_once(start: Start, store: MetadataStore, node: Node) -> None:
    """A bookie on ``node`` started, registered writable and stopped cleanly: its cookie is
    stamped in its directories and in the store."""
    first = start(node)
    wait_registered(store, first, node.bookie_id, ro=False)
    assert first.stop() == 0


def registered_anyhow(store: MetadataStore, bookie_id: str) -> bool:
    return bookie_id in store.writable_bookies() | store.readonly_bookies()


def shell(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*PYBKX, "shell", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


# --- registration ----------------------------------------------------------------------------


def test_a_bookie_registers_as_writable_and_unregisters_on_sigterm(
    tmp_path: Path, cluster_uri: str, start: Start, store_of: Callable[[str], MetadataStore]
) -> None:
    node = Node(tmp_path / "b0", cluster_uri)
    bookie = start(node)
    store = store_of(cluster_uri)
    wait_registered(store, bookie, node.bookie_id, ro=False)

    assert store.is_initialized()  # the first bookie initialised the cluster
    assert node.bookie_id not in store.readonly_bookies()
    assert store.bookie_service_info(node.bookie_id) == BookieServiceInfo.for_address(
        "127.0.0.1", node.port
    )
    cookie = store.read_cookie(node.bookie_id).value
    assert cookie.bookie_id == node.bookie_id
    assert cookie.journal_dirs == (str(node.journal),)
    assert cookie.ledger_dirs == (str(node.ledgers),)
    assert cookie.instance_id == store.instance_id()
    stored_text = (node.journal / "current" / "VERSION").read_bytes()
    assert stored_text == (node.ledgers / "current" / "VERSION").read_bytes()
    assert stored_text.startswith(b"5\n") and node.bookie_id.encode() in stored_text

    assert bookie.stop(signal.SIGTERM) == 0
    assert bookie.stderr() == ""
    # Unregistered before it stopped: no waiting for a session to expire.
    assert not registered_anyhow(store, node.bookie_id)
    assert store.all_bookies() == {node.bookie_id}  # the cookie stays
    log = bookie.stdout()
    assert log.index("bookie unregistered") < log.index("stopping server")


def test_a_killed_bookie_loses_its_registration(
    tmp_path: Path, cluster_uri: str, start: Start, store_of: Callable[[str], MetadataStore]
) -> None:
    node = Node(tmp_path / "b0", cluster_uri)
    bookie = start(node)
    store = store_of(cluster_uri)
    wait_registered(store, bookie, node.bookie_id, ro=False)

    assert bookie.stop(signal.SIGKILL) == -signal.SIGKILL
    # Embedded: the owner process is gone at once. ZooKeeper: the session expires.
    wait_until(
        lambda: not registered_anyhow(store, node.bookie_id),
        "the killed bookie's registration is gone",
        timeout_s=ZK_TIMEOUT_MS / 1000 * 3 + 2,
    )

    # It comes back with the same identity: its cookie still matches.
    again = start(node)
    wait_registered(store, again, node.bookie_id, ro=False)
    assert "cookie verified" in again.stdout()
    assert again.stop() == 0


def test_a_readonly_bookie_registers_under_readonly(
    tmp_path: Path, cluster_uri: str, start: Start, store_of: Callable[[str], MetadataStore]
) -> None:
    node = Node(tmp_path / "b0", cluster_uri)
    bookie = start(node, "--readonly")
    store = store_of(cluster_uri)
    wait_registered(store, bookie, node.bookie_id, ro=True)
    assert node.bookie_id not in store.writable_bookies()
    assert bookie.stop() == 0
    assert not registered_anyhow(store, node.bookie_id)


def test_set_read_only_moves_the_registration_and_back(
    tmp_path: Path, embedded_uri: str, store_of: Callable[[str], MetadataStore]
) -> None:
    node = Node(tmp_path / "b0", embedded_uri)
    store = store_of(embedded_uri)
    store.init_new_cluster()
    with Bookie(node.config(), drain_timeout_ms=1000) as bookie:
        assert bookie.bookie_id == node.bookie_id
        assert store.writable_bookies() == {node.bookie_id}

        bookie.set_read_only(True)
        assert bookie.read_only
        assert store.readonly_bookies() == {node.bookie_id}
        assert store.writable_bookies() == frozenset()
        bookie.set_read_only(True)  # idempotent
        assert store.readonly_bookies() == {node.bookie_id}

        bookie.set_read_only(False)
        assert not bookie.read_only
        assert store.writable_bookies() == {node.bookie_id}
        assert store.readonly_bookies() == frozenset()
    assert not registered_anyhow(store, node.bookie_id)
    with pytest.raises(BookieError, match="not running"):
        bookie.set_read_only(True)


def test_a_forced_read_only_bookie_refuses_to_become_writable(
    tmp_path: Path, embedded_uri: str, store_of: Callable[[str], MetadataStore]
) -> None:
    node = Node(tmp_path / "b0", embedded_uri)
    store = store_of(embedded_uri)
    store.init_new_cluster()
    with Bookie(node.config(forceReadOnlyBookie="true"), drain_timeout_ms=1000) as bookie:
        assert store.readonly_bookies() == {node.bookie_id}
        with pytest.raises(BookieError, match="forceReadOnlyBookie"):
            bookie.set_read_only(False)
        assert bookie.read_only
        assert store.readonly_bookies() == {node.bookie_id}


def test_a_standalone_bookie_writes_no_cookie(tmp_path: Path) -> None:
    node = Node(tmp_path / "b0", "unused")
    config = node.config(metadataServiceUri=None)
    with Bookie(config, drain_timeout_ms=1000) as bookie:
        assert bookie.metadata_store is None
    assert not (node.journal / "current" / "VERSION").exists()


# --- cookies ---------------------------------------------------------------------------------


def test_a_restart_with_the_same_dirs_reuses_the_cookie(
    tmp_path: Path, embedded_uri: str, start: Start, store_of: Callable[[str], MetadataStore]
) -> None:
    node = Node(tmp_path / "b0", embedded_uri)
    store = store_of(embedded_uri)
    first = start(node)
    wait_registered(store, first, node.bookie_id, ro=False)
    assert "cookie stamped (new bookie)" in first.stdout()
    assert first.stop() == 0
    cookie_file = node.ledgers / "current" / "VERSION"
    text, version = cookie_file.read_bytes(), store.read_cookie(node.bookie_id).version

    second = start(node)
    wait_registered(store, second, node.bookie_id, ro=False)
    assert "cookie verified" in second.stdout()
    assert second.stop() == 0
    assert cookie_file.read_bytes() == text
    assert store.read_cookie(node.bookie_id).version == version


def test_a_restart_with_another_ledger_dir_is_refused(
    tmp_path: Path, embedded_uri: str, start: Start, store_of: Callable[[str], MetadataStore]
) -> None:
    node = Node(tmp_path / "b0", embedded_uri)
    store = store_of(embedded_uri)
    ran_once(start, store, node)

    other = tmp_path / "b0" / "other-ledgers"
    refused = start(node, "--ledger-dirs", str(other))
    line = assert_one_line_failure(refused, "InvalidCookieException", str(other), str(node.ledgers))
    assert "ledger dirs" in line
    assert not registered_anyhow(store, node.bookie_id)
    assert not other.exists()  # refused before the storage opened


def test_another_port_is_another_bookie_id_and_is_refused(
    tmp_path: Path, embedded_uri: str, start: Start, store_of: Callable[[str], MetadataStore]
) -> None:
    node = Node(tmp_path / "b0", embedded_uri)
    store = store_of(embedded_uri)
    ran_once(start, store, node)
    old_id = node.bookie_id
    node.port = free_port()
    refused = start(node)
    assert_one_line_failure(refused, "InvalidCookieException", "bookie id", old_id, node.bookie_id)


def test_dirs_with_a_cookie_after_metaformat_are_refused(
    tmp_path: Path, embedded_uri: str, start: Start, store_of: Callable[[str], MetadataStore]
) -> None:
    node = Node(tmp_path / "b0", embedded_uri)
    ran_once(start, store_of(embedded_uri), node)
    assert shell("metaformat", "--uri", embedded_uri, "--force").returncode == 0

    refused = start(node)
    assert_one_line_failure(refused, "InvalidCookieException", "instance id")


def test_a_cookie_in_the_store_but_wiped_dirs_is_refused(
    tmp_path: Path, embedded_uri: str, start: Start, store_of: Callable[[str], MetadataStore]
) -> None:
    node = Node(tmp_path / "b0", embedded_uri)
    store = store_of(embedded_uri)
    ran_once(start, store, node)
    shutil.rmtree(node.journal)  # replaced disks: the data this bookie acknowledged is gone
    shutil.rmtree(node.ledgers)

    refused = start(node)
    assert_one_line_failure(refused, "InvalidCookieException", "have none", str(node.ledgers))
    assert not node.ledgers.exists()  # refused before the storage opened
    assert not registered_anyhow(store, node.bookie_id)


def test_a_new_bookie_with_data_but_no_cookie_is_refused(
    tmp_path: Path, embedded_uri: str, start: Start, store_of: Callable[[str], MetadataStore]
) -> None:
    node = Node(tmp_path / "b0", embedded_uri)
    with Bookie(node.config(metadataServiceUri=None), drain_timeout_ms=1000):
        pass  # a standalone run leaves journal and index files, no cookie
    refused = start(node)
    assert_one_line_failure(refused, "InvalidCookieException", "without a cookie")
    store = store_of(embedded_uri)
    with pytest.raises(errors.CookieNotFoundException):
        store.read_cookie(node.bookie_id)


def test_an_unreachable_metadata_service_fails_in_one_line(tmp_path: Path, start: Start) -> None:
    node = Node(tmp_path / "b0", "zk+hierarchical://127.0.0.1:1/ledgers")
    refused = start(node, initialise=False, zkTimeout=1000)
    assert_one_line_failure(refused, "metadata store", "127.0.0.1:1")


def test_a_bookie_refuses_an_uninitialised_metadata_root(
    tmp_path: Path, cluster_uri: str, start: Start, store_of: Callable[[str], MetadataStore]
) -> None:
    node = Node(tmp_path / "b0", cluster_uri)
    refused = start(node, initialise=False)
    line = assert_one_line_failure(refused, "not initialised", "pybkx shell initnewcluster")
    assert cluster_uri in line
    store = store_of(cluster_uri)
    assert not store.is_initialized()  # the bookie created nothing: no cluster of its own
    assert not node.ledgers.exists()  # refused before the storage opened
    assert shell("initnewcluster", "--uri", cluster_uri).returncode == 0
    started = start(node, initialise=False)
    wait_registered(store, started, node.bookie_id, ro=False)


# --- shell -----------------------------------------------------------------------------------


def test_initnewcluster_initialises_once(
    cluster_uri: str, store_of: Callable[[str], MetadataStore]
) -> None:
    done = shell("initnewcluster", "--uri", cluster_uri)
    assert done.returncode == 0, done.stderr
    instance_id = store_of(cluster_uri).instance_id()
    assert done.stdout.strip().splitlines() == [
        f"initialised a new cluster at {cluster_uri} (instance id {instance_id})"
    ]

    again = shell("initnewcluster", "--uri", cluster_uri)
    assert again.returncode == 1
    assert again.stderr.strip().splitlines() == [
        f"Error: a cluster is already initialised at {cluster_uri} (instance id "
        f"{instance_id}); use metaformat to wipe it"
    ]


def test_metaformat_asks_unless_forced(
    tmp_path: Path, embedded_uri: str, start: Start, store_of: Callable[[str], MetadataStore]
) -> None:
    node = Node(tmp_path / "b0", embedded_uri)
    bookie = start(node)
    store = store_of(embedded_uri)
    wait_registered(store, bookie, node.bookie_id, ro=False)
    assert bookie.stop() == 0
    before = store.instance_id()

    for answer in ("", "n\n"):  # stdin closed, or "no"
        refused = shell("metaformat", "--uri", embedded_uri, stdin=answer)
        assert refused.returncode == 1
        assert refused.stderr.startswith(f"Format the metadata at {embedded_uri}?")
        assert refused.stderr.rstrip().endswith(
            "Error: metaformat not confirmed: nothing changed (use --force)"
        )
        assert store.instance_id() == before
        assert store.all_bookies() == {node.bookie_id}

    confirmed = shell("metaformat", "--uri", embedded_uri, stdin="y\n")
    assert confirmed.returncode == 0, confirmed.stderr
    assert store.instance_id() != before
    assert store.all_bookies() == frozenset()
    assert confirmed.stdout.strip() == (
        f"formatted the metadata at {embedded_uri} (new instance id {store.instance_id()})"
    )

    forced = shell("metaformat", "--uri", embedded_uri, "--force")
    assert forced.returncode == 0, forced.stderr


def test_shell_commands_refuse_an_unknown_uri_in_one_line() -> None:
    for command in (["initnewcluster"], ["metaformat", "--force"]):
        result = shell(*command, "--uri", "nosuch://x")
        assert result.returncode == 1
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and "unsupported metadataServiceUri" in lines[0], lines
