"""Healing a lost bookie (``pybkx shell recover``'s engine) beside the disk's own sequential
write limit, in the same run.

Owns this measurement (a script, run by hand or by `make bench-recovery`); must never assert on
timings. A sandbox of `--bookies` pybkx bookie processes on loopback, its directories under
`--dir` (default: a temporary directory on the same disk as /tmp); `--ledgers` closed ledgers
(E=3, Qw=2, Qa=2) of `--entry-size` byte entries, `--megabytes` in all, written first; then the
bookie named in the most ensembles is SIGKILLed for good and `recover_bookies` heals its
ledgers, while a client makes synchronous 1 KiB adds to another ledger: their p99 latency during
the healing beside the 3 s before it, and the CPU seconds each role used in both windows (the
bookies, the healer, the probe client, the whole machine; from /proc). The disk limit is
measured in the same directory right before: half of `--megabytes` written in 1 MiB blocks and
fdatasync'ed once (what a journal and an entry log each must write). With `--java` the metadata
is in ZooKeeper and the same fill and kill are done twice: healed once by pybkx and once by
Apache BookKeeper's own `bookkeeper shell recover` (BookKeeperAdmin, the engine of its
replication workers), less the time the same shell takes to start and list the bookies.
`--rounds N` repeats all of it on fresh clusters and reports the medians: one round's p99 rise
rests on a few dozen slow adds and moves a lot from run to run on a shared machine.

    python bench/recovery_speed.py [--megabytes 512] [--entry-size 65536] [--ledgers 64] [--java]
        [--rate-mb MB] [--parallel N] [--rounds N] [--cold] [--set KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "interop"))

import harness  # noqa: E402

from bench import cli, machine  # noqa: E402
from pybkx.client import BookKeeper  # noqa: E402
from pybkx.recovery import RecoveryOptions, recover_bookies  # noqa: E402
from pybkx.tools.sandbox import Sandbox  # noqa: E402

MB = 1_000_000


class CpuMeter:
    """CPU seconds by role between ``start`` and ``stop``: the bookies, the healer (this
    process, or the Java shell's JVM: the rest of the machine then), the probe client and the
    whole machine."""

    def __init__(self, bookie_pids: list[int], probe_pid: int | None) -> None:
        self.roles = {"bookies": bookie_pids, "healer": [os.getpid()], "probe": []}
        if probe_pid is not None:
            self.roles["probe"] = [probe_pid]
        self.began: dict[str, float] = {}
        self.used: dict[str, float] = {}

    def _now(self) -> dict[str, float]:
        now = {role: sum(_cpu_s(p) for p in pids) for role, pids in self.roles.items()}
        now["machine"] = machine.machine_busy_seconds()
        now["wall"] = time.monotonic()
        return now

    def start(self) -> None:
        self.began = self._now()

    def stop(self) -> None:
        end = self._now()
        self.used = {role: round(end[role] - self.began[role], 2) for role in end}


def _cpu_s(pid: int) -> float:
    """A process's CPU seconds so far; 0 once it is gone (a bookie that died mid-window)."""
    try:
        return machine.cpu_seconds(pid)
    except OSError:
        return 0.0


#: The probe client when it runs apart: synchronous 1 KiB appends, one "start latency" line each
#: (CLOCK_MONOTONIC is system-wide, so the parent compares the starts with its own clock).
PROBE_SCRIPT = """
import sys, time
from pybkx.client import BookKeeper
with BookKeeper(sys.argv[1]) as bk:
    lh = bk.create_ledger(2, 2, 2)
    body = b"p" * 1024
    print("ready", flush=True)
    while True:
        started = time.monotonic()
        lh.append(body)
        print(f"{started:.6f} {time.monotonic() - started:.6f}", flush=True)
"""


class AddLatencyProbe:
    """Synchronous 1 KiB appends, each latency kept with its start: what a client sees. By
    default the client is its own process, as an application would be (in the healer's process
    its completions would also wait for the healer's hold of the GIL); ``in_process`` runs it on
    a thread of this one."""

    def __init__(self, bk: BookKeeper, uri: str, in_process: bool) -> None:
        self.samples: list[tuple[float, float]] = []
        self.stop = threading.Event()
        self.child: subprocess.Popen[str] | None = None
        if in_process:
            handle = bk.create_ledger(2, 2, 2)
            self.thread = threading.Thread(target=self._run_here, args=(handle,), daemon=True)
        else:
            self.child = subprocess.Popen(
                [sys.executable, "-c", PROBE_SCRIPT, uri], stdout=subprocess.PIPE, text=True
            )
            assert self.child.stdout is not None
            if self.child.stdout.readline().strip() != "ready":
                raise RuntimeError("the probe client did not start")
            self.thread = threading.Thread(target=self._collect, daemon=True)
        self.thread.start()

    def _run_here(self, handle: object) -> None:
        body = b"p" * 1024
        while not self.stop.is_set():
            started = time.monotonic()
            handle.append(body)  # type: ignore[attr-defined]
            self.samples.append((started, time.monotonic() - started))

    def _collect(self) -> None:
        assert self.child is not None and self.child.stdout is not None
        for line in self.child.stdout:
            started, latency = line.split()
            self.samples.append((float(started), float(latency)))

    def window(self, seconds: float | None = None, until: threading.Event | None = None) -> float:
        """p99 (ms) of the adds started during the next ``seconds`` or until ``until`` is set."""
        begin = time.monotonic()
        if until is not None:
            until.wait()
        else:
            time.sleep(seconds or 0)
        end = time.monotonic()
        time.sleep(0.5)  # the adds started before ``end`` finish and are reported
        got = sorted(latency for started, latency in list(self.samples) if begin <= started < end)
        return 1000 * got[int(0.99 * (len(got) - 1))] if got else float("nan")

    def close(self) -> None:
        self.stop.set()
        if self.child is not None:
            self.child.kill()
            self.child.wait()
        self.thread.join()


def fill(bk: BookKeeper, ledgers: int, total: int, entry_size: int) -> list[int]:
    body = os.urandom(entry_size)
    per_ledger = max(1, total // ledgers // entry_size)
    ids = []
    for _ in range(ledgers):
        lh = bk.create_ledger(3, 2, 2)
        for first in range(0, per_ledger, 256):
            lh.append_many([body] * min(256, per_ledger - first))
        lh.close()
        ids.append(lh.ledger_id)
    return ids


def java_shell(classpath: str, uri: str, workdir: Path, *command: str) -> float:
    """Run BookKeeper's own ``bookkeeper shell COMMAND`` on the cluster; its wall seconds, JVM
    start included. Raises RuntimeError when it fails."""
    conf = workdir / "java-shell.conf"
    conf.write_text(f"metadataServiceUri={uri}\nuseV2WireProtocol=true\nzkTimeout=10000\n")
    argv = harness.java_argv(classpath, "org.apache.bookkeeper.bookie.BookieShell", heap="1g")
    argv += ["-conf", str(conf), *command]
    started = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=3600, check=False)
    seconds = time.monotonic() - started
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-30:])
        raise RuntimeError(f"BookKeeper's shell {command} failed ({done.returncode}):\n{tail}")
    return seconds


def run(args: argparse.Namespace, system: str, zk: str | None, classpath: str | None) -> dict:
    """One cluster filled, a bookie killed for good, healed by ``system`` (pybkx or java); its
    directories (gigabytes) are removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="pybkx-bench-recovery-", dir=args.dir) as tmp:
        return run_in(args, system, zk, classpath, Path(tmp))


def run_in(
    args: argparse.Namespace, system: str, zk: str | None, classpath: str | None, base: Path
) -> dict:
    total = args.megabytes * MB
    zk_uri = f"zk+hierarchical://{zk}/bench-{uuid.uuid4().hex[:12]}/ledgers" if zk else None
    with (
        Sandbox(
            args.bookies, directory=base / "sandbox", zk_uri=zk_uri, conf=args.settings
        ) as sandbox,
        BookKeeper(sandbox.metadata_uri) as bk,
    ):
        started = time.monotonic()
        ids = fill(bk, args.ledgers, total, args.entry_size)
        write_s = time.monotonic() - started
        counts = collections.Counter(
            b for i in ids for b in bk.store.read_ledger_metadata(i).value.last_ensemble
        )
        victim = counts.most_common(1)[0][0]
        affected = counts[victim]
        disk = total // 2 / machine.disk_write_synced_once(base, total // 2, 1 << 20)
        lost = sandbox.bookie_addresses.index(bk.address_of(victim))
        sandbox.kill_bookie(lost)
        sandbox.wait_unregistered([lost])
        if args.cold:
            # As when a bookie dies long after its data was written: the survivors' copies are
            # read from the disk, not from the page cache the fill left behind.
            machine.drop_cache(base / "sandbox")
        probe = AddLatencyProbe(bk, sandbox.metadata_uri, args.probe_in_process)
        live = [p for i in range(args.bookies) if i != lost and (p := sandbox.pid(i)) is not None]
        probe_pid = probe.child.pid if probe.child is not None else None
        cpu_before = CpuMeter(live, probe_pid)
        cpu_before.start()
        p99_before = probe.window(seconds=3.0)
        cpu_before.stop()
        finished = threading.Event()
        during: list[float] = []
        watcher = threading.Thread(target=lambda: during.append(probe.window(until=finished)))
        watcher.start()
        cpu = CpuMeter(live, probe_pid)
        cpu.start()
        try:
            seconds, ok, healed_ledgers, copied = heal(
                system, args, bk, sandbox.metadata_uri, base, classpath, victim, ids, affected
            )
        finally:
            cpu.stop()
            finished.set()
            watcher.join()
            probe.close()
    # The lost bookie's share: the bytes of the ledgers it held, one copy each (Qw=2 of E=3:
    # each entry it held is copied once). pybkx reports what it copied; Java is given the same.
    per_ledger = max(1, total // args.ledgers // args.entry_size) * args.entry_size
    if copied is None:
        copied = int(affected * per_ledger * 2 / 3)
    healed = copied / seconds if seconds else 0.0
    return {
        "system": system,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
        "metadata": "zookeeper" if zk else "embedded",
        "bookies": args.bookies,
        "ledgers": len(ids),
        "ledgers_on_lost_bookie": affected,
        "entry_size": args.entry_size,
        "written_mb": round(total / MB),
        "write_mb_s": round(total / MB / write_s, 1),
        "disk_seq_write_mb_s": round(disk / MB, 1),
        "healed_ledgers": healed_ledgers,
        "healed_mb": round(copied / MB, 1),
        "heal_seconds": round(seconds, 2),
        "heal_mb_s": round(healed / MB, 1),
        "heal_of_disk_limit": round(healed / disk, 3),
        "client_add_p99_ms_before": round(p99_before, 2),
        "client_add_p99_ms_during": round(during[0], 2),
        "p99_during_over_before": round(during[0] / p99_before, 2),
        "rate_limit_mb_s": args.rate_mb if system == "pybkx" else None,
        "parallel_ledgers": args.parallel if system == "pybkx" else None,
        "cold": args.cold,
        "settings": args.set,
        # CPU seconds by role over the 3 s before and while healing, and the wall seconds they
        # were counted over: "machine" / "wall" is how many cores were busy on average.
        "cpu_s_before": cpu_before.used,
        "cpu_s_while_healing": cpu.used,
        "ok": ok,
    }


def heal(
    system: str,
    args: argparse.Namespace,
    bk: BookKeeper,
    uri: str,
    base: Path,
    classpath: str | None,
    victim: str,
    ids: list[int],
    affected: int,
) -> tuple[float, bool, int, int | None]:
    """Heal the lost ``victim`` (in ``affected`` of the ledgers ``ids``) with ``system``: its
    seconds, whether every ledger was healed, how many ledgers it healed and the bytes it copied
    (Java's shell says neither: the ``affected`` ledgers count, and None)."""
    if system == "java":
        assert classpath is not None
        # BookKeeperAdmin's recoverBookieData: the engine its replication workers use.
        seconds = java_shell(classpath, uri, base, "recover", "-f", victim)
        # What starting the JVM and connecting costs, to take off.
        seconds -= java_shell(classpath, uri, base, "listbookies", "-rw")
        ok = not any(
            victim in ensemble
            for i in ids
            for ensemble in bk.store.read_ledger_metadata(i).value.ensembles.values()
        )
        return seconds, ok, affected, None
    rate = int(args.rate_mb * MB) if args.rate_mb else None
    options = RecoveryOptions(rate_bytes_per_s=rate, parallel_ledgers=args.parallel)
    report = recover_bookies(bk, [victim], options)
    return report.seconds, report.ok, len(report.healed), report.bytes_copied


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bookies", type=int, default=5)
    parser.add_argument("--megabytes", type=int, default=512)
    parser.add_argument("--entry-size", type=int, default=64 << 10)
    parser.add_argument("--ledgers", type=int, default=64)
    parser.add_argument("--rate-mb", type=float, default=None, help="replicationRateByBytes")
    parser.add_argument(
        "--parallel", type=int, default=6, help="ledgers copied at once (shell recover's -p)"
    )
    parser.add_argument(
        "--java",
        action="store_true",
        help="also heal the same data with BookKeeper's own shell recover (metadata in ZooKeeper)",
    )
    parser.add_argument(
        "--probe-in-process",
        action="store_true",
        help="run the latency probe's client on a thread of the healer's process",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="fresh clusters filled, killed and healed in turn (with --java the order of the "
        "two systems alternates); medians of the rounds are reported",
    )
    parser.add_argument(
        "--cold",
        action="store_true",
        help="drop the bookies' files from the page cache before healing (the data is old)",
    )
    cli.add_settings_option(
        parser, help="a setting for every bookie (e.g. journalMaxSizeMB=64; repeatable)"
    )
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    args.settings = cli.settings_of(parser, args.set)
    systems = ("pybkx", "java") if args.java else ("pybkx",)
    results: list[dict] = []
    with contextlib.ExitStack() as stack:
        zk_address = classpath = None
        if args.java:
            classpath = harness.java_classpath()
            tmp = stack.enter_context(
                tempfile.TemporaryDirectory(prefix="pybkx-bench-recovery-zk-", dir=args.dir)
            )
            zk, zk_address = harness.start_zookeeper(classpath, Path(tmp))
            stack.callback(zk.stop)
        for round_no in range(args.rounds):
            for system in systems if round_no % 2 == 0 else systems[::-1]:
                results.append(run(args, system, zk_address, classpath) | {"round": round_no})
                print(json.dumps(results[-1], indent=2), flush=True)
    summary = summarize(results, systems)
    print(json.dumps(summary, indent=2))
    if args.json:
        report: object = results[0] if len(results) == 1 else {"runs": results, "summary": summary}
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0 if all(r["ok"] for r in results) else 1


def summarize(results: list[dict], systems: tuple[str, ...]) -> dict:
    """Per system: the rounds' healing speeds and p99 rises, and their medians; with Java, the
    median of the per-round pybkx/Java speed ratios (rounds pair up in the order they ran)."""
    summary: dict[str, object] = {}
    for system in systems:
        runs = [r for r in results if r["system"] == system]
        speeds = [r["heal_mb_s"] for r in runs]
        rises = [r["p99_during_over_before"] for r in runs]
        summary[system] = {
            "heal_mb_s": speeds,
            "p99_during_over_before": rises,
            "median_heal_mb_s": statistics.median(speeds),
            "median_p99_during_over_before": statistics.median(rises),
        }
    if len(systems) == 2:
        pairs = zip(
            (r for r in results if r["system"] == "pybkx"),
            (r for r in results if r["system"] == "java"),
            strict=True,
        )
        ratios = [p["heal_mb_s"] / max(j["heal_mb_s"], 0.1) for p, j in pairs]
        summary["pybkx_over_java_heal_mb_s"] = round(statistics.median(ratios), 2)
    return summary


if __name__ == "__main__":
    sys.exit(main())
