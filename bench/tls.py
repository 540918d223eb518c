"""TLS beside plaintext, in one run: a pybkx bookie and the real Apache BookKeeper 4.17 bookie,
both with TLS configured (BookKeeper's TLSContextFactory keys, one PEM key and chain), each
driven by pybkx's load generator once in plaintext and once inside TLS (START_TLS, then the
handshake; ``run_load(..., tls=...)``). ``make bench-tls`` or ``python -m bench.tls``.

Owns this comparison (it never asserts on timings; traffic only to the processes it starts on
loopback). Per round, system and mode (orders alternating between rounds): pipelined 1 KiB adds
over 16 ledgers, and batch reads of one cached ledger (BATCH_READ_ENTRY, 100 entries each).
Figures are medians over rounds; ratios are medians of per-round ratios. Results go to
bench/results/tls.md and tls.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import machine
from bench.compare import Bookie, Progress, harness, start_java_bookie
from bench.compare_plan import GROUP_COMMIT, SYSTEMS
from bench.compare_report import RESULTS
from pybkx._core import run_load
from pybkx.config import ClientConfig
from pybkx.config.tls import ClientTlsMaterial, client_tls_material

MODES = ("plain", "tls")
READ_LEDGER = 7
ADD_LEDGERS = 16
PAYLOAD = 1024
BATCH = 100
TLS_FACTORY = "org.apache.bookkeeper.tls.TLSContextFactory"


def make_certificates(root: Path) -> tuple[Path, Path, Path]:
    """A CA and a bookie key and chain it signs (openssl): (CA, key, chain)."""

    def run(*args: str | Path) -> None:
        subprocess.run([str(a) for a in args], check=True, capture_output=True, timeout=120)

    ca_key, ca, key, csr, cert = (
        root / n for n in ("ca.key", "ca.pem", "key.pem", "b.csr", "b.pem")
    )
    run("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
        "-subj", "/CN=bench-ca", "-keyout", ca_key, "-out", ca)  # fmt: skip
    run("openssl", "req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=bench-bookie",
        "-keyout", key, "-out", csr)  # fmt: skip
    ext = root / "ext.cnf"
    ext.write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n")  # extensions make it X.509 v3
    run("openssl", "x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial",
        "-days", "2", "-out", cert, "-extfile", ext)  # fmt: skip
    chain = root / "chain.pem"
    chain.write_text(cert.read_text() + ca.read_text())
    return ca, key, chain


def measure(
    address: str, kind: str, tls: ClientTlsMaterial | None, count: int, first: int
) -> float:
    """Entries per second of one run."""
    if kind == "adds":
        report = run_load(
            address,
            "add",
            ledger_id=first,
            ledgers=ADD_LEDGERS,
            count=count,
            payload_size=PAYLOAD,
            in_flight=1000,
            tls=tls,
        )
    else:
        report = run_load(
            address,
            "read",
            ledger_id=READ_LEDGER,
            count=count,
            payload_size=PAYLOAD,
            batch=BATCH,
            in_flight=16,
            tls=tls,
        )
    if report["errors"]:
        raise RuntimeError(f"{kind} on {address}: {report['errors']} errors")
    return float(report["entries"]) / float(report["seconds"])


def start_bookies(
    root: Path, classpath: str, zookeeper: str, keys: dict[str, str]
) -> dict[str, Bookie]:
    bookies: dict[str, Bookie] = {}
    for system in SYSTEMS:
        workdir = root / system
        workdir.mkdir()
        if system == "java":
            bookies[system] = start_java_bookie(
                classpath, zookeeper, workdir, extra_conf=tuple(f"{k}={v}" for k, v in keys.items())
            )
        else:
            conf = "".join(f"{k}={v}\n" for k, v in {**GROUP_COMMIT, **keys}.items())
            process, address = harness.start_pybkx_bookie(workdir, conf)
            bookies[system] = Bookie("pybkx", process, address)
    return bookies


def run_rounds(
    bookies: dict[str, Bookie], tls: ClientTlsMaterial, args: argparse.Namespace, progress: Progress
) -> tuple[dict[tuple[str, str, str], list[float]], dict[tuple[str, str], list[float]]]:
    rates: dict[tuple[str, str, str], list[float]] = {}
    ratios: dict[tuple[str, str], list[float]] = {}
    next_ledger = 1000
    for rnd in range(args.rounds):
        systems = SYSTEMS if rnd % 2 == 0 else tuple(reversed(SYSTEMS))
        modes = MODES if rnd % 2 == 0 else tuple(reversed(MODES))
        for system in systems:
            got: dict[tuple[str, str], float] = {}
            for mode in modes:
                for kind in ("adds", "reads"):
                    progress.describe(f"round {rnd + 1}: {system} {kind} {mode}")
                    machine.wait_quiet([b.pid for b in bookies.values()])
                    material = tls if mode == "tls" else None
                    rate = measure(bookies[system].address, kind, material, args.count, next_ledger)
                    next_ledger += ADD_LEDGERS
                    rates.setdefault((system, kind, mode), []).append(rate)
                    got[kind, mode] = rate
                    progress.advance()
            for kind in ("adds", "reads"):
                ratios.setdefault((system, kind), []).append(got[kind, "tls"] / got[kind, "plain"])
    return rates, ratios


def report(
    rates: dict[tuple[str, str, str], list[float]],
    ratios: dict[tuple[str, str], list[float]],
    args: argparse.Namespace,
) -> list[str]:
    rows = []
    for kind in ("adds", "reads"):
        tls_rates = {s: statistics.median(rates[s, kind, "tls"]) for s in SYSTEMS}
        for system in SYSTEMS:
            rows.append(
                {
                    "system": system,
                    "kind": kind,
                    "plain_per_s": round(statistics.median(rates[system, kind, "plain"])),
                    "tls_per_s": round(tls_rates[system]),
                    "tls_over_plain": round(statistics.median(ratios[system, kind]), 3),
                    "tls_over_java_tls": round(tls_rates[system] / tls_rates["java"], 2),
                }
            )
    result: dict[str, Any] = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine.describe(RESULTS),
        "rounds": args.rounds,
        "count": args.count,
        "rows": rows,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "tls.json").write_text(json.dumps(result, indent=2) + "\n")
    lines = [
        "# TLS beside plaintext on the same bookies, one run",
        "",
        f"{result['date']}; {args.rounds} rounds of {args.count:,} pipelined {PAYLOAD} B adds "
        f"over {ADD_LEDGERS} ledgers (1000 in flight) and {args.count:,} entries batch-read "
        f"({BATCH} per request, 16 in flight) per system and mode; pybkx's load generator, "
        "TLS 1.3 (rustls client; the Java bookie's default provider).",
        "",
        "| bookie | operation | plaintext entries/s | TLS entries/s | TLS / plaintext "
        "| TLS / Java's TLS |",
        "|---|---|---:|---:|---:|---:|",
    ]
    lines += [
        f"| {r['system']} | {r['kind']} | {r['plain_per_s']:,} | {r['tls_per_s']:,} "
        f"| {r['tls_over_plain']} | {r['tls_over_java_tls']} |"
        for r in rows
    ]
    (RESULTS / "tls.md").write_text("\n".join(lines) + "\n")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.tls", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--count", type=int, default=200_000, help="adds and reads per run")
    args = parser.parse_args(argv)
    steps = 2 + args.rounds * len(SYSTEMS) * len(MODES) * 2
    started: list[harness.Process] = []
    with tempfile.TemporaryDirectory(prefix="pybkx-bench-tls-") as tmp, Progress(steps) as progress:
        root = Path(tmp)
        ca, key, chain = make_certificates(root)
        keys = {
            "tlsProviderFactoryClass": TLS_FACTORY,
            "tlsKeyStoreType": "PEM",
            "tlsKeyStore": str(key),
            "tlsCertificatePath": str(chain),
        }
        tls = client_tls_material(
            ClientConfig.of(
                tlsProviderFactoryClass=TLS_FACTORY, tlsTrustStoreType="PEM", tlsTrustStore=str(ca)
            )
        )
        assert tls is not None
        try:
            progress.describe("building the Java helper and starting both bookies")
            classpath = harness.java_classpath()
            zk, zookeeper = harness.start_zookeeper(classpath, root)
            started.append(zk)
            bookies = start_bookies(root, classpath, zookeeper, keys)
            started += [b.process for b in bookies.values()]
            progress.advance()
            for bookie in bookies.values():
                progress.describe(f"writing the read ledger on {bookie.system}")
                run_load(bookie.address, "add", ledger_id=READ_LEDGER, count=args.count,
                         payload_size=PAYLOAD, in_flight=1000)  # fmt: skip
            progress.advance()
            rates, ratios = run_rounds(bookies, tls, args, progress)
        finally:
            for process in reversed(started):
                process.stop()
    print("\n".join(report(rates, ratios, args)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
