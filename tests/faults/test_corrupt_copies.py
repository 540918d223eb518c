"""Fault 5 of the fault probe: a corrupt entry-log copy. The bookie answers EIO as before, but
now logs the corruption once (entry, ledger, log file and offset) and counts it in
``pybkx_storage_corrupt_reads``; when every copy is corrupt the client's error says so and names
each bookie, instead of a bare "not available"."""

from __future__ import annotations

import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from pybkx import errors
from pybkx.client import BookKeeper
from pybkx.tools.sandbox import Sandbox

pytestmark = [pytest.mark.integration, pytest.mark.faults]


def payload(entry_id: int) -> bytes:
    return f"distinct-payload-{entry_id:04d}|".encode() * 8


def corrupt_in_entry_logs(bookie_dir: Path, needle: bytes) -> int:
    """Flip a byte of ``needle`` wherever it sits in the bookie's entry logs; how many."""
    flipped = 0
    for path in (bookie_dir / "ledgers").rglob("*"):
        if not path.is_file():
            continue
        data = bytearray(path.read_bytes())
        at = data.find(needle)
        while at != -1:
            data[at + len(needle) // 2] ^= 0xFF
            flipped += 1
            at = data.find(needle, at + len(needle))
        if flipped:
            path.write_bytes(bytes(data))
    return flipped


def corrupt_reads(url: str) -> float:
    with urllib.request.urlopen(f"{url}/metrics", timeout=30) as response:
        text = response.read().decode()
    for family in text_string_to_metric_families(text):
        if family.name == "pybkx_storage_corrupt_reads":
            return sum(s.value for s in family.samples)
    return 0.0


def test_every_copy_corrupt_is_reported_as_such_and_logged_once(tmp_path: Path) -> None:
    with Sandbox(3, directory=tmp_path / "sandbox", conf={"zkTimeout": 2000}) as sandbox:
        uri = sandbox.metadata_uri
        with BookKeeper(uri, zkTimeout=2000) as bk:
            lh = bk.create_ledger(3, 3, 3, password=b"pw")
            lh.append_many([payload(e) for e in range(10)])
            lh.close()
        for i in range(3):
            sandbox.stop_bookie(i)
            assert corrupt_in_entry_logs(sandbox.directory / f"bookie-{i}", payload(5)) == 1
            sandbox.restart_bookie(i)
        with BookKeeper(uri, zkTimeout=2000, batchReadEnabled=False) as bk:
            rh = bk.open_ledger(lh.ledger_id, b"pw")
            assert [e.payload for e in rh.read(0, 4)] == [payload(e) for e in range(5)]
            for _ in range(2):
                with pytest.raises(errors.DigestMatchException) as caught:
                    rh.read(5, 5)
                message = str(caught.value)
                assert "every copy is corrupt" in message
                for address in sandbox.bookie_addresses:
                    assert f"{address}: EIO" in message
            assert [e.payload for e in rh.read(6, 9)] == [payload(e) for e in range(6, 10)]
        for i, url in enumerate(sandbox.admin_urls):
            assert corrupt_reads(url) >= 2
            log = sandbox.log_path(i).read_text(errors="replace")
            lines = [line for line in log.splitlines() if "corrupt entry copy" in line]
            assert len(lines) == 1, lines
            assert f"entry 5 of ledger {lh.ledger_id} at" in lines[0]
