"""Every ``pybkx shell`` command as an operator runs it (a separate process), against a real
cluster on each metadata backend: tables for people, JSON for machines, one-line errors. Owns
these checks; the clusters come from ``conftest``."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import pybkx
from pybkx.meta import serde
from pybkx.tools.sandbox import Sandbox


def shell(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pybkx", "shell", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def ok(*args: str) -> str:
    run = shell(*args)
    assert run.returncode == 0, run.stderr
    return run.stdout


def as_json(*args: str) -> Any:
    return json.loads(ok(*args, "--json"))


def one_line_error(run: subprocess.CompletedProcess[str], *fragments: str) -> str:
    assert run.returncode != 0
    lines = [line for line in run.stderr.splitlines() if line.startswith("Error: ")]
    assert len(lines) == 1, run.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    assert "Traceback" not in run.stderr
    return lines[0]


@pytest.fixture(scope="module")
def ledgers(cluster: Sandbox) -> Iterator[list[int]]:
    """Two closed ledgers: 20 ASCII entries on every bookie, and 5 on two bookies."""
    with pybkx.BookKeeper(cluster.metadata_uri) as bk:
        first = bk.create_ledger(3, 3, 2, password=b"a")
        first.append_many([f"line {i}".encode() for i in range(20)])
        first.close()
        second = bk.create_ledger(2, 2, 2, password=b"b")
        second.append_many([bytes([i]) * 4 for i in range(5)])
        second.close()
        yield [first.ledger_id, second.ledger_id]


def test_listbookies(cluster: Sandbox) -> None:
    uri = cluster.metadata_uri
    listed = as_json("listbookies", "--uri", uri)
    assert sorted(row["bookie"] for row in listed) == sorted(cluster.bookie_addresses)
    assert {row["state"] for row in listed} == {"writable"}
    assert all(row["admin"].startswith("http://127.0.0.1:") for row in listed)
    assert as_json("listbookies", "--uri", uri, "-ro") == []
    assert len(as_json("listbookies", "--uri", uri, "-a", "-h")) == 3
    table = ok("listbookies", "--uri", uri, "-rw")
    for bookie in cluster.bookie_addresses:
        assert bookie in table
    conf = cluster.directory / "bookie-0" / "bk_server.conf"
    assert len(as_json("listbookies", "--conf", str(conf))) == 3


def test_listledgers_and_ledgermetadata(cluster: Sandbox, ledgers: list[int]) -> None:
    uri = cluster.metadata_uri
    ids = [row["ledger"] for row in as_json("listledgers", "--uri", uri)]
    assert set(ledgers) <= set(ids)
    meta = {row["ledger"]: row for row in as_json("listledgers", "--uri", uri, "-m")}
    assert meta[ledgers[0]]["quorums"] == "3/3/2"
    assert meta[ledgers[1]]["lastEntryId"] == 4
    assert str(ledgers[0]) in ok("listledgers", "--uri", uri, "-m")
    md = json.loads(ok("ledgermetadata", "--uri", uri, "-l", str(ledgers[0])))
    assert (md["ledgerId"], md["state"], md["lastEntryId"]) == (ledgers[0], "CLOSED", 19)
    one_line_error(shell("ledgermetadata", "--uri", uri, "-l", "987654"), "does not exist")


def test_readledger_and_ledger_print_entries(cluster: Sandbox, ledgers: list[int]) -> None:
    uri = cluster.metadata_uri
    rows = as_json("readledger", "--uri", uri, "-l", str(ledgers[0]), "--format", "string")
    assert [r["data"] for r in rows] == [f"line {i}" for i in range(20)]
    part = as_json("readledger", "--uri", uri, "-l", str(ledgers[1]), "-fe", "1", "-le", "2")
    assert [(r["entry"], r["data"]) for r in part] == [(1, "01010101"), (2, "02020202")]
    table = ok("ledger", "--uri", uri, "-l", str(ledgers[0]), "--format", "string")
    assert "line 19" in table
    one_line_error(shell("readledger", "--uri", uri, "-l", "987654"), "NoSuchLedger")


def test_simpletest(cluster: Sandbox) -> None:
    uri = cluster.metadata_uri
    result = as_json("simpletest", "--uri", uri, "-e", "3", "-w", "2", "-a", "2", "-n", "500")
    assert result["entries"] == 500 and len(result["ensemble"]) == 3
    assert "20 entries written" in ok("simpletest", "--uri", uri, "-n", "20")
    one_line_error(shell("simpletest", "--uri", uri, "-e", "5"), "NotEnoughBookies")


def test_bookieinfo_and_bookiesanity(cluster: Sandbox) -> None:
    uri = cluster.metadata_uri
    info = {row["bookie"]: row for row in as_json("bookieinfo", "--uri", uri)}
    for bookie in cluster.bookie_addresses:
        assert info[bookie]["total"] >= info[bookie]["free"] > 0
    assert info["cluster"]["total"] == sum(info[b]["total"] for b in cluster.bookie_addresses)
    bookie = cluster.bookie_addresses[2]
    assert as_json("bookiesanity", "--uri", uri, "-b", bookie)["passed"] is True
    conf = cluster.directory / "bookie-1" / "bk_server.conf"
    assert cluster.bookie_addresses[1] in ok("bookiesanity", "--conf", str(conf))
    one_line_error(shell("bookiesanity", "--uri", uri, "-b", "10.9.9.9:1"), "not registered")


def test_lastmark(cluster: Sandbox) -> None:
    rows = as_json("lastmark", "--uri", cluster.metadata_uri)
    assert {row["bookie"] for row in rows} == set(cluster.bookie_addresses)
    assert all(row["position"].startswith("Pos - ") for row in rows)


def test_cookie_get_update_delete(cluster: Sandbox, tmp_path: Path) -> None:
    uri = cluster.metadata_uri
    bookie = cluster.bookie_addresses[0]
    text = ok("cookie", "get", bookie, "--uri", uri)
    cookie = serde.parse_cookie(text.encode())
    assert cookie.bookie_id == bookie
    shown = as_json("cookie", "get", bookie, "--uri", uri)
    version = shown["version"]
    assert shown["instanceId"] == cluster.metadata_store.instance_id()
    path = tmp_path / "cookie"
    path.write_text(text)
    updated = as_json("cookie", "update", bookie, "--uri", uri, "-cf", str(path))
    assert updated["version"] != version and updated["bookieId"] == bookie
    other = tmp_path / "other"
    other.write_text(text.replace(bookie, "10.1.1.1:3181"))
    one_line_error(
        shell("cookie", "update", bookie, "--uri", uri, "-cf", str(other)), "names bookie"
    )
    one_line_error(shell("cookie", "get", "10.1.1.1:3181", "--uri", uri), "no cookie")
    # Delete a cookie only of a bookie that is not running: write one for a retired bookie.
    retired = serde.serialize_cookie(cookie).decode().replace(bookie, "10.2.2.2:3181")
    cluster.metadata_store.write_cookie("10.2.2.2:3181", serde.parse_cookie(retired.encode()), None)
    one_line_error(
        shell("cookie", "delete", "10.2.2.2:3181", "--uri", uri, stdin="n\n"), "not confirmed"
    )
    assert "deleted the cookie" in ok("cookie", "delete", "10.2.2.2:3181", "--uri", uri, "-f")
    one_line_error(shell("cookie", "get", "10.2.2.2:3181", "--uri", uri), "no cookie")


def test_updateledgers_replaces_a_bookie_id(cluster: Sandbox) -> None:
    uri = cluster.metadata_uri
    with pybkx.BookKeeper(uri) as bk:
        lh = bk.create_ledger(3, 3, 3)
        lh.append_many([b"u"] * 3)
        lh.close()
    old = cluster.bookie_addresses[0]
    new = "10.3.3.3:3181"
    dry = as_json("updateledgers", "--uri", uri, "-sb", old, "-db", new, "--dry-run")
    assert lh.ledger_id in dry["updated"]
    assert old in cluster.metadata_store.read_ledger_metadata(lh.ledger_id).value.ensembles[0]
    done = as_json("updateledgers", "--uri", uri, "-sb", old, "-db", new, "-s", "1000")
    assert lh.ledger_id in done["updated"]
    ensemble = cluster.metadata_store.read_ledger_metadata(lh.ledger_id).value.ensembles[0]
    assert new in ensemble and old not in ensemble
    back = as_json("updateledgers", "--uri", uri, "-sb", new, "-db", old, "-s", "1000")
    assert lh.ledger_id in back["updated"]
    one_line_error(shell("updateledgers", "--uri", uri, "-sb", old, "-db", old), "the same")


def test_deleteledger(cluster: Sandbox) -> None:
    uri = cluster.metadata_uri
    with pybkx.BookKeeper(uri) as bk:
        lh = bk.create_ledger(2, 2, 2)
        lh.append(b"x")
        lh.close()
    lid = str(lh.ledger_id)
    one_line_error(shell("deleteledger", "--uri", uri, "-l", lid, stdin="n\n"), "not confirmed")
    assert f"deleted ledger {lid}" in ok("deleteledger", "--uri", uri, "-l", lid, "-f")
    one_line_error(shell("deleteledger", "--uri", uri, "-l", lid, "-f"), "does not exist")


def test_commands_need_a_cluster() -> None:
    run = shell("listbookies")
    assert run.returncode != 0 and "--uri or --conf" in run.stderr
