"""`pybkx bookie` as an operator runs it: it serves, stops cleanly on a signal, fails in one line.

Owns the bookie process's life cycle seen from outside; must never touch its files while it runs.
"""

from __future__ import annotations

import signal
import socket
from pathlib import Path
from typing import Any

import pytest
from support.bookies import (
    LEDGER_ID,
    REQUEST_TIMEOUT_S,
    STOP_TIMEOUT_S,
    add_entries,
    assert_one_line_failure,
    bookie_client,
    needs_server,
    payload,
    read_payload,
    storage_of,
    write_conf,
)
from support.bookies import start_bookie as start_bookie
from support.ports import accepts_tcp, free_port

from pybkx import errors
from pybkx.meta import open_metadata_store

pytestmark = pytest.mark.integration


# --- a bookie that starts, serves and stops ---------------------------------------------------


@needs_server
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_bookie_accepts_tcp_and_exits_0_on_a_signal(
    tmp_path: Path, start_bookie: Any, sig: signal.Signals
) -> None:
    port = free_port()
    conf = write_conf(tmp_path, port)
    bookie = start_bookie("--conf", str(conf))
    bookie.wait_listening(port)
    assert bookie.stop(sig) == 0
    assert "Traceback" not in bookie.stderr()
    assert bookie.stderr() == ""
    log = bookie.stdout()
    assert "bookie serving" in log
    assert f"listen=127.0.0.1:{port}" in log
    assert "ledger storage closed (checkpointed)" in log
    # The directories were released and hold a consistent storage.
    with storage_of(conf) as storage:
        assert storage.list_ledgers() == []
    assert (tmp_path / "journal" / "current").is_dir()
    assert (tmp_path / "ledgers" / "current").is_dir()


@needs_server
def test_an_acknowledged_entry_survives_sigterm_and_restart(
    tmp_path: Path, start_bookie: Any
) -> None:
    port = free_port()
    conf = write_conf(tmp_path, port)
    address = f"127.0.0.1:{port}"
    first = start_bookie("--conf", str(conf))
    first.wait_listening(port)
    with bookie_client() as client:
        for future in add_entries(client, address, range(0, 50)):
            assert future.result(REQUEST_TIMEOUT_S) is None
        # More adds in flight while SIGTERM arrives: the server drains them before closing.
        in_flight = add_entries(client, address, range(50, 2050))
        first.proc.send_signal(signal.SIGTERM)
        acked = list(range(0, 50))
        for entry_id, future in zip(range(50, 2050), in_flight, strict=True):
            try:
                future.result(REQUEST_TIMEOUT_S + 5)
            except errors.BKException:
                continue  # not acknowledged: it may or may not be stored
            acked.append(entry_id)
    assert first.wait(STOP_TIMEOUT_S) == 0, first.stderr()
    assert first.stderr() == ""

    # Checkpointed on the way out: the storage opens directly and holds every acked entry.
    with storage_of(conf) as storage:
        assert LEDGER_ID in storage.list_ledgers()
        for entry_id in acked:
            stored = storage.read_entry(LEDGER_ID, entry_id)
            assert stored.endswith(payload(entry_id))

    second = start_bookie("--conf", str(conf))
    second.wait_listening(port)
    with bookie_client() as client:
        for entry_id in acked:
            assert read_payload(client, address, entry_id) == payload(entry_id)
    assert second.stop() == 0


@needs_server
def test_readonly_flag_refuses_adds_and_still_serves_reads(
    tmp_path: Path, start_bookie: Any
) -> None:
    port = free_port()
    conf = write_conf(tmp_path, port)
    address = f"127.0.0.1:{port}"
    writable = start_bookie("--conf", str(conf))
    writable.wait_listening(port)
    with bookie_client() as client:
        add_entries(client, address, range(0, 1))[0].result(REQUEST_TIMEOUT_S)
    assert writable.stop() == 0

    read_only = start_bookie("--conf", str(conf), "--readonly")
    read_only.wait_listening(port)
    with bookie_client() as client:
        with pytest.raises(errors.WriteOnReadOnlyBookieException):
            add_entries(client, address, range(1, 2))[0].result(REQUEST_TIMEOUT_S)
        assert read_payload(client, address, 0) == payload(0)
    assert read_only.stop() == 0
    assert "read_only=True" in read_only.stdout()


@needs_server
def test_flags_override_the_conf_file(tmp_path: Path, start_bookie: Any) -> None:
    file_port, flag_port = free_port(), free_port()
    conf = write_conf(tmp_path, file_port)
    journal, ledgers = tmp_path / "flag-journal", tmp_path / "flag-ledgers"
    bookie = start_bookie(
        "--conf",
        str(conf),
        "--port",
        str(flag_port),
        "--journal-dirs",
        str(journal),
        "--ledger-dirs",
        f"{ledgers}1,{ledgers}2",
    )
    bookie.wait_listening(flag_port)
    assert not accepts_tcp(file_port)
    assert bookie.stop() == 0
    assert (journal / "current").is_dir()
    assert (Path(f"{ledgers}1") / "current").is_dir()
    assert not (tmp_path / "journal").exists()


@needs_server
def test_without_conf_defaults_and_flags_are_enough(tmp_path: Path, start_bookie: Any) -> None:
    port = free_port()
    bookie = start_bookie(
        "--port",
        str(port),
        "--host",
        "127.0.0.1",
        "--journal-dirs",
        str(tmp_path / "j"),
        "--ledger-dirs",
        str(tmp_path / "l"),
    )
    bookie.wait_listening(port)
    assert bookie.stop() == 0
    assert "(standalone)" in bookie.stdout()


@needs_server
def test_metadata_service_uri_makes_the_bookie_register(tmp_path: Path, start_bookie: Any) -> None:
    port = free_port()
    uri = f"embedded://{tmp_path / 'metadata'}"
    with open_metadata_store(uri) as store:  # bookies join initialised clusters only
        store.init_new_cluster()
    conf = write_conf(tmp_path, port, f"metadataServiceUri={uri}\n")
    bookie = start_bookie("--conf", str(conf))
    bookie.wait_listening(port)
    assert bookie.stop() == 0
    log = bookie.stdout()
    assert f"bookie registered bookie_id=127.0.0.1:{port} read_only=False metadata={uri}" in log
    assert "bookie unregistered" in log
    assert (tmp_path / "journal" / "current" / "VERSION").is_file()  # the cookie


# --- failures: one line on stderr, non-zero exit ----------------------------------------------


@pytest.mark.parametrize(
    ("line", "key"),
    [
        ("bookiePort=abc", "bookiePort"),
        ("bookiePort=70000", "bookiePort"),
        ("ledgerDirectories=", "ledgerDirectories"),
        ("journalSyncData=maybe", "journalSyncData"),
    ],
)
def test_a_bad_config_fails_with_one_line_naming_key_and_file(
    tmp_path: Path, start_bookie: Any, line: str, key: str
) -> None:
    conf = tmp_path / "bad.conf"
    conf.write_text(f"# broken\n{line}\n")
    bookie = start_bookie("--conf", str(conf))
    assert_one_line_failure(bookie, key, str(conf))


def test_a_missing_config_file_fails_with_one_line(tmp_path: Path, start_bookie: Any) -> None:
    conf = tmp_path / "missing.conf"
    bookie = start_bookie("--conf", str(conf))
    assert_one_line_failure(bookie, str(conf))


@needs_server
def test_a_second_bookie_on_the_same_directories_fails_with_one_line(
    tmp_path: Path, start_bookie: Any
) -> None:
    port, other_port = free_port(), free_port()
    conf = write_conf(tmp_path, port)
    first = start_bookie("--conf", str(conf))
    first.wait_listening(port)
    second = start_bookie("--conf", str(conf), "--port", str(other_port))
    assert_one_line_failure(second, "cannot open ledger storage", "in use")
    assert not accepts_tcp(other_port)
    assert accepts_tcp(port)  # the first one is unharmed
    assert first.stop() == 0


@needs_server
def test_a_port_in_use_fails_with_one_line_and_releases_the_storage(
    tmp_path: Path, start_bookie: Any
) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as blocker:
        blocker.bind(("127.0.0.1", 0))
        blocker.listen()
        port = blocker.getsockname()[1]
        conf = write_conf(tmp_path, port)
        bookie = start_bookie("--conf", str(conf))
        assert_one_line_failure(bookie, f"cannot listen on 127.0.0.1:{port}")
    with storage_of(conf) as storage:  # the failed bookie closed its storage
        assert storage.list_ledgers() == []


@needs_server
def test_a_loopback_identity_is_refused_for_a_cluster_bookie(
    tmp_path: Path, start_bookie: Any
) -> None:
    port = free_port()
    conf = write_conf(
        tmp_path,
        port,
        "metadataServiceUri=zk+hierarchical://127.0.0.1:1/ledgers\n",
        allow_loopback=False,
    )
    bookie = start_bookie("--conf", str(conf))
    assert_one_line_failure(bookie, "allowLoopback", "loopback")
