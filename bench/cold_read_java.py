"""Cold read of an interleaved ledger: a pybkx bookie beside the Java bookie's DbLedgerStorage.

Both bookies (ZooKeeper for the Java one's registration) get the same data from the same load
generator (`pybkx._core.run_load`): 101 ledgers of 4 KiB entries written interleaved. Each bookie
is then restarted (a clean shutdown flushes the Java write cache as our checkpoint does), every
file under its data directory is dropped from the page cache (`posix_fadvise(DONTNEED)`), and one
ledger is read back over the wire: by BATCH_READ_ENTRY (100 entries, one in flight, a scan), and by
single READs (16 in flight), then read again warm (what the wire and client allow). The disk's
sequential read bandwidth is measured in the same run.
Rounds alternate which system goes first. Both run their defaults (the Java bookie: BookKeeper's
launch heap and direct memory, so a 512 MiB write cache; pybkx: 64 MiB).
Not a test (``make bench-cold-read-java``): it never asserts on timings, and it sends traffic
only to the processes it started on loopback.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "interop"))
sys.path.insert(0, str(REPO))

import harness  # noqa: E402

from bench.cli import report_figures, work_dir  # noqa: E402
from bench.compare import start_java_bookie  # noqa: E402
from bench.compare_plan import GROUP_COMMIT  # noqa: E402
from bench.machine import MIB, disk_read_buffered, drop_cache  # noqa: E402
from pybkx._core import run_load  # noqa: E402

DB_STORAGE = "org.apache.bookkeeper.bookie.storage.ldb.DbLedgerStorage"
FIRST_LEDGER = 1000


def start_pybkx(data: Path, port: int) -> harness.Process:
    conf = data.parent / "pybkx-bookie.conf"
    conf.write_text(
        f"bookiePort={port}\njournalDirectories={data / 'journal'}\n"
        f"ledgerDirectories={data / 'ledgers'}\nlisteningInterface=lo\nallowLoopback=true\n"
        + "".join(f"{k}={v}\n" for k, v in GROUP_COMMIT.items())
    )
    executable = Path(sys.executable).with_name("pybkx")
    log = data.parent / f"pybkx-bookie-{time.monotonic_ns()}.log"
    process = harness.Process("pybkx-bookie", [str(executable), "bookie", "--conf", str(conf)], log)
    harness.wait_until(process, lambda: harness.accepts(port), "accepting connections")
    return process


class _Bookies:
    """The two bookies of the run, each started (on the same port and data) when asked."""

    def __init__(self, root: Path, zk_address: str, classpath: str) -> None:
        self._zk_address = zk_address
        self._classpath = classpath
        self.ports = {"pybkx": harness.free_port(), "java": harness.free_port()}
        # The Java bookie keeps its data in <workdir>/java-bookie.
        self.data = {"pybkx": root / "pybkx" / "data", "java": root / "java" / "java-bookie"}
        for d in self.data.values():
            d.mkdir(parents=True)

    def start(self, system: str) -> harness.Process:
        if system == "java":
            extra = (f"ledgerStorageClass={DB_STORAGE}",)
            return start_java_bookie(
                self._classpath,
                self._zk_address,
                self.data["java"].parent,
                self.ports["java"],
                extra,
            ).process
        return start_pybkx(self.data["pybkx"], self.ports["pybkx"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--ledgers", type=int, default=101)
    parser.add_argument("--entries-per-ledger", type=int, default=4000)
    parser.add_argument("--payload", type=int, default=4096)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--dir", default=None)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)

    out: dict[str, Any] = {
        "ledgers": args.ledgers,
        "entries_per_ledger": args.entries_per_ledger,
        "payload": args.payload,
    }
    with work_dir(args.dir, "pybkx-coldj-") as base:
        root = base / "coldj"
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir(parents=True)
        started: list[harness.Process] = []
        try:
            classpath = harness.java_classpath()
            zk, zk_address = harness.start_zookeeper(classpath, root)
            started.append(zk)
            bookies = _Bookies(root, zk_address, classpath)
            for system in bookies.ports:
                out[f"{system}_write_mb_s"] = _fill(bookies, system, args)
            best: dict[str, float] = {}
            for rnd in range(args.rounds):
                systems = list(bookies.ports) if rnd % 2 == 0 else list(reversed(bookies.ports))
                for system in systems:
                    _read_back(bookies, system, args, best)
                logs = sorted(
                    (bookies.data["pybkx"] / "ledgers").rglob("*.log"),
                    key=lambda p: p.stat().st_size,
                )
                drop_cache(bookies.data["pybkx"])
                best["disk"] = max(best.get("disk", 0.0), disk_read_buffered(logs[-1]))
            out |= _figures(best)
        finally:
            for process in reversed(started):
                process.stop()
    return report_figures(out, args.json)


def _fill(bookies: _Bookies, system: str, args: argparse.Namespace) -> float:
    """Write the interleaved ledgers to ``system``'s bookie; its MiB/s."""
    process = bookies.start(system)
    report = run_load(
        f"127.0.0.1:{bookies.ports[system]}",
        "add",
        ledger_id=FIRST_LEDGER,
        ledgers=args.ledgers,
        count=args.ledgers * args.entries_per_ledger,
        payload_size=args.payload,
        in_flight=1000,
    )
    assert report["errors"] == 0, report
    process.stop()
    return round(report["bytes"] / MIB / report["seconds"], 1)


def _read_back(
    bookies: _Bookies, system: str, args: argparse.Namespace, best: dict[str, float]
) -> None:
    """Read the target ledger from a restarted ``system`` bookie, cold and then warm, by batch
    and by single reads; keep each read's best MiB/s over the rounds in ``best``."""
    target = FIRST_LEDGER + args.ledgers // 2
    entries = args.entries_per_ledger
    process = bookies.start(system)
    address = f"127.0.0.1:{bookies.ports[system]}"
    try:
        for mode, kw in (
            ("batch", {"batch": 100, "in_flight": 1}),
            ("single", {"in_flight": 16}),
        ):
            drop_cache(bookies.data[system])
            report = run_load(address, "read", ledger_id=target, count=entries, **kw)
            assert report["errors"] == 0 and report["entries"] == entries, (
                system,
                mode,
                report,
            )
            rate = report["bytes"] / MIB / report["seconds"]
            key = f"{system}_cold_{mode}_mb_s"
            best[key] = max(best.get(key, 0.0), rate)
            # The same read again, from the page cache: what the wire allows.
            report = run_load(address, "read", ledger_id=target, count=entries, **kw)
            rate = report["bytes"] / MIB / report["seconds"]
            key = f"{system}_warm_{mode}_mb_s"
            best[key] = max(best.get(key, 0.0), rate)
    finally:
        process.stop()


def _figures(best: dict[str, float]) -> dict[str, Any]:
    """The best rates, rounded, and the ratios between the systems, the disk and warm reads."""
    out: dict[str, Any] = {"disk_sequential_read_mb_s": round(best.pop("disk"), 1)}
    out |= {k: round(v, 1) for k, v in best.items()}
    disk = out["disk_sequential_read_mb_s"]
    for mode in ("batch", "single"):
        p, j = best[f"pybkx_cold_{mode}_mb_s"], best[f"java_cold_{mode}_mb_s"]
        out[f"{mode}_pybkx_vs_java"] = round(p / j, 2)
        out[f"{mode}_pybkx_vs_disk"] = round(p / disk, 2)
        out[f"{mode}_java_vs_disk"] = round(j / disk, 2)
        out[f"{mode}_pybkx_cold_vs_warm"] = round(p / best[f"pybkx_warm_{mode}_mb_s"], 2)
    return out


if __name__ == "__main__":
    raise SystemExit(main())
