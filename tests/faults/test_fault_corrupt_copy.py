"""Fault 5: a corrupt entry-log copy. The bookie logs it once (file, offset, ledger, entry),
counts it (``pybkx_storage_corrupt_entries``) and answers EIO, as BookKeeper answers an entry it
cannot read; the client reads another replica, and when every copy is corrupt its error says so
and names the bookies (it used to say only that a bookie was not available).

Owns reads of damaged stored copies through real bookie processes (a sandbox), files damaged
while the bookies are stopped.
"""

from __future__ import annotations

import urllib.request
from pathlib import Path

import pytest
from support.wait import wait_until

import pybkx
from pybkx import errors
from pybkx.tools.sandbox import Sandbox

SMALL_BOOKIE = {"journalPreAllocSizeMB": 1, "flushInterval": 0, "zkTimeout": 2000}
PASSWORD = b"pw"
ENTRIES = 12
ONE_BAD_COPY = 3  # corrupt on bookie 0 only
ALL_BAD_COPIES = 7  # corrupt on both bookies


def payload(entry_id: int) -> bytes:
    return f"<fault-5 entry {entry_id:04d}>".encode() * 40


def corrupt_copy(bookie_dir: Path, data: bytes) -> Path:
    """Flip one byte in the middle of ``data`` in the entry log that holds it; the file."""
    for log in sorted((bookie_dir / "ledgers").rglob("*.log")):
        content = bytearray(log.read_bytes())
        at = content.find(data)
        if at >= 0:
            content[at + len(data) // 2] ^= 0xFF
            log.write_bytes(bytes(content))
            return log
    pytest.fail(f"no entry log under {bookie_dir} holds the entry")


def corruption_lines(log_path: Path, awaited: str) -> list[str]:
    """The bookie log's corrupt-copy lines, once one naming ``awaited`` is there (at most 30 s).

    Rust's records reach the log file through a queue the bookie drains when it holds the GIL,
    so a line may be written a moment after the read that logged it was answered.
    """

    def lines() -> list[str]:
        text = log_path.read_text(errors="replace")
        return [line for line in text.splitlines() if "corrupt entry copy" in line]

    return wait_until(
        lines,
        f"a corrupt-copy line naming {awaited}",
        timeout_s=30,
        accept=lambda found: any(awaited in line for line in found),
    )


def metric(admin_url: str, name: str) -> float:
    with urllib.request.urlopen(f"{admin_url}/metrics", timeout=10) as response:
        text = response.read().decode()
    values = [
        float(line.split()[-1])
        for line in text.splitlines()
        if line.startswith(name) and not line.startswith("#")
    ]
    assert values, f"{name} not exported"
    return sum(values)


def test_corrupt_copies_are_logged_counted_and_named_by_the_client(tmp_path: Path) -> None:
    with Sandbox(2, directory=tmp_path / "sandbox", conf=SMALL_BOOKIE) as sandbox:
        with pybkx.BookKeeper(sandbox.metadata_uri) as bk:
            lh = bk.create_ledger(
                ensemble_size=2, write_quorum_size=2, ack_quorum_size=2, password=PASSWORD
            )
            lh.append_many([payload(e) for e in range(ENTRIES)])
            lh.close()
            ledger_id = lh.ledger_id
        for index in range(2):
            assert sandbox.stop_bookie(index) == 0  # checkpointed: the entries are in entry logs
        bookie_dirs = [sandbox.directory / f"bookie-{i}" for i in range(2)]
        corrupt_copy(bookie_dirs[0], payload(ONE_BAD_COPY))
        bad_files = [corrupt_copy(d, payload(ALL_BAD_COPIES)) for d in bookie_dirs]
        for index in range(2):
            sandbox.restart_bookie(index)

        with pybkx.BookKeeper(sandbox.metadata_uri) as bk:
            rh = bk.open_ledger(ledger_id, PASSWORD)
            # One corrupt copy: the other replica answers.
            for _ in range(2):
                assert [bytes(e) for e in rh.read(ONE_BAD_COPY, ONE_BAD_COPY)] == [
                    payload(ONE_BAD_COPY)
                ]
            # Every copy corrupt: the error says so and names both bookies.
            for _ in range(2):
                with pytest.raises(errors.BKException) as failure:
                    rh.read(ALL_BAD_COPIES, ALL_BAD_COPIES)
                message = str(failure.value)
                assert "corrupt" in message, message
                assert "not available" not in message, message
                for address in sandbox.bookie_addresses:
                    assert address in message, message
            rh.close()

        # Each bookie logged each corrupt record once (file, offset, ledger, entry) and counted
        # every read that met one.
        for index, admin_url in enumerate(sandbox.admin_urls):
            lines = corruption_lines(
                sandbox.log_path(index), f"entry {ALL_BAD_COPIES} of ledger {ledger_id}"
            )
            expected = 2 if index == 0 else 1
            assert len(lines) <= expected, "\n".join(lines)
            seven = [
                line for line in lines if f"entry {ALL_BAD_COPIES} of ledger {ledger_id}" in line
            ]
            assert len(seven) == 1, "\n".join(lines)
            assert f"{bad_files[index].name}:" in seven[0], seven[0]
            assert metric(admin_url, "pybkx_storage_corrupt_entries") >= 1
