"""The ``pybkx`` Spark source with real Spark (local[2]) and real bookie processes: every entry
exactly once and byte-identical, large ledgers split into partitions, the ``ledgers`` and
``entries`` options narrowing the read (fewer partitions and fewer bytes read from the bookies),
filters exact for every scan of a DataFrame, open ledgers read to their LAC without fencing the
writer, DataFrames written into new ledgers and read back, bad options failing the query with a
message naming the option or ledger; on the embedded store and on ZooKeeper."""

from __future__ import annotations

import hashlib
import os
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.ports import free_port
from support.wait import wait_until

pyspark = pytest.importorskip("pyspark", reason="the spark extra is not installed")

from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from pybkx.client import BookKeeper  # noqa: E402
from pybkx.spark import spark_session  # noqa: E402
from pybkx.spark.options import (  # noqa: E402
    NAME_KEY,
    SourceOptions,
    parse_entries,
    parse_ledgers,
)
from pybkx.spark.reader import resolved  # noqa: E402
from pybkx.tools.sandbox import Sandbox  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def payload(ledger_id: int, entry_id: int) -> bytes:
    return hashlib.sha256(f"{ledger_id}/{entry_id}".encode()).digest()[: 1 + entry_id % 32]


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    session = spark_session(
        "pybkx-tests", master="local[2]", **{"spark.sql.shuffle.partitions": "2"}
    )
    yield session
    session.stop()


@pytest.fixture(scope="module", params=["embedded", "zookeeper"])
def cluster(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Sandbox, dict[int, int]]]:
    """Three bookies holding a closed ledger of 2,500 entries, one of 700 and an open one of 300
    (its writer alive); ledger id -> entries readable."""
    zk_uri = None
    if request.param == "zookeeper":
        server = request.getfixturevalue("zookeeper_server")
        zk_uri = f"zk+hierarchical://{server}/spark-{os.getpid()}-{time.time_ns()}/ledgers"
    directory = tmp_path_factory.mktemp("spark") / "sandbox"
    with (
        Sandbox(3, directory=directory, zk_uri=zk_uri, conf={"zkTimeout": 4000}) as sandbox,
        BookKeeper(sandbox.metadata_uri, zkTimeout=4000) as bk,
    ):
        sizes: dict[int, int] = {}
        for n in (2500, 700):
            lh = bk.create_ledger(3, 2, 2, password=b"pw")
            lh.append_many([payload(lh.ledger_id, e) for e in range(n)])
            lh.close()
            sizes[lh.ledger_id] = n
        writer = bk.create_ledger(3, 2, 2, password=b"pw")
        writer.append_many([payload(writer.ledger_id, e) for e in range(300)])
        # Entry 300 carries LAC 299 to the bookies: readers see entries 0..299.
        writer.append(payload(writer.ledger_id, 300))
        sizes[writer.ledger_id] = 300
        yield sandbox, sizes
        # The open ledger was read without fencing: its writer still appends.
        writer.append(payload(writer.ledger_id, 301))
        writer.close()


def read(spark: Any, uri: str, **options: str) -> Any:
    reader = spark.read.format("pybkx").option("metadataServiceUri", uri).option("password", "pw")
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def bytes_read(sandbox: Sandbox) -> float:
    """Entry bytes the bookies have read so far (from their /metrics)."""
    total = 0.0
    for url in sandbox.admin_urls:
        with urllib.request.urlopen(f"{url}/metrics", timeout=30) as response:
            text = response.read().decode()
        for family in text_string_to_metric_families(text):
            if family.name == "bookie_READ_BYTES":
                total += sum(s.value for s in family.samples)
    return total


def test_every_entry_once_and_byte_identical(
    spark: Any, cluster: tuple[Sandbox, dict[int, int]]
) -> None:
    sandbox, sizes = cluster
    ids = ",".join(str(i) for i in sizes)
    # Batches of 128 with 3 read ahead: a partition is many batches, several in flight.
    df = read(
        spark,
        sandbox.metadata_uri,
        ledgers=ids,
        entriesPerPartition="1000",
        entriesPerBatch="128",
        readAhead="3",
    )
    # 2,500 entries in three partitions, 700 and 300 in one each.
    assert df.rdd.getNumPartitions() == 5
    rows = df.collect()
    got = sorted((r.ledger_id, r.entry_id, bytes(r.payload)) for r in rows)
    want = sorted((lid, e, payload(lid, e)) for lid, n in sizes.items() for e in range(n))
    assert got == want


def test_options_narrow_the_read_and_filters_stay_exact(
    spark: Any, cluster: tuple[Sandbox, dict[int, int]]
) -> None:
    """``ledgers`` and ``entries`` narrow what is read (fewer partitions, fewer bytes from the
    bookies); filters are evaluated by Spark on the rows read (never pushed down, see
    test_scans_of_one_dataframe_do_not_share_pushed_filters)."""
    sandbox, sizes = cluster
    big = next(lid for lid, n in sizes.items() if n == 2500)
    df = read(spark, sandbox.metadata_uri, entriesPerPartition="1000")
    everything = bytes_read(sandbox)
    assert df.count() == sum(sizes.values())
    everything = bytes_read(sandbox) - everything
    filtered = df.where(f"ledger_id = {big} and entry_id >= 2200")
    assert sorted(r.entry_id for r in filtered.collect()) == list(range(2200, 2500))
    narrow = read(
        spark, sandbox.metadata_uri, ledgers=str(big), entries="2200-", entriesPerPartition="1000"
    )
    assert narrow.rdd.getNumPartitions() == 1
    before = bytes_read(sandbox)
    rows = narrow.collect()
    assert sorted(r.entry_id for r in rows) == list(range(2200, 2500))
    assert all(bytes(r.payload) == payload(big, r.entry_id) for r in rows)
    assert bytes_read(sandbox) - before < everything / 5
    # A bounded range past a ledger's end reads what exists.
    ids = ",".join(str(i) for i in sizes)
    counts = (
        read(spark, sandbox.metadata_uri, ledgers=ids, entries="650-749")
        .groupBy("ledger_id")
        .count()
    )
    assert {r.ledger_id: r["count"] for r in counts.collect()} == {
        lid: min(n, 750) - 650 for lid, n in sizes.items() if n > 650
    }
    # Nothing planned (past every ledger's end): PySpark reads a placeholder partition.
    assert read(spark, sandbox.metadata_uri, ledgers=ids, entries="100000-").count() == 0


def test_written_dataframes_read_back(spark: Any, cluster: tuple[Sandbox, dict[int, int]]) -> None:
    sandbox, _ = cluster
    data = [(f"row-{i}".encode(),) for i in range(1000)]
    # Three slices of consecutive rows: each task writes its slice in order.
    df = spark.sparkContext.parallelize(data, 3).toDF("payload binary")
    (
        df.write.format("pybkx")
        .option("metadataServiceUri", sandbox.metadata_uri)
        .option("password", "pw")
        .option("name", "nightly")
        .mode("append")
        .save()
    )
    with BookKeeper(sandbox.metadata_uri, zkTimeout=4000) as bk:
        written = [
            lid
            for lid in bk.list_ledgers()
            if bk.store.read_ledger_metadata(lid).value.custom_metadata.get(NAME_KEY) == b"nightly"
        ]
    assert len(written) == 3
    back = read(spark, sandbox.metadata_uri, ledgers=",".join(map(str, written)))
    assert sorted(bytes(r.payload) for r in back.collect()) == sorted(p for (p,) in data)
    # Each task's rows keep their order in its ledger.
    for lid in written:
        ordered = read(spark, sandbox.metadata_uri, ledgers=str(lid)).orderBy("entry_id").collect()
        numbers = [int(bytes(r.payload).split(b"-")[1]) for r in ordered]
        assert numbers == list(range(numbers[0], numbers[0] + len(numbers)))


def test_bad_options_name_what_is_wrong(
    spark: Any, cluster: tuple[Sandbox, dict[int, int]]
) -> None:
    sandbox, sizes = cluster
    with pytest.raises(Exception, match="ledger 987654 does not exist"):
        read(spark, sandbox.metadata_uri, ledgers="987654").count()
    some = next(iter(sizes))
    with pytest.raises(Exception, match=f"ledger {some}: wrong password"):
        spark.read.format("pybkx").option("metadataServiceUri", sandbox.metadata_uri).option(
            "ledgers", str(some)
        ).option("password", "nope").load().count()
    with pytest.raises(Exception, match="unknown option"):
        read(spark, sandbox.metadata_uri, ledgerz="1").count()


def test_options_are_checked_before_any_spark_work() -> None:
    assert parse_ledgers("12, 13,20-22") == [12, 13, 20, 21, 22]
    for bad in ("", "x", "5-3", "-1"):
        with pytest.raises(ValueError, match="ledgers"):
            parse_ledgers(bad)
    assert parse_entries("7") == (7, 7)
    assert parse_entries("10-20") == (10, 20)
    assert parse_entries("10-") == (10, 2**63 - 1)
    for bad in ("", "x", "5-3", "-1", "a-"):
        with pytest.raises(ValueError, match="entries"):
            parse_entries(bad)
    assert SourceOptions.parse({"ENTRIES": "3-4"}).entries == (3, 4)
    with pytest.raises(ValueError, match="E >= Qw >= Qa"):
        SourceOptions.parse({"ensembleSize": "2", "writeQuorumSize": "3"})
    assert SourceOptions.parse({"readAhead": "0"}).read_ahead == 0
    for bad in ({"readAhead": "-1"}, {"entriesPerBatch": str((1 << 20) + 1)}):
        with pytest.raises(ValueError, match="must be"):
            SourceOptions.parse(bad)
    options = SourceOptions.parse({})
    assert (options.entries_per_partition, options.read_ahead) == (1_000_000, 2)
    with pytest.raises(ValueError, match="embedded"):
        resolved(options, "embedded:///tmp/x", "spark://host:7077")
    assert resolved(options, "embedded:///tmp/x", "local[2]").uri == "embedded:///tmp/x"
    assert resolved(options, "zk+hierarchical://h:2181/ledgers", "spark://h:7077").uri


def test_a_stream_tails_ledgers_exactly_once_across_restarts_and_a_killed_bookie(
    spark: Any, tmp_path_factory: pytest.TempPathFactory
) -> None:
    directory = tmp_path_factory.mktemp("stream")
    with (
        Sandbox(4, directory=directory / "sandbox", conf={"zkTimeout": 4000}) as sandbox,
        BookKeeper(sandbox.metadata_uri, zkTimeout=4000, addEntryTimeoutSec=2) as bk,
    ):
        tagged = {NAME_KEY: b"events-a"}
        first = bk.create_ledger(3, 2, 2, password=b"pw", custom_metadata=tagged)
        first.append_many([payload(first.ledger_id, e) for e in range(400)])
        first.append(payload(first.ledger_id, 400))  # carries LAC 399
        other = bk.create_ledger(3, 2, 2, password=b"pw")  # no name: not in the stream
        other.append_many([b"x"] * 10)
        other.close()
        out, checkpoint = directory / "out", directory / "checkpoint"

        def run_once() -> None:
            query = (
                spark.readStream.format("pybkx")
                .option("metadataServiceUri", sandbox.metadata_uri)
                .option("password", "pw")
                .option("namePrefix", "events-")
                .option("entriesPerPartition", "150")
                .load()
                .writeStream.format("parquet")
                .option("path", str(out))
                .option("checkpointLocation", str(checkpoint))
                .trigger(availableNow=True)
                .start()
            )
            query.awaitTermination(120)
            assert query.exception() is None

        run_once()
        # More entries, a new ledger joining the stream, a bookie killed, then a restart.
        first.append_many([payload(first.ledger_id, e) for e in range(401, 700)])
        first.append(payload(first.ledger_id, 700))  # carries LAC 699
        second = bk.create_ledger(3, 2, 2, password=b"pw", custom_metadata={NAME_KEY: b"events-b"})
        second.append_many([payload(second.ledger_id, e) for e in range(50)])
        second.close()
        # Every entry keeps a live copy: Qw = 2 and one bookie of four is gone.
        victim = first.metadata.last_ensemble[0]
        sandbox.kill_bookie(sandbox.bookie_addresses.index(bk.address_of(victim)))
        run_once()
        run_once()  # nothing new: nothing read twice
        rows = spark.read.parquet(str(out)).collect()
        got = sorted((r.ledger_id, r.entry_id, bytes(r.payload)) for r in rows)
        want = sorted(
            [(first.ledger_id, e, payload(first.ledger_id, e)) for e in range(700)]
            + [(second.ledger_id, e, payload(second.ledger_id, e)) for e in range(50)]
        )
        assert got == want


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Spark standalone cluster on loopback: a master and two workers (one core each), from
    the pyspark package's own scripts; its master URL."""
    import subprocess
    import sys

    home = Path(pyspark.__file__).parent
    spark_class = str(home / "bin" / "spark-class")
    logs = tmp_path_factory.mktemp("standalone")
    port = free_port()
    env = {
        **os.environ,
        "SPARK_HOME": str(home),
        "PYSPARK_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",
    }
    master_url = f"spark://127.0.0.1:{port}"
    procs = [
        subprocess.Popen(
            [
                spark_class,
                "org.apache.spark.deploy.master.Master",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--webui-port",
                str(free_port()),
            ],
            env=env,
            stdout=(logs / "master.log").open("wb"),
            stderr=subprocess.STDOUT,
        )
    ]
    try:
        for n in range(2):
            procs.append(
                subprocess.Popen(
                    [
                        spark_class,
                        "org.apache.spark.deploy.worker.Worker",
                        master_url,
                        "--host",
                        "127.0.0.1",
                        "--cores",
                        "1",
                        "--memory",
                        "1g",
                        "--webui-port",
                        str(free_port()),
                        "--work-dir",
                        str(logs / f"work-{n}"),
                    ],
                    env=env,
                    stdout=(logs / f"worker-{n}.log").open("wb"),
                    stderr=subprocess.STDOUT,
                )
            )
        wait_until(
            lambda: (logs / "master.log").read_text(errors="replace"),
            "the standalone Spark cluster's two workers registered (master.log)",
            timeout_s=120,
            interval_s=0.5,
            accept=lambda text: text.count("Registering worker") >= 2,
        )
        yield master_url
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(30)


def test_a_standalone_cluster_reads_through_zookeeper(
    standalone: str, zookeeper_server: str, tmp_path: Path
) -> None:
    import subprocess
    import sys

    uri = f"zk+hierarchical://{zookeeper_server}/standalone-{time.time_ns()}/ledgers"
    with (
        Sandbox(3, directory=tmp_path / "sandbox", zk_uri=uri, conf={"zkTimeout": 4000}) as sb,
        BookKeeper(sb.metadata_uri, zkTimeout=4000) as bk,
    ):
        lh = bk.create_ledger(3, 2, 2, password=b"pw")
        lh.append_many([payload(lh.ledger_id, e) for e in range(3000)])
        lh.close()
        # A driver of its own (a process may hold one Spark session): it counts through the
        # cluster's executors, then asks the embedded store, which must be refused.
        script = f"""
import sys
from pybkx.spark import spark_session
spark = spark_session("standalone", master={standalone!r})
df = (spark.read.format("pybkx").option("metadataServiceUri", {uri!r})
      .option("password", "pw").option("entriesPerPartition", "1000").load())
print("COUNT", df.count(), df.rdd.getNumPartitions())
try:
    spark.read.format("pybkx").option("metadataServiceUri", "embedded:///tmp/nowhere").load().count()
except Exception as exc:
    print("REFUSED", "embedded" in str(exc) and "other hosts" in str(exc))
spark.stop()
"""
        run = subprocess.run(
            [sys.executable, "-c", script],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert "COUNT 3000 3" in run.stdout, run.stdout[-2000:] + run.stderr[-3000:]
        assert "REFUSED True" in run.stdout, run.stdout[-2000:]


def test_scans_of_one_dataframe_do_not_share_pushed_filters(
    spark: Any, cluster: tuple[Sandbox, dict[int, int]]
) -> None:
    """Spark keeps the read plan of a Python source on the loaded DataFrame's source object and
    reuses it for the DataFrame's other scans (PySpark 4.1 to 4.3): a plan narrowed by one
    scan's filters must never answer another scan. Every count here is checked against the
    rows Spark itself filters from a full read."""
    sandbox, sizes = cluster
    total = sum(sizes.values())
    big = next(lid for lid, n in sizes.items() if n == 2500)
    ids = ",".join(str(i) for i in sizes)
    df = read(spark, sandbox.metadata_uri, ledgers=ids, entriesPerPartition="1000")
    assert df.where("entry_id < 10").count() == 10 * len(sizes)
    assert df.count() == total
    assert df.where("entry_id >= 2490").count() == 10
    assert df.where(f"ledger_id = {big}").count() == 2500
    # Two differently filtered scans of one source in one query.
    both = df.where("entry_id < 10").union(df.where("entry_id >= 2490"))
    assert both.count() == 10 * len(sizes) + 10
    joined = (
        df.where("entry_id < 5")
        .alias("a")
        .join(df.where("entry_id >= 2495").alias("b"), "ledger_id")
    )
    assert joined.count() == 5 * 5
    assert df.count() == total
