"""The scrubber in a running cluster: bit flips and a truncated entry log injected into one
bookie's files are found by its background scrubber within a bound, counted in its metrics,
logged once per damaged entry, and repaired from the other replicas; a client reading that
bookie meanwhile gets either whole entries or an error, never bad bytes. Also BookKeeper's
``localconsistencycheck`` shell command and ``localConsistencyCheckOnStartup``.

Owns scrub detection in a bookie process and repair; the storage's checks and pacing alone are
tests/storage/test_storage_scrub.py's."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.bookies import assert_one_line_failure, storage_of, write_conf
from support.bookies import start_bookie as start_bookie
from support.ports import free_port
from support.wait import wait_until

from pybkx import errors
from pybkx._core import BookieClient, DigestManager
from pybkx.client import BookKeeper
from pybkx.config import ClientConfig
from pybkx.tools.sandbox import Sandbox

pytestmark = pytest.mark.integration

ENTRIES = 300
PAYLOAD = 4000
PASSWORD = b"pw"
FOUND_WITHIN_S = 60.0
CLIENT = {"addEntryTimeoutSec": 5, "readEntryTimeoutSec": 5, "zkTimeout": 4000}


def body(entry_id: int) -> bytes:
    return bytes([entry_id % 251]) * PAYLOAD


@pytest.fixture
def sandbox(tmp_path: Path) -> Iterator[Sandbox]:
    conf = {
        "zkTimeout": 2000,
        "logSizeLimit": 256 * 1024,
        "scrubIntervalSeconds": 1,
        "scrubRateBytesPerSecond": 16 << 20,
        # The scrubber's own repairs are under test: the cross-replica check of the same cycle
        # would rewrite the damaged copies first (they read as missing), and its own tests
        # are tests/recovery/test_cross_replica.py.
        "crossReplicaCheckEnabled": False,
    }
    with Sandbox(3, directory=tmp_path / "sandbox", conf=conf) as sandbox:
        yield sandbox


def scrub_status(sandbox: Sandbox, index: int) -> dict[str, Any]:
    url = f"{sandbox.admin_urls[index]}/api/v1/bookie/scrub"
    with urllib.request.urlopen(url, timeout=30) as response:
        status: dict[str, Any] = json.loads(response.read())
    return status


def metrics_of(sandbox: Sandbox, index: int) -> str:
    with urllib.request.urlopen(f"{sandbox.admin_urls[index]}/metrics", timeout=30) as response:
        text: str = response.read().decode()
    return text


def metric(text: str, name: str) -> float:
    return sum(
        float(m.group(1)) for m in re.finditer(rf"^{name}(?:{{[^}}]*}})? (\S+)$", text, re.M)
    )


def entry_logs(ledgers_dir: Path) -> list[Path]:
    """The entry logs (``<hex id>.log``; not ``index.log``), oldest first."""
    logs = [p for p in (ledgers_dir / "current").glob("*.log") if p.stem != "index"]
    return sorted(logs, key=lambda p: int(p.stem, 16))


def inject(ledgers_dir: Path) -> tuple[str, str]:
    """Bit flips in one entry log, another cut in half; their names."""
    logs = entry_logs(ledgers_dir)
    assert len(logs) >= 4, logs
    flipped, truncated = logs[1], logs[2]
    with flipped.open("r+b") as f:
        for offset in (40_000, 90_000, 150_000):
            f.seek(offset)
            byte = f.read(1)
            f.seek(offset)
            f.write(bytes([byte[0] ^ 0x04]))
    with truncated.open("r+b") as f:
        f.truncate(truncated.stat().st_size // 2)
    return flipped.name, truncated.name


class VictimReader:
    """Reads every entry from one bookie in a loop and checks each answer's digest: counts
    whole entries, errors, and bad bytes served (which must stay 0)."""

    def __init__(self, address: str, ledger_id: int) -> None:
        self.address = address
        self.ledger_id = ledger_id
        self.digest = DigestManager(ledger_id, PASSWORD, "CRC32C")
        self.counts: Counter[str] = Counter()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        client = BookieClient(ClientConfig.of(readEntryTimeoutSec=5))
        try:
            while not self.stop.is_set():
                for e in range(ENTRIES):
                    try:
                        data = client.read(self.address, self.ledger_id, e).result(10)
                    except errors.BKException:
                        self.counts["error"] += 1
                        continue
                    try:
                        self.digest.verify(data, e)
                        self.counts["whole"] += 1
                    except errors.DigestMatchException:
                        self.counts["bad bytes served"] += 1
        finally:
            client.close()


def settled_repairs(sandbox: Sandbox, index: int) -> tuple[dict[str, Any], str]:
    """The scrub status and the metrics of bookie ``index`` once its repair count stands still
    between two looks half a second apart and its metric agrees (repairs of findings already
    queued may still go on after a run found nothing new)."""
    seen: list[int] = []

    def settled() -> tuple[dict[str, Any], str] | None:
        now = scrub_status(sandbox, index)
        text = metrics_of(sandbox, index)
        count = now["repairs"]["repaired"]
        still = bool(seen) and seen[-1] == count
        seen.append(count)
        if still and metric(text, "pybkx_scrub_repaired_entries") == count:
            return now, text
        return None

    found: tuple[dict[str, Any], str] = wait_until(
        settled, "the repairs settled", timeout_s=FOUND_WITHIN_S, interval_s=0.5
    )
    return found


def test_damaged_entries_are_found_logged_once_and_repaired_and_never_served(
    sandbox: Sandbox,
) -> None:
    with BookKeeper(sandbox.metadata_uri, **CLIENT) as bk:
        lh = bk.create_ledger(3, 3, 3, password=PASSWORD)
        lh.append_many([body(e) for e in range(ENTRIES)])
        lh.close()
        victim = 0
        # Injected with the bookie stopped: its clean stop seals the logs and checkpoints the
        # index, so nothing it writes later races the injected damage (a live bookie's flush
        # could append to the same file while the test truncates it).
        sandbox.stop_bookie(victim)
        flipped, truncated = inject(sandbox.directory / "bookie-0" / "ledgers")
        sandbox.restart_bookie(victim)
        reader = VictimReader(sandbox.bookie_addresses[victim], lh.ledger_id)
        reader.thread.start()
        try:
            status = wait_until(
                lambda: scrub_status(sandbox, victim),
                "the damaged entries found and repaired",
                timeout_s=FOUND_WITHIN_S,
                interval_s=0.5,
                accept=lambda s: (
                    s["repairs"]["repaired"] >= 4
                    and s["last_run"] is not None
                    and s["last_run"]["corrupt_entries"] == 0
                ),
            )
        finally:
            reader.stop.set()
            reader.thread.join(60)
        assert reader.counts["bad bytes served"] == 0, reader.counts
        assert reader.counts["whole"] > 0, reader.counts
        status, text = settled_repairs(sandbox, victim)
        assert status["repairs"]["unrepairable"] == 0, status
        repaired = status["repairs"]["repaired"]
        assert metric(text, "pybkx_scrub_corrupt_entries") >= repaired
        assert metric(text, "pybkx_scrub_entries_verified") >= ENTRIES
        assert metric(text, "pybkx_scrub_bytes") >= ENTRIES * PAYLOAD
        assert metric(text, "pybkx_scrub_repaired_entries") == repaired

        # Logged once per damaged entry, though several runs read it before its repair.
        log = sandbox.log_path(victim).read_text(errors="replace")
        damaged = re.findall(
            r"scrub: entry (\d+) of ledger (\d+) is damaged \((\w+)\) at (\S+):", log
        )
        per_entry = Counter((int(ledger), int(entry)) for entry, ledger, _, _ in damaged)
        assert per_entry and max(per_entry.values()) == 1, per_entry
        assert {name for _, _, _, name in damaged} == {flipped, truncated}
        assert {tuple(pair) for pair in status["repairs"]["repaired_entries"]} == set(per_entry)

        # A run asked for through the admin API finds nothing left.
        request = urllib.request.Request(
            f"{sandbox.admin_urls[victim]}/api/v1/bookie/scrub", method="POST", data=b""
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            assert response.status == 200
        status = wait_until(
            lambda: scrub_status(sandbox, victim),
            "the scrub asked for finished",
            timeout_s=FOUND_WITHIN_S,
            interval_s=0.2,
            accept=lambda s: not s["running"],
        )
        assert status["last_run"]["complete"] and status["last_run"]["corrupt_entries"] == 0

        # The victim alone serves every entry whole again.
        raw = BookieClient(ClientConfig.of(readEntryTimeoutSec=5))
        digest = DigestManager(lh.ledger_id, PASSWORD, "CRC32C")
        try:
            for e in range(ENTRIES):
                data = raw.read(sandbox.bookie_addresses[victim], lh.ledger_id, e).result(10)
                assert digest.verify(data, e).payload == body(e)
        finally:
            raw.close()


def _run_check(conf: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pybkx", "shell", "localconsistencycheck", "--conf", str(conf)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_localconsistencycheck_and_the_check_on_startup(tmp_path: Path, start_bookie: Any) -> None:
    port = free_port()
    conf = write_conf(tmp_path, port)
    storage = storage_of(conf)
    dm = DigestManager(9, PASSWORD, "CRC32C")
    for e in range(200):
        storage.add_entry(9, e, dm.package(e, e - 1, 0, body(e)), master_key=b"k")
    storage.close()

    run = _run_check(conf)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "=== Performing local consistency check ===" in run.stdout
    assert "=== Check passed ===" in run.stdout

    logs = entry_logs(tmp_path / "ledgers")
    with logs[0].open("r+b") as f:
        f.seek(50_000)
        byte = f.read(1)
        f.seek(50_000)
        f.write(bytes([byte[0] ^ 0x80]))
    run = _run_check(conf)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "=== Check returned errors: ===" in run.stdout
    assert re.search(rf"^Ledger 9, entry \d+: record_\w+ at {logs[0].name}:\d+$", run.stdout, re.M)

    checked = tmp_path / "checked.conf"
    checked.write_text(conf.read_text() + "localConsistencyCheckOnStartup=true\n")
    bookie = start_bookie("--conf", str(checked))
    assert_one_line_failure(bookie, "local consistency check", "damaged entries")
