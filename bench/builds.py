"""Before and after: this tree's pybkx beside another build of pybkx (an earlier commit, say) and
the real Apache BookKeeper bookie, in one run. ``python -m bench.builds --other DIR`` where DIR
is a source tree whose ``python/pybkx`` holds a built extension.

Owns the A/B plan and its report; it must never assert on timings, and it sends traffic only to
the processes it started on loopback.

Two parts, rounds alternating the order of the systems so that drift of the shared machine hits
all of them:

- bookies: this tree's pybkx bookie, the other build's, and the Java bookie, each driven by the
  same load generator (this tree's ``run_load``): adds of 100 B (1 and 16 ledgers), 1 KiB and
  16 KiB (16 ledgers), single reads and BATCH_READ_ENTRY(100) reads;
- the Python client: the same workload (``append_many``, ``append_async`` windows, single-entry
  ``read``, ``batch_read``) run by each build's client in its own process, against one sandbox of
  this tree's bookies.

Figures are medians over rounds; ratios are medians of per-round ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import machine
from bench.compare import start_java_bookie
from bench.compare_plan import GROUP_COMMIT, READ_LEDGER

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "interop"))

import harness  # noqa: E402

from pybkx._core import run_load  # noqa: E402
from pybkx.tools.sandbox import Sandbox  # noqa: E402

RESULTS = REPO / "bench" / "results"
ADD_CASES = ((100, 1), (100, 16), (1024, 16), (16384, 16))


@dataclass
class Figures:
    """Per system, per case: one figure per round."""

    rates: dict[str, dict[str, list[float]]] = field(default_factory=dict)

    def add(self, system: str, case: str, value: float) -> None:
        self.rates.setdefault(system, {}).setdefault(case, []).append(value)

    def median(self, system: str, case: str) -> float:
        values = self.rates.get(system, {}).get(case, [])
        return statistics.median(values) if values else float("nan")

    def ratio(self, a: str, b: str, case: str) -> float:
        pairs = zip(
            self.rates.get(a, {}).get(case, []), self.rates.get(b, {}).get(case, []), strict=False
        )
        ratios = [x / y for x, y in pairs if y]
        return statistics.median(ratios) if ratios else float("nan")


def start_pybkx(workdir: Path, pythonpath: Path | None) -> tuple[harness.Process, str]:
    """A standalone pybkx bookie of this tree (``pythonpath`` None) or of another build."""
    conf = "".join(f"{k}={v}\n" for k, v in GROUP_COMMIT.items())
    return harness.start_pybkx_bookie(workdir, conf, pythonpath=pythonpath)


def bookie_rounds(
    rounds: int, bookies: dict[str, str], counts: dict[int, int], reads: int, figures: Figures
) -> None:
    for system, address in bookies.items():  # entries for the read runs, written once
        report = run_load(address, "add", ledger_id=READ_LEDGER, count=reads, in_flight=1000)
        if report["entries"] != reads:
            raise harness.HarnessError(f"{system}: preparing reads failed: {report}")
    next_ledger = 1000
    order = list(bookies)
    for rnd in range(rounds):
        for system in order if rnd % 2 == 0 else reversed(order):
            address = bookies[system]
            for size, ledgers in ADD_CASES:
                report = run_load(
                    address,
                    "add",
                    ledger_id=next_ledger,
                    ledgers=ledgers,
                    count=counts[size],
                    payload_size=size,
                    in_flight=1000,
                )
                next_ledger += ledgers
                figures.add(
                    system, f"add {size} B x{ledgers}", report["entries"] / report["seconds"]
                )
            report = run_load(address, "read", ledger_id=READ_LEDGER, count=reads, in_flight=64)
            figures.add(system, "single reads", report["entries"] / report["seconds"])
            report = run_load(
                address, "read", ledger_id=READ_LEDGER, count=reads, in_flight=64, batch=100
            )
            figures.add(system, "batch reads x100", report["entries"] / report["seconds"])
            print(f"  round {rnd + 1}: {system} bookie done", flush=True)


CLIENT_SCRIPT = textwrap.dedent(
    """
    import json, sys, time
    from pybkx.client import BookKeeper
    uri, count = sys.argv[1], int(sys.argv[2])
    out = {}
    payload = b"x" * 100
    with BookKeeper(uri) as bk:
        lh = bk.create_ledger(3, 3, 2)
        t = time.perf_counter()
        lh.append_many([payload] * count)
        out["append_many"] = count / (time.perf_counter() - t)
        t = time.perf_counter()
        window = []
        for _ in range(count):
            window.append(lh.append_async(payload))
            if len(window) >= 1000:
                window.pop(0).result()
        for f in window:
            f.result()
        out["append_async"] = count / (time.perf_counter() - t)
        n = min(count, 5000)
        t = time.perf_counter()
        for i in range(n):
            lh.read(i, i)
        out["read one entry"] = n / (time.perf_counter() - t)
        t = time.perf_counter()
        got = 0
        while got < 2 * count:
            got += len(lh.batch_read(got, 1000, 1 << 20))
        out["batch_read"] = got / (time.perf_counter() - t)
        lh.close()
    print(json.dumps(out))
    """
)


def client_rounds(
    rounds: int, uri: str, builds: dict[str, Path | None], count: int, figures: Figures
) -> None:
    order = list(builds)
    for rnd in range(rounds):
        for system in order if rnd % 2 == 0 else reversed(order):
            env = dict(os.environ)
            path = builds[system]
            if path is not None:
                env["PYTHONPATH"] = str(path)
            done = subprocess.run(
                [sys.executable, "-c", CLIENT_SCRIPT, uri, str(count)],
                capture_output=True,
                text=True,
                env=env,
                timeout=600,
                check=False,
            )
            if done.returncode != 0:
                raise harness.HarnessError(f"{system} client failed:\n{done.stderr[-3000:]}")
            for case, rate in json.loads(done.stdout.splitlines()[-1]).items():
                figures.add(system, f"client {case}", rate)
            print(f"  round {rnd + 1}: {system} client done", flush=True)


@contextmanager
def processes(root: Path, other: Path) -> Iterator[dict[str, str]]:
    started: list[harness.Process] = []
    try:
        classpath = harness.java_classpath()
        zk, zk_address = harness.start_zookeeper(classpath, root)
        started.append(zk)
        addresses: dict[str, str] = {}
        for system, pythonpath in (("now", None), ("before", other)):
            workdir = root / system
            workdir.mkdir()
            process, address = start_pybkx(workdir, pythonpath)
            started.append(process)
            addresses[system] = address
        (root / "java").mkdir()
        java = start_java_bookie(classpath, zk_address, root / "java")
        started.append(java.process)
        addresses["java"] = java.address
        yield addresses
    finally:
        for process in reversed(started):
            process.stop()


def render(figures: Figures, meta: dict[str, Any]) -> str:
    cases = [c for c in figures.rates.get("now", {}) if c in figures.rates.get("before", {})]
    lines = [
        "# pybkx now beside an earlier build (and the Java bookie), one run",
        "",
        f"{meta['started']}; {meta['rounds']} rounds; other build: `{meta['other']}`; "
        f"machine: {meta['machine'].get('cpu', '?')}",
        "",
        "| case | now /s | before /s | now / before | now / Java | before / Java |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for case in cases:
        java = case in figures.rates.get("java", {})
        lines.append(
            f"| {case} | {figures.median('now', case):,.0f} | "
            f"{figures.median('before', case):,.0f} | {figures.ratio('now', 'before', case):.2f} | "
            + (f"{figures.ratio('now', 'java', case):.2f} | " if java else "- | ")
            + (f"{figures.ratio('before', 'java', case):.2f} |" if java else "- |")
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.builds", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--other", type=Path, required=True, help="the other build's source tree")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="smaller counts")
    parser.add_argument("--out", type=Path, default=RESULTS / "builds")
    args = parser.parse_args(argv)
    other = (args.other / "python").resolve()
    if not (other / "pybkx").is_dir():
        parser.error(f"{other / 'pybkx'} is not a pybkx package")
    counts = (
        {100: 50_000, 1024: 50_000, 16384: 5_000}
        if args.quick
        else {
            100: 200_000,
            1024: 200_000,
            16384: 25_000,
        }
    )
    reads = 200_000 if args.quick else 1_000_000
    client_count = 20_000 if args.quick else 100_000
    figures = Figures()
    meta: dict[str, Any] = {
        "started": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "rounds": args.rounds,
        "other": str(args.other),
    }
    root = Path(tempfile.mkdtemp(prefix="pybkx-builds-"))
    meta["machine"] = machine.describe(root)
    t0 = time.perf_counter()
    try:
        print("bookies: now, before, java", flush=True)
        with processes(root, other) as addresses:
            bookie_rounds(args.rounds, addresses, counts, reads, figures)
        print("clients: now, before (one sandbox of this tree's bookies)", flush=True)
        with Sandbox(3, directory=root / "sandbox") as sandbox:
            client_rounds(
                args.rounds,
                sandbox.metadata_uri,
                {"now": None, "before": other},
                client_count,
                figures,
            )
    except harness.HarnessError as exc:
        print(f"bench.builds: {exc}", file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(root, ignore_errors=True)
    meta["seconds"] = time.perf_counter() - t0
    text = render(figures, meta)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".md").write_text(text)
    args.out.with_suffix(".json").write_text(
        json.dumps({"meta": meta, "rates": figures.rates}, indent=2)
    )
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
