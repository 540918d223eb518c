"""The interop script: V2 operations against one bookie, each with its expected result.

Owns what is sent and what must come back; running it is up to the callers (the Java client
driver in conftest.py, or ``run_with_pybkx_client`` below). Expected entry bytes are computed
here, independently of both BookKeeper and pybkx, from the entry layout (reference §2).

An operation is a dict in the Java driver's JSON-lines format (see InteropClient.java); a result
is the dict the driver prints: ``{"op", "ledger", "entry" | "start", "rc"}`` plus ``entry_hex``
(read) or ``entries_hex`` (batch_read) when ``rc`` is 0. ``rc`` is a ``BKException.Code``.
An operation with ``"async": true`` is not waited for: it stays outstanding, pipelined with the
following ones, until the next operation without it.
"""

from __future__ import annotations

import hashlib
import hmac
import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pybkx import errors

OK = errors.Code.OK
NO_SUCH_LEDGER = errors.Code.NoSuchLedgerExistsException
NO_SUCH_ENTRY = errors.Code.NoSuchEntryException
FENCED = errors.Code.LedgerFencedException
UNAUTHORIZED = errors.Code.UnauthorizedAccessException

FLAG_DO_FENCING = 0x1
FLAG_RECOVERY_ADD = 0x2
FLAG_HIGH_PRIORITY = 0x4

MAX_SIZE = 5 << 20  # the bookie's default maxBatchReadSize
BATCH_OVERHEAD = 36  # response frame of a batch read: length prefix, header, rc, ids, request id
WRONG_KEY = bytes(20)
PIPELINED = 100  # requests outstanding at once in the pipelining part

# The password per digest type (only HMAC uses it for the digest; every one for the master key).
PASSWORDS = {"CRC32": b"", "CRC32C": b"", "HMAC": b"pw"}


def _crc32c_table() -> list[int]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
        table.append(crc)
    return table


_CRC32C_TABLE = _crc32c_table()


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for byte in data:
        crc = (crc >> 8) ^ _CRC32C_TABLE[(crc ^ byte) & 0xFF]
    return crc ^ 0xFFFFFFFF


def master_key(password: bytes) -> bytes:
    """SHA-1("ledger" + password): the key sent with adds and fencing reads."""
    return hashlib.sha1(b"ledger" + password).digest()


def package(
    ledger: int, entry: int, lac: int, length: int, payload: bytes, digest: str, password: bytes
) -> bytes:
    """The entry as stored and sent: ids, LAC, cumulative length, digest, payload."""
    header = struct.pack(">qqqq", ledger, entry, lac, length)
    if digest == "CRC32":
        code = struct.pack(">q", zlib.crc32(header + payload))
    elif digest == "CRC32C":
        code = struct.pack(">I", crc32c(header + payload))
    elif digest == "HMAC":
        mac_key = hashlib.sha1(b"mac" + password).digest()
        code = hmac.new(mac_key, header + payload, hashlib.sha1).digest()
    else:
        raise ValueError(f"unknown digest {digest}")
    return header + code + payload


@dataclass
class Step:
    """One operation, what it checks, and the expected ``rc`` and entries."""

    why: str
    op: dict[str, Any]
    rc: int = OK
    entry: bytes | None = None  # read
    entries: list[bytes] | None = None  # batch_read

    def expected(self) -> dict[str, Any]:
        expected: dict[str, Any] = {"rc": int(self.rc)}
        if self.entry is not None:
            expected["entry_hex"] = self.entry.hex()
        if self.entries is not None:
            expected["entries_hex"] = [e.hex() for e in self.entries]
        return expected


@dataclass
class Ledger:
    """A ledger written by the script: packages its entries like a Java writer would."""

    ledger_id: int
    digest: str
    password: bytes
    stored: dict[int, bytes] = field(default_factory=dict)
    length: int = 0

    def add(
        self,
        why: str,
        entry_id: int,
        payload: bytes,
        *,
        rc: int = OK,
        flags: int = 0,
        key: bytes | None = None,
        pipelined: bool = False,
    ) -> Step:
        """An add with lac = entry - 1 and the running length (kept only if ``rc`` is OK)."""
        length = self.length + len(payload)
        op = {
            "op": "add",
            "ledger": self.ledger_id,
            "entry": entry_id,
            "payload_hex": payload.hex(),
            "digest": self.digest,
            "password_hex": self.password.hex(),
            "lac": entry_id - 1,
            "length": length,
            "flags": flags,
        }
        if key is not None:
            op["master_key_hex"] = key.hex()
        if pipelined:
            op["async"] = True
        if rc == OK:
            self.length = length
            self.stored[entry_id] = package(
                self.ledger_id, entry_id, entry_id - 1, length, payload, self.digest, self.password
            )
        return Step(why, op, rc)

    def read(
        self,
        why: str,
        entry_id: int,
        *,
        rc: int = OK,
        expect: int | None = None,
        flags: int = 0,
        key: bytes | None = None,
        pipelined: bool = False,
    ) -> Step:
        """A read; ``expect`` is the entry returned (default ``entry_id``) when ``rc`` is OK."""
        op = {"op": "read", "ledger": self.ledger_id, "entry": entry_id, "flags": flags}
        if key is not None:
            op["master_key_hex"] = key.hex()
        if pipelined:
            op["async"] = True
        entry = self.stored[entry_id if expect is None else expect] if rc == OK else None
        return Step(why, op, rc, entry=entry)

    def batch_read(
        self,
        why: str,
        start: int,
        max_count: int,
        max_size: int,
        *,
        rc: int = OK,
        expect: Sequence[int] = (),
        flags: int = 0,
        key: bytes | None = None,
    ) -> Step:
        """A batch read; ``expect`` lists the entry ids returned when ``rc`` is OK."""
        op = {
            "op": "batch_read",
            "ledger": self.ledger_id,
            "start": start,
            "max_count": max_count,
            "max_size": max_size,
            "flags": flags,
        }
        if key is not None:
            op["master_key_hex"] = key.hex()
        entries = [self.stored[e] for e in expect] if rc == OK else None
        return Step(why, op, rc, entries=entries)

    def batch_size(self, *entry_ids: int) -> int:
        """The response size BookKeeper accounts for a batch of these entries."""
        return BATCH_OVERHEAD + sum(4 + len(self.stored[e]) for e in entry_ids)


def scenario(digest: str, base: int) -> list[Step]:
    """The full script for one digest type, on ledgers ``base + 1`` ... ``base + 7``."""
    password = PASSWORDS[digest]
    key = master_key(password)

    def ledger(offset: int) -> Ledger:
        return Ledger(base + offset, digest, password)

    steps: list[Step] = []
    main, gap, fence_batch, fence_empty, unknown, wrong_key, pipe = (ledger(i) for i in range(1, 8))

    # --- main ledger: adds, reads, batch reads ------------------------------------------------
    payloads = [b"hello", b"", bytes(range(256)) * 2, b"\xa5" * (20 << 10), b"x" * 10]
    adds = [main.add(f"add entry {i} ({len(p)} B)", i, p) for i, p in enumerate(payloads)]
    steps += adds
    steps += [main.read(f"read entry {i}", i) for i in range(5)]
    steps += [
        main.read("read -1 returns the highest entry", -1, expect=4),
        main.read("read past the end", 5, rc=NO_SUCH_ENTRY),
        Step("re-add entry 0, the same frame again", dict(adds[0].op)),
        main.read("entry 0 after the re-add", 0),
    ]
    two = main.batch_size(0, 1)
    steps += [
        main.batch_read("batch: everything", 0, 10, MAX_SIZE, expect=range(5)),
        main.batch_read("batch: maxCount 2", 0, 2, MAX_SIZE, expect=[0, 1]),
        main.batch_read("batch: maxCount 1", 2, 1, MAX_SIZE, expect=[2]),
        main.batch_read("batch: maxCount 0 is unbounded", 0, 0, MAX_SIZE, expect=range(5)),
        main.batch_read("batch: maxCount -1 is unbounded", 1, -1, MAX_SIZE, expect=range(1, 5)),
        main.batch_read("batch: maxSize < one entry", 0, 10, 1, expect=[0]),
        main.batch_read("batch: maxSize 0", 0, 10, 0, expect=[0]),
        main.batch_read("batch: maxSize exactly two entries", 0, 10, two, expect=[0, 1]),
        main.batch_read("batch: maxSize one byte short of two", 0, 10, two - 1, expect=[0]),
        main.batch_read("batch: oversize first entry alone", 3, 10, 100, expect=[3]),
        main.batch_read("batch: stops before the oversize entry", 2, 10, 8192, expect=[2]),
        main.batch_read("batch: the last entry", 4, 10, MAX_SIZE, expect=[4]),
        main.batch_read("batch: start past the end", 5, 10, MAX_SIZE, rc=NO_SUCH_ENTRY),
    ]

    # --- a ledger with a gap --------------------------------------------------------------
    steps += [gap.add(f"gap ledger: add entry {i}", i, b"gap-%d" % i) for i in (0, 1, 3)]
    steps += [
        gap.batch_read("batch: stops at the gap", 0, 10, MAX_SIZE, expect=[0, 1]),
        gap.batch_read("batch: starting in the gap", 2, 10, MAX_SIZE, rc=NO_SUCH_ENTRY),
        gap.batch_read("batch: after the gap", 3, 10, MAX_SIZE, expect=[3]),
        gap.read("read the missing entry", 2, rc=NO_SUCH_ENTRY),
        gap.read("read -1 with a gap", -1, expect=3),
    ]

    # --- pipelining: many requests outstanding on the connection at once -------------------
    sizes = [(i * 397) % 3000 for i in range(PIPELINED)]
    steps += [
        pipe.add(f"pipelined add {i}", i, bytes([i % 251]) * size, pipelined=i < PIPELINED - 1)
        for i, size in enumerate(sizes)
    ]
    steps += [
        pipe.read(f"pipelined read {i}", i, pipelined=True) for i in reversed(range(PIPELINED))
    ]
    steps += [
        pipe.read("pipelined read -1", -1, expect=PIPELINED - 1, pipelined=True),
        pipe.read("pipelined read past the end", PIPELINED, rc=NO_SUCH_ENTRY, pipelined=True),
        pipe.batch_read("batch of pipelined adds", 0, 0, MAX_SIZE, expect=range(PIPELINED)),
    ]

    # --- unknown ledger -------------------------------------------------------------------
    steps += [
        unknown.read("read, unknown ledger", 0, rc=NO_SUCH_LEDGER),
        unknown.read("read -1, unknown ledger", -1, rc=NO_SUCH_LEDGER),
        unknown.batch_read("batch, unknown ledger", 0, 10, MAX_SIZE, rc=NO_SUCH_LEDGER),
    ]

    # --- master key checks ----------------------------------------------------------------
    steps += [
        wrong_key.add("add with the right key", 0, b"mine"),
        wrong_key.add("add with a wrong key", 1, b"theirs", key=WRONG_KEY, rc=UNAUTHORIZED),
        wrong_key.read("the refused entry is absent", 1, rc=NO_SUCH_ENTRY),
        wrong_key.read(
            "fencing read with a wrong key",
            -1,
            flags=FLAG_DO_FENCING,
            key=WRONG_KEY,
            rc=UNAUTHORIZED,
        ),
        wrong_key.add("not fenced by the refused fencing read", 1, b"mine too"),
    ]

    # --- fencing --------------------------------------------------------------------------
    steps += [
        main.read("fencing read of -1", -1, flags=FLAG_DO_FENCING, key=key, expect=4),
        main.add("normal add to the fenced ledger", 5, b"late", rc=FENCED),
        main.read("the fenced-off entry is absent", 5, rc=NO_SUCH_ENTRY),
        main.add("recovery add to the fenced ledger", 5, b"recovered", flags=FLAG_RECOVERY_ADD),
        main.add(
            "recovery add, high priority (as ledger recovery)",
            6,
            b"recovered too",
            flags=FLAG_RECOVERY_ADD | FLAG_HIGH_PRIORITY,
        ),
        main.read("read a recovery-added entry", 5),
        main.read("read -1 after recovery adds", -1, expect=6),
        main.read("fencing again is fine", -1, flags=FLAG_DO_FENCING, key=key, expect=6),
        main.add("still fenced", 7, b"late", rc=FENCED),
        main.batch_read("batch after fencing", 4, 10, MAX_SIZE, expect=[4, 5, 6]),
    ]
    steps += [fence_batch.add(f"add entry {i}", i, b"fb-%d" % i) for i in (0, 1)]
    steps += [
        fence_batch.batch_read(
            "fencing batch read", 0, 10, MAX_SIZE, flags=FLAG_DO_FENCING, key=key, expect=[0, 1]
        ),
        fence_batch.add("normal add after a fencing batch read", 2, b"late", rc=FENCED),
        fence_batch.add("recovery add after it", 2, b"ok", flags=FLAG_RECOVERY_ADD),
    ]
    steps += [
        fence_empty.read(
            "fencing read of an unknown ledger",
            -1,
            flags=FLAG_DO_FENCING,
            key=key,
            rc=NO_SUCH_ENTRY,
        ),
        fence_empty.add("it is fenced now", 0, b"late", rc=FENCED),
        fence_empty.add(
            "recovery add to it", 0, b"ok", flags=FLAG_RECOVERY_ADD | FLAG_HIGH_PRIORITY
        ),
        fence_empty.read("read -1 of it", -1, expect=0),
    ]
    return steps


def check(steps: Sequence[Step], results: Sequence[dict[str, Any]]) -> list[str]:
    """Every way ``results`` differs from the steps' expectations, one line each."""
    problems = []
    if len(results) != len(steps):
        problems.append(f"{len(results)} results for {len(steps)} operations")
    for index, (step, result) in enumerate(zip(steps, results, strict=False)):
        echo = {k: step.op[k] for k in ("op", "ledger", "entry", "start") if k in step.op}
        got_echo = {k: result.get(k) for k in echo}
        got = {k: v for k, v in result.items() if k not in ("op", "ledger", "entry", "start")}
        if got_echo != echo or got != step.expected():
            problems.append(
                f"step {index} ({step.why}): {describe(step.op)}: "
                f"expected {shorten(step.expected())}, got {shorten(result)}"
            )
    return problems


def compare(
    name_a: str,
    a: Sequence[dict[str, Any]],
    name_b: str,
    b: Sequence[dict[str, Any]],
    steps: Sequence[Step],
) -> list[str]:
    """Every operation whose results differ between two runs of the same script."""
    problems = []
    if len(a) != len(b):
        problems.append(f"{name_a} gave {len(a)} results, {name_b} {len(b)}")
    for index, (step, ra, rb) in enumerate(zip(steps, a, b, strict=False)):
        if ra != rb:
            problems.append(
                f"step {index} ({step.why}): {describe(step.op)}: "
                f"{name_a} {shorten(ra)} vs {name_b} {shorten(rb)}"
            )
    return problems


def describe(op: dict[str, Any]) -> str:
    skip = {"payload_hex", "password_hex", "digest", "master_key_hex"}
    text = " ".join(f"{k}={v}" for k, v in op.items() if k not in skip)
    if "master_key_hex" in op:
        text += " key=" + op["master_key_hex"][:8] + "..."
    return text


def shorten(result: dict[str, Any]) -> str:
    """A result with long hex strings abbreviated (length and head)."""

    def short(value: str) -> str:
        return value if len(value) <= 24 else f"{value[:16]}...({len(value) // 2} B)"

    parts = []
    for key, value in result.items():
        if key == "entry_hex":
            value = short(value)
        elif key == "entries_hex":
            value = [short(v) for v in value]
        parts.append(f"{key}={value}")
    return "{" + ", ".join(parts) + "}"


def run_with_pybkx_client(
    client: Any, bookie: str, steps: Sequence[Step], batch_client: Any = None
) -> list[dict[str, Any]]:
    """Run the script with ``pybkx._core.BookieClient``, giving results in the driver's format.
    Batch reads go through ``batch_client`` when given (a V2 client beside a V3 one: batch
    reads exist only in V2, on a connection of their own).

    Entries are packaged with ``pybkx._core.DigestManager`` and keys derived with
    ``pybkx._core.master_key``; errors must be ``pybkx.errors`` classes (their code is the rc).
    """
    from pybkx._core import DigestManager
    from pybkx._core import master_key as pybkx_master_key

    results: list[dict[str, Any]] = []
    pending: list[tuple[dict[str, Any], Any]] = []  # (result so far, future), in script order
    for step in steps:
        op = step.op
        result: dict[str, Any] = {"op": op["op"], "ledger": op["ledger"]}
        key = bytes.fromhex(op["master_key_hex"]) if "master_key_hex" in op else None
        if op["op"] == "add":
            result["entry"] = op["entry"]
            password = bytes.fromhex(op["password_hex"])
            entry = DigestManager(op["ledger"], password, op["digest"]).package(
                op["entry"], op["lac"], op["length"], bytes.fromhex(op["payload_hex"])
            )
            future = client.add(
                bookie,
                op["ledger"],
                op["entry"],
                pybkx_master_key(password) if key is None else key,
                entry,
                flags=op["flags"],
            )
        elif op["op"] == "read":
            result["entry"] = op["entry"]
            future = client.read(
                bookie, op["ledger"], op["entry"], flags=op["flags"], master_key=key
            )
        else:
            result["start"] = op["start"]
            future = (batch_client or client).batch_read(
                bookie,
                op["ledger"],
                op["start"],
                op["max_count"],
                op["max_size"],
                flags=op["flags"],
                master_key=key,
            )
        pending.append((result, future))
        if not op.get("async"):
            results += [_outcome(result, future) for result, future in pending]
            pending.clear()
    results += [_outcome(result, future) for result, future in pending]
    return results


def _outcome(result: dict[str, Any], future: Any) -> dict[str, Any]:
    """Complete ``result`` from the future (``rc`` from the exception's code)."""
    try:
        value = future.result(timeout=30)
    except errors.BKException as exc:
        result["rc"] = int(exc.code)
        if type(exc) is not errors.exception_class(exc.code):
            result["exception"] = type(exc).__name__  # makes the step fail visibly
        return result
    result["rc"] = int(OK)
    if result["op"] == "read":
        result["entry_hex"] = bytes(value).hex()
    elif result["op"] == "batch_read":
        result["entries_hex"] = [bytes(v).hex() for v in value]
    elif value is not None:
        result["value"] = repr(value)  # an add returns None
    return result
