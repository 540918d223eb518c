"""BookKeeper's znode layout under a ledgers root: node names, ledger paths (hierarchical and
long hierarchical), registration paths, and ``metadataServiceUri`` parsing. Pure functions."""

from __future__ import annotations

import re
from typing import Final

from pybkx import errors
from pybkx.meta import serde

__all__ = [
    "ledger_id_from_path",
    "ledger_path",
    "parse_uri",
    "registration_path",
    "zk_error",
]

# Names under the ledgers root, as BookKeeper spells them.
AVAILABLE: Final = "available"
READONLY: Final = "readonly"
COOKIES: Final = "cookies"
LAYOUT: Final = "LAYOUT"
INSTANCEID: Final = "INSTANCEID"
UNDER_REPLICATION: Final = "underreplication"
IDGEN: Final = "idgen"
IDGEN_LONG: Final = "idgen-long"
ID_PREFIX: Final = "ID-"
HOB_PREFIX: Final = "HOB-"
# pybkx's own coordination nodes (BookKeeper's ledger scans only look at 2-3 digit children).
LOCKS: Final = "locks"
ELECTIONS: Final = "elections"

SHORT_ID_LIMIT: Final = 2**31 - 1
"""Ids from ``idgen`` must stay below this; the hierarchical layout's long paths start here."""
MAX_LEDGER_ID: Final = 2**63 - 1
DEFAULT_ZK_TIMEOUT_MS: Final = 10_000
KEPT_HOB_DIRS: Final = 3
LEDGER_PARENT_RE = re.compile(r"[0-9]{2,3}")
LEVEL_RE = re.compile(r"[0-9]{4}")
LEAF_RE = re.compile(r"L[0-9]{4}")
SCHEMES: Final = {
    "zk": serde.HIERARCHICAL_FACTORY,
    "zk+hierarchical": serde.HIERARCHICAL_FACTORY,
    "zk+longhierarchical": serde.LONG_HIERARCHICAL_FACTORY,
    "zk+null": None,  # whatever the cluster's LAYOUT says
}
# Pre-V2 LAYOUT records name the manager type instead of its factory class.
LEGACY_LAYOUT_TYPES: Final = {"hierarchical": serde.HIERARCHICAL_FACTORY}


def ledger_path(root: str, ledger_id: int, long_layout: bool = False) -> str:
    """The znode of a ledger under ``root``: hierarchical 2-4-4 (``/00/0000/L0001``) below
    2147483647, else the long 3-4-4-4-4 path; ``long_layout`` always takes the long path.
    Raises IncorrectParameterException for ids outside 0..2^63-1."""
    if not 0 <= ledger_id <= MAX_LEDGER_ID:
        raise errors.IncorrectParameterException(f"ledger id {ledger_id} out of 0..2^63-1")
    if not long_layout and ledger_id < SHORT_ID_LIMIT:
        s = f"{ledger_id:010d}"
        return f"{root}/{s[0:2]}/{s[2:6]}/L{s[6:10]}"
    s = f"{ledger_id:019d}"
    return f"{root}/{s[0:3]}/{s[3:7]}/{s[7:11]}/{s[11:15]}/L{s[15:19]}"


def ledger_id_from_path(root: str, path: str) -> int:
    """The ledger id of a :func:`ledger_path` (the digits of its components, in order).
    Raises ValueError for a path that is not a ledger's."""
    if not path.startswith(root + "/"):
        raise ValueError(f"{path!r} is not under {root!r}")
    parts = path[len(root) + 1 :].split("/")
    shape_ok = (len(parts) == 3 and len(parts[0]) == 2) or (len(parts) == 5 and len(parts[0]) == 3)
    if not (
        shape_ok
        and LEDGER_PARENT_RE.fullmatch(parts[0])
        and all(LEVEL_RE.fullmatch(p) for p in parts[1:-1])
        and LEAF_RE.fullmatch(parts[-1])
    ):
        raise ValueError(f"{path!r} is not a hierarchical ledger path")
    return int("".join(parts[:-1]) + parts[-1][1:])


def parse_uri(uri: str) -> tuple[str, str, str]:
    """(scheme, kazoo connect string, ledgers root) of ``zk+<layout>://h:p[;h:p]/root``."""
    scheme, sep, rest = uri.partition("://")
    scheme = scheme.lower()
    if not sep or scheme not in SCHEMES:
        raise ValueError(
            f"unsupported ZooKeeper metadataServiceUri {uri!r}: use zk+hierarchical://, "
            "zk+longhierarchical:// or zk+null://"
        )
    hosts, _, path = rest.partition("/")
    root = "/" + path.strip("/")
    if not hosts or root == "/":
        raise ValueError(f"metadataServiceUri {uri!r} needs servers and a ledgers root path")
    return scheme, hosts.replace(";", ","), root


def zk_error(exc: BaseException, what: str) -> errors.ZKException:
    detail = str(exc)
    return errors.ZKException(
        f"ZooKeeper {what} failed: {type(exc).__name__}" + (f" ({detail})" if detail else "")
    )


def registration_path(root: str, bookie_id: str, read_only: bool) -> str:
    """``<root>/available[/readonly]/<bookie id>``, where a bookie registers."""
    if read_only:
        return f"{root}/{AVAILABLE}/{READONLY}/{bookie_id}"
    return f"{root}/{AVAILABLE}/{bookie_id}"
