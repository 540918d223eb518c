"""BookKeeper's HTTP admin API on pybkx bookies: every endpoint with good input (BookKeeper's
paths, parameters and JSON shapes) and bad input (BookKeeper's status codes, a JSON error, never
a traceback), on a real cluster of each metadata backend. Owns these checks only."""

from __future__ import annotations

import base64
import socket
from collections.abc import Iterator

import pytest
from admin_helpers import Reply, http
from support.wait import wait_until

import pybkx
from pybkx.tools.sandbox import Sandbox

PASSWORD = b"secret"


@pytest.fixture(scope="module")
def ledger(cluster: Sandbox) -> Iterator[int]:
    """A closed ledger of 30 ASCII entries on every bookie (E = Qw = 3)."""
    with pybkx.BookKeeper(cluster.metadata_uri) as bk:
        lh = bk.create_ledger(3, 3, 2, password=PASSWORD, custom_metadata={"app": b"test"})
        lh.append_many([f"entry-{i}".encode() for i in range(30)])
        lh.close()
        yield lh.ledger_id


def api(cluster: Sandbox, method: str, path: str, body: bytes | None = None) -> Reply:
    return http(method, cluster.admin_urls[0] + path, body)


def error_of(reply: Reply, status: int) -> str:
    """The JSON error of a refused request."""
    assert reply.status == status, (reply.status, reply.text)
    message = reply.json()["error"]
    assert isinstance(message, str) and message
    assert "Traceback" not in reply.text
    return message


def test_heartbeat_and_readiness(cluster: Sandbox) -> None:
    assert api(cluster, "GET", "/heartbeat").text == "OK\n"
    ready = api(cluster, "GET", "/api/v1/bookie/is_ready")
    assert (ready.status, ready.text) == (200, "OK")
    error_of(api(cluster, "POST", "/api/v1/bookie/is_ready"), 404)


def test_unknown_paths_and_methods_get_json_errors(cluster: Sandbox) -> None:
    assert "no endpoint" in error_of(api(cluster, "GET", "/api/v1/nothing"), 404)
    error_of(api(cluster, "PATCH", "/heartbeat"), 405)
    assert "forbidden" in error_of(api(cluster, "POST", "/metrics"), 403)


def test_server_config_shows_the_effective_settings(cluster: Sandbox) -> None:
    config = api(cluster, "GET", "/api/v1/config/server_config").json()
    port = cluster.bookie_addresses[0].rsplit(":", 1)[1]
    assert config["bookiePort"] == port
    assert config["httpServerEnabled"] == "true"
    assert config["journalSyncData"] == "true"
    assert config["metadataServiceUri"] == cluster.metadata_uri
    assert "pybkx does not change" in error_of(
        api(cluster, "PUT", "/api/v1/config/server_config", b'{"a": "b"}'), 403
    )


def test_bookie_info_state_and_read_only(cluster: Sandbox) -> None:
    info = api(cluster, "GET", "/api/v1/bookie/info").json()
    assert info["totalSpace"] >= info["freeSpace"] > 0
    state = api(cluster, "GET", "/api/v1/bookie/state").json()
    assert state == {
        "running": True,
        "readOnly": False,
        "shuttingDown": False,
        "availableForHighPriorityWrites": True,
    }
    url = "/api/v1/bookie/state/readonly"
    assert api(cluster, "GET", url).json() == {"readOnly": False}
    assert api(cluster, "PUT", url, b'{"readOnly": true}').json() == {"readOnly": True}
    try:
        assert api(cluster, "GET", "/api/v1/bookie/state").json()["readOnly"] is True
        me = cluster.bookie_addresses[0]
        assert me in cluster.metadata_store.readonly_bookies()
    finally:
        assert api(cluster, "PUT", url, b'{"readOnly": false}').json() == {"readOnly": False}
    cluster.wait_registered([0])
    assert "not JSON" in error_of(api(cluster, "PUT", url, b"garbage"), 400)
    error_of(api(cluster, "PUT", url, b'{"readOnly": "yes"}'), 400)
    error_of(api(cluster, "POST", url), 404)


def test_list_bookies_and_their_info(cluster: Sandbox) -> None:
    listed = api(cluster, "GET", "/api/v1/bookie/list_bookies").json()
    assert listed == dict.fromkeys(sorted(cluster.bookie_addresses))
    named = api(cluster, "GET", "/api/v1/bookie/list_bookies?type=rw&print_hostnames=true").json()
    assert named == {b: "127.0.0.1" for b in cluster.bookie_addresses}
    assert api(cluster, "GET", "/api/v1/bookie/list_bookies?type=ro").json() == {}
    info = api(cluster, "GET", "/api/v1/bookie/list_bookie_info").json()
    for bookie in cluster.bookie_addresses:
        assert info[bookie].startswith(": {Free: ")
    assert info["ClusterInfo: "].startswith("{Free: ")
    error_of(api(cluster, "DELETE", "/api/v1/bookie/list_bookies"), 404)


def test_ledger_list_metadata_read_and_delete(cluster: Sandbox, ledger: int) -> None:
    assert str(ledger) in api(cluster, "GET", "/api/v1/ledger/list").json()
    decoded = api(cluster, "GET", "/api/v1/ledger/list?print_metadata=true&decode_meta=true")
    assert decoded.json()[str(ledger)]["lastEntryId"] == 29
    raw = api(cluster, "GET", "/api/v1/ledger/list?print_metadata=true").json()[str(ledger)]
    assert raw.startswith("BookieMetadataFormatVersion\t3")
    assert (
        str(ledger) in api(cluster, "GET", "/api/v1/ledger/list?print_metadata=true&page=1").json()
    )

    md = api(cluster, "GET", f"/api/v1/ledger/metadata?ledger_id={ledger}").json()[str(ledger)]
    assert md["ledgerId"] == ledger
    assert (md["ensembleSize"], md["writeQuorumSize"], md["ackQuorumSize"]) == (3, 3, 2)
    assert (md["state"], md["closed"], md["lastEntryId"]) == ("CLOSED", True, 29)
    assert md["digestType"] == "CRC32C"
    assert base64.b64decode(md["password"]) == PASSWORD
    assert base64.b64decode(md["customMetadata"]["app"]) == b"test"
    assert sorted(b["id"] for b in md["allEnsembles"]["0"]) == sorted(cluster.bookie_addresses)

    entries = api(cluster, "GET", f"/api/v1/ledger/read?ledger_id={ledger}").json()
    assert entries == {str(i): f"entry-{i}" for i in range(30)}
    some = api(
        cluster, "GET", f"/api/v1/ledger/read?ledger_id={ledger}&start_entry_id=5&end_entry_id=7"
    )
    assert some.json() == {"5": "entry-5", "6": "entry-6", "7": "entry-7"}
    paged = api(cluster, "GET", f"/api/v1/ledger/read?ledger_id={ledger}&page=1").json()
    assert paged["Entries for page: "] == "1" and paged["29"] == "entry-29"


def test_ledger_endpoints_refuse_bad_input(cluster: Sandbox, ledger: int) -> None:
    assert "ledger_id" in error_of(api(cluster, "GET", "/api/v1/ledger/metadata"), 404)
    assert "whole number" in error_of(
        api(cluster, "GET", "/api/v1/ledger/metadata?ledger_id=abc"), 400
    )
    error_of(api(cluster, "GET", "/api/v1/ledger/metadata?ledger_id=-3"), 400)
    missing = error_of(api(cluster, "GET", "/api/v1/ledger/metadata?ledger_id=999999"), 404)
    assert "NoSuchLedgerExistsOnMetadataServerException" in missing
    error_of(api(cluster, "GET", "/api/v1/ledger/read?ledger_id=999999"), 404)
    error_of(api(cluster, "GET", "/api/v1/ledger/read"), 404)
    conflict = f"/api/v1/ledger/read?ledger_id={ledger}&start_entry_id=9&end_entry_id=3"
    assert "conflict" in error_of(api(cluster, "GET", conflict), 400)
    error_of(api(cluster, "GET", "/api/v1/ledger/list?print_metadata=true&page=x"), 400)
    error_of(api(cluster, "GET", f"/api/v1/ledger/delete?ledger_id={ledger}"), 404)
    error_of(api(cluster, "DELETE", "/api/v1/ledger/delete"), 404)
    error_of(api(cluster, "POST", "/api/v1/ledger/list"), 404)


def test_delete_then_gc_drops_the_ledger_from_every_bookie(cluster: Sandbox) -> None:
    with pybkx.BookKeeper(cluster.metadata_uri) as bk:
        lh = bk.create_ledger(3, 3, 3)
        lh.append_many([b"doomed"] * 5)
        lh.close()
    doomed = lh.ledger_id
    deleted = api(cluster, "DELETE", f"/api/v1/ledger/delete?ledger_id={doomed}")
    assert (deleted.status, deleted.json()) == (200, f"Deleted ledger: {doomed}")
    # As BookKeeper: deleting a ledger that does not exist (any more) succeeds.
    assert api(cluster, "DELETE", f"/api/v1/ledger/delete?ledger_id={doomed}").status == 200
    for url in cluster.admin_urls:
        assert http("GET", f"{url}/api/v1/bookie/gc").json() == {"is_in_force_gc": "false"}
        triggered = http("PUT", f"{url}/api/v1/bookie/gc", b'{"forceMajor": true}')
        assert triggered.json().startswith("Triggered GC on BookieServer: ")
        details = http("GET", f"{url}/api/v1/bookie/gc_details").json()[0]
        assert doomed in details["lastGcDeletedLedgers"]
        assert details["lastGcEntryLogsRemoved"] >= 0 and details["lastGcReclaimedBytes"] >= 0
        assert details["majorCompactionCounter"] == 1  # the forced major compaction
        assert {"forceCompacting", "majorCompacting", "minorCompacting"} <= set(details)
    error_of(api(cluster, "PUT", "/api/v1/bookie/gc", b"[1, 2]"), 400)
    error_of(api(cluster, "POST", "/api/v1/bookie/gc_details"), 404)


def test_last_log_mark_and_disk_files(cluster: Sandbox, ledger: int) -> None:
    marks = api(cluster, "GET", "/api/v1/bookie/last_log_mark").json()
    ((journal, position),) = marks.items()
    assert journal.startswith("LastLogMark: Journal Id - ") and journal.endswith(".txn)")
    assert position.startswith("Pos - ") and int(position[6:]) > 0
    # Entry logs and index segments appear with the first write-cache flush (flushInterval):
    # the log first, its index segment a moment later, so wait for both.
    files = wait_until(
        lambda: api(cluster, "GET", "/api/v1/bookie/list_disk_file").json(),
        "an entry log and its index segment listed",
        timeout_s=30,
        interval_s=0.2,
        accept=lambda files: files["entrylog files"] and ".idx\t" in files["index files"],
    )
    assert set(files) == {"journal files", "entrylog files", "index files"}
    assert files["journal files"].endswith(".txn\t")
    assert files["entrylog files"].endswith(".log\t")
    assert "index.log\t" in files["index files"]
    assert ".idx\t" in files["index files"]
    only = api(cluster, "GET", "/api/v1/bookie/list_disk_file?file_type=journal").json()
    assert set(only) == {"journal files"}
    error_of(api(cluster, "PUT", "/api/v1/bookie/last_log_mark"), 404)


def test_a_body_over_the_limit_is_refused_before_it_is_read(cluster: Sandbox) -> None:
    host, port = cluster.admin_urls[0].removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        # Announce 2 MiB (httpServerMaxRequestBytes is 1 MiB) and send none of it.
        sock.sendall(
            b"PUT /api/v1/bookie/state/readonly HTTP/1.1\r\nHost: x\r\n"
            b"Content-Type: application/json\r\nContent-Length: 2097152\r\n\r\n"
        )
        status_line = sock.makefile("rb").readline()
    assert status_line.split()[1] == b"413", status_line


def test_autorecovery_endpoints(cluster: Sandbox) -> None:
    path = "/api/v1/autorecovery/list_under_replicated_ledger"
    assert api(cluster, "GET", path).status == 404  # nothing marked
    store = cluster.metadata_store
    store.mark_ledger_underreplicated(901, ["10.1.1.1:3181"])
    store.mark_ledger_underreplicated(902, ["10.1.1.2:3181"])
    try:
        assert api(cluster, "GET", path).json() == [901, 902]
        assert api(cluster, "GET", path + "?missingreplica=10.1.1.2:3181").json() == [902]
        assert api(cluster, "GET", path + "?excludingmissingreplica=10.1.1.2:3181").json() == [901]
        assert api(cluster, "GET", path + "?printmissingreplica=true").json() == {
            "901": ["10.1.1.1:3181"],
            "902": ["10.1.1.2:3181"],
        }
    finally:
        for ledger_id in (901, 902):
            version = store.lock_underreplicated_ledger(ledger_id, "test")
            assert version is not None
            store.mark_ledger_replicated(ledger_id, version)

    delay = "/api/v1/autorecovery/lost_bookie_recovery_delay"
    assert api(cluster, "PUT", delay, b'{"delay_seconds": 12}').status == 200
    assert "lostBookieRecoveryDelay value: 12" in api(cluster, "GET", delay).text
    assert store.lost_bookie_recovery_delay() == 12
    error_of(api(cluster, "PUT", delay, b'{"delay_seconds": -1}'), 400)
    error_of(api(cluster, "PUT", delay, b"[1]"), 400)
    # No AutoRecovery runs in this cluster: no auditor.
    assert api(cluster, "GET", "/api/v1/autorecovery/who_is_auditor").status == 404


def test_autorecovery_status_trigger_audit_and_decommission_refusals(cluster: Sandbox) -> None:
    status = "/api/v1/autorecovery/status"
    store = cluster.metadata_store
    assert api(cluster, "GET", status).json() == {"enabled": True}
    try:
        assert api(cluster, "PUT", status + "?enabled=false").json() == {"enabled": False}
        assert not store.replication_enabled()
        # Disabled: the audit cannot be triggered (BookKeeper answers 404 then).
        assert "disabled" in error_of(
            api(cluster, "PUT", "/api/v1/autorecovery/trigger_audit"), 404
        )
    finally:
        assert api(cluster, "PUT", status + "?enabled=true").json() == {"enabled": True}
    assert store.replication_enabled()
    assert "enabled" in error_of(api(cluster, "PUT", status), 400)
    error_of(api(cluster, "POST", status), 404)

    trigger = "/api/v1/autorecovery/trigger_audit"
    error_of(api(cluster, "GET", trigger), 404)  # PUT only
    # No AutoRecovery runs in this cluster: no auditor to wake.
    assert "no auditor" in error_of(api(cluster, "PUT", trigger), 404)

    decommission = "/api/v1/autorecovery/decommission"
    error_of(api(cluster, "GET", decommission), 404)
    assert "Null request body" in error_of(api(cluster, "PUT", decommission), 404)
    assert "bookie_src" in error_of(api(cluster, "PUT", decommission, b'{"bookie": "x"}'), 404)
    registered = sorted(store.writable_bookies())[0]
    body = f'{{"bookie_src": "{registered}"}}'.encode()
    assert "still registered" in error_of(api(cluster, "PUT", decommission, body), 404)
    gone = b'{"bookie_src": "10.9.9.9:3181"}'
    assert "no auditor" in error_of(api(cluster, "PUT", decommission, gone), 404)
