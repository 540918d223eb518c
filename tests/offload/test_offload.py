"""Offload of closed ledgers to a real S3-compatible server (S3Proxy) from real sandbox bookies:
one Parquet object per ledger holding every entry byte-identical, recorded once in the ledger's
metadata (a second offloader writes nothing), an object a crashed attempt left adopted or
replaced (never duplicated), a live claim respected, an offloader killed mid-upload followed by
one clean object, the server down giving a clear error and the retry succeeding, the local
copies still read."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest
from offload.conftest import settings_for
from support.s3server import S3Server
from support.wait import wait_until

from pybkx import errors
from pybkx.client import BookKeeper, ReadHandle
from pybkx.offload import (
    OFFLOAD_CONTEXT_KEY,
    ObjectStore,
    OffloadContext,
    context_of,
    find_orphan_objects,
    object_key,
    offload_ledger,
    offloaded_ledgers,
    table_dataset,
    table_entries,
)
from pybkx.offload.parquet import write_ledger
from pybkx.tools.sandbox import Sandbox

pyarrow = pytest.importorskip("pyarrow", reason="the arrow extra is not installed")
import pyarrow.parquet as pq  # noqa: E402

pytestmark = [pytest.mark.integration]

ENTRIES_KILLED = 24_000


def payload(ledger_id: int, entry_id: int) -> bytes:
    seed = hashlib.sha256(f"{ledger_id}/{entry_id}".encode()).digest()
    return seed * (1 + entry_id % 40)


def closed_ledger(bk: BookKeeper, entries: int) -> int:
    lh = bk.create_ledger(3, 2, 2, password=b"pw")
    lh.append_many([payload(lh.ledger_id, e) for e in range(entries)])
    lh.close()
    return lh.ledger_id


def table_rows(table: pyarrow.Table) -> list[tuple[int, int, bytes]]:
    columns = (table.column(name).to_pylist() for name in ("ledger_id", "entry_id", "payload"))
    return list(zip(*columns, strict=True))


def object_rows(store: ObjectStore, ledger_id: int) -> list[tuple[int, int, bytes]]:
    return table_rows(
        pq.read_table(store.path(object_key(store.settings, ledger_id)), filesystem=store.fs)
    )


def expected_rows(ledger_id: int, entries: int) -> list[tuple[int, int, bytes]]:
    return [(ledger_id, e, payload(ledger_id, e)) for e in range(entries)]


def reads_by_every_api(handle: ReadHandle) -> dict[str, list[bytes]]:
    """The ledger's payloads as read, batch-read, iterated and read as Arrow."""
    last = handle.last_add_confirmed
    batched: list[bytes] = []
    while len(batched) <= last:
        batched += [bytes(e) for e in handle.batch_read(len(batched), 500, 1 << 20)]
    return {
        "read": [bytes(e) for e in handle.read(0, last)],
        "batch_read": batched,
        "iterate": [bytes(e) for e in handle],
        "arrow": handle.read_arrow(0, last).column(2).to_pylist(),
    }


def ledger_objects(store: ObjectStore) -> list[str]:
    return [key for key, _ in store.list(store.settings.key("ledgers"))]


def test_offload_writes_every_entry_once_and_records_it(
    s3_server: S3Server, cluster: tuple[Sandbox, BookKeeper]
) -> None:
    _, bk = cluster
    store = ObjectStore(settings_for(s3_server, "written"))
    ledger_id = closed_ledger(bk, 1200)
    before = reads_by_every_api(bk.open_ledger(ledger_id, b"pw"))
    assert before["read"] == [payload(ledger_id, e) for e in range(1200)]
    result = offload_ledger(bk, store, ledger_id, b"pw")
    assert result.action == "written"
    assert object_rows(store, ledger_id) == [
        (ledger_id, e, payload(ledger_id, e)) for e in range(1200)
    ]
    metadata = bk.open_ledger(ledger_id, b"pw", recovery=False).metadata
    recorded = context_of(metadata)
    assert recorded == result.context and recorded.complete and not recorded.bookkeeper_deleted
    assert recorded.object_key == object_key(store.settings, ledger_id)
    assert recorded.size_bytes == store.size(recorded.object_key)
    assert recorded.entries == 1200 and recorded.payload_bytes == metadata.length
    assert recorded.digest_type == metadata.digest_type.name
    assert dict(recorded.ensembles) == dict(metadata.ensembles)
    # Row groups of about 64 KiB of payload, one ascending run over every entry.
    groups = recorded.row_groups
    assert len(groups) > 5
    assert [g.first_entry for g in groups] == [0] + [g.last_entry + 1 for g in groups[:-1]]
    assert groups[-1].last_entry == 1199
    # A row group's recorded byte range is enough to read it: fetch just it and decode it.
    with store.open_input(recorded.object_key) as source:
        middle = pq.ParquetFile(source).read_row_group(len(groups) // 2)
    assert middle.column("entry_id")[0].as_py() == groups[len(groups) // 2].first_entry
    # The local copies stay: reads by every API are what they were before the offload.
    handle = bk.open_ledger(ledger_id, b"pw")
    assert reads_by_every_api(handle) == before


def test_a_second_offload_sees_the_record_and_writes_nothing(
    s3_server: S3Server, cluster: tuple[Sandbox, BookKeeper]
) -> None:
    _, bk = cluster
    store = ObjectStore(settings_for(s3_server, "again"))
    ledger_id = closed_ledger(bk, 300)
    first = offload_ledger(bk, store, ledger_id, b"pw", owner="bookie-a")
    object_path = Path(s3_server.directory, "again", first.context.object_key)
    manifest_path = Path(s3_server.directory, "again", "cold/manifest", f"{ledger_id:020d}.json")
    written_ns = object_path.stat().st_mtime_ns, manifest_path.stat().st_mtime_ns
    second = offload_ledger(bk, store, ledger_id, b"pw", owner="bookie-b")
    assert (first.action, second.action) == ("written", "already")
    assert second.context == first.context
    assert (object_path.stat().st_mtime_ns, manifest_path.stat().st_mtime_ns) == written_ns
    assert ledger_objects(store) == [first.context.object_key]
    # A crash between the record and the manifest entry: the next call writes the entry only.
    manifest_path.unlink()
    assert offload_ledger(bk, store, ledger_id, b"pw").action == "already"
    assert [e["ledger_id"] for e in table_entries(store)] == [ledger_id]
    assert object_path.stat().st_mtime_ns == written_ns[0]


def test_racing_offloaders_write_one_object(
    s3_server: S3Server, cluster: tuple[Sandbox, BookKeeper]
) -> None:
    sandbox, bk = cluster
    store = ObjectStore(settings_for(s3_server, "race"))
    ledger_id = closed_ledger(bk, 2000)
    outcomes: list[str] = []
    start = threading.Barrier(3)

    def offloader(owner: str) -> None:
        with BookKeeper(sandbox.metadata_uri) as client:
            start.wait(timeout=30)
            try:
                outcomes.append(offload_ledger(client, store, ledger_id, b"pw", owner=owner).action)
            except errors.OffloadInProgressException:
                outcomes.append("refused")

    threads = [threading.Thread(target=offloader, args=(f"bookie-{n}",)) for n in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert sorted(outcomes).count("written") == 1, outcomes
    assert set(outcomes) <= {"written", "already", "refused"}
    assert ledger_objects(store) == [object_key(store.settings, ledger_id)]


def _claim_as(bk: BookKeeper, ledger_id: int, store: ObjectStore, owner: str, age_s: float) -> None:
    """Record ``owner``'s claim made ``age_s`` ago, as an offloader that then died would."""
    handle = bk.open_ledger(ledger_id, b"pw", recovery=False)
    claim = OffloadContext(
        uid=f"uid-of-{owner}",
        owner=owner,
        claimed_at_ms=int((time.time() - age_s) * 1000),
        bucket=store.settings.bucket,
        object_key=object_key(store.settings, ledger_id),
    )
    custom = {**handle.metadata.custom_metadata, OFFLOAD_CONTEXT_KEY: claim.encode()}
    handle.update_metadata(lambda md: md.replace(custom_metadata=custom))


def test_an_object_written_but_not_recorded_is_adopted(
    s3_server: S3Server, cluster: tuple[Sandbox, BookKeeper]
) -> None:
    """A crash after the upload, before the record: the next attempt checks the object it finds
    against the ledger and records it, writing nothing."""
    _, bk = cluster
    store = ObjectStore(settings_for(s3_server, "adopt"))
    store.ensure_bucket()
    ledger_id = closed_ledger(bk, 500)
    _claim_as(bk, ledger_id, store, "dead-bookie", age_s=3600)
    handle = bk.open_ledger(ledger_id, b"pw", recovery=False)
    key = object_key(store.settings, ledger_id)
    write_ledger(store, key, handle.metadata, ledger_id, handle.arrow_batches(0, 499, 100), 4096)
    left_ns = Path(s3_server.directory, "adopt", key).stat().st_mtime_ns
    result = offload_ledger(bk, store, ledger_id, b"pw", owner="bookie-b")
    assert result.action == "adopted" and result.context.owner == "bookie-b"
    assert Path(s3_server.directory, "adopt", key).stat().st_mtime_ns == left_ns
    assert ledger_objects(store) == [key]
    assert object_rows(store, ledger_id) == [
        (ledger_id, e, payload(ledger_id, e)) for e in range(500)
    ]


def test_a_partial_object_is_replaced(
    s3_server: S3Server, cluster: tuple[Sandbox, BookKeeper]
) -> None:
    _, bk = cluster
    store = ObjectStore(settings_for(s3_server, "partial"))
    store.ensure_bucket()
    ledger_id = closed_ledger(bk, 400)
    _claim_as(bk, ledger_id, store, "dead-bookie", age_s=3600)
    key = object_key(store.settings, ledger_id)
    store.put(key, b"PAR1" + os.urandom(5000))  # what a footerless upload leaves
    result = offload_ledger(bk, store, ledger_id, b"pw")
    assert result.action == "written"
    assert ledger_objects(store) == [key]
    assert object_rows(store, ledger_id) == [
        (ledger_id, e, payload(ledger_id, e)) for e in range(400)
    ]


def test_a_live_claim_of_another_offloader_is_respected(
    s3_server: S3Server, cluster: tuple[Sandbox, BookKeeper]
) -> None:
    _, bk = cluster
    store = ObjectStore(settings_for(s3_server, "claimed"))
    ledger_id = closed_ledger(bk, 100)
    _claim_as(bk, ledger_id, store, "busy-bookie", age_s=1)
    before = bk.open_ledger(ledger_id, b"pw", recovery=False).versioned_metadata
    with pytest.raises(errors.OffloadInProgressException, match="busy-bookie"):
        offload_ledger(bk, store, ledger_id, b"pw", owner="bookie-b")
    assert bk.open_ledger(ledger_id, b"pw", recovery=False).versioned_metadata == before
    assert ledger_objects(store) == []
    # Its owner, restarted, takes its own claim back at once.
    assert offload_ledger(bk, store, ledger_id, b"pw", owner="busy-bookie").action == "written"


def test_an_empty_ledger_offloads_to_an_empty_object(
    s3_server: S3Server, cluster: tuple[Sandbox, BookKeeper]
) -> None:
    _, bk = cluster
    store = ObjectStore(settings_for(s3_server, "empty"))
    lh = bk.create_ledger(3, 2, 2, password=b"pw")
    lh.close()
    result = offload_ledger(bk, store, lh.ledger_id, b"pw")
    assert (result.action, result.context.entries, result.context.row_groups) == ("written", 0, ())
    assert object_rows(store, lh.ledger_id) == []


def test_an_open_ledger_is_refused(
    s3_server: S3Server, cluster: tuple[Sandbox, BookKeeper]
) -> None:
    _, bk = cluster
    store = ObjectStore(settings_for(s3_server, "open"))
    lh = bk.create_ledger(3, 2, 2, password=b"pw")
    lh.append(b"still open")
    with pytest.raises(errors.IllegalOpException, match="open"):
        offload_ledger(bk, store, lh.ledger_id, b"pw")
    assert context_of(bk.open_ledger(lh.ledger_id, b"pw", recovery=False).metadata) is None
    lh.close()


@pytest.mark.slow
def test_an_offloader_killed_mid_upload_leaves_one_object_after_the_retry(
    s3_server: S3Server, cluster: tuple[Sandbox, BookKeeper], tmp_path: Path
) -> None:
    sandbox, bk = cluster
    settings = settings_for(s3_server, "killed")
    store = ObjectStore(settings)
    # About 16 MiB: uploaded in several parts of a multipart upload, so there is a "during".
    ledger_id = closed_ledger(bk, ENTRIES_KILLED)
    child = Path(__file__).with_name("offload_child.py")
    argv = [
        sys.executable, str(child), sandbox.metadata_uri, str(ledger_id), str(settings.endpoint),
        s3_server.access_key, s3_server.secret_key, settings.bucket, "doomed-bookie",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(child.parent.parent)}
    bucket_dir = Path(s3_server.directory, settings.bucket)
    with (tmp_path / "child.log").open("wb") as log:
        process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env)

    def uploading() -> bool:
        # S3Proxy's filesystem backend keeps a multipart upload in progress as a ".mpus-" entry.
        if process.poll() is not None:
            raise AssertionError(f"the child ended first: {(tmp_path / 'child.log').read_text()}")
        return bucket_dir.is_dir() and any(
            p.name.startswith(".mpus-") for p in bucket_dir.iterdir()
        )

    try:
        wait_until(uploading, "the child's multipart upload is under way", timeout_s=120)
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait(30)
    assert not ledger_objects(store)  # nothing appeared: the upload never completed
    recorded = context_of(bk.open_ledger(ledger_id, b"pw", recovery=False).metadata)
    assert recorded is not None and recorded.owner == "doomed-bookie" and not recorded.complete
    retry = offload_ledger(bk, store, ledger_id, b"pw", owner="bookie-b", claim_timeout_s=0)
    assert retry.action == "written"
    assert ledger_objects(store) == [object_key(settings, ledger_id)]
    assert object_rows(store, ledger_id) == [
        (ledger_id, e, payload(ledger_id, e)) for e in range(ENTRIES_KILLED)
    ]
    assert [lid for lid, ctx in offloaded_ledgers(bk) if lid == ledger_id and ctx.complete]
    # The local copies were never touched: the ledger reads the same through the bookies.
    assert bytes(bk.open_ledger(ledger_id, b"pw").read(0, 0)[0]) == payload(ledger_id, 0)


def test_the_server_down_gives_a_clear_error_and_the_retry_succeeds(
    s3_server: S3Server, cluster: tuple[Sandbox, BookKeeper]
) -> None:
    _, bk = cluster
    store = ObjectStore(settings_for(s3_server, "down", request_timeout_ms=2000))
    ledger_id = closed_ledger(bk, 200)
    s3_server.stop()
    try:
        with pytest.raises(errors.ObjectStorageException, match="object storage"):
            offload_ledger(bk, store, ledger_id, b"pw", owner="bookie-a")
    finally:
        s3_server.start()
    recorded = context_of(bk.open_ledger(ledger_id, b"pw", recovery=False).metadata)
    assert recorded is not None and not recorded.complete  # the claim stays, nothing recorded
    assert offload_ledger(bk, store, ledger_id, b"pw", owner="bookie-a").action == "written"
    assert object_rows(store, ledger_id) == [
        (ledger_id, e, payload(ledger_id, e)) for e in range(200)
    ]


def test_offload_contexts_round_trip() -> None:
    context = OffloadContext("u", "o", 1, "b", "k")
    assert OffloadContext.decode(context.encode()) == context
    done = replace(context, complete=True, ensembles=((0, ("a:1", "b:2")),))
    assert OffloadContext.decode(done.encode()) == done
    with pytest.raises(errors.MetadataSerializationException):
        OffloadContext.decode(b"{not json")


def test_the_table_is_every_committed_ledger_read_straight_from_the_store(
    s3_server: S3Server, cluster: tuple[Sandbox, BookKeeper]
) -> None:
    """The manifest lists committed offloads only; ``table_dataset`` and a plain
    ``pyarrow.dataset`` of the ledgers directory read the same rows as the client."""
    import pyarrow.dataset as ds

    _, bk = cluster
    store = ObjectStore(settings_for(s3_server, "table"))
    sizes = {closed_ledger(bk, n): n for n in (700, 1, 350)}
    for ledger_id in sizes:
        offload_ledger(bk, store, ledger_id, b"pw")
    claimed_only = closed_ledger(bk, 20)
    _claim_as(bk, claimed_only, store, "slow-bookie", age_s=1)
    want = sorted(
        (lid, e, bytes(entry))
        for lid, n in sizes.items()
        for e, entry in enumerate(bk.open_ledger(lid, b"pw").read(0, n - 1))
    )
    assert [e["ledger_id"] for e in table_entries(store)] == sorted(sizes)
    table = table_dataset(store).to_table()
    got = sorted(table_rows(table))
    assert got == want
    directory = ds.dataset(store.path("cold/ledgers"), format="parquet", filesystem=store.fs)
    assert directory.count_rows() == len(want)
    narrowed = table_dataset(store).to_table(filter=ds.field("entry_id") >= 349)
    assert narrowed.num_rows == 700 - 349 + 1


def test_the_shell_offloads_and_lists(
    s3_server: S3Server, cluster: tuple[Sandbox, BookKeeper], tmp_path: Path
) -> None:
    sandbox, bk = cluster
    settings = settings_for(s3_server, "shell")
    conf = tmp_path / "bookie.conf"
    conf.write_text(
        f"metadataServiceUri={sandbox.metadata_uri}\n"
        f"objectStorageEndpoint={settings.endpoint}\n"
        "objectStorageBucket=shell\n"
        "objectStoragePrefix=cold\n"
        f"objectStorageAccessKey={s3_server.access_key}\n"
        f"objectStorageSecretKey={s3_server.secret_key}\n"
    )
    ledger_id = closed_ledger(bk, 250)

    def shell(*args: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "pybkx", "shell", *args]
        return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)

    done = shell("offload", "--conf", str(conf), "-l", str(ledger_id), "--json")
    assert done.returncode == 0, done.stderr
    row = json.loads(done.stdout)[0]
    assert (row["action"], row["entries"]) == ("written", 250)
    assert row["object"] == f"s3://shell/{object_key(settings, ledger_id)}"
    again = shell("offload", "--conf", str(conf), "-l", str(ledger_id), "--json")
    assert json.loads(again.stdout)[0]["action"] == "already"
    listed = shell("listoffloaded", "--conf", str(conf), "--json")
    assert listed.returncode == 0, listed.stderr
    mine = [r for r in json.loads(listed.stdout) if r["ledger"] == ledger_id]
    assert mine == [
        {
            **{k: row[k] for k in ("ledger", "object", "entries", "bytes")},
            "state": "offloaded",
            "owner": mine[0]["owner"],
        }
    ]
    missing = shell("offload", "--conf", str(conf), "-l", "999999")
    assert missing.returncode != 0 and "does not exist" in missing.stderr
    no_bucket = tmp_path / "plain.conf"
    no_bucket.write_text(f"metadataServiceUri={sandbox.metadata_uri}\n")
    refused = shell("offload", "--conf", str(no_bucket), "-l", str(ledger_id))
    assert refused.returncode != 0 and "objectStorageBucket" in refused.stderr


def test_objects_of_deleted_ledgers_are_found_and_removed(
    s3_server: S3Server, cluster: tuple[Sandbox, BookKeeper], tmp_path: Path
) -> None:
    """A deleted ledger's object and manifest entry are orphans; a live ledger's objects and
    keys that name no ledger are left alone. The shell removes them with --delete."""
    sandbox, bk = cluster
    settings = settings_for(s3_server, "orphans")
    store = ObjectStore(settings)
    deleted, kept = closed_ledger(bk, 30), closed_ledger(bk, 40)
    for ledger_id in (deleted, kept):
        offload_ledger(bk, store, ledger_id, b"pw")
    foreign = settings.key("ledgers", "notes.txt")
    store.put(foreign, b"not a ledger")
    bk.delete_ledger(deleted)
    orphans = find_orphan_objects(bk, store)
    assert {(o.key, o.ledger_id) for o in orphans} == {
        (object_key(settings, deleted), deleted),
        (settings.key("manifest", f"{deleted:020d}.json"), deleted),
        (foreign, None),
    }
    conf = tmp_path / "bookie.conf"
    conf.write_text(
        f"metadataServiceUri={sandbox.metadata_uri}\n"
        f"objectStorageEndpoint={settings.endpoint}\n"
        "objectStorageBucket=orphans\nobjectStoragePrefix=cold\n"
        f"objectStorageAccessKey={s3_server.access_key}\n"
        f"objectStorageSecretKey={s3_server.secret_key}\n"
    )
    argv = [sys.executable, "-m", "pybkx", "shell", "offloadorphans", "--conf", str(conf)]
    listed = subprocess.run([*argv, "--json"], capture_output=True, text=True, timeout=120)
    assert listed.returncode == 0, listed.stderr
    assert not any(row["removed"] for row in json.loads(listed.stdout))
    assert len(store.list(settings.key("ledgers"))) == 3  # listing removes nothing
    done = subprocess.run(
        [*argv, "--delete", "--json"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    removed = {row["object"] for row in json.loads(done.stdout) if row["removed"]}
    assert removed == {f"s3://orphans/{o.key}" for o in orphans if o.ledger_id is not None}
    assert [key for key, _ in store.list(settings.key("ledgers"))] == sorted(
        [object_key(settings, kept), foreign]
    )
    assert [e["ledger_id"] for e in table_entries(store)] == [kept]
    assert find_orphan_objects(bk, store) == [o for o in orphans if o.ledger_id is None]


@pytest.mark.slow
def test_offload_under_load_survives_a_bookie_killed_mid_offload(
    s3_server: S3Server, cluster: tuple[Sandbox, BookKeeper]
) -> None:
    """Two ledgers offloaded at once while a bookie of their ensembles is killed (kill -9) once
    the first offload has claimed its ledger: the reads go to the other replica (Qw=2), both
    objects hold every entry, and the bookie comes back afterwards."""
    sandbox, bk = cluster
    store = ObjectStore(settings_for(s3_server, "bookiekill"))
    big, other = closed_ledger(bk, 12_000), closed_ledger(bk, 3_000)
    results: dict[int, str] = {}
    failures: list[BaseException] = []

    def offload(ledger_id: int) -> None:
        try:
            results[ledger_id] = offload_ledger(bk, store, ledger_id, b"pw").action
        except BaseException as exc:  # reported by the test thread
            failures.append(exc)

    threads = [threading.Thread(target=offload, args=(lid,)) for lid in (big, other)]
    for thread in threads:
        thread.start()
    try:
        wait_until(
            lambda: context_of(bk.open_ledger(big, b"pw", recovery=False).metadata) is not None,
            "the offload claims the big ledger",
            timeout_s=60,
        )
        sandbox.kill_bookie(0)
        for thread in threads:
            thread.join(timeout=300)
    finally:
        sandbox.restart_bookie(0)
    assert not failures, failures
    assert results == {big: "written", other: "written"}
    assert object_rows(store, big) == expected_rows(big, 12_000)
    assert object_rows(store, other) == expected_rows(other, 3_000)
