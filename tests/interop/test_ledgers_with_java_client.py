"""Apache BookKeeper's own ledger client (Java, with the V2 protocol and with its default V3) and
pybkx's client on one pybkx cluster: ledgers one writes, the other reads, recovers and batch-reads.

Owns ledger-level interop: what each side writes and what the other must see of it. The Java side
is java/.../LedgerClient.java, fed JSON-line operations (a script per step, or one at a time); the
cluster is a pybkx Sandbox of 3 bookies registered in the session ZooKeeper under a root of its
own per test. Every check runs for each quorum and digest of the matrix, and the mismatches of
all cases are reported together, each naming its case.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import os
import random
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import pytest
from harness import java_argv
from interop_scenario import BATCH_OVERHEAD

from pybkx import errors
from pybkx.client import BookKeeper, LedgerHandle, ReadHandle
from pybkx.tools.sandbox import Sandbox

pytestmark = pytest.mark.interop

ENTRIES = 250
JAVA_TIMEOUT_S = 120
HEADER = 32  # ledger id, entry id, LAC, length
DIGEST_LENGTH = {"CRC32": 8, "CRC32C": 4, "MAC": 20}
MAX_SIZE = 5 << 20  # BookKeeper's default nettyMaxFrameSizeBytes

Result = dict[str, Any]


@dataclass(frozen=True)
class Case:
    ensemble: int
    write_quorum: int
    ack_quorum: int
    digest: str  # BookKeeper's name; pybkx takes "MAC" for HMAC as well

    @property
    def name(self) -> str:
        return f"E{self.ensemble}-Qw{self.write_quorum}-Qa{self.ack_quorum}-{self.digest}"

    @property
    def password(self) -> bytes:
        return b"pw\x00\xff-" + self.name.encode()

    def create_op(self, writer: str) -> dict[str, Any]:
        """LedgerClient's ``create`` of a ledger of this case, named ``writer``."""
        return {
            "op": "create",
            "writer": writer,
            "ensemble": self.ensemble,
            "write_quorum": self.write_quorum,
            "ack_quorum": self.ack_quorum,
            "digest": self.digest,
            "password_hex": self.password.hex(),
        }

    def open_op(self, ledger_id: int, recovery: bool, api: str = "new") -> dict[str, Any]:
        return {
            "op": "open",
            "ledger": ledger_id,
            "password_hex": self.password.hex(),
            "digest": self.digest,
            "recovery": recovery,
            "api": api,
        }


CASES = [Case(e, qw, qa, d) for e, qw, qa in [(3, 2, 2), (2, 2, 2)] for d in DIGEST_LENGTH]


def payloads(seed: str, huge: bool = False) -> list[bytes]:
    """ENTRIES payloads of varied sizes: an empty first one, up to 1500 bytes, 64 KiB every 64th
    and, with ``huge``, one of 1 MiB."""
    rng = random.Random(seed)
    sizes = [rng.randint(1, 1500) for _ in range(ENTRIES)]
    sizes[0] = 0
    for i in range(63, ENTRIES, 64):
        sizes[i] = 64 << 10
    if huge:
        sizes[100] = 1 << 20
    return [rng.randbytes(size) for size in sizes]


def java_entries(data: list[bytes], first: int, last: int) -> list[Result]:
    """What LedgerClient prints for entries ``first..last`` of a ledger holding ``data``."""
    lengths = list(itertools.accumulate(len(p) for p in data))
    return [
        {
            "id": i,
            "size": len(data[i]),
            "sha256": hashlib.sha256(data[i]).hexdigest(),
            "length_field": lengths[i],
        }
        for i in range(first, last + 1)
    ]


def batch_ids(
    data: list[bytes], digest: str, start: int, max_count: int, max_size: int
) -> list[int]:
    """The entries a bookie returns for a batch read: at most ``max_count``, and no more than
    fit ``max_size`` (response accounting as in BookKeeper's bookie), but always the first."""
    ids: list[int] = []
    size = BATCH_OVERHEAD
    for entry_id in range(start, len(data)):
        size += 4 + HEADER + DIGEST_LENGTH[digest] + len(data[entry_id])
        if len(ids) == max_count or (ids and size > max_size):
            break
        ids.append(entry_id)
    return ids


class Expect:
    """Collects mismatches, so a run reports every case that differs, each by name."""

    def __init__(self, cluster: Sandbox) -> None:
        self.cluster = cluster
        self.problems: list[str] = []

    def ok(self, where: str, result: Result) -> bool:
        """True unless the Java operation failed (recorded as a problem)."""
        if "error" in result:
            self.problems.append(
                f"{where}: Java {result['op']} failed: {result['error_name']} "
                f"(BKException code {result['error']})"
            )
            return False
        return True

    def equal(self, where: str, what: str, got: object, expected: object) -> None:
        if got != expected:
            self.problems.append(f"{where}: {what}: got {got!r}, expected {expected!r}")

    def that(self, where: str, what: str, holds: bool) -> None:
        if not holds:
            self.problems.append(f"{where}: {what}")

    def entries(self, where: str, got: list[Result], expected: list[Result]) -> None:
        """Entries as LedgerClient prints them; reports the first difference only."""
        if got == expected:
            return
        for g, e in zip(got, expected, strict=False):
            if g != e:
                self.problems.append(f"{where}: entry {e['id']}: got {g}, expected {e}")
                return
        self.problems.append(f"{where}: got {len(got)} entries, expected {len(expected)}")

    def java_metadata(
        self, where: str, got: Result, case: Case, state: str, last: int, length: int
    ) -> None:
        expected = {
            "state": state,
            "last_entry_id": last,
            "length": length,
            "ensemble": case.ensemble,
            "write_quorum": case.write_quorum,
            "ack_quorum": case.ack_quorum,
            "digest": case.digest,
            "password_hex": case.password.hex(),
        }
        self.equal(where, "metadata seen by Java", {k: got.get(k) for k in expected}, expected)

    def pybkx_handle(
        self, where: str, handle: ReadHandle, case: Case, java_md: Result, last: int, length: int
    ) -> None:
        """A ledger pybkx opened against what Java wrote or reported."""
        md = handle.metadata
        self.equal(where, "pybkx: closed", handle.is_closed, True)
        self.equal(where, "pybkx: LAC", handle.last_add_confirmed, last)
        self.equal(where, "pybkx: length", handle.length, length)
        got = (md.ensemble_size, md.write_quorum_size, md.ack_quorum_size, md.password)
        quorums = (case.ensemble, case.write_quorum, case.ack_quorum, case.password)
        self.equal(where, "pybkx: E/Qw/Qa/password", got, quorums)
        self.equal(
            where,
            "pybkx: digest",
            md.digest_type.name,
            "HMAC" if case.digest == "MAC" else case.digest,
        )
        ensembles = {str(first): list(bookies) for first, bookies in md.ensembles.items()}
        self.equal(where, "pybkx: ensembles", ensembles, java_md["ensembles"])

    def pybkx_entries(self, where: str, handle: ReadHandle, data: list[bytes], last: int) -> None:
        if last < 0:
            return
        try:
            got = handle.read(0, last)
        except errors.BKException as exc:
            self.problems.append(f"{where}: pybkx read 0..{last} failed: {exc!r}")
            return
        self.equal(where, "pybkx: entry ids", [e.entry_id for e in got], list(range(last + 1)))
        for entry in got:
            if entry.payload != data[entry.entry_id]:
                self.problems.append(f"{where}: pybkx: entry {entry.entry_id} differs")
                return

    def check(self) -> None:
        if not self.problems:
            return
        logs = []
        for index in range(self.cluster.bookies):
            path = self.cluster.log_path(index)
            tail = path.read_text(errors="replace").splitlines()[-15:] if path.exists() else []
            logs.append(f"--- bookie {index} ({path}):\n" + "\n".join(tail))
        pytest.fail(
            f"{len(self.problems)} mismatches:\n"
            + "\n".join(self.problems)
            + "\n"
            + "\n".join(logs),
            pytrace=False,
        )


# --- fixtures ---------------------------------------------------------------------------------


@pytest.fixture
def cluster(zookeeper_server: str, tmp_path: Path) -> Iterator[Sandbox]:
    """3 pybkx bookies registered in the session ZooKeeper under a fresh root."""
    uri = f"zk+hierarchical://{zookeeper_server}/interop-{uuid.uuid4().hex}/ledgers"
    with Sandbox(3, zk_uri=uri, directory=tmp_path / "sandbox", conf={"zkTimeout": 2000}) as sb:
        yield sb


@pytest.fixture
def pybkx(cluster: Sandbox) -> Iterator[BookKeeper]:
    with BookKeeper(cluster.metadata_uri, zkTimeout=2000) as bk:
        yield bk


class Java:
    """Runs java/.../LedgerClient on the cluster: ``run(ops)`` as one script, or ``session()``
    to send one operation at a time and act in between. Scripts and logs go to ``workdir``."""

    def __init__(
        self,
        classpath: str,
        cluster: Sandbox,
        workdir: Path,
        settings: tuple[str, ...] = (),
        system_properties: dict[str, str] | None = None,
    ) -> None:
        self.classpath, self.cluster, self.workdir = classpath, cluster, workdir
        self.settings = settings
        self.system_properties = system_properties
        self.runs = itertools.count(1)

    def _start(
        self, n: int, script: str, stdin: int | None
    ) -> tuple[subprocess.Popen[bytes], Path]:
        log = self.workdir / f"ledger-client-{n}.log"
        uri = self.cluster.metadata_uri
        argv = java_argv(
            self.classpath,
            "pybkx.interop.LedgerClient",
            uri,
            script,
            *self.settings,
            heap="384m",
            system_properties=self.system_properties,
        )
        argv.insert(1, "-XX:TieredStopAtLevel=1")  # short-lived: start fast
        with log.open("wb") as stderr:
            process = subprocess.Popen(argv, stdin=stdin, stdout=subprocess.PIPE, stderr=stderr)
        return process, log

    @staticmethod
    def _fail(process: subprocess.Popen[bytes], log: Path, message: str) -> NoReturn:
        if process.poll() is None:
            process.kill()
        process.wait()
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-40:])
        pytest.fail(
            f"LedgerClient {message} (exit {process.returncode}); log {log}:\n{tail}",
            pytrace=False,
        )

    def run(self, ops: list[dict[str, Any]]) -> list[Result]:
        """A result per operation of ``ops``, run as one script."""
        n = next(self.runs)
        script = self.workdir / f"ledger-client-{n}.jsonl"
        script.write_text("".join(json.dumps(op) + "\n" for op in ops))
        process, log = self._start(n, str(script), None)
        try:
            stdout, _ = process.communicate(timeout=JAVA_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self._fail(process, log, f"still running after {JAVA_TIMEOUT_S} s")
        results = [json.loads(line) for line in stdout.decode().splitlines() if line]
        if process.returncode != 0 or len(results) != len(ops):
            self._fail(process, log, f"ran {len(results)} of {len(ops)} operations of {script}")
        return results

    @contextlib.contextmanager
    def session(self) -> Iterator[Callable[[dict[str, Any]], Result]]:
        """``send(op) -> result`` to one LedgerClient; it must have exited 0 at the end."""
        process, log = self._start(next(self.runs), "-", subprocess.PIPE)
        assert process.stdin is not None and process.stdout is not None
        stdin, stdout = process.stdin, process.stdout

        def send(op: dict[str, Any]) -> Result:
            stdin.write(json.dumps(op).encode() + b"\n")
            stdin.flush()
            line = stdout.readline()
            if not line:
                self._fail(process, log, f"ended without answering {op['op']}")
            result: Result = json.loads(line)
            return result

        try:
            yield send
            with contextlib.suppress(BrokenPipeError):
                stdin.close()
            if process.wait(JAVA_TIMEOUT_S) != 0:
                self._fail(process, log, "failed")
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()


@pytest.fixture(params=["V2", "V3"])
def java(
    request: pytest.FixtureRequest, java_classpath: str, cluster: Sandbox, tmp_path: Path
) -> Java:
    """BookKeeper's client with ``useV2WireProtocol=true`` (as Pulsar runs it) and with its
    default, the V3 protocol."""
    settings = ("useV2WireProtocol=false",) if request.param == "V3" else ()
    return Java(java_classpath, cluster, tmp_path, settings)


# --- pybkx writes, Java reads -----------------------------------------------------------------


def test_java_reads_closed_ledgers_written_by_pybkx(
    cluster: Sandbox, pybkx: BookKeeper, java: Java
) -> None:
    written = []
    ops: list[dict[str, Any]] = []
    for case in CASES:
        data = payloads(f"pybkx-closed-{case.name}", huge=True)
        lh = pybkx.create_ledger(
            case.ensemble, case.write_quorum, case.ack_quorum, case.digest, case.password
        )
        lh.append(data[0])
        lh.append_many(data[1:])
        lh.close()
        assert (lh.last_add_confirmed, lh.length) == (ENTRIES - 1, sum(map(len, data)))
        written.append((case, lh, data))
        ledger, last = lh.ledger_id, lh.last_add_confirmed
        ops += [
            case.open_op(ledger, recovery=False),
            {"op": "read", "ledger": ledger, "first": 0, "last": last},
            {"op": "read_lac", "ledger": ledger},
            case.open_op(ledger, recovery=True, api="legacy"),
            {"op": "read", "ledger": ledger, "first": 0, "last": last, "api": "legacy"},
        ]
    results = iter(java.run(ops))

    expect = Expect(cluster)
    for case, lh, data in written:
        where = f"{case.name} ledger {lh.ledger_id}"
        ensembles = {str(k): list(v) for k, v in lh.metadata.ensembles.items()}
        for api in ("new", "legacy"):
            opened, read = next(results), next(results)
            if expect.ok(f"{where} ({api} API)", opened):
                expect.equal(where, f"Java LAC ({api} API)", opened["lac"], lh.last_add_confirmed)
                expect.equal(where, f"Java length ({api} API)", opened["length"], lh.length)
                expect.equal(where, f"Java closed ({api} API)", opened["closed"], True)
                expect.java_metadata(
                    where, opened["metadata"], case, "CLOSED", lh.last_add_confirmed, lh.length
                )
                expect.equal(where, "ensembles", opened["metadata"]["ensembles"], ensembles)
            if expect.ok(f"{where} ({api} API)", read):
                expected = java_entries(data, 0, ENTRIES - 1)
                expect.entries(f"{where} ({api} API read)", read["entries"], expected)
            if api == "new":
                lac = next(results)
                if expect.ok(where, lac):
                    expect.equal(where, "readLastAddConfirmed", lac["lac"], lh.last_add_confirmed)
    expect.check()


def test_java_recovers_open_pybkx_ledgers_and_fences_the_writer(
    cluster: Sandbox, pybkx: BookKeeper, java: Java
) -> None:
    """The pybkx writer never closes; Java tails it, then recovers it, then the writer is
    fenced. The last entry is appended after all others were acknowledged, so the LAC it
    carries, what the bookies report without recovery, is ENTRIES - 2."""
    written = [open_pybkx_ledger(cluster, pybkx, case) for case in CASES]
    ops = [op for ledger in written for op in java_tails_then_recovers(ledger)]
    results = iter(java.run(ops))

    expect = Expect(cluster)
    for ledger in written:
        where = f"{ledger.case.name} ledger {ledger.handle.ledger_id}"
        tail_open, lac, tail_read, opened, read, metadata = (next(results) for _ in range(6))
        expect_java_tailed(expect, java, where, ledger, (tail_open, lac, tail_read))
        expect_java_recovered(expect, where, ledger, (opened, read, metadata))
        expect_pybkx_fenced(expect, pybkx, where, ledger, metadata)
    expect.check()


@dataclass(frozen=True)
class OpenLedger:
    """A ledger pybkx wrote and left open, and what a pybkx reader saw of it without recovery."""

    case: Case
    handle: LedgerHandle
    data: list[bytes]
    tail_lac: int
    tail_length: int

    @property
    def last(self) -> int:
        return ENTRIES - 1

    @property
    def length(self) -> int:
        return sum(map(len, self.data))


def open_pybkx_ledger(cluster: Sandbox, pybkx: BookKeeper, case: Case) -> OpenLedger:
    """ENTRIES entries, the last one appended after the others were acknowledged; the ledger
    is left open, and another pybkx client reads its LAC and length without recovery."""
    data = payloads(f"pybkx-open-{case.name}")
    lh = pybkx.create_ledger(
        case.ensemble, case.write_quorum, case.ack_quorum, case.digest, case.password
    )
    lh.append_many(data[:-1])
    lh.append(data[-1])
    with BookKeeper(cluster.metadata_uri, zkTimeout=2000) as tail_bk:
        tailing = tail_bk.open_ledger(lh.ledger_id, case.password, recovery=False)
        return OpenLedger(case, lh, data, tailing.read_last_add_confirmed(), tailing.length)


def java_tails_then_recovers(open_ledger: OpenLedger) -> list[dict[str, Any]]:
    """Java's operations on an open ledger: tail it without recovery, then recover and read it
    whole, then its metadata (six results)."""
    case, ledger = open_ledger.case, open_ledger.handle.ledger_id
    return [
        case.open_op(ledger, recovery=False),
        {"op": "read_lac", "ledger": ledger},
        {"op": "read", "ledger": ledger, "first": 0, "last": ENTRIES - 2},
        case.open_op(ledger, recovery=True),
        {"op": "read", "ledger": ledger, "first": 0, "last": ENTRIES - 1},
        {"op": "metadata", "ledger": ledger},
    ]


def expect_java_tailed(
    expect: Expect, java: Java, where: str, ledger: OpenLedger, results: tuple[Result, ...]
) -> None:
    """Without recovery Java sees the ledger open at LAC ENTRIES - 2, as pybkx's reader did."""
    tail_open, lac, tail_read = results
    last = ledger.last
    if expect.ok(f"{where} (open without recovery)", tail_open):
        expect.equal(where, "Java: closed before recovery", tail_open["closed"], False)
        expect.equal(where, "Java: LAC when opened without recovery", tail_open["lac"], last - 1)
        expect.equal(where, "Java: state before recovery", tail_open["metadata"]["state"], "OPEN")
    if expect.ok(where, lac):
        expect.equal(where, "Java readLastAddConfirmed", lac["lac"], last - 1)
        expect.equal(where, "pybkx read_last_add_confirmed", ledger.tail_lac, last - 1)
        # Over V3 BookKeeper's client asks READ_LAC and keeps the LAC without a length (its
        # explicit-LAC path): only the V2 path, which reads the last entry, learns one.
        if not java.settings:
            expect.equal(
                where, "length with the LAC (Java vs pybkx)", lac["length"], ledger.tail_length
            )
    if expect.ok(f"{where} (read up to the LAC)", tail_read):
        expect.entries(
            f"{where} (tailing)", tail_read["entries"], java_entries(ledger.data, 0, last - 1)
        )


def expect_java_recovered(
    expect: Expect, where: str, ledger: OpenLedger, results: tuple[Result, ...]
) -> None:
    """Java's recovery closes the ledger at its last entry, and reads every entry."""
    opened, read, metadata = results
    case, last, length = ledger.case, ledger.last, ledger.length
    if expect.ok(f"{where} (open with recovery)", opened):
        expect.equal(where, "Java: LAC after recovery", opened["lac"], last)
        expect.equal(where, "Java: length after recovery", opened["length"], length)
        expect.java_metadata(where, opened["metadata"], case, "CLOSED", last, length)
    if expect.ok(f"{where} (read after recovery)", read):
        expect.entries(
            f"{where} (after recovery)", read["entries"], java_entries(ledger.data, 0, last)
        )
    if expect.ok(where, metadata):
        expect.java_metadata(where, metadata["metadata"], case, "CLOSED", last, length)


def expect_pybkx_fenced(
    expect: Expect, pybkx: BookKeeper, where: str, ledger: OpenLedger, metadata: Result
) -> None:
    """After Java's recovery the pybkx writer is fenced, and pybkx opens the closed ledger."""
    try:
        entry_id = ledger.handle.append(b"after Java recovered the ledger")
        expect.problems.append(f"{where}: pybkx append after recovery succeeded: {entry_id}")
    except errors.LedgerFencedException:
        pass
    except errors.BKException as exc:
        expect.problems.append(f"{where}: pybkx append: {exc!r}, expected LedgerFenced")
    try:
        reopened = pybkx.open_ledger(ledger.handle.ledger_id, ledger.case.password)
    except errors.BKException as exc:
        expect.problems.append(f"{where}: pybkx open_ledger after recovery: {exc!r}")
        return
    if "error" not in metadata:
        expect.pybkx_handle(
            where, reopened, ledger.case, metadata["metadata"], ledger.last, ledger.length
        )


def test_java_batch_reads_pybkx_ledgers(
    cluster: Sandbox, pybkx: BookKeeper, java_classpath: str, tmp_path: Path
) -> None:
    """``batchReadAsync`` (BP-62) on E == Qw ledgers: sent as batch reads (no fallback to single
    reads), each answer the entries the bookie's count and size limits allow. BATCH_READ_ENTRY
    is a V2 request: the client runs with ``useV2WireProtocol=true``."""
    java = Java(java_classpath, cluster, tmp_path)
    cases = [Case(2, 2, 2, digest) for digest in DIGEST_LENGTH] + [Case(3, 3, 2, "CRC32C")]
    written = []
    ops: list[dict[str, Any]] = []
    for case in cases:
        data = payloads(f"pybkx-batch-{case.name}")
        lh = pybkx.create_ledger(
            case.ensemble, case.write_quorum, case.ack_quorum, case.digest, case.password
        )
        lh.append_many(data)
        lh.close()
        five = BATCH_OVERHEAD + sum(
            4 + HEADER + DIGEST_LENGTH[case.digest] + len(p) for p in data[:5]
        )
        reads = [(start, 64, MAX_SIZE) for start in range(0, ENTRIES, 64)]
        reads += [
            (0, 1000, MAX_SIZE),  # the whole ledger
            (10, 7, MAX_SIZE),
            (ENTRIES - 1, 10, MAX_SIZE),  # the last entry
            (0, 1000, five),  # size limit: exactly five entries
            (0, 1000, five - 1),
            (60, 1000, 1),  # smaller than one entry: that one alone
            (100, 50, 70_000),  # stops before the 64 KiB entry 127
        ]
        written.append((case, lh, data, reads))
        ops.append(case.open_op(lh.ledger_id, recovery=False))
        ops += [
            {"op": "batch_read", "ledger": lh.ledger_id, "start": s, "max_count": n, "max_size": b}
            for s, n, b in reads
        ]
    results = iter(java.run(ops))

    expect = Expect(cluster)
    for case, lh, data, reads in written:
        where = f"{case.name} ledger {lh.ledger_id}"
        expect.ok(where, next(results))
        for start, max_count, max_size in reads:
            what = f"{where} batchRead({start}, {max_count}, {max_size})"
            got = next(results)
            if expect.ok(what, got):
                expect.equal(
                    what, "fell back to single reads", got["fell_back_to_single_reads"], False
                )
                ids = batch_ids(data, case.digest, start, max_count, max_size)
                expected = [java_entries(data, i, i)[0] for i in ids]
                expect.entries(what, got["entries"], expected)
    expect.check()


# --- Java writes, pybkx reads -----------------------------------------------------------------


def test_pybkx_reads_closed_ledgers_written_by_java(
    cluster: Sandbox, pybkx: BookKeeper, java: Java
) -> None:
    ops: list[dict[str, Any]] = []
    data = {case: payloads(f"java-closed-{case.name}", huge=True) for case in CASES}
    for case in CASES:
        ops += [
            case.create_op(case.name),
            {"op": "append", "writer": case.name, "payloads_hex": [p.hex() for p in data[case]]},
            {"op": "close", "writer": case.name},
        ]
    results = iter(java.run(ops))

    expect = Expect(cluster)
    for case in CASES:
        created, appended, closed = next(results), next(results), next(results)
        where = f"{case.name} ledger {created.get('ledger')}"
        if not (
            expect.ok(where, created) and expect.ok(where, appended) and expect.ok(where, closed)
        ):
            continue
        length = sum(map(len, data[case]))
        assert appended["acked"] == list(range(ENTRIES)), where  # the Java writer itself
        assert (closed["lac"], closed["length"]) == (ENTRIES - 1, length), where
        try:
            handle = pybkx.open_ledger(created["ledger"], case.password, recovery=True)
        except errors.BKException as exc:
            expect.problems.append(f"{where}: pybkx open_ledger failed: {exc!r}")
            continue
        expect.pybkx_handle(where, handle, case, created["metadata"], ENTRIES - 1, length)
        expect.pybkx_entries(where, handle, data[case], ENTRIES - 1)
    expect.check()


def test_pybkx_recovers_ledgers_left_open_by_java(
    cluster: Sandbox, pybkx: BookKeeper, java: Java
) -> None:
    """Per case two Java writers never close: the JVM halts. "done" had every append
    acknowledged. "stalled" sent its second half while bookie 0 was stopped (SIGSTOP), which is
    then killed (SIGKILL: what it had not read is lost) and restarted: from the first entry
    bookie 0 should store on, nothing more is acknowledged, and later entries are on fewer than
    Qw bookies. pybkx recovers and closes both with every acknowledged entry; Java then sees
    them closed where pybkx closed them, and reads every entry."""
    data = {case: payloads(f"java-open-{case.name}") for case in CASES}
    created, acked = java_writers_left_open(cluster, java, data)

    expect = Expect(cluster)
    recovered: list[RecoveredLedger] = []
    for case in CASES:
        for writer in (f"done-{case.name}", f"stalled-{case.name}"):
            where = f"{writer} ledger {created[writer].get('ledger')}"
            if not expect.ok(where, created[writer]):
                continue
            # What the Java writer itself did, not pybkx: in order, stalled only by bookie 0.
            ids = acked[writer]
            assert ids == list(range(len(ids))) and len(ids) >= ENTRIES // 2, (where, ids)
            if writer.startswith("stalled") and cluster.bookie_addresses[0] in str(
                created[writer]["metadata"]["ensembles"]
            ):
                assert len(ids) < ENTRIES, (where, "acknowledged without bookie 0")
            ledger = pybkx_recovers(expect, pybkx, where, case, created[writer], ids, data[case])
            if ledger is not None:
                recovered.append(ledger)

    java_ops = [op for ledger in recovered for op in ledger.java_ops()]
    results = iter(java.run(java_ops))
    for ledger in recovered:
        expect_java_reads_closed(expect, ledger, data[ledger.case], results)
    expect.check()


def java_writers_left_open(
    cluster: Sandbox, java: Java, data: dict[Case, list[bytes]]
) -> tuple[dict[str, Result], dict[str, list[int]]]:
    """Per case a "done" and a "stalled" Java writer (see the test) left open by a halted JVM,
    bookie 0 killed and restarted; what creating each returned, and the ids each had
    acknowledged."""
    half = ENTRIES // 2
    created: dict[str, Result] = {}
    with java.session() as send:
        for case in CASES:
            hexed = [p.hex() for p in data[case]]
            for writer, sent in (
                (f"done-{case.name}", hexed),
                (f"stalled-{case.name}", hexed[:half]),
            ):
                created[writer] = send(case.create_op(writer))
                send({"op": "append", "writer": writer, "payloads_hex": sent})
        stopped = cluster.pid(0)
        assert stopped is not None
        os.kill(stopped, signal.SIGSTOP)
        try:
            for case in CASES:
                rest = [p.hex() for p in data[case][half:]]
                send(
                    {
                        "op": "append",
                        "writer": f"stalled-{case.name}",
                        "payloads_hex": rest,
                        "wait_for": 0,
                    }
                )
            # Not a wait on a condition: 0.3 s for the running bookies to store copies of the
            # entries bookie 0 holds up (how many depends on the ensembles); recovery must
            # close the ledgers with every acknowledged entry however many they stored.
            time.sleep(0.3)
            acked: dict[str, list[int]] = send({"op": "halt"})["acked"]
        finally:
            cluster.kill_bookie(0)
    cluster.wait_unregistered([0])
    cluster.restart_bookie(0)
    return created, acked


@dataclass(frozen=True)
class RecoveredLedger:
    """A Java writer's ledger as pybkx recovered and closed it."""

    case: Case
    where: str
    ledger_id: int
    last: int
    length: int

    def java_ops(self) -> list[dict[str, Any]]:
        """Java's look at it afterwards: its metadata, an open with recovery, a read of all."""
        return [
            {"op": "metadata", "ledger": self.ledger_id},
            self.case.open_op(self.ledger_id, recovery=True),
            {"op": "read", "ledger": self.ledger_id, "first": 0, "last": self.last},
        ]


def pybkx_recovers(
    expect: Expect,
    pybkx: BookKeeper,
    where: str,
    case: Case,
    created: Result,
    acked: list[int],
    data: list[bytes],
) -> RecoveredLedger | None:
    """pybkx opens a Java writer's ledger with recovery: closed at or past the writer's last
    acknowledged entry, with its metadata and entries right; None if recovery failed."""
    ledger_id = created["ledger"]
    try:
        handle = pybkx.open_ledger(ledger_id, case.password, recovery=True)
    except errors.BKException as exc:
        expect.problems.append(f"{where}: pybkx recovery failed: {exc!r}")
        return None
    last = handle.last_add_confirmed
    expect.that(
        where,
        f"pybkx: LAC {last} after recovery, Java acknowledged up to {acked[-1]}",
        acked[-1] <= last <= ENTRIES - 1,
    )
    length = sum(map(len, data[: last + 1]))
    expect.pybkx_handle(where, handle, case, created["metadata"], last, length)
    expect.pybkx_entries(where, handle, data, last)
    return RecoveredLedger(case, where, ledger_id, last, length)


def expect_java_reads_closed(
    expect: Expect, ledger: RecoveredLedger, data: list[bytes], results: Iterator[Result]
) -> None:
    """Java sees the ledger closed where pybkx closed it and reads every entry."""
    metadata, opened, read = next(results), next(results), next(results)
    case, where, last, length = ledger.case, ledger.where, ledger.last, ledger.length
    if expect.ok(where, metadata):
        expect.java_metadata(where, metadata["metadata"], case, "CLOSED", last, length)
    if expect.ok(f"{where} (reopened by Java)", opened):
        expect.equal(where, "Java: closed", opened["closed"], True)
        expect.equal(where, "Java: LAC", opened["lac"], last)
        expect.equal(where, "Java: length", opened["length"], length)
    if expect.ok(f"{where} (Java read)", read):
        expect.entries(where, read["entries"], java_entries(data, 0, last))
