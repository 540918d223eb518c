"""Operating pybkx with Apache BookKeeper's own tools, and pybkx's operations surface beside the
real Java bookie's: BookKeeper's shell (``BookieShell``) lists, reads and tests a pybkx cluster
where its commands overlap pybkx's; a pybkx bookie's ``/metrics`` families exist with the same
types and labels on the Java bookie; the admin API answers with the same JSON shapes. Owns these
checks; processes come from the interop fixtures."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import harness
import pytest
from prometheus_client.parser import text_string_to_metric_families

import pybkx
from pybkx.tools.sandbox import Sandbox

pytestmark = pytest.mark.interop

SHELL_TIMEOUT_S = 120.0
# Labels only the Java bookie has: its thread pools.
JAVA_ONLY_LABELS = {"thread", "threadPool"}
# pybkx names with no Java counterpart: BP-62's histograms, and per-directory gauges whose
# names hold the directory's path.
NOT_IN_JAVA = re.compile(r"^bookkeeper_server_BATCH_READ_ENTRY_|^bookie_(ledger|index)_dir_")


@pytest.fixture
def cluster(zookeeper: str, tmp_path: Path) -> Iterator[Sandbox]:
    """3 pybkx bookies (with their admin servers) under a fresh root of the interop ZooKeeper."""
    uri = f"zk+hierarchical://{zookeeper}/ops-{uuid.uuid4().hex[:12]}/ledgers"
    with Sandbox(3, zk_uri=uri, directory=tmp_path / "sandbox", conf={"zkTimeout": 4000}) as sb:
        yield sb


def bookie_shell(classpath: str, conf: Path, *args: str) -> list[str]:
    """Run BookKeeper's ``bookkeeper shell`` (BookieShell); its report lines (it reports through
    its logger). Fails the test when it exits non-zero."""
    argv = harness.java_argv(classpath, "org.apache.bookkeeper.bookie.BookieShell", heap="128m")
    # The shell reports at INFO; this setting must come after the harness's own level.
    argv.insert(argv.index("-cp"), "-Dorg.slf4j.simpleLogger.defaultLogLevel=info")
    argv += ["-conf", str(conf), *args]
    done = subprocess.run(
        argv, capture_output=True, text=True, timeout=SHELL_TIMEOUT_S, check=False
    )
    output = (done.stdout + done.stderr).splitlines()
    assert done.returncode == 0, "\n".join(output[-40:])
    return output


def shell_conf(tmp_path: Path, uri: str, v2: bool = True) -> Path:
    """A shell configuration for the cluster at ``uri``: its client over V2 (as Pulsar runs
    it), or with ``v2=False`` BookKeeper's default, V3."""
    conf = tmp_path / ("shell.conf" if v2 else "shell-v3.conf")
    protocol = "useV2WireProtocol=true\n" if v2 else ""
    conf.write_text(f"metadataServiceUri={uri}\n{protocol}zkTimeout=10000\n")
    return conf


def test_bookkeepers_shell_sees_and_uses_a_pybkx_cluster(
    java_classpath: str, cluster: Sandbox, tmp_path: Path
) -> None:
    conf = shell_conf(tmp_path, cluster.metadata_uri)
    listed = bookie_shell(java_classpath, conf, "listbookies", "-rw")
    found = {m.group(1) for line in listed if (m := re.search(r"BookieID:(\S+?),", line))}
    assert found == set(cluster.bookie_addresses)
    assert not [
        line
        for line in bookie_shell(java_classpath, conf, "listbookies", "-ro")
        if "BookieID:" in line
    ]

    with pybkx.BookKeeper(cluster.metadata_uri, zkTimeout=4000) as bk:
        lh = bk.create_ledger(3, 2, 2, password=b"")
        lh.append_many([f"pybkx-{i}".encode() for i in range(5)])
        lh.close()
    ledger = lh.ledger_id
    ledgers = bookie_shell(java_classpath, conf, "listledgers")
    assert any(f"ledgerID: {ledger}" in line for line in ledgers)
    metadata = "\n".join(bookie_shell(java_classpath, conf, "ledgermetadata", "-l", str(ledger)))
    assert "state=CLOSED" in metadata and "lastEntryId=4" in metadata
    read = bookie_shell(java_classpath, conf, "readledger", "-l", str(ledger), "-m")
    assert [line for line in read if line.startswith("pybkx-")] == [f"pybkx-{i}" for i in range(5)]
    tested = bookie_shell(
        java_classpath, conf, "simpletest", "-e", "3", "-w", "2", "-a", "2", "-n", "50"
    )
    assert any("50 entries written to ledger" in line for line in tested)
    cookie = "\n".join(
        bookie_shell(java_classpath, conf, "cookie_get", cluster.bookie_addresses[0])
    )
    assert f'bookieHost: "{cluster.bookie_addresses[0]}"' in cookie

    # With BookKeeper's default (V3) client: bookieinfo asks each bookie GET_BOOKIE_INFO.
    v3 = shell_conf(tmp_path, cluster.metadata_uri, v2=False)
    info = "\n".join(bookie_shell(java_classpath, v3, "bookieinfo"))
    assert all(bookie in info for bookie in cluster.bookie_addresses), info
    assert "Free:" in info and "Total:" in info, info
    read = bookie_shell(java_classpath, v3, "readledger", "-l", str(ledger), "-m")
    assert [line for line in read if line.startswith("pybkx-")] == [f"pybkx-{i}" for i in range(5)]

    # And pybkx's shell reads what Java's simpletest left (it deletes its ledger) and its own.
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pybkx",
            "shell",
            "listledgers",
            "--uri",
            cluster.metadata_uri,
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert ledger in [row["ledger"] for row in json.loads(run.stdout)]


def scrape_families(url: str) -> dict[str, tuple[str, set[str]]]:
    """Family -> (type, label names of its samples, quantile/le/success excluded)."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=30) as response:
        text = response.read().decode()
    out: dict[str, tuple[str, set[str]]] = {}
    for family in text_string_to_metric_families(text):
        labels = {k for s in family.samples for k in s.labels} - {"quantile", "le", "success"}
        out[family.name] = (family.type, labels)
    return out


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=30) as response:
        return json.loads(response.read())


@dataclass(frozen=True)
class JavaAdmin:
    """A Java bookie alone under its own ZooKeeper root: its admin URL and its cluster's URI."""

    url: str
    metadata_uri: str


@pytest.fixture
def java_admin(java_classpath: str, zookeeper: str, tmp_path: Path) -> Iterator[JavaAdmin]:
    """A Java bookie with BookKeeper's Prometheus provider and HTTP admin server.

    Its root is its own: the session's other Java bookies live under ``/ledgers``, and a ledger
    written to exercise this bookie must not land on one of them.
    """
    port = harness.free_port()
    root = harness.fresh_zookeeper_root(zookeeper, "ops-java")
    process, _address = harness.start_java_bookie(
        java_classpath,
        zookeeper + root,
        tmp_path,
        "statsProviderClass=org.apache.bookkeeper.stats.prometheus.PrometheusMetricsProvider",
        "httpServerEnabled=true",
        f"httpServerPort={port}",
        "httpServerClass=org.apache.bookkeeper.http.vertx.VertxHttpServer",
    )
    try:
        url = f"http://127.0.0.1:{port}"
        harness.wait_until(process, lambda: _answers(url), "serving its admin API")
        yield JavaAdmin(url, f"zk+hierarchical://{zookeeper}{root}/ledgers")
    finally:
        process.stop()


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/heartbeat", timeout=2):
            return True
    except (urllib.error.URLError, OSError):
        return False


def exercise(uri: str, ensemble: int) -> str:
    """Add, read and batch-read a ledger of the cluster at ``uri`` (metrics BookKeeper
    registers only once a thread records them appear then); its id."""
    with pybkx.BookKeeper(uri, zkTimeout=4000) as bk:
        lh = bk.create_ledger(ensemble, ensemble, ensemble, custom_metadata={"k": b"v"})
        lh.append_many([b"x"] * 3)
        lh.close()
        rh = bk.open_ledger(lh.ledger_id)
        rh.read(0, 2)
        rh.batch_read(0, 3, 1 << 20)
        return str(lh.ledger_id)


def test_metric_names_types_and_labels_match_the_java_bookie(
    java_admin: JavaAdmin, cluster: Sandbox
) -> None:
    exercise(java_admin.metadata_uri, 1)
    exercise(cluster.metadata_uri, 3)
    java = scrape_families(java_admin.url)
    ours = scrape_families(cluster.admin_urls[0])
    bookkeeper_named = {
        name: kind_labels
        for name, kind_labels in ours.items()
        if name.startswith(("bookkeeper_server_", "bookie_")) and not NOT_IN_JAVA.match(name)
    }
    assert len(bookkeeper_named) >= 40, sorted(bookkeeper_named)
    for name, (kind, labels) in sorted(bookkeeper_named.items()):
        assert name in java, f"{name}: the Java bookie has no such metric"
        java_kind, java_labels = java[name]
        assert kind == java_kind, f"{name}: {kind} here, {java_kind} on the Java bookie"
        assert labels == java_labels - JAVA_ONLY_LABELS, (name, labels, java_labels)


def test_admin_json_shapes_match_the_java_bookie(java_admin: JavaAdmin, cluster: Sandbox) -> None:
    java_url = java_admin.url
    ours = cluster.admin_urls[0]
    for path in (
        "/api/v1/bookie/state",
        "/api/v1/bookie/state/readonly",
        "/api/v1/bookie/info",
        "/api/v1/bookie/gc",
        "/api/v1/bookie/list_disk_file",
    ):
        java_keys = set(get_json(java_url + path))
        assert java_keys <= set(get_json(ours + path)), path
    java_gc = get_json(java_url + "/api/v1/bookie/gc_details")[0]
    assert set(java_gc) <= set(get_json(ours + "/api/v1/bookie/gc_details")[0])
    java_marks = get_json(java_url + "/api/v1/bookie/last_log_mark")
    our_marks = get_json(ours + "/api/v1/bookie/last_log_mark")
    pattern = re.compile(r"LastLogMark: Journal Id - \d+\([0-9a-f]+\.txn\)")
    assert all(pattern.fullmatch(k) for k in [*java_marks, *our_marks])
    assert all(v.startswith("Pos - ") for v in [*java_marks.values(), *our_marks.values()])

    # The same ledger metadata fields for a ledger of each cluster (pybkx's client writes the
    # Java bookie's too).
    ids = [exercise(cluster.metadata_uri, 3), exercise(java_admin.metadata_uri, 1)]
    our_md = get_json(f"{ours}/api/v1/ledger/metadata?ledger_id={ids[0]}")[ids[0]]
    java_md = get_json(f"{java_url}/api/v1/ledger/metadata?ledger_id={ids[1]}")[ids[1]]
    assert set(java_md) == set(our_md)
    assert java_md["customMetadata"] == our_md["customMetadata"] == {"k": "dg=="}
    java_read = get_json(f"{java_url}/api/v1/ledger/read?ledger_id={ids[1]}")
    our_read = get_json(f"{ours}/api/v1/ledger/read?ledger_id={ids[0]}")
    assert java_read == our_read == {"0": "x", "1": "x", "2": "x"}
