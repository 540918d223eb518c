"""A bookie's ``/metrics``: parsed with the Prometheus text parser, BookKeeper's names, types and
``success`` labels, counters that move as adds and reads are done, where it is served
(admin server, ``prometheusStatsHttpPort``, nowhere), and the client's metrics in the process's
registry. Owns these checks; the clusters come from ``conftest``."""

from __future__ import annotations

import math
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from admin_helpers import http
from prometheus_client import REGISTRY, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from support.ports import accepts_tcp, free_port
from support.wait import wait_until

import pybkx
from pybkx.tools.sandbox import Sandbox

Series = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(url: str) -> tuple[dict[str, str], Series]:
    """Family name -> type, and every sample, parsed by prometheus_client's parser."""
    reply = http("GET", f"{url}/metrics")
    assert reply.status == 200, reply.text
    assert reply.content_type.startswith("text/plain; version=0.0.4"), reply.content_type
    types: dict[str, str] = {}
    samples: Series = {}
    for family in text_string_to_metric_families(reply.text):
        types[family.name] = family.type
        for s in family.samples:
            samples[(s.name, frozenset(s.labels.items()))] = s.value
    return types, samples


def value(samples: Series, name: str, **labels: str) -> float:
    wanted = set(labels.items())
    return sum(v for (n, lab), v in samples.items() if n == name and wanted <= lab)


def test_metrics_parse_with_bookkeepers_names_types_and_labels(cluster: Sandbox) -> None:
    types, samples = scrape(cluster.admin_urls[0])
    expected = {
        "bookkeeper_server_ADD_ENTRY_REQUEST": "summary",
        "bookkeeper_server_ADD_ENTRY": "summary",
        "bookkeeper_server_READ_ENTRY_REQUEST": "summary",
        "bookkeeper_server_READ_ENTRY": "summary",
        "bookkeeper_server_ADD_ENTRY_REJECTED": "counter",
        "bookkeeper_server_ADD_ENTRY_IN_PROGRESS": "gauge",
        "bookkeeper_server_CHANNEL_WRITE": "summary",
        "bookkeeper_server_BATCH_READ_ENTRY_REQUEST": "histogram",
        "bookkeeper_server_BATCH_READ_ENTRY_RESPONSE_SIZE": "histogram",
        "bookie_journal_JOURNAL_ADD_ENTRY": "summary",
        "bookie_journal_JOURNAL_SYNC": "summary",
        "bookie_journal_JOURNAL_QUEUE_LATENCY": "summary",
        "bookie_journal_JOURNAL_FORCE_WRITE_BATCH_ENTRIES": "summary",
        "bookie_journal_JOURNAL_WRITE_BYTES": "counter",
        "bookie_journal_JOURNAL_QUEUE_SIZE": "counter",
        "bookie_BOOKIE_ADD_ENTRY": "summary",
        "bookie_BOOKIE_READ_ENTRY": "summary",
        "bookie_WRITE_BYTES": "counter",
        "bookie_READ_BYTES": "counter",
        "bookie_SERVER_STATUS": "gauge",
        "bookie_JOURNAL_DIRS": "gauge",
        "bookie_ledger_num_dirs": "gauge",
        "bookie_ledger_writable_dirs": "gauge",
        "bookie_gc_ACTIVE_LEDGER_TOTAL": "gauge",
    }
    for name, kind in expected.items():
        assert types.get(name) == kind, (name, types.get(name))
    # A latency summary: quantiles and count/sum for each outcome, as BookKeeper writes them.
    for success in ("true", "false"):
        for q in ("0.5", "0.99", "1.0"):
            key = (
                "bookkeeper_server_ADD_ENTRY",
                frozenset({("success", success), ("quantile", q)}),
            )
            assert key in samples
        assert ("bookkeeper_server_ADD_ENTRY_count", frozenset({("success", success)})) in samples
    # Journal metrics carry the journal's index.
    assert value(samples, "bookie_journal_JOURNAL_SYNC_count", journalIndex="0") >= 0
    assert any(
        ("journalIndex", "0") in lab for (n, lab) in samples if n.startswith("bookie_journal")
    )
    assert value(samples, "bookie_SERVER_STATUS") == 1
    # The process's own registry follows (process and Python metrics).
    assert "process_cpu_seconds" in types


def test_counters_move_as_entries_are_added_and_read(cluster: Sandbox) -> None:
    urls = cluster.admin_urls
    before = [scrape(u)[1] for u in urls]
    n = 200
    payload = b"x" * 100
    with pybkx.BookKeeper(cluster.metadata_uri) as bk:
        lh = bk.create_ledger(3, 3, 2, password=b"pw")
        lh.append_many([payload] * n)
        lh.close()
        rh = bk.open_ledger(lh.ledger_id, b"pw")
        assert len(rh.batch_read(0, n, 1 << 20)) == n  # E == Qw: batch reads
        assert len(rh.read(0, 9)) == 10
    # With Qa = 2 an add completes before the third bookie's response is written, and a bookie
    # counts a request once its response is written: wait until all three counted them all.
    name = "bookkeeper_server_ADD_ENTRY_REQUEST_count"

    def counted_them_all(after: list[Series]) -> bool:
        return all(
            value(a, name, success="true") - value(b, name, success="true") >= n
            for a, b in zip(after, before, strict=True)
        )

    after = wait_until(
        lambda: [scrape(u)[1] for u in urls],
        f"every bookie counted the {n} adds",
        timeout_s=10,
        accept=counted_them_all,
    )
    for old, new in zip(before, after, strict=True):

        def moved(name: str, old: Series = old, new: Series = new, **labels: str) -> float:
            return value(new, name, **labels) - value(old, name, **labels)

        # Every bookie of the ensemble received every entry (Qw = E = 3).
        assert moved("bookkeeper_server_ADD_ENTRY_REQUEST_count", success="true") == n
        assert moved("bookkeeper_server_ADD_ENTRY_count", success="true") == n
        assert moved("bookie_journal_JOURNAL_ADD_ENTRY_count", success="true") == n
        assert moved("bookie_BOOKIE_ADD_ENTRY_count", success="true") == n
        assert moved("bookie_journal_JOURNAL_WRITE_BYTES_total") >= n * len(payload)
        assert moved("bookie_WRITE_BYTES_total") >= n * len(payload)
        assert moved("bookkeeper_server_ADD_ENTRY_REQUEST_sum", success="true") > 0
        assert moved("bookie_journal_JOURNAL_SYNC_count", success="true") >= 1

    # Reads went to some bookies: count them across the cluster.
    def total(name: str, **labels: str) -> float:
        return sum(
            value(a, name, **labels) - value(b, name, **labels)
            for a, b in zip(after, before, strict=True)
        )

    assert total("bookkeeper_server_BATCH_READ_ENTRY_REQUEST_count") >= 1
    assert total("bookkeeper_server_BATCH_READ_ENTRY_RESPONSE_SIZE_sum") >= n * len(payload)
    assert total("bookkeeper_server_READ_ENTRY_REQUEST_count", success="true") >= 1 + 10
    assert total("bookie_READ_BYTES_total") >= (n + 10) * len(payload)


def test_a_refused_add_counts_as_failed_and_read_only_shows_in_server_status(
    cluster: Sandbox,
) -> None:
    url = cluster.admin_urls[1]
    _, before = scrape(url)
    assert http("PUT", f"{url}/api/v1/bookie/state/readonly", b'{"readOnly": true}').status == 200
    try:
        _, during = scrape(url)
        assert value(during, "bookie_SERVER_STATUS") == 0
        from support.v2_wire import EREADONLY, Conn, add_request

        port = cluster.bookie_addresses[1].rsplit(":", 1)[1]
        with Conn(int(port)) as conn:
            assert conn.call(add_request(987654, 0, b"refused")).rc == EREADONLY
        failed = "bookkeeper_server_ADD_ENTRY_REQUEST_count"
        # The bookie times a request once its response is written, a moment after the client
        # may have read it: wait for the count (a synchronisation point, not a timing check).
        after = wait_until(
            lambda: scrape(url)[1],
            "the refused add counted",
            timeout_s=10,
            accept=lambda after: (
                value(after, failed, success="false") != value(before, failed, success="false")
            ),
        )
        moved = value(after, failed, success="false") - value(before, failed, success="false")
        assert moved == 1
    finally:
        assert (
            http("PUT", f"{url}/api/v1/bookie/state/readonly", b'{"readOnly": false}').status == 200
        )
    cluster.wait_registered([1])


def test_latency_quantiles_appear_once_a_window_completes(tmp_path: Path) -> None:
    with Sandbox(
        1, directory=tmp_path, conf={"prometheusStatsLatencyRolloverSeconds": 1}
    ) as sandbox:
        url = sandbox.admin_urls[0]
        scrape(url)  # the first window starts
        with pybkx.BookKeeper(sandbox.metadata_uri) as bk:
            lh = bk.create_ledger(1, 1, 1)
            lh.append_many([b"q"] * 50)
            lh.close()
        median = (
            "bookkeeper_server_ADD_ENTRY",
            frozenset({("success", "true"), ("quantile", "0.5")}),
        )
        # Quantiles are published when a window (a second here) rolls over.
        samples = wait_until(
            lambda: scrape(url)[1],
            "the adds' latency window completed",
            timeout_s=10,
            accept=lambda samples: not math.isnan(samples.get(median, math.nan)),
        )
    p50 = samples[median]
    p100 = samples[
        ("bookkeeper_server_ADD_ENTRY", frozenset({("success", "true"), ("quantile", "1.0")}))
    ]
    assert not math.isnan(p50) and 0 < p50 <= p100


@pytest.fixture
def standalone(tmp_path: Path) -> Iterator[object]:
    """``standalone(**conf)``: a standalone ``pybkx bookie`` process; stopped at teardown."""
    started: list[subprocess.Popen[bytes]] = []

    def start(**conf: object) -> tuple[int, Path]:
        port = free_port()
        settings = {
            "bookiePort": port,
            "listeningInterface": "127.0.0.1",
            "journalDirectories": tmp_path / f"j{port}",
            "ledgerDirectories": tmp_path / f"l{port}",
            **conf,
        }
        path = tmp_path / f"b{port}.conf"
        path.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
        log = tmp_path / f"b{port}.log"
        with log.open("wb") as out:
            started.append(
                subprocess.Popen(
                    [sys.executable, "-m", "pybkx", "bookie", "--conf", str(path)],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                )
            )
        process = started[-1]

        def serving() -> bool:
            assert process.poll() is None, log.read_text()
            return "bookie serving bookie_id=" in log.read_text()

        # The process's own line, logged once its HTTP services listen (the core's earlier
        # "bookie serving on ..." line comes before them: waiting for it raced the servers).
        wait_until(serving, f"the bookie serving (log {log})", timeout_s=30)
        return port, log

    yield start
    for process in started:
        process.terminate()
        process.wait(30)


def test_metrics_on_prometheus_port_when_the_admin_server_is_off(standalone: object) -> None:
    port = free_port()
    standalone(  # type: ignore[operator]
        statsProviderClass="org.apache.bookkeeper.stats.prometheus.PrometheusMetricsProvider",
        prometheusStatsHttpPort=port,
        prometheusStatsHttpAddress="127.0.0.1",
    )
    types, _ = scrape(f"http://127.0.0.1:{port}")
    assert types["bookkeeper_server_ADD_ENTRY_REQUEST"] == "summary"
    assert http("GET", f"http://127.0.0.1:{port}/api/v1/bookie/info").status == 404


def test_no_metrics_endpoint_without_a_stats_provider(standalone: object) -> None:
    port = free_port()
    standalone(prometheusStatsHttpPort=port)  # type: ignore[operator]
    assert not accepts_tcp(port)  # BookKeeper's NullStatsProvider: no endpoint


def test_the_admin_server_answers_500_for_metrics_without_a_stats_provider(
    standalone: object,
) -> None:
    port = free_port()
    standalone(httpServerEnabled="true", httpServerPort=port, httpServerHost="127.0.0.1")  # type: ignore[operator]
    reply = http("GET", f"http://127.0.0.1:{port}/metrics")
    assert reply.status == 500
    assert "statsProviderClass" in reply.json()["error"]
    assert http("GET", f"http://127.0.0.1:{port}/heartbeat").text == "OK\n"


def test_enable_statistics_false_records_no_latency(standalone: object) -> None:
    port = free_port()
    bookie_port, _ = standalone(  # type: ignore[operator]
        statsProviderClass="org.apache.bookkeeper.stats.prometheus.PrometheusMetricsProvider",
        enableStatistics="false",
        httpServerEnabled="true",
        httpServerHost="127.0.0.1",
        httpServerPort=port,
    )
    from support.v2_wire import EOK, Conn, add_request

    with Conn(bookie_port) as conn:
        assert conn.call(add_request(5, 0, b"x")).rc == EOK
    assert http("GET", f"http://127.0.0.1:{port}/metrics").status == 500  # metrics are off


def test_the_client_exports_to_the_process_registry(cluster: Sandbox) -> None:
    def sample(name: str, **labels: str) -> float:
        text = generate_latest(REGISTRY).decode()
        found = 0.0
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                if s.name == name and set(labels.items()) <= set(s.labels.items()):
                    found += s.value
        return found

    with pybkx.BookKeeper(cluster.metadata_uri) as bk:
        adds = sample("bookkeeper_client_ADD_ENTRY_count", success="true")
        reads = sample("bookkeeper_client_READ_ENTRY_count", success="true")
        creates = sample("bookkeeper_client_LEDGER_CREATE_count", success="true")
        lh = bk.create_ledger(3, 2, 2)
        lh.append_many([b"c"] * 25)
        lh.read(0, 24)
        lh.close()
        assert sample("bookkeeper_client_ADD_ENTRY_count", success="true") - adds == 25
        assert sample("bookkeeper_client_READ_ENTRY_count", success="true") - reads >= 1
        assert sample("bookkeeper_client_LEDGER_CREATE_count", success="true") - creates == 1
        assert sample("bookkeeper_client_ADD_ENTRY_bucket", success="true", le="+Inf") >= 25
        assert sample("bookkeeper_client_NUM_PENDING_ADD") == 0
