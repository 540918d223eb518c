"""The options of the ``pybkx`` Spark source, parsed and checked once on the driver: which
cluster, which ledgers, how big a partition is, and how written ledgers are made. Pure values;
it never talks to a cluster."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pybkx.client import MAX_READ_ENTRIES

__all__ = ["SourceOptions", "parse_entries", "parse_ledgers"]

#: Entries one partition reads at most (a large ledger is split into ranges of this many). A
#: task costs Spark's Python data source a worker round trip and a plan entry; at a million
#: rows a task that cost is spread thin, and a ten-million-entry ledger still gets 10 tasks.
DEFAULT_ENTRIES_PER_PARTITION = 1_000_000
#: Entries one Arrow record batch holds at most (one read of the client).
DEFAULT_ENTRIES_PER_BATCH = 10_000
#: Record batches a task reads ahead of the one Spark is consuming.
DEFAULT_READ_AHEAD = 2
#: Rows a writing task appends per call.
WRITE_CHUNK = 1000
#: The custom-metadata key that names the job which wrote a ledger.
NAME_KEY = "pybkx.spark.name"

_KNOWN = {
    "metadataserviceuri",
    "ledgers",
    "entries",
    "password",
    "entriesperpartition",
    "entriesperbatch",
    "readahead",
    "recovery",
    "name",
    "nameprefix",
    "ensemblesize",
    "writequorumsize",
    "ackquorumsize",
    "digesttype",
    "zktimeout",
    "longpolltimeoutms",
}

#: How long a stream's latestOffset waits for a new entry when none has come (milliseconds).
DEFAULT_LONG_POLL_TIMEOUT_MS = 1000


def parse_ledgers(spec: str) -> list[int]:
    """``"12,13,20-40"`` -> ids, ascending and unique. Raises ValueError naming the bad part."""
    ids: set[int] = set()
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            continue
        first, sep, last = part.partition("-")
        try:
            lo = int(first)
            hi = int(last) if sep else lo
        except ValueError:
            raise ValueError(f"option 'ledgers': {part!r} is not an id or a range a-b") from None
        if lo < 0 or hi < lo:
            raise ValueError(f"option 'ledgers': {part!r} is not a range of ids >= 0")
        if hi - lo > 10_000_000:
            raise ValueError(f"option 'ledgers': {part!r} names more than 10 million ledgers")
        ids.update(range(lo, hi + 1))
    if not ids:
        raise ValueError("option 'ledgers' names no ledger")
    return sorted(ids)


#: The last entry id a range without an end reaches.
LAST_ENTRY_ID = 2**63 - 1


def parse_entries(spec: str) -> tuple[int, int]:
    """``"1000-1999"``, ``"1000-"`` (to the end) or ``"7"`` -> (first, last) entry ids,
    inclusive. Raises ValueError naming the option."""
    first, sep, last = spec.strip().partition("-")
    try:
        lo = int(first)
        hi = (int(last) if last.strip() else LAST_ENTRY_ID) if sep else lo
    except ValueError:
        raise ValueError(
            f"option 'entries': {spec!r} is not an entry id or a range a-b or a-"
        ) from None
    if lo < 0 or hi < lo:
        raise ValueError(f"option 'entries': {spec!r} is not a range of entry ids >= 0")
    return lo, hi


def _positive(
    options: Mapping[str, str], key: str, default: int, least: int = 1, most: int | None = None
) -> int:
    raw = options.get(key.lower())
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"option {key!r} must be an integer, got {raw!r}") from None
    if value < least:
        raise ValueError(f"option {key!r} must be >= {least}, got {value}")
    if most is not None and value > most:
        raise ValueError(f"option {key!r} must be <= {most}, got {value}")
    return value


@dataclass(frozen=True)
class SourceOptions:
    """What a query asked for. ``uri`` None: the client's default cluster."""

    uri: str | None
    ledgers: tuple[int, ...] | None
    password: bytes
    entries_per_partition: int
    entries_per_batch: int
    recovery: bool
    name: str | None
    ensemble_size: int
    write_quorum_size: int
    ack_quorum_size: int
    digest_type: str
    zk_timeout_ms: int
    name_prefix: str | None = None
    entries: tuple[int, int] = (0, LAST_ENTRY_ID)
    long_poll_timeout_ms: int = DEFAULT_LONG_POLL_TIMEOUT_MS
    read_ahead: int = DEFAULT_READ_AHEAD

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SourceOptions:
        """From Spark's (case-insensitive) options. Raises ValueError for an unknown option
        (naming the known ones) or a bad value."""
        given = {k.lower(): str(v) for k, v in options.items() if k.lower() != "path"}
        unknown = sorted(set(given) - _KNOWN)
        if unknown:
            raise ValueError(
                f"unknown option(s) {unknown} for format 'pybkx'; known: "
                "metadataServiceUri, ledgers, entries, password, entriesPerPartition, "
                "entriesPerBatch, readAhead, recovery, name, namePrefix, ensembleSize, "
                "writeQuorumSize, ackQuorumSize, digestType, zkTimeout, longPollTimeoutMs"
            )
        recovery = given.get("recovery", "false").lower()
        if recovery not in ("true", "false"):
            raise ValueError(f"option 'recovery' must be true or false, got {recovery!r}")
        spec = given.get("ledgers")
        entries = given.get("entries")
        e = _positive(given, "ensembleSize", 3)
        qw = _positive(given, "writeQuorumSize", min(2, e))
        qa = _positive(given, "ackQuorumSize", min(2, qw))
        if not e >= qw >= qa:
            raise ValueError(f"quorums must satisfy E >= Qw >= Qa, got {e}/{qw}/{qa}")
        return cls(
            uri=given.get("metadataserviceuri"),
            ledgers=tuple(parse_ledgers(spec)) if spec is not None else None,
            password=given.get("password", "").encode(),
            entries_per_partition=_positive(
                given, "entriesPerPartition", DEFAULT_ENTRIES_PER_PARTITION
            ),
            entries_per_batch=_positive(
                given, "entriesPerBatch", DEFAULT_ENTRIES_PER_BATCH, most=MAX_READ_ENTRIES
            ),
            recovery=recovery == "true",
            name=given.get("name"),
            ensemble_size=e,
            write_quorum_size=qw,
            ack_quorum_size=qa,
            digest_type=given.get("digesttype", "CRC32C"),
            zk_timeout_ms=_positive(given, "zkTimeout", 10_000),
            name_prefix=given.get("nameprefix"),
            entries=parse_entries(entries) if entries is not None else (0, LAST_ENTRY_ID),
            long_poll_timeout_ms=_positive(
                given, "longPollTimeoutMs", DEFAULT_LONG_POLL_TIMEOUT_MS, least=0
            ),
            read_ahead=_positive(given, "readAhead", DEFAULT_READ_AHEAD, least=0),
        )
